/*
 * rtalloc SECONDS REPORT
 *
 * A real-time program in small: on CPU 0 alone, a thread at SCHED_FIFO
 * (priority 10, when allowed) wakes every millisecond and allocates, while
 * a normal thread allocates without pause. The real-time thread notes its
 * longest loop (the 1 ms nap, a malloc and a free): what anything that
 * makes it wait for the normal one costs it. On SIGUSR2 the process writes
 * "max_loop_ns L\nloops N\nfifo 0|1\n" to REPORT (beside, then renamed).
 * Prints "ready"; exits after SECONDS.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static uint64_t max_loop_ns, loops;
static int fifo;
static const char *report_path;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_cpu0(void)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(0, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void churn(unsigned *seed)
{
	char *p = malloc(16 + rand_r(seed) % 4080);

	if (p)
		p[0] = 1;
	/* Seen: without it, gcc drops the pair as dead. */
	__asm__ volatile("" : : "r"(p) : "memory");
	free(p);
}

static void *realtime_main(void *arg)
{
	struct sched_param sp = { .sched_priority = 10 };
	unsigned seed = 1;
	uint64_t last;

	(void)arg;
	on_cpu0();
	__atomic_store_n(&fifo, pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0,
			 __ATOMIC_RELAXED);
	last = now_ns();
	for (;;) {
		struct timespec nap = { 0, 1000000 };
		uint64_t t;

		nanosleep(&nap, NULL);
		churn(&seed);
		t = now_ns();
		if (t - last > max_loop_ns)
			__atomic_store_n(&max_loop_ns, t - last, __ATOMIC_RELAXED);
		__atomic_store_n(&loops, loops + 1, __ATOMIC_RELAXED);
		last = t;
	}
	return NULL;
}

static void *normal_main(void *arg)
{
	unsigned seed = 2;

	(void)arg;
	on_cpu0();
	for (;;)
		churn(&seed);
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
	fprintf(f, "max_loop_ns %llu\nloops %llu\nfifo %d\n",
		(unsigned long long)__atomic_load_n(&max_loop_ns, __ATOMIC_RELAXED),
		(unsigned long long)__atomic_load_n(&loops, __ATOMIC_RELAXED),
		__atomic_load_n(&fifo, __ATOMIC_RELAXED));
	fclose(f);
	rename(tmp, report_path);
}

int main(int argc, char **argv)
{
	pthread_t rt, normal;
	sigset_t usr2;
	int sig;

	if (argc < 3) {
		fprintf(stderr, "usage: rtalloc SECONDS REPORT\n");
		return 2;
	}
	report_path = argv[2];
	/* Blocked everywhere: the main thread takes it with sigwait(). */
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &usr2, NULL);
	alarm((unsigned)atoi(argv[1]));
	pthread_create(&normal, NULL, normal_main, NULL);
	pthread_create(&rt, NULL, realtime_main, NULL);
	printf("ready\n");
	fflush(stdout);
	while (sigwait(&usr2, &sig) == 0)
		write_report();
	return 0;
}
