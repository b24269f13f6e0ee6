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
#define TRAMP_TAIL_LABEL

	.section .rodata.cprof_tramp, "a"
	.globl cprof_tramp_code
	.globl cprof_tramp_code_end
	.hidden cprof_tramp_code
	.hidden cprof_tramp_code_end
	.p2align 6
cprof_tramp_code:
.Lstart:
#include "inject/trampoline-body.inc"
cprof_tramp_code_end:

	.section .note.GNU-stack, "", @progbits
