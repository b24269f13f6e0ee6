/*
 * DWARF unwinding of copied registers and stack bytes with libdw's dwfl_frame
 * API. libdw asks us, through Dwfl_Thread_Callbacks, for the first frame's
 * registers and for memory; we answer from the copy in hand, so the target is
 * never touched and may be long gone.
 *
 * Generated code (a JIT's, V8's builtins) has no CFI: there libdw's x86-64
 * backend steps by the frame pointer, reading the same copy, and the walk
 * goes back to CFI at the first caller that has it. That step needs no help
 * from us; we only tell which walks took it (unwinder_by_frame_pointers()),
 * for the profile to say so.
 *
 * libdw allows one thread-state provider per Dwfl and has no call to detach
 * one short of dwfl_end(), so the unwinder attaches once and, per call, only
 * points its state at the current input: get_thread() accepts any tid and
 * hands back that input.
 */
#include "unwind/unwind.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

struct unwinder {
	Dwfl *dwfl;
	pid_t pid;
	const struct unwind_input *in; /* set only during unwinder_unwind() */

	/* The walk in progress. */
	uint64_t *pcs;
	size_t max, n;
	uint64_t *sps; /* stack pointer of each frame, for the loop guard */
	size_t sps_alloc;
	bool nomem;
	size_t used;   /* bytes of the copy the walk read, from its start */
	bool ran_off;  /* the walk asked for stack above the copy */
	bool gave_out; /* it ended where CFI, a register or the copy gave out */
	bool by_frame_pointers; /* a step went by rbp where no CFI was */
	struct u64map has_cfi;  /* pc in a module -> HAS_CFI or NO_CFI */
};

enum { HAS_CFI = 1, NO_CFI = 2 };

static pid_t unw_next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
	struct unwinder *u = arg;

	(void)dwfl;
	/* Only dwfl_getthreads() asks; the one "thread" is the current input. */
	if (*thread_argp || !u->in)
		return 0;
	*thread_argp = u;
	return u->pid;
}

static bool unw_get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
	struct unwinder *u = arg;

	(void)dwfl;
	(void)tid;
	if (!u->in)
		return false;
	*thread_argp = u;
	return true;
}

/*
 * Only the copy answers. x86-64 CFI loads nothing but saved registers from
 * the stack (PLT rules compute without loads), so reading the ELF files for
 * addresses outside the copy would buy nothing; an address past the copy
 * simply ends the walk there, which is what the header promises.
 */
static bool unw_memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
	struct unwinder *u = arg;
	const struct unwind_input *in = u->in;
	uint64_t off;

	(void)dwfl;
	if (!in || !in->stack || addr < in->stack_start)
		return false;
	off = addr - in->stack_start;
	if (in->stack_size < sizeof(*result) || off > in->stack_size - sizeof(*result)) {
		u->ran_off = true;
		return false;
	}
	memcpy(result, in->stack + off, sizeof(*result));
	u->used = MAX(u->used, off + sizeof(*result));
	return true;
}

static bool unw_set_initial_registers(Dwfl_Thread *thread, void *arg)
{
	struct unwinder *u = arg;
	Dwarf_Word regs[UNWIND_NREGS];

	if (u->in->sp_pc_only) {
		regs[0] = u->in->regs[UNWIND_REG_RSP];
		if (!dwfl_thread_state_registers(thread, UNWIND_REG_RSP, 1, regs))
			return false;
		dwfl_thread_state_register_pc(thread, u->in->regs[UNWIND_REG_RIP]);
		return true;
	}
	for (size_t i = 0; i < UNWIND_NREGS; i++)
		regs[i] = u->in->regs[i];
	/* DWARF 0..15 are the GPRs, 16 the return-address column: the PC. */
	if (!dwfl_thread_state_registers(thread, 0, UNWIND_NREGS, regs))
		return false;
	dwfl_thread_state_register_pc(thread, u->in->regs[UNWIND_REG_RIP]);
	return true;
}

static const Dwfl_Thread_Callbacks unwinder_callbacks = {
	.next_thread = unw_next_thread,
	.get_thread = unw_get_thread,
	.memory_read = unw_memory_read,
	.set_initial_registers = unw_set_initial_registers,
	/* No detach: the unwinder's memory is freed by unwinder_free(), and
	 * dwfl_end() must not reach back into it. */
};

