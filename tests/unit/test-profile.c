/* lib/profile: interning, deduplication, merging, ids and reference checks. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "profile/profile-private.h"
#include "profile/profile.h"
#include "profile/stack-table.h"

static const struct profile_value_type types[] = {
	{ "samples", "count" },
	{ "cpu", "nanoseconds" },
};

static struct profile *new_profile(void)
{
	struct profile *p = NULL;

	cr_assert_eq(profile_new(&p, types, ARRAY_SIZE(types)), 0);
	cr_assert_not_null(p);
	return p;
}

/* A location at @address with one line in function @name. */
static uint64_t location(struct profile *p, uint64_t address, const char *name)
{
	struct profile_line line = { .line = 10 };
	uint64_t id;

	cr_assert_eq(profile_intern_function(p, name, name, "f.c", 1, &line.function_id), 0);
	cr_assert_eq(profile_location_for_address(p, address, &id), 0);
	cr_assert_eq(profile_location_set(p, id, 0, &line, 1), 0);
	return id;
}

Test(profile, new_copies_and_interns_sample_types)
{
	struct profile_value_type t[] = { { "alloc_space", "bytes" } };
	char name[] = "alloc_space";
	struct profile *p = NULL;

	t[0].type = name;
	cr_assert_eq(profile_new(&p, t, 1), 0);
	name[0] = 'X'; /* the profile must not keep the caller's memory */
	cr_expect_eq(p->nsample_types, 1);
	cr_expect_str_eq(p->sample_types[0].type, "alloc_space");
	cr_expect_eq(p->sample_types[0].type, profile_intern(p, "alloc_space"));
	cr_expect_null(p->period_type.type);
	cr_expect_null(p->default_sample_type);
	cr_expect_null(p->drop_frames);
	profile_free(p);
	profile_free(NULL);
}

Test(profile, new_rejects_bad_arguments)
{
	struct profile *p = (struct profile *)0x1;

	cr_expect_eq(profile_new(NULL, types, 1), -EINVAL);
	cr_expect_eq(profile_new(&p, NULL, 1), -EINVAL);
	cr_expect_eq(p, (struct profile *)0x1, "output clobbered on failure");
	p = NULL;
	cr_expect_eq(profile_new(&p, NULL, 0), 0, "no sample types is allowed");
	profile_free(p);
}

Test(profile, intern_returns_one_copy)
{
	struct profile *p = new_profile();
	char buf[] = "main";
	const char *a = profile_intern(p, "main");

	cr_assert_not_null(a);
	cr_expect_eq(profile_intern(p, buf), a);
	cr_expect_neq((const void *)a, (const void *)buf);
	cr_expect_str_eq(profile_intern(p, NULL), "");
	cr_expect_eq(profile_intern(p, NULL), profile_intern(p, ""));
	profile_free(p);
}

Test(profile, setters_intern_and_comments_keep_order)
{
	struct profile *p = new_profile();

	cr_assert_eq(profile_set_period(p, "cpu", "nanoseconds", 10000000), 0);
	cr_expect_str_eq(p->period_type.type, "cpu");
	cr_expect_str_eq(p->period_type.unit, "nanoseconds");
	cr_expect_eq(p->period, 10000000);
	cr_assert_eq(profile_set_default_sample_type(p, "cpu"), 0);
	cr_expect_eq(p->default_sample_type, p->sample_types[1].type);
	cr_assert_eq(profile_set_drop_frames(p, "cprof_agent_.*"), 0);
	cr_expect_str_eq(p->drop_frames, "cprof_agent_.*");
	cr_assert_eq(profile_set_drop_frames(p, NULL), 0);
	cr_expect_null(p->drop_frames);
	for (int i = 0; i < 20; i++) {
		char c[24];

		snprintf(c, sizeof(c), "comment %d", i);
		cr_assert_eq(profile_add_comment(p, c), 0);
	}
	cr_expect_eq(p->ncomments, 20);
	cr_expect_str_eq(p->comments[0], "comment 0");
	cr_expect_str_eq(p->comments[19], "comment 19");
	cr_assert_eq(profile_set_period(p, NULL, NULL, 5), 0);
	cr_expect_null(p->period_type.type);
	cr_expect_eq(p->period, 5);
	profile_free(p);
}

