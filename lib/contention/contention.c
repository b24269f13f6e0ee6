#include "contention/contention.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "profile/stack-table.h"
#include "util/util.h"

#define MAX_FRAMES 128

/* A bucket's estimates; its stack (leaf first, agent frames dropped) is the
 * stack table's, its key 0. */
struct estimates {
	double events;
	double delay_ns;
};

static struct estimates *estimates_of(const struct stack_bucket *b)
{
	return b->value;
}

struct contention {
	struct contention_opts opts;
	struct contention_stats stats;
	struct stack_table buckets;
	struct record_stacks stacks;
	uint64_t pcs[MAX_FRAMES];
	uint64_t agent_start, agent_end; /* cprof-agent.so in the target */
};

int contention_new(struct contention **ret, const struct contention_opts *o)
{
	struct contention *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->opts = *o;
	stack_table_init(&c->buckets, sizeof(struct estimates));
	record_stacks_init(&c->stacks, o->unw, symbolizer_dwfl(o->sym), o->put_rule,
			   o->put_rule_arg);
	record_stacks_refresh_with(&c->stacks, symbolizer_refresh_arg, o->sym);
	symbolizer_module_range(o->sym, "cprof-agent", &c->agent_start, &c->agent_end);
	*ret = c;
	return 0;
}

void contention_free(struct contention *c)
{
	if (!c)
		return;
	stack_table_release(&c->buckets);
	record_stacks_release(&c->stacks);
	free(c);
}

const struct contention_stats *contention_stats(const struct contention *c)
{
	return &c->stats;
}

/* What one record stands for: (events, delay), see contention.h. */
static void estimate(const struct contention *c, const struct cprof_wire_event *ev,
		     double *ret_events, double *ret_delay)
{
	double rate = ev->rate ? (double)ev->rate : 1.0, d = (double)ev->value;

	switch (c->opts.events) {
	case CPROF_EVENTS_BLOCK:
		if (ev->rate > 1 && ev->value < ev->rate) {
			*ret_events = d > 0 ? rate / d : rate;
			*ret_delay = rate;
		} else {
			*ret_events = 1;
			*ret_delay = d;
		}
		return;
	case CPROF_EVENTS_MUTEX:
		*ret_events = rate;
		*ret_delay = d * rate;
		return;
	default:
		*ret_events = 1;
		*ret_delay = 0;
	}
}

int contention_add(struct contention *c, const struct cprof_wire_event *ev)
{
	struct estimates *b;
	double events, delay;
	size_t skip = 0, i;
	int n, r;

	if (cprof_wire_event_events(ev->kind) != c->opts.events) {
		c->stats.ignored++;
		return 0;
	}
	c->stats.records++;
	n = record_stacks_pcs(&c->stacks, ev->regs, ev->stack, ev->stack_size,
			      ev->flags & CPROF_EVENT_WALKED, c->pcs, MAX_FRAMES);
	c->stats.walked = c->stacks.walked;
	if (n <= 0)
		return 0;
	/* The agent's own frames (record_event, the hook) lead: drop them. */
	while (skip < (size_t)n && c->pcs[skip] >= c->agent_start && c->pcs[skip] < c->agent_end)
		skip++;
	if (skip == (size_t)n)
		return 0;
	c->stats.unwound++;
	r = stack_table_find(&c->buckets, c->pcs + skip, (size_t)n - skip, 0, &i);
	if (r < 0)
		return r;
	b = estimates_of(&c->buckets.buckets[i]);
	estimate(c, ev, &events, &delay);
	b->events += events;
	b->delay_ns += delay;
	c->stats.events += events;
	c->stats.delay_ns += delay;
	return 0;
}

static int64_t round_value(double v)
{
	return v >= 9.2e18 ? INT64_MAX : (int64_t)llround(v);
}

int contention_build(struct contention *c, const char *command_line, int64_t time_nanos,
		     int64_t duration_nanos, struct profile **ret)
{
	static const struct profile_value_type waits[] = { { "contentions", "count" },
							   { "delay", "nanoseconds" } };
	static const struct profile_value_type creates[] = { { "threadcreate", "count" } };
	bool tc = c->opts.events == CPROF_EVENTS_THREADCREATE;
	struct profile *p;
	int r;

	r = profile_new(&p, tc ? creates : waits, tc ? 1 : 2);
	if (r < 0)
		return r;
	p->time_nanos = time_nanos;
	p->duration_nanos = duration_nanos;
	r = tc ? profile_set_period(p, "threadcreate", "count", 1)
	       : profile_set_period(p, "contentions", "count", 1);
	if (r == 0)
		r = profile_set_drop_frames(p, "^cprof_agent|^hook_|^record_event$");
	if (r == 0 && command_line)
		r = profile_add_comment(p, command_line);
	for (size_t i = 0; r == 0 && i < c->buckets.nbuckets; i++) {
		const struct estimates *b = estimates_of(&c->buckets.buckets[i]);
		int64_t values[2] = { round_value(b->events), round_value(b->delay_ns) };

		if (values[0] == 0 && values[1] == 0)
			values[0] = 1;
		r = stack_table_add_sample(&c->buckets, p, i, values, NULL, 0);
	}
	if (r == 0)
		r = symbolizer_fill_profile(c->opts.sym, p);
	if (r < 0) {
		profile_free(p);
		return r;
	}
	*ret = p;
	return 0;
}

static int by_delay(const void *a, const void *b)
{
	const struct estimates *x = estimates_of(*(const struct stack_bucket *const *)a);
	const struct estimates *y = estimates_of(*(const struct stack_bucket *const *)b);
	double kx = x->delay_ns ? x->delay_ns : x->events, ky = y->delay_ns ? y->delay_ns : y->events;

	return (kx < ky) - (kx > ky);
}

int contention_write_text(struct contention *c, uint64_t rate, FILE *f)
{
	size_t n = c->buckets.nbuckets;
	const struct stack_bucket **order = calloc(n + 1, sizeof(*order));
	bool tc = c->opts.events == CPROF_EVENTS_THREADCREATE;

	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		order[i] = &c->buckets.buckets[i];
	qsort(order, n, sizeof(*order), by_delay);
	if (tc) {
		fprintf(f, "threadcreate profile: total %lld\n", (long long)round_value(c->stats.events));
	} else {
		fprintf(f, "--- %s:\n", c->opts.events == CPROF_EVENTS_MUTEX ? "mutex" : "contention");
		fprintf(f, "cycles/second=1000000000\n");
		fprintf(f, "sampling period=%llu\n", (unsigned long long)rate);
	}
	for (size_t i = 0; i < n; i++) {
		const struct stack_bucket *b = order[i];
		const struct estimates *e = estimates_of(b);

		if (tc)
			fprintf(f, "%lld @", (long long)round_value(e->events));
		else
			fprintf(f, "%lld %lld @", (long long)round_value(e->delay_ns),
				(long long)round_value(e->events));
		for (size_t j = 0; j < b->npcs; j++)
			fprintf(f, " %#llx", (unsigned long long)b->pcs[j]);
		fputc('\n', f);
		symbolizer_write_frames(c->opts.sym, b->pcs, b->npcs, f);
		if (tc)
			fputc('\n', f);
	}
	free(order);
	return ferror(f) ? -EIO : 0;
}
