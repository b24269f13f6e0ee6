/*
 * `cprof wall` end to end on tests/targets/wallmix, whose threads sit in
 * known functions with known duty cycles and measure their own time:
 *
 *  - every nanosecond: each thread's wall time in the profile against the
 *    part of the profile's window it lived in (its birth and death as the
 *    thread itself stamped them);
 *  - function shares: the spinner's spin_part and rest_part against its own
 *    clock readings around them; the sleepers' single waits;
 *  - states: running + runnable against spinning, the rest off the CPU,
 *    with the system call each sleeper is in;
 *  - sleeping stacks reach the thread's start;
 *  - nothing is stopped or traced meanwhile (no ptrace at all), and the
 *    file is read by `go tool pprof`.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testhelp.h"

#define RUN_TIMEOUT_MS 60000
#define MAX_RECORDS 64

TestSuite(wall, .init = th_init, .fini = th_cleanup, .timeout = 120);

/* One line of wallmix's report. */
struct record {
	char name[16];
	pid_t tid;
	uint64_t born, died, spin, rest;
};

static size_t read_report(pid_t pid, const char *path, struct record *recs)
{
	char line[256];
	size_t n = 0;
	FILE *f;

	unlink(path);
	cr_assert(th_signal(pid, SIGUSR2));
	for (int i = 0; i < 200 && access(path, R_OK) != 0; i++)
		th_sleep_ms(10);
	f = fopen(path, "re");
	cr_assert_not_null(f, "wallmix wrote no report");
	while (n < MAX_RECORDS && fgets(line, sizeof(line), f)) {
		struct record *r = &recs[n];
		unsigned long long b, d, s, q;

		if (sscanf(line, "%15s %d %llu %llu %llu %llu", r->name, &r->tid, &b, &d, &s, &q) ==
		    6) {
			r->born = b, r->died = d, r->spin = s, r->rest = q;
			n++;
		}
	}
	fclose(f);
	return n;
}

static const struct record *record_named(const struct record *recs, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(recs[i].name, name) == 0)
			return &recs[i];
	return NULL;
}

static bool stack_has(const struct profile *p, const struct profile_sample *s, const char *func)
{
	for (size_t i = 0; i < s->nlocations; i++)
		if (th_location_has(p, s->location_ids[i], func))
			return true;
	return false;
}

static const char *label_str(const struct profile_sample *s, const char *key)
{
	const struct profile_label *l = th_label(s, key);

	return l && l->str ? l->str : "";
}

/* A thread's wall time, and the parts of it on a stack with @func, in
 * @state ("" any), in a call named @call ("" any). */
static int64_t thread_sum(const struct profile *p, int vi, pid_t tid, const char *func,
			  const char *state, const char *call)
{
	int64_t sum = 0;

	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		const struct profile_label *t = th_label(s, "thread_id");

		if (!t || t->num != tid)
			continue;
		if (func && !stack_has(p, s, func))
			continue;
		if (*state && strcmp(label_str(s, "state"), state) != 0)
			continue;
		if (*call && strcmp(label_str(s, "syscall"), call) != 0)
			continue;
		sum += s->values[vi];
	}
	return sum;
}

static bool is_root(const char *name)
{
	static const char *const roots[] = { "start_thread", "__clone3", "clone3", "clone",
					     "_start", "__libc_start_call_main", "main" };

	for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++)
		if (strcmp(name, roots[i]) == 0)
			return true;
	return false;
}

/* CLOCK_REALTIME - CLOCK_MONOTONIC now: the profile's start is realtime. */
static int64_t realtime_offset(void)
{
	struct timespec m, r;

	clock_gettime(CLOCK_MONOTONIC, &m);
	clock_gettime(CLOCK_REALTIME, &r);
	return ((int64_t)r.tv_sec - m.tv_sec) * 1000000000LL + (r.tv_nsec - m.tv_nsec);
}

/* Nothing of @pid is traced or in a tracing stop while cprof runs. */
static bool any_thread_traced(pid_t pid)
{
	pid_t tids[256];
	int n = th_task_list(pid, tids, 256);

	for (int i = 0; i < n; i++)
		if (th_task_tracer(pid, tids[i]) > 0 || th_task_state(pid, tids[i]) == 't')
			return true;
	return false;
}

struct wall_run {
	pid_t pid;
	struct record before[MAX_RECORDS], after[MAX_RECORDS];
	size_t nbefore, nafter;
	struct profile *p;
	int vi;
	uint64_t window_start, window_end; /* CLOCK_MONOTONIC */
	bool traced;
};

