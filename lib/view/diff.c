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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"
#include "view-private.h"

struct view_diff {
	struct profile *merged; /* NEW less OLD: what the views show */
	struct profile *cur;    /* NEW, normalized as in merged: the flame graph's widths */
};

/* Where one source's mappings, functions and locations went (by id - 1). */
struct merge_source {
	const struct profile *src;
	uint64_t *mapping;  /* merged id, 0: none */
	int64_t *offset;    /* merged start - source start (pprof's mapInfo) */
	uint64_t *function; /* merged id */
	uint64_t *location; /* merged id, 0: not yet mapped */
};

/* The merged profile being built; its locations deduplicated by pprof's
 * locationKey, through a hash -> index map probed as lib/profile's are. */
struct merger {
	struct profile *p;
	struct u64map location_by_key;
};

static bool same_type(const struct profile_value_type *a, const struct profile_value_type *b)
{
	if (!a->type || !b->type)
		return !a->type && !b->type;
	return !strcmp(a->type, b->type) && !strcmp(a->unit, b->unit);
}

static void describe_types(const struct profile *p, char *buf, size_t size)
{
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < p->nsample_types && n < size; i++)
		n += (size_t)snprintf(buf + n, size - n, "%s%s/%s", i ? " " : "",
				      p->sample_types[i].type, p->sample_types[i].unit);
}

/* pprof's Profile.compatible: the same period type and sample types. */
static int compatible(const struct profile *cur, const struct profile *base, char *why,
		      size_t size)
{
	char a[256], b[256];

	if (!same_type(&cur->period_type, &base->period_type)) {
		snprintf(why, size, "incompatible period types %s/%s and %s/%s",
			 cur->period_type.type ? cur->period_type.type : "",
			 cur->period_type.unit ? cur->period_type.unit : "",
			 base->period_type.type ? base->period_type.type : "",
			 base->period_type.unit ? base->period_type.unit : "");
		return -EINVAL;
	}
	for (size_t i = 0; i < cur->nsample_types; i++)
		if (cur->nsample_types != base->nsample_types ||
		    !same_type(&cur->sample_types[i], &base->sample_types[i]))
			goto out_types;
	if (cur->nsample_types == base->nsample_types)
		return 0;
out_types:
	describe_types(cur, a, sizeof(a));
	describe_types(base, b, sizeof(b));
	snprintf(why, size, "incompatible sample types [%s] and [%s]", a, b);
	return -EINVAL;
}

/* pprof's Mapping.key: the size rounded up to 4 KiB, the offset, and the
 * build ID, else the file. */
static bool same_mapping(const struct profile_mapping *a, const struct profile_mapping *b)
{
	uint64_t sa = (a->limit - a->start + 0xfff) & ~(uint64_t)0xfff,
		 sb = (b->limit - b->start + 0xfff) & ~(uint64_t)0xfff;
	const char *ka = a->build_id && *a->build_id ? a->build_id : a->file ? a->file : "";
	const char *kb = b->build_id && *b->build_id ? b->build_id : b->file ? b->file : "";

	return sa == sb && a->offset == b->offset && !strcmp(ka, kb);
}

/* pprof's mapMapping: a source mapping as the merged one of the same key. */
static int map_mapping(struct merger *m, struct merge_source *s, uint64_t id)
{
	const struct profile_mapping *sm;
	int r;

	if (!id || id > s->src->nmappings || s->mapping[id - 1])
		return 0;
	sm = &s->src->mappings[id - 1];
	for (size_t i = 0; i < m->p->nmappings; i++)
		if (same_mapping(&m->p->mappings[i], sm)) {
			s->mapping[id - 1] = m->p->mappings[i].id;
			s->offset[id - 1] = (int64_t)(m->p->mappings[i].start - sm->start);
			return 0;
		}
	r = profile_add_mapping(m->p, sm, &s->mapping[id - 1]);
	s->offset[id - 1] = 0;
	return r;
}

static uint64_t location_hash(uint64_t mapping, uint64_t rel, const struct profile_line *lines,
			      size_t n)
{
	uint64_t h = hash_u64(mapping * 0x9e3779b97f4a7c15ULL ^ rel);

	for (size_t i = 0; i < n; i++)
		h = hash_u64(h ^ hash_u64(lines[i].function_id * 31 + (uint64_t)lines[i].line));
	return h;
}