Test(profile, mappings_are_not_deduplicated_and_get_ids)
{
	struct profile *p = new_profile();
	char file[] = "/usr/bin/app";
	struct profile_mapping m = {
		.id = 99, /* ignored: the profile assigns ids */
		.start = 0x400000,
		.limit = 0x401000,
		.offset = 0x1000,
		.file = file,
		.build_id = NULL,
		.has_functions = true,
		.has_inline_frames = true,
	};
	uint64_t id1 = 0, id2 = 0;

	cr_assert_eq(profile_add_mapping(p, &m, &id1), 0);
	cr_assert_eq(profile_add_mapping(p, &m, &id2), 0);
	file[0] = 'X';
	cr_expect_eq(id1, 1);
	cr_expect_eq(id2, 2);
	cr_expect_eq(p->nmappings, 2);
	cr_expect_eq(p->mappings[0].id, 1);
	cr_expect_str_eq(p->mappings[0].file, "/usr/bin/app");
	cr_expect_str_eq(p->mappings[0].build_id, "", "NULL build id is \"\"");
	cr_expect_eq(p->mappings[0].start, 0x400000);
	cr_expect_eq(p->mappings[0].offset, 0x1000);
	cr_expect(p->mappings[0].has_functions && p->mappings[0].has_inline_frames);
	cr_expect(!p->mappings[0].has_filenames && !p->mappings[0].has_line_numbers);
	cr_expect_eq(profile_add_mapping(p, NULL, &id1), -EINVAL);
	profile_free(p);
}

Test(profile, functions_dedup_on_all_four_fields)
{
	struct profile *p = new_profile();
	uint64_t a, b, c, d, e, f;

	cr_assert_eq(profile_intern_function(p, "foo", "_Z3foov", "a.c", 10, &a), 0);
	cr_assert_eq(profile_intern_function(p, "foo", "_Z3foov", "a.c", 10, &b), 0);
	cr_expect_eq(a, 1);
	cr_expect_eq(b, a);
	cr_assert_eq(profile_intern_function(p, "bar", "_Z3foov", "a.c", 10, &c), 0);
	cr_assert_eq(profile_intern_function(p, "foo", "foo", "a.c", 10, &d), 0);
	cr_assert_eq(profile_intern_function(p, "foo", "_Z3foov", "b.c", 10, &e), 0);
	cr_assert_eq(profile_intern_function(p, "foo", "_Z3foov", "a.c", 11, &f), 0);
	cr_expect_eq(c, 2);
	cr_expect_eq(d, 3);
	cr_expect_eq(e, 4);
	cr_expect_eq(f, 5);
	cr_expect_eq(p->nfunctions, 5);
	cr_expect_eq(p->functions[3].id, 4);
	cr_expect_str_eq(p->functions[3].file, "b.c");
	cr_assert_eq(profile_intern_function(p, NULL, NULL, NULL, 0, &a), 0);
	cr_expect_str_eq(p->functions[a - 1].name, "", "NULL strings become \"\"");
	profile_free(p);
}

