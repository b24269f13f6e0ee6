/* pprof -top: per-function flat and cum, with pprof's header lines. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/util.h"
#include "view-private.h"

static int compare_flat_name(const void *a, const void *b)
{
	const struct view_func *x = a, *y = b;
	int64_t fx = abs_saturated(x->flat), fy = abs_saturated(y->flat);
	int64_t cx = abs_saturated(x->cum), cy = abs_saturated(y->cum);
	int c;

	if (fx != fy)
		return fx > fy ? -1 : 1;
	c = strcmp(x->name, y->name);
	if (c)
		return c;
	return cx > cy ? -1 : cx < cy;
}

/* Caller -> callee pairs of function names, for the "(inline)" marks. */
struct edges {
	struct edge {
		const char *caller;
		size_t callee; /* index in the function sums */
		bool called;   /* some call along it was not inlined */
		size_t stack;  /* the last stack it was seen in, + 1 */
	} *e;
	size_t n, alloc;
	struct u64map index; /* hash of the pair -> first index (probed) */
};

/* The pair's first time in stack @stack counts, as pprof's seenEdge has
 * it: a later one in the same stack adds nothing. */
static int note_edge(struct edges *es, const char *caller, size_t callee, uint8_t how,
		     size_t stack)
{
	uint64_t key = hash_u64((uint64_t)(uintptr_t)caller * 31 + callee), i;
	int r;

	/* Collisions probe key + 1: pairs are few, a probe is a compare. */
	for (; u64map_get(&es->index, key, &i); key++)
		if (es->e[i].caller == caller && es->e[i].callee == callee) {
			if (es->e[i].stack != stack + 1)
				es->e[i].called |= (how & VIEW_CALLED) != 0;
			es->e[i].stack = stack + 1;
			return 0;
		}
	r = GROW(es->e, es->n + 1, es->alloc);
	if (r == 0)
		r = u64map_put(&es->index, key, es->n);
	if (r < 0)
		return r;
	es->e[es->n++] = (struct edge){ caller, callee, (how & VIEW_CALLED) != 0, stack + 1 };
	return 0;
}

/* The function sums of merged stacks: names are interned, so a name's
 * pointer is its key. */
static int function_sums(const struct view_stacks *vs, struct view_func **ret, size_t *ret_n)
{
	struct view_func *f = NULL;
	size_t n = 0, w = 0, alloc = 0, *stamp = NULL, stamp_alloc = 0;
	struct u64map slot;
	int r = 0;

	u64map_init(&slot);
	for (size_t i = 0; i < vs->n; i++) {
		const struct view_stack *s = &vs->stacks[i];

		for (size_t k = 0; k < s->n; k++) {
			uint64_t j;

			if (!u64map_get(&slot, (uint64_t)(uintptr_t)s->frames[k], &j)) {
				j = n;
				r = GROW(f, n + 1, alloc);
				if (r == 0)
					r = GROW(stamp, n + 1, stamp_alloc);
				if (r == 0)
					r = u64map_put(&slot, (uint64_t)(uintptr_t)s->frames[k], j);
				if (r < 0)
					goto out;
				f[n] = (struct view_func){ .name = s->frames[k] };
				stamp[n++] = 0;
			}
			if (k == s->n - 1)
				f[j].flat = add_saturated(f[j].flat, s->value);
			/* cum once per sample: recursion must not count twice. */
			if (stamp[j] == i + 1)
				continue;
			stamp[j] = i + 1;
			f[j].cum = add_saturated(f[j].cum, s->value);
		}
	}
	/* pprof's selectNodesForGraph leaves out nodes of nothing: in a
	 * comparison, those whose samples cancel out. */
	for (size_t j = 0; j < n; j++)
		if (f[j].flat || f[j].cum)
			f[w++] = f[j];
	n = w;
	if (n > 1)
		qsort(f, n, sizeof(*f), compare_flat_name);
	*ret = f;
	*ret_n = n;
	f = NULL;
out:
	free(f);
	free(stamp);
	u64map_release(&slot);
	return r;
}

