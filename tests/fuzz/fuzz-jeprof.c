/*
 * jeprof_parse() on arbitrary bytes: jemalloc's heap profile is written by
 * the target (lib/heap/jemalloc-prof.h). On success the result keeps the
 * header's promises, and what it says, written back in jemalloc's layout
 * (prof_dump_header(), prof_dump_gctx()), parses to the same thing.
 *
 * Its seed, corpus/jeprof/jeprofsites.heap, is what Debian's jemalloc 5.3
 * wrote for tests/targets/jeprofsites (MALLOC_CONF=prof:true,prof_accum:true,
 * lg_prof_sample:12, its DUMP argument), the maps section cut to 6 lines.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "heap/jemalloc-prof.h"

static void check(const struct jeprof *j, size_t len)
{
	FUZZ_CHECK(j->period > 0, "period 0");
	FUZZ_CHECK(j->nbuckets <= j->alloc || !j->buckets, "nbuckets %zu alloc %zu", j->nbuckets,
		   j->alloc);
	FUZZ_CHECK(j->maps_offset < len, "maps_offset %zu of %zu", j->maps_offset, len);
	for (size_t i = 0; i < j->nbuckets; i++)
		FUZZ_CHECK(j->buckets[i].naddrs >= 1 && j->buckets[i].naddrs <= JEPROF_MAX_FRAMES,
			   "bucket %zu: %zu addresses", i, j->buckets[i].naddrs);
}

static void print_counts(FILE *f, const struct jeprof_counts *c)
{
	fprintf(f, "%llu: %llu [%llu: %llu]", (unsigned long long)c->cur_objects,
		(unsigned long long)c->cur_bytes, (unsigned long long)c->accum_objects,
		(unsigned long long)c->accum_bytes);
}

/* @j in jemalloc's layout. */
static char *rewrite(const struct jeprof *j, size_t *ret_len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, ret_len);

	FUZZ_CHECK(f, "open_memstream");
	fprintf(f, "heap_v2/%llu\n  t*: ", (unsigned long long)j->period);
	print_counts(f, &j->all);
	fputc('\n', f);
	for (size_t i = 0; i < j->nthreads; i++) {
		fprintf(f, "  t%zu: ", i);
		print_counts(f, &j->all);
		fputs(" name\n", f);
	}
	for (size_t i = 0; i < j->nbuckets; i++) {
		fputc('@', f);
		for (size_t k = 0; k < j->buckets[i].naddrs; k++)
			fprintf(f, " 0x%llx", (unsigned long long)j->buckets[i].addrs[k]);
		fputs("\n  t*: ", f);
		print_counts(f, &j->buckets[i].c);
		fputs("\n  t0: ", f);
		print_counts(f, &j->buckets[i].c);
		fputc('\n', f);
	}
	fputs("\nMAPPED_LIBRARIES:\n", f);
	FUZZ_CHECK(fclose(f) == 0, "fclose");
	return buf;
}

static void same(const struct jeprof *a, const struct jeprof *b)
{
	FUZZ_CHECK(a->period == b->period, "period");
	FUZZ_CHECK(!memcmp(&a->all, &b->all, sizeof(a->all)), "totals");
	FUZZ_CHECK(a->nthreads == b->nthreads, "threads %zu %zu", a->nthreads, b->nthreads);
	FUZZ_CHECK(a->nbuckets == b->nbuckets, "buckets %zu %zu", a->nbuckets, b->nbuckets);
	for (size_t i = 0; i < a->nbuckets; i++) {
		const struct jeprof_bucket *x = &a->buckets[i], *y = &b->buckets[i];

		FUZZ_CHECK(x->naddrs == y->naddrs, "bucket %zu: addresses", i);
		FUZZ_CHECK(!memcmp(x->addrs, y->addrs, x->naddrs * sizeof(*x->addrs)),
			   "bucket %zu: addresses differ", i);
		FUZZ_CHECK(!memcmp(&x->c, &y->c, sizeof(x->c)), "bucket %zu: counts", i);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct jeprof *sentinel = (struct jeprof *)(uintptr_t)0xa5a5a5a5, *j = sentinel, *k = NULL;
	size_t len = 0;
	char *text;
	int r;

	r = jeprof_parse((const char *)data, size, &j);
	if (r < 0) {
		FUZZ_CHECK(r == -EBADMSG || r == -ENOMEM, "jeprof_parse: %d", r);
		FUZZ_CHECK(j == sentinel, "output clobbered on failure");
		return 0;
	}
	check(j, size);
	for (size_t i = 0; i < j->nbuckets; i++) {
		const struct jeprof_counts *c = &j->buckets[i].c;
		double s = jeprof_scale(c->cur_objects, c->cur_bytes, j->period);

		FUZZ_CHECK(s >= 1.0 && s <= 1e300, "scale %g", s);
	}
	text = rewrite(j, &len);
	r = jeprof_parse(text, len, &k);
	FUZZ_CHECK(r == 0 || r == -ENOMEM, "the rewritten profile did not parse: %d", r);
	if (r == 0) {
		same(j, k);
		jeprof_free(k);
	}
	free(text);
	jeprof_free(j);
	jeprof_free(NULL);
	return 0;
}
