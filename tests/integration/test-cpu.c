/*
 * `cprof cpu` end to end: real runs on the target programs of tests/targets,
 * checked against truths measured from outside the target.
 *
 *  - total CPU: the target's own clocks, which it reports itself (busy's
 *    and churn's TRUTHFILE: a thread "truth" in the target reads its process
 *    CPU clock and each busy-N thread's CLOCK_THREAD_CPUTIME_ID every ~1 ms
 *    with CLOCK_REALTIME stamps; th_truth_*), interpolated over exactly the
 *    profile's window [time_nanos, time_nanos + duration_nanos]: each busy
 *    thread's total against its own clock, the process's against the
 *    process clock (exited threads included). Nothing of cprof reads these
 *    clocks, so a profile scaled to cprof's own clock cannot pass by
 *    construction. Targets without such a report are judged against their
 *    process CPU clock polled from outside (th_cpuclock);
 *  - function shares: busy splits each thread's CPU 50/30/20 between work_a,
 *    work_b and work_c by construction (deficit scheduling on its own thread
 *    CPU clock);
 *  - stacks: every thread starts in start_thread (threads) or
 *    __libc_start_call_main (main); the targets are -O2 without frame
 *    pointers, and so is Debian's libc;
 *  - every profile written is also read by `go tool pprof -top`, an
 *    independent reader.
 *
 * Runs are 2-4 s: the machines are shared and have 2 cores. The ratios are
 * logged (cr_log_info) so that a run of the suite reports them. CPU totals
 * are judged however loaded the machine is: what others take from the
 * target is not its CPU time, and its CPU time is what it used.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testhelp.h"

#define RUN_TIMEOUT_MS 60000

TestSuite(cpu, .init = th_init, .fini = th_cleanup, .timeout = 150);

/* ---- common ------------------------------------------------------------ */

#define CPU_MAX_THREADS 64

/* A thread the target reported its clock of: what the profile gave it and
 * what it used over the profile's window. */
struct cpu_thread {
	pid_t tid;
	int64_t profile; /* cpu ns of the samples labelled with its thread_id */
	int64_t quiet;	 /* ... of which in an "[unsampled ...]" account */
	int64_t truth;	 /* its own CPU clock over the window */
	int64_t slack;	 /* ... known within this (th_truth_slack) */
};

struct cpu_run {
	struct th_run run;
	const char *dir;  /* fresh directory holding only the output */
	const char *path; /* the profile */
	struct profile *p;
	int cpu_vi;	 /* index of cpu/nanoseconds */
	int64_t total;	 /* cpu ns in the profile */
	int64_t sampled; /* the part of it in real samples ... */
	int64_t filler;	 /* ... and in "[unsampled: ...]" frames, of which */
	int64_t quiet;	 /* ... on a thread that no sample caught (see judge_totals) */
	int64_t truth;	 /* process cpu ns in the profile's window, -1 unknown */
	int64_t outside; /* the same polled from outside (th_cpuclock), -1 unknown */
	int64_t gap;	 /* widest gap between truth readings at the window's ends */
	int64_t slack;	 /* the target's report: truth known within this, else -1 */
	bool reported;	 /* truth and threads are the target's own report */
	bool fifo;	 /* ... read by a reporter at SCHED_FIFO */
	struct cpu_thread threads[CPU_MAX_THREADS];
	int nthreads;
	double foreign; /* share of the machine's CPUs other tenants used meanwhile */
	char exe[PATH_MAX];
};

static void exe_of(pid_t pid, char *buf, size_t size)
{
	char link[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
	n = readlink(link, buf, size - 1);
	cr_assert(n > 0, "readlink %s: %s", link, strerror(errno));
	buf[n] = '\0';
}

/* Tgid of thread @tid, or -1 when it is gone. */
static int64_t tgid_of(int64_t tid)
{
	char path[64], line[256];
	FILE *f;
	int64_t tgid = -1;

	snprintf(path, sizeof(path), "/proc/%lld/status", (long long)tid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "Tgid:", 5) == 0)
			tgid = strtoll(line + 5, NULL, 10);
	fclose(f);
	return tgid;
}

/* Whether @s is one of cprof's "[unsampled: ...]" accounts, not a sample. */
static bool unsampled(const struct profile *p, const struct profile_sample *s)
{
	return strncmp(th_leaf_name(p, s), "[unsampled", 10) == 0;
}

static void check_stderr_is_cprof(const struct th_run *r)
{
	/* Whatever cprof prints on stderr is in its own voice. */
	cr_expect(r->err_len == 0 || strstr(r->err, "cprof: ") != NULL,
		  "stderr does not look like cprof's messages:\n%s", r->err);
}

/*
 * Checks what every profile of `cprof cpu` must have: sample types
 * [samples/count, cpu/nanoseconds], period type and period, a window inside
 * the run, thread_id/thread_name labels on every sample (threads of the
 * target only), mapping 1 = the target's executable with has_functions,
 * symbolized locations, no temporary file left beside it; and that go tool
 * pprof reads it.
 */
