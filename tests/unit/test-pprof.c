/*
 * lib/pprof: encode -> decode round trips, the wire format pprof requires,
 * gzip and writing, hostile input, and `go tool pprof` as an independent reader.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pprof/pprof-private.h"
#include "pprof/pprof.h"
#include "profile.pb-c.h"
#include "testhelp.h"

/*
 * Two sample types, two mappings (one with a build id and every has_* flag),
 * an inlined frame, string and numeric labels, and every header field.
 */
static struct profile *rich_profile(void)
{
	static const struct profile_value_type types[] = {
		{ "alloc_objects", "count" },
		{ "alloc_space", "bytes" },
	};
	struct profile_mapping app = {
		.start = 0x400000, .limit = 0x500000, .offset = 0x1000,
		.file = "/usr/bin/app", .build_id = "deadbeef00112233",
		.has_functions = true, .has_filenames = true,
		.has_line_numbers = true, .has_inline_frames = true,
	};
	struct profile_mapping libc = {
		.start = 0x7f0000000000, .limit = 0x7f0000200000, .offset = 0,
		.file = "/lib/x86_64-linux-gnu/libc.so.6", .build_id = "",
	};
	struct profile_label worker[] = {
		{ .key = "thread_name", .str = "worker" },
		{ .key = "thread_id", .num = 101 },
		{ .key = "request", .num = 64, .num_unit = "bytes" },
	};
	struct profile_label main_thread[] = { { .key = "thread_name", .str = "main" } };
	uint64_t m_app, m_libc, f_main, f_compute, f_helper, f_malloc;
	uint64_t l_main, l_compute, l_inline, l_malloc;
	struct profile *p = NULL;

	cr_assert_eq(profile_new(&p, types, 2), 0);
	cr_assert_eq(profile_add_mapping(p, &app, &m_app), 0);
	cr_assert_eq(profile_add_mapping(p, &libc, &m_libc), 0);
	cr_assert_eq(profile_intern_function(p, "main", "main", "main.c", 10, &f_main), 0);
	cr_assert_eq(profile_intern_function(p, "compute_things", "_Z14compute_thingsv",
					     "compute.c", 20, &f_compute), 0);
	cr_assert_eq(profile_intern_function(p, "inlined_helper", "inlined_helper", "helper.h", 5,
					     &f_helper), 0);
	cr_assert_eq(profile_intern_function(p, "malloc", "malloc", "", 0, &f_malloc), 0);

	struct profile_line main_lines[] = { { f_main, 15 } };
	struct profile_line compute_lines[] = { { f_compute, 25 } };
	struct profile_line inline_lines[] = { { f_helper, 7 }, { f_compute, 30 } };
	struct profile_line malloc_lines[] = { { f_malloc, 0 } };

	cr_assert_eq(profile_location_for_address(p, 0x400800, &l_main), 0);
	cr_assert_eq(profile_location_for_address(p, 0x401000, &l_compute), 0);
	cr_assert_eq(profile_location_for_address(p, 0x401100, &l_inline), 0);
	cr_assert_eq(profile_location_for_address(p, 0x7f0000001000, &l_malloc), 0);
	cr_assert_eq(profile_location_set(p, l_main, m_app, main_lines, 1), 0);
	cr_assert_eq(profile_location_set(p, l_compute, m_app, compute_lines, 1), 0);
	cr_assert_eq(profile_location_set(p, l_inline, m_app, inline_lines, 2), 0);
	cr_assert_eq(profile_location_set(p, l_malloc, m_libc, malloc_lines, 1), 0);

	uint64_t s1[] = { l_malloc, l_inline, l_main }, s2[] = { l_compute, l_main };
	uint64_t s3[] = { l_main };
	int64_t v1[] = { 3, 3000 }, v2[] = { 1, 512 }, v3[] = { 2, 2048 };

	cr_assert_eq(profile_add_sample(p, s1, 3, v1, worker, 3), 0);
	cr_assert_eq(profile_add_sample(p, s2, 2, v2, main_thread, 1), 0);
	cr_assert_eq(profile_add_sample(p, s3, 1, v3, NULL, 0), 0);

	cr_assert_eq(profile_set_period(p, "space", "bytes", 524288), 0);
	cr_assert_eq(profile_set_default_sample_type(p, "alloc_space"), 0);
	cr_assert_eq(profile_set_drop_frames(p, "cprof_agent_.*"), 0);
	cr_assert_eq(profile_add_comment(p, "cprof heap -p 42"), 0);
	cr_assert_eq(profile_add_comment(p, "rate 512KiB"), 0);
	p->time_nanos = 1700000000123456789;
	p->duration_nanos = 30000000000;
	return p;
}

