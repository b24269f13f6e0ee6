/* Names of the x86-64 system calls a thread is commonly found blocked in,
 * and how to describe its state. */
#include <linux/futex.h>
#include <stdio.h>

#include "threads/threads.h"
#include "util/util.h"

static const struct {
	int nr;
	const char *name;
} syscalls[] = {
	{ 0, "read" },		  { 1, "write" },	   { 7, "poll" },
	{ 17, "pread64" },	  { 18, "pwrite64" },	   { 19, "readv" },
	{ 20, "writev" },	  { 23, "select" },	   { 24, "sched_yield" },
	{ 34, "pause" },	  { 35, "nanosleep" },	   { 42, "connect" },
	{ 43, "accept" },	  { 44, "sendto" },	   { 45, "recvfrom" },
	{ 46, "sendmsg" },	  { 47, "recvmsg" },	   { 61, "wait4" },
	{ 64, "semget" },	  { 65, "semop" },	   { 69, "msgsnd" },
	{ 70, "msgrcv" },	  { 72, "fcntl" },	   { 74, "fsync" },
	{ 75, "fdatasync" },	  { 101, "ptrace" },	   { 128, "rt_sigtimedwait" },
	{ 130, "rt_sigsuspend" }, { 202, "futex" },	   { 208, "io_getevents" },
	{ 230, "clock_nanosleep" }, { 232, "epoll_wait" }, { 247, "waitid" },
	{ 257, "openat" },	  { 270, "pselect6" },	   { 271, "ppoll" },
	{ 281, "epoll_pwait" },	  { 288, "accept4" },	   { 299, "recvmmsg" },
	{ 307, "sendmmsg" },	  { 426, "io_uring_enter" }, { 441, "epoll_pwait2" },
	{ 449, "futex_waitv" },	  { 3, "close" },	   { 9, "mmap" },
	{ 11, "munmap" },	  { 16, "ioctl" },	   { 56, "clone" },
	{ 59, "execve" },	  { 62, "kill" },	   { 96, "gettimeofday" },
	{ 228, "clock_gettime" }, { 231, "exit_group" },   { 234, "tgkill" },
	{ 318, "getrandom" },	  { 435, "clone3" },	   { 13, "rt_sigaction" },
	{ 14, "rt_sigprocmask" }, { 39, "getpid" },	   { 186, "gettid" },
	{ 219, "restart_syscall" },
};

const char *syscall_name(int64_t nr)
{
	for (size_t i = 0; i < ARRAY_SIZE(syscalls); i++)
		if (syscalls[i].nr == nr)
			return syscalls[i].name;
	return NULL;
}

/* futex is many calls in one: name the operation. */
static const char *futex_op_name(uint64_t op)
{
	switch (op & FUTEX_CMD_MASK) {
	case FUTEX_WAIT:
	case FUTEX_WAIT_BITSET:
		return "futex_wait";
	case FUTEX_LOCK_PI:
	case FUTEX_LOCK_PI2:
		return "futex_lock_pi";
	case FUTEX_WAIT_REQUEUE_PI:
		return "futex_wait_requeue_pi";
	default:
		return "futex";
	}
}

void thread_state_text(const struct thread_record *t, char *buf, size_t size)
{
	const char *what, *call = NULL;
	char nr[32];

	switch (t->state) {
	case 'R':
		what = "running";
		break;
	case 'S':
		what = "sleeping";
		break;
	case 'D':
		what = "disk sleep";
		break;
	case 'T':
		what = "stopped";
		break;
	case 't':
		what = "traced";
		break;
	case 'Z':
	case 'X':
		what = "exited";
		break;
	case 'I':
		what = "idle";
		break;
	default:
		what = "unknown";
		break;
	}
	if (t->syscall >= 0) {
		call = t->syscall == 202 ? futex_op_name(t->syscall_arg[1]) : syscall_name(t->syscall);
		if (!call) {
			snprintf(nr, sizeof(nr), "syscall %lld", (long long)t->syscall);
			call = nr;
		}
	}
	if (call)
		snprintf(buf, size, "%s in %s", what, call);
	else
		snprintf(buf, size, "%s", what);
}
