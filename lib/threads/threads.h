/*
 * `cprof threads`: what every thread of a process is doing right now. A
 * consistent ptrace snapshot (lib/ptrace), unwound and symbolized after the
 * threads have been let go, and written the way Go writes its goroutine
 * profile: pprof (debug=0), stacks aggregated by count (debug=1), one block
 * per thread (debug=2).
 */
#ifndef CPROF_THREADS_H
#define CPROF_THREADS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "profile/profile.h"
#include "ptrace/ptrace.h"
#include "session/agent-task.h"

struct symbolizer;

struct thread_record {
	pid_t tid;
	pid_t ns_tid; /* as the target's PID namespace numbers it; 0: same */
	char name[64];
	char state;  /* /proc state letter just before the snapshot */
	enum ptrace_thread_result result; /* STOPPED: read, with a stop or without */
	bool unstopped; /* read asleep in its call, never stopped */
	int error;   /* -errno when result is PTRACE_THREAD_REFUSED */
	pid_t tracer; /* who traces it already, when refused */
	int64_t syscall;     /* the system call it was stopped in, -1 for none */
	uint64_t syscall_arg[2];
	uint64_t cpu_ns;     /* user + system time so far */
	int cpu;             /* the cpu it last ran on, -1 unknown */
	uint64_t *pcs;       /* leaf first: PC, then return addresses - 1 */
	size_t npcs;
};

struct threads_snapshot {
	pid_t pid;
	bool other_pidns; /* in a container: thread_record.ns_tid is read */
	char comm[64];
	struct thread_record *threads; /* sorted by tid */
	size_t nthreads;
	size_t nstopped;  /* threads read, with a stop or without */
	size_t nasleep;   /* of which: read asleep, without a stop */
	size_t nwoke;     /* asleep when looked at, stopped after they woke */
	size_t nstacks;   /* threads whose stacks were walked */
	size_t nframe_pointers; /* of which through code without CFI by rbp */
	int asleep_refused; /* -errno: /proc would not show sleeping threads, all stopped */
	uint64_t pause_ns; /* the longest any thread was stopped */
	uint64_t stopping_ns; /* of which: until every thread had stopped */
	int cpus_kept_off; /* the running threads' cpus its own work kept off */
	int64_t time_nanos;
	struct symbolizer *sym;
	/* The cprof agent's task, cprof's: in no record, never stopped. */
	struct agent_tasks agent;
};

/*
 * Reads the target's modules (or shares @sym's, symbolizer_share()) and
 * threads, takes the snapshot, unwinds. Threads asleep in a call are read
 * without a stop (asleep.c); the cprof agent's task is neither read nor
 * stopped (session/agent-task.h). Returns -ESRCH (gone), -EPERM
 * (cannot be traced), or other -errno with a message in @err.
 */
int threads_snapshot_take(struct threads_snapshot **ret, pid_t pid, struct symbolizer *sym,
			  char *err, size_t errlen);
void threads_snapshot_free(struct threads_snapshot *s);

/* "running", "sleeping in futex_wait", "disk sleep in read", "stopped", ... */
void thread_state_text(const struct thread_record *t, char *buf, size_t size);

/* The name of x86-64 system call @nr ("futex", "read"), or NULL. */
const char *syscall_name(int64_t nr);

/* debug=0: sample type threads/count, one sample per distinct stack and state. */
int threads_build_profile(const struct threads_snapshot *s, const char *command_line,
			  struct profile **ret);
/* debug=1: Go's goroutine debug=1 layout. Returns 0 or -EIO. */
int threads_write_debug1(const struct threads_snapshot *s, FILE *f);
/* debug=2: Go's goroutine debug=2 layout, one block per thread. */
int threads_write_debug2(const struct threads_snapshot *s, FILE *f);

#endif
