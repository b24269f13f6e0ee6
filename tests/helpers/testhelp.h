/*
 * Helpers for the integration suites: start target programs, run cprof,
 * read what it wrote, and measure the truth from outside the target.
 *
 * Everything here is for Criterion tests: on a setup failure (fork, pipe,
 * a target that never says "ready") the helpers fail the current test with
 * cr_assert rather than return an error. Every process they start is killed
 * by its pid and reaped by th_cleanup() (call it from the suite's .fini), and
 * dies with the test process if that is killed (PR_SET_PDEATHSIG).
 */
#ifndef CPROF_TESTHELP_H
#define CPROF_TESTHELP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "profile/profile.h"

/*
 * Skips the test for what this machine lacks and scripts/setup provides: a
 * package, a tool, root or the privilege root has. On CI (CI=true), where
 * setup ran as root, such a skip would pass a hole for green: it fails
 * instead, with the same reason. What a kernel, its settings or the
 * machine's load cannot give stays a skip (cr_skip_test). The reason must
 * start with a string literal.
 */
bool th_on_ci(void);
#define TH_SKIP_MISSING(...)                                                                       \
	do {                                                                                       \
		if (th_on_ci())                                                                    \
			cr_assert_fail("on CI (CI=true) nothing may be missing: " __VA_ARGS__);    \
		cr_skip_test(__VA_ARGS__);                                                         \
	} while (0)

/* The suite's .init and .fini. th_cleanup() kills and reaps what is left. */
void th_init(void);
void th_cleanup(void);

/*
 * A fresh path in TEST_TMPDIR for this test (not created): "DIR/NAME-PID-N".
 * th_cleanup() removes it (a directory with all in it, on its file system), unless
 * CPROF_TEST_KEEP is set in the environment.
 */
const char *th_tmp_path(const char *name);

/* A fresh, empty directory made with th_tmp_path(). */
const char *th_tmp_dir(const char *name);

/* Number of entries in directory @path (without . and ..), or -1. */
int th_dir_entries(const char *path);

/* ---- targets ----------------------------------------------------------- */

/*
 * A target says "ready" well within a second. The bound is for one that
 * never will, not for a slow start: these VMs stall every process for
 * many seconds now and then, and a test that waited less failed there.
 */
#define TH_READY_TIMEOUT_S 30

/*
 * Starts TARGETS_DIR/@name with the NULL-terminated @args, waits (up to
 * TH_READY_TIMEOUT_S) until it prints "ready", and returns its pid. The target is
 * registered for cleanup, and reaped by a thread of ours as soon as it exits
 * (as a shell would: a profiler must see it vanish, not stay our zombie).
 * Fails the test if it cannot start.
 */
pid_t th_spawn_target(const char *name, const char *const *args);
/* (@name may also be an absolute path: a target copied elsewhere.) */
#define TH_SPAWN(name, ...) th_spawn_target((name), (const char *const[]){__VA_ARGS__, NULL})
/* The same for the program at @path (a copy of a target, say). */
pid_t th_spawn_path(const char *path, const char *const *args);

/*
 * Children started from now on (targets, cprof, commands) drop to @uid and
 * @gid (no supplementary groups) before they exec; th_run_as(-1, -1) goes
 * back to running them as ourselves. Needs root.
 */
void th_run_as(uid_t uid, gid_t gid);

/*
 * Starts @argv (argv[0] an absolute path) in the background with stdout and
 * stderr to @log_path, registered for cleanup like a target (killed by its
 * pid, reaped). Does not wait for anything: poll for readiness yourself.
 */
pid_t th_spawn_daemon(const char *const *argv, const char *log_path);

/* The same for any program: @argv[0] is its path, @name is for messages. */
pid_t th_spawn_cmd(const char *const *argv, const char *name);

/*
 * Kills our child @pid (SIGKILL) unless it is already reaped, reaps it and
 * forgets it. Does nothing for a pid that is not a child we track.
 */
void th_kill(pid_t pid);

/* True while our child @pid has not exited. */
bool th_alive(pid_t pid);

/*
 * Reads what target @pid (started by th_spawn_target() or th_spawn_path())
 * prints after "ready" until a line equal to @line has been read, for up
 * to @timeout_ms. Returns 0, -ETIMEDOUT, or -EPIPE when its stdout closed
 * first; in every case *@ret_out is everything read, NUL-terminated (free
 * it): all of it, lines after @line too. A later call reads on from there.
 */
