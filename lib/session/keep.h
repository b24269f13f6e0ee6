/*
 * The protocol of cprof heap --keep's background session, Go's always-on
 * heap profile: the cprof process that loaded the agent stays as its peer
 * (if it dies, the agent unhooks by itself within a second), keeps
 * draining the records into the same profile, and answers, on an abstract
 * unix socket named after the target (pid and start time), the requests
 * of later runs:
 *
 *   "profile INDEX DEBUG\n" -> "ok LEN\n" + the profile since sampling began
 *   "stop\n"                -> the hooks go, "ok stopped\n", the session ends
 *
 * Only root and the daemon's own user are answered (SO_PEERCRED), and no
 * client holds the serve loop for more than a few seconds, nor stops the
 * agent's heartbeat while it is waited for. The command's side (forking, messages) is
 * cli/heap-keep.c.
 */
#ifndef CPROF_SESSION_KEEP_H
#define CPROF_SESSION_KEEP_H

#include <stdbool.h>
#include <stddef.h>

#include "target/target.h"
#include "util/cancel.h"

/* What a client takes from a background session at most (a profile), and
 * how long it waits for the header (the session renders it first), then
 * for the body. */
#define KEEP_BODY_MAX (256u << 20)
#define KEEP_CLIENT_TIMEOUT_MS 30000

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

/*
 * Daemon: serves @t's session, kept by @p (agent_profiler_tend()), through
 * @fd (a keep_listen()ed socket, closed here) until "stop", the target's
 * exit, or @cancel (may be NULL) says so; then ends the session (the
 * hooks go). @p NULL: the protocol alone, no agent (tests).
 */
struct agent_profiler;
void keep_serve(int fd, struct agent_profiler *p, const struct target *t, keep_render_fn render,
		void *ctx, const struct cancel *cancel);

#endif
