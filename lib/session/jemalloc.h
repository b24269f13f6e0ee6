/*
 * The heap profile from jemalloc's own heap profiler: when the target's
 * jemalloc samples allocations itself (MALLOC_CONF=prof:true at its start),
 * the agent has it write its profile (cprof_agent_jemalloc_dump()) to a
 * file made here in the target's root; it is read, deleted, and parsed by
 * lib/heap/jemalloc-prof.h into the same heap profile the hooks give. No
 * hook goes in, no window is waited for: it is what jemalloc sampled since
 * the program started. Nothing here prints.
 */
#ifndef CPROF_SESSION_JEMALLOC_H
#define CPROF_SESSION_JEMALLOC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "heap/jemalloc-prof.h"
#include "session/session.h"

/* jemalloc is among @pid's modules (libjemalloc*.so mapped). */
bool jemalloc_present(pid_t pid);

/* The MALLOC_CONF @pid started with turns jemalloc's profiler on (its last
 * "prof:" is true): only a hint, jemalloc's own answer comes with the dump. */
bool jemalloc_prof_at_start(pid_t pid);

/* Where jemalloc_dump_take() stopped. */
enum jemalloc_step {
	JEMALLOC_FILE = 1, /* making the file in the target's root */
	JEMALLOC_LOAD,     /* loading the agent: @s.failed, agent_session_strerror() */
	JEMALLOC_DUMP,     /* the agent's answer: -ENOENT no mallctl, -ENOTSUP built
			    * without profiling, -ENODATA profiling off, -EFAULT
			    * jemalloc could not write @path */
	JEMALLOC_READ,     /* reading or parsing the dump (-EBADMSG: not heap_v2) */
};

struct jemalloc_dump {
	struct agent_session s;    /* the target's modules: s.sym symbolizes */
	struct jeprof *prof;
	uint64_t time_realtime_ns; /* when it was dumped */
	bool inactive;             /* prof.active was false: sampling paused */
	enum jemalloc_step failed;
	char path[64];             /* the file, as the target sees it */
};

/*
 * Loads the agent (@o: its path, the cancel) into @pid and has it dump
 * jemalloc's profile into @d->prof. -ECANCELED: cancelled before the
 * agent ran, the target as it was. Other -errno with @d->failed.
 */
int jemalloc_dump_take(struct jemalloc_dump *d, pid_t pid, const struct agent_session_opts *o);
void jemalloc_dump_release(struct jemalloc_dump *d);

#endif