static void check_profile(struct cpu_run *c, pid_t pid)
{
	const struct profile *p = c->p;
	int samples_vi = th_sample_type(p, "samples", "count");

	cr_assert_eq(p->nsample_types, 2, "sample types: %zu, want 2", p->nsample_types);
	cr_assert_eq(samples_vi, 0, "sample type 0 is not samples/count");
	cr_assert_eq(c->cpu_vi, 1, "sample type 1 is not cpu/nanoseconds");
	cr_assert(p->period_type.type && strcmp(p->period_type.type, "cpu") == 0 &&
			  p->period_type.unit && strcmp(p->period_type.unit, "nanoseconds") == 0,
		  "period_type is not cpu/nanoseconds");
	cr_assert_gt(p->period, 0, "period %lld", (long long)p->period);

	/* The window lies within the run, and is not empty. */
	cr_assert_gt(p->duration_nanos, 0);
	cr_assert_geq(p->time_nanos, c->run.start_rt, "time_nanos before cprof started");
	cr_assert_leq(p->time_nanos + p->duration_nanos, c->run.end_rt,
		      "window ends after cprof exited");

	cr_assert_gt(p->nsamples, 0, "no samples");
	int64_t nsamples = 0, last_tid = 0;
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		const struct profile_label *tid = th_label(s, "thread_id");
		const struct profile_label *name = th_label(s, "thread_name");

		cr_assert_geq(s->values[0], 0);
		cr_assert_geq(s->values[1], 0);
		nsamples += s->values[0];
		/* Per-thread mode's CPU of threads too short to sample: no thread. */
		if (unsampled(p, s))
			continue;
		cr_assert(tid && !tid->str && tid->num > 0,
			  "sample %zu (leaf \"%s\"): no numeric thread_id", i, th_leaf_name(p, s));
		cr_assert(name && name->str && name->str[0],
			  "sample %zu (leaf \"%s\"): no thread_name", i, th_leaf_name(p, s));
		/* Only threads of the target (no foreign samples): a thread that
		 * still exists belongs to it. */
		if (tid->num != last_tid) {
			int64_t tgid = tgid_of(tid->num);
			cr_assert(tgid == -1 || tgid == pid,
				  "sample of thread %lld of process %lld", (long long)tid->num,
				  (long long)tgid);
			last_tid = tid->num;
		}
		cr_assert_gt(s->nlocations, 0, "sample %zu has no stack", i);
	}
	cr_assert_gt(nsamples, 0);

	/* Mapping 1 is the target's executable, symbolized. */
	const struct profile_mapping *m = th_mapping(p, 1);
	cr_assert(m, "no mapping 1");
	cr_assert(m->file && strcmp(m->file, c->exe) == 0, "mapping 1 is %s, want %s",
		  m->file ? m->file : "(null)", c->exe);
	cr_assert(m->has_functions, "mapping 1 has no has_functions");
	cr_assert(m->start < m->limit, "mapping 1 is empty");

	/* Every location has a function name. */
	size_t unnamed = 0;
	for (size_t i = 0; i < p->nlocations; i++)
		if (p->locations[i].nlines == 0)
			unnamed++;
	cr_expect_leq(unnamed * 20, p->nlocations, "%zu of %zu locations are not symbolized",
		      unnamed, p->nlocations);

	/* No temporary file left beside the profile. */
	cr_assert_eq(th_dir_entries(c->dir), 1, "output directory %s holds more than the profile",
		     c->dir);
	th_assert_pprof_ok(c->path);
}

/* Thread @tid's cpu ns in the profile, all or (@only_unsampled) its account's. */
static int64_t thread_total(const struct cpu_run *c, pid_t tid, bool only_unsampled)
{
	int64_t sum = 0;

	for (size_t i = 0; i < c->p->nsamples; i++) {
		const struct profile_sample *s = &c->p->samples[i];
		const struct profile_label *l = th_label(s, "thread_id");

		if (!l || l->str || l->num != tid)
			continue;
		if (!only_unsampled || unsampled(c->p, s))
			sum += s->values[c->cpu_vi];
	}
	return sum;
}

/*
 * A thread's "[unsampled ...]" account (its own clock, for a thread alive
 * that no sample caught) is the whole of that thread: never beside samples
 * of it, which would make it a top-up.
 */
static void check_quiet_threads(const struct cpu_run *c)
{
	for (size_t i = 0; i < c->p->nsamples; i++) {
		const struct profile_sample *s = &c->p->samples[i];
		const struct profile_label *tid = th_label(s, "thread_id");

		if (!unsampled(c->p, s) || !tid || tid->str || tid->num <= 0)
			continue;
		for (size_t j = 0; j < c->p->nsamples; j++) {
			const struct profile_label *o = th_label(&c->p->samples[j], "thread_id");

			cr_expect(j == i || !o || o->str || o->num != tid->num,
				  "thread %lld has an [unsampled] account beside other samples",
				  (long long)tid->num);
		}
	}
}

/* Reads the target's own report @truth_path over the profile's window into
 * @c: the process's CPU and each reported thread's. */
static void read_truth(struct cpu_run *c, const char *truth_path)
{
	struct th_truth *t = th_truth_read(truth_path);
	int64_t t0 = c->p->time_nanos, t1 = c->p->time_nanos + c->p->duration_nanos;

	c->reported = true;
	c->fifo = th_truth_fifo(t);
	c->truth = th_truth_between(t, TH_TRUTH_PROCESS, t0, t1);
	c->gap = th_truth_gap(t, t0, t1);
	c->slack = th_truth_slack(t, TH_TRUTH_PROCESS, t0, t1);
	c->nthreads = th_truth_nthreads(t);
	cr_assert_leq(c->nthreads, CPU_MAX_THREADS);
	for (int i = 0; i < c->nthreads; i++) {
		struct cpu_thread *ct = &c->threads[i];

		ct->tid = th_truth_tid(t, i);
		ct->truth = th_truth_between(t, i, t0, t1);
		ct->slack = th_truth_slack(t, i, t0, t1);
		ct->profile = thread_total(c, ct->tid, false);
		ct->quiet = thread_total(c, ct->tid, true);
		cr_assert_gt(ct->truth, 0,
			     "the target's clock of thread %d does not cover the profile's window",
			     (int)ct->tid);
	}
	th_truth_free(t);
}

/*
 * Profiles @pid with `cprof cpu -p PID -d @dur` and @extra arguments, while
 * polling its process CPU clock, and checks the result (check_profile).
 * With @truth_path (the TRUTHFILE the target was started with) the truth is
 * the target's own report; without, the polled process clock.
 */
