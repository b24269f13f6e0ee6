/*
 * System calls without libc, for code the watchdog task runs (watchdog.c).
 *
 * That task is made by clone() without a TLS of its own: it shares the
 * thread pointer of the thread that made it, so glibc never learns it
 * exists (and keeps a single-threaded process on its single-thread paths).
 * It must not touch thread-local state: no errno (a libc wrapper that fails
 * would write the other thread's), no agent_in_hook, no libc lock. These
 * return -errno like the kernel does.
 */
#ifndef CPROF_AGENT_RAW_H
#define CPROF_AGENT_RAW_H

#include <stdint.h>
#include <sys/syscall.h>

static inline long raw_syscall(long nr, long a1, long a2, long a3, long a4, long a5, long a6)
{
	register long r10 __asm__("r10") = a4;
	register long r8 __asm__("r8") = a5;
	register long r9 __asm__("r9") = a6;
	long ret;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}

#define RAW0(nr) raw_syscall((nr), 0, 0, 0, 0, 0, 0)
#define RAW1(nr, a) raw_syscall((nr), (long)(a), 0, 0, 0, 0, 0)
#define RAW2(nr, a, b) raw_syscall((nr), (long)(a), (long)(b), 0, 0, 0, 0)
#define RAW3(nr, a, b, c) raw_syscall((nr), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define RAW4(nr, a, b, c, d) raw_syscall((nr), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define RAW6(nr, a, b, c, d, e, f)                                                               \
	raw_syscall((nr), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

#endif
