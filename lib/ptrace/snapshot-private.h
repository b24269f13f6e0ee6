/*
 * Internals of the ptrace snapshot shared by its rooms: snapshot.c (the
 * stops), snapshot-crew.c (the tracer threads), snapshot-stacks.c (the
 * copies). Not for other rooms.
 */
#ifndef CPROF_PTRACE_SNAPSHOT_PRIVATE_H
#define CPROF_PTRACE_SNAPSHOT_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ptrace/ptrace.h"

/*
 * Tracer threads at most, and the fewest threads worth one more: each
 * started tracer costs a thread creation before the pause, and on a machine
 * of N cpus more than N only queue behind one another.
 */
#define MAX_TRACERS 4

/* tid -> index in snap->threads, open addressing; a slot holds index + 1. */
struct tid_index {
	uint32_t *slots;
	size_t size; /* a power of two, at least twice the number of threads */
};

struct crew;

/*
 * One tracer thread and its share of the threads. A tracee answers only to
 * the thread that seized it (PTRACE_GETREGS and PTRACE_DETACH from any
 * other fail with ESRCH), so each tracer makes every ptrace call of its own
 * share, from seize to detach.
 */
struct tracer {
	struct crew *crew;
	pthread_t thread;
	size_t lo, hi;         /* its share: snap->threads[lo, hi) */
	size_t unreported;     /* of its share, threads whose stop was not seen */
	uint64_t first_interrupt_ns, last_detach_ns;
	uint64_t copy_ns;      /* spent copying threads so far */
	uint64_t progress_ns;  /* the last report, or the last look at /proc */
	uint64_t slept_ns;     /* asleep since then: the cpu left to the threads */
};

/*
 * Several tracers share the work of one snapshot, each on its own cpu: the
 * ptrace calls of one thread (a few microseconds each) are the pause, and
 * one tracer makes them one after the other. The first tracer (the thread
 * ptrace_snapshot_take() starts) lists the threads, starts the others and
 * takes the last share, to which the threads born meanwhile are added; the
 * others seize, wait for and copy their share, then wait for the word to
 * let go, which comes once every thread of every share is stopped: the
 * snapshot stays one instant.
 */
struct crew {
	struct ptrace_snapshot *snap;
	const struct ptrace_snapshot_opts *opts;
	int result;
	bool *reported; /* per thread: its stop (or exit) was seen; by its tracer only */
	size_t reported_alloc;
	struct tid_index index;
	/* Stack copies: bump-allocated from one mapping (snap->stack_pool). */
	atomic_size_t pool_used;
	uint64_t stall_ns, deadline;
	struct tracer tracers[MAX_TRACERS];
	unsigned ntracers;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool go;                  /* the shares are given out: seize */
	unsigned helpers_stopped; /* helpers whose share is all stopped */
	bool release;             /* every share is: let go */
};

/* snapshot.c */
int snapshot_reserve_threads(struct crew *c, size_t n);
size_t snapshot_record_thread(struct crew *c, pid_t tid);
/* A thread the caller reads itself (opts->skip). */
bool snapshot_skipped(const struct crew *c, pid_t tid);
void snapshot_seize_thread(struct tracer *t, size_t i);
/* Until every thread of @t's share stopped, exited or was given up on. */
void snapshot_wait_for_stops(struct tracer *t);
/* Lets @t's share go. */
void snapshot_detach_share(struct tracer *t);

/* snapshot-stacks.c */
void snapshot_stack_pool_make(struct crew *c, size_t n);
void snapshot_stack_free(const struct ptrace_snapshot *s, const void *p);
void snapshot_copy_thread(struct tracer *t, struct ptrace_thread *th);
void snapshot_name_restarted_calls(struct ptrace_snapshot *s);

/* snapshot-crew.c */
int snapshot_start_crew(struct crew *c);
void snapshot_wait_for_helpers(struct crew *c);
void snapshot_release_crew(struct crew *c);
/* Run the pause at real-time priority where allowed. */
void snapshot_raise_priority(void);

#endif