int unwinder_new(struct unwinder **ret, Dwfl *dwfl, pid_t pid)
{
	struct unwinder *u;
	int r;

	if (!dwfl)
		return -EINVAL;
	/* A Dwfl takes one state provider for its whole life. */
	if (dwfl_pid(dwfl) >= 0)
		return -EBUSY;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->dwfl = dwfl;
	u->pid = pid > 0 ? pid : 1;
	u64map_init(&u->has_cfi);
	/*
	 * elf == NULL: libdw takes the architecture from the first module with
	 * an ELF image, so the modules must have been reported (and opened)
	 * already, as symbolizer_new() does.
	 */
	if (!dwfl_attach_state(dwfl, NULL, u->pid, &unwinder_callbacks, u)) {
		r = -ENOEXEC;
		goto out_free;
	}
	*ret = u;
	return 0;

out_free:
	free(u);
	return r;
}

/*
 * Leaves the Dwfl attached to a dangling argument: libdw only calls back
 * from inside dwfl_getthread(s)/frames, and only unwinder_unwind() does that.
 * Hence one unwinder per Dwfl, ever (unwinder_new() says -EBUSY after).
 */
void unwinder_free(struct unwinder *u)
{
	if (!u)
		return;
	free(u->sps);
	u64map_release(&u->has_cfi);
	free(u);
}

/* The same pc and sp twice means the CFI (or a corrupt stack) loops. */
static bool seen_before(const struct unwinder *u, uint64_t pc, uint64_t sp)
{
	for (size_t i = u->n; i-- > 0;)
		if (u->pcs[i] == pc && u->sps[i] == sp)
			return true;
	return false;
}

/*
 * The CFI libdw steps over @pc's frame with: .eh_frame's, else
 * .debug_frame's (libdw's order); -ENOENT where neither covers @pc. There
 * libdw's x86-64 backend steps by the frame pointer instead (elfutils'
 * x86_64_unwind): return address at [rbp + 8], the caller's rbp at [rbp],
 * its rsp rbp + 16, taken only when that rsp is above the frame's. The
 * caller frees *ret.
 */
static int cfi_frame_at(Dwfl *dwfl, Dwarf_Addr pc, Dwarf_Frame **ret)
{
	Dwfl_Module *mod = dwfl_addrmodule(dwfl, pc);
	Dwarf_Addr bias = 0;
	Dwarf_CFI *cfi;

	if (!mod)
		return -ENOENT;
	cfi = dwfl_module_eh_cfi(mod, &bias);
	if (cfi && dwarf_cfi_addrframe(cfi, pc - bias, ret) == 0)
		return 0;
	cfi = dwfl_module_dwarf_cfi(mod, &bias);
	if (cfi && dwarf_cfi_addrframe(cfi, pc - bias, ret) == 0)
		return 0;
	return -ENOENT;
}

/*
 * The mark of the outermost frame (_start's, a new thread's clone): CFI
 * that says the return address is undefined. A walk from sp and pc alone
 * also ends, as if there, where the return address is in a register it
 * was not given (vfork's wrapper keeps it in rdi).
 */
static bool outermost_at(Dwfl *dwfl, Dwarf_Addr pc)
{
	Dwarf_Op mem[3], *ops = NULL;
	Dwarf_Frame *frame;
	size_t nops = 1;
	bool r;
	int ra;

	if (cfi_frame_at(dwfl, pc, &frame) < 0)
		return false;
	ra = dwarf_frame_info(frame, NULL, NULL, NULL);
	r = ra >= 0 && dwarf_frame_register(frame, ra, mem, &ops, &nops) == 0 && nops == 0 &&
	    ops == mem;
	free(frame);
	return r;
}

/* Has @pc (as libdw looks it up: a caller's minus one) CFI? Cached for
 * addresses in a module: modules are only ever added to a Dwfl. */
static bool has_cfi(struct unwinder *u, Dwarf_Addr pc)
{
	Dwarf_Frame *frame;
	uint64_t v;
	bool r;

	if (u64map_get(&u->has_cfi, pc, &v))
		return v == HAS_CFI;
	if (!dwfl_addrmodule(u->dwfl, pc))
		return false;
	r = cfi_frame_at(u->dwfl, pc, &frame) == 0;
	if (r)
		free(frame);
	u64map_put(&u->has_cfi, pc, r ? HAS_CFI : NO_CFI); /* only a cache */
	return r;
}

