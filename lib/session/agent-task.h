/*
 * The agent's own task in a target (lib/agent/watchdog.c): a member of the
 * target's thread group that is cprof's, not the program's. Every room that
 * lists a target's threads (threads, wall, cpu, serve) asks here, so that no
 * profile shows it as one of the program's threads and no snapshot stops
 * it; what it cost the target goes into a profile's comments instead.
 *
 * Known by the tid the agent publishes (agent/wire.h, CPROF_WIRE_TASK_SYMBOL),
 * found through the agent's .dynsym and read with process_vm_readv, and
 * believed only when that thread of the target bears the task's name too
 * (a stray value never hides a thread of the program). Not by the name
 * alone: a program may name a thread anything. A task once known stays known
 * for the set's life (no tid is given to another thread within a window),
 * so one listed while it exits, after the kernel cleared the word, is still
 * left out.
 *
 * An agent older than the word, or a target whose memory cprof may not read
 * (ptrace access refused): no task is known, and the agent's shows as the
 * program's, as before.
 */
#ifndef CPROF_SESSION_AGENT_TASK_H
#define CPROF_SESSION_AGENT_TASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "maps/maps.h"
#include "profile/profile.h"

/* How long a caller that may wait gives a task being started to name
 * itself (its first instructions: only a loaded machine makes it long). */
#define AGENT_TASK_START_WAIT_MS 50
/* A word that says "being started" for longer is not believed: a caller
 * that holds new threads back for it would hold them for good. */
#define AGENT_TASK_START_MAX_MS 200

struct agent_task {
	pid_t tid;
	uint64_t run_from_ns; /* its CPU time when first known; 0: born since the first look */
	uint64_t run_ns;      /* ... at the last look */
};

struct agent_tasks {
	pid_t pid;
	uint64_t word;  /* the published tid's address in the target; 0: not found */
	bool looked;    /* refreshed once: tasks known later were born since */
	bool starting;  /* the last read found a task being started ... */
	uint64_t starting_since_ns; /* ... since (CLOCK_MONOTONIC) */
	struct agent_task *tasks;
	size_t n, alloc;
};

void agent_tasks_init(struct agent_tasks *a, pid_t pid);
void agent_tasks_release(struct agent_tasks *a);

/*
 * Looks for the agent in @maps (NULL: the target's maps, read now) and, when
 * it is there, reads its word (agent_tasks_refresh() with @wait_ms). 0,
 * also when there is no agent or its word cannot be read; 1 as
 * agent_tasks_refresh(); -ENOMEM.
 */
int agent_tasks_search(struct agent_tasks *a, const struct maps *maps, unsigned wait_ms);

/*
 * Reads the word: a tid verified by its thread's name joins the known
 * tasks, and every known task's CPU time is read again. Waits up to
 * @wait_ms for a task being started to publish its tid (0 while threads
 * are stopped). 1 when one is still being started (a listing may hold it,
 * not known yet), for AGENT_TASK_START_MAX_MS at most; 0, or -ENOMEM.
 */
int agent_tasks_refresh(struct agent_tasks *a, unsigned wait_ms);

/*
 * A thread of the target showed under @name (its comm, a perf COMM
 * record). The task's name is a sign of a new task: its word is read now,
 * and where no agent was found, a first load since the last search is
 * looked for. A name proves nothing by itself. 0 or -ENOMEM.
 */
int agent_tasks_saw_name(struct agent_tasks *a, const char *name);

/* @tid is one of the known tasks: no system call (a tracer may ask). */
bool agent_tasks_has(const struct agent_tasks *a, pid_t tid);

/* Removes the known tasks from @tids (*@n of them; *@n updated). */
void agent_tasks_filter(const struct agent_tasks *a, pid_t *tids, size_t *n);

/* The CPU time the known tasks used since they were first known (or born). */
uint64_t agent_tasks_cpu_ns(const struct agent_tasks *a);

/*
 * The comment that says so in @p, when a task was known: its tids, and
 * with @cpu the CPU time they used (cprof's cost in the target, which the
 * profile's stacks leave out). 0 or -ENOMEM.
 */
int agent_tasks_note(const struct agent_tasks *a, bool cpu, struct profile *p);

#endif
