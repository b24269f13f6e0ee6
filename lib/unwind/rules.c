/*
 * The agent's unwinding rules (lib/agent/wire.h, struct cprof_wire_rule),
 * from the same DWARF CFI libdw unwinds with: for one return address, where
 * its caller's CFA is, that the return address sits at CFA - 8, and where
 * rbp was saved. Only what x86-64 compilers emit almost everywhere (a CFA of
 * rsp or rbp plus an offset, saved registers at CFA-relative slots) has a
 * rule; anything else (expressions, signal frames, realigned stacks) gets
 * none, and the agent copies the stack of samples that pass there.
 */
#include "unwind/unwind.h"

#include <dwarf.h>
#include <errno.h>
#include <stdlib.h>

#include "agent/wire.h"

/* A location CFA + offset (what libdw gives for "offset(N)" rules). */
static bool cfa_relative(const Dwarf_Op *ops, size_t nops, int64_t *ret)
{
	if (nops == 1 && ops[0].atom == DW_OP_call_frame_cfa) {
		*ret = 0;
		return true;
	}
	if (nops == 2 && ops[0].atom == DW_OP_call_frame_cfa && ops[1].atom == DW_OP_plus_uconst) {
		*ret = (int64_t)ops[1].number;
		return true;
	}
	return false;
}

static int frame_rule(Dwarf_Frame *frame, uint64_t *ret)
{
	Dwarf_Op mem[3], *ops;
	uint64_t kind, flags = 0, slot = 0;
	int64_t off, cfa_off;
	size_t nops;
	bool signal;

	if (dwarf_frame_info(frame, NULL, NULL, &signal) != UNWIND_REG_RIP || signal)
		return -ENOTSUP;
	if (dwarf_frame_register(frame, UNWIND_REG_RIP, mem, &ops, &nops) != 0)
		return -ENOTSUP;
	/* Undefined (ops_mem, no op): the outermost frame. */
	if (nops == 0 && ops == mem) {
		*ret = CPROF_RULE(CPROF_RULE_OUTERMOST, 0, 0, 0);
		return 0;
	}
	if (!cfa_relative(ops, nops, &off) || off != -8)
		return -ENOTSUP;
	if (dwarf_frame_cfa(frame, &ops, &nops) != 0 || nops != 1 || ops[0].atom != DW_OP_bregx)
		return -ENOTSUP;
	if (ops[0].number == UNWIND_REG_RSP)
		kind = CPROF_RULE_CFA_RSP;
	else if (ops[0].number == UNWIND_REG_RBP)
		kind = CPROF_RULE_CFA_RBP;
	else
		return -ENOTSUP;
	cfa_off = (int64_t)ops[0].number2;
	if (cfa_off < 8 || cfa_off >= (1 << 24))
		return -ENOTSUP;
	if (dwarf_frame_register(frame, UNWIND_REG_RBP, mem, &ops, &nops) != 0)
		return -ENOTSUP;
	if (nops == 0 && ops == mem)
		flags = CPROF_RULE_RBP_LOST; /* undefined */
	else if (nops != 0 && (!cfa_relative(ops, nops, &off) || off >= 0 || off < -65535))
		return -ENOTSUP;
	else if (nops != 0)
		slot = (uint64_t)-off;
	/* (no op and no ops: same value, rbp is the caller's) */
	*ret = CPROF_RULE(kind, flags, (uint64_t)cfa_off, slot);
	return 0;
}

/* The rule at @addr in @cfi (of bias @bias); -ENOENT where it has no FDE. */
static int cfi_rule(Dwarf_CFI *cfi, Dwarf_Addr bias, uint64_t addr, uint64_t *ret_rule)
{
	Dwarf_Frame *frame;
	int r;

	if (!cfi || dwarf_cfi_addrframe(cfi, addr - bias, &frame) != 0)
		return -ENOENT;
	r = frame_rule(frame, ret_rule);
	free(frame);
	return r;
}

int unwind_rule(Dwfl *dwfl, uint64_t key, uint64_t *ret_rule)
{
	Dwfl_Module *mod;
	Dwarf_Addr bias = 0;
	Dwarf_CFI *cfi;
	int r;

	if (!dwfl || key < 2)
		return -EINVAL;
	/* Inside the call, as libdw looks a caller's frame up. */
	mod = dwfl_addrmodule(dwfl, key - 1);
	if (!mod)
		return -ENOENT;
	/* .eh_frame first, then .debug_frame: libdw's own order. */
	cfi = dwfl_module_eh_cfi(mod, &bias);
	r = cfi_rule(cfi, bias, key - 1, ret_rule);
	if (r != -ENOENT)
		return r;
	cfi = dwfl_module_dwarf_cfi(mod, &bias);
	return cfi_rule(cfi, bias, key - 1, ret_rule);
}
