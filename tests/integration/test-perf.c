/* perf_event_open sessions on a real child process (lib/perf/). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <math.h>
#include <time.h>
#include <unistd.h>

#include "perf/perf.h"
#include "perf-truth.h"
#include "util/util.h"
#include "testhelp.h"

/*
 * The lib's count of samples is judged against independent readers of the
 * same kernel events (perf-truth.h), not against the child's CPU time: a
 * sampling hrtimer that fires late takes one sample for every period it
 * missed, so on a loaded host a count of samples falls short of the CPU
 * clock by whatever the timers lost. What the lib answers for is handing
 * over every sample the kernel wrote.
 *
 * An oracle's count and the lib's are draws of the same kernel timers over
 * the same window (hrtimers of one kind and period on the same tasks or
 * CPUs, each late by its own delay): they differ by a count's noise, held
 * to PERF_ORACLE_SD standard deviations (sqrt of the count), and by
 * PERF_EDGE_SAMPLES at the edges of the window, where the enables and the
 * disables are microseconds apart.
 *
 * In system scope a cpu-wide clock samples whichever task runs when it
 * fires, and timers enabled some 50 us apart fire that far apart in every
 * period: a switch an interrupt brings (a task woken, a time slice ended)
 * falls between them, so the one before it and the one after it meet
 * different tasks, the same way all window long: one oracle's count is
 * biased against the lib's. Two oracles, one on each side of the lib's
 * timers, bracket its count.
 */
#define PERF_ORACLE_SD 4
#define PERF_EDGE_SAMPLES 2
#define PERF_DRAIN_MS 10
/*
 * A task-clock never samples more often than its period, so in thread
 * scope the lib's count stays under the periods of the child's CPU time
 * (the edges aside). A cpu-wide clock in system scope samples whichever
 * task runs when its period ends, and a loaded host gave the child more of
 * those moments than of its time: there the oracles alone bound the count.
 * Under PERF_PERIODS_MIN periods of CPU there is too little to judge.
 */
#define PERF_SAMPLES_MAX 1.02
#define PERF_PERIODS_MIN 50

static pid_t child;

static void spin_for(double seconds)
{
	struct timespec ts;
	double end;
	volatile unsigned long x = 0;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	end = (double)ts.tv_sec + ts.tv_nsec / 1e9 + seconds;
	do {
		for (int i = 0; i < 100000; i++)
			x += (unsigned long)i;
		clock_gettime(CLOCK_MONOTONIC, &ts);
	} while ((double)ts.tv_sec + ts.tv_nsec / 1e9 < end);
}

static void *late_thread(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "perf-late");
	spin_for(1.5);
	return NULL;
}

/*
 * A child that spins; once told (go_child(), after the events are enabled)
 * it starts a named thread and spins 2.5 s more. Named after the enable,
 * so that the kernel has a COMM record of it to give, however late a
 * loaded machine let the parent open its events.
 */
static int child_go[2] = { -1, -1 };

static void start_child(void)
{
	cr_assert_eq(pipe2(child_go, O_NONBLOCK | O_CLOEXEC), 0);
	child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		pthread_t t;
		char c;
		int waited = 0;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		/* Up to 10 s: a parent that never says so has failed already. */
		while (read(child_go[0], &c, 1) != 1 && waited++ < 200)
			spin_for(0.05);
		pthread_create(&t, NULL, late_thread, NULL);
		spin_for(2.5);
		_exit(0);
	}
	close(child_go[0]);
}

static void go_child(void)
{
	cr_assert_eq(write(child_go[1], "g", 1), 1);
	close(child_go[1]);
	child_go[1] = -1;
}

static void stop_child(void)
{
	if (child_go[1] >= 0)
		close(child_go[1]);
	child_go[1] = -1;
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		child = 0;
	}
}

struct seen {
	uint64_t samples, with_user, tids_n;
	pid_t tids[16];
	char late_name[32];
	bool rip_ok;
};

static int on_sample(const struct perf_sample *s, void *arg)
{
	struct seen *seen = arg;
	bool known = false;

	cr_assert_eq(s->pid, child);
	seen->samples++;
	if (s->has_user) {
		seen->with_user++;
		cr_assert_eq(s->user.stack_start, s->user.regs[UNWIND_REG_RSP]);
		cr_assert_leq(s->user.stack_size, 8192);
		seen->rip_ok = seen->rip_ok || s->user.regs[UNWIND_REG_RIP] != 0;
	}
	for (uint64_t i = 0; i < seen->tids_n; i++)
		known = known || seen->tids[i] == s->tid;
	if (!known && seen->tids_n < 16)
		seen->tids[seen->tids_n++] = s->tid;
	return 0;
}

static void on_comm(pid_t tid, const char *name, void *arg)
{
	struct seen *seen = arg;

	(void)tid;
	if (!strcmp(name, "perf-late"))
		snprintf(seen->late_name, sizeof(seen->late_name), "%s", name);
}

/* The oracles: enabled just before the lib's session and just after. */
enum { ORACLE_BEFORE, ORACLE_AFTER, ORACLES };

