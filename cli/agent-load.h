/*
 * The first step of every command that needs the agent (heap, block,
 * mutex, threadcreate, heap from jemalloc): its profiler opened
 * (lib/profiler/), with Ctrl-C as its cancel, and each failure said with
 * its exit code.
 */
#ifndef CPROF_AGENT_LOAD_H
#define CPROF_AGENT_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include "session/profiler.h"
#include "session/session.h"
#include "run.h"
#include "target/target.h"

/*
 * Opens the agent profiler of @ao's kind on @run's target into @run->p:
 * the agent found and checked, the target's modules read, the agent loaded
 * and its window begun, with Ctrl-C as its cancel (@ao's agent_path,
 * copy_stacks, cancel and looking are set here). Returns 0, also after
 * a Ctrl-C before the load (an empty window, over at once: the command
 * still writes its empty profile), or an exit code (enum cprof_exit) after
 * reporting why not.
 */
int agent_open(struct run *run, struct agent_profiler_opts *ao);

/*
 * The same for heap from jemalloc's own profiler: the agent loaded to have
 * jemalloc dump it, read and parsed (lib/session/jemalloc.h), its profile
 * showing @index first. 0 or an exit code after reporting.
 */
int agent_open_jemalloc(struct run *run, const char *index);

/* What every command sets of an agent profiler's options: @agent's path,
 * CPROF_COPY_STACKS, Ctrl-C as the cancel, the note of a long look. */
void agent_opts_fill(struct agent_profiler_opts *ao, const char *agent);

/* agent_find() with where `cmake --install` puts the agent from cprof. */
int agent_path(char *buf, size_t size, char *why, size_t whylen);

#endif