Test(profile, functions_with_colliding_hashes_stay_apart)
{
	struct profile *p = new_profile();
	const char *foo = profile_intern(p, "foo"), *bar = profile_intern(p, "bar");
	const char *file = profile_intern(p, "x.c");
	uint64_t hbar = profile_function_hash(bar, bar, file, 0), a, b, idx;

	cr_assert_eq(profile_intern_function(p, foo, foo, file, 0, &a), 0);
	/* Plant foo where bar hashes to, as if their hashes were equal. */
	cr_assert_eq(u64map_put(&p->function_by_key, hbar, a - 1), 0);
	cr_assert_eq(profile_intern_function(p, bar, bar, file, 0, &b), 0);
	cr_expect_neq(b, a, "a hash collision merged two functions");
	cr_expect_str_eq(p->functions[b - 1].name, "bar");
	cr_expect(u64map_get(&p->function_by_key, hbar + 1, &idx) && idx == b - 1,
		  "bar should sit at the next hash of its chain");
	/* Both are still found through the chain. */
	cr_assert_eq(profile_intern_function(p, "bar", "bar", "x.c", 0, &idx), 0);
	cr_expect_eq(idx, b);
	cr_assert_eq(profile_intern_function(p, "foo", "foo", "x.c", 0, &idx), 0);
	cr_expect_eq(idx, a);
	cr_expect_eq(p->nfunctions, 2);
	profile_free(p);
}

Test(profile, locations_one_per_address)
{
	struct profile *p = new_profile();
	uint64_t a, b, c;

	cr_assert_eq(profile_location_for_address(p, 0x1000, &a), 0);
	cr_assert_eq(profile_location_for_address(p, 0x2000, &b), 0);
	cr_assert_eq(profile_location_for_address(p, 0x1000, &c), 0);
	cr_expect_eq(a, 1);
	cr_expect_eq(b, 2);
	cr_expect_eq(c, a);
	cr_assert_eq(profile_location_for_address(p, 0, &c), 0);
	cr_expect_eq(c, 3, "address 0 is a key like any other");
	cr_expect_eq(p->nlocations, 3);
	cr_expect_eq(p->locations[1].address, 0x2000);
	cr_expect_eq(p->locations[1].nlines, 0);
	cr_expect_eq(p->locations[1].mapping_id, 0);
	profile_free(p);
}

Test(profile, location_set_copies_and_replaces_lines)
{
	struct profile *p = new_profile();
	struct profile_mapping m = { .file = "/bin/x" };
	struct profile_line lines[2] = { { .line = 7 }, { .line = 42 } };
	uint64_t loc, map;

	cr_assert_eq(profile_add_mapping(p, &m, &map), 0);
	cr_assert_eq(profile_intern_function(p, "inlined", "inlined", "x.c", 5,
					     &lines[0].function_id), 0);
	cr_assert_eq(profile_intern_function(p, "outer", "outer", "x.c", 30,
					     &lines[1].function_id), 0);
	cr_assert_eq(profile_location_for_address(p, 0x1234, &loc), 0);
	cr_assert_eq(profile_location_set(p, loc, map, lines, 2), 0);
	lines[0].line = -1; /* the profile must keep its own copy */
	cr_expect_eq(p->locations[0].mapping_id, map);
	cr_expect_eq(p->locations[0].nlines, 2);
	cr_expect_eq(p->locations[0].lines[0].line, 7, "innermost first, as given");
	cr_expect_eq(p->locations[0].lines[1].function_id, lines[1].function_id);

	cr_assert_eq(profile_location_set(p, loc, 0, &lines[1], 1), 0);
	cr_expect_eq(p->locations[0].nlines, 1);
	cr_expect_eq(p->locations[0].lines[0].line, 42);
	cr_expect_eq(p->locations[0].mapping_id, 0);
	cr_assert_eq(profile_location_set(p, loc, 0, NULL, 0), 0);
	cr_expect_eq(p->locations[0].nlines, 0);
	profile_free(p);
}

