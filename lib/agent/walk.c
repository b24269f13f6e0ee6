/*
 * The agent's own walk of a sample's frames, with the rules cprof writes
 * (wire.h, struct cprof_wire_rule): a few return addresses per ALLOC instead
 * of kilobytes of stack. Every rule is untrusted: each read it leads to must
 * lie between the sampling function's rsp and the thread's stack top (bytes
 * that are mapped for as long as the thread runs, capture.c), and the CFA
 * must rise from frame to frame. Anything else ends the walk with 0, and the
 * sample carries a stack copy as before.
 */
#include <stdint.h>

#include "agent.h"

static uint64_t rule_of(const struct cprof_wire_rule *t, unsigned bits, uint64_t key)
{
	uint32_t mask = (1u << bits) - 1, i = cprof_rule_slot(key, bits);

	for (int n = 0; n < CPROF_RULES_PROBES; n++, i = (i + 1) & mask) {
		uint64_t k = __atomic_load_n(&t[i].key, __ATOMIC_ACQUIRE);

		if (k == key)
			return __atomic_load_n(&t[i].rule, __ATOMIC_RELAXED);
		if (k == 0)
			return 0;
	}
	return 0;
}

/* A word of the stack, read by a load of ours, never a call of memcpy
 * (the program's may check what it reads: capture.c, copy_own_stack()). */
typedef uint64_t __attribute__((may_alias, aligned(1))) stack_word_t;

/* The 8 bytes at @addr, if they lie in [@lo, @hi). */
static bool stack_word(uint64_t lo, uint64_t hi, uint64_t addr, uint64_t *ret)
{
	if (addr < lo || addr > hi || hi - addr < 8)
		return false;
	*ret = *(const stack_word_t *)(uintptr_t)addr;
	return true;
}

size_t agent_walk(const struct cprof_wire_rule *t, unsigned bits, const uint64_t *regs, uint64_t hi,
		  uint64_t *pcs, size_t max)
{
	uint64_t pc = regs[CPROF_REG_RIP], sp = regs[CPROF_REG_RSP], bp = regs[CPROF_REG_RBP];
	uint64_t lo = sp;
	bool bp_known = true;
	size_t n = 0;

	while (n < max) {
		uint64_t rule = rule_of(t, bits, pc), cfa, slot;

		if (!rule)
			return 0;
		pcs[n++] = pc;
		switch (CPROF_RULE_KIND(rule)) {
		case CPROF_RULE_OUTERMOST:
			return n;
		case CPROF_RULE_CFA_RSP:
			cfa = sp + CPROF_RULE_CFA_OFFSET(rule);
			break;
		case CPROF_RULE_CFA_RBP:
			if (!bp_known)
				return 0;
			cfa = bp + CPROF_RULE_CFA_OFFSET(rule);
			break;
		default:
			return 0;
		}
		if (cfa <= sp)
			return 0;
		slot = CPROF_RULE_RBP_SLOT(rule);
		if (slot) {
			if (slot > cfa || !stack_word(lo, hi, cfa - slot, &bp))
				return 0;
			bp_known = true;
		} else if (rule & CPROF_RULE_RBP_LOST) {
			bp_known = false;
		}
		if (!stack_word(lo, hi, cfa - 8, &pc))
			return 0;
		sp = cfa;
		/* A zero return address ends a stack, as for libdw. */
		if (pc == 0)
			return n;
	}
	return 0;
}
