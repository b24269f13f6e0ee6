/*
 * cprof block, mutex and threadcreate on tests/targets/locks, whose truth
 * is what it measured itself around every wait, over exactly the window
 * the agent hooked it:
 *   - block is unbiased (Go's saveblockevent()): site A waits once for D, site B ten
 *     times for D/10; at a rate between the two, both totals are within
 *     15% of the truth and of each other; waits of 1x, 2x, 3x a base with
 *     equal totals stay equal at a rate of 2x the base;
 *   - mutex charges the holder's unlock site: the long holder gets the
 *     delay, the waiter's lock site none;
 *   - rwlock, condition variable and semaphore waits appear at their sites;
 *   - threadcreate counts every creation at its site.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profiler/profiler.h"
#include "lock-truth.h"
#include "testhelp.h"

TestSuite(locks, .init = th_init, .fini = th_cleanup, .timeout = 180);

/* At least BLOCK_WALKED_MIN_PCT of block's records walked by the agent
 * itself (docs/measured.md quotes it; tests/unit/test-docs checks). */
#define BLOCK_WALKED_MIN_PCT 90

static void skip_without_ptrace(void)
{
	if (geteuid() != 0)
		TH_SKIP_MISSING("the agent needs ptrace of the target: run as root");
}

/* Runs `cprof CMD -p PID -d DUR [RATE_OPTION RATE] -o OUT` and loads OUT. */
static struct profile *profile_of(const char *cmd, pid_t pid, const char *dur, const char *rate,
				  const char *out)
{
	struct th_run r;

	if (rate)
		TH_CPROF(&r, 60000, cmd, "-p", th_pid_str(pid), "-d", dur, th_rate_option(cmd), rate,
			 "-o", out);
	else
		TH_CPROF(&r, 60000, cmd, "-p", th_pid_str(pid), "-d", dur, "-o", out);
	th_run_log(&r, cmd);
	cr_assert_eq(r.exit_code, 0);
	th_run_release(&r);
	th_assert_pprof_ok(out);
	return th_load_profile(out);
}

/* The block profile of locks MODE (BASE_US) at RATE against its truth. */
static void block_unbiased(const char *mode, const char *base_us, const char *rate,
			   const char *const *sites, size_t n)
{
	const char *report = th_tmp_path("locks-unbiased.report");
	struct lock_truth t[8];
	struct profile *p;
	size_t nt;
	pid_t pid;

	skip_without_ptrace();
	th_skip_accuracy_when_sanitized();
	pid = TH_SPAWN("locks", mode, "20", base_us, report);
	p = profile_of("block", pid, "5s", rate, th_tmp_path("block-unbiased.pb.gz"));
	nt = lock_truth_read(pid, report, t, 8);
	lock_sites_check(p, t, nt, sites, n, BLOCK_MAX_ERR);
	profile_free(p);
	th_kill(pid);
}

Test(locks, block_unbiased_one_long_vs_ten_short)
{
	static const char *const sites[] = { "site_a", "site_b" };

	/* D = 5 ms at site_a, D/10 = 0.5 ms at site_b; rate 2 ms in between. */
	block_unbiased("ab", "500", "2ms", sites, 2);
}

Test(locks, block_unbiased_1x_2x_3x)
{
	static const char *const sites[] = { "site_1x", "site_2x", "site_3x" };

	/* Waits of 1, 2 and 3 ms, equal totals; rate 2 ms (2x the base). */
	block_unbiased("three", "1000", "2ms", sites, 3);
}

