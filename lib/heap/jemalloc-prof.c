#include "heap/jemalloc-prof.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* A line of counts or a backtrace is far shorter (128 addresses: 2.4 KiB). */
#define LINE_MAX_BYTES 8192

struct cursor {
	const char *p, *end;
};

static bool at(const struct cursor *c, const char *s)
{
	size_t n = strlen(s);

	return (size_t)(c->end - c->p) >= n && memcmp(c->p, s, n) == 0;
}

static bool take(struct cursor *c, const char *s)
{
	if (!at(c, s))
		return false;
	c->p += strlen(s);
	return true;
}

static bool take_u64(struct cursor *c, uint64_t *ret)
{
	uint64_t v = 0;
	size_t n = 0;

	while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
		unsigned d = (unsigned)(*c->p - '0');

		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
		c->p++;
		n++;
	}
	*ret = v;
	return n > 0;
}

static int hex_digit(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

static bool take_hex(struct cursor *c, uint64_t *ret)
{
	uint64_t v = 0;
	size_t n = 0;
	int d;

	if (!take(c, "0x"))
		return false;
	while (c->p < c->end && (d = hex_digit(*c->p)) >= 0) {
		if (++n > 16)
			return false;
		v = v << 4 | (uint64_t)d;
		c->p++;
	}
	*ret = v;
	return n > 0;
}

/* "CUROBJS: CURBYTES [ACCUMOBJS: ACCUMBYTES]" (prof_dump_print_cnts()). */
static bool take_counts(struct cursor *c, struct jeprof_counts *ret)
{
	struct jeprof_counts v;

	if (!take_u64(c, &v.cur_objects) || !take(c, ": ") || !take_u64(c, &v.cur_bytes) ||
	    !take(c, " [") || !take_u64(c, &v.accum_objects) || !take(c, ": ") ||
	    !take_u64(c, &v.accum_bytes) || !take(c, "]"))
		return false;
	*ret = v;
	return true;
}

/* "  t*: COUNTS" or "  tN: COUNTS"; @rest_ok: text may follow (a thread's
 * name, in the header). */
static bool take_thread_line(struct cursor *c, bool total, bool rest_ok,
			     struct jeprof_counts *ret)
{
	uint64_t uid;

	if (!take(c, "  t"))
		return false;
	if (total ? !take(c, "*") : !take_u64(c, &uid))
		return false;
	if (!take(c, ": ") || !take_counts(c, ret))
		return false;
	return rest_ok ? c->p == c->end || *c->p == ' ' : c->p == c->end;
}

static int add_bucket(struct jeprof *j, struct cursor *line)
{
	uint64_t addrs[JEPROF_MAX_FRAMES];
	struct jeprof_bucket *b;
	size_t n = 0;
	int r;

	while (line->p < line->end) {
		if (n == JEPROF_MAX_FRAMES || !take(line, " ") || !take_hex(line, &addrs[n]))
			return -EBADMSG;
		n++;
	}
	if (n == 0)
		return -EBADMSG;
	r = GROW(j->buckets, j->nbuckets + 1, j->alloc);
	if (r < 0)
		return r;
	b = &j->buckets[j->nbuckets];
	memset(b, 0, sizeof(*b));
	b->addrs = malloc(n * sizeof(*addrs));
	if (!b->addrs)
		return -ENOMEM;
	memcpy(b->addrs, addrs, n * sizeof(*addrs));
	b->naddrs = n;
	j->nbuckets++;
	return 0;
}

void jeprof_free(struct jeprof *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->nbuckets; i++)
		free(j->buckets[i].addrs);
	free(j->buckets);
	free(j);
}

enum parse_state { EXPECT_TOTAL, IN_HEADER, EXPECT_BUCKET_TOTAL, IN_BUCKET };

