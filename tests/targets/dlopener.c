/*
 * dlopener LIBRARY SECONDS DELAY_MS
 *
 * A program that loads a library while it is being profiled (a plugin, a
 * module loaded on demand): prints "ready", waits until cprof's agent is
 * in (or DELAY_MS have passed), dlopen()s LIBRARY
 * (tests/targets/libs/lateload.c) and runs its lateload_churn() for the
 * rest of SECONDS, then exits 0 (2 when the library cannot be loaded).
 * Waiting for the agent, not a fixed time: its churn is nearly all inside
 * malloc, where no thread may load the agent, and a loaded machine can
 * make cprof later than any delay.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static bool agent_in(void)
{
	char line[4096];
	bool in = false;
	FILE *f = fopen("/proc/self/maps", "re");

	while (f && !in && fgets(line, sizeof(line), f))
		in = strstr(line, "cprof-agent") != NULL;
	if (f)
		fclose(f);
	return in;
}

int main(int argc, char **argv)
{
	double seconds = argc > 2 ? atof(argv[2]) : 10, delay = argc > 3 ? atof(argv[3]) / 1e3 : 1;
	void (*churn)(double);
	void *h;

	if (argc < 2)
		return 2;
	printf("ready\n");
	fflush(stdout);
	for (double waited = 0; waited < delay && !agent_in(); waited += 0.01)
		usleep(10000);
	usleep(200000); /* the agent's attach done, the window begun */
	h = dlopen(argv[1], RTLD_NOW);
	churn = h ? (void (*)(double))dlsym(h, "lateload_churn") : NULL;
	if (!churn) {
		fprintf(stderr, "dlopener: %s\n", dlerror());
		return 2;
	}
	churn(seconds - delay);
	return 0;
}
