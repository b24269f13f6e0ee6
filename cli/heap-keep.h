/*
 * cprof heap --keep: sampling that goes on after the profile is written,
 * Go's always-on heap profile. The cprof process that loaded the agent
 * stays, in the background, as the agent's peer (if it dies, the agent
 * unhooks by itself within a second): it keeps draining the records into
 * the same profile, and answers, on an abstract unix socket named after the
 * target (pid and start time), the requests of later runs:
 *
 *   "profile INDEX DEBUG\n" -> "ok LEN\n" + the profile since sampling began
 *   "stop\n"                -> the hooks go, "ok stopped\n", the session ends
 *
 * Only root and the daemon's own user are answered (SO_PEERCRED).
 */
#ifndef CPROF_HEAP_KEEP_H
#define CPROF_HEAP_KEEP_H

#include <stdbool.h>
#include <stddef.h>

#include "channel/channel.h"
#include "options.h"
#include "target/target.h"

/* Client: a connection to @t's background session, -ENOENT if none, or
 * -EACCES when a process of another user (not root) holds its name. */
int keep_connect(const struct target *t);

/* Client: sends @request and reads the reply's body (malloc'd) into *@ret.
 * 0, or -EPROTO with *@ret holding the daemon's error text (printable),
 * -EFBIG for a body over 256 MiB, -ETIMEDOUT when it went silent. */
int keep_request(int fd, const char *request, char **ret, size_t *ret_len);

/* Renders the profile since sampling began, for a "profile" request. */
typedef int (*keep_render_fn)(void *ctx, const char *index, int debug, char **ret,
			      size_t *ret_len);

/* "@cprof-heap/PID/STARTTIME", @t's socket name as ss(8) shows it, for
 * messages. */
void keep_socket_label(const struct target *t, char *buf, size_t size);

/*
 * Daemon, first step, before the target is touched: a socket bound to @t's
 * name, not listening yet (a client's connect is refused, as when no
 * session runs, until keep_listen()). Holding the name early is what lets
 * a name already taken (-EADDRINUSE: another --keep starting, or another
 * program) be refused before any hook goes in. The socket, or -errno.
 */
int keep_bind(const struct target *t);

/* Daemon: @fd (keep_bind()) starts accepting. 0 or -errno. */
int keep_listen(int fd);

/* Ends the agent's session on @ch: the hooks go (the agent confirms within
 * 2 s). 0 or -errno. */
int keep_end(struct channel *ch);

/*
 * Daemon: serves @t's session on @ch (draining into @h) through @fd (a
 * keep_listen()ed socket, closed here) until "stop", the target's exit, or
 * SIGINT/SIGTERM; then ends the session (the hooks go).
 */
void keep_serve(int fd, struct channel *ch, const struct target *t,
		const struct channel_handlers *h, keep_render_fn render, void *ctx);

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
 * session on @ch (keep_serve()) until it ends. The exit code.
 */
int keep_go_on(int lfd, int code_fd, int code, struct channel *ch, const struct target *t,
	       const struct channel_handlers *h, keep_render_fn render, void *ctx,
	       const char *written);

/* The child, when it will not serve: the session on @ch (may be NULL) ends
 * unless @code is EXIT_OK, the foreground is told @code. Returns @code. */
int keep_give_up(int lfd, int code_fd, int code, struct channel *ch);

#endif
