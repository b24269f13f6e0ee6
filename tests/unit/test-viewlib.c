/* lib/view (test-viewlib: test-view is the integration suite): pprof's
 * value labels, per-function flat/cum, folded stacks, drop_frames, the tree
 * and the flame graph, on hand-made profiles whose answers are known. (test-view in integration/ checks them against
 * go tool pprof on real profiles.) */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile/profile.h"
#include "view/view.h"

static const struct profile_value_type types[] = {
	{ "samples", "count" },
	{ "cpu", "nanoseconds" },
};

static struct profile *new_profile(void)
{
	struct profile *p = NULL;

	cr_assert_eq(profile_new(&p, types, 2), 0);
	return p;
}

/* A location with lines @names[0] (innermost) ... @names[n-1]. */
static uint64_t location_n(struct profile *p, uint64_t address, const char *const *names,
			   size_t n)
{
	struct profile_line lines[8] = { 0 };
	uint64_t id;

	cr_assert(n <= 8);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(profile_intern_function(p, names[i], names[i], "f.c", 1,
						     &lines[i].function_id), 0);
	cr_assert_eq(profile_add_location(p, address, 0, lines, n, &id), 0);
	return id;
}

static uint64_t location(struct profile *p, uint64_t address, const char *name)
{
	return location_n(p, address, &name, 1);
}

static void sample(struct profile *p, const uint64_t *locs, size_t n, int64_t count, int64_t ns)
{
	int64_t v[2] = { count, ns };

	cr_assert_eq(profile_add_sample(p, locs, n, v, NULL, 0), 0);
}

/* main -> work -> leaf (x3), main -> work (x1), main -> rec -> rec (x2), and
 * a location where "inl" is inlined into "work". */
static struct profile *known_profile(void)
{
	struct profile *p = new_profile();
	uint64_t m = location(p, 0x100, "main"), w = location(p, 0x200, "work"),
		 l = location(p, 0x300, "leaf"), r1 = location(p, 0x400, "rec"),
		 r2 = location(p, 0x401, "rec");
	const char *inl[] = { "inl", "work" };
	uint64_t iw = location_n(p, 0x500, inl, 2);

	sample(p, (uint64_t[]){ l, w, m }, 3, 3, 30000000);
	sample(p, (uint64_t[]){ w, m }, 2, 1, 10000000);
	sample(p, (uint64_t[]){ r2, r1, m }, 3, 2, 20000000);
	sample(p, (uint64_t[]){ iw, m }, 2, 4, 40000000);
	return p;
}

static char *render(const struct profile *p, size_t index, enum view_format f, size_t rows)
{
	char *buf = NULL;
	size_t len = 0;

	cr_assert_eq(view_render(p, index, f, rows, "t", &buf, &len), 0);
	cr_assert_eq(strlen(buf), len);
	return buf;
}

Test(viewlib, value_labels_as_pprof)
{
	static const struct {
		int64_t v;
		const char *unit, *out, *want;
	} cases[] = {
		{ 1500000000, "nanoseconds", "auto", "1.50s" },
		{ 2432876640, "nanoseconds", "ms", "2432.88ms" },
		{ 10000000, "nanoseconds", "s", "0.01s" },
		{ 524288, "bytes", "auto", "512kB" },
		{ 12345678, "bytes", "MB", "11.77MB" },
		{ 42, "count", "count", "42" },
		{ 0, "nanoseconds", "auto", "0" },
		{ 999, "nanoseconds", "auto", "999ns" },
		{ 7, "objects", "objects", "7objects" },
	};
	char buf[64];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		view_format_value(cases[i].v, cases[i].unit, cases[i].out, buf, sizeof(buf));
		cr_expect_str_eq(buf, cases[i].want, "%lld %s in %s", (long long)cases[i].v,
				 cases[i].unit, cases[i].out);
	}
}

Test(viewlib, sample_index_rules)
{
	struct profile *p = new_profile();
	size_t i = 99;

	cr_expect_eq(view_sample_index(p, NULL, &i), 0);
	cr_expect_eq(i, 1, "no default: the last type, as pprof");
	cr_expect_eq(view_sample_index(p, "samples", &i), 0);
	cr_expect_eq(i, 0);
	cr_expect_eq(view_sample_index(p, "cpu/nanoseconds", &i), 0);
	cr_expect_eq(i, 1);
	cr_expect_eq(view_sample_index(p, "alloc_space", &i), -ENOENT);
	cr_assert_eq(profile_set_default_sample_type(p, "samples"), 0);
	cr_expect_eq(view_sample_index(p, NULL, &i), 0);
	cr_expect_eq(i, 0, "the profile's default_sample_type");
	profile_free(p);
}