Test(profile, location_set_checks_references)
{
	struct profile *p = new_profile();
	struct profile_line good = { .line = 1 }, bad0 = { .function_id = 0 };
	struct profile_line bad9 = { .function_id = 9 };
	uint64_t loc;

	cr_assert_eq(profile_intern_function(p, "f", "f", "", 0, &good.function_id), 0);
	cr_assert_eq(profile_location_for_address(p, 0x10, &loc), 0);
	cr_assert_eq(profile_location_set(p, loc, 0, &good, 1), 0);
	cr_expect_eq(profile_location_set(p, 0, 0, &good, 1), -EINVAL);
	cr_expect_eq(profile_location_set(p, 2, 0, &good, 1), -EINVAL);
	cr_expect_eq(profile_location_set(p, loc, 1, &good, 1), -EINVAL, "no mapping 1");
	cr_expect_eq(profile_location_set(p, loc, 0, &bad0, 1), -EINVAL);
	cr_expect_eq(profile_location_set(p, loc, 0, &bad9, 1), -EINVAL);
	cr_expect_eq(profile_location_set(p, loc, 0, NULL, 1), -EINVAL);
	/* Failures leave the location as it was. */
	cr_expect_eq(p->locations[0].nlines, 1);
	cr_expect_eq(p->locations[0].lines[0].function_id, good.function_id);
	profile_free(p);
}

Test(profile, add_location_allows_repeated_addresses)
{
	struct profile *p = new_profile();
	struct profile_line l1 = { .line = 1 }, l2 = { .line = 2 };
	uint64_t a, b, c;

	cr_assert_eq(profile_intern_function(p, "f", "f", "", 0, &l1.function_id), 0);
	cr_assert_eq(profile_intern_function(p, "g", "g", "", 0, &l2.function_id), 0);
	cr_assert_eq(profile_add_location(p, 0, 0, &l1, 1, &a), 0);
	cr_assert_eq(profile_add_location(p, 0, 0, &l2, 1, &b), 0);
	cr_expect_eq(a, 1);
	cr_expect_eq(b, 2);
	cr_expect_eq(p->locations[1].lines[0].line, 2);
	cr_assert_eq(profile_location_for_address(p, 0, &c), 0);
	cr_expect_eq(c, a, "the address index keeps the first");
	cr_expect_eq(profile_add_location(p, 0, 3, &l1, 1, &c), -EINVAL);
	cr_expect_eq(p->nlocations, 2);
	profile_free(p);
}

Test(profile, samples_merge_on_same_stack_and_labels)
{
	struct profile *p = new_profile();
	uint64_t stack[2], other[2];
	int64_t v1[] = { 1, 100 }, v2[] = { 2, 250 };
	struct profile_label labels[] = {
		{ .key = "thread_name", .str = "worker" },
		{ .key = "thread_id", .num = 42, .num_unit = NULL },
	};
	struct profile_label same[] = {
		{ .key = "thread_name", .str = "worker", .num = 7 }, /* num ignored */
		{ .key = "thread_id", .num = 42, .num_unit = "" },   /* "" is no unit */
	};

	stack[0] = location(p, 0x10, "leaf");
	stack[1] = location(p, 0x20, "main");
	other[0] = stack[1];
	other[1] = stack[0];
	cr_assert_eq(profile_add_sample(p, stack, 2, v1, labels, 2), 0);
	cr_assert_eq(profile_add_sample(p, stack, 2, v2, same, 2), 0);
	cr_expect_eq(p->nsamples, 1);
	cr_expect_eq(p->samples[0].values[0], 3);
	cr_expect_eq(p->samples[0].values[1], 350);
	cr_expect_str_eq(p->samples[0].labels[0].str, "worker");
	cr_expect_null(p->samples[0].labels[1].str);
	cr_expect_eq(p->samples[0].labels[1].num, 42);

	/* The other order of the stack is another stack. */
	cr_assert_eq(profile_add_sample(p, other, 2, v1, labels, 2), 0);
	cr_expect_eq(p->nsamples, 2);
	/* A prefix of the stack, and no stack at all, too. */
	cr_assert_eq(profile_add_sample(p, stack, 1, v1, labels, 2), 0);
	cr_assert_eq(profile_add_sample(p, NULL, 0, v1, labels, 2), 0);
	cr_expect_eq(p->nsamples, 4);

	cr_expect_eq(profile_total(p, 0), 3 + 1 + 1 + 1);
	cr_expect_eq(profile_total(p, 1), 350 + 100 + 100 + 100);
	cr_expect_eq(profile_total(p, 2), 0, "no such type");
	profile_free(p);
}

