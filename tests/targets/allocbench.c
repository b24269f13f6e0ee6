/*
 * allocbench SECONDS REPORT [THREADS [TOUCH [POOL]]]
 *
 * The malloc-heavy program of scripts/bench-heap: THREADS (default 1)
 * threads (0: the main thread alone, no thread ever created, so glibc stays
 * on its single-thread paths) malloc and free blocks of 16-1024 bytes (a pool of POOL live
 * blocks each, a power of two, default 256: 130 KiB, so a sampled block rarely outlives a
 * few hundred calls; 131072 keeps 66 MiB live, ~130 sampled blocks at the
 * default rate, as a server's heap does), as fast as they can. With TOUCH 0 (default) only the first
 * byte of a block is written: the allocator is all the work, the worst case
 * for a hook. With TOUCH 1 every byte is written once, as a program that
 * uses what it allocates does. On
 * SIGUSR2 it writes the operations done so far and the CPU time the whole
 * process has used ("ops N\ncpu_ns T\n") to REPORT (beside, then renamed):
 * the bench reads it twice to get operations per CPU second, a figure that
 * other programs competing for the cores change far less than a rate per
 * wall second. Prints
 * "ready"; exits after SECONDS.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_ulong ops;
static int touch;
static unsigned pool_size = 256;
static volatile sig_atomic_t report_now;
static time_t end;

static void write_report(void);

static void *worker(void *arg)
{
	/* The default pool lives in this frame, as in every figure measured
	 * before POOL existed: 2 KiB of stack that each sample copies. */
	void *frame_pool[256] = { 0 };
	void **pool = pool_size == 256 ? frame_pool : calloc(pool_size, sizeof(*pool));
	uint64_t x = 0x9e3779b97f4a7c15ull ^ (uintptr_t)arg;

	if (!pool)
		return NULL;

	while (time(NULL) < end) {
		for (int i = 0; i < 4096; i++) {
			unsigned slot;
			size_t n;

			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			slot = (unsigned)(x & (pool_size - 1));
			n = 16 + (size_t)((x >> 8) & 1007);
			free(pool[slot]);
			pool[slot] = malloc(n);
			if (pool[slot] && touch)
				memset(pool[slot], i, n);
			else if (pool[slot])
				*(volatile char *)pool[slot] = (char)i;
		}
		atomic_fetch_add(&ops, 4096);
		if (!arg && report_now) {
			report_now = 0;
			write_report();
		}
	}
	for (unsigned i = 0; i < pool_size; i++)
		free(pool[i]);
	if (pool != frame_pool)
		free(pool);
	return NULL;
}

static void on_usr2(int sig)
{
	(void)sig;
	report_now = 1;
}

static const char *report_path;

static void write_report(void)
{
	struct timespec cpu;
	char tmp[4200];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", report_path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
	fprintf(f, "ops %lu\ncpu_ns %lld\n", atomic_load(&ops),
		(long long)cpu.tv_sec * 1000000000LL + cpu.tv_nsec);
	fclose(f);
	rename(tmp, report_path);
}

int main(int argc, char **argv)
{
	int nthreads = argc > 3 ? atoi(argv[3]) : 1;

	touch = argc > 4 ? atoi(argv[4]) : 0;
	if (argc > 5)
		pool_size = (unsigned)atoi(argv[5]);
	pthread_t th[64];

	if (argc < 3 || nthreads < 0 || nthreads > 64 || pool_size < 1 || pool_size > (1u << 24) ||
	    (pool_size & (pool_size - 1))) {
		fprintf(stderr, "usage: allocbench SECONDS REPORT [THREADS [TOUCH [POOL]]]\n");
		return 2;
	}
	report_path = argv[2];
	alarm((unsigned)atoi(argv[1]) + 10);
	end = time(NULL) + atoi(argv[1]);
	signal(SIGUSR2, on_usr2);
	for (int i = 0; i < nthreads; i++)
		pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1));
	printf("ready\n");
	fflush(stdout);
	if (nthreads == 0) {
		/* Single-threaded: the main thread allocates and reports. */
		worker(NULL);
		return 0;
	}
	while (time(NULL) < end) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		nanosleep(&ts, NULL);
		if (report_now) {
			report_now = 0;
			write_report();
		}
	}
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	return 0;
}
