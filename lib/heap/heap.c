#include "heap/heap.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "profile/stack-table.h"
#include "util/util.h"

#define MAX_FRAMES 128

/* A bucket's counts: its stack (leaf first, agent frames dropped) and its
 * key, the bytes per block, are the stack table's. */
struct counts {
	uint64_t alloc_objects, alloc_bytes;
	uint64_t free_objects, free_bytes;
	uint64_t live_objects; /* summed over the live set's snapshots (heap_add_live) */
};

static struct counts *counts_of(const struct stack_bucket *b)
{
	return b->value;
}

struct heap {
	struct heap_opts opts;
	struct heap_stats stats;
	struct stack_table buckets;
	struct u64map live; /* block address -> bucket index + 1, until it is freed */
	struct record_stacks stacks;
	uint64_t pcs[MAX_FRAMES];
	uint64_t agent_start, agent_end;
	uint64_t live_snapshots; /* > 0: inuse from them, not from the stream */
	uint64_t live_recorded;  /* snapshot entries whose ALLOC we have, summed */
	uint64_t live_unknown;   /* the others: unrecorded, or never reached us */
	uint64_t lost_allocs;    /* ALLOCs the agent could not publish */
	uint64_t lost_records;   /* any record it could not publish */
};

int heap_new(struct heap **ret, const struct heap_opts *o)
{
	struct heap *h = calloc(1, sizeof(*h));

	if (!h)
		return -ENOMEM;
	h->opts = *o;
	stack_table_init(&h->buckets, sizeof(struct counts));
	u64map_init(&h->live);
	record_stacks_init(&h->stacks, o->unw, symbolizer_dwfl(o->sym), o->put_rule,
			   o->put_rule_arg);
	record_stacks_refresh_with(&h->stacks, symbolizer_refresh_arg, o->sym);
	symbolizer_module_range(o->sym, "cprof-agent", &h->agent_start, &h->agent_end);
	*ret = h;
	return 0;
}

void heap_free(struct heap *h)
{
	if (!h)
		return;
	stack_table_release(&h->buckets);
	u64map_release(&h->live);
	record_stacks_release(&h->stacks);
	free(h);
}

const struct heap_stats *heap_stats(const struct heap *h)
{
	return &h->stats;
}

int heap_add_alloc(struct heap *h, const struct cprof_wire_alloc *a)
{
	struct counts *b;
	size_t skip = 0, i;
	int n, r;

	h->stats.allocs++;
	if (a->rate != h->opts.rate)
		h->stats.other_rate++;
	n = record_stacks_pcs(&h->stacks, a->regs, a->stack, a->stack_size,
			      a->flags & CPROF_ALLOC_WALKED, h->pcs, MAX_FRAMES);
	h->stats.walked = h->stacks.walked;
	if (n <= 0) {
		/* Not even a PC: count it at an unknown place rather than lose it. */
		h->pcs[0] = 0;
		n = 1;
	}
	/* The agent's frames (the hook, its sampling path) lead: drop them. */
	while (skip + 1 < (size_t)n && h->pcs[skip] >= h->agent_start &&
	       h->pcs[skip] < h->agent_end)
		skip++;
	if (skip + 1 < (size_t)n || !(h->pcs[skip] >= h->agent_start && h->pcs[skip] < h->agent_end))
		h->stats.unwound++;
	r = stack_table_find(&h->buckets, h->pcs + skip, (size_t)n - skip, a->size, &i);
	if (r < 0)
		return r;
	b = counts_of(&h->buckets.buckets[i]);
	b->alloc_objects++;
	b->alloc_bytes += a->size;
	if (a->flags & CPROF_ALLOC_UNTRACKED) {
		h->stats.untracked++;
		return 0;
	}
	return u64map_put(&h->live, a->address, i + 1);
}

int heap_add_free(struct heap *h, const struct cprof_wire_free *f)
{
	const struct stack_bucket *b;
	uint64_t id;

	if (!u64map_get(&h->live, f->address, &id) || id == 0 || id > h->buckets.nbuckets) {
		h->stats.unknown_frees++;
		return 0;
	}
	b = &h->buckets.buckets[id - 1];
	counts_of(b)->free_objects++;
	counts_of(b)->free_bytes += b->key;
	h->stats.frees++;
	/* Gone, not kept as freed: a server that runs for days allocates
	 * at ever new addresses. */
	u64map_del(&h->live, f->address);
	return 0;
}

