/*
 * Checks that come before attaching to anything, shared by every command:
 * does the target exist, is it a user process we may look at, and what to
 * tell the user when not. Each returns 0 or the exit code to leave with,
 * after printing the error and its hint.
 */
#ifndef CPROF_PREFLIGHT_H
#define CPROF_PREFLIGHT_H

#include <stdbool.h>

#include "options.h"
#include "output.h"
#include "target/target.h"

/* Existence, kernel thread, zombie, self, other user's process, 32-bit.
 * A thread's id is taken for its process, and said: @ret->pid is that. */
int preflight_target(pid_t pid, struct target *ret);

/* EXIT_TARGET with a message naming the tracer when @t is already traced;
 * @what completes "cannot ... pid N". 0 otherwise. */
int preflight_not_traced(const struct target *t, const char *what);

/*
 * What every profiling command does first: quiet or not, the target's
 * checks (@o->pid becomes the process when a thread's was given), and the
 * output decided writable before anything is attached (@binary: pprof).
 */
int preflight_command(struct common_opts *o, bool binary, struct target *ret_target,
		      struct output *ret_out);

/* Raises RLIMIT_NOFILE's soft limit to the hard one (per-thread events need
 * one descriptor per thread and cpu). */
void preflight_raise_nofile(void);

#endif