static bool same_location(const struct profile_location *l, uint64_t mapping, uint64_t address,
			  const struct profile_line *lines, size_t n)
{
	return l->mapping_id == mapping && l->address == address && l->nlines == n &&
	       (n == 0 || !memcmp(l->lines, lines, n * sizeof(*lines)));
}

/* pprof's mapLocation: the merged location of the same mapping, address
 * relative to it and lines (functions by name, system name, file, start). */
static int map_location(struct merger *m, struct merge_source *s, uint64_t id)
{
	const struct profile_location *sl = &s->src->locations[id - 1];
	struct profile_line *lines = NULL;
	uint64_t mapping = 0, address = sl->address, rel, h, idx;
	size_t nlines = 0;
	int r;

	r = map_mapping(m, s, sl->mapping_id);
	if (r < 0)
		return r;
	if (sl->mapping_id && sl->mapping_id <= s->src->nmappings) {
		mapping = s->mapping[sl->mapping_id - 1];
		address = sl->address + (uint64_t)s->offset[sl->mapping_id - 1];
	}
	if (sl->nlines) {
		lines = calloc(sl->nlines, sizeof(*lines));
		if (!lines)
			return -ENOMEM;
	}
	/* A line without a known function is left out, as the views do. */
	for (size_t i = 0; i < sl->nlines; i++) {
		uint64_t fid = sl->lines[i].function_id;

		if (!fid || fid > s->src->nfunctions)
			continue;
		lines[nlines].line = sl->lines[i].line;
		lines[nlines++].function_id = s->function[fid - 1];
	}
	rel = mapping ? address - m->p->mappings[mapping - 1].start : address;
	for (h = location_hash(mapping, rel, lines, nlines);
	     u64map_get(&m->location_by_key, h, &idx); h++)
		if (same_location(&m->p->locations[idx], mapping, address, lines, nlines)) {
			s->location[id - 1] = m->p->locations[idx].id;
			goto out;
		}
	r = profile_add_location(m->p, address, mapping, lines, nlines, &s->location[id - 1]);
	if (r == 0)
		r = u64map_put(&m->location_by_key, h, s->location[id - 1] - 1);
out:
	free(lines);
	return r;
}

static int map_functions(struct merger *m, struct merge_source *s)
{
	for (size_t i = 0; i < s->src->nfunctions; i++) {
		const struct profile_function *f = &s->src->functions[i];
		int r = profile_intern_function(m->p, f->name, f->system_name, f->file,
						f->start_line, &s->function[i]);

		if (r < 0)
			return r;
	}
	return 0;
}

/* Labels in one order (by key, strings first, stable), as pprof's
 * sampleKey sorts them; with @base, pprof::base=true in place of any. */
static int sample_labels(const struct profile_sample *s, bool base, struct profile_label **ret,
			 size_t *ret_n)
{
	struct profile_label *l = calloc(s->nlabels + 1, sizeof(*l));
	size_t n = 0;

	if (!l)
		return -ENOMEM;
	for (size_t i = 0; i < s->nlabels; i++)
		if (!base || strcmp(s->labels[i].key, VIEW_DIFF_BASE_LABEL))
			l[n++] = s->labels[i];
	if (base)
		l[n++] = (struct profile_label){ .key = VIEW_DIFF_BASE_LABEL, .str = "true" };
	for (size_t i = 1; i < n; i++) {
		struct profile_label x = l[i];
		size_t j = i;

		for (; j > 0; j--) {
			int c = strcmp(l[j - 1].key, x.key);

			if (c < 0 || (c == 0 && (!x.str || l[j - 1].str)))
				break;
			l[j] = l[j - 1];
		}
		l[j] = x;
	}
	*ret = l;
	*ret_n = n;
	return 0;
}

/* pprof's ScaleN on one value: int64(math.Round(float64(v) * ratio)). */
static int64_t scale_value(int64_t v, double ratio)
{
	double x = round((double)v * ratio);

	if (ratio == 1)
		return v;
	if (x >= 9223372036854775807.0)
		return INT64_MAX;
	if (x <= -9223372036854775808.0)
		return INT64_MIN;
	return (int64_t)x;
}

/* Merges @s->src's samples into m->p, each value scaled by @ratios; with
 * @base, labelled pprof::base. */
