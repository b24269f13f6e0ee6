/*
 * cancelloop SECONDS REPORT
 *
 * Threads cancelled in a loop, as a program that checks its cancellation
 * paths does: each of 2 drivers starts a waiter that blocks in
 * pthread_cond_wait (with a cleanup handler that counts and unlocks), lets
 * it wait 0-1 ms, cancels and joins it. The waiters, asleep in a futex, are
 * the only threads asleep in a call cprof prefers for the detour that loads
 * its agent (the drivers spin out their delay, the main thread waits in
 * sigsuspend), so the detour is a waiter's, and cancelled on its way
 * (glibc 2.36 runs a cancellable wait with the asynchronous type). On SIGUSR2
 * writes "rounds R\ncleanups C\n" to REPORT (beside, then renamed): every
 * round must have run its cleanup. Prints "ready"; exits after SECONDS.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define DRIVERS 2

struct waiter {
	pthread_mutex_t m;
	pthread_cond_t c;
};

static uint64_t rounds, cleanups;
static const char *report_path;
static volatile sig_atomic_t report_now;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_usr2(int sig)
{
	(void)sig;
	report_now = 1;
}

static void cleanup(void *arg)
{
	struct waiter *w = arg;

	__atomic_fetch_add(&cleanups, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&w->m);
}

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	pthread_mutex_lock(&w->m);
	pthread_cleanup_push(cleanup, w);
	for (;;)
		pthread_cond_wait(&w->c, &w->m);
	pthread_cleanup_pop(1);
	return NULL;
}

static void *driver_main(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	struct waiter w;

	pthread_mutex_init(&w.m, NULL);
	pthread_cond_init(&w.c, NULL);
	for (;;) {
		uint64_t until;
		pthread_t t;

		if (pthread_create(&t, NULL, waiter_main, &w) != 0)
			continue;
		until = now_ns() + (uint64_t)(rand_r(&seed) % 1000000);
		while (now_ns() < until)
			;
		pthread_cancel(t);
		pthread_join(t, NULL);
		__atomic_fetch_add(&rounds, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void write_report(void)
{
	char tmp[4096];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", report_path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "rounds %llu\ncleanups %llu\n",
		(unsigned long long)__atomic_load_n(&rounds, __ATOMIC_RELAXED),
		(unsigned long long)__atomic_load_n(&cleanups, __ATOMIC_RELAXED));
	fclose(f);
	rename(tmp, report_path);
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_usr2 };
	sigset_t usr2, none;
	pthread_t t;

	if (argc < 3) {
		fprintf(stderr, "usage: cancelloop SECONDS REPORT\n");
		return 2;
	}
	report_path = argv[2];
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	sigemptyset(&none);
	sigaction(SIGUSR2, &sa, NULL);
	/* Only the main thread takes it, in sigsuspend. */
	pthread_sigmask(SIG_BLOCK, &usr2, NULL);
	alarm((unsigned)atoi(argv[1]));
	for (uintptr_t i = 0; i < DRIVERS; i++)
		pthread_create(&t, NULL, driver_main, (void *)(i + 1));
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		sigsuspend(&none);
		if (report_now) {
			report_now = 0;
			write_report();
		}
	}
}