/*
 * Was @frame, the caller of the last frame taken, found by frame pointer?
 * A CFI step keeps the callee-saved registers the walk knew (the ABI's
 * rule: same value) or loads them; the frame-pointer step sets only rbp,
 * rsp and the pc. So a callee-saved register known says CFI; else the
 * callee's pc decides, as it decided for libdw.
 */
static bool stepped_by_frame_pointer(struct unwinder *u, Dwfl_Frame *frame)
{
	static const unsigned saved[] = { UNWIND_REG_RBX, UNWIND_REG_R12, UNWIND_REG_R13,
					  UNWIND_REG_R14, UNWIND_REG_R15 };
	Dwarf_Word v;

	for (size_t i = 0; i < ARRAY_SIZE(saved); i++)
		if (dwfl_frame_reg(frame, saved[i], &v) == 0)
			return false;
	return !has_cfi(u, u->pcs[u->n - 1]);
}

static int unw_frame(Dwfl_Frame *frame, void *arg)
{
	struct unwinder *u = arg;
	Dwarf_Addr pc;
	Dwarf_Word sp = 0;
	bool activation;

	if (!dwfl_frame_pc(frame, &pc, &activation))
		return DWARF_CB_ABORT;
	/* A return address points after the call; step back into it. */
	if (!activation && pc > 0)
		pc--;
	if (dwfl_frame_reg(frame, UNWIND_REG_RSP, &sp) != 0)
		sp = 0;
	if (pc == 0 || seen_before(u, pc, sp))
		return DWARF_CB_ABORT;
	if (u->n > 0 && !u->by_frame_pointers && stepped_by_frame_pointer(u, frame))
		u->by_frame_pointers = true;
	if (GROW(u->sps, u->n + 1, u->sps_alloc) < 0) {
		u->nomem = true;
		return DWARF_CB_ABORT;
	}
	u->pcs[u->n] = pc;
	u->sps[u->n] = sp;
	u->n++;
	return u->n < u->max ? DWARF_CB_OK : DWARF_CB_ABORT;
}

int unwinder_unwind(struct unwinder *u, const struct unwind_input *in, uint64_t *ret_pcs,
		    size_t max)
{
	int end;

	if (!u || !in || !ret_pcs || !max)
		return -EINVAL;
	if (!in->regs[UNWIND_REG_RIP])
		return -EINVAL;
	if (max > INT_MAX)
		max = INT_MAX;

	u->in = in;
	u->pcs = ret_pcs;
	u->max = max;
	u->n = 0;
	u->nomem = false;
	u->used = 0;
	u->ran_off = false;
	u->by_frame_pointers = false;
	/*
	 * The return value says why the walk ended: 0 at the outermost frame,
	 * DWARF_CB_ABORT from us, -1 where CFI, a register or the copy gave
	 * out. A stack cut short is still a stack: only a caller that could
	 * have given more (all the registers) asks, unwinder_gave_out().
	 */
	end = dwfl_getthread_frames(u->dwfl, u->pid, unw_frame, u);
	u->gave_out = end == -1 || (end == 0 && in->sp_pc_only && u->n &&
				    !outermost_at(u->dwfl, u->pcs[u->n - 1]));
	u->in = NULL;
	u->pcs = NULL;

	if (u->n == 0)
		return u->nomem ? -ENOMEM : -ENOENT;
	return (int)u->n;
}

size_t unwinder_stack_used(const struct unwinder *u, bool *ret_ran_off)
{
	*ret_ran_off = u->ran_off;
	return u->used;
}

bool unwinder_gave_out(const struct unwinder *u)
{
	return u->gave_out;
}

bool unwinder_by_frame_pointers(const struct unwinder *u)
{
	return u->by_frame_pointers;
}

void unwind_frame_pointer_note(char *buf, size_t size, uint64_t n, uint64_t stacks)
{
	snprintf(buf, size, "%llu of %llu %s went on by frame pointers through code without "
		 "unwind tables (generated code)", (unsigned long long)n,
		 (unsigned long long)stacks, plural(stacks, "stack", "stacks"));
}

const uint64_t *unwinder_frame_sps(const struct unwinder *u)
{
	return u->sps;
}
