/*
 * A library a target dlopen()s during a session (tests/targets/dlopener.c):
 * its allocations go through its own GOT, which the agent must patch when
 * it arrives, and its frames must be named and walked through.
 */
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) static void *lateload_block(size_t n)
{
	void *p = malloc(n);

	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

/* Allocates and frees 16 KiB blocks for @seconds. */
__attribute__((visibility("default"))) void lateload_churn(double seconds)
{
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	do {
		for (int i = 0; i < 1000; i++)
			free(lateload_block(16384));
		clock_gettime(CLOCK_MONOTONIC, &b);
	} while ((double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9 < seconds);
}
