/*
 * pool WORKERS SECONDS [LATE]: a prefork pool in small (nginx's workers,
 * php-fpm's children). The parent forks WORKERS children, each of which
 * burns CPU in worker_spin() and exits after SECONDS; with LATE, the
 * parent forks one more after LATE seconds (a worker replaced while the
 * pool runs). The parent itself only waits, in parent_wait().
 *
 * Prints "worker PID" for each child it forks and "ready" once the first
 * WORKERS run; exits after its children, killing them if they outlive
 * SECONDS + 2 (it never outlives its bound); a worker dies with the pool.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void worker_spin(double seconds)
{
	double end = now() + seconds;
	volatile unsigned long x = 1;

	while (now() < end)
		for (int i = 0; i < 100000; i++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
}

static pid_t children[65];
static int nchildren;

static pid_t fork_worker(double seconds)
{
	pid_t pid = fork();

	if (pid == 0) {
		/* Killed with the pool, as a test kills it: none spins on. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() == 1)
			_exit(0);
		worker_spin(seconds);
		_exit(0);
	}
	if (pid > 0) {
		children[nchildren++] = pid;
		printf("worker %d\n", (int)pid);
	}
	fflush(stdout);
	return pid;
}

/* Reaps the children that end until @until; a reaped child is forgotten,
 * so that its pid, free again, is never signalled. */
__attribute__((noinline)) static void parent_wait(double until)
{
	while (now() < until) {
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		pid_t pid = waitpid(-1, NULL, WNOHANG);

		if (pid < 0)
			return;
		for (int i = 0; pid > 0 && i < nchildren; i++)
			if (children[i] == pid)
				children[i] = children[--nchildren];
		if (pid == 0)
			nanosleep(&ts, NULL);
	}
}

int main(int argc, char **argv)
{
	int workers = argc > 1 ? atoi(argv[1]) : 2;
	double seconds = argc > 2 ? atof(argv[2]) : 10;
	double late = argc > 3 ? atof(argv[3]) : -1;
	double start = now();

	if (workers < 1 || workers > 64 || seconds <= 0) {
		fprintf(stderr, "usage: pool WORKERS(1-64) SECONDS [LATE]\n");
		return 2;
	}
	for (int i = 0; i < workers; i++)
		if (fork_worker(seconds) < 0)
			return 1;
	printf("ready\n");
	fflush(stdout);
	if (late >= 0 && late < seconds) {
		parent_wait(start + late);
		if (fork_worker(seconds - late) < 0)
			return 1;
	}
	parent_wait(start + seconds + 2);
	/* Past the bound: none outlives it. */
	for (int i = 0; i < nchildren; i++)
		kill(children[i], SIGKILL);
	while (waitpid(-1, NULL, 0) > 0)
		;
	return 0;
}