Test(profile, samples_with_different_labels_stay_apart)
{
	struct profile *p = new_profile();
	uint64_t stack[1];
	int64_t v[] = { 1, 1 };
	struct profile_label base[] = { { .key = "a", .str = "x" }, { .key = "b", .num = 1 } };
	struct profile_label swapped[] = { { .key = "b", .num = 1 }, { .key = "a", .str = "x" } };
	struct profile_label other_str[] = { { .key = "a", .str = "y" }, { .key = "b", .num = 1 } };
	struct profile_label other_num[] = { { .key = "a", .str = "x" }, { .key = "b", .num = 2 } };
	struct profile_label other_unit[] = { { .key = "a", .str = "x" },
					      { .key = "b", .num = 1, .num_unit = "bytes" } };
	struct profile_label num_not_str[] = { { .key = "a", .num = 0 }, { .key = "b", .num = 1 } };

	stack[0] = location(p, 0x10, "leaf");
	cr_assert_eq(profile_add_sample(p, stack, 1, v, base, 2), 0);
	cr_assert_eq(profile_add_sample(p, stack, 1, v, swapped, 2), 0);
	cr_assert_eq(profile_add_sample(p, stack, 1, v, other_str, 2), 0);
	cr_assert_eq(profile_add_sample(p, stack, 1, v, other_num, 2), 0);
	cr_assert_eq(profile_add_sample(p, stack, 1, v, other_unit, 2), 0);
	cr_assert_eq(profile_add_sample(p, stack, 1, v, num_not_str, 2), 0);
	cr_assert_eq(profile_add_sample(p, stack, 1, v, base, 1), 0);
	cr_assert_eq(profile_add_sample(p, stack, 1, v, NULL, 0), 0);
	cr_expect_eq(p->nsamples, 8);
	cr_expect_str_eq(p->samples[4].labels[1].num_unit, "bytes");
	cr_assert_eq(profile_add_sample(p, stack, 1, v, base, 2), 0);
	cr_expect_eq(p->nsamples, 8);
	cr_expect_eq(p->samples[0].values[0], 2);
	profile_free(p);
}

Test(profile, samples_with_colliding_hashes_stay_apart)
{
	struct profile *p = new_profile();
	uint64_t a[1], b[1], hb, idx;
	int64_t va[] = { 1, 10 }, vb[] = { 2, 20 };

	a[0] = location(p, 0x10, "a");
	b[0] = location(p, 0x20, "b");
	cr_assert_eq(profile_add_sample(p, a, 1, va, NULL, 0), 0);
	hb = profile_sample_hash(b, 1, NULL, 0);
	/* Plant sample a where b hashes to, as if their hashes were equal. */
	cr_assert_eq(u64map_put(&p->sample_by_key, hb, 0), 0);
	cr_assert_eq(profile_add_sample(p, b, 1, vb, NULL, 0), 0);
	cr_expect_eq(p->nsamples, 2, "a hash collision merged two samples");
	cr_expect_eq(p->samples[0].values[0], 1);
	cr_expect(u64map_get(&p->sample_by_key, hb + 1, &idx) && idx == 1);
	cr_assert_eq(profile_add_sample(p, b, 1, vb, NULL, 0), 0);
	cr_assert_eq(profile_add_sample(p, a, 1, va, NULL, 0), 0);
	cr_expect_eq(p->nsamples, 2);
	cr_expect_eq(p->samples[0].values[1], 20);
	cr_expect_eq(p->samples[1].values[1], 40);
	profile_free(p);
}