static const struct view_func *find(const struct view_func *f, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(f[i].name, name))
			return &f[i];
	cr_assert_fail("no function %s", name);
	return NULL;
}

Test(viewlib, flat_and_cum_counted_once_per_sample)
{
	struct profile *p = known_profile();
	struct view_func *f = NULL;
	size_t n = 0;

	cr_assert_eq(view_functions(p, 0, &f, &n), 0);
	cr_expect_eq(n, 5);
	cr_expect_eq(find(f, n, "leaf")->flat, 3);
	cr_expect_eq(find(f, n, "work")->flat, 1);
	cr_expect_eq(find(f, n, "work")->cum, 8, "leaf's 3 + its own 1 + inl's 4");
	cr_expect_eq(find(f, n, "rec")->flat, 2);
	cr_expect_eq(find(f, n, "rec")->cum, 2, "recursion counts once per sample");
	cr_expect_eq(find(f, n, "inl")->flat, 4, "the innermost line is the leaf");
	cr_expect(find(f, n, "inl")->inlined && !find(f, n, "inl")->called);
	cr_expect_eq(find(f, n, "main")->cum, 10);
	cr_expect_eq(find(f, n, "main")->flat, 0);
	/* pprof's order: flat descending, then name. */
	for (size_t i = 1; i < n; i++)
		cr_expect(f[i - 1].flat > f[i].flat ||
			  (f[i - 1].flat == f[i].flat && strcmp(f[i - 1].name, f[i].name) < 0));
	free(f);
	profile_free(p);
}

Test(viewlib, top_table)
{
	struct profile *p = known_profile();
	char *t = render(p, 1, VIEW_TOP, 0);

	cr_expect(strstr(t, "Type: cpu\n"), "%s", t);
	cr_expect(strstr(t, "Showing nodes accounting for 100ms, 100% of 100ms total\n"), "%s", t);
	cr_expect(strstr(t, "      flat  flat%   sum%        cum   cum%\n"), "%s", t);
	cr_expect(strstr(t, "      40ms 40.00% 40.00%       40ms 40.00%  inl (inline)\n"), "%s", t);
	cr_expect(strstr(t, "       0     0%   100%      100ms   100%  main\n") ||
		  strstr(t, "         0     0%   100%      100ms   100%  main\n"), "%s", t);
	free(t);
	t = render(p, 1, VIEW_TOP, 2);
	cr_expect(strstr(t, "Showing top 2 nodes out of 5\n"), "%s", t);
	cr_expect(strstr(t, "Showing nodes accounting for 70ms, 70.00% of 100ms total\n"), "%s", t);
	free(t);
	profile_free(p);
}

Test(viewlib, folded_root_first_merged_and_summing_to_the_total)
{
	struct profile *p = known_profile();
	char *t = render(p, 0, VIEW_FOLDED, 0);
	long long sum = 0;

	cr_expect_str_eq(t, "main;rec;rec 2\n"
			    "main;work 1\n"
			    "main;work;inl 4\n"
			    "main;work;leaf 3\n");
	for (char *nl = strchr(t, '\n'); nl; nl = strchr(nl + 1, '\n')) {
		char *sp = nl;

		while (sp > t && sp[-1] != ' ')
			sp--;
		sum += atoll(sp);
	}
	cr_expect_eq(sum, profile_total(p, 0));
	free(t);
	profile_free(p);
}

Test(viewlib, drop_frames_as_pprof_prunes)
{
	struct profile *p = new_profile();
	uint64_t m = location(p, 0x100, "main"), a = location(p, 0x200, "app_alloc"),
		 h = location(p, 0x300, "hook_malloc"), r = location(p, 0x400, "record_alloc");
	char *t;

	sample(p, (uint64_t[]){ r, h, a, m }, 4, 5, 5);
	/* Anchored as pprof does: "^hook_" would match only the name "hook_". */
	cr_assert_eq(profile_set_drop_frames(p, "^hook_.*|^record_alloc$"), 0);
	t = render(p, 0, VIEW_FOLDED, 0);
	cr_expect_str_eq(t, "main;app_alloc 5\n", "the hook and all below it go");
	free(t);
	profile_free(p);
}

