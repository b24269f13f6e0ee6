/*
 * forker SECONDS [--keep]
 *
 * A forking server in small (redis' BGSAVE, a prefork pool): ground truth
 * for what cprof's agent does to fork children (issue 22). Four threads
 * take and release 32 mutexes in turn, each briefly, so that a fork often
 * comes while one of them is inside a lock hook; the main thread forks over
 * and over.
 * The program registered handlers with pthread_atfork() before any agent
 * came, as a careful program does: it takes every mutex before the fork
 * and unlocks them after, in the child too, through the hooked
 * pthread_mutex_unlock.
 *
 * Each child takes and releases the shared mutex 100 times and exits 0.
 * The parent waits up to 2 s for each: a child that did not end by then
 * hangs (it is killed and counted). Prints "ready", forks for SECONDS (or
 * until SIGTERM), then prints "forks N hung H failed F" and exits 0 (3 if
 * any child hung or failed).
 *
 * --keep: the first child forked after the first second stays alive for
 * the rest of the run (locking in a loop, printing "child PID"), to be
 * profiled itself; it is killed at the end.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NLOCKS 32

static pthread_mutex_t shared = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t locks[NLOCKS];
static atomic_bool stop;
static volatile sig_atomic_t terminated;

static void on_term(int sig)
{
	(void)sig;
	terminated = 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void own_prepare(void)
{
	pthread_mutex_lock(&shared);
	for (int i = 0; i < NLOCKS; i++)
		pthread_mutex_lock(&locks[i]);
}

static void own_release(void)
{
	for (int i = 0; i < NLOCKS; i++)
		pthread_mutex_unlock(&locks[i]);
	pthread_mutex_unlock(&shared);
}

static void *contend(void *arg)
{
	volatile unsigned long n = 0;

	(void)arg;
	for (unsigned k = 0; !atomic_load(&stop); k++) {
		pthread_mutex_t *m = &locks[k % NLOCKS];

		pthread_mutex_lock(m);
		for (int i = 0; i < 50; i++)
			n++;
		pthread_mutex_unlock(m);
	}
	return NULL;
}

static void child_work(bool forever)
{
	do {
		for (int i = 0; i < 100; i++) {
			pthread_mutex_lock(&shared);
			pthread_mutex_unlock(&shared);
		}
		if (forever)
			usleep(1000);
	} while (forever);
	_exit(0);
}

/* 0: exited 0; 1: hung (killed); 2: failed. */
static int reap(pid_t pid)
{
	double until = now_s() + 2.0;
	int status;

	while (now_s() < until) {
		pid_t w = waitpid(pid, &status, WNOHANG);

		if (w == pid)
			return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 2;
		usleep(200);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return 1;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10, start, end;
	bool keep = argc > 2 && strcmp(argv[2], "--keep") == 0;
	unsigned long forks = 0, hung = 0, failed = 0;
	pid_t kept = 0;
	pthread_t th[4];

	if (seconds <= 0 || seconds > 3600)
		return 2;
	signal(SIGTERM, on_term);
	for (int i = 0; i < NLOCKS; i++)
		pthread_mutex_init(&locks[i], NULL);
	pthread_atfork(own_prepare, own_release, own_release);
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, contend, NULL);
	printf("ready\n");
	fflush(stdout);
	start = now_s();
	end = start + seconds;
	while (now_s() < end && !terminated) {
		bool keep_this = keep && !kept && now_s() > start + 1.0;
		pid_t pid = fork();

		if (pid < 0)
			break;
		if (pid == 0)
			child_work(keep_this);
		forks++;
		if (keep_this) {
			kept = pid;
			printf("child %d\n", (int)pid);
			fflush(stdout);
			continue;
		}
		switch (reap(pid)) {
		case 1:
			hung++;
			break;
		case 2:
			failed++;
			break;
		}
	}
	atomic_store(&stop, true);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	if (kept) {
		kill(kept, SIGKILL);
		waitpid(kept, NULL, 0);
	}
	printf("forks %lu hung %lu failed %lu\n", forks, hung, failed);
	return hung || failed ? 3 : 0;
}
