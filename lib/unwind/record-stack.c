/*
 * The addresses of an agent record's stack (lib/agent/wire.h: ALLOC and
 * EVENT), as unwinder_unwind() gives them: from the agent's walk (return
 * addresses, made return address - 1 here), or unwound from the record's
 * copy. A copy unwound teaches the agent the rules of its frames (each
 * address once), so that it walks them itself next time.
 */
#include <errno.h>
#include <string.h>

#include "unwind/unwind.h"
#include "util/util.h"

/* Modules reported again at most this often: a refresh reads the maps. */
#define REFRESH_NS (100ULL * 1000 * 1000)

void record_stacks_init(struct record_stacks *s, struct unwinder *unw, Dwfl *dwfl,
			int (*put_rule)(void *arg, uint64_t key, uint64_t rule), void *put_rule_arg)
{
	*s = (struct record_stacks){ .unw = unw, .dwfl = dwfl, .put_rule = put_rule,
				     .put_rule_arg = put_rule_arg };
	u64map_init(&s->taught);
}

void record_stacks_release(struct record_stacks *s)
{
	u64map_release(&s->taught);
}

/*
 * Hands the agent the rules of the frames of @n addresses just unwound
 * ([0] the PC, then return addresses - 1), each address once. Best effort:
 * an address without a rule only means samples through it keep their copies.
 */
static void teach_rules(struct record_stacks *s, const uint64_t *pcs, int n)
{
	uint64_t rule;

	for (int i = 0; i < n; i++) {
		uint64_t key = i == 0 ? pcs[0] : pcs[i] + 1;

		if (u64map_get(&s->taught, key, &rule) || u64map_put(&s->taught, key, 1) < 0)
			continue;
		if (unwind_rule(s->dwfl, key, &rule) == 0)
			s->put_rule(s->put_rule_arg, key, rule);
	}
}

static bool all_in_modules(Dwfl *dwfl, const uint64_t *pcs, int n)
{
	for (int i = 0; i < n; i++)
		if (!dwfl_addrmodule(dwfl, pcs[i]))
			return false;
	return true;
}

int record_stacks_pcs(struct record_stacks *s, const uint64_t *regs, const uint8_t *stack,
		      size_t stack_size, bool walked, uint64_t *ret_pcs, size_t max)
{
	struct unwind_input in = { 0 }; /* every field: sp_pc_only too */
	size_t n;
	int r;

	if (walked) {
		/* The channel checked it is whole addresses, at most a walk's. */
		n = stack_size / sizeof(uint64_t);
		if (n == 0 || n > max)
			return -EINVAL;
		memcpy(ret_pcs, stack, n * sizeof(uint64_t));
		for (size_t i = 1; i < n; i++)
			ret_pcs[i]--;
		s->walked++;
		return (int)n;
	}
	memcpy(in.regs, regs, sizeof(in.regs));
	in.stack = stack;
	in.stack_size = stack_size;
	in.stack_start = regs[UNWIND_REG_RSP];
	r = unwinder_unwind(s->unw, &in, ret_pcs, max);
	/* A frame in no module: perhaps one dlopen()ed since the last report
	 * (the walk may have ended there, or gone on by frame pointers). */
	if (r > 0 && s->refresh && now_monotonic_ns() - s->refreshed_ns > REFRESH_NS &&
	    !all_in_modules(s->dwfl, ret_pcs, r)) {
		s->refreshed_ns = now_monotonic_ns();
		if (s->refresh(s->refresh_arg) == 0)
			r = unwinder_unwind(s->unw, &in, ret_pcs, max);
	}
	if (r > 0 && s->put_rule)
		teach_rules(s, ret_pcs, r);
	return r;
}