static void profile_pid(struct cpu_run *c, pid_t pid, const char *truth_path, const char *dur,
			const char *const *extra)
{
	char pidstr[32];
	const char *args[32];
	size_t n = 0;

	memset(c, 0, sizeof(*c));
	th_require_perf(false);
	exe_of(pid, c->exe, sizeof(c->exe));
	c->dir = th_tmp_dir("out");
	cr_assert(asprintf((char **)&c->path, "%s/cpu.pb.gz", c->dir) > 0);
	snprintf(pidstr, sizeof(pidstr), "%d", (int)pid);
	args[n++] = "cpu";
	args[n++] = "-p";
	args[n++] = pidstr;
	args[n++] = "-d";
	args[n++] = dur;
	args[n++] = "-o";
	args[n++] = c->path;
	for (; extra && *extra; extra++)
		args[n++] = *extra;
	args[n] = NULL;

	struct th_cpustat load0, load1;
	struct th_cpuclock *clk = th_cpuclock_start(pid);
	th_cpustat_read(&load0);
	th_run_cprof_ex(&c->run, RUN_TIMEOUT_MS, 0, 0, args);
	th_cpustat_read(&load1);
	th_cpuclock_stop(clk);
	int64_t target_ns = th_cpuclock_between(clk, c->run.start_rt, c->run.end_rt);
	c->foreign = th_foreign_load(&load0, &load1,
				     (target_ns > 0 ? target_ns : 0) + th_rusage_ns(&c->run.ru));
	th_run_log(&c->run, "cprof cpu");
	cr_assert_eq(c->run.exit_code, 0, "cprof cpu exited %d:\n%s", c->run.exit_code, c->run.err);
	check_stderr_is_cprof(&c->run);

	c->p = th_load_profile(c->path);
	c->cpu_vi = th_sample_type(c->p, "cpu", "nanoseconds");
	cr_assert_geq(c->cpu_vi, 0, "no cpu/nanoseconds sample type");
	c->total = profile_total(c->p, (size_t)c->cpu_vi);
	for (size_t i = 0; i < c->p->nsamples; i++) {
		const struct profile_sample *s = &c->p->samples[i];
		const struct profile_label *tid = th_label(s, "thread_id");

		if (!unsampled(c->p, s))
			continue;
		c->filler += s->values[c->cpu_vi];
		if (tid && !tid->str && tid->num > 0)
			c->quiet += s->values[c->cpu_vi];
	}
	c->sampled = c->total - c->filler;
	check_quiet_threads(c);
	c->outside =
		th_cpuclock_between(clk, c->p->time_nanos, c->p->time_nanos + c->p->duration_nanos);
	c->truth = c->outside;
	c->slack = -1;
	c->gap = th_cpuclock_gap(clk);
	th_cpuclock_free(clk);
	check_profile(c, pid);
	if (truth_path)
		read_truth(c, truth_path);
	cr_assert_gt(c->truth, 0, "the CPU clock readings do not cover the profile's window");
}
#define PROFILE(c, pid, dur, ...)                                                                  \
	profile_pid((c), (pid), NULL, (dur), (const char *const[]){__VA_ARGS__, NULL})
/* The same for a target started with TRUTHFILE @truth. */
#define PROFILE_TRUTH(c, pid, truth, dur, ...)                                                     \
	profile_pid((c), (pid), (truth), (dur), (const char *const[]){__VA_ARGS__, NULL})

static void cpu_run_release(struct cpu_run *c)
{
	profile_free(c->p);
	free((char *)c->path);
	th_run_release(&c->run);
	memset(c, 0, sizeof(*c));
}

/* How much a thread ran is judged on a machine not contended
 * (TH_MAX_FOREIGN); totals always: a target's CPU time is its CPU time. */
static bool contended(const struct cpu_run *c)
{
	return c->foreign < 0 || c->foreign > TH_MAX_FOREIGN;
}

static double share(int64_t part, int64_t whole)
{
	return whole > 0 ? (double)part / (double)whole : 0;
}

/*
 * The verdict on the totals against the target's own clocks: the process's
 * total within @process_tol of its CPU over the window, and each reported
 * thread's total within @thread_tol of its own (@thread_tol < 0: threads
 * not judged), all of a reported thread's from its samples. Logs
 * "measured: @what: ..." with every ratio.
 *
 * The process's total counts the accounts of threads that no sample caught
 * (check_quiet_threads), not the unlabeled one of threads that ended: a
 * thread that wakes a thousand times a second for a few microseconds, as
 * the target's own truth reporter does, is charged by the scheduler for
 * runs that a sampling timer (cpu-wide or the thread's own) rarely lands in,
 * context switches included, and may draw no sample at 100 Hz. Its total is
 * still its own clock, under its own thread.
 */
static void judge_totals(const struct cpu_run *c, const char *what, double process_tol,
			 double thread_tol)
{
	char list[CPU_MAX_THREADS * 8 + 1] = "";
	size_t len = 0;
	double lo = INFINITY, hi = -INFINITY, slack = 0;
	int64_t accounted = c->sampled + c->quiet;
	double ratio = share(accounted, c->truth);
	int64_t rest_profile = accounted, rest_truth = c->truth;

	for (int i = 0; i < c->nthreads; i++) {
		double r = share(c->threads[i].profile, c->threads[i].truth);

		rest_profile -= c->threads[i].profile;
		rest_truth -= c->threads[i].truth;
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%.4f", i ? " " : "", r);
		lo = fmin(lo, r);
		hi = fmax(hi, r);
		slack = fmax(slack, share(c->threads[i].slack, c->threads[i].truth));
	}
	cr_log_info("measured: %s: process %.4f of its CPU clock (%.3f s / %.3f s, of which "
		    "%.3f s in threads no sample caught; polled from "
		    "outside %.3f s), %d threads %.4f-%.4f of their own (%s), the rest %.4f s / "
		    "%.4f s, truth read every <= %.1f ms%s, known within %.4f (process) and "
		    "%.4f (threads), others used %.0f %% of the CPUs",
		    what, ratio, (double)accounted / 1e9, (double)c->truth / 1e9,
		    (double)c->quiet / 1e9,
		    (double)c->outside / 1e9, c->nthreads, c->nthreads ? lo : 0,
		    c->nthreads ? hi : 0, list, (double)rest_profile / 1e9,
		    (double)rest_truth / 1e9, (double)c->gap / 1e6,
		    !c->reported ? " (from outside)" : c->fifo ? " (SCHED_FIFO)" : "",
		    share(c->slack, c->truth), slack, c->foreign * 100);
	cr_expect(fabs(ratio - 1) <= process_tol,
		  "%s: the process's total is %.4f of its CPU clock (%.3f s / %.3f s, "
		  "known within %.4f)",
		  what, ratio, (double)accounted / 1e9, (double)c->truth / 1e9,
		  share(c->slack, c->truth));
	if (thread_tol < 0)
		return;
	cr_assert(c->reported && c->nthreads > 0, "%s: no thread clock reported", what);
	for (int i = 0; i < c->nthreads; i++) {
		const struct cpu_thread *t = &c->threads[i];
		double r = share(t->profile, t->truth);

		cr_expect(fabs(r - 1) <= thread_tol,
			  "%s: thread %d's total is %.4f of its own CPU clock (%.3f s / %.3f s, "
			  "known within %.4f)",
			  what, (int)t->tid, r, (double)t->profile / 1e9, (double)t->truth / 1e9,
			  share(t->slack, t->truth));
		cr_expect(t->quiet == 0, "%s: thread %d, busy all the window, drew no sample",
			  what, (int)t->tid);
	}
}

