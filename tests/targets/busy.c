/*
 * busy K [SECONDS]: K threads ("busy-0" ...) that burn CPU in work_a, work_b
 * and work_c in the proportions 50/30/20 of each thread's own CPU time.
 *
 * The truth is exact by construction: every thread measures what it spends
 * in each function with CLOCK_THREAD_CPUTIME_ID and always runs the function
 * furthest behind its share (deficit scheduling), so at any moment each
 * function's share of the thread's CPU time is within one segment (< 1 ms)
 * of its target. Segments have random lengths so that a sampler with a fixed
 * period cannot alias with them: each sample is an unbiased draw.
 *
 * The arithmetic is expanded inside each work_* function so that it is the
 * leaf frame, and runs in chunks of ~200 us between clock reads: a read of
 * a thread's clock is a system call, ~0.5 us on a quiet VM of the kind the
 * project runs on and several times that on a loaded one (at 50 us chunks
 * the reads were the leaf of 5-10% of the samples there), so reads stay
 * near 1% of the time.
 *
 * Prints "ready" once every thread runs, exits by itself after SECONDS
 * (default 20). With SECONDS < 0 it never does: for manual use only.
 *
 * busy K SECONDS TRUTHFILE: the same, and a thread "truth" reports the
 * process's CPU clock and each busy-N thread's own, every ~1 ms, into
 * TRUTHFILE (truth-reporter.h; K at most TRUTH_MAX_THREADS): the truth a
 * profile's totals are judged against, read by the target itself. The file
 * is there before "ready"; on exiting by itself busy takes a last record.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "truth-reporter.h"

#define CHUNK_NS 200000ULL
#define SEG_MIN_NS 200000ULL
#define SEG_MAX_NS 800000ULL

static atomic_int started;
static pid_t tids[1024]; /* of each busy-N, set before it counts as started */
static uint64_t iters_per_chunk = 20000;

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The arithmetic, expanded in each caller so that the caller is the leaf. */
#define SPIN(x, n)                                                                                 \
	do {                                                                                       \
		for (uint64_t i_ = 0; i_ < (n); i_++) {                                            \
			(x) = (x)*6364136223846793005ULL + 1442695040888963407ULL;                 \
			__asm__ volatile("" : "+r"(x));                                            \
		}                                                                                  \
	} while (0)

/* Each burns at least @budget ns of thread CPU time; returns what it used. */
__attribute__((noinline)) static uint64_t work_a(uint64_t budget, uint64_t *seed)
{
	uint64_t x = *seed, t0 = thread_cpu_ns(), t;

	do {
		SPIN(x, iters_per_chunk);
		t = thread_cpu_ns();
	} while (t - t0 < budget);
	*seed = x;
	return t - t0;
}

__attribute__((noinline)) static uint64_t work_b(uint64_t budget, uint64_t *seed)
{
	uint64_t x = *seed ^ 0x5bd1e995, t0 = thread_cpu_ns(), t;

	do {
		SPIN(x, iters_per_chunk);
		t = thread_cpu_ns();
	} while (t - t0 < budget);
	*seed = x;
	return t - t0;
}

__attribute__((noinline)) static uint64_t work_c(uint64_t budget, uint64_t *seed)
{
	uint64_t x = *seed ^ 0xc2b2ae35, t0 = thread_cpu_ns(), t;

	do {
		SPIN(x, iters_per_chunk);
		t = thread_cpu_ns();
	} while (t - t0 < budget);
	*seed = x;
	return t - t0;
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void *worker(void *arg)
{
	/* Target shares, in percent, of work_a, work_b, work_c. */
	static const uint64_t share[3] = {50, 30, 20};
	uint64_t spent[3] = {0, 0, 0}, total = 0;
	uint64_t rng = 0x9e3779b97f4a7c15ULL ^ ((uintptr_t)arg * 0x100000001b3ULL);
	uint64_t seed = rng;

	tids[(uintptr_t)arg - 1] = gettid();
	atomic_fetch_add(&started, 1);
	for (;;) {
		int f = 0;
		int64_t best = INT64_MIN;

		for (int i = 0; i < 3; i++) {
			int64_t deficit = (int64_t)(share[i] * total / 100) - (int64_t)spent[i];
			if (deficit > best) {
				best = deficit;
				f = i;
			}
		}
		uint64_t seg = SEG_MIN_NS + xorshift(&rng) % (SEG_MAX_NS - SEG_MIN_NS);
		uint64_t used = f == 0	 ? work_a(seg, &seed)
				: f == 1 ? work_b(seg, &seed)
					 : work_c(seg, &seed);
		spent[f] += used;
		total += used;
	}
	return NULL;
}

/* How many iterations of SPIN take about CHUNK_NS of CPU here. */
static void calibrate(void)
{
	uint64_t x = 1, n = 1 << 16, t0 = thread_cpu_ns(), dt;

	SPIN(x, n);
	dt = thread_cpu_ns() - t0;
	if (dt > 0)
		iters_per_chunk = n * CHUNK_NS / dt;
	if (iters_per_chunk < 100)
		iters_per_chunk = 100;
}

int main(int argc, char **argv)
{
	int k = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 1;
	double seconds = argc > 2 ? strtod(argv[2], NULL) : 20;
	const char *truth_path = argc > 3 ? argv[3] : NULL;
	pthread_t threads[1024];
	pthread_attr_t attr;

	if (k < 1 || k > 1024 || (truth_path && k > TRUTH_MAX_THREADS)) {
		fprintf(stderr, "usage: busy K [SECONDS [TRUTHFILE]]\n");
		return 64;
	}
	calibrate();
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	for (int i = 0; i < k; i++) {
		char name[16];

		if (pthread_create(&threads[i], &attr, worker, (void *)(uintptr_t)(i + 1)) != 0) {
			perror("pthread_create");
			return 1;
		}
		snprintf(name, sizeof(name), "busy-%d", i);
		pthread_setname_np(threads[i], name);
	}
	while (atomic_load(&started) < k) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	if (truth_path) {
		int err = truth_start(truth_path, threads, tids, k);

		if (err < 0) {
			fprintf(stderr, "busy: cannot report the truth to %s: %s\n", truth_path,
				strerror(-err));
			return 1;
		}
	}
	printf("ready\n");
	fflush(stdout);
	if (seconds < 0)
		for (;;)
			pause();
	struct timespec end;
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += (time_t)seconds;
	end.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
	if (end.tv_nsec >= 1000000000L) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000L;
	}
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, NULL) == EINTR)
		;
	truth_finish();
	return 0;
}
