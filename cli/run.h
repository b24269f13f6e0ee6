/*
 * The one run of every profiling command, from its options to its exit
 * code: the target's checks, the output decided writable before anything
 * is touched, the command's profiler opened and started (lib/profiler/),
 * its window with a progress line and Ctrl-C, how it ended, the profile
 * built and written as the options say (pprof, a view of it, or Go's text
 * layout), the summary and the --top / --json epilogue. A command gives
 * what is its own as a small table of operations.
 */
#ifndef CPROF_RUN_H
#define CPROF_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "options.h"
#include "output.h"
#include "profiler/profiler.h"
#include "target/target.h"

/* check() and prepare(): go on (any other value is the exit code). */
#define RUN_GO_ON (-1)

struct run_set;

/* One run, as the operations see it. */
struct run {
	const struct common_opts *opts;
	uint64_t duration_ns;
	struct target target;
	struct output out;
	char command_line[1024]; /* for the profile's comments */
	struct profiler *p;      /* opened by the command */
	struct profiler_facts facts; /* after the window */
	bool written;            /* the output was written */
	/* A set of processes (run-set.c): its pids, target the first; NULL:
	 * one process, target. */
	pid_t *set;
	size_t nset;
	struct run_set *set_spec; /* how the set is listed again in the window */
	unsigned left_out; /* of the processes named, those that could not be */
	char label[160]; /* the progress line's "pid N (comm)", or the set's */
};

struct run_ops {
	const char *command;
	/* Completes "cannot ... pid N" when the target is traced already;
	 * NULL: perf alone, no tracer needed. */
	const char *attach;
	/* The window's progress line: "sampling", "profiling"; NULL: none. */
	const char *verb;

	/* Optional, before the tracer check: RUN_GO_ON or an exit code. */
	int (*check)(void *c, struct run *run);
	/* Opens and starts the command's profiler into run->p, saying
	 * itself what went wrong: 0 or an exit code. */
	int (*open)(void *c, struct run *run);
	/* Optional: opens (not starts) the command's profiler on @pid, one
	 * of a set of processes; -errno with @err why. The command takes a
	 * set (options_set_given()) where it has this. */
	int (*open_member)(void *c, const struct run *run, pid_t pid, struct profiler **ret,
			   char *err, size_t errlen);
	/* Whether the set may be every process of the machine (a cgroup
	 * hierarchy's root, `--cgroup /`): commands that read the kernel's
	 * counts of each thread; one that stops or loads into every process
	 * refuses it. */
	bool whole_host;
	/* What the progress line counts, singular and plural ("sample",
	 * "samples"): profiler_count() of the command's profiler. */
	const char *counts[2];
	/* Optional, instead: the end of the progress line ("12 threads"). */
	void (*progress)(const void *c, const struct run *run, char *buf, size_t size);
	/* Optional: says how the window ended, instead of the target's exit
	 * or the Ctrl-C. */
	void (*ended)(const void *c, const struct run *run);
	/* After the write, to stderr. */
	void (*summary)(const void *c, const struct run *run);
};

/*
 * A run's first half, before anything is touched: the target's checks
 * (@o->pid becomes the process when a thread's id was given), check(), the
 * tracer, the output prepared. RUN_GO_ON, or the exit code to leave with
 * (EXIT_OK too: check() may have done the command's work).
 */
int run_prepare(const struct run_ops *ops, void *c, struct run *run, struct common_opts *o,
		uint64_t duration_ns, int argc, char **argv);

/* Its second half: open(), the window, the output written (or aborted),
 * the summary and epilogue. The exit code; run_release() after. */
int run_profile(const struct run_ops *ops, void *c, struct run *run);
void run_release(struct run *run);

/* Both halves, for a command with no step between them. */
int run_command(const struct run_ops *ops, void *c, struct common_opts *o,
		uint64_t duration_ns, int argc, char **argv);

/* cpu's and wall's open(), once profiler_new_*() returned @r (-errno with
 * @why, or 0 with run->p): the profiler started. 0 or an exit code after
 * saying why not. */
int run_start_sampler(struct run *run, int r, const char *why);

/* The end of a progress line, after "VERB pid N (comm): 3s / 30s, ". */
typedef void (*run_progress_fn)(const void *arg, char *buf, size_t size);

struct run_window_opts {
	const struct target *target;
	const char *label;     /* what the lines call the target; NULL: "pid N (comm)" */
	uint64_t duration_ns;
	const char *verb;      /* "sampling", "recording"; NULL: no progress line */
	run_progress_fn what;
	const void *arg;
	int *errors; /* profilers_run_opts' */
};

/*
 * The window of @n started profilers as every command runs it: the
 * progress line about once a second, SIGINT and SIGTERM ending it, the
 * target's exit in *@ret_exited; then stopped. profilers_window()'s result.
 */
int run_window(struct profiler **ps, size_t n, const struct run_window_opts *o,
	       bool *ret_exited, char *err, size_t errlen);

/* Says that the window ended with the target's exit (@exited; @pid 0: every
 * process of a set) or an interrupt, and that what was collected is
 * written; nothing otherwise. */
void run_say_ended(pid_t pid, bool exited);

/* run-set.c: the set of processes @o gives, listed and checked into @run
 * (what run_prepare() does for one). RUN_GO_ON, or the exit code. */
int run_prepare_set(const struct run_ops *ops, struct run *run, struct common_opts *o);
/* A profiler a process of the set, as one, started into run->p (those
 * that join the set in the window taken too): 0 or an exit code, said. */
int run_open_set(const struct run_ops *ops, void *c, struct run *run);
void run_set_free(struct run_set *s);
/* The set's summary: each process's count, and those left out and why;
 * how many of those named were left out. */
unsigned run_summary_set(const struct run_ops *ops, const struct run *run);

/* Go's text layout (--debug @debug) of @run's profiler, into memory: all
 * of the text or nothing. */
int run_render_text(const struct run *run, int debug, char **ret, size_t *ret_len);

#endif