Test(viewlib, tree_indents_callees_under_callers)
{
	struct profile *p = known_profile();
	char *t = render(p, 0, VIEW_TREE, 0);

	cr_expect(strstr(t, "  main\n"), "%s", t);
	cr_expect(strstr(t, "    work\n"), "%s", t);
	cr_expect(strstr(t, "      leaf\n"), "%s", t);
	cr_expect(strstr(t, "      rec\n"), "%s", t);
	cr_expect(strstr(t, "    work\n") < strstr(t, "    rec\n"), "by cum: work (8) first");
	free(t);
	profile_free(p);
}

Test(viewlib, svg_has_every_frame_and_escapes_names)
{
	struct profile *p = new_profile();
	uint64_t m = location(p, 0x100, "main"),
		 o = location(p, 0x200, "std::vector<int>::operator[] & \"x\"");
	char *t;

	sample(p, (uint64_t[]){ o, m }, 2, 3, 3);
	t = render(p, 0, VIEW_SVG, 0);
	cr_expect(!strncmp(t, "<?xml", 5));
	cr_expect(strstr(t, "</svg>\n"));
	cr_expect(strstr(t, "data-n=\"main\""), "main is a frame");
	cr_expect(strstr(t, "std::vector&lt;int&gt;::operator[] &amp; &quot;x&quot;"));
	cr_expect(!strstr(t, "vector<int>"), "no raw '<' outside the script");
	cr_expect(strstr(t, "<title>main (3 samples, 100%)</title>"), "%s", strstr(t, "<title>"));
	cr_expect(strstr(t, "<![CDATA["));
	free(t);
	profile_free(p);
}

Test(viewlib, formats_by_name_and_extension)
{
	enum view_format f;

	cr_expect_eq(view_format_from_path("x/cpu.svg"), VIEW_SVG);
	cr_expect_eq(view_format_from_path("cpu.folded"), VIEW_FOLDED);
	cr_expect_eq(view_format_from_path("cpu.txt"), VIEW_TOP);
	cr_expect_eq(view_format_from_path("cpu.pb.gz"), VIEW_PPROF);
	cr_expect_eq(view_format_from_name("tree", &f), 0);
	cr_expect_eq(f, VIEW_TREE);
	cr_expect_eq(view_format_from_name("png", &f), -EINVAL);
}

/* --tagfocus / --tagignore: pprof's rules on one sample's labels. */
Test(viewlib, tag_filters)
{
	struct profile_label labels[] = {
		{ .key = "state", .str = "sleeping" },
		{ .key = "syscall", .str = "futex" },
		{ .key = "thread_id", .num = 4242 },
	};
	struct profile_sample s = { .labels = labels, .nlabels = 3 };
	static const struct {
		bool ignore;
		const char *spec;
		bool keeps;
	} cases[] = {
		{ false, "state=sleeping", true },  { false, "state=^sleep$", false },
		{ false, "state=run,sleep", true }, { false, "state=running", false },
		{ true, "state=sleeping", false },  { true, "state=running", true },
		{ false, "nokey=x", false },        { true, "nokey=x", true },
		{ false, "thread_id=4242", true },  { false, "thread_id=4241", false },
		{ false, "thread_id=4000:5000", true }, { false, "thread_id=:4241", false },
		{ false, "thread_id=4243:", false },    { false, "4242", true },
		{ false, "state=4242", false },     /* a range: state is not numeric */
		{ false, "state:sleep,syscall:fu", true }, /* no key: each matches */
		{ false, "state:sleep,syscall:read", false },
	};
	char why[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct view_filter *f = NULL;

		cr_assert_eq(view_filter_add(&f, cases[i].ignore, cases[i].spec, why, sizeof(why)),
			     0, "%s: %s", cases[i].spec, why);
		cr_expect_eq(view_filter_keeps(f, &s), cases[i].keeps, "%s%s",
			     cases[i].ignore ? "ignore " : "", cases[i].spec);
		view_filter_free(f);
	}
	cr_expect(view_filter_keeps(NULL, &s));
	{
		struct view_filter *f = NULL;

		/* Repeated: every focus must match. */
		cr_assert_eq(view_filter_add(&f, false, "state=sleeping", why, sizeof(why)), 0);
		cr_assert_eq(view_filter_add(&f, false, "syscall=read", why, sizeof(why)), 0);
		cr_expect(!view_filter_keeps(f, &s));
		cr_expect_eq(view_filter_add(&f, false, "state=(", why, sizeof(why)), -EINVAL);
		cr_expect(strstr(why, "not a regular expression"), "%s", why);
		cr_expect_eq(view_filter_add(&f, false, "size=4mb:", why, sizeof(why)), -EOPNOTSUPP);
		cr_expect_eq(view_filter_add(&f, false, "state=", why, sizeof(why)), -EINVAL);
		view_filter_free(f);
	}
}