/* ---- accuracy ---------------------------------------------------------- */

/*
 * The bounds docs/measured.md quotes (tests/unit/test-docs checks them):
 * K busy threads: each thread's total within CPU_THREAD_MAX_ERR of its own
 * CPU clock over the window, the process's within CPU_TOTAL_MAX_ERR of the
 * process CPU clock, at any load, and work_a/b/c within CPU_SHARE_MAX_ERR
 * (points) of 50/30/20 among the three (cum). At 1000 Hz: the shares are
 * sampled (a sample is a random draw, so the error is binomial: 0.9 points
 * for K=1 over 3 s); the totals are not. Threads living 2 ms (churn): the
 * total within CPU_CHURN_MAX_ERR. Stacks unwound to start_thread or main:
 * at least CPU_ROOTED_MIN of them.
 */
#define CPU_TOTAL_MAX_ERR 0.01
#define CPU_THREAD_MAX_ERR 0.01
#define CPU_SHARE_MAX_ERR 0.03
#define CPU_CHURN_MAX_ERR 0.10
#define CPU_ROOTED_MIN 0.95

/*
 * How far the share of @n samples may stray from a true share @p: four
 * standard deviations of a binomial draw, sqrt(p (1 - p) / n), and never
 * closer than CPU_SHARE_MAX_ERR (a tick's worth of bias is not noise).
 */
static double share_bound(double p, int64_t n)
{
	double sd = n > 0 ? sqrt(p * (1 - p) / (double)n) : 1;

	return fmax(CPU_SHARE_MAX_ERR, 4 * sd);
}

/* Starts busy with @k threads for @seconds, reporting its clocks; returns
 * its pid and the report's path in *@ret_truth. */
static pid_t spawn_busy(int k, const char *seconds, const char **ret_truth)
{
	char kstr[16];
	const char *truth = th_tmp_path("truth");

	snprintf(kstr, sizeof(kstr), "%d", k);
	*ret_truth = truth;
	return TH_SPAWN("busy", kstr, seconds, truth);
}

static void busy_accuracy(int k, const char *dur)
{
	th_skip_accuracy_when_sanitized();
	const char *truth;
	struct cpu_run c;
	struct th_func_sum *sums;
	size_t n;

	pid_t pid = spawn_busy(k, "60", &truth);
	th_sleep_ms(200); /* past start-up */
	PROFILE_TRUTH(&c, pid, truth, dur, "-F", "1000");
	char what[32];

	snprintf(what, sizeof(what), "cpu busy K=%d", k);
	th_func_sums(c.p, (size_t)c.cpu_vi, &sums, &n);
	struct th_func_sum a = th_func_get(sums, n, "work_a");
	struct th_func_sum b = th_func_get(sums, n, "work_b");
	struct th_func_sum w = th_func_get(sums, n, "work_c");
	int64_t abc = a.cum + b.cum + w.cum;
	double sa = share(a.cum, abc), sb = share(b.cum, abc), sc = share(w.cum, abc);
	int64_t workers = 0; /* the busy-N threads' total */

	for (int i = 0; i < c.nthreads; i++)
		workers += c.threads[i].profile;
	cr_log_info("measured: cpu busy K=%d: shares a/b/c = %.1f/%.1f/%.1f %%, work_* cover "
		    "%.1f %% of the busy threads' total (%.1f %% of the process's), %lld samples",
		    k, sa * 100, sb * 100, sc * 100, share(abc, workers) * 100,
		    share(abc, c.total) * 100, (long long)profile_total(c.p, 0));
	cr_expect_eq(c.nthreads, k, "K=%d: busy reported %d thread clocks", k, c.nthreads);
	/* busy's threads live for the whole window: nothing is unsampled. */
	cr_expect(c.filler <= c.truth / 100, "K=%d: %.3f s put in an [unsampled] frame", k,
		  (double)c.filler / 1e9);
	/* Shares hold however busy the machine is: all three lose alike. A
	 * busy machine leaves fewer samples, whose shares scatter more. */
	cr_expect(fabs(sa - 0.50) <= share_bound(0.50, profile_total(c.p, 0)),
		  "K=%d: work_a %.1f %%, want 50", k, sa * 100);
	cr_expect(fabs(sb - 0.30) <= share_bound(0.30, profile_total(c.p, 0)),
		  "K=%d: work_b %.1f %%, want 30", k, sb * 100);
	cr_expect(fabs(sc - 0.20) <= share_bound(0.20, profile_total(c.p, 0)),
		  "K=%d: work_c %.1f %%, want 20", k, sc * 100);
	/* busy's threads do nothing else: most of their time must be found in
	 * work_* (the rest of the process is its main thread, asleep, and its
	 * truth reporter, whose wake-ups cost 2-5 % of a CPU on these VMs). */
	cr_expect(share(abc, workers) >= 0.95,
		  "K=%d: work_* hold %.1f %% of the busy threads' total", k,
		  share(abc, workers) * 100);
	/* In work_* the leaf is work_* itself (the arithmetic is expanded there). */
	cr_expect(share(a.flat + b.flat + w.flat, abc) >= 0.9,
		  "K=%d: work_* are the leaf in only %.1f %% of their samples", k,
		  share(a.flat + b.flat + w.flat, abc) * 100);

	/* Samples of work_* come from busy-N threads. */
	for (size_t i = 0; i < c.p->nsamples; i++) {
		const struct profile_sample *s = &c.p->samples[i];
		bool in_work = false;
		for (size_t l = 0; l < s->nlocations && !in_work; l++)
			in_work = th_location_has(c.p, s->location_ids[l], "work_a") ||
				  th_location_has(c.p, s->location_ids[l], "work_b") ||
				  th_location_has(c.p, s->location_ids[l], "work_c");
		const struct profile_label *name = th_label(s, "thread_name");
		if (in_work)
			cr_expect(strncmp(name->str, "busy-", 5) == 0,
				  "work_* sampled on thread \"%s\"", name->str);
	}
	judge_totals(&c, what, CPU_TOTAL_MAX_ERR, CPU_THREAD_MAX_ERR);
	free(sums);
	cpu_run_release(&c);
}

