/*
 * The locks target's own count of its waits (tests/targets/locks), one
 * "SITE COUNT TOTAL_NS" line a site, and a contention profile's delay per
 * site against it: test-locks for block and mutex, test-serve-truth for
 * what serve answers.
 */
#ifndef CPROF_TEST_LOCK_TRUTH_H
#define CPROF_TEST_LOCK_TRUTH_H

#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile/profile.h"
#include "testhelp.h"

struct lock_truth {
	char name[32];
	uint64_t count, ns;
};

static inline size_t lock_truth_read(pid_t pid, const char *path, struct lock_truth *t,
				     size_t max)
{
	char line[256];
	size_t n = 0;
	FILE *f = NULL;

	kill(pid, SIGUSR2);
	for (int i = 0; i < 200 && !(f = fopen(path, "re")); i++)
		th_sleep_ms(25);
	cr_assert_not_null(f, "locks wrote no report %s", path);
	while (n < max && fgets(line, sizeof(line), f)) {
		unsigned long long c, ns;

		if (sscanf(line, "%31s %llu %llu", t[n].name, &c, &ns) == 3) {
			t[n].count = c;
			t[n].ns = ns;
			n++;
		}
	}
	fclose(f);
	return n;
}

static inline const struct lock_truth *lock_truth_of(const struct lock_truth *t, size_t n,
						     const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(t[i].name, name))
			return &t[i];
	cr_assert_fail("no truth for %s", name);
	return NULL;
}

/*
 * The bounds docs/measured.md quotes (tests/unit/test-docs checks them):
 * block's delay per site within BLOCK_MAX_ERR of the truth (and of each
 * other); mutex's long holder within MUTEX_LONG_MAX_ERR.
 */
#define BLOCK_MAX_ERR 0.15
#define MUTEX_LONG_MAX_ERR 0.25

static inline double lock_rel(double a, double b)
{
	return b ? fabs(a - b) / b : 1.0;
}

/* Delay (flat) per site, checked against the truth within @tol, and the
 * sites' shares against the truth's. */
static inline void lock_sites_check(const struct profile *p, const struct lock_truth *t, size_t nt,
				    const char *const *sites, size_t n, double tol)
{
	struct th_func_sum *sums;
	size_t nsums;
	int vi = th_sample_type(p, "delay", "nanoseconds");
	double first = 0, first_truth = 0;

	cr_assert_eq(vi, 1, "delay/nanoseconds is the second sample type");
	cr_assert_eq(th_sample_type(p, "contentions", "count"), 0);
	cr_assert_str_eq(p->period_type.type, "contentions");
	th_func_sums(p, (size_t)vi, &sums, &nsums);
	for (size_t i = 0; i < n; i++) {
		const struct lock_truth *tr = lock_truth_of(t, nt, sites[i]);
		struct th_func_sum s = th_func_get(sums, nsums, sites[i]);

		cr_log_info("measured: %-8s truth %5llu waits %8.1f ms; cprof %8.1f ms (%+.1f%%)",
			    sites[i], (unsigned long long)tr->count, tr->ns / 1e6, s.flat / 1e6,
			    100.0 * ((double)s.flat / (double)tr->ns - 1));
		cr_expect_leq(lock_rel((double)s.flat, (double)tr->ns), tol, "%s: %.1f%% off the truth",
			      sites[i], 100 * lock_rel((double)s.flat, (double)tr->ns));
		/* Sites against each other as their truths stand (equal by
		 * design, apart on a loaded machine): no bias by duration. */
		if (i == 0) {
			first = (double)s.flat;
			first_truth = (double)tr->ns;
		} else {
			double ratio = (double)s.flat / first;
			double truth_ratio = (double)tr->ns / first_truth;

			cr_expect_leq(lock_rel(ratio, truth_ratio), tol,
				      "%s is %.3f of %s, %.3f in the truth", sites[i], ratio,
				      sites[0], truth_ratio);
		}
	}
	free(sums);
}

#endif
