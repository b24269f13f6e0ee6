/*
 * pingpong SECONDS REPORT [MODE [RATE]]
 *
 * Two threads hand a token back and forth as fast as the scheduler lets
 * them, so that each sleeps and wakes once per round trip: a target that
 * does little but switch (scripts/bench-wall). MODE "pipe" (the default):
 * one byte over two pipes, read() and write(); "cond": a turn under a
 * mutex with two condition variables (futex waits). RATE (round trips a
 * second; 0, the default: as fast as they go) paces the ping thread, 10
 * round trips at a time, with absolute sleeps: the switches a second are
 * then chosen, and what a round trip costs shows in the CPU time. The
 * main thread only
 * waits for SIGUSR2 and then writes to REPORT (beside, then renamed):
 *   round_trips N  token round trips so far
 *   switches S     context switches of the process so far (getrusage:
 *                  voluntary and involuntary, every thread)
 *   cpu_ns T       CPU time of the process so far
 * Prints "ready"; exits after SECONDS.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static uint64_t round_trips; /* written by the ping thread only */
static uint64_t pace_ns;     /* between two batches of 10; 0: none */
static const char *report_path;

/* pipe mode: ping writes to_pong[1] and reads to_ping[0]; pong the reverse. */
static int to_pong[2], to_ping[2];

/* cond mode: whose turn it is, 0 ping, 1 pong. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_changed[2] = { PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER };
static int turn;

static void pass(int fd_out, int fd_in)
{
	char token = 't';

	if (write(fd_out, &token, 1) != 1 || read(fd_in, &token, 1) != 1)
		exit(1);
}

/* After each round trip of the ping thread: counts it, and every 10 sleeps
 * until the next batch is due (@next: its time, CLOCK_MONOTONIC ns). */
static void count_round_trip(uint64_t *next)
{
	struct timespec ts;

	uint64_t now;

	__atomic_store_n(&round_trips, round_trips + 1, __ATOMIC_RELAXED);
	if (!pace_ns || round_trips % 10)
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	/* Late (a busy machine): no burst to catch up, the pace goes on from now. */
	*next = *next + pace_ns > now ? *next + pace_ns : now;
	ts = (struct timespec){ (time_t)(*next / 1000000000ull), (long)(*next % 1000000000ull) };
	clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

static void *pipe_ping(void *arg)
{
	uint64_t next = 0;

	(void)arg;
	for (;;) {
		pass(to_pong[1], to_ping[0]);
		count_round_trip(&next);
	}
	return NULL;
}

static void *pipe_pong(void *arg)
{
	char token;

	(void)arg;
	for (;;) {
		if (read(to_pong[0], &token, 1) != 1 || write(to_ping[1], &token, 1) != 1)
			exit(1);
	}
	return NULL;
}

/* Waits for @me's turn, then gives the turn to the other. */
static void take_turn(int me)
{
	pthread_mutex_lock(&lock);
	while (turn != me)
		pthread_cond_wait(&turn_changed[me], &lock);
	turn = !me;
	pthread_cond_signal(&turn_changed[!me]);
	pthread_mutex_unlock(&lock);
}

static void *cond_ping(void *arg)
{
	uint64_t next = 0;

	(void)arg;
	for (;;) {
		take_turn(0);
		count_round_trip(&next);
	}
	return NULL;
}

static void *cond_pong(void *arg)
{
	(void)arg;
	for (;;)
		take_turn(1);
	return NULL;
}

static void write_report(void)
{
	struct rusage ru;
	struct timespec ts;
	char tmp[4096];
	FILE *f;

	getrusage(RUSAGE_SELF, &ru);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	snprintf(tmp, sizeof(tmp), "%s.tmp", report_path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "round_trips %llu\nswitches %llu\ncpu_ns %llu\n",
		(unsigned long long)__atomic_load_n(&round_trips, __ATOMIC_RELAXED),
		(unsigned long long)(ru.ru_nvcsw + ru.ru_nivcsw),
		(unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
	fclose(f);
	rename(tmp, report_path);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 3 ? argv[3] : "pipe";
	long rate = argc > 4 ? atol(argv[4]) : 0;
	void *(*ping)(void *), *(*pong)(void *);
	pthread_t a, b;
	sigset_t usr2;
	int sig;

	if (argc < 3) {
		fprintf(stderr, "usage: pingpong SECONDS REPORT [pipe|cond [RATE]]\n");
		return 2;
	}
	if (rate < 0 || rate > 10000000)
		return 2;
	pace_ns = rate ? 10 * 1000000000ull / (uint64_t)rate : 0;
	report_path = argv[2];
	if (!strcmp(mode, "pipe")) {
		if (pipe(to_pong) || pipe(to_ping))
			return 1;
		ping = pipe_ping;
		pong = pipe_pong;
	} else if (!strcmp(mode, "cond")) {
		ping = cond_ping;
		pong = cond_pong;
	} else {
		fprintf(stderr, "pingpong: unknown mode '%s' (pipe or cond)\n", mode);
		return 2;
	}
	/* Blocked everywhere: the main thread takes it with sigwait(). */
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &usr2, NULL);
	alarm((unsigned)atoi(argv[1]));
	pthread_create(&a, NULL, ping, NULL);
	pthread_create(&b, NULL, pong, NULL);
	printf("ready\n");
	fflush(stdout);
	while (sigwait(&usr2, &sig) == 0)
		write_report();
	return 0;
}
