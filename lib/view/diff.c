/*
 * Two profiles compared, as go tool pprof -diff_base OLD NEW, -base OLD NEW
 * and -normalize compare them (pprof's driver, fetchProfiles): with
 * -normalize NEW is scaled so that each sample type sums to OLD's
 * (Profile.Normalize); with -diff_base OLD's samples get the label
 * pprof::base=true; OLD is scaled by -1 (Profile.Scale) and merged with NEW
 * as profile.Merge merges, so that the views read one profile whose values
 * are NEW less OLD. The label keeps OLD's samples apart from NEW's, and the
 * views take the total of percentages from them (report's computeTotal).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"
#include "view-private.h"

struct view_diff {
	struct profile *merged; /* NEW less OLD: what the views show */
	struct profile *cur;    /* NEW, normalized as in merged: the flame graph's widths */
};

void view_diff_ratios(const struct profile *cur, const struct profile *base, double *ret)
{
	for (size_t i = 0; i < cur->nsample_types; i++) {
		int64_t b = 0, c = 0;

		/* Go's sums wrap; these saturate, which only matters past 2^63. */
		for (size_t k = 0; k < base->nsamples; k++)
			b = add_saturated(b, base->samples[k].values[i]);
		for (size_t k = 0; k < cur->nsamples; k++)
			c = add_saturated(c, cur->samples[k].values[i]);
		ret[i] = c == 0 ? 0.0 : (double)b / (double)c;
	}
}

/* A merge of @n profiles into a new one: @srcs[i] scaled by @ratios[i],
 * labelled pprof::base where @base[i]. */
static int merge(const struct profile *const srcs[], const double *const ratios[],
		 const bool base[], size_t n, struct profile **ret)
{
	struct profile *p = NULL;
	int r;

	r = profile_new(&p, srcs[0]->sample_types, srcs[0]->nsample_types);
	if (r == 0)
		r = profile_merge_headers(p, srcs, n);
	for (size_t i = 0; i < n && r == 0; i++) {
		const struct profile_merge how = { .match = PROFILE_MATCH_KEY, .ratios = ratios[i],
						   .label = base[i] ? VIEW_DIFF_BASE_LABEL : NULL };

		r = profile_merge(p, srcs[i], &how);
	}
	if (r == 0)
		r = profile_drop_zero_samples(p);
	if (r < 0) {
		profile_free(p);
		return r;
	}
	*ret = p;
	return 0;
}

int view_diff_new(const struct profile *cur, const struct profile *base,
		  enum view_diff_mode mode, bool normalize, struct view_diff **ret, char *why,
		  size_t size)
{
	size_t n = cur->nsample_types ? cur->nsample_types : 1;
	double *negate = NULL, *scale = NULL;
	const struct profile *const srcs[2] = { cur, base };
	const bool labels[2] = { false, mode == VIEW_DIFF_BASE };
	struct view_diff *d = NULL;
	int r;

	snprintf(why, size, "out of memory");
	r = profile_merge_compatible(cur, base, why, size);
	if (r < 0)
		return r;
	negate = calloc(n, sizeof(*negate));
	scale = calloc(n, sizeof(*scale));
	d = calloc(1, sizeof(*d));
	r = -ENOMEM;
	if (!negate || !scale || !d)
		goto out;
	for (size_t i = 0; i < n; i++) {
		scale[i] = 1;
		negate[i] = -1;
	}
	if (normalize)
		view_diff_ratios(cur, base, scale);
	r = merge(srcs, (const double *const[]){ scale }, labels, 1, &d->cur);
	if (r == 0)
		r = merge(srcs, (const double *const[]){ scale, negate }, labels, 2, &d->merged);
	if (r == -EOVERFLOW)
		snprintf(why, size, "a value of NEW less OLD overflows 64 bits");
out:
	free(negate);
	free(scale);
	if (r < 0) {
		view_diff_free(d);
		return r;
	}
	*ret = d;
	return 0;
}

const struct profile *view_diff_profile(const struct view_diff *d)
{
	return d->merged;
}

void view_diff_free(struct view_diff *d)
{
	if (!d)
		return;
	profile_free(d->merged);
	profile_free(d->cur);
	free(d);
}

/*
 * Each node of @t (NEW's tree) gets the value of the same path in @d (the
 * tree of NEW less OLD), 0 where @d has none: both trees keep children in
 * name order, so the paths are matched by walking both at once.
 */
static int node_deltas(const struct view_tree *t, const struct view_tree *d, int64_t **ret)
{
	struct pair {
		size_t a, b;
	} *stack = NULL;
	size_t n = 0, alloc = 0;
	int64_t *delta = calloc(t->n ? t->n : 1, sizeof(*delta));
	int r = delta ? GROW(stack, 1, alloc) : -ENOMEM;

	if (r < 0)
		goto out;
	if (d->n)
		stack[n++] = (struct pair){ 0, 0 };
	while (n && r == 0) {
		struct pair it = stack[--n];
		size_t b = d->nodes[it.b].first_child;

		delta[it.a] = d->nodes[it.b].total;
		for (size_t a = t->nodes[it.a].first_child; a && r == 0;
		     a = t->nodes[a].next_sibling) {
			int c = 1;

			while (b && (c = strcmp(d->nodes[b].name, t->nodes[a].name)) < 0)
				b = d->nodes[b].next_sibling;
			if (!b || c != 0)
				continue;
			r = GROW(stack, n + 1, alloc);
			if (r == 0)
				stack[n++] = (struct pair){ a, b };
		}
	}
out:
	free(stack);
	if (r < 0) {
		free(delta);
		return r;
	}
	*ret = delta;
	return 0;
}

struct diff_svg_args {
	const struct view_diff *diff;
	size_t index;
	const char *title;
	const struct view_filter *filter;
};

/* The flame graph of a comparison: NEW's widths, coloured by NEW less OLD. */
static int diff_svg_write(const void *arg, FILE *f)
{
	const struct diff_svg_args *a = arg;
	struct view_tree t = { 0 }, d = { 0 };
	int64_t *delta = NULL, max = 0;
	int r;

	r = view_tree_build(a->diff->cur, a->index, a->filter, &t);
	if (r == 0)
		r = view_tree_build(a->diff->merged, a->index, a->filter, &d);
	if (r == 0)
		r = node_deltas(&t, &d, &delta);
	if (r < 0)
		goto out;
	/* flamegraph.pl's scale: the largest change of one stack. */
	for (size_t i = 0; i < d.stacks.n; i++)
		if (abs_saturated(d.stacks.stacks[i].value) > max)
			max = abs_saturated(d.stacks.stacks[i].value);
	r = view_svg_write_tree(&t, a->diff->cur->sample_types[a->index].type, a->title, delta,
				max, f);
out:
	free(delta);
	view_tree_release(&t);
	view_tree_release(&d);
	return r;
}

int view_diff_render(const struct view_diff *d, size_t index, enum view_format format,
		     size_t max_rows, const char *title, const struct view_filter *filter,
		     char **ret, size_t *ret_len)
{
	const struct diff_svg_args a = { d, index, title, filter };

	if (index >= d->merged->nsample_types)
		return -EINVAL;
	if (format != VIEW_SVG)
		return view_render_filtered(d->merged, index, format, max_rows, title, filter, ret,
					    ret_len);
	return view_render_stream(diff_svg_write, &a, ret, ret_len);
}