Test(locks, mutex_charges_the_holder)
{
	const char *report = th_tmp_path("locks-holders.report");
	struct th_func_sum *sums, lng, shrt, waiter;
	const struct lock_truth *tl, *ts;
	struct lock_truth t[8];
	struct profile *p;
	size_t nt, nsums;
	pid_t pid;

	skip_without_ptrace();
	pid = TH_SPAWN("locks", "holders", "20", "500", report);
	p = profile_of("mutex", pid, "4s", NULL, th_tmp_path("mutex.pb.gz"));
	nt = lock_truth_read(pid, report, t, 8);
	th_func_sums(p, 1, &sums, &nsums);
	lng = th_func_get(sums, nsums, "holder_long");
	shrt = th_func_get(sums, nsums, "holder_short");
	waiter = th_func_get(sums, nsums, "contend");
	tl = lock_truth_of(t, nt, "holder_long");
	ts = lock_truth_of(t, nt, "holder_short");
	cr_log_info("measured: mutex: holder_long %.1f ms (truth %.1f), holder_short %.1f ms "
		    "(truth %.1f), "
		    "waiter's site %.1f ms", lng.flat / 1e6, tl->ns / 1e6, shrt.flat / 1e6,
		    ts->ns / 1e6, waiter.cum / 1e6);
	cr_expect_leq(lock_rel((double)lng.flat, (double)tl->ns), MUTEX_LONG_MAX_ERR);
	cr_expect_leq(lock_rel((double)shrt.flat, (double)ts->ns), 0.5);
	cr_expect_gt(lng.flat, 4 * shrt.flat, "the long holder must carry most of the delay");
	cr_expect_eq(waiter.cum, 0, "the waiter's lock site was charged");
	free(sums);
	profile_free(p);
	th_kill(pid);
}

Test(locks, rwlock_cond_sem_at_their_sites)
{
	static const char *const sites[] = { "wait_rdlock", "wait_wrlock", "wait_cond", "wait_sem" };
	struct th_func_sum *sums;
	struct profile *p;
	size_t nsums;
	pid_t pid;

	skip_without_ptrace();
	pid = TH_SPAWN("locks", "kinds", "20", "2000", th_tmp_path("locks-kinds.report"));
	p = profile_of("block", pid, "2s", "1us", th_tmp_path("block-kinds.pb.gz"));
	th_func_sums(p, 0, &sums, &nsums);
	for (size_t i = 0; i < sizeof(sites) / sizeof(sites[0]); i++) {
		struct th_func_sum s = th_func_get(sums, nsums, sites[i]);

		cr_log_info("%s: %lld contentions", sites[i], (long long)s.flat);
		cr_expect_gt(s.flat, 0, "no wait at %s", sites[i]);
	}
	free(sums);
	profile_free(p);
	th_kill(pid);
}

Test(locks, threadcreate_counts_every_creation)
{
	const char *report = th_tmp_path("locks-create.report");
	struct th_func_sum *sums, s;
	const struct lock_truth *tc;
	struct lock_truth t[8];
	struct profile *p;
	size_t nt, nsums;
	pid_t pid;

	skip_without_ptrace();
	pid = TH_SPAWN("locks", "create", "20", "2000", report);
	p = profile_of("threadcreate", pid, "2s", NULL, th_tmp_path("threadcreate.pb.gz"));
	nt = lock_truth_read(pid, report, t, 8);
	cr_assert_eq(th_sample_type(p, "threadcreate", "count"), 0);
	th_func_sums(p, 0, &sums, &nsums);
	s = th_func_get(sums, nsums, "create_threads");
	tc = lock_truth_of(t, nt, "create_threads");
	cr_log_info("threadcreate: %lld at create_threads, truth %llu", (long long)s.flat,
		    (unsigned long long)tc->count);
	/* Every creation counted, however many the machine let it make (a
	 * starved target made 76 instead of ~950 in one CI run). */
	cr_expect_gt(tc->count, 0, "the target created no thread in the window");
	cr_expect_leq(llabs(s.flat - (long long)tc->count), 2);
	free(sums);
	profile_free(p);
	th_kill(pid);
}

/* ---- the agent walks the frames itself, with cprof's rules --------------- */

/* `cprof view --folded --index contentions` of @path into @f (stacks root
 * first, ';' between frames). */
static size_t folded_of(const char *path, struct th_stack *f, size_t max)
{
	char *save = NULL, *line;
	struct th_run r;
	size_t n = 0;

	TH_CPROF(&r, 30000, "view", "--folded", "--index", "contentions", path);
	cr_assert_eq(r.exit_code, 0);
	for (line = strtok_r(r.out, "\n", &save); line && n < max; line = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(line, ' ');

		if (!sp)
			continue;
		*sp = 0;
		snprintf(f[n].text, sizeof(f[n].text), "%s", line);
		f[n++].count = strtol(sp + 1, NULL, 10);
	}
	th_run_release(&r);
	return n;
}

