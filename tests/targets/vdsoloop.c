/*
 * vdsoloop [SECONDS]: one thread that spends most of its time in the vDSO,
 * calling clock_gettime (read_clock) and gettimeofday (read_tod) in a loop:
 * a profile names those frames by the vDSO's own symbols, in the "[vdso]"
 * mapping, and unwinds through them to read_clock, read_tod and main.
 *
 * Prints "ready", exits by itself after SECONDS (default 20).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static uint64_t sink;

__attribute__((noinline, noipa)) static void read_clock(void)
{
	struct timespec ts;

	for (int i = 0; i < 1000; i++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		sink += (uint64_t)ts.tv_nsec;
	}
}

__attribute__((noinline, noipa)) static void read_tod(void)
{
	struct timeval tv;

	for (int i = 0; i < 1000; i++) {
		gettimeofday(&tv, NULL);
		sink += (uint64_t)tv.tv_usec;
	}
}

int main(int argc, char **argv)
{
	long seconds = argc > 1 ? strtol(argv[1], NULL, 10) : 20;
	time_t end = time(NULL) + seconds;

	printf("ready\n");
	fflush(stdout);
	while (time(NULL) < end) {
		read_clock();
		read_tod();
	}
	return sink == 42;
}