/* ---- two profiles compared (diff.c) ------------------------------------- */

/* main -> NAME samples of @count and @ms milliseconds, at fixed addresses
 * so that the same function is the same location in both profiles. */
static void diff_sample(struct profile *p, const char *name, int64_t count, int64_t ms)
{
	static const char *const names[] = { "grow", "same", "shrink", "gone" };
	uint64_t m = location(p, 0x100, "main"), at = 0x200;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(names[i], name))
			at = 0x200 + 0x100 * i;
	sample(p, (uint64_t[]){ location(p, at, name), m }, 2, count, ms * 1000000);
}

/* NEW: grow 60 ms, same 20, shrink 10 (90 ms in 9 samples); OLD: grow 10,
 * same 20, shrink 40, gone 30 (100 ms in 10 samples). */
static void diff_pair(struct profile **ret_new, struct profile **ret_old)
{
	struct profile *n = new_profile(), *o = new_profile();

	diff_sample(n, "grow", 6, 60);
	diff_sample(n, "same", 2, 20);
	diff_sample(n, "shrink", 1, 10);
	diff_sample(o, "grow", 1, 10);
	diff_sample(o, "same", 2, 20);
	diff_sample(o, "shrink", 4, 40);
	diff_sample(o, "gone", 3, 30);
	*ret_new = n;
	*ret_old = o;
}

static char *render_diff(const struct view_diff *d, size_t index, enum view_format f)
{
	char *buf = NULL;
	size_t len = 0;

	cr_assert_eq(view_diff_render(d, index, f, 0, "t", NULL, &buf, &len), 0);
	cr_assert_eq(strlen(buf), len);
	return buf;
}

static size_t base_labelled(const struct profile *p)
{
	size_t n = 0;

	for (size_t i = 0; i < p->nsamples; i++)
		for (size_t l = 0; l < p->samples[i].nlabels; l++)
			n += !strcmp(p->samples[i].labels[l].key, "pprof::base") &&
			     !strcmp(p->samples[i].labels[l].str, "true");
	return n;
}

/* The pair of diff_pair() compared; diff_close() frees all three. */
struct diff_case {
	struct profile *n, *o;
	struct view_diff *d;
};

static struct diff_case diff_open(enum view_diff_mode mode, bool normalize)
{
	struct diff_case c = { 0 };
	char why[256];

	diff_pair(&c.n, &c.o);
	cr_assert_eq(view_diff_new(c.n, c.o, mode, normalize, &c.d, why, sizeof(why)), 0, "%s",
		     why);
	return c;
}

static void diff_close(struct diff_case *c)
{
	view_diff_free(c->d);
	profile_free(c->n);
	profile_free(c->o);
}

/* --base: OLD negated and merged into NEW's samples of the same stack;
 * those that cancel go; folded values are signed. */
Test(viewlib, diff_subtracts_and_folds_signed)
{
	struct diff_case c = diff_open(VIEW_DIFF_SUBTRACT, false);
	const struct view_diff *d = c.d;
	char *t;

	cr_expect_eq(base_labelled(view_diff_profile(d)), 0);
	cr_expect_eq(view_diff_profile(d)->nsamples, 3, "same cancels out: grow, shrink, gone");
	cr_expect_eq(profile_total(view_diff_profile(d), 1), 90000000 - 100000000);
	t = render_diff(d, 1, VIEW_FOLDED);
	cr_expect_str_eq(t, "main;gone -30000000\nmain;grow 50000000\nmain;shrink -30000000\n");
	free(t);
	/* The total is of absolute values: 30 + 50 + 30 ms. */
	t = render_diff(d, 1, VIEW_TOP);
	cr_expect(strstr(t, "Showing nodes accounting for -10ms, 9.09% of 110ms total\n"), "%s", t);
	cr_expect(strstr(t, "      50ms 45.45% 45.45%       50ms 45.45%  grow\n"), "%s", t);
	cr_expect(strstr(t, "     -30ms 27.27% 18.18%      -30ms 27.27%  gone\n"), "%s", t);
	cr_expect(!strstr(t, "same"), "a function of nothing is no row:\n%s", t);
	free(t);
	diff_close(&c);
}

/* --diff-base: OLD's samples stay apart, labelled, and percentages are of
 * OLD's total. */