/* "N records (W stacks walked in the target)" of cprof's summary ("1
 * record", "1 stack" in the singular). */
static void walked_of(const char *err, long *records, long *walked)
{
	const char *p = strstr(err, "wrote ");

	*records = *walked = -1;
	cr_assert_not_null(p, "no summary in: %s", err);
	p = strstr(p, ": ");
	cr_assert_not_null(p, "no summary in: %s", err);
	cr_assert_eq(sscanf(p, ": %ld record", records), 1, "%s", p);
	p = strchr(p, '(');
	cr_assert(p && sscanf(p, "(%ld stack", walked) == 1, "%s", err);
}

/*
 * The same process's block profile twice: with rules (the agent walks
 * nearly every record after the first ones) and with every stack copied
 * (CPROF_COPY_STACKS). Every stack either run saw at least 20 times
 * must be in the other: a walk that lost, added or shifted a frame would
 * make a stack the copies never give.
 */
Test(locks, block_walked_stacks_match_copied_stacks)
{
	static struct th_stack walked[256], copied[256];
	const char *out_w = th_tmp_path("block-walked.pb.gz"), *out_c = th_tmp_path("block-copied.pb.gz");
	long records[2], nwalked[2];
	size_t nw, nc, checked;
	struct th_run r;
	pid_t pid;

	skip_without_ptrace();
	pid = TH_SPAWN("locks", "ab", "20", "500", th_tmp_path("locks-walk.report"));
	TH_CPROF(&r, 30000, "block", "-p", th_pid_str(pid), "-d", "2s", "--block-rate", "1ms", "-o",
		 out_w);
	cr_assert_eq(r.exit_code, 0);
	walked_of(r.err, &records[0], &nwalked[0]);
	th_run_release(&r);
	cr_assert_eq(setenv("CPROF_COPY_STACKS", "1", 1), 0);
	TH_CPROF(&r, 30000, "block", "-p", th_pid_str(pid), "-d", "2s", "--block-rate", "1ms", "-o",
		 out_c);
	unsetenv("CPROF_COPY_STACKS");
	cr_assert_eq(r.exit_code, 0);
	walked_of(r.err, &records[1], &nwalked[1]);
	th_run_release(&r);
	th_kill(pid);

	nw = folded_of(out_w, walked, 256);
	nc = folded_of(out_c, copied, 256);
	cr_log_info("measured: block with rules: %ld of %ld records walked, %zu stacks; copies: "
		    "%ld of %ld, %zu stacks",
		    nwalked[0], records[0], nw, nwalked[1], records[1], nc);
	cr_assert_gt(records[0], 100);
	cr_assert_geq(nwalked[0], records[0] * BLOCK_WALKED_MIN_PCT / 100,
		      "only %ld of %ld records walked", nwalked[0],
		      records[0]);
	cr_assert_eq(nwalked[1], 0);
	checked = th_stacks_agree(walked, nw, "walked", copied, nc, "copied", 20);
	/* site_a's and site_b's stacks, from both sides. */
	cr_assert_geq(checked, 4, "only %zu stacks compared", checked);
}

Test(locks, debug1_headers)
{
	struct th_run r;
	pid_t pid;

	skip_without_ptrace();
	pid = TH_SPAWN("locks", "ab", "20", "500", th_tmp_path("locks-text.report"));
	TH_CPROF(&r, 30000, "block", "-p", th_pid_str(pid), "-d", "1s", "--block-rate", "1ms", "--debug",
		 "1");
	cr_assert_eq(r.exit_code, 0);
	cr_assert(!strncmp(r.out, "--- contention:\ncycles/second=1000000000\nsampling period=1000000\n",
			   65), "%.100s", r.out);
	cr_assert(strstr(r.out, "site_a+0x"), "no frame of site_a");
	th_run_release(&r);
	TH_CPROF(&r, 30000, "mutex", "-p", th_pid_str(pid), "-d", "500ms", "--mutex-fraction", "2",
		 "--debug", "1");
	cr_assert_eq(r.exit_code, 0);
	cr_assert(!strncmp(r.out, "--- mutex:\ncycles/second=1000000000\nsampling period=2\n", 52),
		  "%.100s", r.out);
	th_run_release(&r);
	th_kill(pid);
}