Test(profile, add_sample_checks_arguments)
{
	struct profile *p = new_profile();
	uint64_t good[1], zero[] = { 0 }, far[] = { 2 };
	int64_t v[] = { 1, 1 }, big[] = { INT64_MAX, 0 };
	struct profile_label nokey[] = { { .key = NULL, .str = "x" } };

	good[0] = location(p, 0x10, "f");
	cr_expect_eq(profile_add_sample(p, zero, 1, v, NULL, 0), -EINVAL);
	cr_expect_eq(profile_add_sample(p, far, 1, v, NULL, 0), -EINVAL);
	cr_expect_eq(profile_add_sample(p, NULL, 1, v, NULL, 0), -EINVAL);
	cr_expect_eq(profile_add_sample(p, good, 1, NULL, NULL, 0), -EINVAL);
	cr_expect_eq(profile_add_sample(p, good, 1, v, NULL, 1), -EINVAL);
	cr_expect_eq(profile_add_sample(p, good, 1, v, nokey, 1), -EINVAL);
	cr_expect_eq(p->nsamples, 0);

	/* A merge that would overflow changes nothing. */
	cr_assert_eq(profile_add_sample(p, good, 1, v, NULL, 0), 0);
	cr_expect_eq(profile_add_sample(p, good, 1, big, NULL, 0), -EOVERFLOW);
	cr_expect_eq(p->samples[0].values[0], 1);
	cr_expect_eq(p->samples[0].values[1], 1);
	profile_free(p);
}

Test(profile, many_distinct_samples_are_kept_apart)
{
	struct profile *p = new_profile();
	enum { N = 3000 };
	uint64_t stack[2];
	int64_t v[] = { 1, 0 };

	for (uint64_t i = 0; i < N; i++)
		cr_assert_eq(profile_location_for_address(p, 0x1000 + i, NULL), 0);
	cr_assert_eq(p->nlocations, N);
	for (int round = 0; round < 2; round++) {
		for (uint64_t i = 0; i < N; i++) {
			stack[0] = i + 1;
			stack[1] = (i * 7) % N + 1;
			v[1] = (int64_t)i;
			cr_assert_eq(profile_add_sample(p, stack, 2, v, NULL, 0), 0);
		}
	}
	cr_expect_eq(p->nsamples, N);
	for (uint64_t i = 0; i < N; i++) {
		cr_assert_eq(p->samples[i].location_ids[0], i + 1);
		cr_assert_eq(p->samples[i].values[0], 2);
		cr_assert_eq(p->samples[i].values[1], 2 * (int64_t)i);
	}
	cr_expect_eq(profile_total(p, 0), 2 * N);
	profile_free(p);
}

/* The heap's and the contention profiles' buckets: one per (stack, key),
 * in the order first seen, each with its zeroed value; one sample each. */
Test(profile, stack_table_one_bucket_per_stack_and_key)
{
	static const uint64_t a[] = { 0x1000, 0x2000, 0x3000 }, b[] = { 0x1000, 0x2000 };
	struct stack_table t;
	struct profile *p = new_profile();
	int64_t values[2] = { 1, 10 };
	size_t i, j;

	stack_table_init(&t, sizeof(double));
	cr_assert_eq(stack_table_find(&t, a, 3, 16, &i), 0);
	cr_assert_eq(i, 0);
	cr_assert_eq(*(double *)t.buckets[0].value, 0.0);
	*(double *)t.buckets[0].value = 2.5;
	cr_assert_eq(stack_table_find(&t, b, 2, 16, &j), 0);
	cr_assert_eq(j, 1, "a stack's prefix is another stack");
	cr_assert_eq(stack_table_find(&t, a, 3, 32, &j), 0);
	cr_assert_eq(j, 2, "another key is another bucket");
	for (int k = 0; k < 1000; k++) {
		uint64_t pcs[2] = { 0x5000 + (uint64_t)k, 0x6000 };

		cr_assert_eq(stack_table_find(&t, pcs, 2, 0, &j), 0);
		cr_assert_eq(j, 3 + (size_t)k);
	}
	cr_assert_eq(stack_table_find(&t, a, 3, 16, &j), 0);
	cr_assert_eq(j, 0, "found again after the index grew");
	cr_assert_eq(*(double *)t.buckets[0].value, 2.5);
	cr_assert_eq(t.buckets[0].key, 16);
	cr_assert_eq(t.nbuckets, 1003);
	cr_assert_eq(stack_table_add_sample(&t, p, 0, values, NULL, 0), 0);
	cr_assert_eq(p->nsamples, 1);
	cr_assert_eq(p->samples[0].nlocations, 3);
	stack_table_release(&t);
	profile_free(p);
}

