/*
 * The first step of every command that needs the agent (heap, block,
 * mutex, threadcreate): an agent session opened (lib/session/), with Ctrl-C
 * as its cancel, and each failure said with its exit code.
 */
#ifndef CPROF_AGENT_LOAD_H
#define CPROF_AGENT_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include "channel/channel.h"
#include "session/session.h"
#include "target/target.h"

/* heap_opts/contention_opts.put_rule: a rule to the agent through @channel
 * (a struct channel), so that it walks those frames itself. */
int agent_put_rule(void *channel, uint64_t key, uint64_t rule);

/* The channel to pass as put_rule_arg, or NULL when the agent is to walk no
 * frames: no channel, or CPROF_COPY_STACKS set (cprof(1)). */
struct channel *agent_rules_channel(const struct agent_session *al);

/*
 * Loads the agent into @t, starts a session and opens its channel (@al->ch)
 * recording @events (CPROF_EVENTS_*) at @rate (its unit is the events').
 * Every kind asks for the same ring, so that the agent keeps one memfd for
 * them all. Returns 0, or an exit code (enum cprof_exit) after reporting
 * the error. A SIGINT/SIGTERM (interrupt.h) before the agent was loaded
 * also returns 0, with @al->ch NULL: agent_window() then makes an empty
 * window, and the command writes its empty profile. agent_session_release()
 * in any case.
 */
int agent_load(struct agent_session *al, const struct target *t, uint32_t events,
	       uint64_t rate);

/*
 * Loads the agent into @t (as agent_load() does) and calls its exported
 * @function(@string) instead of starting a session (inject_opts.function):
 * 0 with the function's result in *@ret (-ECANCELED: Ctrl-C before it
 * ran, the target as it was), or an exit code after reporting why the
 * agent could not be loaded. @al keeps the modules read (al->sym) and no
 * channel.
 */
int agent_call(struct agent_session *al, const struct target *t, const char *function,
	       const char *string, int *ret);

/* agent_find() with where `cmake --install` puts the agent from cprof. */
int agent_path(char *buf, size_t size, char *why, size_t whylen);

#endif
