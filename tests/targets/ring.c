/*
 * ring SECONDS REPORT [THREADS [BLOCKS [SIZE [RATE]]]]
 *
 * A heap that is always the same size, churned as fast as the allocator
 * goes: each of THREADS (default 1) keeps a ring of BLOCKS/THREADS blocks of
 * SIZE bytes (defaults 1000 and 65536: 62.5 MiB live), and in a loop frees
 * the oldest and mallocs a new one, writing its first and last byte. With
 * THREADS 1 the main thread does it and no other thread is ever created:
 * glibc's single-thread paths stay on unless something else turns them off.
 * RATE (allocations a second, all threads together; 0, the default: as
 * fast as they go) paces them, 256 allocations at a time.
 *
 * Truth for cprof heap: every 256 allocations a thread reloads its GOT slot
 * of malloc and counts those 256 as made inside the hooked window when the
 * slot differs from its value at start. On SIGUSR2 it writes to REPORT
 * (beside, then renamed):
 *   ops N          allocations so far
 *   cpu_ns T       CPU time of the whole process so far
 *   hooked_ops H   allocations made while malloc was hooked
 *   live_objects B and live_bytes Z (always BLOCKS and BLOCKS * SIZE)
 *   single S       glibc's __libc_single_threaded now
 * Prints "ready"; exits after SECONDS.
 */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/single_threaded.h>
#include <time.h>
#include <unistd.h>

#define CHECK_EVERY 256

#define GOT_SLOT(fn)                                                                   \
	({                                                                             \
		void *v_;                                                              \
		__asm__ volatile("movq " #fn "@GOTPCREL(%%rip), %0" : "=r"(v_));       \
		v_;                                                                    \
	})

struct worker {
	uint64_t ops, hooked_ops;
	unsigned blocks;
	pthread_t thread;
} __attribute__((aligned(64)));

static struct worker *workers;
static unsigned nr_workers, total_blocks;
static size_t block_size;
static uint64_t pace_ns; /* per 256 allocations of one thread; 0: none */
static void *slot_at_start;
static volatile sig_atomic_t report_now;
static const char *report_path;

static void on_usr2(int sig)
{
	(void)sig;
	report_now = 1;
}

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void write_report(void)
{
	char tmp[4096];
	uint64_t ops = 0, hooked = 0;
	FILE *f;

	for (unsigned i = 0; i < nr_workers; i++) {
		ops += __atomic_load_n(&workers[i].ops, __ATOMIC_RELAXED);
		hooked += __atomic_load_n(&workers[i].hooked_ops, __ATOMIC_RELAXED);
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", report_path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "ops %llu\ncpu_ns %llu\nhooked_ops %llu\nlive_objects %u\nlive_bytes %llu\n"
		   "single %d\n",
		(unsigned long long)ops, (unsigned long long)cpu_ns(), (unsigned long long)hooked,
		total_blocks, (unsigned long long)total_blocks * block_size,
		(int)__libc_single_threaded);
	fclose(f);
	rename(tmp, report_path);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pace(uint64_t *next)
{
	uint64_t t = now_ns();

	*next += pace_ns;
	if (*next > t) {
		struct timespec ts = { (time_t)((*next - t) / 1000000000ull),
				       (long)((*next - t) % 1000000000ull) };

		nanosleep(&ts, NULL);
	} else {
		*next = t;
	}
}

static __attribute__((noinline)) void *ring_alloc(size_t size)
{
	char *p = malloc(size);

	if (p) {
		p[0] = 1;
		p[size - 1] = 1;
	}
	return p;
}

/* Runs until the alarm; the main thread (@reporter) also writes the reports. */
static void churn(struct worker *w, bool reporter)
{
	void **ring = calloc(w->blocks, sizeof(*ring));
	uint64_t next = now_ns();
	unsigned at = 0;

	if (!ring)
		abort();
	for (unsigned i = 0; i < w->blocks; i++)
		ring[i] = ring_alloc(block_size);
	for (;;) {
		for (int k = 0; k < CHECK_EVERY; k++) {
			free(ring[at]);
			ring[at] = ring_alloc(block_size);
			if (++at == w->blocks)
				at = 0;
		}
		__atomic_store_n(&w->ops, w->ops + CHECK_EVERY, __ATOMIC_RELAXED);
		if (GOT_SLOT(malloc) != slot_at_start)
			__atomic_store_n(&w->hooked_ops, w->hooked_ops + CHECK_EVERY,
					 __ATOMIC_RELAXED);
		if (reporter && report_now) {
			report_now = 0;
			write_report();
		}
		if (pace_ns)
			pace(&next);
	}
}

static void *worker_main(void *arg)
{
	churn(arg, false);
	return NULL;
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_usr2, .sa_flags = SA_RESTART };
	int seconds;

	if (argc < 3) {
		fprintf(stderr, "usage: ring SECONDS REPORT [THREADS [BLOCKS [SIZE [RATE]]]]\n");
		return 2;
	}
	seconds = atoi(argv[1]);
	report_path = argv[2];
	nr_workers = argc > 3 ? (unsigned)atoi(argv[3]) : 1;
	total_blocks = argc > 4 ? (unsigned)atoi(argv[4]) : 1000;
	block_size = argc > 5 ? (size_t)atol(argv[5]) : 65536;
	if (argc > 6 && atol(argv[6]) > 0)
		pace_ns = 1000000000ull * CHECK_EVERY * nr_workers / (uint64_t)atol(argv[6]);
	if (nr_workers < 1 || total_blocks < nr_workers || block_size < 2)
		return 2;
	workers = calloc(nr_workers, sizeof(*workers));
	if (!workers)
		return 1;
	for (unsigned i = 0; i < nr_workers; i++)
		workers[i].blocks = total_blocks / nr_workers + (i < total_blocks % nr_workers);
	slot_at_start = GOT_SLOT(malloc);
	sigaction(SIGUSR2, &sa, NULL);
	signal(SIGALRM, SIG_DFL);
	alarm((unsigned)seconds);
	for (unsigned i = 1; i < nr_workers; i++)
		pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]);
	printf("ready\n");
	fflush(stdout);
	churn(&workers[0], true);
	return 0;
}