/*
 * pprof's "(inline)" marks on the @n functions shown. The edge into a frame
 * is inline when the frame is an inlined line of its location (not its
 * outermost), in every sample (an edge is inline only if every call along
 * it was). A function is "(inline)" if one of its caller edges is,
 * "(partial-inline)" if others are not. pprof rebuilds its graph of the
 * shown nodes only when its cut-off or --top left some out: a frame's
 * caller is then the nearest shown frame above it. With @all (nothing left
 * out) it keeps its first graph, of every function, those whose samples
 * cancel out in a comparison included: a frame's caller is the frame above
 * it, shown or not.
 */
static int mark_inline(const struct view_stacks *vs, struct view_func *f, size_t n, bool all)
{
	struct edges edges = { 0 };
	struct u64map slot;
	int r = 0;

	u64map_init(&slot);
	u64map_init(&edges.index);
	for (size_t j = 0; j < n && r == 0; j++)
		r = u64map_put(&slot, (uint64_t)(uintptr_t)f[j].name, j);
	for (size_t i = 0; i < vs->n && r == 0; i++) {
		const struct view_stack *s = &vs->stacks[i];
		const char *parent = NULL;

		for (size_t k = 0; k < s->n && r == 0; k++) {
			uint64_t j;

			if (!u64map_get(&slot, (uint64_t)(uintptr_t)s->frames[k], &j)) {
				if (all)
					parent = s->frames[k];
				continue;
			}
			if (parent && parent != s->frames[k])
				r = note_edge(&edges, parent, j, s->how[k], i);
			parent = s->frames[k];
		}
	}
	for (size_t e = 0; e < edges.n && r == 0; e++) {
		f[edges.e[e].callee].inlined |= !edges.e[e].called;
		f[edges.e[e].callee].called |= edges.e[e].called;
	}
	free(edges.e);
	u64map_release(&edges.index);
	u64map_release(&slot);
	return r;
}

int view_functions(const struct profile *p, size_t index, struct view_func **ret, size_t *ret_n)
{
	struct view_stacks vs;
	int r = view_stacks_collect(p, index, NULL, &vs);

	if (r < 0)
		return r;
	r = function_sums(&vs, ret, ret_n);
	if (r == 0)
		r = mark_inline(&vs, *ret, *ret_n, true);
	if (r < 0)
		free(*ret);
	view_stacks_release(&vs);
	return r;
}

/* pprof's ProfileLabels: the lines above the table. */
static void write_labels(const struct profile *p, size_t index, int64_t total,
			 const char *out_unit, FILE *f)
{
	const char *unit = p->sample_types[index].unit;
	char v[64], pct[32];

	if (p->nmappings && p->mappings[0].file && *p->mappings[0].file) {
		const char *base = strrchr(p->mappings[0].file, '/');

		fprintf(f, "File: %s\n", base ? base + 1 : p->mappings[0].file);
	}
	if (p->nmappings && p->mappings[0].build_id && *p->mappings[0].build_id)
		fprintf(f, "Build ID: %s\n", p->mappings[0].build_id);
	for (size_t i = 0; i < p->ncomments; i++)
		if (p->comments[i][0] != '#')
			fprintf(f, "%s\n", p->comments[i]);
	fprintf(f, "Type: %s\n", p->sample_types[index].type);
	if (p->time_nanos) {
		time_t t = (time_t)(p->time_nanos / 1000000000);
		struct tm tm;
		char when[64];

		if (localtime_r(&t, &tm) &&
		    strftime(when, sizeof(when), "%b %-d, %Y at %-I:%M%P (%Z)", &tm))
			fprintf(f, "Time: %s\n", when);
	}
	if (p->duration_nanos) {
		char d[64];

		view_format_value(p->duration_nanos, "nanoseconds", "auto", d, sizeof(d));
		view_format_value(total, unit, out_unit, v, sizeof(v));
		fprintf(f, "Duration: %s, Total samples = %s ", d, v);
		if (!strcmp(unit, "nanoseconds") && total) {
			view_format_percent(total, p->duration_nanos, pct, sizeof(pct));
			fprintf(f, "(%s)", pct);
		}
		fprintf(f, "\n");
	}
}

