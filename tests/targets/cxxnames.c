/*
 * cxxnames [SECONDS]: a C program whose functions carry the names a C++
 * compiler gives them (asm labels; the tests' targets are C), standing for a
 * C++ target in `cprof threads --debug 2`:
 *
 *   main -> server::main(int, char**)       (_ZN6server4mainEiPPc)
 *        -> server::Loop<int>::wait() const  (_ZNK6server4LoopIiE4waitEv)
 *        -> nanosleep
 *
 * GCC writes the asm label as the function's DW_AT_linkage_name, so cprof
 * names these frames from DWARF as it names a real C++ program's, by
 * demangling. Prints "ready" once in wait, exits by itself after SECONDS
 * (default 10, at most 50).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct loop {
	int seconds;
};

__attribute__((noinline, noclone)) int loop_wait(const struct loop *l)
	__asm__("_ZNK6server4LoopIiE4waitEv");
__attribute__((noinline, noclone)) int server_main(int argc, char **argv)
	__asm__("_ZN6server4mainEiPPc");

int loop_wait(const struct loop *l)
{
	struct timespec ts = { .tv_sec = l->seconds };

	printf("ready\n");
	fflush(stdout);
	while (nanosleep(&ts, &ts) != 0)
		;
	return 0;
}

int server_main(int argc, char **argv)
{
	struct loop l = { .seconds = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 10 };

	if (l.seconds < 0 || l.seconds > 50)
		l.seconds = 50;
	return loop_wait(&l);
}

int main(int argc, char **argv)
{
	/* Not a tail call: main stays on the stack, a frame with a C name. */
	return server_main(argc, argv) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
