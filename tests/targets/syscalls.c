/*
 * syscalls [SECONDS]: one thread that spends much of its time in the kernel
 * (how much depends on what a system call costs on the machine: 40% on a
 * 6.18 VM), in a loop of getppid() system calls made by syscall_loop (via
 * syscall(2), which glibc cannot cache or inline away). A cpu profile with
 * kernel frames shows the kernel's syscall path above syscall_loop; one
 * without shows none.
 *
 * Prints "ready", exits by itself after SECONDS (default 20).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long sink;

__attribute__((noinline, noipa)) static void syscall_loop(void)
{
	for (int i = 0; i < 1000; i++)
		sink += syscall(SYS_getppid);
}

int main(int argc, char **argv)
{
	int seconds = argc > 1 ? atoi(argv[1]) : 20;
	time_t end = time(NULL) + seconds;

	printf("ready\n");
	fflush(stdout);
	while (time(NULL) < end)
		syscall_loop();
	return sink == 42;
}