static void oracles_drain(struct perf_truth *truth)
{
	for (int i = 0; i < ORACLES; i++)
		perf_truth_drain(&truth[i]);
}

static void oracles_release(struct perf_truth *truth)
{
	for (int i = 0; i < ORACLES; i++)
		perf_truth_release(&truth[i]);
}

/*
 * Enables the lib's session between its two oracles, lets the child go,
 * drains all three every PERF_DRAIN_MS for 1.5 s and disables them in the
 * same order. Returns the child's CPU time over the window, in periods.
 *
 * The reader wakes on its own timer, never in poll and with no timer
 * slack: woken by the lib's watermark, or by a sleep's end put off to the
 * next timer interrupt, which is an oracle's or the lib's, it would run
 * just after one of the three and take a CPU from the child in step with
 * them. PERF_DRAIN_MS lets some 10 samples of a CPU in, a third of
 * the lib's ring. Each test runs in a process of its own: the slack is
 * not put back.
 */
static double run_window(struct perf_session *s, struct perf_truth *truth,
			 const struct perf_handlers *h, uint64_t period_ns)
{
	struct timespec cpu0, cpu1;
	clockid_t clock;
	uint64_t end;

	cr_assert_eq(clock_getcpuclockid(child, &clock), 0);
	cr_assert_eq(clock_gettime(clock, &cpu0), 0);
	perf_truth_ioctl(&truth[ORACLE_BEFORE], PERF_EVENT_IOC_ENABLE);
	cr_assert_eq(perf_session_enable(s), 0);
	perf_truth_ioctl(&truth[ORACLE_AFTER], PERF_EVENT_IOC_ENABLE);
	cr_assert_eq(prctl(PR_SET_TIMERSLACK, 1UL), 0);
	go_child();
	end = now_monotonic_ns() + 1500ULL * 1000000;
	while (now_monotonic_ns() < end) {
		th_sleep_ms(PERF_DRAIN_MS);
		cr_assert_geq(perf_session_wait(s, 0), 0);
		cr_assert_eq(perf_session_drain(s, h), 0);
		oracles_drain(truth);
	}
	perf_truth_ioctl(&truth[ORACLE_BEFORE], PERF_EVENT_IOC_DISABLE);
	cr_assert_eq(perf_session_disable(s), 0);
	perf_truth_ioctl(&truth[ORACLE_AFTER], PERF_EVENT_IOC_DISABLE);
	cr_assert_eq(clock_gettime(clock, &cpu1), 0);
	cr_assert_eq(perf_session_drain(s, h), 0);
	oracles_drain(truth);
	return ((double)(cpu1.tv_sec - cpu0.tv_sec) * 1e9 +
		(double)(cpu1.tv_nsec - cpu0.tv_nsec)) / (double)period_ns;
}

/*
 * The lib's count between the oracles' (see the bounds above), and in
 * thread scope under the CPU's periods. A record the kernel dropped from a
 * full ring was never written, and the reader of that ring is told how
 * many: the lib's losses (its 64 pages hold some 30 samples with 8 KiB
 * stacks, so a reader starved for 30 ms loses some) widen its lower bound,
 * the oracles' its upper one. Both bounds stay true, so no loss alone
 * fails the test; a lost record may be another process's, so a large loss
 * leaves a weak lower bound, which the log line shows.
 */
static void judge_counts(enum perf_scope scope, uint64_t samples, const struct perf_stats *st,
			 const struct perf_truth *truth, double periods)
{
	double a = (double)truth[ORACLE_BEFORE].samples, b = (double)truth[ORACLE_AFTER].samples;
	double lost = (double)(truth[ORACLE_BEFORE].lost + truth[ORACLE_AFTER].lost);
	double lo = fmin(a, b) - PERF_ORACLE_SD * sqrt(fmin(a, b)) - PERF_EDGE_SAMPLES;
	double hi = fmax(a, b) + PERF_ORACLE_SD * sqrt(fmax(a, b)) + PERF_EDGE_SAMPLES;

	if (lost)
		cr_log_warn("the oracles' rings dropped %.0f records: their counts are floors",
			    lost);
	cr_expect_geq(samples, lo - (double)st->lost,
		      "%llu samples (%llu lost) for the oracles' %.0f and %.0f",
		      (unsigned long long)samples, (unsigned long long)st->lost, a, b);
	cr_expect_leq(samples, hi + lost, "%llu samples for the oracles' %.0f and %.0f",
		      (unsigned long long)samples, a, b);
	/* A figure against the CPU clock: judged where the suites that measure
	 * run alone. Beside other suites (the sanitized build runs this one
	 * so) perf's clock of the child ran ahead of the scheduler's by more. */
#ifndef __SANITIZE_ADDRESS__
	if (scope == PERF_SCOPE_THREAD)
		cr_expect_leq(samples, PERF_SAMPLES_MAX * periods + PERF_EDGE_SAMPLES,
			      "%llu samples for %.0f periods of CPU", (unsigned long long)samples,
			      periods);
#else
	(void)scope;
	(void)periods;
#endif
}