static int merge_samples(struct merger *m, struct merge_source *s, const double *ratios,
			 bool base)
{
	size_t ntypes = m->p->nsample_types;
	uint64_t *ids = NULL;
	int64_t *values = calloc(ntypes ? ntypes : 1, sizeof(*values));
	size_t ids_alloc = 0;
	int r = values ? 0 : -ENOMEM;

	for (size_t i = 0; i < s->src->nsamples && r == 0; i++) {
		const struct profile_sample *ss = &s->src->samples[i];
		struct profile_label *labels = NULL;
		size_t nlabels = 0, nids = 0;
		bool zero = true, scaled = false, kept = false;

		for (size_t t = 0; t < ntypes; t++) {
			values[t] = scale_value(ss->values[t], ratios[t]);
			zero &= values[t] == 0;
			scaled |= ratios[t] != 1;
			kept |= ratios[t] != 1 && values[t] != 0;
		}
		/* Merge leaves out samples of zeros; ScaleN those whose scaled
		 * values all came to zero, the unscaled ones not looked at. */
		if (zero || (scaled && !kept))
			continue;
		r = GROW(ids, ss->nlocations, ids_alloc);
		for (size_t l = 0; l < ss->nlocations && r == 0; l++) {
			uint64_t id = ss->location_ids[l];

			if (!id || id > s->src->nlocations)
				continue;
			if (!s->location[id - 1])
				r = map_location(m, s, id);
			ids[nids++] = s->location[id - 1];
		}
		if (r == 0)
			r = sample_labels(ss, base, &labels, &nlabels);
		if (r == 0)
			r = profile_add_sample(m->p, ids, nids, values, labels, nlabels);
		free(labels);
	}
	free(ids);
	free(values);
	return r;
}

static int merge_source(struct merger *m, const struct profile *src, const double *ratios,
			bool base)
{
	struct merge_source s = { .src = src };
	int r = -ENOMEM;

	s.mapping = calloc(src->nmappings + 1, sizeof(*s.mapping));
	s.offset = calloc(src->nmappings + 1, sizeof(*s.offset));
	s.function = calloc(src->nfunctions + 1, sizeof(*s.function));
	s.location = calloc(src->nlocations + 1, sizeof(*s.location));
	if (!s.mapping || !s.offset || !s.function || !s.location)
		goto out;
	/* The first mapping is the main binary's: pprof keeps it first. */
	r = m->p->nmappings == 0 && src->nmappings ? map_mapping(m, &s, 1) : 0;
	if (r == 0)
		r = map_functions(m, &s);
	if (r == 0)
		r = merge_samples(m, &s, ratios, base);
out:
	free(s.mapping);
	free(s.offset);
	free(s.function);
	free(s.location);
	return r;
}

/* pprof's combineHeaders, of NEW then OLD. */
static int merge_headers(struct profile *p, const struct profile *const srcs[], size_t n)
{
	int64_t time = 0, duration = 0, period = 0;
	int r = profile_set_period(p, srcs[0]->period_type.type, srcs[0]->period_type.unit, 0);

	for (size_t i = 0; i < n && r == 0; i++) {
		const struct profile *s = srcs[i];

		if (time == 0 || s->time_nanos < time)
			time = s->time_nanos;
		duration = add_saturated(duration, s->duration_nanos);
		if (period == 0 || period < s->period)
			period = s->period;
		for (size_t c = 0; c < s->ncomments && r == 0; c++) {
			bool seen = false;

			for (size_t k = 0; k < p->ncomments && !seen; k++)
				seen = !strcmp(p->comments[k], s->comments[c]);
			if (!seen)
				r = profile_add_comment(p, s->comments[c]);
		}
		if (r == 0 && (!p->default_sample_type || !*p->default_sample_type))
			r = profile_set_default_sample_type(p, s->default_sample_type);
	}
	if (r == 0)
		r = profile_set_drop_frames(p, srcs[0]->drop_frames);
	p->time_nanos = time;
	p->duration_nanos = duration;
	p->period = period;
	return r;
}

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
	struct merger m = { 0 };
	int r;

	u64map_init(&m.location_by_key);
	r = profile_new(&m.p, srcs[0]->sample_types, srcs[0]->nsample_types);
	if (r == 0)
		r = merge_headers(m.p, srcs, n);
	for (size_t i = 0; i < n && r == 0; i++)
		r = merge_source(&m, srcs[i], ratios[i], base[i]);
	if (r == 0)
		r = profile_drop_zero_samples(m.p);
	u64map_release(&m.location_by_key);
	if (r < 0) {
		profile_free(m.p);
		return r;
	}
	*ret = m.p;
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
	r = compatible(cur, base, why, size);
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
