/*
 * cprof heap from jemalloc's own heap profiler (issue 15): when the
 * target's jemalloc samples allocations itself (MALLOC_CONF=prof:true at
 * its start), the agent has it write its profile (cprof_agent_jemalloc_dump())
 * to a file cprof made in the target's root, cprof reads and deletes it,
 * and lib/heap/jemalloc-prof.h turns it into the same heap profile the
 * hooks give. No hook goes in, no window is waited for: it is what
 * jemalloc sampled since the program started.
 */
#ifndef CPROF_HEAP_JEMALLOC_H
#define CPROF_HEAP_JEMALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent-load.h"
#include "collector.h"
#include "heap/jemalloc-prof.h"
#include "target/target.h"

/* --source */
enum heap_source {
	HEAP_SOURCE_AUTO,     /* jemalloc's profiler where it is on, else hooks */
	HEAP_SOURCE_JEMALLOC, /* jemalloc's profiler, or an error */
	HEAP_SOURCE_HOOKS,    /* cprof's hooks */
};

struct heap_jemalloc {
	struct agent_session al; /* the target's modules: al.sym symbolizes */
	struct jeprof *prof;
	uint64_t time_realtime_ns; /* when it was dumped */
	bool inactive;             /* prof.active was false: sampling paused */
};

/* jemalloc is among @t's modules (libjemalloc*.so mapped). */
bool heap_jemalloc_present(const struct target *t);

/* --source auto's choice: jemalloc is mapped and the MALLOC_CONF @t
 * started with turns its profiler on (prof:true). */
bool heap_jemalloc_auto(const struct target *t);

/*
 * Loads the agent into @t and has it dump jemalloc's profile, read into
 * @h->prof. 0, or an exit code after reporting (EXIT_TARGET: no jemalloc,
 * none with profiling built in, or profiling off, with how to turn it on).
 */
int heap_jemalloc_dump(struct heap_jemalloc *h, const struct target *t);
void heap_jemalloc_release(struct heap_jemalloc *h);

/* cprof heap's run with jemalloc's profiler as its source (collector.h):
 * the context of heap_jemalloc_ops. */
struct heap_jemalloc_run {
	const char *index; /* --index */
	bool required;     /* --source jemalloc; false: --source auto chose it */
	struct heap_jemalloc je;
};

extern const struct collector_ops heap_jemalloc_ops;

#endif
