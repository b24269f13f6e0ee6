/*
 * workload THREADS UNITS [DELAY_MS]: a fixed amount of work for measuring
 * what a profiler costs the target (scripts/bench-cpu). Prints "ready", waits
 * DELAY_MS (default 1000, time for a profiler to attach), then THREADS
 * threads each do UNITS units of identical work (~1 ms of CPU each, through
 * a call chain ten frames deep, so unwinding has real stacks to walk), and
 * the program prints "wall_ns N" (first thread start to last thread end),
 * "cpu_ns N" (its own process CPU time over the same span) and
 * "proc_cpu_ns N" (all the CPU time it used since it started), then exits.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long units;
static volatile uint64_t sink;

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

static void *worker(void *arg)
{
	uint64_t x = (uintptr_t)arg;

	for (long i = 0; i < units; i++)
		x = unit(x);
	sink += x;
	return NULL;
}

static uint64_t clock_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	int nthreads = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 1;
	long delay_ms = argc > 3 ? strtol(argv[3], NULL, 10) : 1000;
	pthread_t *t;

	units = argc > 2 ? strtol(argv[2], NULL, 10) : 1000;
	if (nthreads < 1 || nthreads > 256 || units < 1 || delay_ms < 0) {
		fprintf(stderr, "usage: workload THREADS UNITS [DELAY_MS]\n");
		return 64;
	}
	t = calloc((size_t)nthreads, sizeof(*t));
	if (!t)
		return 1;
	printf("ready\n");
	fflush(stdout);
	struct timespec d = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
	while (nanosleep(&d, &d) == -1 && errno == EINTR)
		;

	uint64_t w0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	for (int i = 0; i < nthreads; i++) {
		char name[16];

		if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1)) != 0)
			return 1;
		snprintf(name, sizeof(name), "work-%d", i);
		pthread_setname_np(t[i], name);
	}
	for (int i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	uint64_t w1 = clock_ns(CLOCK_MONOTONIC), c1 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	printf("wall_ns %llu\ncpu_ns %llu\nproc_cpu_ns %llu\n", (unsigned long long)(w1 - w0),
	       (unsigned long long)(c1 - c0), (unsigned long long)c1);
	fflush(stdout);
	free(t);
	return 0;
}
