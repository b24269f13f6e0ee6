/*
 * cprof heap --keep, the command's side: sampling that goes on after the
 * profile is written, in a child that stays as the agent's peer and serves
 * the protocol of lib/session/keep.h; a later run asks it for the profile
 * or to stop. Forking, the foreground's wait and every message are here.
 */
#ifndef CPROF_HEAP_KEEP_H
#define CPROF_HEAP_KEEP_H

#include <stdbool.h>
#include <stddef.h>

#include "options.h"
#include "session/keep.h"

/*
 * A later run's side, before anything is touched: with @stop, ends @t's
 * background session; else writes the profile since it began to @o's
 * output (@index, --debug, the view) and refuses @starting a second one
 * (--keep or -d). The exit code, or -1 when no session runs (and not @stop).
 */
int keep_ask(const struct target *t, const struct common_opts *o, const char *index, bool stop,
	     bool starting);

/*
 * --keep, before the agent is loaded: takes @t's socket name (keep_bind())
 * and forks. The work goes on in the child, which stays as the agent's
 * peer; this process waits for its word that the first profile is written
 * and the socket listens (a byte: its exit code) and returns it, passing
 * Ctrl-C on. Returns -1 in the child, with the bound socket in *@ret_lfd
 * and the pipe to the foreground in *@ret_code_fd; an exit code here.
 */
int keep_start(const struct target *t, int *ret_lfd, int *ret_code_fd);

/*
 * The child, once the first profile (@written) is out: listens on @lfd,
 * tells the foreground @code through @code_fd, goes quiet and serves @t's
 * session, kept by @ap (keep_serve()), until it ends. The exit code.
 */
int keep_go_on(int lfd, int code_fd, int code, struct agent_profiler *ap, const struct target *t,
	       keep_render_fn render, void *ctx, const char *written);

/* The child, when it will not serve: @ap's session (@ap may be NULL) ends
 * unless @code is EXIT_OK, the foreground is told @code. Returns @code. */
int keep_give_up(int lfd, int code_fd, int code, struct agent_profiler *ap);

#endif
