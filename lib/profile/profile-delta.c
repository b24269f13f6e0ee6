/*
 * One profile less another, as Go's net/http/pprof serves a delta
 * (serveDeltaProfile: the first profile scaled by -1, merged with the
 * second; profile.Merge drops the samples that come to zero).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "profile/profile-private.h"
#include "profile/profile.h"

/* @base's mapping @id as one of @p's (the same start and file), added if
 * @p has none. 0 for none. */
static int mapping_in(struct profile *p, const struct profile *base, uint64_t id,
		      uint64_t *ret)
{
	const struct profile_mapping *m;

	*ret = 0;
	if (!id || id > base->nmappings)
		return 0;
	m = &base->mappings[id - 1];
	for (size_t i = 0; i < p->nmappings; i++)
		if (p->mappings[i].start == m->start && !strcmp(p->mappings[i].file, m->file)) {
			*ret = p->mappings[i].id;
			return 0;
		}
	return profile_add_mapping(p, m, ret);
}

/* @base's location @id as one of @p's: the one at its address, else a copy
 * with its functions and mapping. */
static int location_in(struct profile *p, const struct profile *base, uint64_t id,
		       uint64_t *ret)
{
	const struct profile_location *l;
	struct profile_line *lines = NULL;
	uint64_t idx, mapping;
	int r;

	/* Ids are 1-based indexes here (profile_add_location()); one that is
	 * not is a profile this code did not build. */
	if (!id || id > base->nlocations)
		return -EINVAL;
	l = &base->locations[id - 1];
	for (size_t i = 0; i < l->nlines; i++)
		if (!l->lines[i].function_id || l->lines[i].function_id > base->nfunctions)
			return -EINVAL;
	if (u64map_get(&p->location_by_address, l->address, &idx)) {
		*ret = p->locations[idx].id;
		return 0;
	}
	r = mapping_in(p, base, l->mapping_id, &mapping);
	if (r < 0)
		return r;
	if (l->nlines) {
		lines = calloc(l->nlines, sizeof(*lines));
		if (!lines)
			return -ENOMEM;
	}
	for (size_t i = 0; i < l->nlines && r == 0; i++) {
		const struct profile_function *f = &base->functions[l->lines[i].function_id - 1];

		lines[i].line = l->lines[i].line;
		r = profile_intern_function(p, f->name, f->system_name, f->file, f->start_line,
					    &lines[i].function_id);
	}
	if (r == 0)
		r = profile_add_location(p, l->address, mapping, lines, l->nlines, ret);
	free(lines);
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

int profile_subtract(struct profile *p, const struct profile *base)
{
	uint64_t *ids = NULL;
	int64_t *values = NULL;
	size_t ids_alloc = 0;
	int r = 0;

	if (p->nsample_types != base->nsample_types)
		return -EINVAL;
	for (size_t i = 0; i < p->nsample_types; i++)
		if (strcmp(p->sample_types[i].type, base->sample_types[i].type) != 0)
			return -EINVAL;
	values = calloc(p->nsample_types ? p->nsample_types : 1, sizeof(*values));
	if (!values)
		return -ENOMEM;
	for (size_t i = 0; i < base->nsamples && r == 0; i++) {
		const struct profile_sample *s = &base->samples[i];

		r = GROW(ids, s->nlocations, ids_alloc);
		for (size_t j = 0; j < s->nlocations && r == 0; j++)
			r = location_in(p, base, s->location_ids[j], &ids[j]);
		for (size_t j = 0; j < p->nsample_types; j++)
			values[j] = s->values[j] == INT64_MIN ? INT64_MAX : -s->values[j];
		/* Merged into @p's sample of the same stack and labels, if any. */
		if (r == 0)
			r = profile_add_sample(p, ids, s->nlocations, values, s->labels,
					       s->nlabels);
	}
	if (r == 0)
		r = profile_drop_zero_samples(p);
	free(ids);
	free(values);
	return r;
}
