#include "agent-load.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "interrupt.h"
#include "report.h"

#define PICK_TIMEOUT_MS 5000
#define CALL_TIMEOUT_MS 10000

#ifndef CPROF_AGENT_REL
#define CPROF_AGENT_REL "../lib/cprof/cprof-agent.so"
#endif

/*
 * Relative to /proc/self/exe, never to the working directory or $PATH:
 * root must not load code from where it was not put.
 */
int agent_find(char *buf, size_t size)
{
	static const char *const rel[] = { "cprof-agent.so", CPROF_AGENT_REL };
	const char *env = getenv("CPROF_AGENT");
	char exe[PATH_MAX], *slash;
	ssize_t n;

	if (env && *env) {
		char path[PATH_MAX];

		if (env[0] != '/' || !realpath(env, path) || access(path, R_OK) < 0 ||
		    strlen(path) >= size)
			return -ENOENT;
		memcpy(buf, path, strlen(path) + 1);
		return 0;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -ENOENT;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (!slash)
		return -ENOENT;
	slash[1] = '\0';
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		char path[PATH_MAX * 2], real[PATH_MAX];

		snprintf(path, sizeof(path), "%s%s", exe, rel[i]);
		if (realpath(path, real) && access(real, R_OK) == 0 && strlen(real) < size) {
			memcpy(buf, real, strlen(real) + 1);
			return 0;
		}
	}
	return -ENOENT;
}

static int inject_error(int r, const struct target *t, const struct agent_load *al)
{
	const struct inject_report *rep = &al->rep;

	/* ptrace refuses a process on its way out with EPERM, not ESRCH: a
	 * target killed during the injection is gone, not forbidden. */
	if ((r == -EPERM || r == -EACCES) && !target_alive(t->pid))
		r = -ESRCH;
	switch (r) {
	case -ESRCH:
		report_error("pid %d (%s) exited before the agent was loaded", t->pid, t->comm);
		return EXIT_TARGET;
	case -EPERM:
		report_error("not allowed to ptrace pid %d (%s)", t->pid, t->comm);
		report_hint("run as root, or as its user with kernel.yama.ptrace_scope = 0 "
			    "(or CAP_SYS_PTRACE)");
		return EXIT_PERMISSION;
	case -EBUSY:
		report_error("pid %d (%s) is traced by another process (a debugger, strace), or "
			     "another cprof is profiling it", t->pid, t->comm);
		report_hint("wait for it to end, or detach the debugger");
		return EXIT_TARGET;
	case -ENOENT:
		report_error("pid %d (%s) has no libc.so with dlopen: it is statically linked, "
			     "so the agent cannot be loaded", t->pid, t->comm);
		report_hint("heap, mutex and block need a dynamically linked target; "
			    "cpu and threads work on any");
		return EXIT_TARGET;
	case -EAGAIN:
		report_error("no thread of pid %d (%s) was safe to load the agent within %d s: "
			     "%u looks, the last refused because %s", t->pid, t->comm,
			     PICK_TIMEOUT_MS / 1000, rep->tried, rep->why[0] ? rep->why : "?");
		report_hint("the target was left as it was; try again in a moment");
		return EXIT_TARGET;
	case -ETIMEDOUT:
		report_error("thread %d of pid %d (%s) did not finish loading the agent in %d s",
			     rep->tid, t->pid, t->comm, CALL_TIMEOUT_MS / 1000);
		report_hint("it is not stopped: it finishes on its own and goes back to its work; "
			    "the agent undoes its hooks within 1 s since cprof is gone");
		return EXIT_FAIL;
	case -ENOEXEC:
		report_error("the target's dlopen refused %s: %s", rep->agent_path,
			     rep->dlerror[0] ? rep->dlerror : "no reason given");
		return EXIT_FAIL;
	case -EXDEV:
		if (!rep->place_error) {
			report_error("the agent resident in pid %d (%s) was deleted: it cannot be "
				     "loaded again by its path", t->pid, t->comm);
			report_hint("restart the target to profile it with the agent again");
			return EXIT_TARGET;
		}
		report_error("pid %d (%s) is in another root (a container) and no copy of the "
			     "agent could be placed in it: %s", t->pid, t->comm,
			     rep->place_error == -EROFS
				     ? "no /tmp, /var/tmp or /dev/shm there that only root can "
				       "change, writable and not mounted noexec"
				     : strerror(-rep->place_error));
		report_hint("give the container a /tmp owned by root (mode 1777 or 755), "
			    "or run cprof inside the container");
		return EXIT_TARGET;
	case -ENOTSUP:
		report_error("pid %d (%s) is stopped (SIGSTOP or a debugger): no thread can load "
			     "the agent", t->pid, t->comm);
		report_hint("send it SIGCONT first");
		return EXIT_TARGET;
	}
	report_error("cannot load the agent into pid %d (%s): %s", t->pid, t->comm, strerror(-r));
	return EXIT_FAIL;
}