int th_read_until(pid_t pid, const char *line, int timeout_ms, char **ret_out);

/*
 * Sends @sig to our child @pid unless it is already reaped (a reaped pid
 * may be someone else's). Returns true if it was sent.
 */
bool th_signal(pid_t pid, int sig);

/*
 * Waits up to @timeout_ms for our child @pid to exit, and returns its wait
 * status (and forgets it), or -1 on timeout (the child is left running).
 */
int th_wait_exit(pid_t pid, int timeout_ms);
/* Where each thread of @pid is now, logged: its name, state, wait channel,
 * system call, and its user-space stack (eu-stack). */
void th_log_where(pid_t pid, const char *who);

/* How child @pid ended, not reaping it, written into @buf: for messages. */
const char *th_fate(pid_t pid, char *buf, size_t size);

/* Forks a child that exits at once and is never reaped: a zombie. */
pid_t th_make_zombie(void);

/* A pid that no process has: a child that was started and reaped. */
pid_t th_dead_pid(void);

/* ---- running cprof ----------------------------------------------------- */

struct th_run {
	pid_t pid;
	int status;    /* raw wait status */
	int exit_code; /* WEXITSTATUS, or 128 + signal, or -1 when timed out */
	bool timed_out;
	char *out, *err; /* everything written to stdout / stderr, NUL-terminated */
	size_t out_len, err_len;
	uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC: fork, and exit */
	int64_t start_rt, end_rt;  /* the same in CLOCK_REALTIME */
	uint64_t signal_ns;	   /* when @sig was sent, 0 if never */
	struct rusage ru;	   /* its CPU use, once exited */
	int out_fd, err_fd;	   /* internal */
};

/*
 * Runs CPROF_BIN with the NULL-terminated @args, collecting stdout and
 * stderr. If @sig is non-zero it is sent @sig_after_ms after the start, or
 * later, once the program has a handler for it (SIGKILL and SIGSTOP: at
 * once). After
 * @timeout_ms cprof is killed (SIGKILL, by pid) and exit_code is -1. Returns
 * the result in @r (release it with th_run_release()).
 */
void th_run_cprof_ex(struct th_run *r, int timeout_ms, int sig, int sig_after_ms,
		     const char *const *args);
#define TH_CPROF(r, timeout_ms, ...)                                                               \
	th_run_cprof_ex((r), (timeout_ms), 0, 0, (const char *const[]){__VA_ARGS__, NULL})
/* The same for any program: @argv[0] is its path. */
void th_run_cmd_ex(struct th_run *r, int timeout_ms, int sig, int sig_after_ms,
		   const char *const *argv);
void th_run_release(struct th_run *r);
/*
 * The next th_run_*_ex()'s @sig waits for @text on the program's stderr,
 * its delay counted from there, and goes to @pid (0: the program): a
 * signal meant for a window (cprof says "... for 10s" as it begins), not
 * for what comes before it (an agent's load, slow on a loaded machine).
 */
void th_run_signal_after(const char *text, pid_t pid);
/* The same, from @text's @nth time on stderr (a loop's n-th window). */
void th_run_signal_after_nth(const char *text, int nth, pid_t pid);
/*
 * Runs `cprof KIND -p PID -d DURATION -q -o <tmp>` and fails the test,
 * with cprof's stderr in the log, unless it exits 0; @n numbers it in the
 * message (the n-th session of a series).
 */
void th_session_ok(const char *kind, pid_t pid, const char *duration, int n);

/*
 * Leaves a session of the agent running in the single-threaded target @pid
 * (`cprof heap --keep`: the agent's task lives while a session does) and
 * returns that task's tid: the one thread of @pid that is not @pid. Fails
 * the test unless @pid then has exactly these two. th_agent_session_stop()
 * ends it (--stop).
 */
pid_t th_agent_session_keep(pid_t pid);
void th_agent_session_stop(pid_t pid);

/* Prints a run's exit code and stderr to the test log (for failures). */
void th_run_log(const struct th_run *r, const char *what);

/* ---- files and profiles ------------------------------------------------ */

/* Reads all of @path into a malloc'd buffer. Returns 0 or -errno. */
int th_read_file(const char *path, uint8_t **ret_buf, size_t *ret_len);
/* The same as a NUL-terminated text (its length in *@ret_len, which may be
 * NULL), or NULL when it cannot be read. */
