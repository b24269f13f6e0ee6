/*
 * Unwinding from copies: registers and stack bytes taken from a thread (by
 * perf's PERF_SAMPLE_REGS_USER|STACK_USER or by ptrace) -> return addresses,
 * with DWARF CFI (.eh_frame / .debug_frame) through libdw's dwfl_frame API,
 * and through code without CFI (generated code) by its frame pointers.
 * Works after the thread has been let go: it never touches the live target,
 * only the copy and the ELF files. No symbol names here (lib/symbolize/).
 */
#ifndef CPROF_UNWIND_H
#define CPROF_UNWIND_H

#include <elfutils/libdwfl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

/* x86-64 DWARF register numbers: the order of unwind_input.regs. */
enum unwind_reg {
	UNWIND_REG_RAX, UNWIND_REG_RDX, UNWIND_REG_RCX, UNWIND_REG_RBX,
	UNWIND_REG_RSI, UNWIND_REG_RDI, UNWIND_REG_RBP, UNWIND_REG_RSP,
	UNWIND_REG_R8, UNWIND_REG_R9, UNWIND_REG_R10, UNWIND_REG_R11,
	UNWIND_REG_R12, UNWIND_REG_R13, UNWIND_REG_R14, UNWIND_REG_R15,
	UNWIND_REG_RIP,
	UNWIND_NREGS
};

struct unwind_input {
	uint64_t regs[UNWIND_NREGS];
	const uint8_t *stack;  /* copy of the stack ... */
	size_t stack_size;     /* ... of this many bytes ... */
	uint64_t stack_start;  /* ... that lived at this address */
	/* Only rsp and rip are known (a sleeping thread's, from
	 * /proc/PID/task/TID/syscall): a frame whose CFI needs another
	 * register that no inner frame saved ends the walk there. */
	bool sp_pc_only;
};

struct unwinder;

/*
 * An unwinder over the modules reported in @dwfl (see symbolizer_dwfl()).
 * @dwfl must outlive the unwinder. @pid is only a name for libdw's state.
 * libdw takes one thread-state provider per Dwfl for the Dwfl's whole life
 * (no detach short of dwfl_end()): a second unwinder_new() on the same Dwfl,
 * even after unwinder_free(), returns -EBUSY. Not thread-safe (nor is libdw):
 * one thread per Dwfl at a time.
 */
int unwinder_new(struct unwinder **ret, Dwfl *dwfl, pid_t pid);
void unwinder_free(struct unwinder *u);

/*
 * Unwinds @in into at most @max addresses in @ret_pcs: [0] is the interrupted
 * PC; each caller's entry is its return address - 1, so that it falls inside
 * the call instruction (what symbolization and pprof want). Returns the number
 * of frames (>= 1), or -errno when not even the first frame is usable.
 * Stops quietly where CFI (or, without CFI, the rbp chain) or the copied
 * stack ends.
 */
int unwinder_unwind(struct unwinder *u, const struct unwind_input *in, uint64_t *ret_pcs,
		    size_t max);

/*
 * How much of its copy the last unwinder_unwind() read, from the copy's
 * start; @ret_ran_off: it wanted more than was copied (the walk was cut
 * short by the copy, not by the stack's end).
 */
size_t unwinder_stack_used(const struct unwinder *u, bool *ret_ran_off);

/*
 * The last unwinder_unwind() ended short of a frame the CFI calls the
 * outermost (_start's, clone's): where CFI, the copy, or a register the
 * input did not have (sp_pc_only) gave out.
 */
bool unwinder_gave_out(const struct unwinder *u);

/*
 * The last unwinder_unwind() stepped over a frame whose pc has no CFI
 * (generated code: a JIT's, V8's builtins) by its frame pointer, as
 * libdw's x86-64 backend does there: the stack's callers from there on
 * are as right as the code's frame pointers.
 */
bool unwinder_by_frame_pointers(const struct unwinder *u);

/* The profile's comment when @n of @stacks stacks went by frame pointers
 * (unwinder_by_frame_pointers()), into @buf of @size bytes. */
void unwind_frame_pointer_note(char *buf, size_t size, uint64_t n, uint64_t stacks);

/* The stack pointer of each frame of the last unwinder_unwind(), as many
 * as it returned (0 where libdw did not say): frame i > 0 was called from
 * the return address stored at its sp - 8. Valid until the next call. */
const uint64_t *unwinder_frame_sps(const struct unwinder *u);

/*
 * rules.c: the agent's rule (lib/agent/wire.h, CPROF_RULE) for stepping
 * over the frame that return address @key returns into: 0, -ENOENT (no
 * module or no CFI there), -ENOTSUP (CFI the agent cannot follow).
 * @key is the address itself, not minus one (a walked sample's [0] is the
 * sampling function's PC, also right after a call).
 */
int unwind_rule(Dwfl *dwfl, uint64_t key, uint64_t *ret_rule);

/*
 * record-stack.c: the stacks of the agent's records (lib/agent/wire.h),
 * walked by the agent or copied, as addresses; copies teach the agent the
 * rules of their frames through @put_rule (NULL: they do not).
 */
struct record_stacks {
	struct unwinder *unw;
	Dwfl *dwfl; /* @unw's */
	int (*put_rule)(void *arg, uint64_t key, uint64_t rule);
	void *put_rule_arg;
	struct u64map taught; /* addresses whose rule was looked for */
	uint64_t walked;      /* records whose stack the agent walked */
	/* Reports the modules loaded since (symbolizer_refresh()): a copy
	 * unwound through an address in no module may run through a library
	 * loaded during the window. NULL: never. */
	int (*refresh)(void *arg);
	void *refresh_arg;
	uint64_t refreshed_ns; /* the last time, for at most one every REFRESH_NS */
};

void record_stacks_init(struct record_stacks *s, struct unwinder *unw, Dwfl *dwfl,
			int (*put_rule)(void *arg, uint64_t key, uint64_t rule), void *put_rule_arg);
static inline void record_stacks_refresh_with(struct record_stacks *s, int (*refresh)(void *arg),
					      void *arg)
{
	s->refresh = refresh;
	s->refresh_arg = arg;
}
void record_stacks_release(struct record_stacks *s);

/*
 * A record's stack: @regs (UNWIND_NREGS, the wire's order), and @stack_size
 * bytes at @stack, the agent's walk (@walked: return addresses) or a copy
 * from regs' rsp up. Into at most @max addresses in @ret_pcs, as
 * unwinder_unwind() gives them; returns their number or -errno.
 */
int record_stacks_pcs(struct record_stacks *s, const uint64_t *regs, const uint8_t *stack,
		      size_t stack_size, bool walked, uint64_t *ret_pcs, size_t max);

#endif
