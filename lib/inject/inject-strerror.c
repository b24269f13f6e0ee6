/* What an injection's failure means, and what to do (inject.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "inject/inject.h"
#include "util/util.h"

static const char *or_unknown(const char *s)
{
	return s[0] ? s : "?";
}

static void placed_error(pid_t pid, const char *comm, const struct inject_report *rep, char *buf,
			 size_t size)
{
	if (!rep->place_error) {
		snprintf(buf, size,
			 "the agent resident in pid %d (%s) was deleted: it cannot be loaded again "
			 "by its path\n"
			 "hint: restart the target to profile it with the agent again",
			 pid, comm);
		return;
	}
	snprintf(buf, size,
		 "pid %d (%s) is in another root (a container) and no copy of the agent could be "
		 "placed in it: %s\n"
		 "hint: give the container a /tmp owned by root (mode 1777 or 755), or run cprof "
		 "inside the container",
		 pid, comm,
		 rep->place_error == -EROFS
			 ? "no /tmp, /var/tmp or /dev/shm there that only root can change, writable "
			   "and not mounted noexec"
			 : strerror(-rep->place_error));
}

void inject_strerror(int err, pid_t pid, const char *comm, const struct inject_opts *o,
		     const struct inject_report *rep, char *buf, size_t size)
{
	switch (err) {
	case -ESRCH:
		snprintf(buf, size, "pid %d (%s) exited before the agent was loaded", pid, comm);
		break;
	case -EPERM:
		snprintf(buf, size,
			 "not allowed to ptrace pid %d (%s)\n"
			 "hint: run as root, or as its user with kernel.yama.ptrace_scope = 0 (or "
			 "CAP_SYS_PTRACE)",
			 pid, comm);
		break;
	case -EBUSY:
		snprintf(buf, size,
			 "pid %d (%s) is traced by another process (a debugger, strace), or its "
			 "agent serves another cprof's session\n"
			 "hint: wait for it to end, or detach the debugger",
			 pid, comm);
		break;
	case -EUSERS:
		snprintf(buf, size,
			 "another process (pid %d: %s) kept stopping threads of pid %d (%s) for %u s\n"
			 "hint: try again when it is done",
			 rep->holder.pid, or_unknown(rep->holder.command), pid, comm,
			 inject_claim_wait_ms(o) / 1000);
		break;
	case -ENOENT:
		snprintf(buf, size,
			 "pid %d (%s) has no libc.so with dlopen: it is statically linked, so the "
			 "agent cannot be loaded\n"
			 "hint: heap, mutex and block need a dynamically linked target; cpu and "
			 "threads work on any",
			 pid, comm);
		break;
	case -EAGAIN:
		snprintf(buf, size,
			 "no thread of pid %d (%s) was safe to load the agent within %.1f s: %u %s, "
			 "the last refused because %s\n"
			 "hint: the target was left as it was; try again in a moment",
			 pid, comm, (double)rep->looked_ns / 1e9, rep->tried,
			 plural(rep->tried, "look", "looks"), or_unknown(rep->why));
		break;
	case -ETIMEDOUT:
		snprintf(buf, size,
			 "thread %d of pid %d (%s) did not finish loading the agent in %u s\n"
			 "hint: it is not stopped: it finishes on its own and goes back to its "
			 "work; the agent undoes its hooks within 1 s since cprof is gone",
			 rep->tid, pid, comm, o->call_timeout_ms / 1000);
		break;
	case -ENOEXEC:
		snprintf(buf, size, "the target's dlopen refused %s: %s", rep->agent_path,
			 rep->dlerror[0] ? rep->dlerror : "no reason given");
		break;
	case -EXDEV:
		placed_error(pid, comm, rep, buf, size);
		break;
	case -ENOTSUP:
		snprintf(buf, size,
			 "pid %d (%s) is stopped (SIGSTOP or a debugger): no thread can load the "
			 "agent\n"
			 "hint: send it SIGCONT first",
			 pid, comm);
		break;
	case -EKEYREJECTED:
		snprintf(buf, size,
			 "not loading the agent into pid %d (%s): %s; it was left as it was\n"
			 "hint: cpu, wall and threads need no agent and work on it",
			 pid, comm, rep->why);
		break;
	default:
		snprintf(buf, size, "cannot load the agent into pid %d (%s): %s", pid, comm,
			 strerror(-err));
		break;
	}
}
