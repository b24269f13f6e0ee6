/*
 * Where a profile goes. The output is decided before cprof attaches (a path
 * that cannot be written must not cost the target anything), written in one
 * go at the end, and never left truncated: a regular file is written to an
 * unnamed temporary (O_TMPFILE) in the same directory, synced, then linked
 * and renamed over the destination. If cprof dies first, nothing is left.
 * Devices, FIFOs and stdout ("-") are written in place. A symbolic link is
 * followed only where it is safe (not another user's link in /tmp).
 */
#ifndef CPROF_OUTPUT_H
#define CPROF_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "profile/profile.h"
#include "view/view.h"

struct output {
	const char *path; /* as given; "-" is stdout */
	int fd;
	bool in_place;
	bool write_failed; /* the last commit failed writing, not building */
	char dir[4096];
	char tmp_name[4200]; /* named temporary when O_TMPFILE is unsupported */
};

/*
 * Checks and opens @path for writing; a @binary output refuses a terminal
 * as stdout. On failure returns -errno and writes
 * the reason and a hint in @why.
 */
int output_prepare(struct output *o, const char *path, bool binary, char *why, size_t whylen);

/* Writes @len bytes and puts the file in place. -errno on failure, and
 * then the destination is left as it was. */
int output_commit_bytes(struct output *o, const void *buf, size_t len);
/* output_commit_bytes() of @p as gzipped pprof. */
int output_commit_profile(struct output *o, const struct profile *p);
/* output_commit_bytes() of a view of @p (lib/view/): VIEW_PPROF is
 * output_commit_profile(); the others show p's default sample type, the
 * top table in @max_rows rows (0: all). */
int output_commit_view(struct output *o, const struct profile *p, enum view_format format,
		       size_t max_rows, const char *title);

/* The title of a view of @p written by `cprof CMD -p PID` (a flame graph's):
 * "cprof CMD -p PID: TYPE". */
void output_title(const char *cmd, pid_t pid, const struct profile *p, char *buf, size_t size);

/* Gives up: removes any temporary, closes. Safe after commit and twice. */
void output_abort(struct output *o);

/* Leaves the output to another process (a forked child writes it): closes
 * this one's descriptor, removes nothing. */
void output_forget(struct output *o);

/*
 * Reports a failed output_commit_*() (error @r): "cannot write the profile
 * to ..." and EXIT_OUTPUT when writing failed (a full disk included), "cannot
 * build the profile" and EXIT_FAIL when it failed before anything was written.
 */
int output_report_failure(const struct output *o, int r);

/* A short name for messages: the path, or "stdout". */
const char *output_name(const struct output *o);

#endif
