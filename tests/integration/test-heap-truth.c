/*
 * cprof heap where it used to lie or harm (tests/targets/ring: a heap of a
 * fixed size churned as fast as the allocator goes, 62.5 MiB live):
 *   - at the default rate the agent's ring overflows, yet every figure is
 *     right: inuse from the agent's live set, alloc scaled for what was not
 *     recorded, against the truth the target counts over the hooked window;
 *   - a single-threaded target keeps glibc's single-thread paths, and its
 *     speed, after any session.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testhelp.h"

TestSuite(heap_truth, .init = th_init, .fini = th_cleanup, .timeout = 240);

static void skip_without_ptrace(void)
{
	if (geteuid() != 0)
		TH_SKIP_MISSING("cprof heap needs ptrace of the target: run as root");
}

/*
 * The bounds docs/measured.md quotes (tests/unit/test-docs checks them):
 * under overload every figure within RING_MAX_ERR of the target's count;
 * a single-threaded loop after four sessions at least SINGLE_MIN_SPEED of
 * its speed before, each the median of LOOKS looks; RSS at most
 * SESSIONS_RSS_MAX_KB more after 20 sessions than after the first.
 */
#define RING_MAX_ERR 0.10
#define SINGLE_MIN_SPEED 0.85
#define LOOKS 3
#define SESSIONS_RSS_MAX_KB 2048

static void assert_near(double got, double want, double tolerance, const char *what,
			unsigned threads)
{
	double err = want ? (got - want) / want : 1.0;

	cr_log_info("measured: ring %u thread(s): %-13s %.0f, truth %.0f (%+.2f%%)", threads, what,
		    got, want, 100 * err);
	cr_expect(err <= tolerance && err >= -tolerance,
		  "%u thread(s): %s is %.0f, truth %.0f (%+.1f%%, allowed %.0f%%)", threads, what,
		  got, want, 100 * err, 100 * tolerance);
}

/* The ring program with @threads threads, profiled 3 s at the default rate. */
static void ring_figures(unsigned threads)
{
	const char *report = th_tmp_path("ring-truth.report");
	const char *out = th_tmp_path("ring-truth.pb.gz");
	char nthreads[16];
	struct th_ring_report truth;
	struct profile *p;
	struct th_run r;
	pid_t pid;

	snprintf(nthreads, sizeof(nthreads), "%u", threads);
	pid = TH_SPAWN("ring", "60", report, nthreads);
	th_sleep_ms(300);
	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(pid), "-d", "3s", "-o", out);
	th_run_log(&r, "cprof heap");
	cr_assert_eq(r.exit_code, 0);
	th_ring_report(pid, report, &truth);
	th_kill(pid);
	cr_assert_gt(truth.hooked_ops, 0, "the target never saw its malloc hooked");
	p = th_load_profile(out);
	cr_assert_not_null(p);
	/* Each figure is the truth's within 10%: inuse from ~118 sampled blocks
	 * per snapshot, ten of them (8.7% / sqrt(10) per snapshot's draw). */
	assert_near(th_sample_sum(p, "inuse_space", "bytes"), (double)truth.live_bytes, RING_MAX_ERR,
		    "inuse_space",
		    threads);
	assert_near(th_sample_sum(p, "inuse_objects", "count"), (double)truth.live_objects, RING_MAX_ERR,
		    "inuse_objects", threads);
	assert_near(th_sample_sum(p, "alloc_objects", "count"), (double)truth.hooked_ops, RING_MAX_ERR,
		    "alloc_objects", threads);
	assert_near(th_sample_sum(p, "alloc_space", "bytes"), (double)truth.hooked_ops * 65536,
		    RING_MAX_ERR,
		    "alloc_space", threads);
	cr_log_info("%u thread(s): %s", threads, strstr(r.err, "not recorded") ? "records were lost"
									      : "nothing lost");
	profile_free(p);
	th_run_release(&r);
}

