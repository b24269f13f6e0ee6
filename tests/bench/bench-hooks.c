/*
 * bench-hooks AGENT: what the agent's hooks cost a malloc(64)+free pair,
 * in this process: unhooked, hooked with no sampled block live (free()
 * loads one word), hooked with a sampled block live (free() asks the live
 * set), and after the detach. Best of 10 runs of each: the machine is
 * shared, the minimum is the cost. Printed, never judged: scripts/bench-micro.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "agent/wire.h"

#define PAIRS 200000

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void escape(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static double pair_ns(void)
{
	double best = 1e9;

	for (int k = 0; k < 10; k++) {
		uint64_t t0 = now_ns();

		for (int i = 0; i < PAIRS; i++) {
			void *p = malloc(64);

			escape(p);
			free(p);
		}
		if ((double)(now_ns() - t0) / PAIRS < best)
			best = (double)(now_ns() - t0) / PAIRS;
	}
	return best;
}

int main(int argc, char **argv)
{
	int (*attach)(int, uint64_t, uint32_t, uint32_t);
	int (*detach)(void);
	double unhooked, empty, live, after;
	void *h, *big;
	int fd;

	if (argc != 2) {
		fprintf(stderr, "usage: bench-hooks PATH/cprof-agent.so\n");
		return 2;
	}
	h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	attach = h ? (int (*)(int, uint64_t, uint32_t, uint32_t))dlsym(h, "cprof_agent_attach_events")
		   : NULL;
	detach = h ? (int (*)(void))dlsym(h, "cprof_agent_detach") : NULL;
	if (!attach || !detach) {
		fprintf(stderr, "bench-hooks: %s\n", dlerror());
		return 1;
	}
	pair_ns();
	unhooked = pair_ns();
	/* This process is its own "cprof": alive, and the run is far shorter
	 * than the heartbeat's bound, so the session lasts. */
	fd = attach(getpid(), 512 << 10, 0, CPROF_EVENTS_HEAP);
	if (fd < 0) {
		fprintf(stderr, "bench-hooks: attach: %d\n", fd);
		return 1;
	}
	empty = pair_ns();
	big = malloc(64u << 20); /* sampled (almost) surely: the set is not empty */
	escape(big);
	live = pair_ns();
	free(big);
	detach();
	after = pair_ns();
	printf("malloc(64)+free pair, rate 512 KiB, best of 10 x %d pairs:\n"
	       "  unhooked                 %6.2f ns\n"
	       "  hooked, live set empty   %6.2f ns (%.2fx)\n"
	       "  hooked, live set in use  %6.2f ns (%.2fx)\n"
	       "  after detach             %6.2f ns (%.2fx)\n",
	       PAIRS, unhooked, empty, empty / unhooked, live, live / unhooked, after,
	       after / unhooked);
	return 0;
}