static bool streq(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

/* Field by field; ids can be compared as numbers because both number in order. */
static void expect_same_profile(const struct profile *a, const struct profile *b)
{
	cr_assert_eq(a->nsample_types, b->nsample_types);
	for (size_t i = 0; i < a->nsample_types; i++) {
		cr_expect(streq(a->sample_types[i].type, b->sample_types[i].type));
		cr_expect(streq(a->sample_types[i].unit, b->sample_types[i].unit));
	}
	cr_expect(streq(a->period_type.type, b->period_type.type));
	cr_expect(streq(a->period_type.unit, b->period_type.unit));
	cr_expect_eq(a->period, b->period);
	cr_expect_eq(a->time_nanos, b->time_nanos);
	cr_expect_eq(a->duration_nanos, b->duration_nanos);
	cr_expect(streq(a->default_sample_type, b->default_sample_type));
	cr_expect(streq(a->drop_frames, b->drop_frames));
	cr_assert_eq(a->ncomments, b->ncomments);
	for (size_t i = 0; i < a->ncomments; i++)
		cr_expect_str_eq(a->comments[i], b->comments[i]);

	cr_assert_eq(a->nmappings, b->nmappings);
	for (size_t i = 0; i < a->nmappings; i++) {
		const struct profile_mapping *x = &a->mappings[i], *y = &b->mappings[i];

		cr_expect_eq(x->id, y->id);
		cr_expect(x->start == y->start && x->limit == y->limit && x->offset == y->offset);
		cr_expect_str_eq(x->file, y->file);
		cr_expect_str_eq(x->build_id, y->build_id);
		cr_expect(x->has_functions == y->has_functions &&
			  x->has_filenames == y->has_filenames &&
			  x->has_line_numbers == y->has_line_numbers &&
			  x->has_inline_frames == y->has_inline_frames);
	}
	cr_assert_eq(a->nfunctions, b->nfunctions);
	for (size_t i = 0; i < a->nfunctions; i++) {
		const struct profile_function *x = &a->functions[i], *y = &b->functions[i];

		cr_expect_eq(x->id, y->id);
		cr_expect_str_eq(x->name, y->name);
		cr_expect_str_eq(x->system_name, y->system_name);
		cr_expect_str_eq(x->file, y->file);
		cr_expect_eq(x->start_line, y->start_line);
	}
	cr_assert_eq(a->nlocations, b->nlocations);
	for (size_t i = 0; i < a->nlocations; i++) {
		const struct profile_location *x = &a->locations[i], *y = &b->locations[i];

		cr_expect(x->id == y->id && x->mapping_id == y->mapping_id &&
			  x->address == y->address);
		cr_assert_eq(x->nlines, y->nlines);
		for (size_t j = 0; j < x->nlines; j++) {
			cr_expect_eq(x->lines[j].function_id, y->lines[j].function_id);
			cr_expect_eq(x->lines[j].line, y->lines[j].line);
		}
	}
	cr_assert_eq(a->nsamples, b->nsamples);
	for (size_t i = 0; i < a->nsamples; i++) {
		const struct profile_sample *x = &a->samples[i], *y = &b->samples[i];

		cr_assert_eq(x->nlocations, y->nlocations);
		for (size_t j = 0; j < x->nlocations; j++)
			cr_expect_eq(x->location_ids[j], y->location_ids[j]);
		for (size_t j = 0; j < a->nsample_types; j++)
			cr_expect_eq(x->values[j], y->values[j]);
		cr_assert_eq(x->nlabels, y->nlabels);
		for (size_t j = 0; j < x->nlabels; j++) {
			cr_expect_str_eq(x->labels[j].key, y->labels[j].key);
			cr_expect(streq(x->labels[j].str, y->labels[j].str));
			cr_expect_eq(x->labels[j].num, y->labels[j].num);
			cr_expect(streq(x->labels[j].num_unit, y->labels[j].num_unit));
		}
	}
}

/* What any decoded profile must satisfy, whatever bytes it came from. */
static void expect_consistent(const struct profile *p)
{
	for (size_t i = 0; i < p->nlocations; i++) {
		const struct profile_location *l = &p->locations[i];

		cr_assert(l->id == i + 1 && l->mapping_id <= p->nmappings);
		for (size_t j = 0; j < l->nlines; j++)
			cr_assert(l->lines[j].function_id &&
				  l->lines[j].function_id <= p->nfunctions);
	}
	for (size_t i = 0; i < p->nsamples; i++)
		for (size_t j = 0; j < p->samples[i].nlocations; j++)
			cr_assert(p->samples[i].location_ids[j] &&
				  p->samples[i].location_ids[j] <= p->nlocations);
}

static void encode(const struct profile *p, uint8_t **buf, size_t *len)
{
	cr_assert_eq(pprof_encode(p, buf, len), 0);
	cr_assert_not_null(*buf);
}

Test(pprof, round_trip_uncompressed)
{
	struct profile *p = rich_profile(), *q = NULL;
	uint8_t *buf;
	size_t len;

	encode(p, &buf, &len);
	cr_assert_eq(pprof_decode(buf, len, &q), 0);
	expect_same_profile(p, q);
	cr_expect_str_eq(q->default_sample_type, "alloc_space");
	cr_assert_eq(q->locations[2].nlines, 2);
	cr_expect_str_eq(q->functions[q->locations[2].lines[0].function_id - 1].name,
			 "inlined_helper", "the inlined function comes first");
	cr_expect_eq(profile_total(q, 1), 3000 + 512 + 2048);
	free(buf);
	profile_free(p);
	profile_free(q);
}

Test(pprof, round_trip_empty_profile)
{
	struct profile *p = NULL, *q = NULL;
	uint8_t *buf;
	size_t len;

	cr_assert_eq(profile_new(&p, NULL, 0), 0);
	encode(p, &buf, &len);
	cr_assert_eq(pprof_decode(buf, len, &q), 0);
	expect_same_profile(p, q);
	cr_expect_null(q->period_type.type);
	cr_expect_null(q->default_sample_type);
	free(buf);
	profile_free(p);
	profile_free(q);
}

Test(pprof, encoding_follows_pprof_rules)
{
	struct profile *p = rich_profile();
	Perftools__Profiles__Profile *m;
	uint8_t *buf;
	size_t len;

	encode(p, &buf, &len);
	m = perftools__profiles__profile__unpack(NULL, len, buf);
	cr_assert_not_null(m);
	cr_assert_gt(m->n_string_table, 1);
	cr_expect_str_eq(m->string_table[0], "", "string_table[0] must be \"\"");
	for (size_t i = 1; i < m->n_string_table; i++)
		for (size_t j = i + 1; j < m->n_string_table; j++)
			cr_expect_str_neq(m->string_table[i], m->string_table[j]);
	cr_expect_str_eq(m->string_table[m->default_sample_type], "alloc_space");
	cr_expect_str_eq(m->string_table[m->drop_frames], "cprof_agent_.*");
	cr_assert_not_null(m->period_type);
	cr_expect_str_eq(m->string_table[m->period_type->type], "space");
	cr_assert_eq(m->n_comment, 2);
	cr_expect_str_eq(m->string_table[m->comment[1]], "rate 512KiB");
	for (size_t i = 0; i < m->n_mapping; i++)
		cr_expect_neq(m->mapping[i]->id, 0);
	for (size_t i = 0; i < m->n_function; i++)
		cr_expect_neq(m->function[i]->id, 0);
	for (size_t i = 0; i < m->n_location; i++) {
		cr_expect_neq(m->location[i]->id, 0);
		for (size_t j = 0; j < m->location[i]->n_line; j++)
			cr_expect_neq(m->location[i]->line[j]->function_id, 0);
	}
	for (size_t i = 0; i < m->n_sample; i++)
		cr_expect_eq(m->sample[i]->n_value, m->n_sample_type);
	/* The numeric label keeps its unit, the string label has no number. */
	cr_assert_eq(m->sample[0]->n_label, 3);
	cr_expect_eq(m->sample[0]->label[0]->num, 0);
	cr_expect_eq(m->sample[0]->label[2]->num, 64);
	cr_expect_str_eq(m->string_table[m->sample[0]->label[2]->num_unit], "bytes");
	cr_expect_eq(m->sample[0]->label[1]->num_unit, 0);
	perftools__profiles__profile__free_unpacked(m, NULL);
	free(buf);
	profile_free(p);
}

static uint8_t *read_file(const char *path, size_t *ret_len)
{
	struct stat st;
	uint8_t *buf;
	int fd = open(path, O_RDONLY);

	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &st), 0);
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	cr_assert_not_null(buf);
	cr_assert_eq(read(fd, buf, st.st_size), st.st_size);
	close(fd);
	*ret_len = (size_t)st.st_size;
	return buf;
}