int heap_add_live(struct heap *h, const struct cprof_wire_live *live, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t id;

		if ((live[i].size & CPROF_LIVE_UNRECORDED) ||
		    !u64map_get(&h->live, live[i].address, &id) || id == 0 ||
		    id > h->buckets.nbuckets) {
			h->live_unknown++;
			continue;
		}
		counts_of(&h->buckets.buckets[id - 1])->live_objects++;
		h->live_recorded++;
	}
	h->live_snapshots++;
	return 0;
}

void heap_reset_live(struct heap *h)
{
	for (size_t i = 0; i < h->buckets.nbuckets; i++)
		counts_of(&h->buckets.buckets[i])->live_objects = 0;
	h->live_snapshots = h->live_recorded = h->live_unknown = 0;
}

void heap_set_lost(struct heap *h, uint64_t lost_allocs, uint64_t lost_records)
{
	h->lost_allocs = lost_allocs;
	h->lost_records = lost_records;
}

/*
 * What stands for the samples cprof never saw: every recorded one stands
 * for (seen + unseen) / seen, the unseen being a random share of the same
 * draws (a full ring drops whatever comes, whatever its stack). 1 when
 * nothing was lost; 0 when nothing was seen.
 */
static double unseen_factor(uint64_t seen, uint64_t unseen)
{
	if (!unseen)
		return 1.0;
	return seen ? (double)(seen + unseen) / (double)seen : 0.0;
}

double heap_alloc_factor(const struct heap *h)
{
	return unseen_factor(h->stats.allocs, h->lost_allocs);
}

double heap_inuse_factor(const struct heap *h)
{
	if (!h->live_snapshots)
		return h->lost_records ? 0.0 : 1.0;
	return unseen_factor(h->live_recorded, h->live_unknown);
}

double heap_scale(double count, double bytes, uint64_t rate)
{
	double avg;

	if (count <= 0 || bytes <= 0 || rate <= 1)
		return 1.0;
	avg = bytes / count;
	return 1.0 / (1.0 - exp(-avg / (double)rate));
}

static int64_t to_i64(double v)
{
	return v >= 9.2e18 ? INT64_MAX : (int64_t)v;
}

/* Sampled blocks in use: the snapshot's when there is one, else what the
 * stream of ALLOCs and FREEs says (right only if it lost nothing). */
static double inuse_objects(const struct heap *h, const struct stack_bucket *b)
{
	const struct counts *c = counts_of(b);

	if (h->live_snapshots)
		return (double)c->live_objects / (double)h->live_snapshots;
	return (double)(c->alloc_objects - c->free_objects);
}

static double inuse_bytes(const struct heap *h, const struct stack_bucket *b)
{
	return inuse_objects(h, b) * (double)b->key;
}

/* The profile says where its figures are estimates or absent. */
static int note_estimates(const struct heap *h, struct profile *p, double alloc_factor,
			  double inuse_factor)
{
	char text[256];
	int r = 0;

	if (alloc_factor != 1.0) {
		snprintf(text, sizeof(text),
			 "alloc_objects and alloc_space scaled by %.4f: %llu sampled %s "
			 "recorded (the agent's ring was full) beside %llu recorded",
			 alloc_factor, (unsigned long long)h->lost_allocs,
			 plural(h->lost_allocs, "allocation was not", "allocations were not"),
			 (unsigned long long)h->stats.allocs);
		r = profile_add_comment(p, text);
	}
	if (r == 0 && h->live_snapshots) {
		char when[96];

		/* A window's snapshots are its last second's; a background
		 * session (heap --keep, serve) takes one when asked. */
		if (h->live_snapshots == 1)
			snprintf(when, sizeof(when), "one snapshot at the profile's end");
		else
			snprintf(when, sizeof(when), "the mean of %llu snapshots in the window's "
				 "last second", (unsigned long long)h->live_snapshots);
		snprintf(text, sizeof(text),
			 "inuse from the agent's live set, %s: %.1f sampled blocks, %.1f of them "
			 "without a recorded stack%s",
			 when, (double)(h->live_recorded + h->live_unknown) /
			 (double)h->live_snapshots,
			 (double)h->live_unknown / (double)h->live_snapshots,
			 h->live_unknown ? " (their share spread over the others)" : "");
		r = profile_add_comment(p, text);
	} else if (r == 0 && inuse_factor == 0.0) {
		r = profile_add_comment(p, "inuse_objects and inuse_space not measured (0): "
					   "records were lost and the live set could not be read");
	}
	return r;
}