int jeprof_parse(const char *text, size_t len, struct jeprof **ret)
{
	struct cursor c = { text, text + len };
	enum parse_state state = EXPECT_TOTAL;
	struct jeprof *j;
	int r = 0;

	if (!take(&c, "heap_v2/"))
		return -EBADMSG;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	if (!take_u64(&c, &j->period) || j->period == 0 || !take(&c, "\n")) {
		r = -EBADMSG;
		goto out_free;
	}
	while (c.p < c.end) {
		const char *nl = memchr(c.p, '\n', (size_t)(c.end - c.p));
		struct cursor line = { c.p, nl ? nl : c.end };
		struct jeprof_counts counts;

		if (line.end - line.p > LINE_MAX_BYTES) {
			r = -EBADMSG;
			goto out_free;
		}
		c.p = nl ? nl + 1 : c.end;
		if (line.p == line.end)
			continue;
		if (at(&line, "MAPPED_LIBRARIES:")) {
			j->maps_offset = (size_t)(line.p - text);
			break;
		}
		switch (state) {
		case EXPECT_TOTAL:
			if (!take_thread_line(&line, true, false, &j->all)) {
				r = -EBADMSG;
				goto out_free;
			}
			state = IN_HEADER;
			continue;
		case EXPECT_BUCKET_TOTAL:
			if (!take_thread_line(&line, true, false, &j->buckets[j->nbuckets - 1].c)) {
				r = -EBADMSG;
				goto out_free;
			}
			state = IN_BUCKET;
			continue;
		case IN_HEADER:
		case IN_BUCKET:
			break;
		}
		if (take(&line, "@")) {
			r = add_bucket(j, &line);
			if (r < 0)
				goto out_free;
			state = EXPECT_BUCKET_TOTAL;
		} else if (take_thread_line(&line, false, state == IN_HEADER, &counts)) {
			if (state == IN_HEADER)
				j->nthreads++;
		} else {
			r = -EBADMSG;
			goto out_free;
		}
	}
	/* Cut short: a backtrace without its counts, or no header at all. */
	if (state == EXPECT_TOTAL || state == EXPECT_BUCKET_TOTAL) {
		r = -EBADMSG;
		goto out_free;
	}
	*ret = j;
	return 0;

out_free:
	jeprof_free(j);
	return r;
}

double jeprof_scale(uint64_t objects, uint64_t bytes, uint64_t period)
{
	double avg;

	if (bytes == 0 || period <= 1)
		return 1.0;
	/* jemalloc's own unbiasing may round a count down to 0 (its
	 * prof_do_unbias()): then the bytes are one block's. */
	avg = (double)bytes / (double)(objects ? objects : 1);
	/* 1 - exp(-x), exact for the tiny x of an untrusted huge period. */
	return 1.0 / -expm1(-avg / (double)period);
}

static int64_t scaled(uint64_t v, double scale)
{
	double x = (double)v * scale;

	return x < 9.2e18 ? (int64_t)x : INT64_MAX;
}

static unsigned lg2(uint64_t v)
{
	unsigned k = 0;

	while (v >>= 1)
		k++;
	return k;
}

/* Where the program's own frames begin: past the leading ones inside
 * jemalloc's module [@start, @end) (its backtrace, malloc, operator new),
 * keeping one at least. */
static size_t first_own_frame(const uint64_t *addrs, size_t n, uint64_t start, uint64_t end)
{
	size_t skip = 0;

	while (skip + 1 < n && addrs[skip] >= start && addrs[skip] < end)
		skip++;
	return skip;
}

static int add_comments(const struct jeprof *j, const struct jeprof_build_opts *o,
			struct profile *p)
{
	char text[512];
	int r = 0;

	if (o->command_line)
		r = profile_add_comment(p, o->command_line);
	if (r < 0)
		return r;
	snprintf(text, sizeof(text),
		 "source: jemalloc's own heap profiler (mallctl prof.dump in pid %d): what it "
		 "sampled since the program started, one sample per %llu bytes on average "
		 "(lg_prof_sample:%u); no hooks", o->pid, (unsigned long long)j->period,
		 lg2(j->period));
	r = profile_add_comment(p, text);
	if (r == 0 && j->all.accum_objects == 0 && j->all.cur_objects != 0)
		r = profile_add_comment(p, "alloc_objects and alloc_space are 0: jemalloc counts "
					   "allocations only with MALLOC_CONF=prof_accum:true");
	return r;
}