/* The value of type 0 of @p's sample whose leaf is at @address with @tid. */
static int64_t leaf_value(const struct profile *p, uint64_t address, int64_t tid, bool *found)
{
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];

		if (p->locations[s->location_ids[0] - 1].address == address &&
		    s->labels[0].num == tid) {
			*found = true;
			return s->values[0];
		}
	}
	*found = false;
	return 0;
}

/*
 * Go's delta (serveDeltaProfile): the later profile less the earlier,
 * matched by stack and labels; a stack only in the earlier one comes in
 * negative, with its frames; what comes to zero goes.
 */
Test(profile, subtract_matches_stacks_and_labels)
{
	struct profile *before = new_profile(), *after = new_profile(), *other;
	struct profile_label t1 = { .key = "tid", .num = 1 }, t2 = { .key = "tid", .num = 2 };
	uint64_t a0 = location(before, 0x1000, "a"), b0 = location(before, 0x2000, "b");
	uint64_t z0 = location(before, 0x4000, "z");
	uint64_t a1 = location(after, 0x1000, "a"), c1 = location(after, 0x3000, "c");
	uint64_t z1 = location(after, 0x4000, "z");
	bool found;

	cr_assert_eq(profile_add_sample(before, &a0, 1, (int64_t[]){ 5, 50 }, &t1, 1), 0);
	cr_assert_eq(profile_add_sample(before, &a0, 1, (int64_t[]){ 7, 70 }, &t2, 1), 0);
	cr_assert_eq(profile_add_sample(before, &b0, 1, (int64_t[]){ 3, 30 }, &t1, 1), 0);
	cr_assert_eq(profile_add_sample(before, &z0, 1, (int64_t[]){ 4, 40 }, &t1, 1), 0);
	cr_assert_eq(profile_add_sample(after, &a1, 1, (int64_t[]){ 8, 80 }, &t1, 1), 0);
	cr_assert_eq(profile_add_sample(after, &c1, 1, (int64_t[]){ 2, 20 }, &t1, 1), 0);
	cr_assert_eq(profile_add_sample(after, &z1, 1, (int64_t[]){ 4, 40 }, &t1, 1), 0);

	cr_assert_eq(profile_subtract(after, before), 0);
	cr_expect_eq(leaf_value(after, 0x1000, 1, &found), 3);
	cr_expect(found, "a's stack of thread 1");
	cr_expect_eq(leaf_value(after, 0x1000, 2, &found), -7, "another label is another stack");
	cr_expect_eq(leaf_value(after, 0x2000, 1, &found), -3);
	cr_expect(found, "b, only before, comes in negative");
	cr_expect_eq(leaf_value(after, 0x3000, 1, &found), 2);
	leaf_value(after, 0x4000, 1, &found);
	cr_expect(!found, "z came to zero and went");
	cr_expect_eq(after->nsamples, 4);
	/* b's frame was copied with its function. */
	for (size_t i = 0; i < after->nlocations; i++)
		if (after->locations[i].address == 0x2000)
			cr_expect_str_eq(after->functions[after->locations[i].lines[0].function_id - 1]
						 .name, "b");
	/* The dedup map was rebuilt: a sample added now merges as before. */
	cr_assert_eq(profile_add_sample(after, &c1, 1, (int64_t[]){ 1, 10 }, &t1, 1), 0);
	cr_expect_eq(leaf_value(after, 0x3000, 1, &found), 3);
	cr_expect_eq(after->nsamples, 4);

	other = NULL;
	cr_assert_eq(profile_new(&other, types, 1), 0);
	cr_expect_eq(profile_subtract(after, other), -EINVAL, "other sample types");
	profile_free(other);
	profile_free(before);
	profile_free(after);
}