Test(cpu, accuracy_k1)
{
	busy_accuracy(1, "4s");
}
Test(cpu, accuracy_k2)
{
	busy_accuracy(2, "3s");
}
Test(cpu, accuracy_k4)
{
	busy_accuracy(4, "3s");
}
Test(cpu, accuracy_k8)
{
	busy_accuracy(8, "3s");
}

/* Without -F: the default rate (about 100 Hz: read from the profile) is as exact. */
Test(cpu, default_rate)
{
	const char *truth;
	struct cpu_run c;
	pid_t pid = spawn_busy(2, "60", &truth);

	th_sleep_ms(200);
	PROFILE_TRUTH(&c, pid, truth, "3s", "-q");
	cr_log_info("default rate: period %lld ns", (long long)c.p->period);
	/* "About 100 Hz": an odd rate near it is fine, 10x off is not. */
	cr_expect(c.p->period >= 5000000 && c.p->period <= 20000000, "period %lld ns",
		  (long long)c.p->period);
	cr_expect(c.run.err_len == 0, "-q and still stderr:\n%s", c.run.err);
	judge_totals(&c, "cpu default rate", CPU_TOTAL_MAX_ERR, CPU_THREAD_MAX_ERR);
	cpu_run_release(&c);
}

/* Both collection modes are exact on a steady target. */
static void mode_accuracy(const char *mode)
{
	const char *truth;
	struct cpu_run c;
	char what[32];

	th_require_perf(strcmp(mode, "system") == 0);
	pid_t pid = spawn_busy(2, "60", &truth);

	th_sleep_ms(200);
	PROFILE_TRUTH(&c, pid, truth, "2s", "-F", "1000", "--mode", mode);
	cr_log_info("--mode %s: [unsampled] %.3f s", mode, (double)c.filler / 1e9);
	cr_expect(c.filler <= c.truth / 100, "--mode %s: %.3f s put in an [unsampled] frame", mode,
		  (double)c.filler / 1e9);
	snprintf(what, sizeof(what), "cpu --mode %s", mode);
	judge_totals(&c, what, CPU_TOTAL_MAX_ERR, CPU_THREAD_MAX_ERR);
	cpu_run_release(&c);
}

Test(cpu, mode_system)
{
	mode_accuracy("system");
}
Test(cpu, mode_thread)
{
	mode_accuracy("thread");
}

/* ---- stacks ------------------------------------------------------------ */

static bool is_root_frame(const char *name)
{
	static const char *const roots[] = {"start_thread",
					    "clone3",
					    "__clone3",
					    "clone",
					    "__clone",
					    "__libc_start_call_main",
					    "__libc_start_main",
					    "main",
					    "_start"};

	for (size_t i = 0; i < ARRAY_SIZE(roots); i++)
		if (strcmp(name, roots[i]) == 0)
			return true;
	return false;
}

static bool in_libc(const struct profile *p, uint64_t location_id)
{
	const struct profile_location *loc = th_location(p, location_id);
	const struct profile_mapping *m = loc ? th_mapping(p, loc->mapping_id) : NULL;
	const char *base;

	if (!m || !m->file)
		return false;
	base = strrchr(m->file, '/');
	base = base ? base + 1 : m->file;
	return strncmp(base, "libc.so", 7) == 0 || strncmp(base, "libc-", 5) == 0;
}

/* Fraction of samples (by count) whose outermost frame is a thread's or main's root. */
static double rooted_share(const struct profile *p, int64_t *ret_libc_leaf, int64_t *ret_total)
{
	int64_t rooted = 0, total = 0, libc_leaf = 0;
	const char *bad = NULL;

	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		const char *root = th_root_name(p, s);

		total += s->values[0];
		if (is_root_frame(root))
			rooted += s->values[0];
		else if (!bad)
			bad = root;
		if (s->nlocations > 0 && in_libc(p, s->location_ids[0]))
			libc_leaf += s->values[0];
	}
	if (bad && rooted < total)
		cr_log_info("a stack that ends elsewhere ends in \"%s\"", bad);
	*ret_libc_leaf = libc_leaf;
	*ret_total = total;
	return share(rooted, total);
}

Test(cpu, unwind_busy)
{
	struct cpu_run c;
	int64_t libc_leaf, total;
	pid_t pid = TH_SPAWN("busy", "2", "60");

	PROFILE(&c, pid, "2s", "-F", "1000");
	double r = rooted_share(c.p, &libc_leaf, &total);
	cr_log_info("measured: cpu busy: %.2f %% of %lld samples unwind to a root frame", r * 100,
		    (long long)total);
	cr_expect_geq(r, CPU_ROOTED_MIN, "only %.2f %% of the stacks reach start_thread/main",
		      r * 100);
	cpu_run_release(&c);
}