/* Writes the rich profile's .pb.gz bytes into a new file @path. */
static void write_profile(const struct profile *p, char *dir, char *path, size_t size)
{
	uint8_t *buf;
	size_t len;
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, size, "%s/profile.pb.gz", dir);
	cr_assert_eq(pprof_encode_gzip(p, &buf, &len), 0);
	f = fopen(path, "wxe");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(buf, 1, len, f), len);
	cr_assert_eq(fclose(f), 0);
	free(buf);
}

static void remove_profile(const char *dir, const char *path)
{
	unlink(path);
	rmdir(dir);
}

Test(pprof, encode_gzip_round_trips)
{
	struct profile *p = rich_profile(), *q = NULL;
	uint8_t *buf;
	size_t len;

	cr_assert_eq(pprof_encode_gzip(p, &buf, &len), 0);
	cr_assert_gt(len, 18);
	cr_expect(buf[0] == 0x1f && buf[1] == 0x8b, "no gzip magic");
	cr_expect_eq(buf[2], 8, "deflate");
	cr_assert_eq(pprof_decode(buf, len, &q), 0);
	expect_same_profile(p, q);
	free(buf);
	profile_free(p);
	profile_free(q);
}

Test(pprof, gzip_members_concatenate)
{
	struct profile *p = rich_profile(), *q = NULL;
	uint8_t *raw, *a, *b, *cat;
	size_t len, alen, blen;

	encode(p, &raw, &len);
	cr_assert_eq(pprof_gzip(raw, len / 2, &a, &alen), 0);
	cr_assert_eq(pprof_gzip(raw + len / 2, len - len / 2, &b, &blen), 0);
	cat = malloc(alen + blen + 3);
	cr_assert_not_null(cat);
	memcpy(cat, a, alen);
	memcpy(cat + alen, b, blen);
	cr_assert_eq(pprof_decode(cat, alen + blen, &q), 0, "gzip -c a b is one stream");
	expect_same_profile(p, q);
	memcpy(cat + alen + blen, "xyz", 3);
	cr_expect_eq(pprof_decode(cat, alen + blen + 3, &q), -EBADMSG, "trailing garbage");
	free(raw);
	free(a);
	free(b);
	free(cat);
	profile_free(p);
	profile_free(q);
}

