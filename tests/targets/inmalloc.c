/*
 * inmalloc SECONDS
 *
 * One thread that, on SIGUSR1, stays inside the allocator holding its lock:
 * glibc's malloc_stats() prints with the main arena's lock held, and its
 * stderr here is a pipe already full, so the thread waits in write() with
 * the lock taken for as long as nobody reads the pipe, as a thread
 * preempted inside malloc does for a moment. Prints "held" before the call;
 * once the pipe is read (its read end is fd 100, open it through
 * /proc/PID/fd/100) it allocates, frees, prints "done". Asleep otherwise;
 * prints "ready" at the start and exits 0 after SECONDS.
 *
 * So that any allocation of another's on its way waits for that lock, as
 * it would for a preempted malloc, the program runs without glibc's
 * per-thread cache (it executes itself again with the tunable set) and
 * makes glibc lock the allocator (a thread started and joined: glibc takes
 * no lock while a program has never had a second thread).
 */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define READ_END 100

static volatile sig_atomic_t hold_now;

static void on_usr1(int sig)
{
	(void)sig;
	hold_now = 1;
}

/* stderr becomes the write end of a pipe with no room left. */
static int fill_stderr(void)
{
	char block[4096];
	int p[2];

	if (pipe2(p, O_NONBLOCK) < 0 || dup2(p[0], READ_END) < 0 || dup2(p[1], 2) < 0)
		return -1;
	close(p[0]);
	close(p[1]);
	memset(block, 'x', sizeof(block));
	while (write(2, block, sizeof(block)) > 0)
		;
	/* One byte at a time for the last room a partial block left. */
	while (write(2, block, 1) > 0)
		;
	return fcntl(2, F_SETFL, 0);
}

static void *nothing(void *arg)
{
	return arg;
}

int main(int argc, char **argv)
{
	int seconds = argc > 1 ? atoi(argv[1]) : 30;
	time_t end = time(NULL) + seconds;
	struct timespec nap = { 0, 20 * 1000 * 1000 };
	pthread_t t;
	void *p;

	if (!getenv("GLIBC_TUNABLES")) {
		char self[4096];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

		if (n <= 0)
			return 2;
		self[n] = '\0';
		setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
		execv(self, argv);
		return 2;
	}
	if (pthread_create(&t, NULL, nothing, NULL) != 0 || pthread_join(t, NULL) != 0)
		return 2;
	signal(SIGUSR1, on_usr1);
	printf("ready\n");
	fflush(stdout);
	while (time(NULL) < end) {
		if (!hold_now) {
			nanosleep(&nap, NULL);
			continue;
		}
		hold_now = 0;
		if (fill_stderr() < 0)
			return 2;
		printf("held\n");
		fflush(stdout);
		malloc_stats();
		p = malloc(1000);
		free(p);
		printf("done\n");
		fflush(stdout);
	}
	return 0;
}
