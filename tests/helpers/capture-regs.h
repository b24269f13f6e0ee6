/*
 * The calling function's own registers, in the order of enum unwind_reg,
 * for tests and benches that unwind a copy of their own stack (test-unwind,
 * bench-unwind). rip is the address of the lea itself.
 */
#ifndef CPROF_CAPTURE_REGS_H
#define CPROF_CAPTURE_REGS_H

#define CAPTURE_REGS(r)                                                                  \
	__asm__ volatile("movq %%rax, 0(%0)\n\t"                                          \
			 "movq %%rdx, 8(%0)\n\t"                                          \
			 "movq %%rcx, 16(%0)\n\t"                                         \
			 "movq %%rbx, 24(%0)\n\t"                                         \
			 "movq %%rsi, 32(%0)\n\t"                                         \
			 "movq %%rdi, 40(%0)\n\t"                                         \
			 "movq %%rbp, 48(%0)\n\t"                                         \
			 "movq %%rsp, 56(%0)\n\t"                                         \
			 "movq %%r8, 64(%0)\n\t"                                          \
			 "movq %%r9, 72(%0)\n\t"                                          \
			 "movq %%r10, 80(%0)\n\t"                                         \
			 "movq %%r11, 88(%0)\n\t"                                         \
			 "movq %%r12, 96(%0)\n\t"                                         \
			 "movq %%r13, 104(%0)\n\t"                                        \
			 "movq %%r14, 112(%0)\n\t"                                        \
			 "movq %%r15, 120(%0)\n\t"                                        \
			 "1: leaq 1b(%%rip), %%rax\n\t"                                   \
			 "movq %%rax, 128(%0)\n\t"                                        \
			 :                                                                \
			 : "r"(r)                                                         \
			 : "rax", "memory")

/* Keeps the compiler from turning a call into a tail jump. */
#define NO_TAIL() __asm__ volatile("" ::: "memory")

#endif