int jeprof_build(const struct jeprof *j, const struct jeprof_build_opts *o, struct profile **ret)
{
	static const struct profile_value_type types[] = {
		{ "alloc_objects", "count" },
		{ "alloc_space", "bytes" },
		{ "inuse_objects", "count" },
		{ "inuse_space", "bytes" },
	};
	uint64_t je_start = 0, je_end = 0, locs[JEPROF_MAX_FRAMES];
	struct profile *p;
	int r;

	if (j->period > INT64_MAX)
		return -EOVERFLOW;
	r = profile_new(&p, types, 4);
	if (r < 0)
		return r;
	p->time_nanos = o->time_nanos;
	p->duration_nanos = o->duration_nanos;
	r = profile_set_period(p, "space", "bytes", (int64_t)j->period);
	if (r == 0 && o->default_type)
		r = profile_set_default_sample_type(p, o->default_type);
	if (r == 0)
		r = add_comments(j, o, p);
	symbolizer_module_range(o->sym, "libjemalloc", &je_start, &je_end);
	for (size_t i = 0; r == 0 && i < j->nbuckets; i++) {
		const struct jeprof_bucket *b = &j->buckets[i];
		const struct jeprof_counts *c = &b->c;
		double as = jeprof_scale(c->accum_objects, c->accum_bytes, j->period);
		double is = jeprof_scale(c->cur_objects, c->cur_bytes, j->period);
		int64_t values[4] = { scaled(c->accum_objects, as), scaled(c->accum_bytes, as),
				      scaled(c->cur_objects, is), scaled(c->cur_bytes, is) };
		uint64_t objects = c->cur_objects ? c->cur_objects : c->accum_objects;
		uint64_t bytes = c->cur_objects ? c->cur_bytes : c->accum_bytes;
		struct profile_label label = { .key = "bytes", .num_unit = "bytes" };
		uint64_t addrs[JEPROF_MAX_FRAMES];
		size_t skip, n = 0;

		if (!values[0] && !values[1] && !values[2] && !values[3])
			continue;
		label.num = objects ? (int64_t)MIN(bytes / objects, (uint64_t)INT64_MAX) : 0;
		/* Every one a return address: the call is the byte before. */
		for (size_t k = 0; k < b->naddrs; k++)
			addrs[k] = b->addrs[k] ? b->addrs[k] - 1 : 0;
		skip = first_own_frame(addrs, b->naddrs, je_start, je_end);
		for (size_t k = skip; r == 0 && k < b->naddrs; k++)
			r = profile_location_for_address(p, addrs[k], &locs[n++]);
		if (r == 0)
			r = profile_add_sample(p, locs, n, values, &label, 1);
	}
	if (r == 0)
		r = symbolizer_fill_profile(o->sym, p);
	if (r < 0) {
		profile_free(p);
		return r;
	}
	*ret = p;
	return 0;
}

static int by_cur_bytes(const void *a, const void *b)
{
	const struct jeprof_bucket *x = *(const struct jeprof_bucket *const *)a;
	const struct jeprof_bucket *y = *(const struct jeprof_bucket *const *)b;

	if (x->c.cur_bytes != y->c.cur_bytes)
		return x->c.cur_bytes < y->c.cur_bytes ? 1 : -1;
	return (x->c.accum_bytes < y->c.accum_bytes) - (x->c.accum_bytes > y->c.accum_bytes);
}

int jeprof_write_text(const struct jeprof *j, struct symbolizer *sym, FILE *f)
{
	const struct jeprof_bucket **order = calloc(j->nbuckets + 1, sizeof(*order));
	uint64_t je_start = 0, je_end = 0, addrs[JEPROF_MAX_FRAMES];

	if (!order)
		return -ENOMEM;
	symbolizer_module_range(sym, "libjemalloc", &je_start, &je_end);
	for (size_t i = 0; i < j->nbuckets; i++)
		order[i] = &j->buckets[i];
	qsort(order, j->nbuckets, sizeof(*order), by_cur_bytes);
	fprintf(f, "heap profile: %llu: %llu [%llu: %llu] @ heap_v2/%llu\n",
		(unsigned long long)j->all.cur_objects, (unsigned long long)j->all.cur_bytes,
		(unsigned long long)j->all.accum_objects, (unsigned long long)j->all.accum_bytes,
		(unsigned long long)j->period);
	for (size_t i = 0; i < j->nbuckets; i++) {
		const struct jeprof_bucket *b = order[i];
		size_t skip;

		for (size_t k = 0; k < b->naddrs; k++)
			addrs[k] = b->addrs[k] ? b->addrs[k] - 1 : 0;
		skip = first_own_frame(addrs, b->naddrs, je_start, je_end);
		fprintf(f, "%llu: %llu [%llu: %llu] @", (unsigned long long)b->c.cur_objects,
			(unsigned long long)b->c.cur_bytes, (unsigned long long)b->c.accum_objects,
			(unsigned long long)b->c.accum_bytes);
		for (size_t k = skip; k < b->naddrs; k++)
			fprintf(f, " %#llx", (unsigned long long)addrs[k]);
		fputc('\n', f);
		symbolizer_write_frames(sym, addrs + skip, b->naddrs - skip, f);
		fputc('\n', f);
	}
	fprintf(f, "# cprof\n# source = jemalloc prof.dump\n# backtraces = %zu\n# threads = %zu\n",
		j->nbuckets, j->nthreads);
	free(order);
	return ferror(f) ? -EIO : 0;
}