Test(pprof, gunzip_caps_the_output)
{
	size_t n = 100000, len, outlen;
	uint8_t *zeros = calloc(n, 1), *gz, *out = NULL;

	cr_assert_not_null(zeros);
	cr_assert_eq(pprof_gzip(zeros, n, &gz, &len), 0);
	cr_expect_lt(len, n / 50, "zeros should compress");
	cr_expect_eq(pprof_gunzip(gz, len, n - 1, &out, &outlen), -EFBIG);
	cr_expect_null(out);
	cr_assert_eq(pprof_gunzip(gz, len, n, &out, &outlen), 0, "exactly the cap is fine");
	cr_expect_eq(outlen, n);
	cr_expect_eq(memcmp(out, zeros, n), 0);
	free(out);
	cr_assert_eq(pprof_gzip(NULL, 0, &out, &outlen), 0);
	free(gz);
	gz = out;
	cr_assert_eq(pprof_gunzip(gz, outlen, 10, &out, &len), 0);
	cr_expect_eq(len, 0);
	free(out);
	free(gz);
	free(zeros);
}

Test(pprof, rejects_bad_arguments)
{
	struct profile *q = NULL;
	uint8_t *buf;
	size_t len;

	cr_expect_eq(pprof_encode(NULL, &buf, &len), -EINVAL);
	cr_expect_eq(pprof_decode(NULL, 5, &q), -EINVAL);
	cr_expect_eq(pprof_decode((const uint8_t *)"", 0, NULL), -EINVAL);
	cr_expect_eq(pprof_decode((const uint8_t *)"", 0, &q), -EBADMSG, "no string table");
	cr_expect_null(q);
}