Test(viewlib, diff_base_labels_old_and_takes_its_total)
{
	struct diff_case c = diff_open(VIEW_DIFF_BASE, false);
	const struct view_diff *d = c.d;
	char *t;

	cr_expect_eq(base_labelled(view_diff_profile(d)), c.o->nsamples);
	cr_expect_eq(view_diff_profile(d)->nsamples, c.n->nsamples + c.o->nsamples);
	t = render_diff(d, 1, VIEW_TOP);
	cr_expect(strstr(t, "of 100ms total\n"), "%s", t);
	cr_expect(strstr(t, "      50ms 50.00% 50.00%       50ms 50.00%  grow\n"), "%s", t);
	free(t);
	t = render_diff(d, 1, VIEW_FOLDED);
	cr_expect_str_eq(t, "main;gone -30000000\nmain;grow 50000000\nmain;shrink -30000000\n");
	free(t);
	diff_close(&c);
}

/* --normalize: NEW scaled by OLD's sum over NEW's, per sample type, each
 * value rounded (pprof's ScaleN). */
Test(viewlib, diff_normalize_scales_new_to_old)
{
	struct diff_case c = diff_open(VIEW_DIFF_SUBTRACT, true);
	const struct view_diff *d = c.d;
	double ratio[2];
	char *t;

	view_diff_ratios(c.n, c.o, ratio);
	cr_expect_float_eq(ratio[0], 10.0 / 9.0, 1e-12);
	cr_expect_float_eq(ratio[1], 100.0 / 90.0, 1e-12);
	/* grow: round(60 ms * 10/9) - 10 ms; same: round(20 ms * 10/9) - 20 ms. */
	t = render_diff(d, 1, VIEW_FOLDED);
	cr_expect_str_eq(t, "main;gone -30000000\nmain;grow 56666667\nmain;same 2222222\n"
			    "main;shrink -28888889\n");
	free(t);
	/* Normalized, NEW sums to OLD: the difference sums to zero. */
	cr_expect_leq(llabs((long long)profile_total(view_diff_profile(d), 1)), 1);
	diff_close(&c);
}

Test(viewlib, diff_refuses_other_sample_types)
{
	static const struct profile_value_type heap[] = { { "alloc_space", "bytes" } };
	struct profile *n = new_profile(), *o = NULL;
	struct view_diff *d = NULL;
	char why[256];

	cr_assert_eq(profile_new(&o, heap, 1), 0);
	cr_expect_eq(view_diff_new(n, o, VIEW_DIFF_BASE, false, &d, why, sizeof(why)), -EINVAL);
	cr_expect_null(d);
	cr_expect_str_eq(why, "incompatible sample types [samples/count cpu/nanoseconds] and "
			      "[alloc_space/bytes]");
	profile_free(n);
	profile_free(o);
}

/* The fill of frame @name in a flame graph. */
static void frame_fill(const char *svg, const char *name, char *buf, size_t size)
{
	char want[64];
	const char *at, *fill;

	snprintf(want, sizeof(want), "data-n=\"%s\"", name);
	at = strstr(svg, want);
	cr_assert_not_null(at, "no frame %s", name);
	fill = strstr(at, " fill=\"");
	cr_assert_not_null(fill);
	fill += 7;
	snprintf(buf, size, "%.*s", (int)strcspn(fill, "\""), fill);
}

/* Red grew, blue shrank, white the same: flamegraph.pl's colours. */
Test(viewlib, diff_flame_graph_red_grew_blue_shrank)
{
	struct diff_case c = diff_open(VIEW_DIFF_SUBTRACT, false);
	char fill[32], *t;
	int r, g, b;

	t = render_diff(c.d, 1, VIEW_SVG);
	frame_fill(t, "grow", fill, sizeof(fill));
	cr_assert_eq(sscanf(fill, "rgb(%d,%d,%d)", &r, &g, &b), 3, "%s", fill);
	cr_expect(r == 255 && g == b && g < 255, "grow is red: %s", fill);
	cr_expect_eq(g, 0, "the largest change is the full colour: %s", fill);
	frame_fill(t, "shrink", fill, sizeof(fill));
	cr_assert_eq(sscanf(fill, "rgb(%d,%d,%d)", &r, &g, &b), 3, "%s", fill);
	cr_expect(b == 255 && r == g && r < 255 && r > 0, "shrink is blue, lighter: %s", fill);
	frame_fill(t, "same", fill, sizeof(fill));
	cr_expect_str_eq(fill, "rgb(255,255,255)");
	cr_expect(!strstr(t, "data-n=\"gone\""), "widths are NEW's: gone has none");
	cr_expect(strstr(t, "<title>grow (60ms, 66.67%; change +50ms)</title>"), "%s", t);
	free(t);
	diff_close(&c);
}