int heap_build(struct heap *h, const char *default_type, const char *command_line,
	       int64_t time_nanos, int64_t duration_nanos, struct profile **ret)
{
	static const struct profile_value_type types[] = {
		{ "alloc_objects", "count" },
		{ "alloc_space", "bytes" },
		{ "inuse_objects", "count" },
		{ "inuse_space", "bytes" },
	};
	double alloc_factor = heap_alloc_factor(h), inuse_factor = heap_inuse_factor(h);
	struct profile *p;
	int r;

	r = profile_new(&p, types, 4);
	if (r < 0)
		return r;
	p->time_nanos = time_nanos;
	p->duration_nanos = duration_nanos;
	r = profile_set_period(p, "space", "bytes", (int64_t)h->opts.rate);
	if (r == 0 && default_type)
		r = profile_set_default_sample_type(p, default_type);
	if (r == 0)
		r = profile_set_drop_frames(p, "^cprof_agent|^hook_|^record_alloc$|^alloc_slow$");
	if (r == 0 && command_line)
		r = profile_add_comment(p, command_line);
	if (r == 0)
		r = note_estimates(h, p, alloc_factor, inuse_factor);
	for (size_t i = 0; r == 0 && i < h->buckets.nbuckets; i++) {
		const struct stack_bucket *b = &h->buckets.buckets[i];
		const struct counts *c = counts_of(b);
		double ac = (double)c->alloc_objects, ab = (double)c->alloc_bytes;
		double ic = inuse_objects(h, b), ib = inuse_bytes(h, b);
		double as = heap_scale(ac, ab, h->opts.rate) * alloc_factor;
		double is = heap_scale(ic, ib, h->opts.rate) * inuse_factor;
		int64_t values[4] = { to_i64(ac * as), to_i64(ab * as), to_i64(ic * is),
				      to_i64(ib * is) };
		struct profile_label label = { .key = "bytes", .num = (int64_t)b->key,
					       .num_unit = "bytes" };

		r = stack_table_add_sample(&h->buckets, p, i, values, &label, 1);
	}
	if (r == 0)
		r = symbolizer_fill_profile(h->opts.sym, p);
	if (r < 0) {
		profile_free(p);
		return r;
	}
	*ret = p;
	return 0;
}

static const struct heap *sorting; /* qsort has no argument */

static int by_inuse_bytes(const void *a, const void *b)
{
	const struct stack_bucket *x = *(const struct stack_bucket *const *)a;
	const struct stack_bucket *y = *(const struct stack_bucket *const *)b;
	double ix = inuse_bytes(sorting, x), iy = inuse_bytes(sorting, y);
	uint64_t ax = counts_of(x)->alloc_bytes, ay = counts_of(y)->alloc_bytes;

	if (ix != iy)
		return ix < iy ? 1 : -1;
	return (ax < ay) - (ax > ay);
}

int heap_write_text(struct heap *h, FILE *f)
{
	size_t n = h->buckets.nbuckets;
	const struct stack_bucket **order = calloc(n + 1, sizeof(*order));
	uint64_t io = 0, ib = 0, ao = 0, ab = 0;

	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		order[i] = &h->buckets.buckets[i];
		io += (uint64_t)llround(inuse_objects(h, order[i]));
		ib += (uint64_t)llround(inuse_bytes(h, order[i]));
		ao += counts_of(order[i])->alloc_objects;
		ab += counts_of(order[i])->alloc_bytes;
	}
	sorting = h;
	qsort(order, n, sizeof(*order), by_inuse_bytes);
	fprintf(f, "heap profile: %llu: %llu [%llu: %llu] @ heap/%llu\n", (unsigned long long)io,
		(unsigned long long)ib, (unsigned long long)ao, (unsigned long long)ab,
		(unsigned long long)(2 * h->opts.rate));
	for (size_t i = 0; i < n; i++) {
		const struct stack_bucket *b = order[i];

		fprintf(f, "%llu: %llu [%llu: %llu] @", (unsigned long long)llround(inuse_objects(h, b)),
			(unsigned long long)llround(inuse_bytes(h, b)),
			(unsigned long long)counts_of(b)->alloc_objects,
			(unsigned long long)counts_of(b)->alloc_bytes);
		for (size_t j = 0; j < b->npcs; j++)
			fprintf(f, " %#llx", (unsigned long long)b->pcs[j]);
		fputc('\n', f);
		symbolizer_write_frames(h->opts.sym, b->pcs, b->npcs, f);
		fputc('\n', f);
	}
	fprintf(f, "# cprof\n# samples = %llu\n# frees = %llu\n# untracked = %llu\n# walked = %llu\n",
		(unsigned long long)h->stats.allocs, (unsigned long long)h->stats.frees,
		(unsigned long long)h->stats.untracked, (unsigned long long)h->stats.walked);
	free(order);
	return ferror(f) ? -EIO : 0;
}
