#include "agent-load.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heap-jemalloc.h"
#include "interrupt.h"
#include "report.h"
#include "util/util.h"

#define LOOKING_NOTE_NS (500ULL * 1000 * 1000)

#ifndef CPROF_AGENT_REL
#define CPROF_AGENT_REL "../lib/cprof/cprof-agent.so"
#endif

int agent_path(char *buf, size_t size, char *why, size_t whylen)
{
	return agent_find(CPROF_AGENT_REL, buf, size, why, whylen);
}

/*
 * Said once when the search for a thread that may load the agent lasts:
 * a busy allocator loop can keep every thread inside malloc for a while.
 */
static void looking(const struct inject_report *rep, uint64_t elapsed_ns)
{
	static bool said;

	if (said || elapsed_ns < LOOKING_NOTE_NS)
		return;
	said = true;
	report_note("waiting for a moment when a thread may load the agent (%u %s in %.1f s, "
		    "the last refused because %s); giving up after %d s and %d looks, or %d s",
		    rep->tried, plural(rep->tried, "look", "looks"), (double)elapsed_ns / 1e9,
		    rep->why[0] ? rep->why : "?", AGENT_SESSION_PICK_TIMEOUT_MS / 1000,
		    INJECT_MIN_LOOKS, AGENT_SESSION_PICK_TIMEOUT_MS * INJECT_PICK_CAP / 1000);
}

static struct agent_session_opts session_opts(const char *agent)
{
	return (struct agent_session_opts){
		.agent_path = agent,
		.ring_size = AGENT_SESSION_RING_SIZE,
		.pick_timeout_ms = AGENT_SESSION_PICK_TIMEOUT_MS,
		.call_timeout_ms = AGENT_SESSION_CALL_TIMEOUT_MS,
		.cancel = interrupt_cancel,
		.looking = looking,
	};
}

/*
 * Says why the session at @al->failed's step did not open, and returns its
 * exit code: the target's state or another tracer is the target's
 * (EXIT_TARGET), ptrace's refusal a permission (EXIT_PERMISSION).
 */
static int session_error(int r, const struct target *t, const struct agent_session *al,
			 const struct agent_session_opts *so)
{
	char text[2048];

	/* ptrace refuses a process on its way out with EPERM, not ESRCH: a
	 * target killed during the injection is gone, not forbidden. */
	if ((r == -EPERM || r == -EACCES) && !target_alive(t->pid))
		r = -ESRCH;
	agent_session_strerror(al, so, r, t->comm, text, sizeof(text));
	report_error_text(NULL, text);
	if (al->failed == AGENT_SESSION_CLAIM)
		return r == -EBUSY || r == -ESRCH ? EXIT_TARGET : EXIT_FAIL;
	if (al->failed != AGENT_SESSION_INJECT)
		return r == -ESRCH ? EXIT_TARGET : EXIT_FAIL;
	switch (r) {
	case -EPERM:
		return EXIT_PERMISSION;
	case -ESRCH:
	case -EBUSY:
	case -EUSERS:
	case -ENOENT:
	case -EAGAIN:
	case -EXDEV:
	case -ENOTSUP:
	case -EKEYREJECTED:
		return EXIT_TARGET;
	default:
		return EXIT_FAIL;
	}
}

/*
 * Finds the agent (into @agent) and checks that @t can load it, before
 * anything is read of it. 0, or an exit code after reporting the error.
 */
static int agent_check(const struct target *t, char *agent, size_t size)
{
	char why[PATH_MAX + 128];
	int r;

	r = agent_path(agent, size, why, sizeof(why));
	if (r == -EPERM) {
		report_error("not loading the agent named by CPROF_AGENT ('%s') as root: %s",
			     getenv("CPROF_AGENT"), why);
		report_hint("make it and every directory above it owned by root and writable by "
			    "root alone (chown root, chmod go-w), or unset CPROF_AGENT");
		return EXIT_USAGE;
	}
	if (r < 0) {
		report_error("cannot find cprof-agent.so beside the cprof binary or in %s from it",
			     CPROF_AGENT_REL);
		report_hint("set CPROF_AGENT to its absolute path");
		return EXIT_FAIL;
	}
	/* 'T' only: 't' (a tracing stop) is another cprof's snapshot or look
	 * for a thread, which the injection waits for (a debugger's was
	 * refused by preflight_not_traced()). */
	if (t->state == 'T') {
		report_error("pid %d (%s) is stopped (SIGSTOP or a debugger): no thread can load "
			     "the agent", t->pid, t->comm);
		report_hint("send it SIGCONT first");
		return EXIT_TARGET;
	}
	return 0;
}