Test(pprof, every_truncation_of_gzip_fails)
{
	struct profile *p = rich_profile(), *q = NULL;
	uint8_t *raw, *gz;
	size_t len, gzlen;

	encode(p, &raw, &len);
	cr_assert_eq(pprof_gzip(raw, len, &gz, &gzlen), 0);
	/* The trailer holds the CRC and length, so no prefix is a gzip file. */
	for (size_t n = 0; n < gzlen; n++) {
		cr_assert_lt(pprof_decode(gz, n, &q), 0, "prefix of %zu of %zu bytes", n, gzlen);
		cr_assert_null(q);
	}
	free(raw);
	free(gz);
	profile_free(p);
}

Test(pprof, truncated_and_corrupted_messages_never_crash)
{
	struct profile *p = rich_profile(), *q;
	uint8_t *raw, *copy;
	size_t len;
	int ok = 0;

	encode(p, &raw, &len);
	for (size_t n = 0; n < len; n++) {
		q = NULL;
		if (pprof_decode(raw, n, &q) == 0) {
			expect_consistent(q);
			profile_free(q);
		}
	}
	copy = malloc(len);
	cr_assert_not_null(copy);
	srand(12345);
	for (int i = 0; i < 5000; i++) {
		memcpy(copy, raw, len);
		for (int k = 0; k <= i % 3; k++)
			copy[(size_t)rand() % len] ^= (uint8_t)(1 + rand() % 255);
		q = NULL;
		if (pprof_decode(copy, len, &q) == 0) {
			ok++;
			expect_consistent(q);
			profile_free(q);
		}
	}
	/* Random garbage of every small length. */
	for (size_t n = 1; n < 256; n++) {
		for (size_t k = 0; k < n; k++)
			copy[k] = (uint8_t)rand();
		q = NULL;
		if (pprof_decode(copy, n, &q) == 0)
			profile_free(q);
	}
	cr_log_info("%d of 5000 corrupted messages still decoded", ok);
	free(copy);
	free(raw);
	profile_free(p);
}

/*
 * A hand-built message with foreign ids (function 7, mapping 5, location 9),
 * which mutate() then breaks in one way per case.
 */
struct craft {
	Perftools__Profiles__Profile msg;
	char *strings[8];
	Perftools__Profiles__ValueType vt, pt, *vtp[1];
	Perftools__Profiles__Function fn[2], *fnp[2];
	Perftools__Profiles__Mapping map[2], *mapp[2];
	Perftools__Profiles__Line line, *linep[1];
	Perftools__Profiles__Location loc[2], *locp[2];
	Perftools__Profiles__Label label, *labelp[1];
	Perftools__Profiles__Sample sample, *samplep[1];
	uint64_t stack[1];
	int64_t values[2];
	int64_t comments[1];
};

static void craft_init(struct craft *c)
{
	static char *strings[] = {
		"", "samples", "count", "main", "main.c", "/bin/app", "key", "val",
	};

	memset(c, 0, sizeof(*c));
	perftools__profiles__profile__init(&c->msg);
	memcpy(c->strings, strings, sizeof(strings));
	c->msg.string_table = c->strings;
	c->msg.n_string_table = 8;
	perftools__profiles__value_type__init(&c->vt);
	c->vt.type = 1;
	c->vt.unit = 2;
	c->vtp[0] = &c->vt;
	c->msg.sample_type = c->vtp;
	c->msg.n_sample_type = 1;
	c->pt = c->vt;
	c->msg.period_type = &c->pt;
	c->msg.period = 1000;
	for (int i = 0; i < 2; i++) {
		perftools__profiles__function__init(&c->fn[i]);
		c->fn[i].id = 7;
		c->fn[i].name = 3;
		c->fn[i].system_name = 3;
		c->fn[i].filename = 4;
		c->fnp[i] = &c->fn[i];
		perftools__profiles__mapping__init(&c->map[i]);
		c->map[i].id = 5;
		c->map[i].filename = 5;
		c->mapp[i] = &c->map[i];
		perftools__profiles__location__init(&c->loc[i]);
		c->loc[i].id = 9;
		c->loc[i].mapping_id = 5;
		c->loc[i].address = 0x1000;
		c->loc[i].n_line = 1;
		c->loc[i].line = c->linep;
		c->locp[i] = &c->loc[i];
	}
	c->msg.function = c->fnp;
	c->msg.n_function = 1;
	c->msg.mapping = c->mapp;
	c->msg.n_mapping = 1;
	c->msg.location = c->locp;
	c->msg.n_location = 1;
	perftools__profiles__line__init(&c->line);
	c->line.function_id = 7;
	c->line.line = 3;
	c->linep[0] = &c->line;
	perftools__profiles__label__init(&c->label);
	c->label.key = 6;
	c->label.str = 7;
	c->labelp[0] = &c->label;
	perftools__profiles__sample__init(&c->sample);
	c->stack[0] = 9;
	c->values[0] = 4;
	c->sample.location_id = c->stack;
	c->sample.n_location_id = 1;
	c->sample.value = c->values;
	c->sample.n_value = 1;
	c->sample.label = c->labelp;
	c->sample.n_label = 1;
	c->samplep[0] = &c->sample;
	c->msg.sample = c->samplep;
	c->msg.n_sample = 1;
	c->comments[0] = 3;
	c->msg.comment = c->comments;
	c->msg.n_comment = 1;
	c->msg.default_sample_type = 1;
}