int agent_put_rule(void *channel, uint64_t key, uint64_t rule)
{
	return channel_put_rule(channel, key, rule);
}

struct channel *agent_rules_channel(const struct agent_load *al)
{
	return getenv("CPROF_HEAP_COPY_STACKS") ? NULL : al->ch;
}

int agent_load(struct agent_load *al, const struct target *t, uint32_t events, uint64_t rate,
	       uint32_t ring_size)
{
	char agent[PATH_MAX];
	struct inject_opts o;
	int r;

	memset(al, 0, sizeof(*al));
	al->fd = -1;
	if (agent_find(agent, sizeof(agent)) < 0) {
		report_error("cannot find cprof-agent.so beside the cprof binary or in %s from it",
			     CPROF_AGENT_REL);
		report_hint("set CPROF_AGENT to its absolute path");
		return EXIT_FAIL;
	}
	if (t->state == 'T' || t->state == 't') {
		report_error("pid %d (%s) is stopped (SIGSTOP or a debugger): no thread can load "
			     "the agent", t->pid, t->comm);
		report_hint("send it SIGCONT first");
		return EXIT_TARGET;
	}
	r = maps_read(t->pid, &al->maps);
	if (r == 0)
		r = symbolizer_new(&al->sym, t->pid);
	if (r == 0)
		r = unwinder_new(&al->unw, symbolizer_dwfl(al->sym), t->pid);
	if (r < 0) {
		report_error("cannot read the modules of pid %d (%s): %s", t->pid, t->comm,
			     strerror(-r));
		return r == -ESRCH ? EXIT_TARGET : EXIT_FAIL;
	}
	o = (struct inject_opts){
		.agent_path = agent,
		/* A target in a container cannot see our pid: 0 tells the
		 * agent's watchdog to go by the heartbeat alone. */
		.cprof_pid = target_other_pidns(t->pid) ? 0 : getpid(),
		.rate = rate,
		.ring_size = ring_size,
		.events = events,
		.pick_timeout_ms = PICK_TIMEOUT_MS,
		.call_timeout_ms = CALL_TIMEOUT_MS,
		.cancelled = interrupt_requested,
		.maps = &al->maps,
		.sym = al->sym,
		.unw = al->unw,
	};
	r = inject_agent(t->pid, &o, &al->rep);
	if (r == -ECANCELED) {
		/* Ctrl-C while no thread was safe to stop: the window is empty
		 * (al->ch stays NULL) and its profile is still written. */
		report_note("interrupted before the agent was loaded: nothing was collected and "
			    "pid %d was left as it was", t->pid);
		return 0;
	}
	if (r < 0)
		return inject_error(r, t, al);
	al->fd = r;
	if (al->rep.placed)
		report_note("pid %d is in a container: loaded a copy of the agent %s at %s in its "
			    "root", t->pid, al->rep.placed == 1 ? "placed" : "found",
			    al->rep.agent_path);
	/* The agent is a module of the target now: its frames must resolve. */
	symbolizer_refresh(al->sym);
	r = channel_open(&al->ch, t->pid, al->fd);
	if (r < 0) {
		report_error("cannot open the agent's channel in pid %d: %s", t->pid,
			     strerror(-r));
		return r == -ESRCH ? EXIT_TARGET : EXIT_FAIL;
	}
	return 0;
}

void agent_load_release(struct agent_load *al)
{
	channel_close(al->ch);
	unwinder_free(al->unw);
	symbolizer_free(al->sym);
	maps_release(&al->maps);
	memset(al, 0, sizeof(*al));
}
