/*
 * The detour's code in the agent itself (lib/inject/trampoline.h): once the
 * agent is resident, cprof sends a thread here instead of writing code into
 * the target, and fills cprof_agent_tramp_data (the data block, in .bss)
 * with process_vm_writev. Exported, for cprof finds both in .dynsym.
 */
#include "inject/trampoline.h"

/* A local label: the exported name could be preempted, and PC32 to it is refused. */
#define D(field) (.Ltramp_data + (field))(%rip)
/* Where a first load's page jumps to leave (trampoline.h). */
#define TRAMP_TAIL_LABEL cprof_agent_tramp_tail:

	.text
	.globl cprof_agent_tramp
	.type cprof_agent_tramp, @function
	.globl cprof_agent_tramp_tail
	.type cprof_agent_tramp_tail, @function
	.p2align 6
cprof_agent_tramp:
#include "inject/trampoline-body.inc"
	.size cprof_agent_tramp, . - cprof_agent_tramp

	.bss
	.globl cprof_agent_tramp_data
	.type cprof_agent_tramp_data, @object
	.p2align 6
cprof_agent_tramp_data:
.Ltramp_data:
	.zero TD_END
	.size cprof_agent_tramp_data, . - cprof_agent_tramp_data

	.section .note.GNU-stack, "", @progbits