static int craft_decode(const struct craft *c, struct profile **ret)
{
	size_t len = perftools__profiles__profile__get_packed_size(&c->msg);
	uint8_t *buf = malloc(len + 1);
	int r;

	cr_assert_not_null(buf);
	cr_assert_eq(perftools__profiles__profile__pack(&c->msg, buf), len);
	r = pprof_decode(buf, len, ret);
	free(buf);
	return r;
}

Test(pprof, foreign_ids_are_renumbered)
{
	struct profile *q = NULL;
	struct craft c;

	craft_init(&c);
	/* A second location at the same address is kept, not merged. */
	c.msg.n_location = 2;
	c.loc[1].id = 1000;
	c.stack[0] = 1000;
	cr_assert_eq(craft_decode(&c, &q), 0);
	cr_assert_eq(q->nfunctions, 1);
	cr_expect_eq(q->functions[0].id, 1);
	cr_expect_str_eq(q->functions[0].name, "main");
	cr_assert_eq(q->nlocations, 2);
	cr_expect_eq(q->locations[1].id, 2);
	cr_expect_eq(q->locations[1].mapping_id, 1);
	cr_expect_eq(q->locations[1].lines[0].function_id, 1);
	cr_assert_eq(q->nsamples, 1);
	cr_expect_eq(q->samples[0].location_ids[0], 2);
	cr_expect_eq(q->samples[0].values[0], 4);
	cr_expect_str_eq(q->samples[0].labels[0].str, "val");
	cr_expect_str_eq(q->default_sample_type, "samples");
	cr_expect_str_eq(q->mappings[0].file, "/bin/app");
	profile_free(q);
}

static const char *const craft_cases[] = {
	"string_table[0] not empty", "no string table", "sample type past the table",
	"negative string index", "function name just past the table", "function id 0",
	"line function id 0", "line function unknown", "location mapping unknown",
	"location id 0", "sample location unknown", "sample location 0", "no values",
	"more values than types", "label key past the table", "label str past the table",
	"label num_unit past the table", "comment past the table",
	"default_sample_type past the table", "negative drop_frames", "period_type past the table",
	"mapping filename past the table", "mapping build_id INT64_MIN", "duplicate function id",
	"duplicate location id", "duplicate mapping id", "mapping id 0",
};

static void mutate(struct craft *c, size_t i)
{
	switch (i) {
	case 0: c->strings[0] = "x"; break;
	case 1: c->msg.n_string_table = 0; break;
	case 2: c->vt.type = 99; break;
	case 3: c->vt.unit = -1; break;
	case 4: c->fn[0].name = 8; break;
	case 5: c->fn[0].id = 0; break;
	case 6: c->line.function_id = 0; break;
	case 7: c->line.function_id = 8; break;
	case 8: c->loc[0].mapping_id = 6; break;
	case 9: c->loc[0].id = 0; break;
	case 10: c->stack[0] = 10; break;
	case 11: c->stack[0] = 0; break;
	case 12: c->sample.n_value = 0; break;
	case 13: c->sample.n_value = 2; break;
	case 14: c->label.key = 100; break;
	case 15: c->label.str = 8; break;
	case 16: c->label.str = 0; c->label.num_unit = 9; break;
	case 17: c->comments[0] = 8; break;
	case 18: c->msg.default_sample_type = 8; break;
	case 19: c->msg.drop_frames = -5; break;
	case 20: c->pt.type = 8; break;
	case 21: c->map[0].filename = 8; break;
	case 22: c->map[0].build_id = INT64_MIN; break;
	case 23: c->msg.n_function = 2; break;
	case 24: c->msg.n_location = 2; break;
	case 25: c->msg.n_mapping = 2; break;
	case 26: c->map[0].id = 0; c->loc[0].mapping_id = 0; break;
	}
}

