/*
 * The accuracy check on Go's heap-sampling pattern (tests/targets/heapsites), shared
 * by test-heap (glibc) and test-heap-alloc (jemalloc, tcmalloc, mimalloc):
 * cprof heap against the truth the target counts itself over exactly the
 * window the agent hooks its malloc slot. Every site within HEAP_SITE_MAX_ERR,
 * sites at or above the rate within HEAP_AT_RATE_MAX_ERR, each from at least
 * HEAP_MIN_SAMPLES expected samples, the retained live set within
 * HEAP_LIVE_MAX_ERR, sites that free at once ~0 in use, Go's sample types and
 * period. docs/measured.md quotes these bounds (tests/unit/test-docs checks).
 */
#ifndef CPROF_TEST_HEAP_ACCURACY_H
#define CPROF_TEST_HEAP_ACCURACY_H

#define HEAP_SITE_MAX_ERR 0.15
#define HEAP_AT_RATE_MAX_ERR 0.03
#define HEAP_MIN_SAMPLES 400
#define HEAP_LIVE_MAX_ERR 0.15

#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "site-truth.h"
#include "testhelp.h"

/* A site's samples: what each of its allocations was expected to give. */
static inline double expected_samples(const struct site_truth *t, uint64_t rate)
{
	double avg = t->objects ? (double)t->bytes / (double)t->objects : 0;

	return (double)t->objects * (1 - exp(-avg / (double)rate));
}

/* One site against its truth (logged), its in-use bytes at most @inuse_max;
 * returns its larger error (objects or bytes). */
static inline double check_site(const struct site_truth *t, struct th_func_sum *const sums[4],
				const size_t nsums[4], uint64_t rate, int64_t inuse_max)
{
	struct th_func_sum ao = th_func_get(sums[0], nsums[0], t->name);
	struct th_func_sum as = th_func_get(sums[1], nsums[1], t->name);
	double avg = (double)t->bytes / (double)t->objects, expected = expected_samples(t, rate);
	double limit = avg >= (double)rate ? HEAP_AT_RATE_MAX_ERR : HEAP_SITE_MAX_ERR;
	double eo = rel_err((double)ao.flat, (double)t->objects);
	double eb = rel_err((double)as.flat, (double)t->bytes);

	cr_log_info("%-9s truth %8llu objects %12llu bytes; cprof %8lld (%+.1f%%) %12lld "
		    "(%+.1f%%); ~%.0f samples", t->name, (unsigned long long)t->objects,
		    (unsigned long long)t->bytes, (long long)ao.flat,
		    100.0 * ((double)ao.flat / (double)t->objects - 1), (long long)as.flat,
		    100.0 * ((double)as.flat / (double)t->bytes - 1), expected);
	cr_assert_geq(expected, HEAP_MIN_SAMPLES, "%s: only %.0f expected samples: run longer",
		      t->name, expected);
	cr_expect_leq(eo, limit, "%s: alloc_objects off by %.1f%%", t->name, eo * 100);
	cr_expect_leq(eb, limit, "%s: alloc_space off by %.1f%%", t->name, eb * 100);
	if (inuse_max >= 0) {
		struct th_func_sum is = th_func_get(sums[3], nsums[3], t->name);

		/* At most the one block in flight when the hooks went. */
		cr_expect_leq(is.flat, inuse_max, "%s frees at once, yet %lld bytes in use", t->name,
			      (long long)is.flat);
	}
	return eo > eb ? eo : eb;
}

/*
 * A heap profile @p of the heapsites target @pid at @rate (@rate_arg as
 * written) against the truth it writes to @report on SIGUSR2: the whole
 * check but how the profile was taken. @what names the allocator in the log.
 */
