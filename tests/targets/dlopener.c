/*
 * dlopener LIBRARY SECONDS DELAY_MS
 *
 * A program that loads a library while it is being profiled (a plugin, a
 * module loaded on demand): prints "ready", sleeps DELAY_MS, dlopen()s
 * LIBRARY (tests/targets/libs/lateload.c) and runs its lateload_churn()
 * for the rest of SECONDS, then exits 0 (2 when the library cannot be
 * loaded).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	double seconds = argc > 2 ? atof(argv[2]) : 10, delay = argc > 3 ? atof(argv[3]) / 1e3 : 1;
	void (*churn)(double);
	void *h;

	if (argc < 2)
		return 2;
	printf("ready\n");
	fflush(stdout);
	usleep((useconds_t)(delay * 1e6));
	h = dlopen(argv[1], RTLD_NOW);
	churn = h ? (void (*)(double))dlsym(h, "lateload_churn") : NULL;
	if (!churn) {
		fprintf(stderr, "dlopener: %s\n", dlerror());
		return 2;
	}
	churn(seconds - delay);
	return 0;
}