char *th_read_text(const char *path, size_t *ret_len);

/* True if @buf starts with the gzip magic. */
bool th_is_gzip(const uint8_t *buf, size_t len);

/* Decodes @path with pprof_decode(); fails the test when it cannot. */
struct profile *th_load_profile(const char *path);

/* Index of the sample type @type/@unit, or -1. */
int th_sample_type(const struct profile *p, const char *type, const char *unit);
/* The sum of sample type @type/@unit over @p's samples (the type must be there). */
double th_sample_sum(const struct profile *p, const char *type, const char *unit);

/* A target's report: @path removed, @pid asked (SIGUSR2), and the file it
 * writes (beside, then renamed into place) opened once it is there, 5 s
 * at most. Fails the test when the target is gone or wrote nothing. */
FILE *th_report_open(pid_t pid, const char *path);

/* What tests/targets/ring counted itself, in the report it writes on SIGUSR2. */
struct th_ring_report {
	uint64_t ops, cpu_ns, hooked_ops, live_objects, live_bytes;
	int single; /* glibc's __libc_single_threaded; -1: not said */
};

/* Asks ring @pid for its report at @path and reads it (it writes within a
 * few hundred allocations). */
void th_ring_report(pid_t pid, const char *path, struct th_ring_report *r);

const struct profile_location *th_location(const struct profile *p, uint64_t id);
const struct profile_function *th_function(const struct profile *p, uint64_t id);
const struct profile_mapping *th_mapping(const struct profile *p, uint64_t id);

/* The label @key of @s, or NULL. */
const struct profile_label *th_label(const struct profile_sample *s, const char *key);

struct th_func_sum {
	const char *name;
	int64_t flat; /* the innermost line of the leaf location is this function */
	int64_t cum;  /* some line of some location is this function (once per sample) */
};

/*
 * Per-function flat and cum sums of sample value @vi. Inline frames count
 * (every line of a location). The array is sorted by cum, largest first.
 */
void th_func_sums(const struct profile *p, size_t vi, struct th_func_sum **ret, size_t *ret_n);
/* The sums of @name, or a zero entry. */
struct th_func_sum th_func_get(const struct th_func_sum *s, size_t n, const char *name);

/* A stack as text (its frames' names, in the order the caller chose) and how
 * many samples it had. */
struct th_stack {
	char text[1024];
	long count;
};

/*
 * Two runs' stacks agree: every stack of @a seen at least @min times is in
 * @b, and every such stack of @b in @a (failures name @a_name or @b_name as
 * the only side). Returns how many stacks were compared.
 */
size_t th_stacks_agree(const struct th_stack *a, size_t na, const char *a_name,
		       const struct th_stack *b, size_t nb, const char *b_name, long min);

/* True if some line of the location @id names @func. */
bool th_location_has(const struct profile *p, uint64_t id, const char *func);
/* A comment of @p holds @text. */
bool th_has_comment(const struct profile *p, const char *text);

/* Name of the innermost / outermost function of a sample ("" if unknown). */
const char *th_leaf_name(const struct profile *p, const struct profile_sample *s);
const char *th_root_name(const struct profile *p, const struct profile_sample *s);

/* ---- what the kernel allows ------------------------------------------ */

/*
 * Skips the test (cr_skip_test, with the reason) unless perf_event_open of a
 * task-clock event on a thread is allowed here; with @system, unless a
 * cpu-wide event (pid -1) is allowed too.
 */
void th_require_perf(bool system);

/* ---- go tool pprof ----------------------------------------------------- */

/*
 * Runs `go tool pprof -top @path` (HOME and GOCACHE in TEST_TMPDIR). Skips
 * the test (cr_skip_test, never a silent pass) when go is not installed.
 * Returns its exit code; its stdout+stderr in *ret_out if non-NULL (free it).
 */
int th_pprof_top(const char *path, char **ret_out);
/* The same with options before the path (NULL-terminated, at most 10), e.g.
 * "-sample_index=alloc_space", "-nodecount=5". */
int th_pprof_top_ex(const char *path, const char *const *opts, char **ret_out);

/* Asserts that `go tool pprof -top @path` accepts the file. */
void th_assert_pprof_ok(const char *path);

