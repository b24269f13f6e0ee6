/*
 * The wall-clock profile of one process: where every thread's time goes,
 * on the CPU and off it, without a signal or a stop.
 *
 * - Time: the kernel's per-thread clocks (/proc/PID/task/TID/schedstat:
 *   time run, time waited on a run queue) read at every tick; the rest of
 *   the interval the thread was off its run queue (sleeping, in disk
 *   wait, stopped). Every nanosecond of every thread between two ticks is
 *   accounted, whatever the tick rate.
 * - Stacks on the CPU: CPU samples with a copy of the user stack
 *   (lib/perf), as `cpu` takes them: one event per CPU where allowed, per
 *   thread otherwise. They divide each thread's run time among its stacks.
 * - Stacks off the CPU: a thread blocked in a system call does not change
 *   its user stack; /proc/PID/task/TID/syscall gives its stack and program
 *   pointers, process_vm_readv() copies the stack, the syscall file read
 *   again tells whether it woke meanwhile. A thread that has not run since
 *   its last look keeps its last stack (nothing is read again).
 *
 * pprof: samples/count and wall/nanoseconds, labels thread_id,
 * thread_name, state (running, runnable, sleeping, disk, stopped) and, off
 * the CPU, syscall.
 */
#ifndef CPROF_WALL_PROFILER_H
#define CPROF_WALL_PROFILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "profile/profile.h"

struct wall_profiler_opts {
	pid_t pid;
	unsigned hz;              /* ticks a second, and CPU samples a CPU second */
	const char *command_line; /* for the profile's comments */
	struct symbolizer *sym;   /* shared with other profilers; NULL: its own */
	/* Events of the target's threads, never a CPU's (one of a set of
	 * processes: a CPU's would deliver every process's samples to each). */
	bool per_thread;
};

/* How the waits for a CPU are split between the stack a thread ran on and
 * the one it slept on. */
enum wall_split {
	WALL_SPLIT_EXACT,                /* by the kernel's switch records */
	WALL_SPLIT_REFUSED,              /* estimated: no records (perf refused) */
	WALL_SPLIT_TOO_MANY_THREADS,     /* estimated: an event a thread is too dear */
	WALL_SPLIT_TOO_MANY_SWITCHES,    /* estimated since switch_rate a second */
	WALL_SPLIT_LOST,                 /* estimated since records were lost */
};

struct wall_profiler_stats {
	uint64_t ticks;          /* looks at every thread */
	uint64_t lost;           /* perf records the kernel dropped */
	uint64_t off_stacks;     /* off-CPU stacks taken (copied and unwound) */
	uint64_t run_stacks;     /* CPU samples' stacks unwound */
	uint64_t by_frame_pointers; /* of both, through code without CFI by rbp */
	uint64_t off_reused;     /* off-CPU intervals given a stack taken before */
	uint64_t off_unknown;    /* off-CPU intervals with no stack (woke first) */
	uint64_t bytes_read;     /* stack bytes and perf data read from the target */
	uint64_t threads;        /* threads seen */
	uint64_t accounted_ns;   /* wall time given to samples, all threads */
	uint64_t running_ns, runnable_ns, off_ns; /* the kernel's figures, summed */
	uint64_t window_ns;
	uint64_t symbolize_ns;
	int stacks_refused;      /* -errno: no sleeping stacks (no ptrace access) */
	bool perf_refused;       /* no CPU stacks: perf_event_open said no */
	bool perf_per_thread;    /* events on the target's threads, not its CPUs */
	enum wall_split split;
	uint64_t switch_rate;    /* with WALL_SPLIT_TOO_MANY_SWITCHES */
	char perf_error[256];
	bool target_exited;
};

struct wall_profiler;

/* Why the split was estimated, in a few words ("exact" when it was not). */
const char *wall_split_reason(enum wall_split split);

/* Prepares everything; nothing is sampled yet. On failure @err says why. */
int wall_profiler_new(struct wall_profiler **ret, const struct wall_profiler_opts *o, char *err,
		      size_t errlen);

/* The window starts: every thread's clocks are read once. */
int wall_profiler_start(struct wall_profiler *p);

/* Waits up to @timeout_ms, taking the ticks that fall due and the CPU
 * samples. Returns 0, or -ESRCH once the target has exited. */
int wall_profiler_poll(struct wall_profiler *p, int timeout_ms);

/* A last tick; the window ends. */
int wall_profiler_stop(struct wall_profiler *p);

/* Symbolizes and returns the profile (owned by the caller). */
int wall_profiler_finish(struct wall_profiler *p, struct profile **ret);

const struct wall_profiler_stats *wall_profiler_stats(const struct wall_profiler *p);

void wall_profiler_free(struct wall_profiler *p);

#endif