/*
 * block, mutex, heap and threadcreate from one agent session (one
 * injection, one heartbeat, one window), each kind at its own rate, on
 * locks ab: block's sites hold the truth block_unbiased() holds them to;
 * mutex charges the same waits to the holder (its total within
 * MUTEX_LONG_MAX_ERR of the truth's, none at the waiter's sites); no event
 * lands in another kind's profile (locks creates no thread in the window).
 */
Test(locks, four_kinds_in_one_session)
{
	static const char *const sites[] = { "site_a", "site_b" };
	const char *report = th_tmp_path("locks-four.report");
	struct agent_profiler_opts ao = {
		.events = CPROF_EVENTS_HEAP | CPROF_EVENTS_BLOCK | CPROF_EVENTS_MUTEX |
			  CPROF_EVENTS_THREADCREATE,
		.rates = { [CPROF_KIND_HEAP] = 512 << 10, [CPROF_KIND_BLOCK] = 2000000,
			   [CPROF_KIND_MUTEX] = 1 },
		.duration_ns = 5000000000ULL,
		.agent_path = CPROF_AGENT_PATH,
		.command_line = "test-locks",
	};
	struct profilers_run_opts ro = { .duration_ns = ao.duration_ns };
	struct profile *prof[CPROF_KINDS] = { NULL };
	struct profiler *ps[CPROF_KINDS];
	struct th_func_sum *sums;
	struct lock_truth t[8];
	size_t n, nt, nsums;
	int64_t mutex_total = 0, truth_total = 0;
	bool exited;
	char err[2048];
	pid_t pid;

	skip_without_ptrace();
	pid = TH_SPAWN("locks", "ab", "20", "500", report);
	ao.pid = pid;
	cr_assert_eq(profiler_new_agents(ps, &n, &ao, "locks", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(n, 4);
	cr_assert_eq(profilers_run(ps, n, &ro, &exited, err, sizeof(err)), 0, "%s", err);
	cr_assert(!exited, "the target is alive");
	cr_assert(agent_profiler_window(profiler_agent(ps[0]))->detached,
		  "the agent did not confirm its detach");
	nt = lock_truth_read(pid, report, t, 8);
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(profiler_finish(ps[i], &prof[i]), 0, "%s", profiler_kind(ps[i]));
		cr_log_info("measured: four kinds in one session: %s, %llu records",
			    profiler_kind(ps[i]), (unsigned long long)profiler_count(ps[i]));
	}
	cr_assert_str_eq(profiler_kind(ps[1]), "block");
	cr_assert_str_eq(profiler_kind(ps[2]), "mutex");
	cr_assert_str_eq(profiler_kind(ps[3]), "threadcreate");
	cr_expect_eq(profiler_count(ps[3]), 0, "threadcreate took another kind's events");
	cr_expect_geq(th_sample_type(prof[0], "inuse_space", "bytes"), 0, "heap's profile");
	th_func_sums(prof[2], 1, &sums, &nsums);
	for (size_t i = 0; i < nsums; i++)
		mutex_total += sums[i].flat;
	for (size_t i = 0; i < 2; i++) {
		cr_expect_eq(th_func_get(sums, nsums, sites[i]).cum, 0,
			     "mutex charged the waiter's %s", sites[i]);
		truth_total += (int64_t)lock_truth_of(t, nt, sites[i])->ns;
	}
	free(sums);
	cr_log_info("measured: four kinds in one session: mutex %.1f ms, truth %.1f ms",
		    mutex_total / 1e6, truth_total / 1e6);
#ifndef __SANITIZE_ADDRESS__ /* accuracy: the plain build's */
	lock_sites_check(prof[1], t, nt, sites, 2, BLOCK_MAX_ERR);
	cr_expect_leq(lock_rel((double)mutex_total, (double)truth_total), MUTEX_LONG_MAX_ERR);
#endif
	for (size_t i = 0; i < n; i++) {
		profile_free(prof[i]);
		profiler_free(ps[i]);
	}
	th_assert_let_go(pid, false, "after four kinds in one session");
	th_kill(pid);
}
