/*
 * The first step of every command that needs the agent (heap; mutex, block
 * later): find cprof-agent.so, read the target's modules, inject it
 * (lib/inject/) and say clearly why not when it cannot be done.
 */
#ifndef CPROF_AGENT_LOAD_H
#define CPROF_AGENT_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "channel/channel.h"
#include "inject/inject.h"
#include "target/claim.h"
#include "target/target.h"

struct agent_load {
	struct maps maps;
	struct symbolizer *sym; /* the target's modules, the agent included */
	struct unwinder *unw;   /* on sym's Dwfl: the only one it may have */
	int fd;                 /* the agent's memfd, as numbered in the target */
	struct channel *ch;     /* ... opened */
	struct inject_report rep;
	struct target_claim session; /* the agent's, agent_load() to release */
	bool claimed;
};

/* heap_opts/contention_opts.put_rule: a rule to the agent through @channel
 * (a struct channel), so that it walks those frames itself. */
int agent_put_rule(void *channel, uint64_t key, uint64_t rule);

/* The channel to pass as put_rule_arg, or NULL when the agent is to walk no
 * frames: no channel, or CPROF_COPY_STACKS set (cprof(1)). */
struct channel *agent_rules_channel(const struct agent_load *al);

/*
 * Loads the agent into @t, starts a session and opens its channel (@al->ch) recording @events
 * (CPROF_EVENTS_*) at @rate (its unit is the events'). Every kind asks for
 * the same ring, so that the agent keeps one memfd for them all. Returns 0,
 * or an exit code (enum cprof_exit)
 * after reporting the error. A SIGINT/SIGTERM (interrupt.h) before the agent
 * was loaded also returns 0, with @al->ch NULL: agent_window() then makes an
 * empty window, and the command writes its empty profile.
 */
int agent_load(struct agent_load *al, const struct target *t, uint32_t events, uint64_t rate);
void agent_load_release(struct agent_load *al);

/*
 * Loads the agent into @t (as agent_load() does) and calls its exported
 * @function(@string) instead of starting a session (inject_opts.function):
 * 0 with the function's result in *@ret (-ECANCELED: Ctrl-C before it
 * ran, the target as it was), or an exit code after reporting why the
 * agent could not be loaded. @al keeps the modules read (al->sym) and no
 * channel.
 */
int agent_call(struct agent_load *al, const struct target *t, const char *function,
	       const char *string, int *ret);

/*
 * The absolute path of the agent cprof would load, in @buf: $CPROF_AGENT,
 * else cprof-agent.so beside the cprof binary (a build tree), else where
 * `cmake --install` puts it relative to the binary (CPROF_AGENT_REL). 0,
 * -ENOENT, or -EPERM when cprof runs as root and $CPROF_AGENT is a file
 * that someone else than root could have put or could change (not owned by
 * root, or it or a directory above it writable by others), with the reason
 * in @why (may be NULL).
 */
int agent_find(char *buf, size_t size, char *why, size_t whylen);

#endif