Test(pprof, malformed_references_are_rejected)
{
	struct profile *q = NULL;
	struct craft c;

	craft_init(&c);
	cr_assert_eq(craft_decode(&c, &q), 0, "the unbroken message must decode");
	profile_free(q);
	for (size_t i = 0; i < ARRAY_SIZE(craft_cases); i++) {
		q = NULL;
		craft_init(&c);
		mutate(&c, i);
		cr_expect_eq(craft_decode(&c, &q), -EBADMSG, "%s", craft_cases[i]);
		cr_expect_null(q, "%s", craft_cases[i]);
	}
}

/* Runs `go tool pprof ARGS`, asserts that it succeeded, and returns its output. */
static char *run_pprof(const char *args)
{
	char cmd[512], *out = NULL;
	size_t len = 0, alloc = 0, n;
	FILE *f;
	int status;

	/* GOFLAGS from the environment could make go refuse; HOME for its cache. */
	snprintf(cmd, sizeof(cmd), "env GOFLAGS= HOME=/tmp go tool pprof %s 2>&1", args);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	do {
		cr_assert_eq(GROW(out, len + 4097, alloc), 0);
		n = fread(out + len, 1, 4096, f);
		len += n;
	} while (n);
	out[len] = '\0';
	status = pclose(f);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "go tool pprof %s failed:\n%s",
		  args, out);
	return out;
}

/* The sample lines of -raw output are "VALUE VALUE: LOCATION-IDS". */
static bool raw_has_sample(const char *out, int64_t v0, int64_t v1)
{
	for (const char *l = out; l; l = strchr(l, '\n')) {
		int64_t a, b;
		char colon;

		l += *l == '\n';
		if (sscanf(l, " %" SCNd64 " %" SCNd64 "%c", &a, &b, &colon) == 3 && colon == ':' &&
		    a == v0 && b == v1)
			return true;
	}
	return false;
}

