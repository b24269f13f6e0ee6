/*
 * statictarget SECONDS: a statically linked program (no libc.so, no
 * dlopen) that prints "ready" and sleeps. cpu and threads profile it;
 * heap, mutex and block must refuse it clearly, since the agent cannot be
 * loaded into it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	unsigned seconds = argc > 1 ? (unsigned)atoi(argv[1]) : 10;

	alarm(seconds + 5);
	printf("ready\n");
	fflush(stdout);
	while (seconds--)
		sleep(1);
	return 0;
}
