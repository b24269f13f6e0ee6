/* An agent session opened: modules, claim, injection, channel (session.h). */
#include "session/session.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "target/target.h"
#include "util/fault.h"

int agent_session_prepare(struct agent_session *s, pid_t pid, struct symbolizer *sym)
{
	int r;

	memset(s, 0, sizeof(*s));
	s->pid = pid;
	s->fd = -1;
	s->claim.fd = -1;
	r = maps_read(pid, &s->maps);
	if (r == 0)
		r = symbolizer_share(&s->sym, sym, pid);
	if (r == 0)
		r = symbolizer_unwinder(s->sym, &s->unw);
	if (r < 0)
		s->failed = AGENT_SESSION_MODULES;
	return r;
}

static struct inject_opts inject_opts_for(const struct agent_session *s,
					  const struct agent_session_opts *o)
{
	return (struct inject_opts){
		.agent_path = o->agent_path,
		/* A target in a container cannot see our pid: 0 tells the
		 * agent's watchdog to go by the heartbeat alone. */
		.cprof_pid = target_other_pidns(s->pid) ? 0 : getpid(),
		/* The first kind's rate at once; the others' by the channel. */
		.rate = o->events ? o->rates[cprof_wire_first_kind(o->events)] : 0,
		.ring_size = o->ring_size,
		.events = o->events,
		.pick_timeout_ms = o->pick_timeout_ms,
		.call_timeout_ms = o->call_timeout_ms,
		.cancel = o->cancel,
		.looking = o->looking,
		.maps = &s->maps,
		.sym = s->sym,
		.unw = s->unw,
	};
}

/*
 * The agent serves one session at a time: a second cprof is refused at
 * once, told whose session it is (not left to find the agent busy after
 * stopping a thread, or to take another's hooks for a debugger). Where no
 * lock file can be made, the session goes on unclaimed (@s->unclaimed).
 */
static int claim_session(struct agent_session *s)
{
	int r = target_claim_take(&s->claim, s->pid, TARGET_CLAIM_AGENT, 0, NULL, &s->holder);

	if (r < 0 && target_claim_unavailable(r)) {
		s->unclaimed = r;
		return 0;
	}
	return r;
}

/*
 * The agent is in and hooked, but cprof cannot reach its channel: the hooks
 * go by a call of the agent's own cprof_agent_detach(), not when its
 * watchdog gives up on a heartbeat nobody beats. A target that is gone, or
 * a cancel (cprof is on its way out, and the watchdog sees it exit), leaves
 * that to the watchdog. @s says what failed: the channel.
 */
static void detach_by_call(struct agent_session *s, const struct agent_session_opts *o)
{
	struct inject_report rep = s->rep;
	int ret;

	if (target_alive(s->pid))
		agent_session_call(s, o, "cprof_agent_detach", NULL, &ret);
	s->rep = rep;
	s->failed = AGENT_SESSION_CHANNEL;
}

int agent_session_open(struct agent_session *s, const struct agent_session_opts *o)
{
	struct inject_opts io = inject_opts_for(s, o);
	int r;

	r = claim_session(s);
	if (r < 0) {
		s->failed = AGENT_SESSION_CLAIM;
		return r;
	}
	r = inject_agent(s->pid, &io, &s->rep);
	if (r < 0) {
		s->failed = AGENT_SESSION_INJECT;
		return r;
	}
	s->fd = r;
	/* The agent is a module of the target now: its frames must resolve. */
	symbolizer_refresh(s->sym);
	r = channel_open(&s->ch, s->pid, s->fd);
	if (r == 0 && fault_injected("agent-channel")) {
		channel_close(s->ch);
		s->ch = NULL;
		r = -EIO;
	}
	if (r < 0) {
		detach_by_call(s, o);
		return r;
	}
	/* Each record carries the rate it was drawn at: those drawn at the
	 * defaults until the agent takes these are as unbiased. */
	if (o->events & (o->events - 1))
		channel_set_rates(s->ch, o->rates);
	return 0;
}

int agent_session_call(struct agent_session *s, const struct agent_session_opts *o,
		       const char *function, const char *string, int *ret)
{
	struct inject_opts io = inject_opts_for(s, o);
	int r;

	io.function = function;
	io.string = string;
	r = inject_agent(s->pid, &io, &s->rep);
	if (s->rep.called) {
		*ret = r;
		return 0;
	}
	s->failed = AGENT_SESSION_INJECT;
	return r;
}

void agent_session_release(struct agent_session *s)
{
	/* Before the channel closes: the detach is sent through it. */
	if (s->ch)
		agent_channel_end(s->ch);
	channel_close(s->ch);
	s->ch = NULL;
	if (s->pid) /* prepared: a zeroed session holds no claim */
		target_claim_drop(&s->claim);
	symbolizer_unref(s->sym);
	maps_release(&s->maps);
	memset(s, 0, sizeof(*s));
	s->fd = -1;
	s->claim.fd = -1;
}
