/*
 * The agent's own frame walk (lib/agent/walk.c) on hand-made stacks: it
 * follows good rules to the outermost frame and gives up (0) where a rule
 * is missing; and no rule, however wrong, makes it read outside the stack
 * it was given (guard pages on both sides: a stray read kills the test) or
 * walk without end.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "agent.h"

#define PAGE 4096u
#define BITS 6u

static struct cprof_wire_rule table[1u << BITS];

/* One page of "stack" between two PROT_NONE pages. */
static uint8_t *guarded_page(void)
{
	uint8_t *p = mmap(NULL, 3 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(p, MAP_FAILED);
	cr_assert_eq(mprotect(p, PAGE, PROT_NONE), 0);
	cr_assert_eq(mprotect(p + 2 * PAGE, PAGE, PROT_NONE), 0);
	return p + PAGE;
}

static void put_rule(uint64_t key, uint64_t rule)
{
	uint32_t i = cprof_rule_slot(key, BITS);

	while (table[i].key)
		i = (i + 1) & ((1u << BITS) - 1);
	table[i].rule = rule;
	table[i].key = key;
}

static void put_word(uint8_t *at, uint64_t v)
{
	memcpy(at, &v, sizeof(v));
}

/*
 * f0 (pc 0x1000): CFA = rsp + 32, rbp untouched; f1 (returned into at
 * 0x2000): CFA = rbp + 16, rbp saved at CFA - 16; f2 (0x3000): outermost.
 */
static void three_frames(uint8_t *s, uint64_t *regs)
{
	uint64_t sp0 = (uint64_t)(uintptr_t)s + 64, bp = sp0 + 32 + 48;

	memset(table, 0, sizeof(table));
	memset(regs, 0, CPROF_REG_COUNT * sizeof(*regs));
	regs[CPROF_REG_RIP] = 0x1000;
	regs[CPROF_REG_RSP] = sp0;
	regs[CPROF_REG_RBP] = bp;
	put_word(s + 64 + 24, 0x2000);     /* f0's return address, at its CFA - 8 */
	put_word(s + (bp - sp0) + 64, 0x777); /* f1 saved its caller's rbp at CFA - 16 = bp */
	put_word(s + (bp - sp0) + 64 + 8, 0x3000);
	put_rule(0x1000, CPROF_RULE(CPROF_RULE_CFA_RSP, 0, 32, 0));
	put_rule(0x2000, CPROF_RULE(CPROF_RULE_CFA_RBP, 0, 16, 16));
	put_rule(0x3000, CPROF_RULE(CPROF_RULE_OUTERMOST, 0, 0, 0));
}

Test(walk, follows_rules_to_the_outermost_frame)
{
	uint8_t *s = guarded_page();
	uint64_t regs[CPROF_REG_COUNT], pcs[16];
	size_t n;

	three_frames(s, regs);
	n = agent_walk(table, BITS, regs, (uint64_t)(uintptr_t)s + PAGE, pcs, 16);
	cr_assert_eq(n, 3);
	cr_assert_eq(pcs[0], 0x1000);
	cr_assert_eq(pcs[1], 0x2000);
	cr_assert_eq(pcs[2], 0x3000);
	/* Too few slots for the walk: no partial stack. */
	cr_assert_eq(agent_walk(table, BITS, regs, (uint64_t)(uintptr_t)s + PAGE, pcs, 2), 0);
}

Test(walk, gives_up_without_a_rule_or_past_the_stack)
{
	uint8_t *s = guarded_page();
	uint64_t regs[CPROF_REG_COUNT], pcs[16], hi = (uint64_t)(uintptr_t)s + PAGE;

	three_frames(s, regs);
	/* f1's frame lies beyond a stack that ends earlier. */
	cr_assert_eq(agent_walk(table, BITS, regs, regs[CPROF_REG_RSP] + 40, pcs, 16), 0);
	/* f1's caller's rbp is unknown: a CFA on rbp cannot be found. */
	memset(table, 0, sizeof(table));
	put_rule(0x1000, CPROF_RULE(CPROF_RULE_CFA_RSP, CPROF_RULE_RBP_LOST, 32, 0));
	put_rule(0x2000, CPROF_RULE(CPROF_RULE_CFA_RBP, 0, 16, 16));
	put_rule(0x3000, CPROF_RULE(CPROF_RULE_OUTERMOST, 0, 0, 0));
	cr_assert_eq(agent_walk(table, BITS, regs, hi, pcs, 16), 0);
	/* No rule for 0x2000. */
	memset(table, 0, sizeof(table));
	put_rule(0x1000, CPROF_RULE(CPROF_RULE_CFA_RSP, 0, 32, 0));
	put_rule(0x3000, CPROF_RULE(CPROF_RULE_OUTERMOST, 0, 0, 0));
	cr_assert_eq(agent_walk(table, BITS, regs, hi, pcs, 16), 0);
	/* A CFA that does not rise (offset 0) would loop. */
	memset(table, 0, sizeof(table));
	put_rule(0x1000, CPROF_RULE(CPROF_RULE_CFA_RSP, 0, 0, 0));
	cr_assert_eq(agent_walk(table, BITS, regs, hi, pcs, 16), 0);
}

static uint64_t xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Rules and stacks of random words, offsets near the page's size: a read
 * one byte outside [rsp, hi) faults on a guard page. */
Test(walk, no_rule_reads_outside_the_stack)
{
	static const uint64_t keys[] = { 0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0 };
	uint8_t *s = guarded_page();
	uint64_t x = 0x9e3779b97f4a7c15ull, regs[CPROF_REG_COUNT], pcs[CPROF_RULES_MAX_FRAMES];
	uint64_t lo = (uint64_t)(uintptr_t)s, walks = 0;

	for (int round = 0; round < 20000; round++) {
		memset(table, 0, sizeof(table));
		for (int k = 0; k < 5; k++) {
			uint64_t r = xorshift(&x);

			put_rule(keys[k], CPROF_RULE(r & 3, r & CPROF_RULE_RBP_LOST, (r >> 8) % (2 * PAGE),
						     (r >> 32) % (2 * PAGE)));
		}
		for (unsigned off = 0; off < PAGE; off += 8) {
			uint64_t r = xorshift(&x);

			put_word(s + off, r & 1 ? keys[r % 6] : lo + (r >> 8) % (2 * PAGE) - PAGE / 2);
		}
		memset(regs, 0, sizeof(regs));
		regs[CPROF_REG_RIP] = keys[xorshift(&x) % 5];
		regs[CPROF_REG_RSP] = lo + xorshift(&x) % PAGE;
		regs[CPROF_REG_RBP] = xorshift(&x) & 1 ? lo + xorshift(&x) % (2 * PAGE) - PAGE / 2
						     : xorshift(&x);
		size_t n = agent_walk(table, BITS, regs, lo + PAGE, pcs, CPROF_RULES_MAX_FRAMES);

		cr_assert_leq(n, CPROF_RULES_MAX_FRAMES);
		walks += n > 0;
	}
	/* Some random walks did end well: the loop reached the reads. */
	cr_log_info("%llu of 20000 random walks completed", (unsigned long long)walks);
	cr_assert_gt(walks, 0);
}