/* pprof's legendActiveFilters: after the labels, each cut at 80 bytes. */
static void write_filters(const struct view_filter *filter, FILE *f)
{
	size_t n = view_filter_count(filter);

	if (n)
		fprintf(f, "Active filters:\n");
	for (size_t i = 0; i < n; i++) {
		const char *t = view_filter_text(filter, i);

		fprintf(f, "   %.80s%s\n", t, strlen(t) > 80 ? "\u2026" : "");
	}
}

static const char *trim(const char *s)
{
	while (*s == ' ')
		s++;
	return s;
}

int view_write_top(const struct profile *p, size_t index, size_t max_rows, FILE *f)
{
	return view_top_write(p, index, max_rows, NULL, f);
}

int view_top_write(const struct profile *p, size_t index, size_t max_rows,
		   const struct view_filter *filter, FILE *f)
{
	struct view_func *fn = NULL;
	struct view_stacks vs;
	int64_t *mins = NULL, cutoff, shown = 0, sum = 0;
	size_t n = 0, kept = 0, rows;
	char unit_buf[16], a[64], b[64], c[64], pa[32], pb[32], pc[32];
	const char *unit, *out_unit;
	int r;

	r = view_stacks_collect(p, index, filter, &vs);
	if (r < 0)
		return r;
	r = function_sums(&vs, &fn, &n);
	if (r < 0)
		goto out;
	unit = vs.unit;
	/* pprof -top drops nodes whose cum is below 0.5% of its graph's total
	 * (what the filters kept), yet says the cut-off is 0.5% of the whole. */
	cutoff = abs_saturated((int64_t)((double)vs.kept * VIEW_NODE_FRACTION));
	for (size_t i = 0; i < n; i++)
		if (abs_saturated(fn[i].cum) >= cutoff)
			fn[kept++] = fn[i];
	rows = max_rows && max_rows < kept ? max_rows : kept;
	r = mark_inline(&vs, fn, rows, rows == n);
	if (r < 0)
		goto out;
	mins = calloc(rows + 1, sizeof(*mins));
	if (!mins) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < rows; i++) {
		mins[i] = fn[i].flat ? fn[i].flat : fn[i].cum;
		shown = add_saturated(shown, fn[i].flat);
	}
	out_unit = view_output_unit(unit, mins, rows, vs.total, unit_buf, sizeof(unit_buf));
	write_labels(p, index, vs.total, out_unit, f);
	write_filters(filter, f);
	view_format_value(shown, unit, out_unit, a, sizeof(a));
	view_format_value(vs.total, unit, out_unit, b, sizeof(b));
	view_format_percent(shown, vs.total, pa, sizeof(pa));
	fprintf(f, "Showing nodes accounting for %s, %s of %s total\n", a, trim(pa), b);
	if (vs.total && kept < n) {
		view_format_value(abs_saturated((int64_t)((double)vs.total * VIEW_NODE_FRACTION)),
				  unit, out_unit, a, sizeof(a));
		fprintf(f, "Dropped %zu node%s (cum <= %s)\n", n - kept, n - kept > 1 ? "s" : "", a);
	}
	if (vs.total && rows < kept)
		fprintf(f, "Showing top %zu nodes out of %zu\n", rows, kept);
	fprintf(f, "%10s %5s%% %5s%% %10s %5s%%\n", "flat", "flat", "sum", "cum", "cum");
	for (size_t i = 0; i < rows; i++) {
		sum = add_saturated(sum, fn[i].flat);
		view_format_value(fn[i].flat, unit, out_unit, a, sizeof(a));
		view_format_value(fn[i].cum, unit, out_unit, c, sizeof(c));
		view_format_percent(fn[i].flat, vs.total, pa, sizeof(pa));
		view_format_percent(sum, vs.total, pb, sizeof(pb));
		view_format_percent(fn[i].cum, vs.total, pc, sizeof(pc));
		fprintf(f, "%10s %s %s %10s %s  %s%s\n", a, pa, pb, c, pc, fn[i].name,
			!fn[i].inlined ? "" : fn[i].called ? " (partial-inline)" : " (inline)");
	}
	r = view_stream_status(f);
out:
	free(mins);
	free(fn);
	view_stacks_release(&vs);
	return r;
}
