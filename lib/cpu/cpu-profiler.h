/*
 * The cpu profile of one process: perf samples -> unwound stacks -> a
 * struct profile in Go's cpu layout (samples/count, cpu/nanoseconds). The
 * glue between lib/perf, lib/unwind, lib/symbolize and lib/profile, so that
 * cli/cmd-cpu.c only parses options and reports.
 *
 * Stacks are unwound as samples arrive (from the copies perf made, the target
 * is never stopped); symbolization waits until sampling has ended.
 */
#ifndef CPROF_CPU_PROFILER_H
#define CPROF_CPU_PROFILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "perf/perf.h"
#include "profile/profile.h"

struct cpu_profiler_opts {
	pid_t pid;
	unsigned hz;
	enum perf_scope scope;
	bool kernel; /* count time spent in the kernel (needs privilege) */
	bool kernel_stacks; /* kernel frames on top of the user stacks (needs @kernel) */
	const char *command_line; /* for the profile's comments */
	struct symbolizer *sym;   /* shared with other profilers; NULL: its own */
};

struct cpu_profiler_stats {
	uint64_t samples;       /* target samples (not the cprof agent's task's) */
	uint64_t unwound;       /* of which unwound past the first frame */
	uint64_t by_frame_pointers; /* of which through code without CFI by rbp */
	uint64_t lost;          /* records the kernel dropped */
	uint64_t foreign;       /* other processes' samples (system scope) */
	uint64_t sampled_ns;    /* samples x period */
	uint64_t cpu_ns;        /* the profile's CPU: each thread's clock, when weighed */
	uint64_t clocks_ns;     /* the clocks of the threads sampled, when weighed */
	uint64_t unsampled_ns;  /* of cpu_ns, in threads that ended unsampled */
	bool weighed;           /* samples weighed by their threads' clocks */
	uint64_t process_cpu_ns; /* the process's own CPU clock over the window, 0 if unknown */
	uint64_t window_ns;     /* sampling window so far */
	uint64_t symbolize_ns;  /* time spent building the profile after sampling */
	bool target_exited;
};

struct cpu_profiler;

/*
 * Prepares everything (modules, unwinder, perf events, disabled). Nothing is
 * sampled yet. On failure, @err says why (perf_strerror() for perf errors).
 */
int cpu_profiler_new(struct cpu_profiler **ret, const struct cpu_profiler_opts *o, char *err,
		     size_t errlen);

/* Enables sampling: the window starts. */
int cpu_profiler_start(struct cpu_profiler *p);

/*
 * Waits up to @timeout_ms for samples and processes them. Returns 0, or
 * -ESRCH once the target has exited (the window then ends there).
 */
int cpu_profiler_poll(struct cpu_profiler *p, int timeout_ms);

/* Disables sampling and processes what is left: the window ends. */
int cpu_profiler_stop(struct cpu_profiler *p);

/* Symbolizes and returns the profile (owned by the caller). */
int cpu_profiler_finish(struct cpu_profiler *p, struct profile **ret);

const struct cpu_profiler_stats *cpu_profiler_stats(const struct cpu_profiler *p);

void cpu_profiler_free(struct cpu_profiler *p);

#endif
