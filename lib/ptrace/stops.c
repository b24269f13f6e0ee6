/*
 * Small pieces every ptrace user of cprof needs (lib/ptrace/snapshot.c for
 * threads, lib/inject/ for the agent): looking at a stop without consuming
 * its signal, registers in unwinder order, and what an interrupted system
 * call will do when the thread goes on.
 */
#include "ptrace/ptrace.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>

/*
 * waitpid(tid, __WALL | WNOHANG) that looks at a stop without collecting
 * it (WNOWAIT). Collecting a signal-delivery stop clears the signal in the
 * kernel (wait_task_stopped() zeroes exit_code): if cprof died before
 * PTRACE_DETACH handed it back, the target would lose it. Uncollected, the
 * kernel delivers it when it lets the tracees of a dead tracer go. Exits
 * are collected, as before.
 */
pid_t ptrace_peek_stop(pid_t tid, int *ret_status)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)tid, &si, WEXITED | WSTOPPED | WNOHANG | WNOWAIT | __WALL) < 0)
		return -1;
	if (si.si_pid == 0)
		return 0;
	if (si.si_code == CLD_TRAPPED || si.si_code == CLD_STOPPED) {
		*ret_status = si.si_status << 8 | 0x7f;
		return tid;
	}
	return waitpid(tid, ret_status, __WALL | WNOHANG);
}

void ptrace_regs_to_unwind(const struct user_regs_struct *r, uint64_t *d)
{
	d[UNWIND_REG_RAX] = r->rax;
	d[UNWIND_REG_RDX] = r->rdx;
	d[UNWIND_REG_RCX] = r->rcx;
	d[UNWIND_REG_RBX] = r->rbx;
	d[UNWIND_REG_RSI] = r->rsi;
	d[UNWIND_REG_RDI] = r->rdi;
	d[UNWIND_REG_RBP] = r->rbp;
	d[UNWIND_REG_RSP] = r->rsp;
	d[UNWIND_REG_R8] = r->r8;
	d[UNWIND_REG_R9] = r->r9;
	d[UNWIND_REG_R10] = r->r10;
	d[UNWIND_REG_R11] = r->r11;
	d[UNWIND_REG_R12] = r->r12;
	d[UNWIND_REG_R13] = r->r13;
	d[UNWIND_REG_R14] = r->r14;
	d[UNWIND_REG_R15] = r->r15;
	d[UNWIND_REG_RIP] = r->rip;
}

/*
 * Stopped on the way out of the kernel, a thread that was asleep in a call
 * has rax = -ERESTART* or -EINTR (the restart happens after the stop); one
 * whose call had completed has its result there and was really running.
 */
bool ptrace_was_blocked(const struct user_regs_struct *r)
{
	int64_t rax = (int64_t)r->rax;

	return (int64_t)r->orig_rax >= 0 &&
	       (rax == -ERESTARTSYS || rax == -ERESTARTNOINTR || rax == -ERESTARTNOHAND ||
		rax == -ERESTART_RESTARTBLOCK || rax == -EINTR);
}


void ptrace_resume_point(const struct user_regs_struct *r, uint64_t *ret_rip, uint64_t *ret_rax)
{
	*ret_rip = r->rip;
	*ret_rax = r->rax;
	if ((int64_t)r->orig_rax < 0)
		return;
	/* arch/x86/kernel/signal.c: what happens when no handler runs. */
	switch (-(int64_t)r->rax) {
	case ERESTARTSYS:
	case ERESTARTNOINTR:
	case ERESTARTNOHAND:
		*ret_rax = r->orig_rax;
		*ret_rip = r->rip - 2;
		break;
	case ERESTART_RESTARTBLOCK:
		*ret_rax = NR_RESTART_SYSCALL;
		*ret_rip = r->rip - 2;
		break;
	}
}

/* glibc's wrappers load the number with "b8 imm32" (or "31 c0" for 0)
 * right before "0f 05". */
int64_t ptrace_restarted_call(pid_t tid, uint64_t rip)
{
	uint8_t code[7];
	struct iovec local = { code, sizeof(code) };
	struct iovec remote = { (void *)(uintptr_t)(rip - sizeof(code)), sizeof(code) };
	int32_t nr;

	if (rip < sizeof(code) ||
	    process_vm_readv(tid, &local, 1, &remote, 1, 0) != (ssize_t)sizeof(code))
		return NR_RESTART_SYSCALL;
	if (code[5] != 0x0f || code[6] != 0x05)
		return NR_RESTART_SYSCALL;
	if (code[0] == 0xb8) {
		memcpy(&nr, code + 1, sizeof(nr));
		return nr >= 0 ? nr : NR_RESTART_SYSCALL;
	}
	if (code[3] == 0x31 && code[4] == 0xc0)
		return 0;
	return NR_RESTART_SYSCALL;
}
