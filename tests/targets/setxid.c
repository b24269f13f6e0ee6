/*
 * setxid SECONDS
 *
 * glibc's list of threads (GL(dl_stack_cache_lock)) held for long
 * stretches, as a program that drops privileges while it forks does. The
 * main thread calls setuid(getuid()) every 2 ms (spinning in between):
 * glibc's __nptl_setxid takes the lock, signals every other thread
 * (SIGSETXID) and waits, lock held, until each has run its handler. A
 * "vforker" thread spends most of its time in vfork(), whose child sleeps
 * 200 ms: it runs no handler meanwhile, so a setuid then waits that long
 * with the lock taken. Between two vforks it sleeps 50 ms. dlopen of a
 * library with static TLS (the agent) and pthread_create take the same
 * lock.
 *
 * Prints "ready"; exits 0 after SECONDS, 1 if a setuid call failed. A
 * thread left waiting for the lock keeps it from exiting at all.
 */

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	/* The raw call: the vfork child shares its parent's memory and may
	 * touch nothing of libc's. */
	while (syscall(SYS_nanosleep, &ts, &ts) != 0)
		;
}

static void *vforker_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "vforker");
	for (;;) {
		pid_t child = vfork();

		if (child == 0) {
			nap_ms(200);
			_exit(0);
		}
		if (child > 0)
			waitpid(child, NULL, 0);
		nap_ms(50);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	uint64_t end;
	pthread_t t;

	if (argc != 2) {
		fprintf(stderr, "usage: setxid SECONDS\n");
		return 64;
	}
	end = now_ns() + strtoull(argv[1], NULL, 10) * 1000000000ull;
	if (pthread_create(&t, NULL, vforker_main, NULL) != 0)
		return 1;
	printf("ready\n");
	fflush(stdout);
	while (now_ns() < end) {
		uint64_t next = now_ns() + 2000000;

		while (now_ns() < next)
			;
		if (setuid(getuid()) != 0) {
			perror("setuid");
			return 1;
		}
	}
	return 0;
}