/*
 * Compares `cprof view @path [--index @index] [--top @top]` with `go tool
 * pprof -top [-sample_index=@index] [-nodecount=@top] @path` row by row by
 * name (@index NULL, @top 0: the defaults), and expects the same rows, the
 * same flat values and, from the header line on, the same table byte for
 * byte. Skips the test when go is not installed.
 */
void th_view_agrees_with_pprof(const char *path, const char *index, int top);
/*
 * The same for a comparison: `cprof view @path --diff-base @base` (--base
 * with @subtract) [--normalize] against `go tool pprof -top
 * -diff_base=@base` (-base) [-normalize]; the whole outputs, header lines
 * included, must be the same.
 */
void th_view_diff_agrees_with_pprof(const char *path, const char *base, bool subtract,
				    bool normalize, const char *index);

/* The path of @prog in $PATH (malloc'd), or NULL when it is not there. */
char *th_find_in_path(const char *prog);

/* ---- the truth, measured from outside ---------------------------------- */

/*
 * Polls the process CPU clock of @pid (clock_getcpuclockid: all threads,
 * exited ones included) every ~2 ms from a background thread, each reading
 * paired with CLOCK_REALTIME, until stopped or the process is gone.
 */
struct th_cpuclock;
struct th_cpuclock *th_cpuclock_start(pid_t pid);
void th_cpuclock_stop(struct th_cpuclock *c);
void th_cpuclock_free(struct th_cpuclock *c);
/*
 * CPU time of the process between realtime @t0 and @t1 (ns since the epoch),
 * interpolated linearly between readings. Returns -1 when [t0, t1] is not
 * covered by the readings (a reading before t0 is needed; after the process
 * is gone, its last reading stands for the rest of the window).
 */
int64_t th_cpuclock_between(const struct th_cpuclock *c, int64_t t0, int64_t t1);

/* The widest gap between two readings that th_cpuclock_between() interpolated
 * over so far (ns): the precision of the truth is about this times the cores. */
int64_t th_cpuclock_gap(const struct th_cpuclock *c);

/* ---- the truth, reported by the target itself --------------------------- */

/*
 * What a target's "truth" thread recorded (tests/targets/truth.h: busy's
 * and churn's TRUTHFILE argument): its process CPU clock and each reported
 * thread's CLOCK_THREAD_CPUTIME_ID, read by the target every ~1 ms with
 * CLOCK_REALTIME stamps. Unlike th_cpuclock, nothing outside the target
 * reads these clocks: not cprof, not /proc.
 *
 * th_truth_read() takes a snapshot of the records the file holds now (the
 * target may still be writing; only whole records are kept, the last
 * ~35 s). It fails the test when @path is missing, not such a file, or
 * holds no record; th_truth_load() returns NULL then, with the reason in
 * @why (a program that is no test: the benches). Free it with
 * th_truth_free() (NULL is fine).
 */
struct th_truth;
struct th_truth *th_truth_read(const char *path);
struct th_truth *th_truth_load(const char *path, char *why, size_t size);
void th_truth_free(struct th_truth *t);

/* How many thread clocks each record has, and the kernel thread id (the
 * profile's thread_id label) of clock @i. */
int th_truth_nthreads(const struct th_truth *t);
pid_t th_truth_tid(const struct th_truth *t, int i);
/* Whether the target's reporter ran at SCHED_FIFO (its readings on time
 * however loaded the machine). */
bool th_truth_fifo(const struct th_truth *t);

#define TH_TRUTH_PROCESS (-1)
/*
 * CPU time of thread clock @i (TH_TRUTH_PROCESS: the whole process, exited
 * threads included) between realtime @t0 and @t1 (ns since the epoch), each
 * interpolated linearly between the two records around it (a record is
 * stamped with the middle of its reading). Returns -1 when [t0, t1] is not
 * covered: a record at or before t0 is needed, and one at or after t1 unless
 * the target marked its last record final (it exited by itself: its clocks
 * stood still from there on).
 */
int64_t th_truth_between(const struct th_truth *t, int i, int64_t t0, int64_t t1);
/*
 * The wider of the two intervals between records around @t0 and @t1 (ns):
 * what th_truth_between() interpolated over (0 at an end past a final
 * record).
 */
int64_t th_truth_gap(const struct th_truth *t, int64_t t0, int64_t t1);
/*
 * How far clock @i went in those two intervals (ns), -1 when not covered:
 * th_truth_between(@t, @i, @t0, @t1) is that clock's CPU over [t0, t1]
 * within this much (a thread that ran through a whole interval moved its
 * clock by the interval; one that waited there, by nothing).
 */