static void run_wall(struct wall_run *w, const char *duration)
{
	const char *report = th_tmp_path("wallmix.report");
	const char *out = th_tmp_path("wall.pb.gz");
	struct th_run r;
	pid_t watcher;

	w->pid = TH_SPAWN("wallmix", "40", report);
	th_sleep_ms(300);
	w->nbefore = read_report(w->pid, report, w->before);
	/* A child watches the target's threads while cprof runs. */
	watcher = fork();
	cr_assert_geq(watcher, 0);
	if (watcher == 0) {
		for (int i = 0; i < 4000; i++) {
			if (any_thread_traced(w->pid))
				_exit(1);
			usleep(2000);
		}
		_exit(0);
	}
	TH_CPROF(&r, RUN_TIMEOUT_MS, "wall", "-p", th_pid_str(w->pid), "-d", duration, "-o", out);
	th_run_log(&r, "wall");
	kill(watcher, SIGTERM);
	{
		int status = 0;

		waitpid(watcher, &status, 0);
		w->traced = WIFEXITED(status) && WEXITSTATUS(status) == 1;
	}
	cr_assert_eq(r.exit_code, 0, "cprof wall failed:\n%s", r.err);
	th_run_release(&r);
	w->nafter = read_report(w->pid, report, w->after);
	w->p = th_load_profile(out);
	w->vi = th_sample_type(w->p, "wall", "nanoseconds");
	cr_assert_geq(w->vi, 0, "no wall/nanoseconds in the profile");
	w->window_start = (uint64_t)(w->p->time_nanos - realtime_offset());
	w->window_end = w->window_start + (uint64_t)w->p->duration_nanos;
	th_assert_pprof_ok(out);
}

static void release_wall(struct wall_run *w)
{
	profile_free(w->p);
	th_kill(w->pid);
}

/*
 * The bounds docs/measured.md quotes (tests/unit/test-docs checks them):
 * each thread's wall time within WALL_LIFE_MAX_ERR of the part of the
 * window it lived; the spinner's spin_part and rest_part within
 * WALL_SPIN_MAX_POINTS of its own clock readings, each sleeper at least
 * WALL_IN_CALL_MIN_PCT in its call; at least WALL_ROOTED_MIN_PCT of the
 * off-CPU time unwound to a thread's start.
 */
#define WALL_LIFE_MAX_ERR 0.02
#define WALL_SPIN_MAX_POINTS 3
#define WALL_IN_CALL_MIN_PCT 95
#define WALL_ROOTED_MIN_PCT 95

/* The part of [born, died) inside the window; 0 when it is not wholly
 * inside a margin of it (then its ends are not judged here). */
static uint64_t lived_in_window(const struct wall_run *w, const struct record *r)
{
	uint64_t margin = 50 * 1000000ULL;
	uint64_t end = r->died ? r->died : UINT64_MAX;

	if (r->born < w->window_start && end > w->window_end)
		return w->window_end - w->window_start;
	if (r->born > w->window_start + margin && end < w->window_end - margin)
		return end - r->born;
	return 0;
}

Test(wall, every_thread_accounted_from_its_birth_to_its_death)
{
	struct wall_run w;
	size_t judged = 0, ephemeral = 0;

	th_require_perf(false);
	th_skip_accuracy_when_sanitized();
	run_wall(&w, "5s");
	cr_expect_not(w.traced, "a thread of the target was traced or stopped while cprof ran");
	for (size_t i = 0; i < w.nafter; i++) {
		const struct record *r = &w.after[i];
		uint64_t lived = lived_in_window(&w, r);
		int64_t got;
		double err;

		if (!lived)
			continue;
		got = thread_sum(w.p, w.vi, r->tid, NULL, "", "");
		err = (double)got / (double)lived - 1;
		cr_log_info("measured: wall %-10s %6d lived %7.1f ms in the window, profile "
			    "%7.1f ms (%+.2f%%)", r->name, r->tid, lived / 1e6, got / 1e6, 100 * err);
		cr_expect_leq(fabs(err), WALL_LIFE_MAX_ERR,
			      "%s (%d): %.1f ms in the profile for %.1f ms lived",
			      r->name, r->tid, got / 1e6, lived / 1e6);
		judged++;
		ephemeral += strcmp(r->name, "ephemeral") == 0;
	}
	cr_expect_geq(judged, 8, "only %zu threads judged", judged);
	cr_expect_geq(ephemeral, 1, "no thread born and dead inside the window was judged");
	release_wall(&w);
}

