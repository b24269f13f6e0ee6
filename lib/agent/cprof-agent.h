/*
 * The entry points of cprof-agent.so, the symbols it exports (one a word
 * cprof reads).
 *
 * cprof loads the agent into a running process (a remote dlopen, lib/inject/)
 * and calls these functions remotely: their arguments are plain integers (no
 * pointers into cprof's memory) and they return an int in rax.
 *
 * The agent is never unloaded: a thread may still be inside a hook after the
 * GOT is restored. A later cprof run dlopens the same resident copy again and
 * attaches a new session.
 */
#ifndef CPROF_AGENT_H
#define CPROF_AGENT_H

#include <stdint.h>

#define CPROF_AGENT_API __attribute__((visibility("default")))

/*
 * Start a session of the kinds @events, CPROF_EVENTS_* (wire.h), one or
 * several, for the cprof process @cprof_pid (0: cprof is in a PID
 * namespace the target cannot see; its heartbeat alone tells that it
 * lives): create the memfd (see wire.h), start the watchdog task, patch the
 * GOT entries of the kinds' functions in every loaded object, and sample
 * the first kind at @rate, whose unit is the kind's (heap: a mean gap of
 * @rate bytes, 0: 512 KiB, 1: every allocation; block: nanoseconds; mutex:
 * 1 in @rate), the others at their defaults until cprof writes their rates
 * (header.kind_rate). @ring_size is the ring's size in bytes, a power of
 * two (0: CPROF_WIRE_RING_DEFAULT).
 *
 * Returns the memfd's number (>= 0), or:
 *   -EINVAL  bad @cprof_pid or @ring_size, no or an unknown kind in @events
 *   -EBUSY   a session of another, live cprof is running
 *   -errno   memfd_create, mmap or the watchdog's start failed (nothing is
 *            hooked)
 * If the previous session's cprof is dead, that session is ended first.
 */
CPROF_AGENT_API int cprof_agent_attach_events(int cprof_pid, uint64_t rate, uint32_t ring_size,
					      uint32_t events);

/*
 * End the session: restore every GOT entry the agent patched (in objects
 * still loaded), set the header's state to DETACHED. The memfd stays open
 * until the next attach. Returns 0, or -ENOENT when no session runs.
 * Safe to call from any thread, any number of times.
 */
CPROF_AGENT_API int cprof_agent_detach(void);

/*
 * jemalloc's own heap profile (lib/agent/jemalloc.c): when the process's
 * allocator is jemalloc with its profiler on (opt.prof, MALLOC_CONF=prof:true
 * at start), mallctl("prof.dump") writes its heap_v2 profile to @path, a
 * file cprof then reads and deletes; @path NULL only asks. Hooks nothing,
 * starts no session. Allocates and takes jemalloc's locks: the calling
 * thread must be outside the allocator. Returns 0, CPROF_JEMALLOC_INACTIVE
 * (written, but prof.active is false: sampling paused), or:
 *   -ENOENT   no mallctl in the process (its allocator is not jemalloc)
 *   -ENOTSUP  its jemalloc was built without profiling
 *   -ENODATA  profiling is off (opt.prof false)
 *   -errno    mallctl's error (-EFAULT: the file could not be written)
 */
CPROF_AGENT_API int cprof_agent_jemalloc_dump(const char *path);
#define CPROF_JEMALLOC_INACTIVE 1

/* The wire format version this agent writes (CPROF_WIRE_VERSION). */
CPROF_AGENT_API uint32_t cprof_agent_version(void);

/* Not a function: the tid of the agent's own task, which cprof reads from
 * outside to leave it out of every profile (wire.h, CPROF_WIRE_TASK_SYMBOL). */
extern CPROF_AGENT_API int32_t cprof_agent_task_tid;

#endif
