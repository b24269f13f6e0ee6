/*
 * lib/session/ linked directly, as a server or a multi-profile command
 * will drive it: an agent session opened on a live target, its window run
 * with a cancel and a progress callback of the caller's, refusals with
 * their holder, and the target let go whatever happened. Nothing here goes
 * through the cprof command.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/wire.h"
#include "session/session.h"
#include "testhelp.h"
#include "util/util.h"

TestSuite(session, .init = th_init, .fini = th_cleanup, .timeout = 120);

static void skip_without_ptrace(void)
{
	if (geteuid() != 0)
		TH_SKIP_MISSING("the agent's injection needs ptrace of the target: run as root");
}

static struct agent_session_opts heap_opts(uint64_t rate)
{
	return (struct agent_session_opts){
		.agent_path = CPROF_AGENT_PATH,
		.events = CPROF_EVENTS_HEAP,
		.rate = rate,
		.ring_size = 16u << 20,
		.pick_timeout_ms = 5000,
		.call_timeout_ms = 10000,
	};
}

struct counts {
	uint64_t allocs, frees, progress_calls, last_elapsed_ns;
};

static int count_alloc(const struct cprof_wire_alloc *r, void *arg)
{
	(void)r;
	((struct counts *)arg)->allocs++;
	return 0;
}

static int count_free(const struct cprof_wire_free *r, void *arg)
{
	(void)r;
	((struct counts *)arg)->frees++;
	return 0;
}

static void count_progress(void *arg, uint64_t elapsed_ns, uint64_t records)
{
	struct counts *c = arg;

	(void)records;
	c->progress_calls++;
	c->last_elapsed_ns = elapsed_ns;
}

/* A heap window of 1.5 s on an allocating target: records come, the
 * progress callback is told each second, the agent confirms its detach. */
Test(session, window_collects_and_detaches)
{
	struct agent_session_opts o = heap_opts(64 << 10);
	struct counts c = { 0 };
	struct channel_handlers h = { .alloc = count_alloc, .free = count_free, .arg = &c };
	struct window_opts wo = { .duration_ns = 1500000000ULL, .progress = count_progress,
				  .arg = &c };
	struct agent_session s;
	struct window_result w;
	pid_t pid;
	int r;

	skip_without_ptrace();
	pid = TH_SPAWN("checksum", "60", "--report", "/dev/null", "--alloc", "1");
	cr_assert_eq(agent_session_prepare(&s, pid), 0);
	r = agent_session_open(&s, &o);
	cr_assert_eq(r, 0, "open: %s (step %d, %s)", strerror(-r), s.failed, s.rep.why);
	cr_assert_not_null(s.ch);
	cr_assert_gt(s.rep.tid, 0, "no thread made the call");
	cr_assert_eq(agent_window_run(s.ch, pid, &wo, &h, &w), 0);
	cr_log_info("measured: session window of %.2f s: %llu records (%llu allocs, %llu frees), "
		    "%llu progress calls",
		    w.window_ns / 1e9, (unsigned long long)w.records, (unsigned long long)c.allocs,
		    (unsigned long long)c.frees, (unsigned long long)c.progress_calls);
	cr_assert_gt(c.allocs, 0, "no allocation sampled");
	cr_assert_eq(w.records, c.allocs + c.frees);
	cr_assert_geq(w.window_ns, wo.duration_ns);
	cr_assert(w.detached, "the agent did not confirm its detach");
	cr_assert(!w.interrupted && !w.target_exited && !w.malformed);
	cr_assert_geq(c.progress_calls, 2, "progress told %llu times in 1.5 s",
		      (unsigned long long)c.progress_calls);
	agent_session_release(&s);
	th_assert_let_go(pid, false, "after a session of lib/session");
	th_kill(pid);
}

/*
 * The same window driven in steps, as a loop over several profilers does:
 * short polls, and ended by the caller long before its duration. The agent
 * detaches all the same, and what was drained is kept.
 */
Test(session, window_in_steps_ends_when_the_caller_says)
{
	struct agent_session_opts o = heap_opts(64 << 10);
	struct counts c = { 0 };
	struct channel_handlers h = { .alloc = count_alloc, .free = count_free, .arg = &c };
	struct window_opts wo = { .duration_ns = 60000000000ULL };
	struct agent_session s;
	struct agent_window w;
	unsigned polls = 0;
	uint64_t t0;
	pid_t pid;
	int r;

	skip_without_ptrace();
	pid = TH_SPAWN("checksum", "60", "--report", "/dev/null", "--alloc", "1");
	cr_assert_eq(agent_session_prepare(&s, pid), 0);
	r = agent_session_open(&s, &o);
	cr_assert_eq(r, 0, "open: %s (step %d, %s)", strerror(-r), s.failed, s.rep.why);
	agent_window_begin(&w, s.ch, pid, &wo, &h);
	t0 = th_now_ns();
	while (th_now_ns() - t0 < 800000000ULL) {
		cr_assert_eq(agent_window_poll(&w, 50), 0, "the window ended by itself");
		polls++;
	}
	cr_assert_eq(agent_window_end(&w), 0);
	cr_log_info("measured: %u polls of 50 ms, %llu records", polls,
		    (unsigned long long)w.res.records);
	cr_assert_geq(polls, 4, "polls of 50 ms took far longer (%u in 0.8 s)", polls);
	cr_assert_gt(c.allocs, 0);
	cr_assert_eq(w.res.records, c.allocs + c.frees);
	cr_assert_lt(w.res.window_ns, wo.duration_ns);
	cr_assert(w.res.detached && !w.res.interrupted && !w.res.target_exited);
	agent_session_release(&s);
	th_assert_let_go(pid, false, "after a window ended by its caller");
	th_kill(pid);
}