/* Opens both oracles; on failure fails the test with nothing left open. */
static void oracles_open(struct perf_truth *truth, const struct perf_opts *o,
			 struct perf_session *s)
{
	int r = 0;

	for (int i = 0; i < ORACLES && r >= 0; i++)
		r = perf_truth_open(&truth[i], o);
	if (r < 0) {
		oracles_release(truth);
		perf_session_free(s);
		stop_child();
		cr_assert_fail("opening an oracle: %s", strerror(-r));
	}
}

static void log_counts(enum perf_scope scope, uint64_t samples, const struct perf_stats *st,
		       const struct perf_truth *truth, double periods)
{
	double a = (double)truth[ORACLE_BEFORE].samples, b = (double)truth[ORACLE_AFTER].samples;

	cr_log_info("measured: %s scope, %.0f periods of CPU, %llu samples (%llu lost), "
		    "oracles %.0f and %.0f (%llu lost): %.3f-%.3f of the oracles', "
		    "%.3f of the periods",
		    scope == PERF_SCOPE_SYSTEM ? "system" : "thread", periods,
		    (unsigned long long)samples, (unsigned long long)st->lost, a, b,
		    (unsigned long long)(truth[ORACLE_BEFORE].lost + truth[ORACLE_AFTER].lost),
		    (double)samples / fmax(fmax(a, b), 1), (double)samples / fmax(fmin(a, b), 1),
		    (double)samples / periods);
}

static void run_scope(enum perf_scope scope)
{
	struct perf_opts o = { .period_ns = 1000000, .scope = scope, .stack_bytes = 8192,
			       .ring_pages = 64, .kernel = true };
	struct perf_handlers h = { .sample = on_sample, .comm = on_comm };
	struct perf_session *s;
	struct perf_truth truth[ORACLES] = { { 0 } };
	struct seen seen = { 0 };
	const struct perf_stats *st;
	double periods, taken;
	int r;

	start_child();
	o.pid = child;
	h.arg = &seen;
	r = perf_session_open(&s, &o);
	if (r == -EACCES || r == -EPERM) {
		stop_child();
		TH_SKIP_MISSING("perf_event_open not permitted here (%s)", strerror(-r));
	}
	cr_assert_eq(r, 0, "perf_session_open: %s", strerror(-r));
	oracles_open(truth, &o, s);
	periods = run_window(s, truth, &h, o.period_ns);
	st = perf_session_stats(s);
	log_counts(scope, seen.samples, st, truth, periods);
	/* Too little CPU for the child, or too few of its periods sampled by
	 * the kernel's late timers, leaves no count worth judging. */
	taken = fmin((double)truth[ORACLE_BEFORE].samples, (double)truth[ORACLE_AFTER].samples);
	if (periods < PERF_PERIODS_MIN || taken < PERF_PERIODS_MIN) {
		oracles_release(truth);
		perf_session_free(s);
		stop_child();
		cr_skip_test("the host left the child %.0f ms of CPU in 1.5 s, the kernel "
			     "took %.0f samples of it", periods, taken);
	}
	judge_counts(scope, seen.samples, st, truth, periods);
	oracles_release(truth);
	cr_assert_eq(seen.with_user, seen.samples);
	cr_assert(seen.rip_ok);
	cr_assert_geq(seen.tids_n, 2, "the thread born after attach was not sampled");
	/* A cpu-wide ring also holds every other task's samples: beside
	 * stress-ng it overflows, and the thread's COMM record may be among
	 * those lost (cprof reads the name from /proc then). */
	if (st->lost == 0)
		cr_assert_str_eq(seen.late_name, "perf-late");
	else if (!seen.late_name[0])
		cr_log_info("the late thread's COMM record was not seen: %llu records were lost",
			    (unsigned long long)st->lost);
	cr_assert_eq(st->bad, 0);
	perf_session_free(s);
	stop_child();
}

Test(perf, system_scope)
{
	run_scope(PERF_SCOPE_SYSTEM);
}

Test(perf, thread_scope_inherits)
{
	run_scope(PERF_SCOPE_THREAD);
}

Test(perf, online_cpus_and_strerror)
{
	struct perf_opts o = { .scope = PERF_SCOPE_SYSTEM };
	char buf[512];

	perf_strerror(-EACCES, &o, buf, sizeof(buf));
	cr_assert(strstr(buf, "perf_event_paranoid"), "%s", buf);
	cr_assert(strstr(buf, "hint: "), "%s", buf);
	perf_strerror(-EMFILE, &o, buf, sizeof(buf));
	cr_assert(strstr(buf, "ulimit"), "%s", buf);
}

Test(perf, bad_options)
{
	struct perf_opts o = { .pid = getpid(), .period_ns = 1000000, .stack_bytes = 8191,
			       .ring_pages = 64 };
	struct perf_session *s = NULL;

	cr_assert_eq(perf_session_open(&s, &o), -EINVAL);
	o.stack_bytes = 8192;
	o.ring_pages = 63;
	cr_assert_eq(perf_session_open(&s, &o), -EINVAL);
	cr_assert_null(s);
}
