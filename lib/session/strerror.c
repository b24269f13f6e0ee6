/* What a failed agent session means, and what to do (session.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "session/session.h"

static void claim_strerror(const struct agent_session *s, int err, const char *comm, char *buf,
			   size_t size)
{
	switch (err) {
	case -EBUSY:
		snprintf(buf, size,
			 "pid %d (%s) is being profiled by cprof pid %d (%s): its agent serves one "
			 "session at a time\n"
			 "hint: wait for that cprof to end, then run this one; cpu, wall and threads "
			 "need no agent and may run beside it",
			 s->pid, comm, s->holder.pid,
			 s->holder.command[0] ? s->holder.command : "?");
		break;
	case -ESRCH:
		snprintf(buf, size, "pid %d (%s) exited before the agent was loaded", s->pid, comm);
		break;
	default:
		snprintf(buf, size,
			 "cannot claim pid %d (%s) for a session of the agent: %s\n"
			 "hint: cprof keeps a lock file per target in /run/lock (else /tmp)",
			 s->pid, comm, strerror(-err));
		break;
	}
}

void agent_session_strerror(const struct agent_session *s, const struct agent_session_opts *o,
			    int err, const char *comm, char *buf, size_t size)
{
	struct inject_opts io = { .pick_timeout_ms = o->pick_timeout_ms,
				  .call_timeout_ms = o->call_timeout_ms };

	switch (s->failed) {
	case AGENT_SESSION_MODULES:
		snprintf(buf, size, "cannot read the modules of pid %d (%s): %s", s->pid, comm,
			 strerror(-err));
		break;
	case AGENT_SESSION_CLAIM:
		claim_strerror(s, err, comm, buf, size);
		break;
	case AGENT_SESSION_INJECT:
		inject_strerror(err, s->pid, comm, &io, &s->rep, buf, size);
		break;
	default:
		snprintf(buf, size, "cannot open the agent's channel in pid %d: %s", s->pid,
			 strerror(-err));
		break;
	}
}
