#ifndef CPROF_WALL_PRIVATE_H
#define CPROF_WALL_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "maps/maps.h"
#include "perf/perf.h"
#include "profile/profile.h"
#include "sampling/sampling.h"
#include "symbolize/symbolize.h"
#include "target/target.h"
#include "unwind/unwind.h"
#include "util/util.h"
#include "wall/wall-profiler.h"

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

/* ---- the profiler's state, shared by its rooms -------------------------- */

#define WALL_MAX_FRAMES 256

struct wall_thread {
	pid_t tid;
	int fd;              /* its schedstat */
	int status_fd;       /* its status, once read; -1: not yet */
	bool alive, listed;
	uint64_t last_ns;    /* accounted up to here (CLOCK_MONOTONIC) */
	struct wall_clocks clk;
	bool fresh;          /* its next read is its clocks' baseline */
	struct wall_clocks next; /* this tick's read, at next_at */
	uint64_t next_at;
	int next_r;
	struct wall_where where; /* with next, if where_known */
	bool where_known;
	bool awake;              /* not asleep at the last read that said where */
	uint64_t awake_voluntary; /* its switches to sleep then */
	bool began_on_cpu;       /* what it owes at the start is run time */
	uint64_t ahead_run, ahead_wait; /* given before its clocks had them */
	struct wall_waits waits;
	uint64_t owed_ns;        /* counted twice so far: off the CPU, then waiting */
	uint64_t waited_ns;      /* given to its samples as runnable */
	uint64_t taken_ns;       /* of that, taken back (wall_take_back_owed()) */
	bool exited;             /* perf said it ended: accounted to its end */
	bool own;                /* the cprof agent's task, known late: its samples go */
	uint64_t run_ns;         /* its clock's run time in the window */
	struct wall_run_stacks runs; /* what its CPU samples caught */
	bool looked;
	struct wall_off_stack off;
	uint64_t *run_pcs;   /* its last CPU sample's stack */
	size_t nrun, run_alloc;
	const char *name;
};

struct wall_profiler {
	struct wall_profiler_opts opts;
	/* s.perf NULL: refused, no CPU stacks; s.agent's task: in no sample,
	 * no thread; s.rng: the ticks' jitter */
	struct sampling s;
	struct perf_session *switches; /* NULL: none, or closed (too many) */
	bool switches_decided;
	uint64_t switches_counted; /* by the threads' status, since the start */
	uint64_t switches_since, switch_records; /* the rate's window */
	struct maps maps;
	struct wall_thread *threads;
	size_t nthreads, threads_alloc;
	struct u64map by_tid; /* tid -> index + 1 */
	struct u64map births; /* tid -> perf time of birth, for threads not seen yet */
	uint64_t tick_ns, next_tick;
	bool started, running, run_added;
	uint64_t tick_cost; /* smoothed */
	struct wall_profiler_stats stats;
	uint64_t pcs[WALL_MAX_FRAMES], locs[WALL_MAX_FRAMES];
};

/* ticks.c */
struct wall_thread *wall_thread_of(struct wall_profiler *p, pid_t tid);
/*
 * A thread seen for the first time: its first read is its clocks'
 * baseline; one born in the window started from zero at its birth,
 * runnable. NULL when it cannot be followed.
 */
struct wall_thread *wall_thread_add(struct wall_profiler *p, pid_t tid, uint64_t now);
/* The thread turned out to be the cprof agent's task: no more of its time. */
void wall_thread_disown(struct wall_profiler *p, struct wall_thread *t);
/* What the thread does now; if it sleeps, on which stack. */
void wall_look_now(struct wall_profiler *p, struct wall_thread *t);
/* Every thread's clocks read and accounted; @last ends every thread's
 * time at one instant, @ret_end. */
int wall_tick(struct wall_profiler *p, bool last, uint64_t *ret_end);
/* A tick of the window, and when the next is due. */
int wall_take_tick(struct wall_profiler *p);

/* records.c */
int wall_drain(struct wall_profiler *p);
/* After the first tick: the switch records opened where the budget allows. */
void wall_switches_open(struct wall_profiler *p, uint64_t now);
/* Past the budget, the switch records are closed. */
void wall_switches_check(struct wall_profiler *p, uint64_t now);

/* accounting.c */
/* The interval from the thread's last read to @now, by this tick's read. */
int wall_account(struct wall_profiler *p, struct wall_thread *t, uint64_t now);
/* From the last tick to the thread's end: where it was last seen. */
int wall_add_final(struct wall_profiler *p, struct wall_thread *t, uint64_t end);
/* The thread's run time on its CPU samples' stacks: once, at the end. */
int wall_add_running(struct wall_profiler *p, struct wall_thread *t);
/* What the threads still owe at the window's end, taken back. */
void wall_take_back_owed(struct wall_profiler *p);
/* Whether the thread was awake all through the interval its read ends. */
bool wall_awake_through(struct wall_thread *t);
/* The thread's switch counts now (the first tick's rate, the estimate). */
void wall_count_switches(struct wall_profiler *p, struct wall_thread *t, uint64_t ddelay);

#endif