Test(pprof, go_tool_pprof_reads_it)
{
	static const char *const expected[] = {
		"PeriodType: space bytes", "Period: 524288", "Duration: 30s",
		"alloc_objects/count alloc_space/bytes[dflt]", "Comment: cprof heap -p 42",
		"thread_name:[worker]", "thread_id:[101]", "request:[64 bytes]",
		"inlined_helper helper.h:7 s=5",
		"compute_things compute.c:30 s=20(_Z14compute_thingsv)",
		"malloc", "main main.c:15 s=10", "deadbeef00112233 [FN][FL][LN][IN]",
		"/lib/x86_64-linux-gnu/libc.so.6",
	};
	char dir[] = "/tmp/test-pprof.XXXXXX", path[64], args[128];
	struct profile *p;
	char *out, *inl, *outer;

	if (system("command -v go >/dev/null 2>&1") != 0)
		TH_SKIP_MISSING("go not installed: cannot check with go tool pprof");
	p = rich_profile();
	write_profile(p, dir, path, sizeof(path));

	snprintf(args, sizeof(args), "-raw -symbolize=none %s", path);
	out = run_pprof(args);
	for (size_t i = 0; i < ARRAY_SIZE(expected); i++)
		cr_expect_not_null(strstr(out, expected[i]), "no \"%s\" in:\n%s", expected[i], out);
	cr_expect(raw_has_sample(out, 3, 3000) && raw_has_sample(out, 1, 512) &&
		  raw_has_sample(out, 2, 2048), "values missing in:\n%s", out);
	free(out);

	/* -traces shows the inlined frame above its caller. */
	snprintf(args, sizeof(args), "-traces -symbolize=none %s", path);
	out = run_pprof(args);
	inl = strstr(out, "inlined_helper (inline)");
	outer = inl ? strstr(inl, "compute_things") : NULL;
	cr_expect(inl && outer && strstr(outer, "main"), "inline order wrong in:\n%s", out);
	cr_expect_not_null(strstr(out, "Type: alloc_space"), "no default type in:\n%s", out);
	free(out);

	remove_profile(dir, path);
	profile_free(p);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * A sample as text, without ids: values, then each frame's address, mapping
 * and lines, then the labels sorted (other writers may order them anyway).
 */
static char *sample_text(const struct profile *p, const struct profile_sample *s)
{
	char *text, *labels[8];
	size_t size;
	FILE *f = open_memstream(&text, &size);

	cr_assert_not_null(f);
	for (size_t i = 0; i < p->nsample_types; i++)
		fprintf(f, "%" PRId64 " ", s->values[i]);
	for (size_t i = 0; i < s->nlocations; i++) {
		const struct profile_location *l = &p->locations[s->location_ids[i] - 1];

		fprintf(f, "|%#" PRIx64 " %s", l->address,
			l->mapping_id ? p->mappings[l->mapping_id - 1].file : "-");
		for (size_t j = 0; j < l->nlines; j++) {
			const struct profile_function *fn;

			fn = &p->functions[l->lines[j].function_id - 1];

			fprintf(f, " %s/%s@%s:%" PRId64 "+%" PRId64, fn->name, fn->system_name,
				fn->file, fn->start_line, l->lines[j].line);
		}
	}
	cr_assert_leq(s->nlabels, ARRAY_SIZE(labels));
	for (size_t i = 0; i < s->nlabels; i++) {
		const struct profile_label *l = &s->labels[i];

		cr_assert_gt(asprintf(&labels[i], "%s=%s/%" PRId64 "/%s", l->key,
				      l->str ? l->str : "-", l->num,
				      l->num_unit ? l->num_unit : "-"), 0);
	}
	qsort(labels, s->nlabels, sizeof(*labels), cmp_str);
	for (size_t i = 0; i < s->nlabels; i++) {
		fprintf(f, " %s", labels[i]);
		free(labels[i]);
	}
	cr_assert_eq(fclose(f), 0);
	return text;
}

/* Same samples, stacks, lines, mappings and labels, whatever the ids. */
static void expect_same_samples(const struct profile *a, const struct profile *b)
{
	char **ta, **tb;

	cr_assert_eq(a->nsamples, b->nsamples);
	ta = calloc(a->nsamples, sizeof(*ta));
	tb = calloc(b->nsamples, sizeof(*tb));
	cr_assert(ta && tb);
	for (size_t i = 0; i < a->nsamples; i++) {
		ta[i] = sample_text(a, &a->samples[i]);
		tb[i] = sample_text(b, &b->samples[i]);
	}
	qsort(ta, a->nsamples, sizeof(*ta), cmp_str);
	qsort(tb, b->nsamples, sizeof(*tb), cmp_str);
	for (size_t i = 0; i < a->nsamples; i++) {
		cr_expect_str_eq(ta[i], tb[i]);
		free(ta[i]);
		free(tb[i]);
	}
	free(ta);
	free(tb);
}

/* pprof's own writer orders, numbers and deduplicates its own way. */
Test(pprof, decodes_what_go_tool_pprof_writes)
{
	char dir[] = "/tmp/test-pprof.XXXXXX", path[64], args[256];
	struct profile *p, *q = NULL;
	uint8_t *buf;
	size_t len;

	if (system("command -v go >/dev/null 2>&1") != 0)
		TH_SKIP_MISSING("go not installed: cannot check with go tool pprof");
	p = rich_profile();
	write_profile(p, dir, path, sizeof(path));
	snprintf(args, sizeof(args), "-proto -symbolize=none -output %s.go %s", path, path);
	free(run_pprof(args));
	snprintf(args, sizeof(args), "%s.go", path);
	buf = read_file(args, &len);
	cr_assert_eq(pprof_decode(buf, len, &q), 0);
	expect_consistent(q);
	expect_same_samples(p, q);
	cr_expect_str_eq(q->default_sample_type, "alloc_space");
	cr_expect_str_eq(q->period_type.type, "space");
	cr_expect_eq(q->period, 524288);
	cr_expect_eq(q->duration_nanos, p->duration_nanos);
	cr_expect_eq(q->time_nanos, p->time_nanos);
	cr_expect_str_eq(q->drop_frames, "cprof_agent_.*");
	cr_assert_eq(q->ncomments, 2);
	cr_expect_str_eq(q->comments[1], "rate 512KiB");
	cr_assert_eq(q->nmappings, 2);
	cr_expect_str_eq(q->mappings[0].build_id, "deadbeef00112233");
	cr_expect(q->mappings[0].has_inline_frames && !q->mappings[1].has_functions);
	free(buf);
	unlink(args);
	remove_profile(dir, path);
	profile_free(p);
	profile_free(q);
}