/* Two processes' profiles of one program in one: each sample carries its
 * process's labels, in place of any of the same key, and one function of
 * both stands once. */
Test(profile, merge_sets_each_sources_labels)
{
	struct profile *one = new_profile(), *two = new_profile(), *all = new_profile();
	struct profile_label tid = { .key = "thread_id", .num = 7 };
	struct profile_label stale = { .key = "process_id", .num = 99 };
	uint64_t a1 = location(one, 0x1000, "a"), a2 = location(two, 0x1000, "a");
	struct profile_label who1[] = { { .key = "process_id", .num = 11 },
					{ .key = "process_name", .str = "one" } };
	struct profile_label who2[] = { { .key = "process_id", .num = 22 },
					{ .key = "process_name", .str = "two" } };
	struct profile_merge how1 = { .match = PROFILE_MATCH_KEY, .labels = who1, .nlabels = 2 };
	struct profile_merge how2 = { .match = PROFILE_MATCH_KEY, .labels = who2, .nlabels = 2 };
	int64_t pid_total[3] = { 0 };

	cr_assert_eq(profile_add_sample(one, &a1, 1, (int64_t[]){ 2, 20 }, &tid, 1), 0);
	cr_assert_eq(profile_add_sample(two, &a2, 1, (int64_t[]){ 3, 30 }, &stale, 1), 0);
	cr_assert_eq(profile_merge(all, one, &how1), 0);
	cr_assert_eq(profile_merge(all, two, &how2), 0);
	cr_expect_eq(all->nsamples, 2, "one sample a process");
	cr_expect_eq(all->nfunctions, 1, "a, of both, once");
	for (size_t i = 0; i < all->nsamples; i++) {
		const struct profile_sample *s = &all->samples[i];
		const struct profile_label *pid = profile_sample_label(s, "process_id");
		const struct profile_label *name = profile_sample_label(s, "process_name");
		size_t npid = 0;

		cr_assert(pid && name, "a merged sample without its process's labels");
		for (size_t l = 0; l < s->nlabels; l++)
			npid += !strcmp(s->labels[l].key, "process_id");
		cr_expect_eq(npid, 1, "the source's process_id was not replaced");
		cr_expect_str_eq(name->str, pid->num == 11 ? "one" : "two");
		pid_total[pid->num == 11 ? 1 : 2] += s->values[1];
	}
	cr_expect_eq(pid_total[1], 20);
	cr_expect_eq(pid_total[2], 30);
	profile_free(one);
	profile_free(two);
	profile_free(all);
}

/*
 * u64map_del() without tombstones: after deleting every other key of many
 * (runs of collisions included, the table's growth too), each key left is
 * found with its value, each deleted one is gone, and the count agrees.
 */
Test(util, u64map_del_keeps_every_other_key_reachable)
{
	struct u64map m;
	const uint64_t n = 20000;
	uint64_t v;

	u64map_init(&m);
	for (uint64_t k = 0; k < n; k++)
		cr_assert_eq(u64map_put(&m, k * 4096, k + 1), 0);
	for (uint64_t k = 0; k < n; k += 2)
		cr_assert(u64map_del(&m, k * 4096));
	cr_assert(!u64map_del(&m, 0), "a key deleted twice");
	cr_assert_eq(m.count, n / 2);
	for (uint64_t k = 0; k < n; k++) {
		bool found = u64map_get(&m, k * 4096, &v);

		cr_assert_eq(found, k % 2 == 1, "key %llu: %s", (unsigned long long)k,
			     found ? "found after its deletion" : "lost");
		if (found)
			cr_assert_eq(v, k + 1);
	}
	for (uint64_t k = 0; k < n; k += 2)
		cr_assert_eq(u64map_put(&m, k * 4096, 7), 0);
	cr_assert_eq(m.count, n);
	u64map_release(&m);
}