Test(cpu, unwind_libc)
{
	struct cpu_run c;
	int64_t libc_leaf, total;
	struct th_func_sum *sums;
	size_t n;
	pid_t pid = TH_SPAWN("libcwork", "2", "60");

	PROFILE(&c, pid, "3s", "-F", "1000");
	double r = rooted_share(c.p, &libc_leaf, &total);
	cr_log_info("measured: cpu libcwork: %.2f %% of %lld samples unwind to a root frame, %.1f "
		    "%% have their leaf in libc",
		    r * 100, (long long)total, share(libc_leaf, total) * 100);
	cr_expect_geq(r, CPU_ROOTED_MIN, "only %.2f %% of the stacks reach start_thread/main",
		      r * 100);
	/* memcpy/memset/strlen/qsort: at least a fifth of the time has its leaf in libc. */
	cr_expect_geq(share(libc_leaf, total), 0.2, "%.1f %% of the samples have a libc leaf",
		      share(libc_leaf, total) * 100);

	/* Unwinding through libc finds our callers of it. */
	th_func_sums(c.p, (size_t)c.cpu_vi, &sums, &n);
	const char *callers[] = {"sort_work", "copy_work", "scan_work", "cmp_u32"};
	for (size_t i = 0; i < ARRAY_SIZE(callers); i++) {
		struct th_func_sum f = th_func_get(sums, n, callers[i]);
		cr_log_info("libcwork: %s cum %.1f %%", callers[i], share(f.cum, c.total) * 100);
		cr_expect_gt(f.cum, 0, "%s never seen", callers[i]);
	}
	/* cmp_u32 is only ever called by qsort: a stack with it and sort_work
	 * above was unwound through libc's qsort. */
	int64_t through = 0, cmp = 0;
	for (size_t i = 0; i < c.p->nsamples; i++) {
		const struct profile_sample *s = &c.p->samples[i];
		bool has_cmp = false, has_sort = false;
		for (size_t l = 0; l < s->nlocations; l++) {
			has_cmp |= th_location_has(c.p, s->location_ids[l], "cmp_u32");
			has_sort |= th_location_has(c.p, s->location_ids[l], "sort_work");
		}
		if (has_cmp) {
			cmp += s->values[0];
			if (has_sort)
				through += s->values[0];
		}
	}
	cr_expect_geq(share(through, cmp), 0.95,
		      "only %.1f %% of cmp_u32 samples reach sort_work through qsort",
		      share(through, cmp) * 100);
	free(sums);
	cpu_run_release(&c);
}

/* ---- threads ----------------------------------------------------------- */

/* A thread created after cprof attached is followed, under its own name. */
Test(cpu, late_thread)
{
	struct cpu_run c;
	struct timespec ready;
	const int delay_ms = 1500;

	clock_gettime(CLOCK_REALTIME, &ready);
	pid_t pid = TH_SPAWN("late", "60", "1500");
	int64_t late_start = (int64_t)ready.tv_sec * 1000000000LL + ready.tv_nsec +
			     (int64_t)delay_ms * 1000000LL;
	PROFILE(&c, pid, "4s", "-F", "1000");
	/* ready was printed after `ready` was taken: late_start is a lower bound. */
	cr_assert_lt(c.p->time_nanos, late_start,
		     "sampling started %.2f s after the target was ready: too late to see a "
		     "thread start after attach",
		     (double)(c.p->time_nanos - (late_start - delay_ms * 1000000LL)) / 1e9);

	int64_t late_ns = 0, late_other_name = 0, early_ns = 0;
	int64_t late_tid = -1;
	for (size_t i = 0; i < c.p->nsamples; i++) {
		const struct profile_sample *s = &c.p->samples[i];
		const struct profile_label *name = th_label(s, "thread_name");
		const struct profile_label *tid = th_label(s, "thread_id");
		bool is_late = false, is_early = false;

		for (size_t l = 0; l < s->nlocations; l++) {
			is_late |= th_location_has(c.p, s->location_ids[l], "late_worker");
			is_early |= th_location_has(c.p, s->location_ids[l], "early_worker");
		}
		if (is_late) {
			late_ns += s->values[c.cpu_vi];
			if (strcmp(name->str, "late") != 0)
				late_other_name += s->values[c.cpu_vi];
			if (late_tid == -1)
				late_tid = tid->num;
			cr_expect_eq(tid->num, late_tid, "late_worker on two threads");
		}
		if (is_early)
			early_ns += s->values[c.cpu_vi];
	}
	int64_t end = c.p->time_nanos + c.p->duration_nanos;
	double span = end > late_start ? (double)(end - late_start) : 0;
	cr_log_info("late thread: late_worker %.3f s of CPU in the %.3f s it could run; "
		    "early_worker %.3f s",
		    (double)late_ns / 1e9, span / 1e9, (double)early_ns / 1e9);
	cr_assert_gt(late_ns, 0, "no sample of late_worker: the new thread was not followed");
	cr_expect_eq(late_other_name, 0, "late_worker samples not named \"late\"");
	cr_expect_neq(late_tid, (int64_t)pid, "late_worker on the main thread?");
	/* It ran (on 2 cores, next to one other busy thread) for most of the rest
	 * of the window: more than a token sample must be there. How much it
	 * could run is the machine's: judged when others left it the CPUs. */
	if (!contended(&c))
		cr_expect_geq((double)late_ns, 0.25 * span, "late_worker %.3f s of %.3f s",
			      (double)late_ns / 1e9, span / 1e9);
	else
		cr_log_info("late_worker's share not judged: other processes used %.0f %% of "
			    "the CPUs", c.foreign * 100);
	cr_expect_leq((double)late_ns, 1.05 * span, "late_worker %.3f s of %.3f s",
		      (double)late_ns / 1e9, span / 1e9);
	cr_expect_gt(early_ns, 0, "no sample of early_worker");
	/* One thread cannot use more than the window: more means samples of
	 * another thread were put on it. */
	cr_expect_leq((double)early_ns, 1.05 * (double)c.p->duration_nanos,
		      "early_worker %.3f s in a %.3f s window", (double)early_ns / 1e9,
		      (double)c.p->duration_nanos / 1e9);
	cpu_run_release(&c);
}

/*
 * A single-threaded target with a session of the agent running: the
 * agent's task (cprof's, a member of its thread group) runs ~1 ms a second
 * (its ticks), so per-thread events at 1000 Hz sample it within the window;
 * no sample may be its, and a comment says what it used instead (issue 34).
 */
