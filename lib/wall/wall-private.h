#ifndef CPROF_WALL_PRIVATE_H
#define CPROF_WALL_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "maps/maps.h"
#include "unwind/unwind.h"
#include "util/util.h"

/*
 * A thread's own clocks, from its schedstat: never sampled, exact, but
 * late: the kernel adds run time at its ticks and switches, and a wait for
 * a CPU only when it ends.
 */
struct wall_clocks {
	uint64_t run_ns;   /* on a CPU */
	uint64_t delay_ns; /* on a run queue, waiting for a CPU */
	uint64_t runs;     /* times put on a CPU */
};

/* A thread's switches off the CPU so far, from its status: the waits for a
 * CPU that follow them are split by these counts. */
struct wall_switches {
	uint64_t voluntary; /* it slept (and was woken) */
	uint64_t preempted; /* it was taken off a runnable CPU */
};

/* Where a thread was at the instant its clocks were read. */
struct wall_where {
	bool on_cpu;   /* running, not waiting for a CPU */
	bool awake;    /* running or runnable: not asleep, stopped, in disk wait */
	struct wall_switches sw; /* its switches so far */
};

/*
 * How a thread's waits for a CPU split between the stack it ran on (a wait
 * after a preemption) and the one it slept on (after a wake-up), waits.c:
 * exactly from the kernel's switch records while they come, else by an
 * estimate fitted to its switch counts. Zeroed is a valid start.
 */
struct wall_switch_record {
	uint64_t time;
	bool out, preempted;
};

struct wall_waits {
	struct wall_switch_record *records; /* since the last settle, any order */
	size_t nrecords, records_alloc;
	uint64_t preempted_at;   /* perf time it was taken off a CPU; 0: not */
	uint64_t preempted_wait; /* waits after preemptions not yet accounted */
	uint64_t given_ahead;    /* of those, accounted before the records had them */
	struct wall_switches sw; /* the counts at the last look */
	bool sw_known;
	uint64_t last_slept, last_preempted; /* the last interval's counts */
	double pp, ps, ss, pd, sd; /* the fit's sums: preemptions p, sleeps s, waits d */
	unsigned preempted_share;  /* of its waits, in 1/WALL_SHARE_ONE */
};

#define WALL_SHARE_ONE 1024

/* A switch record of the thread (perf time, off a CPU or onto one). */
void wall_waits_switch(struct wall_waits *w, uint64_t time, bool out, bool preempted);
/* The records so far, in time order, into the waits after preemptions. */
void wall_waits_settle(struct wall_waits *w);
/* The records stop: what they left half-told is dropped, and the counts
 * start again from their next read. */
void wall_waits_forget_switches(struct wall_waits *w);
/* The thread's switch counts @sw (NULL: read now), after an interval that
 * waited @ddelay; returns the switches since the last counts. */
uint64_t wall_waits_count(struct wall_waits *w, pid_t pid, pid_t tid,
			  const struct wall_switches *sw, uint64_t ddelay);
/* The part of @ddelay that followed preemptions: from the records if
 * @exact, else estimated. */
uint64_t wall_waits_preempted(struct wall_waits *w, bool exact, uint64_t ddelay);
/* @ns of a wait after a preemption, still going on, was accounted before
 * the thread's clock had it: the records' account of it is not given again. */
void wall_waits_given_ahead(struct wall_waits *w, uint64_t ns);
void wall_waits_release(struct wall_waits *w);

/* What a thread is doing as /proc tells it, without stopping it. */
struct wall_look {
	char state;      /* stat's letter: R S D T t I (X: gone) */
	int64_t syscall; /* the call it is blocked in; -1: none (running) */
	uint64_t sp, pc; /* user stack and program pointers in that call */
};

/* The last stack a thread was seen asleep in, kept until it runs again. */
struct wall_off_stack {
	struct wall_look look;
	size_t want;      /* bytes to copy next time: what the walk read */
	uint64_t *pcs;    /* leaf first, as unwinder_unwind() gives them */
	size_t npcs, pcs_alloc;
	uint64_t *slots;  /* where pcs[i + 1] + 1 was read from: the chain */
	size_t slots_alloc;
	bool by_frame_pointers; /* unwinder_by_frame_pointers() */
	bool valid;
};

/*
 * The stacks a thread's CPU samples caught it on, each with its samples and
 * their periods: its run time, exact from its clock, is divided among them
 * once the window is over (run-stacks.c).
 */
struct wall_run_stack {
	size_t at, n;     /* its pcs in the pool, leaf first */
	uint64_t samples; /* how many caught it */
	uint64_t period_ns;
};

struct wall_run_stacks {
	struct wall_run_stack *v;
	size_t nv, v_alloc;
	uint64_t *pool;
	size_t npool, pool_alloc;
	struct u64map index; /* hash of the pcs -> index + 1; collisions probe hash+1 */
	uint64_t period_ns;  /* of every sample */
};

void wall_run_stacks_init(struct wall_run_stacks *rs);
int wall_run_stacks_add(struct wall_run_stacks *rs, const uint64_t *pcs, size_t n,
			uint64_t period_ns);
/* The pcs of stack @i. */
const uint64_t *wall_run_stack_pcs(const struct wall_run_stacks *rs, size_t i);
void wall_run_stacks_release(struct wall_run_stacks *rs);

/* thread-look.c */
int wall_clocks_open(pid_t pid, pid_t tid);
int wall_clocks_read(int fd, struct wall_clocks *ret);
/*
 * The clocks of @tid (schedstat open as @fd) and where it was when they
 * were read; -EAGAIN when it kept switching CPUs meanwhile, other -errno.
 * *@status_fd is its status file, opened at the first call (-1: not yet),
 * the caller's to close.
 */
int wall_clocks_read_where(pid_t pid, pid_t tid, int fd, int *status_fd,
			   struct wall_clocks *ret, struct wall_where *ret_where);
/* The thread's start, on the CLOCK_MONOTONIC scale (10 ms resolution). */
int wall_thread_birth_ns(pid_t pid, pid_t tid, uint64_t *ret);
int wall_look_read(pid_t pid, pid_t tid, struct wall_look *ret);
int wall_switches_read(pid_t pid, pid_t tid, struct wall_switches *ret);

/*
 * Copies and unwinds the stack of @tid, asleep as @look says, into @st.
 * Returns 1 when @st was taken now, 0 when @st already held this very
 * stack (asleep at the same place, every return address of its chain
 * still in its slot: nothing copied or unwound again), -EAGAIN when the thread
 * woke while it was copied (@st unchanged, or invalid if a longer copy had
 * begun rewriting it), other -errno.
 * @ret_read gets the bytes read from the target.
 */
int wall_take_off_stack(pid_t pid, pid_t tid, const struct wall_look *look,
			const struct maps *maps, struct unwinder *unw, struct wall_off_stack *st,
			uint64_t *ret_read);
void wall_off_stack_release(struct wall_off_stack *st);

#endif
