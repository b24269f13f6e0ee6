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
#include "util/util.h"
#include "testhelp.h"

/* Samples against the periods of the child's CPU time, and the least CPU
 * time (in periods) that makes a count worth judging. */
#define PERF_SAMPLES_MIN 0.9
#define PERF_SAMPLES_MAX 1.02
#define PERF_PERIODS_MIN 50
/* A cpu-wide task-clock samples whichever task runs when its period ends:
 * on a CPU the child shares, its count is a draw, held to this many
 * standard deviations (sqrt of the periods) where that is wider. */
#define PERF_SYSTEM_SD 4

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

static void run_scope(enum perf_scope scope)
{
	struct perf_opts o = { .period_ns = 1000000, .scope = scope, .stack_bytes = 8192,
			       .ring_pages = 64, .kernel = true };
	struct perf_handlers h = { .sample = on_sample, .comm = on_comm };
	struct perf_session *s;
	struct seen seen = { 0 };
	struct timespec cpu0, cpu1;
	clockid_t clock;
	double expected, lo, hi;
	uint64_t end;
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
	cr_assert_eq(clock_getcpuclockid(child, &clock), 0);
	cr_assert_eq(clock_gettime(clock, &cpu0), 0);
	cr_assert_eq(perf_session_enable(s), 0);
	go_child();
	end = now_monotonic_ns() + 1500ULL * 1000000;
	while (now_monotonic_ns() < end) {
		cr_assert_geq(perf_session_wait(s, 50), 0);
		cr_assert_eq(perf_session_drain(s, &h), 0);
	}
	cr_assert_eq(perf_session_disable(s), 0);
	cr_assert_eq(clock_gettime(clock, &cpu1), 0);
	cr_assert_eq(perf_session_drain(s, &h), 0);
	/*
	 * One sample per period of the child's CPU time (all its threads,
	 * the late one included), whatever share of the CPUs a loaded host
	 * left it: the truth is the process CPU clock over the window.
	 */
	expected = ((double)(cpu1.tv_sec - cpu0.tv_sec) * 1e9 +
		    (double)(cpu1.tv_nsec - cpu0.tv_nsec)) / (double)o.period_ns;
	cr_log_info("%llu samples, %.0f periods of CPU time",
		    (unsigned long long)seen.samples, expected);
	if (expected < PERF_PERIODS_MIN) {
		perf_session_free(s);
		stop_child();
		cr_skip_test("the host left the child %.0f ms of CPU in 1.5 s", expected);
	}
	lo = PERF_SAMPLES_MIN * expected - 2;
	hi = PERF_SAMPLES_MAX * expected + 2;
	if (scope == PERF_SCOPE_SYSTEM) {
		lo = fmin(lo, expected - PERF_SYSTEM_SD * sqrt(expected));
		hi = fmax(hi, expected + PERF_SYSTEM_SD * sqrt(expected));
	}
	cr_expect_geq(seen.samples, lo, "%llu samples for %.0f periods of CPU",
		      (unsigned long long)seen.samples, expected);
	cr_expect_leq(seen.samples, hi, "%llu samples for %.0f periods of CPU",
		      (unsigned long long)seen.samples, expected);
	cr_assert_eq(seen.with_user, seen.samples);
	cr_assert(seen.rip_ok);
	cr_assert_geq(seen.tids_n, 2, "the thread born after attach was not sampled");
	cr_assert_str_eq(seen.late_name, "perf-late");
	cr_assert_eq(perf_session_stats(s)->bad, 0);
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