Test(cpu, agent_task_left_out)
{
	pid_t pid = TH_SPAWN("ring", "60", th_tmp_path("ring.report"), "1", "64", "4096", "0");
	pid_t agent = th_agent_session_keep(pid);
	bool noted = false;
	struct cpu_run c;
	char said[96];

	PROFILE(&c, pid, "2s", "-F", "1000", "--mode", "thread");
	for (size_t i = 0; i < c.p->nsamples; i++) {
		const struct profile_sample *s = &c.p->samples[i];
		const struct profile_label *tid = th_label(s, "thread_id");

		if (unsampled(c.p, s))
			continue;
		cr_expect(tid && tid->num == pid, "a sample of thread %lld (leaf \"%s\"; the "
			  "agent's is %d)", tid ? (long long)tid->num : -1LL,
			  th_leaf_name(c.p, s), agent);
	}
	snprintf(said, sizeof(said), "the cprof agent's task (tid %d) is cprof's", agent);
	for (size_t i = 0; i < c.p->ncomments; i++)
		noted |= strstr(c.p->comments[i], said) && strstr(c.p->comments[i], " ms of CPU");
	cr_expect(noted, "no comment says '%s' with its CPU time", said);
	cpu_run_release(&c);
	th_agent_session_stop(pid);
	th_kill(pid);
}

/* 250 threads/s of ~2 ms CPU each: the total must still be right. */
Test(cpu, churn)
{
	struct cpu_run c;
	struct th_func_sum *sums;
	size_t n;

	/* Short threads are sampled only by cpu-wide (or cgroup) events. */
	th_require_perf(true);
	if (geteuid() != 0)
		TH_SKIP_MISSING("not root: cprof cpu samples per thread, which misses short threads");
	/*
	 * A new thread every 4.1 ms rather than 4: /proc/stat's tick-based
	 * accounting, from which the load check reads "other processes", ran
	 * in step with a 4 ms churn and charged half a core of it to others.
	 */
	const char *truth = th_tmp_path("truth");
	pid_t pid = TH_SPAWN("churn", "60", "4100", "2000", truth);

	th_sleep_ms(200);
	PROFILE_TRUTH(&c, pid, truth, "3s", NULL);
	th_func_sums(c.p, (size_t)c.cpu_vi, &sums, &n);
	struct th_func_sum burn = th_func_get(sums, n, "churn_burn");
	cr_log_info("cpu churn: [unsampled] %.3f s, churn_burn %.1f %%", (double)c.filler / 1e9,
		    share(burn.cum, c.total) * 100);
	/* A share of the process's time: judged in a quiet window only
	 * (others on the CPUs delay the churn threads' starts). */
	if (!contended(&c))
		cr_expect(share(burn.cum, c.total) >= 0.7, "churn_burn only %.1f %%",
			  share(burn.cum, c.total) * 100);
	/* As root (auto = system mode) the short threads are really sampled;
	 * they live too short to be named: the process's total is judged. */
	judge_totals(&c, "cpu churn", CPU_CHURN_MAX_ERR, -1);
	free(sums);
	cpu_run_release(&c);
}

/* ---- stopping early ---------------------------------------------------- */

static void stop_with(int sig)
{
	th_require_perf(false);
	struct th_run r;
	char pidstr[32];
	const char *dir = th_tmp_dir("out");
	char *path;
	pid_t pid = TH_SPAWN("busy", "1", "60");

	cr_assert(asprintf(&path, "%s/cpu.pb.gz", dir) > 0);
	snprintf(pidstr, sizeof(pidstr), "%d", (int)pid);
	/* 2 s into the window, not from cprof's start: reading the modules
	 * first can take that long on a loaded host. */
	th_run_signal_after(") for ", 0);
	th_run_cprof_ex(&r, 20000, sig, 2000,
			(const char *const[]){"cpu", "-p", pidstr, "-d", "60s", "-o", path, NULL});
	th_run_log(&r, strsignal(sig));
	double after = (double)(r.end_ns - r.signal_ns) / 1e9;
	cr_log_info("%s 2 s into -d 60s: exit %d %.2f s after the signal", strsignal(sig),
		    r.exit_code, after);
	cr_assert(r.signal_ns > 0, "cprof exited before the signal: %d\n%s", r.exit_code, r.err);
	cr_assert_eq(r.exit_code, 0, "exit %d after %s:\n%s", r.exit_code, strsignal(sig), r.err);
	cr_expect_lt(after, 5.0, "cprof took %.2f s to stop", after);

	struct profile *p = th_load_profile(path);
	cr_expect_gt(p->nsamples, 0);
	/* The window ends at the signal; it began once cprof had read the
	 * target's modules, which a loaded machine makes slow. */
	cr_expect(p->duration_nanos > 0 &&
			  (uint64_t)p->duration_nanos <= r.end_ns - r.start_ns,
		  "window of %.2f s for a run stopped after 2 s, over in %.2f s",
		  (double)p->duration_nanos / 1e9, (double)(r.end_ns - r.start_ns) / 1e9);
	th_assert_pprof_ok(path);
	cr_expect(th_alive(pid), "the target died");
	profile_free(p);
	free(path);
	th_run_release(&r);
}

Test(cpu, sigint)
{
	stop_with(SIGINT);
}
Test(cpu, sigterm)
{
	stop_with(SIGTERM);
}

/* The target exits mid-window: what was collected is written, exit 0. */
Test(cpu, target_exits)
{
	const char *truth;
	struct cpu_run c;
	pid_t pid = spawn_busy(1, "1", &truth);

	/* busy marks its last record final before it exits: its clocks cover
	 * the rest of the window. */
	PROFILE_TRUTH(&c, pid, truth, "10s", "-F", "1000");
	cr_log_info("target exits: cprof ran %.2f s, window %.2f s",
		    (double)(c.run.end_ns - c.run.start_ns) / 1e9,
		    (double)c.p->duration_nanos / 1e9);
	cr_expect(strstr(c.run.err, "exited") != NULL,
		  "stderr does not say the target exited:\n%s", c.run.err);
	cr_expect(c.run.end_ns - c.run.start_ns < 9000000000ULL,
		  "cprof went on for the whole -d 10s after its target exited");
	/* Its thread dies with it: the process's total is judged, where the
	 * target had the CPU for a hundred samples: what its threads ran after
	 * cprof's last reads is known by their samples alone, a period each
	 * (beside the sanitized suites and eight CPU hogs busy was seen to run
	 * 26 ms of its second). */
	if (c.truth < 100 * 1000000LL) {
		cr_log_info("not judged: the target ran %.3f s of CPU in the window",
			    (double)c.truth / 1e9);
		cpu_run_release(&c);
		return;
	}
	judge_totals(&c, "cpu target exits", 0.05, -1);
	cpu_run_release(&c);
}