static double share(int64_t part, int64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0;
}

Test(wall, functions_and_states_of_each_thread)
{
	static const struct {
		const char *thread, *func, *call;
	} sleepers[] = {
		{ "sleeper", "sleeper_nap", "clock_nanosleep" },
		{ "condwait", "__futex_abstimed_wait_common", "futex" },
		{ "piperead", "__libc_read", "read" },
		{ "epoller", "epoll_wait", "epoll_wait" },
		{ "signaler", "__clock_nanosleep", "clock_nanosleep" },
	};
	const struct record *sb, *sa;
	struct wall_run w;
	double spin_truth, spin_got, rest_got, running, runnable, sleeping;
	int64_t total;

	th_require_perf(false);
	th_skip_accuracy_when_sanitized();
	run_wall(&w, "4s");
	for (size_t i = 0; i < sizeof(sleepers) / sizeof(sleepers[0]); i++) {
		const struct record *r = record_named(w.after, w.nafter, sleepers[i].thread);
		double in_func, in_call;

		cr_assert_not_null(r, "no %s in the report", sleepers[i].thread);
		total = thread_sum(w.p, w.vi, r->tid, NULL, "", "");
		in_func = share(thread_sum(w.p, w.vi, r->tid, sleepers[i].func, "", ""), total);
		/* Sleeping in it, or woken and waiting for a CPU to return. */
		in_call = share(thread_sum(w.p, w.vi, r->tid, NULL, "", sleepers[i].call), total);
		cr_log_info("measured: wall %-9s %5.1f%% in %s, %5.1f%% in %s (%.1f%% sleeping)",
			    sleepers[i].thread, in_func, sleepers[i].func, in_call, sleepers[i].call,
			    share(thread_sum(w.p, w.vi, r->tid, NULL, "sleeping", sleepers[i].call),
				  total));
		cr_expect_geq(in_func, WALL_IN_CALL_MIN_PCT, "%s: %.1f%% in %s", sleepers[i].thread,
			      in_func, sleepers[i].func);
		cr_expect_geq(in_call, WALL_IN_CALL_MIN_PCT, "%s: %.1f%% in %s", sleepers[i].thread,
			      in_call, sleepers[i].call);
	}
	sb = record_named(w.before, w.nbefore, "spinner");
	sa = record_named(w.after, w.nafter, "spinner");
	cr_assert(sb && sa);
	spin_truth = share((int64_t)(sa->spin - sb->spin),
			   (int64_t)(sa->spin - sb->spin + sa->rest - sb->rest));
	total = thread_sum(w.p, w.vi, sa->tid, NULL, "", "");
	spin_got = share(thread_sum(w.p, w.vi, sa->tid, "spin_part", "", ""), total);
	rest_got = share(thread_sum(w.p, w.vi, sa->tid, "rest_part", "", ""), total);
	running = share(thread_sum(w.p, w.vi, sa->tid, NULL, "running", ""), total);
	runnable = share(thread_sum(w.p, w.vi, sa->tid, NULL, "runnable", ""), total);
	sleeping = share(thread_sum(w.p, w.vi, sa->tid, NULL, "sleeping", ""), total);
	cr_log_info("measured: wall spinner: spin_part %.1f%% (truth %.1f%%), rest_part %.1f%% "
		    "(truth %.1f%%); running %.1f%%, runnable %.1f%%, sleeping %.1f%%",
		    spin_got, spin_truth, rest_got, 100 - spin_truth, running, runnable, sleeping);
	for (size_t i = 0; i < w.p->nsamples; i++) {
		const struct profile_sample *s = &w.p->samples[i];
		const struct profile_label *t = th_label(s, "thread_id");

		if (t && t->num == sa->tid && !stack_has(w.p, s, "spin_part") &&
		    !stack_has(w.p, s, "rest_part") && s->values[w.vi] > total / 200)
			cr_log_info("spinner, elsewhere: %.1f ms %s at %s (root %s)",
				    s->values[w.vi] / 1e6, label_str(s, "state"),
				    th_leaf_name(w.p, s), th_root_name(w.p, s));
	}
	cr_expect_leq(fabs(spin_got - spin_truth), WALL_SPIN_MAX_POINTS,
		      "spin_part %.1f%%, truth %.1f%%", spin_got, spin_truth);
	cr_expect_leq(fabs(rest_got - (100 - spin_truth)), WALL_SPIN_MAX_POINTS,
		      "rest_part %.1f%%, truth %.1f%%", rest_got, 100 - spin_truth);
	/* The target's own phases include their waits for a CPU (preempted
	 * while spinning, woken but not yet run after a nap): running and
	 * sleeping each lie within their phase and runnable time. */
	cr_expect_leq(running, spin_truth + 3, "running %.1f%%, spinning %.1f%%", running,
		      spin_truth);
	cr_expect_geq(running + runnable, spin_truth - 3, "running+runnable %.1f%%, spinning "
		      "%.1f%%", running + runnable, spin_truth);
	cr_expect_leq(sleeping, 100 - spin_truth + 3, "sleeping %.1f%%, resting %.1f%%", sleeping,
		      100 - spin_truth);
	cr_expect_geq(sleeping + runnable, 100 - spin_truth - 3, "sleeping+runnable %.1f%%, "
		      "resting %.1f%%", sleeping + runnable, 100 - spin_truth);
	release_wall(&w);
}

