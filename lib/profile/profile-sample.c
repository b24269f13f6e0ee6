#include "profile/profile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "profile/profile-private.h"

uint64_t profile_sample_hash(const uint64_t *location_ids, size_t nlocations,
			     const struct profile_label *labels, size_t nlabels)
{
	uint64_t h = hash_bytes(&nlocations, sizeof(nlocations), 0);

	if (nlocations)
		h = hash_bytes(location_ids, nlocations * sizeof(*location_ids), h);
	for (size_t i = 0; i < nlabels; i++) {
		const void *key[3] = { labels[i].key, labels[i].str, labels[i].num_unit };

		h = hash_bytes(key, sizeof(key), h);
		h = hash_bytes(&labels[i].num, sizeof(labels[i].num), h);
	}
	return h;
}

/*
 * Brings labels into their stored form, so that equal labels are equal
 * field by field: interned strings, no number on a string label, and no
 * unit ("" in pprof) as NULL.
 */
static int store_labels(struct profile *p, const struct profile_label *in, size_t n,
			struct profile_label *out)
{
	for (size_t i = 0; i < n; i++) {
		struct profile_label *l = &out[i];

		if (!in[i].key)
			return -EINVAL;
		memset(l, 0, sizeof(*l));
		l->key = profile_intern(p, in[i].key);
		if (!l->key)
			return -ENOMEM;
		if (in[i].str) {
			l->str = profile_intern(p, in[i].str);
			if (!l->str)
				return -ENOMEM;
			continue;
		}
		l->num = in[i].num;
		if (in[i].num_unit && in[i].num_unit[0]) {
			l->num_unit = profile_intern(p, in[i].num_unit);
			if (!l->num_unit)
				return -ENOMEM;
		}
	}
	return 0;
}

static bool sample_equal(const struct profile_sample *s, const uint64_t *location_ids,
			 size_t nlocations, const struct profile_label *labels, size_t nlabels)
{
	if (s->nlocations != nlocations || s->nlabels != nlabels)
		return false;
	if (nlocations && memcmp(s->location_ids, location_ids, nlocations * sizeof(*location_ids)))
		return false;
	for (size_t i = 0; i < nlabels; i++) {
		const struct profile_label *a = &s->labels[i], *b = &labels[i];

		if (a->key != b->key || a->str != b->str || a->num != b->num ||
		    a->num_unit != b->num_unit)
			return false;
	}
	return true;
}

/* Adds @values into @s, all or nothing. */
static int sample_merge(struct profile_sample *s, const int64_t *values, size_t n)
{
	int64_t sum;

	for (size_t i = 0; i < n; i++)
		if (__builtin_add_overflow(s->values[i], values[i], &sum))
			return -EOVERFLOW;
	for (size_t i = 0; i < n; i++)
		s->values[i] += values[i];
	return 0;
}

static void *dup_array(const void *src, size_t n, size_t elem)
{
	void *d;

	if (!n)
		return NULL;
	d = calloc(n, elem);
	if (d)
		memcpy(d, src, n * elem);
	return d;
}

int profile_add_sample(struct profile *p, const uint64_t *location_ids, size_t nlocations,
		       const int64_t *values, const struct profile_label *labels,
		       size_t nlabels)
{
	struct profile_label *stored = NULL;
	struct profile_sample *s;
	uint64_t h, idx;
	int r;

	if ((nlocations && !location_ids) || (p->nsample_types && !values) ||
	    (nlabels && !labels))
		return -EINVAL;
	for (size_t i = 0; i < nlocations; i++)
		if (!location_ids[i] || location_ids[i] > p->nlocations)
			return -EINVAL;
	if (nlabels) {
		stored = calloc(nlabels, sizeof(*stored));
		if (!stored)
			return -ENOMEM;
		r = store_labels(p, labels, nlabels, stored);
		if (r < 0)
			goto out_free_stored;
	}

	for (h = profile_sample_hash(location_ids, nlocations, stored, nlabels);
	     u64map_get(&p->sample_by_key, h, &idx); h++) {
		s = &p->samples[idx];
		if (sample_equal(s, location_ids, nlocations, stored, nlabels)) {
			r = sample_merge(s, values, p->nsample_types);
			goto out_free_stored;
		}
	}

	r = GROW(p->samples, p->nsamples + 1, p->samples_alloc);
	if (r < 0)
		goto out_free_stored;
	s = &p->samples[p->nsamples];
	memset(s, 0, sizeof(*s));
	s->location_ids = dup_array(location_ids, nlocations, sizeof(*location_ids));
	s->values = dup_array(values, p->nsample_types, sizeof(*values));
	if ((nlocations && !s->location_ids) || (p->nsample_types && !s->values)) {
		r = -ENOMEM;
		goto out_free_copies;
	}
	r = u64map_put(&p->sample_by_key, h, p->nsamples);
	if (r < 0)
		goto out_free_copies;
	s->nlocations = nlocations;
	s->labels = stored;
	s->nlabels = nlabels;
	p->nsamples++;
	return 0;

out_free_copies:
	free(s->location_ids);
	free(s->values);
out_free_stored:
	free(stored);
	return r;
}

const struct profile_label *profile_sample_label(const struct profile_sample *s, const char *key)
{
	for (size_t i = 0; i < s->nlabels; i++)
		if (!strcmp(s->labels[i].key, key))
			return &s->labels[i];
	return NULL;
}

int64_t profile_total(const struct profile *p, size_t i)
{
	int64_t total = 0;

	if (i >= p->nsample_types)
		return 0;
	/* Saturate rather than wrap: a total is read by people. */
	for (size_t j = 0; j < p->nsamples; j++)
		if (__builtin_add_overflow(total, p->samples[j].values[i], &total))
			total = p->samples[j].values[i] > 0 ? INT64_MAX : INT64_MIN;
	return total;
}