/* ---- output ------------------------------------------------------------ */

Test(cpu, output_stdout)
{
	struct th_run r;
	char pidstr[32];
	struct profile *p = NULL;

	th_require_perf(false);
	pid_t pid = TH_SPAWN("busy", "1", "60");

	snprintf(pidstr, sizeof(pidstr), "%d", (int)pid);
	TH_CPROF(&r, RUN_TIMEOUT_MS, "cpu", "-p", pidstr, "-d", "1s", "-o", "-");
	th_run_log(&r, "-o -");
	cr_assert_eq(r.exit_code, 0, "exit %d:\n%s", r.exit_code, r.err);
	cr_assert(th_is_gzip((const uint8_t *)r.out, r.out_len), "stdout is not gzip (%zu bytes)",
		  r.out_len);
	/* Only the profile on stdout: decodable, and accepted by go tool pprof. */
	const char *path = th_tmp_path("stdout.pb.gz");
	FILE *f = fopen(path, "we");
	cr_assert(f);
	cr_assert_eq(fwrite(r.out, 1, r.out_len, f), r.out_len);
	cr_assert_eq(fclose(f), 0);
	p = th_load_profile(path);
	cr_expect_gt(p->nsamples, 0);
	th_assert_pprof_ok(path);
	profile_free(p);
	th_run_release(&r);
}

/*
 * Output that cannot be written: exit 4, found out before attaching. So the
 * run ends long before its -d 30s, writes nothing, and the target runs on
 * untouched (not stopped, not traced).
 */
static void check_untouched(pid_t pid)
{
	char path[64], line[256];
	FILE *f;
	char state = '?';
	long tracer = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	cr_assert(f);
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "State:", 6) == 0)
			sscanf(line + 6, " %c", &state);
		if (strncmp(line, "TracerPid:", 10) == 0)
			tracer = strtol(line + 10, NULL, 10);
	}
	fclose(f);
	cr_expect(state == 'R' || state == 'S', "target state %c", state);
	cr_expect_eq(tracer, 0, "target traced by %ld", tracer);
	cr_expect(th_alive(pid));
}

static void bad_output(const char *out)
{
	struct th_run r;
	char pidstr[32];
	pid_t pid = TH_SPAWN("busy", "1", "60");

	snprintf(pidstr, sizeof(pidstr), "%d", (int)pid);
	TH_CPROF(&r, RUN_TIMEOUT_MS, "cpu", "-p", pidstr, "-d", "30s", "-o", out);
	th_run_log(&r, out);
	cr_assert_eq(r.exit_code, 4, "-o %s: exit %d, want 4:\n%s", out, r.exit_code, r.err);
	cr_expect(strstr(r.err, "cprof: error: ") != NULL, "no error message:\n%s", r.err);
	cr_expect_lt(r.end_ns - r.start_ns, 10000000000ULL,
		     "exit 4 only after %.1f s: the output was not checked first",
		     (double)(r.end_ns - r.start_ns) / 1e9);
	check_untouched(pid);
	th_run_release(&r);
}

Test(cpu, output_missing_dir)
{
	const char *dir = th_tmp_path("missing");
	char *out;

	cr_assert(asprintf(&out, "%s/cpu.pb.gz", dir) > 0);
	bad_output(out);
	struct stat st;
	cr_expect(stat(dir, &st) != 0, "cprof created %s", dir);
	free(out);
}

Test(cpu, output_is_directory)
{
	const char *dir = th_tmp_dir("isdir");

	bad_output(dir);
	cr_expect_eq(th_dir_entries(dir), 0, "cprof wrote into %s", dir);
}

/* ---- targets that cannot be profiled ----------------------------------- */

/* No such pid, pid 2, a zombie, cprof itself, another user's process, a
 * 32-bit one: every command at once in test-badinput.c. */

/* ---- usage errors ------------------------------------------------------ */

/* Usage errors: exit 64, a message naming @subject (if any), nothing written. */
static void usage_error(const char *subject, const char *const *args)
{
	struct th_run r;
	char pidstr[32];
	const char *argv[32];
	size_t n = 0;
	const char *dir = th_tmp_dir("out");
	char *out;
	pid_t pid = TH_SPAWN("busy", "1", "60");

	cr_assert(asprintf(&out, "%s/cpu.pb.gz", dir) > 0);
	snprintf(pidstr, sizeof(pidstr), "%d", (int)pid);
	argv[n++] = "cpu";
	argv[n++] = "-p";
	argv[n++] = pidstr;
	argv[n++] = "-o";
	argv[n++] = out;
	for (; *args; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	th_run_cprof_ex(&r, RUN_TIMEOUT_MS, 0, 0, argv);
	th_run_log(&r, subject);
	cr_expect_eq(r.exit_code, 64, "%s: exit %d, want 64:\n%s", subject, r.exit_code, r.err);
	cr_expect(strstr(r.err, "cprof: error: ") != NULL, "%s: no error message:\n%s", subject,
		  r.err);
	if (subject[0])
		cr_expect(strstr(r.err, subject) != NULL, "the message does not quote \"%s\":\n%s",
			  subject, r.err);
	cr_expect_eq(r.out_len, 0, "%s: something on stdout", subject);
	cr_expect_eq(th_dir_entries(dir), 0, "%s: a profile was written", subject);
	cr_expect_lt(r.end_ns - r.start_ns, 10000000000ULL, "%s: a usage error took %.1f s",
		     subject, (double)(r.end_ns - r.start_ns) / 1e9);
	check_untouched(pid);
	free(out);
	th_run_release(&r);
}
#define USAGE(subject, ...) usage_error((subject), (const char *const[]){__VA_ARGS__, NULL})

/* Bad durations, rates, flags, a missing -p: test-badinput.c, for every command. */
Test(cpu, bad_mode)
{
	USAGE("sometimes", "--mode", "sometimes");
}