Test(wall, sleeping_stacks_reach_the_thread_start)
{
	int64_t off = 0, rooted = 0;
	struct wall_run w;

	th_require_perf(false);
	run_wall(&w, "3s");
	for (size_t i = 0; i < w.p->nsamples; i++) {
		const struct profile_sample *s = &w.p->samples[i];
		const char *state = label_str(s, "state");

		if (!strcmp(state, "running") || !strcmp(state, "runnable"))
			continue;
		off += s->values[w.vi];
		if (is_root(th_root_name(w.p, s)))
			rooted += s->values[w.vi];
		else
			cr_log_info("not rooted: %.1f ms at %s (leaf %s)", s->values[w.vi] / 1e6,
				    th_root_name(w.p, s), th_leaf_name(w.p, s));
	}
	cr_log_info("measured: wall off-CPU time rooted at a thread's start: %.2f%% of %.2f s",
		    share(rooted, off), off / 1e9);
	cr_expect_geq(share(rooted, off), WALL_ROOTED_MIN_PCT,
		      "only %.1f%% of off-CPU time unwound to a start", share(rooted, off));
	release_wall(&w);
}

/*
 * A single-threaded target with a session of the agent running: its wall
 * profile is its one thread's window, and the agent's task (cprof's, a
 * member of its thread group) is in no sample, but in a comment with the
 * CPU it used (issue 34: half of PostgreSQL postmaster's wall was in the
 * agent's peer_gone).
 */
Test(wall, agent_task_left_out)
{
	const char *out = th_tmp_path("wall-agent.pb.gz");
	pid_t pid = TH_SPAWN("ring", "60", th_tmp_path("ring.report"), "1", "64", "4096", "2000");
	pid_t agent = th_agent_session_keep(pid);
	int64_t total = 0, own;
	char said[96];
	struct profile *p;
	struct th_run r;
	bool noted = false;
	int vi;

	TH_CPROF(&r, RUN_TIMEOUT_MS, "wall", "-p", th_pid_str(pid), "-d", "1s", "-o", out);
	th_run_log(&r, "wall");
	cr_assert_eq(r.exit_code, 0, "cprof wall failed:\n%s", r.err);
	cr_expect(strstr(r.err, ": 1 thread over"), "stderr does not count 1 thread:\n%s", r.err);
	th_run_release(&r);
	p = th_load_profile(out);
	vi = th_sample_type(p, "wall", "nanoseconds");
	cr_assert_geq(vi, 0);
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_label *t = th_label(&p->samples[i], "thread_id");

		total += p->samples[i].values[vi];
		cr_expect(t && t->num == pid, "a sample of thread %lld \"%s\" (the agent's is %d)",
			  t ? (long long)t->num : -1LL, label_str(&p->samples[i], "thread_name"),
			  agent);
	}
	own = thread_sum(p, vi, pid, NULL, "", "");
	cr_expect_eq(own, total, "%.1f ms of %.1f ms are not the target's thread's",
		     (total - own) / 1e6, total / 1e6);
	cr_expect_leq(fabs((double)total / (double)p->duration_nanos - 1), WALL_LIFE_MAX_ERR,
		      "%.1f ms of wall in a %.1f ms window of one thread", total / 1e6,
		      p->duration_nanos / 1e6);
	snprintf(said, sizeof(said), "the cprof agent's task (tid %d) is cprof's", agent);
	for (size_t i = 0; i < p->ncomments; i++)
		noted |= strstr(p->comments[i], said) && strstr(p->comments[i], " ms of CPU");
	cr_expect(noted, "no comment says '%s' with its CPU time", said);
	profile_free(p);
	th_agent_session_stop(pid);
	th_kill(pid);
}

