/*
 * cprof record's directory: made beside its final name under a temporary
 * one, filled, then renamed into place, so that it appears whole or not at
 * all and never over an earlier one. Its files: one pprof profile per kind
 * (named as the commands name theirs), the thread dumps in Go's debug=2
 * text, summary.txt (what an on-call engineer reads first) and
 * manifest.json (what a script reads).
 */
#ifndef CPROF_RECORD_DIR_H
#define CPROF_RECORD_DIR_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "profile/profile.h"

struct record_dir {
	char final[PATH_MAX]; /* where it goes */
	char tmp[PATH_MAX];   /* where it is made; "" once renamed or removed */
};

/*
 * @path (NULL: ./cprof-PID-YYYYmmdd-HHMMSS, from @pid and now) must not
 * exist; its temporary twin is made. 0, or -errno with @why saying what
 * (-EEXIST: an earlier record is there).
 */
int record_dir_make(struct record_dir *d, const char *path, pid_t pid, char *why, size_t whylen);

/*
 * --loop's directory of windows: @path (NULL: the default name) made in
 * @buf, a new one as record_dir_make()'s. 0 or -errno with @why.
 */
int record_dir_make_parent(char *buf, size_t size, const char *path, pid_t pid, char *why,
			   size_t whylen);

/* Now's local time as a window's name: YYYYmmdd-HHMMSS. */
void record_dir_stamp(char *buf, size_t size);

/* A record's directory and its files removed (it holds no subdirectory).
 * 0 or -errno. */
int record_dir_remove(const char *path);

/* @name in the temporary directory, opened for writing ("we"). */
FILE *record_dir_open(const struct record_dir *d, const char *name);

/* @p as gzipped profile.proto in @name. 0 or -errno. */
int record_dir_write_profile(const struct record_dir *d, const char *name,
			     const struct profile *p);

/* Renamed into place (never over anything): 0 or -errno. */
int record_dir_commit(struct record_dir *d);

/* The temporary directory and what is in it removed (not after commit). */
void record_dir_abort(struct record_dir *d);

#endif
