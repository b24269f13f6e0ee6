/*
 * CPU sampling with perf_event_open: opening the events, one ring buffer per
 * cpu, and decoding records into samples with user registers and a copy of the
 * user stack (for offline DWARF unwinding in lib/unwind).
 *
 * Two scopes:
 * - PERF_SCOPE_SYSTEM: one cpu-clock event per cpu for every task, samples of
 *   other processes dropped here. Counts short-lived threads correctly, which
 *   per-thread events cannot. Needs CAP_PERFMON / root (or paranoid <= 0).
 * - PERF_SCOPE_THREAD: one task-clock event per (thread, cpu) with inherit,
 *   what `perf record -p` does and what an unprivileged user may open. A thread
 *   born after attach inherits the event but restarts its period, so threads
 *   that run less than one period are never sampled.
 */
#ifndef CPROF_PERF_H
#define CPROF_PERF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "unwind/unwind.h"

enum perf_scope {
	PERF_SCOPE_SYSTEM,
	PERF_SCOPE_THREAD,
};

struct perf_opts {
	pid_t pid;
	uint64_t period_ns;   /* CPU time between samples */
	enum perf_scope scope;
	uint32_t stack_bytes; /* user stack copied per sample, multiple of 8 */
	size_t ring_pages;    /* data pages per cpu ring, a power of two */
	bool kernel;          /* count time in the kernel too (needs privilege) */
	bool kernel_stacks;   /* and record the kernel's call chain (needs @kernel) */
	bool task;            /* and the birth and the end of every target thread */
	/* Instead of samples, every switch of a target thread off and on a
	 * CPU (PERF_SCOPE_THREAD; period_ns and stack_bytes unused). */
	bool switches_only;
};

/*
 * Data pages per cpu ring for samples with a stack copy at @hz: 1 MiB at up
 * to 100 Hz (drained every few tens of ms), 4 MiB above, where ~8 KiB
 * samples of every task on the cpu (system scope) fill 1 MiB in 60 ms: a
 * busy machine can keep cprof off the cpu that long.
 */
#define PERF_SAMPLE_RING_PAGES(hz) ((hz) <= 100 ? 256 : 1024)

/* Kernel frames kept per sample (kernel.perf_event_max_stack is 127). */
#define PERF_KERNEL_FRAMES 128

struct perf_sample {
	pid_t pid, tid;
	int cpu;
	uint64_t time;   /* perf clock (CLOCK_MONOTONIC on x86-64) */
	uint64_t period; /* CPU ns this sample stands for */
	bool has_user;   /* regs and stack below are valid (a 64-bit user context) */
	struct unwind_input user;
	/* With kernel_stacks: the kernel part of the call chain, leaf first
	 * (the sampled ip, then return addresses); 0 when sampled in user mode. */
	unsigned nkernel;
	uint64_t kernel_ips[PERF_KERNEL_FRAMES];
};

struct perf_stats {
	uint64_t samples;  /* samples of the target */
	uint64_t foreign;  /* samples of other processes (system scope), dropped */
	uint64_t lost;     /* records the kernel dropped: ring full */
	uint64_t no_user;  /* target samples without a user context */
	uint64_t bad;      /* malformed records (skipped) */
	unsigned nevents;  /* file descriptors opened */
};

struct perf_handlers {
	/* A sample of the target. Its stack copy is valid during the call only. */
	int (*sample)(const struct perf_sample *s, void *arg);
	/* A thread of the target took a name (exec, prctl, pthread_setname_np). */
	void (*comm)(pid_t tid, const char *name, void *arg);
	/* With switches_only: @tid left a CPU (@out), taken from it if
	 * @preempted, or came back onto one, at @time (perf clock). */
	void (*cpu_switch)(pid_t tid, uint64_t time, bool out, bool preempted, void *arg);
	/* With task: thread @tid of the target was born (@exited false) or
	 * ended at @time (perf clock). */
	void (*task)(pid_t tid, uint64_t time, bool exited, void *arg);
	void *arg;
};

struct perf_session;

/*
 * Opens the events of @o (disabled) and maps their rings. For
 * PERF_SCOPE_THREAD the thread list is read until stable; threads born later
 * are covered by inherit. On failure returns -errno of perf_event_open (see
 * perf_strerror()) and leaves nothing open.
 */
int perf_session_open(struct perf_session **ret, const struct perf_opts *o);

int perf_session_enable(struct perf_session *s);
int perf_session_disable(struct perf_session *s);

/* Waits up to @timeout_ms for a ring to fill past its wakeup mark. */
int perf_session_wait(struct perf_session *s, int timeout_ms);

/* Decodes every record in every ring, calling @h. Returns 0 or the first
 * negative value a handler returned. */
int perf_session_drain(struct perf_session *s, const struct perf_handlers *h);

const struct perf_stats *perf_session_stats(const struct perf_session *s);

/* Closes every event and unmaps every ring; accepts NULL. */
void perf_session_free(struct perf_session *s);

/*
 * Why perf_event_open said @err for @o, and what to do about it, in
 * @buf: cause, the current kernel.perf_event_paranoid, the fix. In the manner
 * of perf's evsel__open_strerror(). Never prints.
 */
void perf_strerror(int err, const struct perf_opts *o, char *buf, size_t size);

/* Whether this process may take samples in the kernel (root, paranoid <= 1). */
bool perf_kernel_samples_allowed(void);

/* Whether this process may open system-wide events (root, CAP_PERFMON, paranoid). */
bool perf_system_scope_allowed(void);

#endif