int64_t th_truth_slack(const struct th_truth *t, int i, int64_t t0, int64_t t1);

/*
 * The machine's CPU use, to tell whether other tenants of a shared machine
 * took it during a measurement: /proc/stat's busy time (user, nice, system,
 * irq, softirq, steal: every process of every container on this kernel, and
 * time the hypervisor took), and our own process's CPU time.
 */
struct th_cpustat {
	bool ok;
	int64_t mono_ns; /* CLOCK_MONOTONIC when read */
	int64_t busy_ns; /* machine-wide busy CPU time (tick-based: ~1% precision) */
	int64_t self_ns; /* this process's CPU time */
};
void th_cpustat_read(struct th_cpustat *s);

/* User + system time of an rusage, in ns. */
int64_t th_rusage_ns(const struct rusage *ru);

/*
 * The fraction of the CPUs this process may use that went to other processes
 * between @a and @b, not counting this process and @ours_ns of CPU used by
 * processes of ours (a target, cprof). -1 when unknown.
 */
double th_foreign_load(const struct th_cpustat *a, const struct th_cpustat *b, int64_t ours_ns);
/*
 * A machine whose other tenants take more than this of the CPUs may keep a
 * thread from running as much as it could: a test that judges how much a
 * thread ran (not what it used) judges it only when they did not.
 */
#define TH_MAX_FOREIGN 0.15

/* Up to @max thread ids of @pid into @tids (target_list_tids()); 0 if gone. */
int th_task_list(pid_t pid, pid_t *tids, int max);

/* Sum of the schedstat run times (ns) of the live threads of @pid, or -1. */
int64_t th_schedstat_total(pid_t pid);
/* The same with their times waiting for a CPU: the time they were runnable
 * (a thread stopped, by ptrace say, is neither running nor waiting). */
int64_t th_schedstat_runnable(pid_t pid);

/* Sleeps @ms milliseconds (restarting after signals). */
void th_sleep_ms(int ms);

uint64_t th_now_ns(void); /* CLOCK_MONOTONIC */

/* ---- the target is let go (after every ptrace user) ---------------------- */

/* The /proc/@pid/fd/N path of the agent's memfd in @pid, or "" when none. */
void th_agent_fd_path(pid_t pid, char *ret, size_t size);

/*
 * Forks a tracer: a child of ours that PTRACE_SEIZEs thread @tid (no stop)
 * and waits to be killed (SIGKILL it, and reap it). Returns its pid once it
 * holds @tid; fails the test if it cannot.
 */
pid_t th_start_tracer(pid_t tid);

struct cprof_wire_header;
/* The header of the agent's channel (its memfd) in @pid, mapped read-only
 * (munmap CPROF_WIRE_HEADER_SIZE bytes), or NULL when it has none. */
struct cprof_wire_header *th_agent_header(pid_t pid);

/*
 * Skips an accuracy test in a sanitizer build (ASan slows cprof several
 * times: what it measures there is the sanitizer). Such figures are judged
 * in the plain build, which the same test command runs too.
 */
void th_skip_accuracy_when_sanitized(void);

/* "@pid" as text, in one of 8 rotating static buffers (for argument lists). */
const char *th_pid_str(pid_t pid);

/* The sampling rate's option of cprof command @kind: --heap-rate,
 * --block-rate or --mutex-fraction. */
const char *th_rate_option(const char *kind);

/* Reads small file @what of /proc/@pid/task/@tid. Returns 0 or -1. */
int th_task_read(pid_t pid, pid_t tid, const char *what, char *buf, size_t size);
/* State letter of thread @tid of @pid, 0 when it is gone. */
char th_task_state(pid_t pid, pid_t tid);
/* TracerPid of thread @tid of @pid, -1 when it is gone. */
long th_task_tracer(pid_t pid, pid_t tid);
/*
 * No thread of @pid may be traced or in a trace stop. With @stopped, every
 * thread must still be in group stop (kill -STOP); without, none may be.
 * @after names the moment in failure messages.
 */
void th_assert_let_go(pid_t pid, bool stopped, const char *after);

/* A TCP port of 127.0.0.1 that was free a moment ago (bound, read, closed):
 * a server started on it may still lose it to another; retry then. */
int th_free_port(void);

#endif
