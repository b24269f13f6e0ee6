/*
 * late [SECONDS] [DELAY_MS]: one thread ("early") burns CPU in early_worker
 * from the start; DELAY_MS (default 1000) after "ready" a second thread,
 * named "late", starts and burns CPU in late_worker until the end. A
 * profiler attached between the two must follow the new thread: its samples
 * carry thread_name "late" and the function late_worker.
 *
 * Exits by itself after SECONDS (default 20).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static atomic_int started;
static atomic_int stop;

#define SPIN(x, c)                                                                                 \
	for (int i_ = 0; i_ < 100000; i_++) {                                                      \
		(x) = (x)*6364136223846793005ULL + (c);                                            \
		__asm__ volatile("" : "+r"(x));                                                    \
	}

/*
 * Different constants and noipa: two identical functions would be folded
 * into one by -O2's identical code folding (-fipa-icf), and every sample of
 * late_worker would be named early_worker.
 */
__attribute__((noinline, noipa)) static uint64_t early_worker(uint64_t x)
{
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		SPIN(x, 1442695040888963407ULL);
	return x;
}

__attribute__((noinline, noipa)) static uint64_t late_worker(uint64_t x)
{
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		SPIN(x, 7046029254386353131ULL);
	return x;
}

static void *early_main(void *arg)
{
	atomic_fetch_add(&started, 1);
	return (void *)(uintptr_t)early_worker((uintptr_t)arg);
}

static void *late_main(void *arg)
{
	/* Named by itself, before late_worker runs: no sample of late_worker
	 * can see the name inherited from the main thread. */
	pthread_setname_np(pthread_self(), "late");
	return (void *)(uintptr_t)late_worker((uintptr_t)arg);
}

static void sleep_until(const struct timespec *t)
{
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, t, NULL) == EINTR)
		;
}

static struct timespec after(const struct timespec *t, double seconds)
{
	struct timespec r = *t;
	uint64_t ns = (uint64_t)r.tv_nsec + (uint64_t)(seconds * 1e9);

	r.tv_sec += (time_t)(ns / 1000000000ULL);
	r.tv_nsec = (long)(ns % 1000000000ULL);
	return r;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? strtod(argv[1], NULL) : 20;
	double delay = (argc > 2 ? strtod(argv[2], NULL) : 1000) / 1000;
	pthread_t early, late;
	struct timespec t0, when;

	if (seconds <= 0 || delay < 0) {
		fprintf(stderr, "usage: late [SECONDS] [DELAY_MS]\n");
		return 64;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (pthread_create(&early, NULL, early_main, (void *)1) != 0)
		return 1;
	pthread_setname_np(early, "early");
	while (atomic_load(&started) < 1) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	printf("ready\n");
	fflush(stdout);
	clock_gettime(CLOCK_MONOTONIC, &t0);

	when = after(&t0, delay);
	sleep_until(&when);
	if (pthread_create(&late, NULL, late_main, (void *)2) != 0)
		return 1;

	when = after(&t0, seconds);
	sleep_until(&when);
	atomic_store(&stop, 1);
	pthread_join(early, NULL);
	pthread_join(late, NULL);
	return 0;
}
