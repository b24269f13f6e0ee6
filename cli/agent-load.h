/*
 * The first step of every command that needs the agent (heap, block,
 * mutex, threadcreate): its profiler opened (lib/session/), with Ctrl-C as
 * its cancel, and each failure said with its exit code.
 */
#ifndef CPROF_AGENT_LOAD_H
#define CPROF_AGENT_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include "channel/channel.h"
#include "session/profiler.h"
#include "session/session.h"
#include "target/target.h"

/*
 * Opens the agent profiler of @ao's kind on @t: the agent found and
 * checked, the target's modules read, the agent loaded and its window
 * begun, with Ctrl-C as its cancel (@ao's agent_path, cancelled and
 * looking are set here). Returns 0 with *@ret set, also after a Ctrl-C
 * before the load (an empty window, over at once: the command still
 * writes its empty profile), or an exit code (enum cprof_exit) after
 * reporting why not. agent_profiler_free(*@ret) in any case.
 */
int agent_open(struct agent_profiler **ret, const struct target *t,
	       struct agent_profiler_opts *ao);

/*
 * Loads the agent into @t (as agent_open() does) and calls its exported
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