Test(heap_truth, ring_figures_one_thread)
{
	skip_without_ptrace();
	th_skip_accuracy_when_sanitized();
	ring_figures(1);
}

Test(heap_truth, ring_figures_two_threads)
{
	skip_without_ptrace();
	th_skip_accuracy_when_sanitized();
	ring_figures(2);
}

Test(heap_truth, ring_figures_four_threads)
{
	skip_without_ptrace();
	th_skip_accuracy_when_sanitized();
	ring_figures(4);
}

/* Allocations per CPU second of each of two ring programs over the same
 * @ms, their ratio @a / @b: what load the machine has weighs on both. */
static double speed_ratio(pid_t a, const char *ra, pid_t b, const char *rb, int ms)
{
	struct th_ring_report a0, a1, b0, b1;

	th_ring_report(a, ra, &a0);
	th_ring_report(b, rb, &b0);
	th_sleep_ms(ms);
	th_ring_report(a, ra, &a1);
	th_ring_report(b, rb, &b1);
	return ((double)(a1.ops - a0.ops) / (double)(a1.cpu_ns - a0.cpu_ns)) /
	       ((double)(b1.ops - b0.ops) / (double)(b1.cpu_ns - b0.cpu_ns));
}

static int by_value(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return (a > b) - (a < b);
}

/* The median of seven windows of the target's speed against a twin's. */
static double speed_against(pid_t pid, const char *report, pid_t twin, const char *twin_report)
{
	double v[7];

	for (int i = 0; i < 7; i++)
		v[i] = speed_ratio(pid, report, twin, twin_report, 200);
	qsort(v, 7, sizeof(v[0]), by_value);
	return v[3];
}

/*
 * The median of LOOKS looks a second apart, each in @looks, sorted. A cost
 * the sessions left lasts: it is in every look after them. A look can also
 * catch a moment that slows one twin alone (a kernel thread at its pages, a
 * neighbour on its cpu), before any session as well as after them, and
 * gone by the next look.
 */
static double speed_looks(pid_t pid, const char *report, pid_t twin, const char *twin_report,
			  double *looks)
{
	for (int i = 0; i < LOOKS; i++) {
		if (i)
			th_sleep_ms(1000);
		looks[i] = speed_against(pid, report, twin, twin_report);
	}
	qsort(looks, LOOKS, sizeof(looks[0]), by_value);
	return looks[LOOKS / 2];
}

/*
 * Both on one CPU. The premise of a twin is that the machine weighs on both
 * alike, and this VM's CPUs are not alike: the host's steal is not reported
 * (/proc/stat's steal stays 0), a process's CPU time includes the time its
 * CPU was not running, and twins on two CPUs were seen at 1.98x, then 0.48x
 * after the sessions, each look within 2% of the others: the scheduler had
 * swapped them. On one CPU they take turns under the same weather. (The
 * agent's thread, created by the pinned main thread, inherits its CPU.)
 */
static void same_cpu(pid_t a, pid_t b)
{
	cpu_set_t allowed, one;
	int cpu = 0;

	cr_assert_eq(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
	while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &allowed))
		cpu++;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	cr_assert_eq(sched_setaffinity(a, sizeof(one), &one), 0, "%s", strerror(errno));
	cr_assert_eq(sched_setaffinity(b, sizeof(one), &one), 0, "%s", strerror(errno));
}

/*
 * The target's speed is measured against a twin that cprof never touches,
 * over the same windows, before and after: the machine's load weighs on
 * both alike. The agent's thread used to turn glibc's single-thread paths
 * off for good (0.40x after detach).
 */
