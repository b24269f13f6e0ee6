/*
 * cprof heap from jemalloc's own heap profiler (lib/session/jemalloc.h):
 * when --source auto takes it, and what cprof says of it.
 */
#ifndef CPROF_HEAP_JEMALLOC_H
#define CPROF_HEAP_JEMALLOC_H

#include <stdbool.h>

#include "run.h"
#include "session/jemalloc.h"
#include "target/target.h"

/* --source */
enum heap_source {
	HEAP_SOURCE_AUTO,     /* jemalloc's profiler where it is on, else hooks */
	HEAP_SOURCE_JEMALLOC, /* jemalloc's profiler, or an error */
	HEAP_SOURCE_HOOKS,    /* cprof's hooks */
};

/* --source auto's choice: jemalloc is mapped and the MALLOC_CONF @t
 * started with turns its profiler on (prof:true). */
bool heap_jemalloc_auto(const struct target *t);

/* --source jemalloc on a target without jemalloc: said before the output
 * is touched. 0 or EXIT_TARGET. */
int heap_jemalloc_check(const struct target *t);

/* Says why the dump @d failed with -errno @r, and returns the exit code
 * (EXIT_TARGET: no jemalloc, none with profiling built in, or profiling
 * off, with how to turn it on). */
int heap_jemalloc_error(const struct target *t, int r, const struct jemalloc_dump *d);

/* The summary after the write. */
void heap_jemalloc_summary(const struct run *run);

#endif
