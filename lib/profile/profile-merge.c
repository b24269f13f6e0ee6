/*
 * Profiles merged as pprof's profile.Merge merges them: each source's
 * mappings, functions and locations matched to the merged profile's (or
 * added), its samples scaled (Profile.ScaleN) and added to those of the
 * same stack and labels. The comparisons of cprof view and serve's deltas
 * are merges of an old profile scaled by -1 with a new one.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile/profile-private.h"
#include "profile/profile.h"

/* Where one source's mappings, functions and locations went (by id - 1). */
struct merge_source {
	const struct profile *src;
	const struct profile_merge *how;
	struct profile *p;
	struct u64map location_by_key; /* PROFILE_MATCH_KEY: hash -> index in p */
	uint64_t *mapping;  /* merged id, 0: none */
	int64_t *offset;    /* merged start - source start (pprof's mapInfo) */
	uint64_t *function; /* merged id, 0: not yet mapped */
	uint64_t *location; /* merged id, 0: not yet mapped */
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

int profile_merge_compatible(const struct profile *a, const struct profile *b, char *why,
			     size_t size)
{
	char ta[256], tb[256];

	if (!same_type(&a->period_type, &b->period_type)) {
		snprintf(why, size, "incompatible period types %s/%s and %s/%s",
			 a->period_type.type ? a->period_type.type : "",
			 a->period_type.unit ? a->period_type.unit : "",
			 b->period_type.type ? b->period_type.type : "",
			 b->period_type.unit ? b->period_type.unit : "");
		return -EINVAL;
	}
	for (size_t i = 0; i < a->nsample_types; i++)
		if (a->nsample_types != b->nsample_types ||
		    !same_type(&a->sample_types[i], &b->sample_types[i]))
			goto out_types;
	if (a->nsample_types == b->nsample_types)
		return 0;
out_types:
	describe_types(a, ta, sizeof(ta));
	describe_types(b, tb, sizeof(tb));
	snprintf(why, size, "incompatible sample types [%s] and [%s]", ta, tb);
	return -EINVAL;
}

/* pprof's Mapping.key: the size rounded up to 4 KiB, the offset, and the
 * build ID, else the file. Within one process: the same start and file. */
static bool same_mapping(enum profile_match match, const struct profile_mapping *a,
			 const struct profile_mapping *b)
{
	uint64_t sa = (a->limit - a->start + 0xfff) & ~(uint64_t)0xfff,
		 sb = (b->limit - b->start + 0xfff) & ~(uint64_t)0xfff;
	const char *ka = a->build_id && *a->build_id ? a->build_id : a->file ? a->file : "";
	const char *kb = b->build_id && *b->build_id ? b->build_id : b->file ? b->file : "";
	const char *fa = a->file ? a->file : "", *fb = b->file ? b->file : "";

	if (match == PROFILE_MATCH_ADDRESS)
		return a->start == b->start && !strcmp(fa, fb);
	return sa == sb && a->offset == b->offset && !strcmp(ka, kb);
}

/* pprof's mapMapping: a source mapping as the merged one of the same key. */
static int map_mapping(struct merge_source *s, uint64_t id)
{
	const struct profile_mapping *sm;
	int r;

	if (!id || id > s->src->nmappings || s->mapping[id - 1])
		return 0;
	sm = &s->src->mappings[id - 1];
	for (size_t i = 0; i < s->p->nmappings; i++)
		if (same_mapping(s->how->match, &s->p->mappings[i], sm)) {
			s->mapping[id - 1] = s->p->mappings[i].id;
			s->offset[id - 1] = (int64_t)(s->p->mappings[i].start - sm->start);
			return 0;
		}
	r = profile_add_mapping(s->p, sm, &s->mapping[id - 1]);
	s->offset[id - 1] = 0;
	return r;
}

/* pprof's mapFunction: a source function as the merged one of the same
 * name, system name, file and start line. */
static int map_function(struct merge_source *s, uint64_t id)
{
	const struct profile_function *f = &s->src->functions[id - 1];

	if (s->function[id - 1])
		return 0;
	return profile_intern_function(s->p, f->name, f->system_name, f->file, f->start_line,
				       &s->function[id - 1]);
}

static uint64_t location_hash(uint64_t mapping, uint64_t rel, const struct profile_line *lines,
			      size_t n)
{
	uint64_t h = hash_u64(mapping * 0x9e3779b97f4a7c15ULL ^ rel);

	for (size_t i = 0; i < n; i++)
		h = hash_u64(h ^ hash_u64(lines[i].function_id * 31 + (uint64_t)lines[i].line));
	return h;
}

static uint64_t location_key(const struct profile *p, const struct profile_location *l)
{
	uint64_t rel = l->mapping_id ? l->address - p->mappings[l->mapping_id - 1].start
				     : l->address;

	return location_hash(l->mapping_id, rel, l->lines, l->nlines);
}

static bool same_location(const struct profile_location *l, uint64_t mapping, uint64_t address,
			  const struct profile_line *lines, size_t n)
{
	return l->mapping_id == mapping && l->address == address && l->nlines == n &&
	       (n == 0 || !memcmp(l->lines, lines, n * sizeof(*lines)));
}

/* Indexes the merged profile's own locations by pprof's locationKey. */
static int index_locations(struct merge_source *s)
{
	for (size_t i = 0; i < s->p->nlocations; i++) {
		uint64_t h = location_key(s->p, &s->p->locations[i]);
		int r;

		while (u64map_get(&s->location_by_key, h, NULL))
			h++;
		r = u64map_put(&s->location_by_key, h, i);
		if (r < 0)
			return r;
	}
	return 0;
}

/* The merged location of @lines at @address in @mapping by pprof's
 * locationKey (mapping, address relative to it, lines), or 0 with the
 * hash to file a new one under in @ret_h. */
static uint64_t find_location(struct merge_source *s, uint64_t mapping, uint64_t address,
			      const struct profile_line *lines, size_t nlines, uint64_t *ret_h)
{
	struct profile *p = s->p;
	uint64_t rel = mapping ? address - p->mappings[mapping - 1].start : address;
	uint64_t h, idx;

	for (h = location_hash(mapping, rel, lines, nlines);
	     u64map_get(&s->location_by_key, h, &idx); h++)
		if (same_location(&p->locations[idx], mapping, address, lines, nlines))
			return p->locations[idx].id;
	*ret_h = h;
	return 0;
}

/* pprof's mapLocation: a source location as the merged one it matches,
 * added with its mapping and functions where there is none. */
static int map_location(struct merge_source *s, uint64_t id)
{
	const struct profile_location *sl = &s->src->locations[id - 1];
	struct profile_line *lines = NULL;
	uint64_t mapping = 0, address = sl->address, h = 0, idx;
	size_t nlines = 0;
	int r;

	/* Within one process an address is one place. */
	if (s->how->match == PROFILE_MATCH_ADDRESS &&
	    u64map_get(&s->p->location_by_address, address, &idx)) {
		s->location[id - 1] = s->p->locations[idx].id;
		return 0;
	}
	r = map_mapping(s, sl->mapping_id);
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
	for (size_t i = 0; i < sl->nlines && r == 0; i++) {
		uint64_t fid = sl->lines[i].function_id;

		if (!fid || fid > s->src->nfunctions)
			continue;
		r = map_function(s, fid);
		lines[nlines].line = sl->lines[i].line;
		lines[nlines++].function_id = s->function[fid - 1];
	}
	if (r < 0)
		goto out;
	if (s->how->match == PROFILE_MATCH_KEY)
		s->location[id - 1] = find_location(s, mapping, address, lines, nlines, &h);
	if (s->location[id - 1])
		goto out;
	r = profile_add_location(s->p, address, mapping, lines, nlines, &s->location[id - 1]);
	if (r == 0 && s->how->match == PROFILE_MATCH_KEY)
		r = u64map_put(&s->location_by_key, h, s->location[id - 1] - 1);
out:
	free(lines);
	return r;
}

/* Whether @key is one of those @how sets itself. */
static bool replaced(const struct profile_merge *how, const char *key)
{
	if (how->label && !strcmp(key, how->label))
		return true;
	for (size_t i = 0; i < how->nlabels; i++)
		if (!strcmp(key, how->labels[i].key))
			return true;
	return false;
}

/* Labels in one order (by key, strings first, stable), as pprof's
 * sampleKey sorts them, where profiles of other producers meet; with
 * how->label, that label set to "true" in place of any, and how->labels
 * in place of theirs. */
static int sample_labels(const struct profile_sample *s, const struct profile_merge *how,
			 struct profile_label **ret, size_t *ret_n)
{
	struct profile_label *l = calloc(s->nlabels + 1 + how->nlabels, sizeof(*l));
	size_t n = 0;