static bool cancel_at_once(void)
{
	return true;
}

/* A cancel before any thread was stopped: -ECANCELED at the injection, no
 * agent loaded, and the window on no channel is an empty, cancelled one. */
Test(session, cancelled_before_a_thread_is_stopped)
{
	struct agent_session_opts o = heap_opts(512 << 10);
	struct channel_handlers h = { 0 };
	struct window_opts wo = { .duration_ns = 1000000000ULL };
	struct agent_session s;
	struct window_result w;
	pid_t pid;
	int r;

	skip_without_ptrace();
	pid = TH_SPAWN("checksum", "60", "--report", "/dev/null", "--alloc", "1");
	o.cancelled = cancel_at_once;
	cr_assert_eq(agent_session_prepare(&s, pid), 0);
	r = agent_session_open(&s, &o);
	cr_assert_eq(r, -ECANCELED, "open: %d", r);
	cr_assert_eq(s.failed, AGENT_SESSION_INJECT);
	cr_assert_null(s.ch);
	cr_assert_eq(agent_window_run(s.ch, pid, &wo, &h, &w), 0);
	cr_assert(w.interrupted && w.detached && w.records == 0);
	agent_session_release(&s);
	cr_assert_null(th_agent_header(pid), "the agent was loaded after a cancel");
	th_assert_let_go(pid, false, "after a cancelled session");
	th_kill(pid);
}

/*
 * A session held by another process (a child of this test, since a process
 * does not conflict with its own locks): the claim step refuses at once
 * with -EBUSY and names the holder; nothing was done to the target.
 */
Test(session, second_session_is_refused_with_its_holder)
{
	struct agent_session_opts o = heap_opts(512 << 10);
	struct agent_session s;
	int ready[2], hold[2], r;
	pid_t pid, holder;
	char b;

	skip_without_ptrace();
	pid = TH_SPAWN("checksum", "60", "--report", "/dev/null", "--alloc", "1");
	cr_assert_eq(pipe(ready), 0);
	cr_assert_eq(pipe(hold), 0);
	holder = fork();
	cr_assert_geq(holder, 0);
	if (holder == 0) {
		struct agent_session hs;

		close(ready[0]);
		close(hold[1]);
		alarm(60);
		if (agent_session_prepare(&hs, pid) < 0 || agent_session_open(&hs, &o) < 0)
			_exit(1);
		if (write(ready[1], "o", 1) != 1)
			_exit(1);
		/* Until the test closes its end (seconds: well inside the
		 * agent's heartbeat bound, CPROF_WIRE_HEARTBEAT_TIMEOUT_MS). */
		while (read(hold[0], &b, 1) < 0 && errno == EINTR)
			;
		agent_session_release(&hs);
		_exit(0);
	}
	close(ready[1]);
	close(hold[0]);
	cr_assert_eq(read(ready[0], &b, 1), 1, "the holder could not open its session");

	cr_assert_eq(agent_session_prepare(&s, pid), 0);
	r = agent_session_open(&s, &o);
	cr_assert_eq(r, -EBUSY, "open beside another session: %d", r);
	cr_assert_eq(s.failed, AGENT_SESSION_CLAIM);
	cr_assert_eq(s.holder.pid, holder, "holder %d, not %d", s.holder.pid, holder);
	cr_assert_eq(s.rep.tried, 0, "a thread was looked at before the claim");
	agent_session_release(&s);

	close(hold[1]);
	cr_assert_eq(waitpid(holder, &r, 0), holder);
	cr_assert(WIFEXITED(r) && WEXITSTATUS(r) == 0, "the holder's session failed: 0x%x", r);
	close(ready[0]);
	th_assert_let_go(pid, false, "after two sessions, one refused");
	th_kill(pid);
}

/* As root, an agent named by CPROF_AGENT in a directory anyone may write
 * is refused, with the reason; a relative one is not found. */
Test(session, agent_find_trusts_only_what_root_alone_can_change)
{
	const char *copy = "/tmp/cprof-session-agent-copy.so";
	char buf[PATH_MAX], why[PATH_MAX + 128], cmd[PATH_MAX * 2];
	int r;

	if (geteuid() != 0)
		TH_SKIP_MISSING("the root-only rule applies to root");
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", CPROF_AGENT_PATH, copy);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(setenv("CPROF_AGENT", copy, 1), 0);
	r = agent_find(NULL, buf, sizeof(buf), why, sizeof(why));
	unlink(copy);
	cr_assert_eq(r, -EPERM, "agent in /tmp: %d", r);
	cr_assert(strstr(why, "/tmp"), "why: %s", why);

	cr_assert_eq(setenv("CPROF_AGENT", "cprof-agent.so", 1), 0);
	cr_assert_eq(agent_find(NULL, buf, sizeof(buf), why, sizeof(why)), -ENOENT);

	cr_assert_eq(setenv("CPROF_AGENT", CPROF_AGENT_PATH, 1), 0);
	r = agent_find(NULL, buf, sizeof(buf), why, sizeof(why));
	unsetenv("CPROF_AGENT");
	/* The build tree's own agent: root-owned unless the tree is not. */
	cr_assert(r == 0 || r == -EPERM, "the build's agent: %d", r);
}