Test(heap_truth, single_threaded_target_keeps_its_speed)
{
	static const char *const sessions[][4] = {
		{ "heap", "--heap-rate", "512KiB", "1s" },
		{ "block", "--block-rate", "1ns", "1s" },
		{ "mutex", "--mutex-fraction", "1", "1s" },
		{ "threadcreate", NULL, NULL, "1s" },
	};
	const char *report = th_tmp_path("ring-speed.report");
	const char *twin_report = th_tmp_path("ring-twin.report");
	struct th_ring_report rep;
	double before, after, looks[LOOKS];
	pid_t pid, twin;

	skip_without_ptrace();
	pid = TH_SPAWN("ring", "120", report, "1");
	twin = TH_SPAWN("ring", "120", twin_report, "1");
	same_cpu(pid, twin);
	th_sleep_ms(200);
	th_ring_report(pid, report, &rep);
	cr_assert_eq(rep.single, 1, "glibc's single-thread flag is off before any session");
	before = speed_looks(pid, report, twin, twin_report, looks);
	for (size_t i = 0; i < sizeof(sessions) / sizeof(sessions[0]); i++) {
		struct th_run r;

		if (sessions[i][1])
			TH_CPROF(&r, 60000, sessions[i][0], "-p", th_pid_str(pid), "-d", sessions[i][3],
				 sessions[i][1], sessions[i][2], "-o",
				 th_tmp_path("ring-speed.pb.gz"));
		else
			TH_CPROF(&r, 60000, sessions[i][0], "-p", th_pid_str(pid), "-d", sessions[i][3],
				 "-o", th_tmp_path("ring-speed.pb.gz"));
		th_run_log(&r, sessions[i][0]);
		cr_assert_eq(r.exit_code, 0, "cprof %s failed", sessions[i][0]);
		th_run_release(&r);
		th_ring_report(pid, report, &rep);
		cr_assert_eq(rep.single, 1,
			     "after cprof %s, glibc takes the process for multi-threaded for good",
			     sessions[i][0]);
		th_assert_let_go(pid, false, sessions[i][0]);
	}
	after = speed_looks(pid, report, twin, twin_report, looks);
	cr_log_info("measured: single-threaded malloc loop against its untouched twin: %.3fx "
		    "before, %.3fx after four sessions (%.3fx; looks %.3f-%.3f)", before, after,
		    after / before, looks[0], looks[LOOKS - 1]);
	/*
	 * The flag above is the cause and is exact; the speed guards against
	 * the 0.40x it was and any lasting cost of 15% (scripts/bench-after
	 * gives the figure against a sham), judged in the plain build only.
	 */
#ifndef __SANITIZE_ADDRESS__
	cr_expect_geq(after / before, SINGLE_MIN_SPEED,
		      "after detach the target runs at %.3fx its speed",
		      after / before);
#endif
	th_kill(twin);
	th_kill(pid);
}

/* /proc/PID/maps without the lines that move by themselves ([heap]). */
static char *maps_of(pid_t pid)
{
	char path[64], line[512], *out = NULL;
	size_t len = 0;
	FILE *f, *m;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "re");
	cr_assert_not_null(f);
	m = open_memstream(&out, &len);
	cr_assert_not_null(m);
	while (fgets(line, sizeof(line), f))
		if (!strstr(line, "[heap]"))
			fputs(line, m);
	fclose(f);
	fclose(m);
	return out;
}

/*
 * The agent's live set of sampled blocks (lib/agent/liveset.c) grows by
 * levels while more than half full and never unmaps one (a free() may still
 * be reading it): level k >= 1 is one anonymous mapping of 2^(10+2k) slots
 * of 16 bytes, 2^(12+2k) filter bits and as many counts. Such a mapping is
 * the agent's, bounded, and may come in any heap session that sampled more
 * live blocks than the levels before held; nothing else may.
 */
static bool is_liveset_level(const char *line, unsigned *seen)
{
	unsigned long start, end, off, inode;
	char perms[8], dev[16];
	int n = 0;

	if (sscanf(line, "%lx-%lx %7s %lx %15s %lu %n", &start, &end, perms, &off, dev, &inode,
		   &n) < 6 || strcmp(perms, "rw-p") || off || inode || line[n] != '\0')
		return false;
	for (unsigned k = 1; k < 5; k++) {
		unsigned long slots = 1ul << (10 + 2 * k), bits = slots << 2;
		unsigned long size = slots * 16 + ((bits / 8 + 4095) & ~4095ul) + bits;

		if (end - start == size && !(*seen & (1u << k))) {
			*seen |= 1u << k;
			return true;
		}
	}
	return false;
}

