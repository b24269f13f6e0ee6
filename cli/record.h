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
#include "profiler/profiler.h"

/* The kinds, in the order they are written; THREADS_END is the threads'
 * second snapshot, asked with THREADS. */
enum record_kind {
	RK_CPU,
	RK_WALL,
	RK_THREADS,
	RK_HEAP,
	RK_BLOCK,
	RK_MUTEX,
	RK_THREADCREATE,
	RK_THREADS_END,
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
};

struct record {
	pid_t pid;
	const char *comm, *exe, *command_line, *dir;
	uint64_t duration_ns;      /* asked */
	int64_t start_realtime_ns; /* the window's */
	uint64_t window_ns;
	bool interrupted, target_exited;
	struct record_entry e[RK_N];
};

/* summary.txt of @r: the window, each kind's top functions, the threads
 * by state, every kind refused and why. 0 or -errno. */
int record_write_summary(const struct record *r, FILE *f);

/* manifest.json of @r. 0 or -errno. */
int record_write_manifest(const struct record *r, FILE *f);

#endif
