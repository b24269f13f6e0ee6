/*
 * workload THREADS SECONDS: identical units of work, for measuring what a
 * profiler costs the target in CPU per unit (scripts/bench-cpu).
 *
 * THREADS threads each do units (~0.3 ms of CPU each, through a call chain
 * ten frames deep, so that unwinding has real stacks to walk) without end,
 * and read their own CPU clock (CLOCK_THREAD_CPUTIME_ID) after every unit.
 * What a profiler costs the target is in that clock: this kernel charges
 * the interrupt that takes a sample, and the copy of the stack it makes, to
 * the thread it interrupts (without CONFIG_IRQ_TIME_ACCOUNTING), and the
 * caches it disturbs show as slower units. Time spent waiting for a CPU is
 * not in it, so other tenants of a shared machine move it far less than
 * wall time.
 *
 * Prints "ready" once the threads run. Each line "s" on stdin is answered
 * with "UNITS CPU_NS": the units done so far and the CPU time they took,
 * summed over the threads, each counted to the end of its last whole unit
 * (so the two always describe the same work). Exits after SECONDS, or when
 * stdin ends.
 */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

/* A worker's count at the end of its last unit, written by the worker under
 * a sequence number (odd while it writes) and read by main. */
struct tally {
	_Atomic uint64_t seq;
	_Atomic uint64_t units;
	_Atomic uint64_t cpu_ns;
	char pad[64 - 3 * sizeof(uint64_t)];
};

static struct tally *tallies;

__attribute__((noinline)) static uint64_t leaf(uint64_t x)
{
	for (int i = 0; i < 4000; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

__attribute__((noinline)) static uint64_t chain(int depth, uint64_t x)
{
	uint64_t r = depth == 0 ? leaf(x) : chain(depth - 1, x ^ (uint64_t)depth);

	__asm__ volatile("" : "+r"(r));
	return r;
}

__attribute__((noinline)) static uint64_t unit(uint64_t x)
{
	char a[256], b[256];

	for (int i = 0; i < 64; i++) {
		x = chain(8, x);
		memset(a, (int)(x & 0xff), sizeof(a));
		memcpy(b, a, sizeof(b));
		x += (uint64_t)b[x % sizeof(b)];
	}
	return x;
}

static uint64_t clock_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void *worker(void *arg)
{
	struct tally *t = arg;
	uint64_t x = (uintptr_t)(t - tallies) + 1, n = 0, seq = 0;

	for (;;) {
		x = unit(x);
		sink = x;
		n++;
		uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);

		atomic_store_explicit(&t->seq, ++seq, memory_order_relaxed);
		atomic_thread_fence(memory_order_release);
		atomic_store_explicit(&t->units, n, memory_order_relaxed);
		atomic_store_explicit(&t->cpu_ns, cpu, memory_order_relaxed);
		atomic_store_explicit(&t->seq, ++seq, memory_order_release);
	}
	return NULL;
}

static void read_tally(struct tally *t, uint64_t *ret_units, uint64_t *ret_cpu_ns)
{
	uint64_t s0, s1, units, cpu;

	do {
		s0 = atomic_load_explicit(&t->seq, memory_order_acquire);
		units = atomic_load_explicit(&t->units, memory_order_relaxed);
		cpu = atomic_load_explicit(&t->cpu_ns, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		s1 = atomic_load_explicit(&t->seq, memory_order_relaxed);
	} while (s0 != s1 || (s0 & 1));
	*ret_units = units;
	*ret_cpu_ns = cpu;
}

int main(int argc, char **argv)
{
	int nthreads = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 0;
	long seconds = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
	char line[64];

	if (argc != 3 || nthreads < 1 || nthreads > 256 || seconds < 1) {
		fprintf(stderr, "usage: workload THREADS SECONDS\n");
		return 64;
	}
	tallies = aligned_alloc(64, (size_t)nthreads * sizeof(*tallies));
	if (!tallies)
		return 1;
	memset(tallies, 0, (size_t)nthreads * sizeof(*tallies));
	for (int i = 0; i < nthreads; i++) {
		pthread_t t;
		char name[16];

		if (pthread_create(&t, NULL, worker, &tallies[i]) != 0)
			return 1;
		snprintf(name, sizeof(name), "work-%d", i);
		pthread_setname_np(t, name);
	}
	printf("ready\n");
	fflush(stdout);

	uint64_t end = clock_ns(CLOCK_MONOTONIC) + (uint64_t)seconds * 1000000000ULL;
	for (;;) {
		uint64_t now = clock_ns(CLOCK_MONOTONIC);
		struct pollfd p = { .fd = 0, .events = POLLIN };

		if (now >= end)
			break;
		int left_ms = (int)((end - now) / 1000000 + 1);
		if (poll(&p, 1, left_ms) <= 0)
			continue;
		/* stdin is read a line at a time with read(2), not stdio, so
		 * that poll() sees every line that is not yet answered. */
		size_t len = 0;
		while (len < sizeof(line) - 1) {
			if (read(0, &line[len], 1) != 1)
				return 0; /* stdin ended: the bench is gone */
			if (line[len++] == '\n')
				break;
		}
		if (line[0] != 's')
			continue;
		uint64_t units = 0, cpu = 0;
		for (int i = 0; i < nthreads; i++) {
			uint64_t u, c;

			read_tally(&tallies[i], &u, &c);
			units += u;
			cpu += c;
		}
		printf("%llu %llu\n", (unsigned long long)units, (unsigned long long)cpu);
		fflush(stdout);
	}
	return 0;
}
