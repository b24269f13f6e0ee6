#include "agent-window.h"

#include "report.h"
#include "run.h"
#include "util/util.h"

void agent_window_report(const struct window_result *w, const struct target *t)
{
	run_say_ended(t->pid, w->target_exited);
	agent_window_report_agent(w, t);
}

void agent_window_report_agent(const struct window_result *w, const struct target *t)
{
	if (w->malformed)
		report_warning("the agent's ring in pid %d held malformed records; reading "
			       "stopped there", t->pid);
	/* Before ours: e.g. an agent that cannot see cprof's pid and took it for
	 * gone (a container, with an agent older than its pid-0 rule). */
	if (w->counters.detach_reason == CPROF_DETACH_PEER_EXIT ||
	    w->counters.detach_reason == CPROF_DETACH_HEARTBEAT)
		report_warning("the agent in pid %d ended its session before the window did "
			       "(%s): the profile covers only part of it", t->pid,
			       w->counters.detach_reason == CPROF_DETACH_PEER_EXIT
				       ? "it took cprof for gone"
				       : "it missed cprof's heartbeat");
	if (agent_window_stretched(w))
		report_note("the agent's hooks in pid %d sampled for %.3f s around the %.3f s window "
			    "(from the attach to the detach): the figures are of those %.3f s",
			    t->pid, (double)w->window_ns / 1e9, (double)w->asked_ns / 1e9,
			    (double)w->window_ns / 1e9);
	if (!w->detached && !w->target_exited)
		report_warning("the agent did not confirm its hooks were removed; it removes "
			       "them by itself within 1 s of cprof's exit");
}