static inline void heapsites_check(const struct profile *p, pid_t pid, const char *report,
				   const char *rate_arg, uint64_t rate, const char *what)
{
	static const char *const sites[] = {
		"a_512k", "a_256k_1", "a_1k", "a_256k_2", "a_512", "a_256k_3", "a_256",
		"a_256k_4", "a_16", "b_1k", "b_512", "b_256", "b_16", "retain_4k",
	};
	struct site_truth truth[32];
	struct th_func_sum *sums[4];
	size_t nsums[4], ntruth;
	const struct site_truth *live;
	double at_rate = 0, tiny = 0, live_err, min_samples = 1e300;
	int vi[4];

	kill(pid, SIGUSR2);
	ntruth = read_truth(report, truth, 32);
	vi[0] = th_sample_type(p, "alloc_objects", "count");
	vi[1] = th_sample_type(p, "alloc_space", "bytes");
	vi[2] = th_sample_type(p, "inuse_objects", "count");
	vi[3] = th_sample_type(p, "inuse_space", "bytes");
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(vi[i], i, "sample type %d in Go's order", i);
		th_func_sums(p, (size_t)vi[i], &sums[i], &nsums[i]);
	}
	cr_assert_str_eq(p->period_type.type, "space");
	cr_assert_str_eq(p->period_type.unit, "bytes");
	cr_assert_eq(p->period, (int64_t)rate);
	cr_assert_str_eq(p->default_sample_type, "alloc_space");
	cr_assert(!th_has_comment(p, "lost "), "%s: records were lost", what);

	cr_log_info("%s:", what);
	for (size_t i = 0; i < sizeof(sites) / sizeof(sites[0]); i++) {
		const struct site_truth *t = truth_of(truth, ntruth, sites[i]);
		int64_t max_block = t->objects ? (int64_t)(t->bytes / t->objects) * 4 : 0;

		double err = check_site(t, sums, nsums, rate,
					strcmp(sites[i], "retain_4k") ? max_block : -1);

		if (t->objects && t->bytes / t->objects >= rate && err > at_rate)
			at_rate = err;
		if (t->objects && t->bytes / t->objects == 16 && err > tiny)
			tiny = err;
		if (expected_samples(t, rate) < min_samples)
			min_samples = expected_samples(t, rate);
	}
	live = truth_of(truth, ntruth, "live_retain_4k");
	{
		struct th_func_sum io = th_func_get(sums[2], nsums[2], "retain_4k");
		struct th_func_sum is = th_func_get(sums[3], nsums[3], "retain_4k");

		cr_log_info("retain_4k live: truth %llu objects %llu bytes; cprof %lld, %lld",
			    (unsigned long long)live->objects, (unsigned long long)live->bytes,
			    (long long)io.flat, (long long)is.flat);
		live_err = rel_err((double)is.flat, (double)live->bytes);
		cr_expect_leq(live_err, HEAP_LIVE_MAX_ERR);
		cr_expect_leq(rel_err((double)io.flat, (double)live->objects), HEAP_LIVE_MAX_ERR);
	}
	/* The figures docs/measured.md quotes (scripts/measured collects them). */
	cr_log_info("measured: heap accuracy, %s, rate %s: sites >= the rate within %.1f%%, "
		    "16 B sites within %.1f%% (>= %.0f samples a site); retained inuse_space "
		    "within %.1f%%",
		    what, rate_arg, 100 * at_rate, 100 * tiny, min_samples, 100 * live_err);
	/* Every sample says its block size. */
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_label *l = th_label(&p->samples[i], "bytes");

		cr_assert(l && !l->str && l->num > 0, "sample %zu has no numeric bytes label", i);
	}
	for (int i = 0; i < 4; i++)
		free(sums[i]);
}

/*
 * Runs the heapsites target (spawned by the caller as @pid, its report at
 * @report) under `cprof heap --heap-rate @rate -d @duration` and checks the
 * profile against its truth.
 */
static inline void check_heapsites_accuracy(pid_t pid, const char *report, const char *rate_arg,
					    uint64_t rate, const char *duration, const char *what)
{
	const char *out = th_tmp_path("heap-accuracy.pb.gz");
	struct profile *p;
	struct th_run r;

	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(pid), "-d", duration, "--heap-rate", rate_arg,
		 "-o", out, "--index", "alloc_space");
	th_run_log(&r, "cprof heap");
	cr_assert_eq(r.exit_code, 0, "%s: cprof heap exited %d", what, r.exit_code);
	cr_assert(!strstr(r.err, "lost"), "%s: samples were lost: %s", what, r.err);
	p = th_load_profile(out);
	cr_assert_not_null(p);
	heapsites_check(p, pid, report, rate_arg, rate, what);
	th_kill(pid);
	th_assert_pprof_ok(out);
	profile_free(p);
	th_run_release(&r);
}

#endif
