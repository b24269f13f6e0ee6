/*
 * The process being profiled, as /proc describes it: identity, liveness and
 * what stands in the way of profiling it. Reading it never touches the
 * target. The CLI decides what to refuse; this room only reports facts.
 */
#ifndef CPROF_TARGET_H
#define CPROF_TARGET_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct target {
	pid_t pid;
	pid_t tgid;          /* Tgid: its process; another id when pid is a thread's */
	char comm[64];       /* /proc/PID/comm */
	char exe[PATH_MAX];  /* readlink /proc/PID/exe; "" for kernel threads */
	char state;          /* /proc/PID/stat state letter: R S D T t Z X I */
	uid_t uid;           /* real uid of the target */
	pid_t tracer_pid;    /* TracerPid: 0 when not traced */
	bool kernel_thread;  /* PF_KTHREAD: no user space to profile */
	bool is_self;        /* the target is cprof itself */
	bool exe_deleted;    /* the binary was replaced or removed after start */
	int nthreads;
};

/*
 * Fills @ret from /proc/@pid. Returns -ESRCH when there is no such process
 * (or it is gone), -EACCES/-EPERM when /proc refuses (hidepid, or another
 * user's process: then @ret holds what could be read, comm and uid
 * included), 0 otherwise; a zombie or kernel thread is reported in the
 * fields, not as an error.
 */
int target_open(struct target *ret, pid_t pid);

/* True while @pid exists and is not a zombie. */
bool target_alive(pid_t pid);

/* window.c: a sampler's window on @pid, on CLOCK_MONOTONIC. */
#define TARGET_LIVENESS_NS (100ULL * 1000 * 1000)
struct target_window {
	pid_t pid;
	uint64_t start_ns, end_ns; /* end_ns 0: it goes on */
	uint64_t looked_ns;        /* the target's liveness, last looked at */
};

void target_window_start(struct target_window *w, pid_t pid, uint64_t now);
/* How long the window has gone on at @now, or lasted once ended. */
uint64_t target_window_ns(const struct target_window *w, uint64_t now);
/* Every TARGET_LIVENESS_NS, whether the target lives: 1 it does, -ESRCH it
 * is gone (the window ends at @now); 0 when not looked at this time. */
int target_window_look(struct target_window *w, uint64_t now);
/* Ends the window at @end (0: now), once: a later call keeps the first
 * end. Its length. */
uint64_t target_window_end(struct target_window *w, uint64_t end);

/*
 * The thread ids of @pid from /proc/@pid/task, in a malloc'd array.
 * Returns -ESRCH when the process is gone.
 */
int target_list_tids(pid_t pid, pid_t **ret_tids, size_t *ret_n);

/* Name of thread @tid (/proc/@pid/task/@tid/comm) into @buf; -ESRCH if gone. */
int target_thread_name(pid_t pid, pid_t tid, char *buf, size_t size);

/* The state letter of thread @tid (R S D T t Z X I); -ESRCH if gone. */
int target_thread_state(pid_t pid, pid_t tid, char *ret_state);

/*
 * thread-call.c: what thread @tid is blocked in, from
 * /proc/@pid/task/@tid/syscall (ptrace access needed), never a stop.
 */
struct target_call {
	bool running;     /* "running": nothing more is known */
	int64_t nr;       /* the call it is blocked in; -1: none, or blocked outside one */
	uint64_t args[6];
	uint64_t sp, pc;  /* user stack and program pointers (not when running) */
};

int target_thread_call(pid_t pid, pid_t tid, struct target_call *ret);
bool target_call_same(const struct target_call *a, const struct target_call *b);

/*
 * Thread @tid's time on a cpu so far, in ns (schedstat's first field): the
 * same in two reads, it ran no instruction in between, so its registers and
 * the stack above its stack pointer are what the first read saw.
 */
int target_thread_run_ns(pid_t pid, pid_t tid, uint64_t *ret);

/*
 * thread-clock.c: thread @tid's clocks, kept by the scheduler and never
 * sampled. The descriptor from target_clock_open() (or -errno: -ESRCH when
 * the thread is gone) is read again and again; a read of a thread that has
 * exited is -ESRCH. Run time lags by at most one scheduler tick for a
 * thread on a CPU now (the kernel adds it at ticks and switches).
 */
struct target_clock {
	uint64_t run_ns;   /* on a CPU */
	uint64_t delay_ns; /* on a run queue, waiting for a CPU */
};

int target_clock_open(pid_t pid, pid_t tid);
int target_clock_read(int fd, struct target_clock *ret);

/* The comm of the process owning @pid, and its name, for error messages. */
int target_process_name(pid_t pid, char *buf, size_t size);

/*
 * program.c: the path by which @pid was started, when it differs from
 * @exe_path (its /proc/PID/exe) yet names the same file: a symlink such as
 * /usr/bin/redis-server -> redis-check-rdb, found from argv[0] or comm.
 * Fills @buf (the target's own absolute path) and returns 0; -ENOENT when
 * the process was started by its file's own name or none leads there.
 */
int target_program_path(pid_t pid, const char *exe_path, char *buf, size_t size);

/* namespace.c: containers. True when @pid's root directory is not ours
 * (its paths must be opened under /proc/PID/root); false if unsure. */
bool target_other_root(pid_t pid);
/*
 * @path opened as process @pid resolves it: inside its root, where an
 * absolute symlink (a container's /tmp -> /tmp, say) means the container's
 * own "/", not ours, as an O_PATH descriptor (@flags added: O_DIRECTORY,
 * say). Where openat2 is missing (< 5.6), /proc/PID/root/PATH, which
 * follows such a link in cprof's root. The descriptor or -errno.
 */
int target_open_in_root(pid_t pid, const char *path, int flags);
/* True when @pid is in another PID namespace than cprof; false if unsure. */
bool target_other_pidns(pid_t pid);
/* Thread @tid of @pid as its own PID namespace numbers it (the last NSpid
 * field), or 0 when that is @tid itself or unknown. */
pid_t target_ns_tid(pid_t pid, pid_t tid);

/* @pid's start time in clock ticks since boot (/proc/PID/stat's 22nd
 * field): with the pid, a name no later process will have. -ESRCH. */
int target_start_time(pid_t pid, unsigned long long *ret);

/* Reads a small /proc file whole into @buf (NUL-terminated). -errno. */
int proc_read(const char *path, char *buf, size_t size, size_t *ret_len);

/* Reads an integer sysctl such as "kernel/perf_event_paranoid". -errno. */
int proc_sysctl_int(const char *name, int *ret);

#endif
