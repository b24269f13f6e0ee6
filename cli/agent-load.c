#include "agent-load.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "interrupt.h"
#include "report.h"
#include "util/util.h"

#define PICK_TIMEOUT_MS 5000
#define CALL_TIMEOUT_MS 10000
#define LOOKING_NOTE_NS (500ULL * 1000 * 1000)
/* ~10,000 heap records between two drains. */
#define AGENT_RING_SIZE (16u << 20)

#ifndef CPROF_AGENT_REL
#define CPROF_AGENT_REL "../lib/cprof/cprof-agent.so"
#endif

/*
 * Whether the entry @st (@path) could only have been put there by root:
 * owned by root, writable by nobody else, and the kind expected (a
 * directory on the way, a regular file at the end). 0, or -EPERM with the
 * reason in @why.
 */
static int root_only_entry(const struct stat *st, const char *path, bool last, char *why,
			   size_t whylen)
{
	if (S_ISLNK(st->st_mode)) {
		snprintf(why, whylen, "'%s' is a symbolic link", path);
		return -EPERM;
	}
	if (last ? !S_ISREG(st->st_mode) : !S_ISDIR(st->st_mode)) {
		snprintf(why, whylen, "'%s' is not a %s", path, last ? "regular file" : "directory");
		return -EPERM;
	}
	if (st->st_uid != 0) {
		snprintf(why, whylen, "%s '%s' is owned by uid %u, not root",
			 last ? "the file" : "directory", path, (unsigned)st->st_uid);
		return -EPERM;
	}
	if (st->st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(why, whylen, "%s '%s' is writable by %s (mode %04o)",
			 last ? "the file" : "directory", path,
			 st->st_mode & S_IWOTH ? "others" : "its group",
			 (unsigned)(st->st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/*
 * Root runs $CPROF_AGENT's code in another process, and the target opens it
 * by its path later (dlopen), so nobody but root may be able to change what
 * that path holds until then: the file and every directory from "/" down to
 * it owned by root and writable by root alone. A sticky world-writable
 * directory such as /tmp does not count: anyone can add the entries another
 * path resolves through. Walked one component at a time from an fd with
 * O_PATH | O_NOFOLLOW, so a symbolic link swapped in after realpath() is
 * refused, not followed. @path is absolute and canonical (realpath()).
 * 0, or -EPERM with the reason in @why, or -errno.
 */
static int root_only_path(const char *path, char *why, size_t whylen)
{
	char walked[PATH_MAX], part[NAME_MAX + 1];
	const char *p = path;
	struct stat st;
	size_t len = 0;
	int fd, r;

	fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out_close;
	}
	r = root_only_entry(&st, "/", false, why, whylen);
	while (r == 0) {
		size_t n;
		int next;

		p += strspn(p, "/");
		if (!*p)
			break;
		n = strcspn(p, "/");
		if (n >= sizeof(part) || len + 1 + n >= sizeof(walked)) {
			r = -ENAMETOOLONG;
			break;
		}
		memcpy(part, p, n);
		part[n] = '\0';
		walked[len++] = '/';
		memcpy(walked + len, part, n + 1);
		len += n;
		p += n;
		next = openat(fd, part, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			r = -errno;
			break;
		}
		close(fd);
		fd = next;
		if (fstat(fd, &st) < 0) {
			r = -errno;
			break;
		}
		r = root_only_entry(&st, walked, p[strspn(p, "/")] == '\0', why, whylen);
	}
out_close:
	close(fd);
	return r;
}

/*
 * Relative to /proc/self/exe, never to the working directory or $PATH:
 * root must not load code from where it was not put. $CPROF_AGENT too is
 * taken from root's environment (sudo -E) only where root alone could
 * have put it (root_only_path()).
 */
int agent_find(char *buf, size_t size, char *why, size_t whylen)
{
	static const char *const rel[] = { "cprof-agent.so", CPROF_AGENT_REL };
	const char *env = getenv("CPROF_AGENT");
	char exe[PATH_MAX], *slash;
	ssize_t n;

	if (why && whylen)
		why[0] = '\0';
	if (env && *env) {
		char path[PATH_MAX], reason[PATH_MAX + 128];
		int r;

		if (env[0] != '/' || !realpath(env, path) || access(path, R_OK) < 0 ||
		    strlen(path) >= size)
			return -ENOENT;
		if (geteuid() == 0) {
			r = root_only_path(path, reason, sizeof(reason));
			if (r < 0) {
				if (r != -EPERM)
					snprintf(reason, sizeof(reason), "cannot check '%s': %s",
						 path, strerror(-r));
				if (why && whylen)
					snprintf(why, whylen, "%s", reason);
				return -EPERM;
			}
		}
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
		    "the last refused because %s); giving up after %d s",
		    rep->tried, plural(rep->tried, "look", "looks"), (double)elapsed_ns / 1e9, rep->why[0] ? rep->why : "?",
		    PICK_TIMEOUT_MS / 1000);
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
			     "its agent serves another cprof's session", t->pid, t->comm);
		report_hint("wait for it to end, or detach the debugger");
		return EXIT_TARGET;
	case -EUSERS:
		report_error("another process (pid %d: %s) kept stopping threads of pid %d (%s) "
			     "for %d s", rep->holder.pid, rep->holder.command[0] ? rep->holder.command : "?",
			     t->pid, t->comm, (PICK_TIMEOUT_MS + CALL_TIMEOUT_MS) / 1000);
		report_hint("try again when it is done");
		return EXIT_TARGET;
	case -ENOENT:
		report_error("pid %d (%s) has no libc.so with dlopen: it is statically linked, "
			     "so the agent cannot be loaded", t->pid, t->comm);
		report_hint("heap, mutex and block need a dynamically linked target; "
			    "cpu and threads work on any");
		return EXIT_TARGET;
	case -EAGAIN:
		report_error("no thread of pid %d (%s) was safe to load the agent within %d s: "
			     "%u %s, the last refused because %s", t->pid, t->comm,
			     PICK_TIMEOUT_MS / 1000, rep->tried, plural(rep->tried, "look", "looks"),
			     rep->why[0] ? rep->why : "?");
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
	case -EKEYREJECTED:
		report_error("not loading the agent into pid %d (%s): %s; it was left as it was",
			     t->pid, t->comm, rep->why);
		report_hint("cpu, wall and threads need no agent and work on it");
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
	/* CPROF_HEAP_COPY_STACKS: its name from when heap was the only agent
	 * command. */
	if (getenv("CPROF_COPY_STACKS") || getenv("CPROF_HEAP_COPY_STACKS"))
		return NULL;
	return al->ch;
}

/*
 * Finds the agent (into @agent) and reads @t's modules into @al. 0, or an
 * exit code after reporting the error.
 */
static int agent_prepare(struct agent_load *al, const struct target *t, char *agent, size_t size)
{
	char why[PATH_MAX + 128];
	int r;

	memset(al, 0, sizeof(*al));
	al->fd = -1;
	r = agent_find(agent, size, why, sizeof(why));
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
	return 0;
}

static struct inject_opts inject_opts_for(const struct agent_load *al, const struct target *t,
					  const char *agent)
{
	return (struct inject_opts){
		.agent_path = agent,
		/* A target in a container cannot see our pid: 0 tells the
		 * agent's watchdog to go by the heartbeat alone. */
		.cprof_pid = target_other_pidns(t->pid) ? 0 : getpid(),
		.ring_size = AGENT_RING_SIZE,
		.pick_timeout_ms = PICK_TIMEOUT_MS,
		.call_timeout_ms = CALL_TIMEOUT_MS,
		.cancelled = interrupt_requested,
		.looking = looking,
		.maps = &al->maps,
		.sym = al->sym,
		.unw = al->unw,
	};
}

static void note_placed(const struct target *t, const struct agent_load *al)
{
	report_note("pid %d is in a container: loaded a copy of the agent %s at %s in its root",
		    t->pid, al->rep.placed == 1 ? "placed" : "found", al->rep.agent_path);
}

int agent_call(struct agent_load *al, const struct target *t, const char *function,
	       const char *string, int *ret)
{
	char agent[PATH_MAX];
	struct inject_opts o;
	int r;

	r = agent_prepare(al, t, agent, sizeof(agent));
	if (r)
		return r;
	o = inject_opts_for(al, t, agent);
	o.function = function;
	o.string = string;
	r = inject_agent(t->pid, &o, &al->rep);
	if (al->rep.called && al->rep.placed)
		note_placed(t, al);
	if (al->rep.called || r == -ECANCELED) {
		*ret = r;
		return 0;
	}
	return inject_error(r, t, al);
}

/*
 * The agent serves one session at a time: a second cprof is refused at
 * once, told whose session it is (not left to find the agent busy after
 * stopping a thread, or to take another's hooks for a debugger).
 */
static int claim_session(struct agent_load *al, const struct target *t)
{
	struct target_claim_holder h;
	int r;

	r = target_claim_take(&al->session, t->pid, TARGET_CLAIM_AGENT, 0, NULL, &h);
	if (r == -EBUSY) {
		report_error("pid %d (%s) is being profiled by cprof pid %d (%s): its agent serves "
			     "one session at a time", t->pid, t->comm, h.pid,
			     h.command[0] ? h.command : "?");
		report_hint("wait for that cprof to end, then run this one; cpu, wall and threads "
			    "need no agent and may run beside it");
		return EXIT_TARGET;
	}
	if (r == -ESRCH) {
		report_error("pid %d (%s) exited before the agent was loaded", t->pid, t->comm);
		return EXIT_TARGET;
	}
	if (target_claim_unavailable(r)) {
		report_note("no lock file could be made in /run/lock or /tmp (%s): another cprof "
			    "on pid %d would not be seen before the agent", strerror(-r), t->pid);
		return 0;
	}
	if (r < 0) {
		report_error("cannot claim pid %d (%s) for a session of the agent: %s", t->pid,
			     t->comm, strerror(-r));
		report_hint("cprof keeps a lock file per target in /run/lock (else /tmp)");
		return EXIT_FAIL;
	}
	al->claimed = true;
	return 0;
}

int agent_load(struct agent_load *al, const struct target *t, uint32_t events, uint64_t rate)
{
	char agent[PATH_MAX];
	struct inject_opts o;
	int r;

	r = agent_prepare(al, t, agent, sizeof(agent));
	if (r)
		return r;
	r = claim_session(al, t);
	if (r)
		return r;
	o = inject_opts_for(al, t, agent);
	o.rate = rate;
	o.events = events;
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
		note_placed(t, al);
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
	/* After the channel: the detach is sent through it. */
	channel_close(al->ch);
	al->ch = NULL;
	if (al->claimed)
		target_claim_drop(&al->session);
	unwinder_free(al->unw);
	symbolizer_free(al->sym);
	maps_release(&al->maps);
	memset(al, 0, sizeof(*al));
}
