/*
 * Each thread's CPU time over a cpu profile's window, by the kernel's own
 * clock of it (schedstat's run time), beside the samples taken of it: what
 * the samples are weighed by.
 *
 * A sampling timer is not a clock. A software clock event's hrtimer that
 * fires late (a vCPU the host held, a CPU kept in an interrupt) takes one
 * sample for every period it overran (perf_swevent_hrtimer() forwards past
 * them), while the scheduler charges the thread all the time it ran; a
 * cpu-wide clock also counts time the thread did not run (a vCPU the host
 * held while it was current). So a thread's samples tell how its time
 * divides among its stacks, and its clock how much time there was.
 *
 * Threads that ended during the window can no longer be read: together they
 * had the process's clock less the others', which is divided among them
 * from their last reads, by their samples after those reads.
 */
#ifndef CPROF_CPU_THREAD_CLOCKS_H
#define CPROF_CPU_THREAD_CLOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/util.h"

struct cpu_thread {
	pid_t tid;
	int fd;              /* its schedstat; -1 once gone, or never opened */
	bool alive;          /* read at the window's end */
	bool forgotten;      /* cprof's own: in no sum */
	uint64_t base_ns;    /* its clock at the window's start; 0 if born in it */
	uint64_t last_ns;    /* its clock at the last read */
	uint64_t last_read;  /* CLOCK_MONOTONIC of that read; 0: never read */
	uint64_t sampled_ns; /* its samples' periods in the window */
	uint64_t tail_ns;    /* of which taken after the last read */
	uint64_t own_ns;     /* after cpu_clocks_settle(): its CPU in the window */
	uint64_t cum_ns, given_ns; /* cpu_clocks_weigh()'s progress */
};

struct cpu_clocks {
	pid_t pid;
	struct cpu_thread *v;
	size_t n, alloc;
	struct u64map by_tid; /* tid -> index + 1 */
	bool opening, started, stopped;
	int refused;          /* -errno: the clocks cannot be read, nothing weighed */
	uint64_t next_read, read_cost;
	uint64_t process_read;     /* CLOCK_MONOTONIC of the process clock's last read */
	uint64_t after_process_ns; /* samples' periods since then */
};

/* What cpu_clocks_settle() found, in ns. */
struct cpu_clocks_totals {
	uint64_t sampled_ns;   /* every sample's period */
	uint64_t weighed_ns;   /* the clocks of the threads that were sampled */
	uint64_t quiet_ns;     /* threads alive at the end that no sample caught */
	uint64_t ended_ns;     /* threads that ended and that no sample caught */
	unsigned quiet_threads;
	unsigned ended_threads; /* ended in the window, sampled or not */
};

void cpu_clocks_init(struct cpu_clocks *c, pid_t pid);

/* Opens every thread's clock, before the window: reading them is then
 * one system call each. 0 or -errno (then ->refused is set). */
int cpu_clocks_open(struct cpu_clocks *c);

/*
 * The threads born since cpu_clocks_open(): the window starts at the next
 * cpu_clocks_edge(). 0, or -errno (then ->refused is set and nothing will
 * be weighed; -ENOMEM fails).
 */
int cpu_clocks_start(struct cpu_clocks *c);

/*
 * Every thread's clock now, at the window's edge: after cpu_clocks_start()
 * each one's baseline, after cpu_clocks_stop() its last. Read again when
 * the edge was not sharp (cprof lost its CPU while it read): the last read
 * counts.
 */
void cpu_clocks_edge(struct cpu_clocks *c);

/* A sample of @tid at @time (CLOCK_MONOTONIC) standing for @period ns. */
int cpu_clocks_sample(struct cpu_clocks *c, pid_t tid, uint64_t time, uint64_t period);

/*
 * The process's clock was read at @now: samples after it (a process that
 * ended before its clock could be read again) stand for their periods.
 */
void cpu_clocks_process_read(struct cpu_clocks *c, uint64_t now);

/* Reads every thread's clock again, if a read is due at @now. */
void cpu_clocks_tick(struct cpu_clocks *c, uint64_t now);

/* The window ends at the next cpu_clocks_edge(): the threads born unseen
 * are listed first. */
int cpu_clocks_stop(struct cpu_clocks *c);

/* @tid is not the program's (the cprof agent's task): left out of every
 * figure. Before cpu_clocks_settle(). */
void cpu_clocks_forget(struct cpu_clocks *c, pid_t tid);

/*
 * Each thread's own CPU in the window (->own_ns), with @process_ns the
 * process's clock over it (0: unknown) for the threads that ended, to
 * which the samples after its last read are added.
 */
void cpu_clocks_settle(struct cpu_clocks *c, uint64_t process_ns, struct cpu_clocks_totals *ret);

/*
 * The weighed value of a sample of @tid whose samples' periods add to
 * @value: called once for each of the thread's samples, the results add to
 * its own CPU exactly. @value unchanged for a thread that is not weighed.
 */
uint64_t cpu_clocks_weigh(struct cpu_clocks *c, pid_t tid, uint64_t value);

void cpu_clocks_release(struct cpu_clocks *c);

#endif