/* The lines of @now not in @then, but the live set's levels; and the lines
 * of @then gone from @now. "" when none. */
static char *maps_changed(const char *then, const char *now, unsigned *levels)
{
	char *out = NULL, *copy, *save, *line;
	size_t len = 0;
	FILE *m = open_memstream(&out, &len);

	cr_assert_not_null(m);
	copy = strdup(now);
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (!strstr(then, line) && !is_liveset_level(line, levels))
			fprintf(m, "+ %s\n", line);
	free(copy);
	copy = strdup(then);
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (!strstr(now, line))
			fprintf(m, "- %s\n", line);
	free(copy);
	fclose(m);
	return out;
}

static long rss_kb(pid_t pid)
{
	char buf[4096];
	const char *p;

	cr_assert_eq(th_task_read(pid, pid, "status", buf, sizeof(buf)), 0);
	p = strstr(buf, "VmRSS:");
	cr_assert_not_null(p);
	return strtol(p + 6, NULL, 10);
}

/*
 * Every kind of session, in turn, 20 times on a target that is nearly
 * always inside malloc: each gets in (a resident agent is attached by any
 * thread outside the loader), and what stays is what the first two left:
 * the agent and one memfd (its pages given back), and the live set's levels
 * grown since (is_liveset_level); the page of code the first load needed is
 * gone with the second. RSS within 2 MiB of what it was after
 * the first. The first load's own allocations (dlopen's) may move this
 * target's blocks, of which it touches two pages each, to fresh pages of its
 * heap: up to 3.5 MB in one run of eight.
 */
Test(heap_truth, sessions_in_a_row_get_in_and_leave_nothing_new)
{
	static const char *const kinds[] = { "heap", "block", "mutex", "threadcreate" };
	const char *report = th_tmp_path("ring-sessions.report");
	char *after_second = NULL, *now, *changed;
	unsigned levels = 0;
	long rss_before, rss_first = 0, rss_after;
	pid_t pid;

	skip_without_ptrace();
	pid = TH_SPAWN("ring", "120", report, "1");
	th_sleep_ms(200);
	rss_before = rss_kb(pid);
	for (int i = 0; i < 20; i++) {
		const char *kind = kinds[i % 4];

		th_session_ok(kind, pid, "200ms", i + 1);
		th_assert_let_go(pid, false, kind);
		if (i == 0)
			rss_first = rss_kb(pid);
		if (i == 1) {
			after_second = maps_of(pid);
			cr_assert_null(strstr(after_second, " rwxp 00000000 00:00 0 "),
				       "a page of code cprof wrote is left:\n%s", after_second);
		}
	}
	now = maps_of(pid);
	rss_after = rss_kb(pid);
	cr_log_info("measured: RSS %ld kB before the first session, %ld kB after it, %ld kB after "
		    "the 20th", rss_before, rss_first, rss_after);
	changed = maps_changed(after_second, now, &levels);
	if (levels)
		cr_log_info("measured: the agent's live set grew to a level of its own (levels "
			    "%#x) in a later session", levels);
	if (changed[0])
		cr_log_error("after the second session:\n%s\nafter the 20th:\n%s", after_second, now);
	cr_expect_str_eq(changed, "", "20 sessions left mappings the first two did not:\n%s",
			 changed);
	free(changed);
	cr_expect_leq(rss_after - rss_first, SESSIONS_RSS_MAX_KB,
		      "RSS grew by %ld kB after the first session",
		      rss_after - rss_first);
	free(after_second);
	free(now);
	th_kill(pid);
}
