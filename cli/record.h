/*
 * cprof record: every kind of profile of one process in one window. The
 * command (cmd-record.c) runs the profilers; what it took is a struct
 * record, which record-summary.c writes as summary.txt and manifest.json.
 */
#ifndef CPROF_RECORD_H
#define CPROF_RECORD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "profile/profile.h"
#include "profiler/kinds.h"
#include "profiler/profiler.h"
#include "target/target.h"

/* The kinds (lib/profiler/kinds.h), in the order they are written;
 * THREADS_END is the threads' second snapshot, asked with THREADS. */
enum record_kind {
	RK_CPU = KIND_CPU,
	RK_WALL = KIND_WALL,
	RK_THREADS = KIND_THREADS,
	RK_HEAP = KIND_HEAP,
	RK_BLOCK = KIND_BLOCK,
	RK_MUTEX = KIND_MUTEX,
	RK_THREADCREATE = KIND_THREADCREATE,
	RK_THREADS_END = KIND_N,
	RK_N
};

struct record_entry {
	const char *name;          /* "cpu", ..., "threads-end" */
	const char *file;          /* its pprof file's name */
	bool asked;
	struct profiler *p;        /* NULL: refused, or not asked */
	struct profile *profile;   /* built */
	bool written;
	struct profiler_facts facts;
	char refused[2048];        /* why it was not written; "" otherwise */
	bool gone;                 /* not started: the process had exited (no refusal) */
};

struct record {
	pid_t pid;
	const char *comm, *exe, *command_line, *dir;
	uint64_t duration_ns;      /* asked */
	unsigned interval;         /* its place in a --loop, from 1; 0 alone */
	int64_t start_realtime_ns; /* the window's */
	uint64_t window_ns;
	bool interrupted, target_exited;
	int exit;                  /* the code the run exits with, said in the manifest */
	struct symbolizer *sym;    /* every kind's modules, read once; NULL: each its own */
	struct record_entry e[RK_N];
};

/* One window of every kind asked for, into a new directory. */
struct record_opts {
	const char *dir;           /* NULL: ./cprof-PID-YYYYmmdd-HHMMSS */
	uint64_t duration_ns;
	const bool *kinds;         /* RK_N of them */
	const char *command_line;
	bool json;                 /* the manifest to stdout as well */
	unsigned interval;         /* as struct record's */
};

/* The exit code (report.h); what went wrong is said on stderr. */
int record_once(const struct record_opts *o, const struct target *t);

/*
 * --loop: window after window of @interval_ns into @o->dir (made; NULL:
 * the default name), each in a directory named by its start, until a
 * cancel, the target's exit, a window that wrote nothing, or @total_ns
 * (0: no end). Beyond @keep_last (0: none) windows, the oldest of this
 * run's is removed. EXIT_OK when every window wrote every kind, else
 * EXIT_PARTIAL when any wrote something, else the first window's code.
 */
int record_loop(const struct record_opts *o, uint64_t interval_ns, uint64_t total_ns,
		unsigned keep_last, const struct target *t);

/* summary.txt of @r: the window, each kind's top functions, the threads
 * by state, every kind refused and why. 0 or -errno. */
int record_write_summary(const struct record *r, FILE *f);

/*
 * Why @e was not written, in two parts: its reason (the first *@ret_len
 * bytes of the text returned) and what to do about it (the return value of
 * @ret_hint: its "hint: " lines, NULL when it has none). Either may be NULL.
 */
const char *record_refusal(const struct record_entry *e, size_t *ret_len,
			   const char **ret_hint);

/* Says on stderr which kinds were not written and why, each reason once. */
void record_report_refusals(const struct record *r);

/* manifest.json of @r. 0 or -errno. */
int record_write_manifest(const struct record *r, FILE *f);

#endif
