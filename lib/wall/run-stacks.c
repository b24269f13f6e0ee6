/*
 * The stacks a thread was sampled on while it ran. Samples tell how a
 * thread's run time divides among its stacks; its clock tells the time
 * itself: with cpu-wide sampling, which catches a thread only when a CPU's
 * timer fires while it runs, the number of samples is a random figure, its
 * run time is not.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wall/wall-private.h"

void wall_run_stacks_init(struct wall_run_stacks *rs)
{
	memset(rs, 0, sizeof(*rs));
	u64map_init(&rs->index);
}

const uint64_t *wall_run_stack_pcs(const struct wall_run_stacks *rs, size_t i)
{
	return rs->pool + rs->v[i].at;
}

int wall_run_stacks_add(struct wall_run_stacks *rs, const uint64_t *pcs, size_t n,
			uint64_t period_ns)
{
	struct wall_run_stack *st;
	uint64_t h, idx;

	for (h = hash_bytes(pcs, n * sizeof(*pcs), n); u64map_get(&rs->index, h, &idx); h++) {
		st = &rs->v[idx - 1];
		if (st->n == n && !memcmp(wall_run_stack_pcs(rs, idx - 1), pcs,
					  n * sizeof(*pcs)))
			goto out_count;
	}
	if (GROW(rs->v, rs->nv + 1, rs->v_alloc) < 0 ||
	    GROW(rs->pool, rs->npool + n, rs->pool_alloc) < 0 ||
	    u64map_put(&rs->index, h, rs->nv + 1) < 0)
		return -ENOMEM;
	st = &rs->v[rs->nv++];
	*st = (struct wall_run_stack){ .at = rs->npool, .n = n };
	memcpy(rs->pool + rs->npool, pcs, n * sizeof(*pcs));
	rs->npool += n;
out_count:
	st->samples++;
	st->period_ns += period_ns;
	rs->period_ns += period_ns;
	return 0;
}

void wall_run_stacks_release(struct wall_run_stacks *rs)
{
	free(rs->v);
	free(rs->pool);
	u64map_release(&rs->index);
	wall_run_stacks_init(rs);
}
