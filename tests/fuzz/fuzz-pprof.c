/*
 * pprof_decode() on arbitrary bytes (a .pb.gz is whatever the user points
 * cprof at). A decoded profile must be self-consistent (every id resolves),
 * and decode is a fixed point after one round: encode -> decode gives the same
 * counts, and encoding that again gives the same bytes. The gzip path is
 * round-tripped too.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "pprof/pprof.h"

static void check_consistent(const struct profile *p)
{
	for (size_t i = 0; i < p->nfunctions; i++) {
		const struct profile_function *f = &p->functions[i];

		FUZZ_CHECK(f->id == i + 1, "function %zu has id %llu", i,
			   (unsigned long long)f->id);
		FUZZ_CHECK(f->name && f->system_name && f->file, "function %zu: NULL string", i);
	}
	for (size_t i = 0; i < p->nmappings; i++)
		FUZZ_CHECK(p->mappings[i].id == i + 1, "mapping %zu has id %llu", i,
			   (unsigned long long)p->mappings[i].id);
	for (size_t i = 0; i < p->nlocations; i++) {
		const struct profile_location *l = &p->locations[i];

		FUZZ_CHECK(l->id == i + 1, "location %zu has id %llu", i,
			   (unsigned long long)l->id);
		FUZZ_CHECK(l->mapping_id <= p->nmappings, "location %zu: mapping %llu of %zu", i,
			   (unsigned long long)l->mapping_id, p->nmappings);
		for (size_t j = 0; j < l->nlines; j++)
			FUZZ_CHECK(l->lines[j].function_id >= 1 &&
					   l->lines[j].function_id <= p->nfunctions,
				   "location %zu line %zu: function %llu of %zu", i, j,
				   (unsigned long long)l->lines[j].function_id, p->nfunctions);
	}
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];

		for (size_t j = 0; j < s->nlocations; j++)
			FUZZ_CHECK(s->location_ids[j] >= 1 && s->location_ids[j] <= p->nlocations,
				   "sample %zu: location %llu of %zu", i,
				   (unsigned long long)s->location_ids[j], p->nlocations);
		for (size_t j = 0; j < s->nlabels; j++)
			FUZZ_CHECK(s->labels[j].key, "sample %zu label %zu: no key", i, j);
	}
	for (size_t i = 0; i < p->nsample_types; i++)
		FUZZ_CHECK(p->sample_types[i].type && p->sample_types[i].unit,
			   "sample type %zu: NULL string", i);
	for (size_t i = 0; i < p->ncomments; i++)
		FUZZ_CHECK(p->comments[i], "comment %zu: NULL", i);
}

static void check_same_counts(const struct profile *a, const struct profile *b,
			      const char *how)
{
	FUZZ_CHECK(a->nsample_types == b->nsample_types, "%s: sample types %zu -> %zu", how,
		   a->nsample_types, b->nsample_types);
	FUZZ_CHECK(a->nsamples == b->nsamples, "%s: samples %zu -> %zu", how, a->nsamples,
		   b->nsamples);
	FUZZ_CHECK(a->nlocations == b->nlocations, "%s: locations %zu -> %zu", how,
		   a->nlocations, b->nlocations);
	FUZZ_CHECK(a->nfunctions == b->nfunctions, "%s: functions %zu -> %zu", how,
		   a->nfunctions, b->nfunctions);
	FUZZ_CHECK(a->nmappings == b->nmappings, "%s: mappings %zu -> %zu", how, a->nmappings,
		   b->nmappings);
	FUZZ_CHECK(a->ncomments == b->ncomments, "%s: comments %zu -> %zu", how, a->ncomments,
		   b->ncomments);
	for (size_t t = 0; t < a->nsample_types; t++)
		FUZZ_CHECK(profile_total(a, t) == profile_total(b, t), "%s: total %zu %lld -> %lld",
			   how, t, (long long)profile_total(a, t), (long long)profile_total(b, t));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct profile *p1 = NULL, *p2 = NULL, *p3 = NULL, *sentinel = (void *)0x1;
	struct profile *out = sentinel;
	uint8_t *enc1 = NULL, *enc2 = NULL, *gz = NULL;
	size_t len1, len2, gzlen;
	int r;

	r = pprof_decode(data, size, &out);
	if (r < 0) {
		FUZZ_CHECK(r == -EBADMSG || r == -EFBIG || r == -ENOMEM, "pprof_decode: %d", r);
		FUZZ_CHECK(out == sentinel, "output clobbered on failure");
		return 0;
	}
	p1 = out;
	check_consistent(p1);

	r = pprof_encode(p1, &enc1, &len1);
	FUZZ_CHECK(r == 0, "pprof_encode of a decoded profile: %d", r);
	r = pprof_decode(enc1, len1, &p2);
	FUZZ_CHECK(r == 0, "pprof_decode of our own encoding: %d", r);
	check_consistent(p2);
	check_same_counts(p1, p2, "encode+decode");

	r = pprof_encode(p2, &enc2, &len2);
	FUZZ_CHECK(r == 0, "second pprof_encode: %d", r);
	FUZZ_CHECK(len1 == len2 && !memcmp(enc1, enc2, len1),
		   "encode(decode(encode(p))) differs from encode(p): %zu vs %zu bytes", len1,
		   len2);

	r = pprof_encode_gzip(p2, &gz, &gzlen);
	FUZZ_CHECK(r == 0, "pprof_encode_gzip: %d", r);
	r = pprof_decode(gz, gzlen, &p3);
	FUZZ_CHECK(r == 0, "pprof_decode of our own gzip: %d", r);
	check_same_counts(p2, p3, "gzip+decode");

	free(gz);
	free(enc2);
	free(enc1);
	profile_free(p3);
	profile_free(p2);
	profile_free(p1);
	return 0;
}