/* What the load left in the target, said whatever its outcome. */
static void note_load(const struct target *t, const struct agent_session *al)
{
	if (al->rep.called && al->rep.placed)
		report_note("pid %d is in a container: loaded a copy of the agent %s at %s in "
			    "its root", t->pid, al->rep.placed == 1 ? "placed" : "found",
			    al->rep.agent_path);
	if (al->rep.left_pages)
		report_note("the loading code's two pages stay mapped in pid %d: its thread could "
			    "not be stopped safely to unmap them; the next load unmaps them", t->pid);
}

/* Who loads the agent: the agent's path and the target checked, and the
 * session's options. 0 or an exit code after reporting. */
static int loader(const struct target *t, char *agent, size_t size,
		  struct agent_session_opts *ret)
{
	int code = agent_check(t, agent, size);

	if (code == 0)
		*ret = session_opts(agent);
	return code;
}

void agent_opts_fill(struct agent_profiler_opts *ao, const char *agent)
{
	ao->agent_path = agent;
	/* Without rules every record carries its stack copy (cprof(1)). */
	ao->copy_stacks = getenv("CPROF_COPY_STACKS") != NULL;
	ao->cancel = interrupt_cancel;
	ao->looking = looking;
}

int agent_open(struct run *run, struct agent_profiler_opts *ao)
{
	const struct target *t = &run->target;
	char agent[PATH_MAX], err[2048];
	const struct agent_session *al;
	struct agent_session_opts so;
	int r;

	/* The agent's path and the target's state first, said as the
	 * command says them; the profiler reads the modules itself. */
	r = loader(t, agent, sizeof(agent), &so);
	if (r)
		return r;
	agent_opts_fill(ao, agent);
	r = profiler_new_agent(&run->p, ao, t->comm, err, sizeof(err));
	if (r < 0) {
		report_error_text(NULL, err);
		return r == -ESRCH ? EXIT_TARGET : EXIT_FAIL;
	}
	r = profiler_start(run->p, err, sizeof(err));
	al = agent_profiler_session(profiler_agent(run->p));
	if (al->unclaimed)
		report_note("no lock file could be made in /run/lock or /tmp (%s): another cprof "
			    "on pid %d would not be seen before the agent", strerror(-al->unclaimed),
			    t->pid);
	note_load(t, al);
	if (r == -ECANCELED) {
		/* Ctrl-C while no thread was safe to stop: the window is empty
		 * and its profile is still written. */
		report_note("interrupted before the agent was loaded: nothing was collected and "
			    "pid %d was left as it was", t->pid);
		return 0;
	}
	/* The session opened and what came after failed: its own words. */
	if (r < 0 && !al->failed) {
		report_error_text(NULL, err);
		return r == -ESRCH ? EXIT_TARGET : EXIT_FAIL;
	}
	return r < 0 ? session_error(r, t, al, &so) : 0;
}

int agent_open_jemalloc(struct run *run, const char *index)
{
	const struct target *t = &run->target;
	const struct jemalloc_dump *d;
	struct agent_session_opts so;
	char agent[PATH_MAX], err[256];
	int r;

	r = loader(t, agent, sizeof(agent), &so);
	if (r)
		return r;
	r = profiler_new_jemalloc(&run->p, t->pid, &so, index, run->command_line);
	if (r < 0) {
		report_error("cannot read jemalloc's heap profile of pid %d: %s", t->pid,
			     strerror(-r));
		return EXIT_FAIL;
	}
	r = profiler_start(run->p, err, sizeof(err));
	d = profiler_jemalloc_dump(run->p);
	note_load(t, &d->s);
	if (r == 0)
		return 0;
	if (r != -ECANCELED && d->failed == JEMALLOC_LOAD)
		return session_error(r, t, &d->s, &so);
	return heap_jemalloc_error(t, r, d);
}
