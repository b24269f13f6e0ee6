/*
 * heap, block, mutex and threadcreate as profiler objects, with the verbs
 * of cpu_profiler and wall_profiler: new (the target's modules read), start
 * (the agent loaded, its session and window begun), poll with a deadline,
 * stop (the window ended, the hooks gone), finish (the profile), free.
 * One object may record several kinds in one session (one injection, one
 * heartbeat, one window), each with its own rate and its own profile.
 *
 * Records go to lib/heap (ALLOC, FREE, the live set's snapshots, inuse the
 * mean of those of the window's last second) or lib/contention (EVENT).
 * Nothing here prints; a cancel callback is asked while a thread is looked
 * for and at every tick of the window.
 */
#ifndef CPROF_SESSION_PROFILER_H
#define CPROF_SESSION_PROFILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "contention/contention.h"
#include "heap/heap.h"
#include "profile/profile.h"
#include "session/session.h"
#include "util/cancel.h"

struct agent_profiler_opts {
	pid_t pid;
	uint32_t events;           /* CPROF_EVENTS_* (agent/wire.h), one or several */
	uint64_t rates[CPROF_KINDS]; /* by CPROF_KIND_*, each in its kind's unit */
	uint64_t duration_ns;      /* the window's */
	const char *agent_path;    /* agent_find()'s */
	const char *heap_index;    /* heap: the sample type shown first; NULL: inuse_space */
	bool copy_stacks;          /* no rules: the agent walks no frames (CPROF_COPY_STACKS) */
	bool keep;                 /* the session goes on after the window (heap --keep) */
	struct cancel cancel;
	void (*looking)(const struct inject_report *rep, uint64_t elapsed_ns);
	/* Told about once a second how far the window is (window_opts'). */
	void (*progress)(void *arg, uint64_t elapsed_ns, uint64_t records);
	void *progress_arg;
	const char *command_line;  /* for the profile's comments */
	struct symbolizer *sym;    /* shared with other profilers; NULL: its own */
};

struct agent_profiler;

/* The target's modules read; nothing touched yet. On failure @err says why
 * (agent_session_strerror()). */
int agent_profiler_new(struct agent_profiler **ret, const struct agent_profiler_opts *o,
		       const char *comm, char *err, size_t errlen);

/*
 * The agent loaded, its session opened, the window begun. -ECANCELED: the
 * cancel came before a thread was stopped, the window is empty and over.
 * Other -errno with @err saying why, at the step the session's failed says.
 */
int agent_profiler_start(struct agent_profiler *p, char *err, size_t errlen);

/* agent_window_poll(): 0 while the window goes on, 1 once it is over. */
int agent_profiler_poll(struct agent_profiler *p, int timeout_ms);

/* Ends the window (over, or cut short): the last snapshot, the detach. */
int agent_profiler_stop(struct agent_profiler *p);

/* The pprof profile of kind @events of the window (owned by the caller),
 * lost records noted; -EINVAL for a kind not recorded. */
int agent_profiler_finish(struct agent_profiler *p, uint32_t events, struct profile **ret);

/* Go's debug=1 text of kind @events of the window, to @f. */
int agent_profiler_write_text(struct agent_profiler *p, uint32_t events, FILE *f);

/* How the window went, and the session (its injection report, modules). */
const struct window_result *agent_profiler_window(const struct agent_profiler *p);
const struct agent_session *agent_profiler_session(const struct agent_profiler *p);

/* Records taken of kind @events: sampled allocations, or events. */
uint64_t agent_profiler_count(const struct agent_profiler *p, uint32_t events);

/* What the records went to: the heap's (CPROF_EVENTS_HEAP), the
 * contention of kind @events (the others); NULL for a kind not recorded,
 * or before start. */
struct heap *agent_profiler_heap(const struct agent_profiler *p);
struct contention *agent_profiler_contention(const struct agent_profiler *p, uint32_t events);

/*
 * With @o->keep, after stop: the session goes on, tended by its caller
 * (heap --keep's loop, serve's). One turn: the agent's heartbeat and, with
 * @drain, its records drained for AGENT_DRAIN_BUDGET_NS at most, so that
 * the caller's other work has its turn too. 0 while the session goes on;
 * -EPROTO when the ring held a malformed record (the caller ends the
 * session, or tends it without draining: the hooks' lifeline alone);
 * -ENOTCONN when there is none, or the agent ended it (it took cprof for
 * gone) and its figures would stand still.
 */
#define AGENT_DRAIN_BUDGET_NS (100ULL * 1000 * 1000)
int agent_profiler_tend(struct agent_profiler *p, bool drain);

/* After start: the agent was loaded and its session opened. */
bool agent_profiler_kept(const struct agent_profiler *p);

/* The session ends now (the hooks go), whoever else holds @p. */
void agent_profiler_end(struct agent_profiler *p);

/* With @o->keep, after stop, while the caller drains: the heap's live set
 * taken afresh (the other kinds have none). 0 or -errno. */
int agent_profiler_take_live(struct agent_profiler *p);

/* With @o->keep, after stop: the pprof profile of kind @events since the
 * session began (@index first for the heap; NULL: inuse_space), records
 * the agent lost noted. Takes the live set first. */
int agent_profiler_build_now(struct agent_profiler *p, uint32_t events, const char *index,
			     struct profile **ret);

/* One more owner of @p: each agent_profiler_free() drops one, the last
 * frees it. Returns @p. */
struct agent_profiler *agent_profiler_ref(struct agent_profiler *p);
void agent_profiler_free(struct agent_profiler *p);

#endif
