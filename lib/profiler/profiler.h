/*
 * Every kind of profile as one object with one set of verbs, so that one
 * loop drives any of them, and several at once on one target:
 *
 *   new     the target's modules read, nothing touched (-errno, @err why);
 *   start   the window begins (perf enabled, the agent loaded, the
 *           threads' snapshot taken);
 *   poll    waits up to a deadline for what is due: 0 while the kind's
 *           window goes on, 1 once it is over by itself (the agent's
 *           window, the snapshot), -ESRCH once the target is gone;
 *   stop    the window ends; finish: the pprof profile; free.
 *
 * cpu and wall run for as long as their caller polls them; the agent's
 * kinds end their window at their own duration. Nothing here prints; a
 * kind that can wait asks the cancel callback of its own options.
 */
#ifndef CPROF_PROFILER_PROFILER_H
#define CPROF_PROFILER_PROFILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "cpu/cpu-profiler.h"
#include "profile/profile.h"
#include "session/jemalloc.h"
#include "session/profiler.h"
#include "threads/threads.h"
#include "util/cancel.h"
#include "wall/wall-profiler.h"

struct profiler;

int profiler_new_cpu(struct profiler **ret, const struct cpu_profiler_opts *o, char *err,
		     size_t errlen);
int profiler_new_wall(struct profiler **ret, const struct wall_profiler_opts *o, char *err,
		      size_t errlen);
/* The threads' snapshot of @pid, taken at start, with @sym's modules
 * (shared with other profilers; NULL: its own). */
int profiler_new_threads(struct profiler **ret, pid_t pid, struct symbolizer *sym,
			 const char *command_line);
/* heap, block, mutex or threadcreate, as @o->events says. */
int profiler_new_agent(struct profiler **ret, const struct agent_profiler_opts *o,
		       const char *comm, char *err, size_t errlen);
/*
 * One profiler per kind of @o->events (in CPROF_KIND_* order, into @ret,
 * which has room for CPROF_KINDS), all on one agent session: one
 * injection, one heartbeat, one window. The first to start starts it,
 * each is polled and stopped with it, each finishes its kind's profile;
 * each is freed. *@ret_n is how many.
 */
int profiler_new_agents(struct profiler **ret, size_t *ret_n, const struct agent_profiler_opts *o,
			const char *comm, char *err, size_t errlen);

/* heap from jemalloc's own profiler (session/jemalloc.h), dumped at start;
 * its profile shows @index first. The dump is profiler_jemalloc_dump()'s. */
int profiler_new_jemalloc(struct profiler **ret, pid_t pid, const struct agent_session_opts *so,
			  const char *index, const char *command_line);

/* Opens a profiler of one kind on @pid into *@ret; -errno with @err why. */
typedef int (*profiler_open_fn)(void *arg, pid_t pid, struct profiler **ret, char *err,
				size_t errlen);

/* The processes of a set now, into *@ret (malloc'd): 0 or -errno. */
typedef int (*profiler_list_fn)(void *arg, pid_t **ret, size_t *ret_n);

/*
 * @kind over the processes @pids (lib/profiler/set.c): a member opened on
 * each by @open, one refused named in the profile's comments while the
 * others go on; one window for all, in which a process that ends closes
 * its own (its samples kept; -ESRCH once every one has) and, with @list,
 * one that joins the set (listed again every 200 ms) opens its own; one
 * profile, each sample labelled process_id and process_name; a text
 * layout each process's headed by its pid and name. @open and @list get
 * @arg. -errno, with @err naming each refusal, when none could be opened.
 */
int profiler_new_set(struct profiler **ret, const char *kind, const pid_t *pids, size_t n,
		     profiler_open_fn open, profiler_list_fn list, void *arg, char *err,
		     size_t errlen);

/* A member of a set, as profiler_set_members() tells it. */
struct profiler_member {
	pid_t pid;
	const char *comm;
	struct profiler *p; /* NULL: not started */
	int error;          /* -errno: left out (why) */
	const char *why;
	bool exited;        /* during the window */
	bool born;          /* joined the set during the window */
};

/* Up to @max members of set @p into @ret (valid while @p is); how many it
 * has (0 for a profiler that is not a set). */
size_t profiler_set_members(const struct profiler *p, struct profiler_member *ret, size_t max);

/* "cpu", "wall", "threads", "heap", "block", "mutex", "threadcreate". */
const char *profiler_kind(const struct profiler *p);

/* On failure @err says why. */
int profiler_start(struct profiler *p, char *err, size_t errlen);
int profiler_poll(struct profiler *p, int timeout_ms);
int profiler_stop(struct profiler *p);
int profiler_finish(struct profiler *p, struct profile **ret);

/* Go's text layout at @debug (1 or 2) where the kind has one (threads:
 * both; the agent's kinds: 1); -ENOTSUP otherwise. */
int profiler_write_text(struct profiler *p, int debug, FILE *f);

/* What was taken: samples, ticks, threads, sampled allocations, events. */
uint64_t profiler_count(const struct profiler *p);

/* How the window went, in every kind's terms. */
struct profiler_facts {
	uint64_t window_ns;  /* 0 for a snapshot */
	uint64_t count;      /* profiler_count() */
	uint64_t lost;       /* records the kernel or the agent's ring dropped */
	int64_t pause_ns;    /* the longest a target thread was stopped; -1: none */
	bool target_exited;  /* during the window */
};

void profiler_facts(const struct profiler *p, struct profiler_facts *ret);

/* The target's modules as the kind read them, for a text layout's names
 * (threads, the agent's kinds, jemalloc's); NULL for cpu and wall. */
struct symbolizer *profiler_symbolizer(const struct profiler *p);

/* The kind's own figures and object, each NULL for a profiler of another
 * kind: cpu's and wall's counts, the threads' snapshot (NULL before
 * start), the agent's kinds' session, jemalloc's dump. */
const struct cpu_profiler_stats *profiler_cpu_stats(const struct profiler *p);
const struct wall_profiler_stats *profiler_wall_stats(const struct profiler *p);
const struct threads_snapshot *profiler_threads_snapshot(const struct profiler *p);
struct agent_profiler *profiler_agent(const struct profiler *p);
const struct jemalloc_dump *profiler_jemalloc_dump(const struct profiler *p);

void profiler_free(struct profiler *p);

/*
 * Several on one target in one window of @duration_ns: started in turn
 * (the first that fails stops those started, -errno, @err names it), polled
 * until the window is over, every kind's own window too, the cancel
 * callback says so or the target is gone (*@ret_exited), then stopped; 0,
 * and each is ready to finish. -ECANCELED: cancelled while an agent was
 * looking for a thread to load it, those started stopped, nothing taken.
 * @tick, if given, is told about once a second how far the window is.
 */
struct profilers_run_opts {
	uint64_t duration_ns;
	struct cancel cancel;
	void (*tick)(void *arg, uint64_t elapsed_ns);
	void *tick_arg;
	/* NULL: the first profiler whose poll fails ends the window for all,
	 * its -errno returned. Else @n entries: one that fails ends its own
	 * window, its -errno kept here (0: none), and the others go on. */
	int *errors;
};

int profilers_run(struct profiler **ps, size_t n, const struct profilers_run_opts *o,
		  bool *ret_exited, char *err, size_t errlen);

/* profilers_run()'s two halves: the starts, and the window from its
 * start to the stops (which it always does). */
int profilers_start(struct profiler **ps, size_t n, char *err, size_t errlen);
int profilers_window(struct profiler **ps, size_t n, const struct profilers_run_opts *o,
		     bool *ret_exited, char *err, size_t errlen);

#endif
