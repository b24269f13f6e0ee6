/*
 * The detour of lib/inject/: see trampoline.h. Position-independent; it
 * reaches its data block with rip-relative addresses, so it runs wherever
 * the page is mapped. Never executed in cprof itself: it lives in .rodata
 * and is copied into the target.
 *
 * Entered by a jump with rsp 16-byte aligned (so each callee sees the ABI's
 * rsp % 16 == 8), below the interrupted code's red zone.
 */
#include "inject/trampoline.h"

#define D(field) (.Lstart + TRAMP_DATA + (field))(%rip)
#define REG(r) D(TD_REGS + 8 * (r))

	.section .rodata.cprof_tramp, "a"
	.globl cprof_tramp_code
	.globl cprof_tramp_code_end
	.hidden cprof_tramp_code
	.hidden cprof_tramp_code_end
	.p2align 6
cprof_tramp_code:
.Lstart:
	/* Cancellation disabled (cprof blocked every signal before it let
	 * the thread go): nothing takes it off the detour (trampoline.h). */
	mov	D(TD_SETCANCEL), %rax
	test	%rax, %rax
	jz	.Lgo
	mov	$1, %edi /* PTHREAD_CANCEL_DISABLE */
	lea	D(TD_CANCELSTATE), %rsi
	call	*%rax
.Lgo:
	/* A function given: the agent is loaded already, call it alone. */
	mov	D(TD_FUNC), %rax
	test	%rax, %rax
	jnz	.Lcall
	lea	D(TD_PATH), %rdi
	mov	D(TD_FLAGS), %rsi
	call	*D(TD_DLOPEN)
	mov	%rax, D(TD_HANDLE)
	test	%rax, %rax
	jnz	.Lsym
	call	*D(TD_DLERROR)
	mov	%rax, D(TD_ERRSTR)
	jmp	.Ldone
.Lsym:
	mov	%rax, %rdi
	lea	D(TD_SYM), %rsi
	call	*D(TD_DLSYM)
	mov	%rax, D(TD_FUNC)
	test	%rax, %rax
	jz	.Ldone
.Lcall:
	mov	D(TD_ARG0), %rdi
	mov	D(TD_ARG1), %rsi
	mov	D(TD_ARG2), %rdx
	mov	D(TD_ARG3), %rcx
	call	*%rax
	mov	%rax, D(TD_RET)
.Ldone:
	movq	$1, D(TD_DONE)
	/* A cancellation that came meanwhile may act from here on (glibc's
	 * asynchronous type, which a thread asleep in a cancellable call has):
	 * nothing of the loader's or the agent's is held any more, and the
	 * unwind reaches the thread's own cleanup handlers. */
	mov	D(TD_SETCANCEL), %rax
	test	%rax, %rax
	jz	.Lmask
	mov	D(TD_CANCELSTATE), %edi
	xor	%esi, %esi
	call	*%rax
.Lmask:
	mov	$14, %eax /* rt_sigprocmask(SIG_SETMASK, old) */
	mov	$2, %edi
	lea	D(TD_SIGOLD), %rsi
	xor	%edx, %edx
	mov	$8, %r10d
	syscall
	/* Extended state first: it needs rax and rdx for its mask (all). */
	mov	$-1, %eax
	mov	$-1, %edx
	cmpq	$0, D(TD_FXSAVE)
	jne	.Lfx
	xrstor64 D(TD_XSAVE)
	jmp	.Lregs
.Lfx:
	fxrstor64 D(TD_XSAVE)
.Lregs:
	pushq	REG(TR_RFLAGS)
	popfq
	mov	REG(TR_RBX), %rbx
	mov	REG(TR_RCX), %rcx
	mov	REG(TR_RDX), %rdx
	mov	REG(TR_RSI), %rsi
	mov	REG(TR_RDI), %rdi
	mov	REG(TR_RBP), %rbp
	mov	REG(TR_R8), %r8
	mov	REG(TR_R9), %r9
	mov	REG(TR_R10), %r10
	mov	REG(TR_R11), %r11
	mov	REG(TR_R12), %r12
	mov	REG(TR_R13), %r13
	mov	REG(TR_R14), %r14
	mov	REG(TR_R15), %r15
	mov	REG(TR_RAX), %rax
	/* From here on the thread is itself again but for rip. */
	mov	REG(TR_RSP), %rsp
	jmp	*REG(TR_RIP)
cprof_tramp_code_end:

	.section .note.GNU-stack, "", @progbits
