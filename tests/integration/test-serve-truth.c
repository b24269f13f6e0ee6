/*
 * What cprof serve answers is as right as the commands' own profiles: the
 * same targets that count their own truth (heapsites, locks), the same
 * checks and bounds as test-heap, test-heap-alloc and test-locks, on the
 * profiles served at /debug/pprof/allocs, /block and /mutex. Those are
 * cumulative since serve began, as Go's are since the program's start;
 * the targets count from the moment the agent's hooks went in, and the
 * truth is read right after each answer.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "heap-accuracy.h"
#include "lock-truth.h"
#include "pprof/pprof.h"
#include "profile/profile.h"
#include "serve-client.h"
#include "testhelp.h"

TestSuite(serve_truth, .init = th_init, .fini = th_cleanup, .timeout = 180);

static void skip_unless_ready(void)
{
	if (geteuid() != 0)
		TH_SKIP_MISSING("cprof serve's agent needs ptrace of the target: run as root");
	th_skip_accuracy_when_sanitized();
}

/* GET @path from @s: its profile, decoded. */
static struct profile *served(const struct server *s, const char *path)
{
	struct profile *p = NULL;
	struct reply r;

	get(s, path, NULL, &r);
	cr_assert_eq(r.status, 200, "%s: %d %s", path, r.status, r.body ? r.body : "");
	cr_assert_eq(pprof_decode((const uint8_t *)r.body, r.body_len, &p), 0,
		     "%s: not a profile", path);
	reply_release(&r);
	return p;
}

/* Rate 512 for 4 s at 8000 rounds/s: test-heap-alloc's, ~1000 samples for
 * the 16-byte sites. */
Test(serve_truth, allocs_as_right_as_heaps)
{
	const char *report = th_tmp_path("serve-heapsites.report");
	struct server s;
	struct profile *p;
	pid_t pid;

	skip_unless_ready();
	pid = TH_SPAWN("heapsites", "60", report, "256", "8000");
	serve_start(&s, pid, (const char *const[]){ "--listen", "127.0.0.1:0", "--heap-rate",
						    "512", NULL });
	th_sleep_ms(4000);
	p = served(&s, "/debug/pprof/allocs");
	heapsites_check(p, pid, report, "512", 512, "glibc, served");
	profile_free(p);
	cr_expect_eq(serve_stop(&s, SIGTERM), 0);
	th_kill(pid);
}

/* test-locks' block_unbiased_one_long_vs_ten_short, served. */
Test(serve_truth, block_as_right_as_blocks)
{
	static const char *const sites[] = { "site_a", "site_b" };
	const char *report = th_tmp_path("serve-locks-ab.report");
	struct lock_truth t[8];
	struct server s;
	struct profile *p;
	size_t nt;
	pid_t pid;

	skip_unless_ready();
	pid = TH_SPAWN("locks", "ab", "60", "500", report);
	serve_start(&s, pid, (const char *const[]){ "--listen", "127.0.0.1:0", "--block-rate",
						    "2ms", NULL });
	th_sleep_ms(5000);
	p = served(&s, "/debug/pprof/block");
	nt = lock_truth_read(pid, report, t, 8);
	lock_sites_check(p, t, nt, sites, 2, BLOCK_MAX_ERR);
	profile_free(p);
	cr_expect_eq(serve_stop(&s, SIGTERM), 0);
	th_kill(pid);
}

/* test-locks' mutex_charges_the_holder, served. */
Test(serve_truth, mutex_charges_the_holder)
{
	const char *report = th_tmp_path("serve-locks-holders.report");
	struct th_func_sum *sums, lng, shrt;
	const struct lock_truth *tl;
	struct lock_truth t[8];
	struct server s;
	struct profile *p;
	size_t nt, nsums;
	pid_t pid;

	skip_unless_ready();
	pid = TH_SPAWN("locks", "holders", "60", "500", report);
	serve_start(&s, pid, (const char *const[]){ "--listen", "127.0.0.1:0",
						    "--mutex-fraction", "1", NULL });
	th_sleep_ms(4000);
	p = served(&s, "/debug/pprof/mutex");
	nt = lock_truth_read(pid, report, t, 8);
	th_func_sums(p, 1, &sums, &nsums);
	lng = th_func_get(sums, nsums, "holder_long");
	shrt = th_func_get(sums, nsums, "holder_short");
	tl = lock_truth_of(t, nt, "holder_long");
	cr_log_info("measured: served mutex: holder_long %.1f ms (truth %.1f, %+.1f%%), "
		    "holder_short %.1f ms", lng.flat / 1e6, tl->ns / 1e6,
		    100.0 * ((double)lng.flat / (double)tl->ns - 1), shrt.flat / 1e6);
	cr_expect_leq(lock_rel((double)lng.flat, (double)tl->ns), MUTEX_LONG_MAX_ERR);
	cr_expect_gt(lng.flat, 4 * shrt.flat, "the long holder must carry most of the delay");
	free(sums);
	profile_free(p);
	cr_expect_eq(serve_stop(&s, SIGTERM), 0);
	th_kill(pid);
}
