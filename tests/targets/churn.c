/*
 * churn [SECONDS] [PERIOD_US] [BURN_US]: the main thread starts a thread
 * every PERIOD_US (default 4000: 250 threads/s); each burns BURN_US (default
 * 2000) of its own CPU time in churn_burn, then exits. About 0.5 core in
 * all, in threads that live ~2 ms: those are what per-thread inherited perf
 * events miss (every new thread restarts its sampling period).
 *
 * The truth is the process CPU clock, which keeps the time of exited
 * threads; the tests read it from outside. The main thread joins its
 * threads as they end (pthread_tryjoin_np at each period) and never has
 * more than 64 not yet joined, so that at most 64 exist at once, however
 * slowly an overloaded machine lets ended threads go (counting them out
 * before their exit let 142 exist). It joins the last ones before it
 * returns.
 *
 * Prints "ready" once the first thread runs, exits by itself after SECONDS
 * (default 20).
 *
 * churn SECONDS PERIOD_US BURN_US TRUTHFILE: the same, and a thread "truth"
 * reports the process CPU clock every ~1 ms into TRUTHFILE (truth-reporter.h,
 * no thread clocks: the churning threads live too short to be named), read
 * by the target itself; there before "ready", with a last record on exit.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "truth-reporter.h"

#define MAX_ALIVE 64

static atomic_int ran;
static uint64_t burn_ns = 2000000;

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static uint64_t churn_burn(uint64_t budget)
{
	uint64_t x = (uintptr_t)&x, t0 = thread_cpu_ns(), t;

	do {
		for (int i = 0; i < 5000; i++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			__asm__ volatile("" : "+r"(x));
		}
		t = thread_cpu_ns();
	} while (t - t0 < budget);
	return x;
}

static void *worker(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "churn");
	churn_burn(burn_ns);
	atomic_fetch_add(&ran, 1);
	return NULL;
}

static void add_ns(struct timespec *ts, uint64_t ns)
{
	ns += (uint64_t)ts->tv_nsec;
	ts->tv_sec += (time_t)(ns / 1000000000ULL);
	ts->tv_nsec = (long)(ns % 1000000000ULL);
}

static int ts_before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? strtod(argv[1], NULL) : 20;
	uint64_t period_ns = (argc > 2 ? strtoull(argv[2], NULL, 10) : 4000) * 1000;
	pthread_t threads[MAX_ALIVE];
	int joinable[MAX_ALIVE] = { 0 }, alive = 0;
	struct timespec next, end;
	int ready = 0;

	if (argc > 3)
		burn_ns = strtoull(argv[3], NULL, 10) * 1000;
	if (seconds <= 0 || period_ns == 0 || burn_ns == 0) {
		fprintf(stderr, "usage: churn [SECONDS] [PERIOD_US] [BURN_US] [TRUTHFILE]\n");
		return 64;
	}
	if (argc > 4) {
		int err = truth_start(argv[4], NULL, NULL, 0);

		if (err < 0) {
			fprintf(stderr, "churn: cannot report the truth to %s: %s\n", argv[4],
				strerror(-err));
			return 1;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &next);
	end = next;
	add_ns(&end, (uint64_t)(seconds * 1e9));
	while (ts_before(&next, &end)) {
		int slot = -1;

		for (int i = 0; i < MAX_ALIVE; i++) {
			if (joinable[i] && pthread_tryjoin_np(threads[i], NULL) == 0) {
				joinable[i] = 0;
				alive--;
			}
			if (!joinable[i] && slot < 0)
				slot = i;
		}
		if (slot >= 0) {
			if (pthread_create(&threads[slot], NULL, worker, NULL) != 0) {
				perror("pthread_create");
				return 1;
			}
			joinable[slot] = 1;
			alive++;
		}
		if (!ready && atomic_load(&ran) > 0) {
			printf("ready\n");
			fflush(stdout);
			ready = 1;
		}
		add_ns(&next, period_ns);
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
			;
	}
	for (int i = 0; i < MAX_ALIVE && alive > 0; i++)
		if (joinable[i]) {
			pthread_join(threads[i], NULL);
			alive--;
		}
	truth_finish();
	return 0;
}