/* The target exits in the window: what was seen is written, exit 0. */
Test(wall, target_exits_during_the_window)
{
	const char *out = th_tmp_path("wall-exit.pb.gz");
	struct profile *p;
	struct th_run r;
	pid_t pid;

	pid = TH_SPAWN("wallmix", "1.5", th_tmp_path("wallmix-exit.report"));
	TH_CPROF(&r, RUN_TIMEOUT_MS, "wall", "-p", th_pid_str(pid), "-d", "10s", "-o", out);
	th_run_log(&r, "wall");
	cr_expect_eq(r.exit_code, 0);
	cr_expect(strstr(r.err, "exited during the profile") != NULL, "%s", r.err);
	p = th_load_profile(out);
	cr_expect_gt(p->nsamples, 0);
	profile_free(p);
	th_run_release(&r);
	th_kill(pid);
}

/*
 * Threads that never sleep, three to a CPU: each waits for a CPU at the
 * window's start, and the kernel adds that wait whole, from before the
 * window, when it ends. Each thread's time is still its window, to
 * within WALL_BUSY_MAX_ERR: what was counted twice is taken back. A wait
 * still going on at the window's end is not yet in the thread's clock:
 * it is runnable time all the same, none of it off the CPU.
 */
#define WALL_BUSY_MAX_ERR 0.001

Test(wall, threads_that_never_sleep_are_accounted_their_window)
{
	const char *out = th_tmp_path("wall-busy.pb.gz");
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	char nthreads[24];
	struct profile *p;
	struct th_run r;
	pid_t pid, tids[MAX_RECORDS];
	size_t n = 0;
	int vi;

	th_require_perf(false);
	snprintf(nthreads, sizeof(nthreads), "%ld", 3 * (ncpu > 0 ? ncpu : 1));
	pid = TH_SPAWN("busy", nthreads, "30");
	th_sleep_ms(200);
	TH_CPROF(&r, RUN_TIMEOUT_MS, "wall", "-p", th_pid_str(pid), "-d", "2s", "-o", out);
	th_run_log(&r, "wall");
	cr_assert_eq(r.exit_code, 0, "cprof wall failed:\n%s", r.err);
	th_run_release(&r);
	th_kill(pid);
	p = th_load_profile(out);
	vi = th_sample_type(p, "wall", "nanoseconds");
	cr_assert_geq(vi, 0, "no wall/nanoseconds in the profile");
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_label *t = th_label(&p->samples[i], "thread_id");
		size_t k = 0;

		if (!t || strncmp(label_str(&p->samples[i], "thread_name"), "busy-", 5))
			continue;
		while (k < n && tids[k] != t->num)
			k++;
		if (k == n && n < MAX_RECORDS)
			tids[n++] = (pid_t)t->num;
	}
	for (size_t i = 0; i < n; i++) {
		int64_t got = thread_sum(p, vi, tids[i], NULL, "", "");
		int64_t run = thread_sum(p, vi, tids[i], NULL, "running", "");
		int64_t wait = thread_sum(p, vi, tids[i], NULL, "runnable", "");
		double err = (double)got / (double)p->duration_nanos - 1;

		cr_log_info("measured: wall busy thread %d: %.4f s in a %.4f s window (%+.4f%%): "
			    "running %.4f s, runnable %.4f s, off the CPU %.4f s",
			    tids[i], got / 1e9, p->duration_nanos / 1e9, 100 * err, run / 1e9,
			    wait / 1e9, (got - run - wait) / 1e9);
		cr_expect_leq(fabs(err), WALL_BUSY_MAX_ERR, "thread %d: %.4f s in a %.4f s window",
			      tids[i], got / 1e9, p->duration_nanos / 1e9);
		cr_expect_leq((double)(got - run - wait) / (double)p->duration_nanos,
			      WALL_BUSY_MAX_ERR, "thread %d never sleeps: %.4f s off the CPU", tids[i],
			      (got - run - wait) / 1e9);
	}
	cr_expect_eq(n, (size_t)(3 * ncpu), "%zu busy threads in the profile", n);
	profile_free(p);
}
