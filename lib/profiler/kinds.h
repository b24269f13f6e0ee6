/*
 * The kinds cprof takes, what each needs, and a set of them opened on one
 * target: each kind its profiler, or refused with why, in one result that
 * the caller says (record's window, serve's agent and windows). Opening
 * touches nothing: the agent is loaded and perf enabled at start.
 */
#ifndef CPROF_PROFILER_KINDS_H
#define CPROF_PROFILER_KINDS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "profiler/profiler.h"

/* The agent's four in CPROF_KIND_* order (agent/wire.h). */
enum kind {
	KIND_CPU,
	KIND_WALL,
	KIND_THREADS,
	KIND_HEAP,
	KIND_BLOCK,
	KIND_MUTEX,
	KIND_THREADCREATE,
	KIND_N
};

/* "cpu", "wall", "threads", "heap", "block", "mutex", "threadcreate". */
const char *kind_name(enum kind k);
/* The kind named @name, or KIND_N. */
enum kind kind_by_name(const char *name);
/* The agent's CPROF_EVENTS_* bit of @k; 0 for a kind of cprof's own. */
uint32_t kind_events(enum kind k);

struct kinds_opts {
	pid_t pid;
	const char *comm;
	bool asked[KIND_N];
	unsigned hz;               /* cpu's and wall's sampling rate */
	/* The agent's kinds share one session of these options (pid, events,
	 * command_line and sym are set from the others). A NULL agent_path
	 * refuses them with @agent_why, else with "cannot find it". */
	struct agent_profiler_opts agent;
	const char *agent_why;
	const char *command_line;
	struct symbolizer *sym;    /* shared by every kind; NULL: each its own */
};

#define KINDS_WHY_MAX 2048

struct kinds_opened {
	struct profiler *p[KIND_N];         /* NULL: not asked, or refused */
	int error[KIND_N];                  /* a refusal's -errno; 0 otherwise */
	char refused[KIND_N][KINDS_WHY_MAX]; /* its reason; "" otherwise */
};

/*
 * Each kind @o asks for, opened as far as the target allows: the heap
 * where the agent can hook its allocator, the agent's kinds where the agent
 * is found and the process is not stopped, every kind where its profiler
 * could read the target. @ret is filled whatever happens.
 */
void kinds_open(const struct kinds_opts *o, struct kinds_opened *ret);

/* Every profiler of @k freed. */
void kinds_close(struct kinds_opened *k);

#endif
