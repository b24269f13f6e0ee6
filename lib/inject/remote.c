/*
 * The tracer's hands on a stopped thread: its memory read and written, its
 * stops waited for, a system call run in it, and its release with the
 * signals that came meanwhile handed back.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "inject/inject-private.h"
#include "ptrace/ptrace.h"
#include "util/util.h"

#define SYSCALL_TIMEOUT_NS (1000ULL * 1000 * 1000)

int inject_peek(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };

	return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -EFAULT;
}

int inject_poke(pid_t pid, uint64_t addr, const void *buf, size_t len)
{
	struct iovec local = { (void *)buf, len }, remote = { (void *)(uintptr_t)addr, len };

	return process_vm_writev(pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -EFAULT;
}

int inject_wait_stop(pid_t tid, int *status, uint64_t timeout_ns, bool collect)
{
	const struct timespec pause = { 0, 20000 };
	uint64_t deadline = now_monotonic_ns() + timeout_ns;

	for (;;) {
		pid_t w = collect ? waitpid(tid, status, __WALL | WNOHANG)
				  : ptrace_peek_stop(tid, status);

		if (w < 0)
			return -ESRCH;
		if (w > 0)
			return WIFSTOPPED(*status) ? 0 : -ESRCH;
		if (now_monotonic_ns() >= deadline)
			return -ETIMEDOUT;
		nanosleep(&pause, NULL);
	}
}

void inject_detach(struct call *c, pid_t tid)
{
	int first = c->npending ? c->pending[0] : 0;

	ptrace(PTRACE_DETACH, tid, 0, (void *)(uintptr_t)first);
	/* More than one arrived meanwhile (rare): send the rest again. */
	for (size_t i = 1; i < c->npending; i++)
		syscall(SYS_tgkill, c->pid, tid, c->pending[i]);
	c->npending = 0;
}

void inject_keep_signal(struct call *c, int sig)
{
	if (c->npending < MAX_PENDING)
		c->pending[c->npending++] = sig;
}

/*
 * Runs one system call in the stopped thread: PTRACE_SYSCALL to its entry
 * and exit stops, all within SYSCALL_TIMEOUT_NS.
 *
 * A signal that arrives first stops the thread in signal-delivery-stop
 * before the call ran (signals are taken on the way back to user space,
 * and the exit stop comes before that): this thread is given up, and the
 * caller puts its registers back and detaches with that signal, which the
 * thread then takes as if it had never been stopped (siginfo intact).
 * Holding such signals back would lose them, and a stream of signals would
 * keep the thread from ever reaching the call.
 */
static int remote_syscall(struct call *c, pid_t tid, struct user_regs_struct *r)
{
	uint64_t deadline = now_monotonic_ns() + SYSCALL_TIMEOUT_NS, now;
	unsigned syscall_stops = 0;
	int status, k;

	if (ptrace(PTRACE_SETREGS, tid, 0, r) < 0 || ptrace(PTRACE_SYSCALL, tid, 0, 0) < 0)
		return -ESRCH;
	while (syscall_stops < 2) {
		now = now_monotonic_ns();
		k = now < deadline ? inject_wait_stop(tid, &status, deadline - now, true) : -ETIMEDOUT;
		if (k == -ETIMEDOUT) {
			/* Cannot happen for mmap; get the thread back to a stop. */
			ptrace(PTRACE_INTERRUPT, tid, 0, 0);
			if (inject_wait_stop(tid, &status, SYSCALL_TIMEOUT_NS, true) < 0)
				return -ESRCH;
			if (status >> 16 == 0 && WSTOPSIG(status) != (SIGTRAP | 0x80))
				inject_keep_signal(c, WSTOPSIG(status));
			return -ETIMEDOUT;
		}
		if (k < 0)
			return k;
		if (WSTOPSIG(status) == (SIGTRAP | 0x80)) {
			syscall_stops++;
		} else if (status >> 16 == 0) {
			inject_keep_signal(c, WSTOPSIG(status));
			snprintf(c->rep->why, sizeof(c->rep->why), "a signal was arriving");
			return -EAGAIN;
		}
		if (syscall_stops < 2 && ptrace(PTRACE_SYSCALL, tid, 0, 0) < 0)
			return -ESRCH;
	}
	return ptrace(PTRACE_GETREGS, tid, 0, r) < 0 ? -ESRCH : 0;
}

/* Where the thread can run a syscall instruction: right behind its pc if
 * it was asleep in a call, else inside libc's syscall(). */
static int syscall_site(struct call *c, pid_t tid, const struct user_regs_struct *r,
			uint64_t *ret)
{
	uint8_t code[64];

	if (ptrace_was_blocked(r) && inject_peek(tid, r->rip - 2, code, 2) == 0 && code[0] == 0x0f &&
	    code[1] == 0x05) {
		*ret = r->rip - 2;
		return 0;
	}
	if (!c->syscall_fn || inject_peek(tid, c->syscall_fn, code, sizeof(code)) < 0)
		return -ENOTSUP;
	for (size_t i = 0; i + 1 < sizeof(code); i++)
		if (code[i] == 0x0f && code[i + 1] == 0x05) {
			*ret = c->syscall_fn + i;
			return 0;
		}
	return -ENOTSUP;
}

/* System call @nr with @args, run by stopped thread @tid from the state
 * @orig (whose registers it changes: the caller puts them back). Its
 * result, or -errno from ptrace. */
int inject_remote(struct call *c, pid_t tid, const struct user_regs_struct *orig, long nr,
		  const uint64_t args[6], uint64_t *ret)
{
	struct user_regs_struct r = *orig;
	uint64_t site;
	int k;

	k = syscall_site(c, tid, orig, &site);
	if (k < 0)
		return k;
	r.rip = site;
	r.rax = (uint64_t)nr;
	r.orig_rax = (uint64_t)-1; /* no restart of the interrupted call */
	r.rdi = args[0];
	r.rsi = args[1];
	r.rdx = args[2];
	r.r10 = args[3];
	r.r8 = args[4];
	r.r9 = args[5];
	k = remote_syscall(c, tid, &r);
	if (k < 0)
		return k;
	*ret = r.rax;
	return 0;
}

bool inject_remote_failed(int k, uint64_t v)
{
	return k < 0 || v > (uint64_t)-4096;
}
