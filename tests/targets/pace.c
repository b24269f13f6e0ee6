/*
 * pace SECONDS REPORT [THREADS [RATE]]
 *
 * THREADS (default 2) threads malloc and free blocks of 16-4096 bytes at
 * RATE allocations per second in all (default 200000), in bursts of 100,
 * and each notes the longest time between two of its allocations beyond
 * the pacing: the largest stall anything caused it. On SIGUSR2 the process
 * writes "max_gap_ns G\nallocs N\n" to REPORT (beside, then renamed).
 * Prints "ready"; exits after SECONDS.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BURST 100

struct worker {
	uint64_t max_gap_ns, allocs;
	pthread_t thread;
} __attribute__((aligned(64)));

static struct worker *workers;
static unsigned nr_workers;
static uint64_t period_ns; /* between two bursts of one thread */
static const char *report_path;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void write_report(void)
{
	uint64_t gap = 0, allocs = 0;
	char tmp[4096];
	FILE *f;

	for (unsigned i = 0; i < nr_workers; i++) {
		uint64_t g = __atomic_load_n(&workers[i].max_gap_ns, __ATOMIC_RELAXED);

		gap = g > gap ? g : gap;
		allocs += __atomic_load_n(&workers[i].allocs, __ATOMIC_RELAXED);
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", report_path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "max_gap_ns %llu\nallocs %llu\n", (unsigned long long)gap,
		(unsigned long long)allocs);
	fclose(f);
	rename(tmp, report_path);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	unsigned seed = (unsigned)(uintptr_t)arg;
	uint64_t next = now_ns(), last = next;

	for (;;) {
		uint64_t t;

		for (int k = 0; k < BURST; k++) {
			char *p = malloc(16 + rand_r(&seed) % 4080);

			if (p)
				p[0] = 1;
			/* Seen: without it, gcc drops the pair as dead. */
			__asm__ volatile("" : : "r"(p) : "memory");
			free(p);
			t = now_ns();
			/* Beyond the pacing: the wait below is ours. */
			if (t - last > w->max_gap_ns)
				__atomic_store_n(&w->max_gap_ns, t - last, __ATOMIC_RELAXED);
			last = t;
		}
		__atomic_store_n(&w->allocs, w->allocs + BURST, __ATOMIC_RELAXED);
		next += period_ns;
		t = now_ns();
		if (next > t) {
			struct timespec ts = { (time_t)((next - t) / 1000000000ull),
					       (long)((next - t) % 1000000000ull) };

			nanosleep(&ts, NULL);
		} else {
			next = t;
		}
		last = now_ns();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	sigset_t usr2;
	unsigned rate;
	int sig;

	if (argc < 3) {
		fprintf(stderr, "usage: pace SECONDS REPORT [THREADS [RATE]]\n");
		return 2;
	}
	report_path = argv[2];
	nr_workers = argc > 3 ? (unsigned)atoi(argv[3]) : 2;
	rate = argc > 4 ? (unsigned)atoi(argv[4]) : 200000;
	if (nr_workers < 1 || rate < nr_workers)
		return 2;
	period_ns = 1000000000ull * BURST * nr_workers / rate;
	workers = calloc(nr_workers, sizeof(*workers));
	if (!workers)
		return 1;
	/* Blocked everywhere: the main thread takes it with sigwait(). */
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &usr2, NULL);
	alarm((unsigned)atoi(argv[1]));
	for (unsigned i = 0; i < nr_workers; i++)
		pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]);
	printf("ready\n");
	fflush(stdout);
	while (sigwait(&usr2, &sig) == 0)
		write_report();
	return 0;
}