	if (!l)
		return -ENOMEM;
	for (size_t i = 0; i < s->nlabels; i++)
		if (!replaced(how, s->labels[i].key))
			l[n++] = s->labels[i];
	if (how->label)
		l[n++] = (struct profile_label){ .key = how->label, .str = "true" };
	for (size_t i = 0; i < how->nlabels; i++)
		l[n++] = how->labels[i];
	for (size_t i = 1; how->match == PROFILE_MATCH_KEY && i < n; i++) {
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

static int merge_samples(struct merge_source *s)
{
	const double *ratios = s->how->ratios;
	size_t ntypes = s->p->nsample_types;
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
			double ratio = ratios ? ratios[t] : 1;

			values[t] = scale_value(ss->values[t], ratio);
			zero &= values[t] == 0;
			scaled |= ratio != 1;
			kept |= ratio != 1 && values[t] != 0;
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
				r = map_location(s, id);
			ids[nids++] = s->location[id - 1];
		}
		if (r == 0)
			r = sample_labels(ss, s->how, &labels, &nlabels);
		if (r == 0)
			r = profile_add_sample(s->p, ids, nids, values, labels, nlabels);
		free(labels);
	}
	free(ids);
	free(values);
	return r;
}

int profile_merge(struct profile *p, const struct profile *src, const struct profile_merge *how)
{
	struct merge_source s = { .src = src, .how = how, .p = p };
	int r = -ENOMEM;

	if (p->nsample_types != src->nsample_types)
		return -EINVAL;
	u64map_init(&s.location_by_key);
	s.mapping = calloc(src->nmappings + 1, sizeof(*s.mapping));
	s.offset = calloc(src->nmappings + 1, sizeof(*s.offset));
	s.function = calloc(src->nfunctions + 1, sizeof(*s.function));
	s.location = calloc(src->nlocations + 1, sizeof(*s.location));
	if (!s.mapping || !s.offset || !s.function || !s.location)
		goto out;
	r = how->match == PROFILE_MATCH_KEY ? index_locations(&s) : 0;
	/* The first mapping is the main binary's: pprof keeps it first. */
	if (r == 0 && p->nmappings == 0 && src->nmappings)
		r = map_mapping(&s, 1);
	if (r == 0)
		r = merge_samples(&s);
out:
	u64map_release(&s.location_by_key);
	free(s.mapping);
	free(s.offset);
	free(s.function);
	free(s.location);
	return r;
}

static bool all_zero(const struct profile *p, const struct profile_sample *s)
{
	for (size_t i = 0; i < p->nsample_types; i++)
		if (s->values[i])
			return false;
	return true;
}

/* The dedup map is rebuilt for the samples that stay (it holds indexes). */
int profile_drop_zero_samples(struct profile *p)
{
	size_t n = 0;

	for (size_t i = 0; i < p->nsamples; i++) {
		struct profile_sample *s = &p->samples[i];

		if (all_zero(p, s)) {
			free(s->location_ids);
			free(s->values);
			free(s->labels);
			continue;
		}
		p->samples[n++] = *s;
	}
	p->nsamples = n;
	u64map_release(&p->sample_by_key);
	u64map_init(&p->sample_by_key);
	for (size_t i = 0; i < n; i++) {
		const struct profile_sample *s = &p->samples[i];
		uint64_t h = profile_sample_hash(s->location_ids, s->nlocations, s->labels,
						 s->nlabels);
		int r;

		while (u64map_get(&p->sample_by_key, h, NULL))
			h++;
		r = u64map_put(&p->sample_by_key, h, i);
		if (r < 0)
			return r;
	}
	return 0;
}

int profile_merge_headers(struct profile *p, const struct profile *const srcs[], size_t n)
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

int profile_subtract(struct profile *p, const struct profile *base)
{
	struct profile_merge how = { .match = PROFILE_MATCH_ADDRESS };
	double *ratios;
	char why[600];
	int r;

	if (profile_merge_compatible(p, base, why, sizeof(why)) < 0)
		return -EINVAL;
	ratios = malloc((p->nsample_types ? p->nsample_types : 1) * sizeof(*ratios));
	if (!ratios)
		return -ENOMEM;
	for (size_t i = 0; i < p->nsample_types; i++)
		ratios[i] = -1;
	how.ratios = ratios;
	r = profile_merge(p, base, &how);
	free(ratios);
	return r < 0 ? r : profile_drop_zero_samples(p);
}
