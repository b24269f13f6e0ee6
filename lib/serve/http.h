/*
 * An HTTP server for cprof serve, on libmicrohttpd, run from the caller's
 * loop (no thread of its own: the profilers it answers for are driven by
 * that loop too). A request the caller cannot answer at once (a window of
 * seconds) is parked: its connection is suspended until http_answer(), and
 * while parked the client going away is noticed (http_abandoned()).
 *
 * Bounded: connections, each one's memory (headers, URL and arguments
 * included: beyond it a request gets 431 or 414), and idle time (a client
 * that stops sending or reading is dropped). Nothing here prints.
 *
 * Its end: http_server_drain() writes the replies under way to their end,
 * then http_server_free() closes what is left.
 */
#ifndef CPROF_SERVE_HTTP_H
#define CPROF_SERVE_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http_server;
struct http_request;

/* The content type of every text reply, and the one said at the stop. */
#define HTTP_TEXT "text/plain; charset=utf-8"
#define HTTP_STOPPING "cprof serve is stopping"

struct http_server_opts {
	/* "HOST:PORT" (HOST an IPv4 or IPv6 address, "[::1]:6060"; port 0:
	 * any free one) or "unix:/PATH" (made mode 0600, removed at the end). */
	const char *listen;
	/* When set, only requests with "Authorization: Bearer <token>".
	 * Without, only a loopback address is listened on (what is bound is
	 * judged, not the name given: -EADDRNOTAVAIL). */
	const char *token;
	unsigned max_connections;
	unsigned idle_timeout_s;
	size_t connection_memory; /* per connection, headers included */
	/* Called once a request's headers are in (and its token checked):
	 * it answers (http_reply()) or parks (http_park()) @req. */
	void (*handle)(void *arg, struct http_request *req);
	void *arg;
};

/* Listening: 0 or -errno (@err says what of @o->listen was wrong). */
int http_server_new(struct http_server **ret, const struct http_server_opts *o, char *err,
		    size_t errlen);
void http_server_free(struct http_server *s);

/* Where it listens, as a URL's authority ("127.0.0.1:6060") or the socket's
 * path ("unix:/run/x.sock"). */
const char *http_server_address(const struct http_server *s);

/* Serves what is due, waiting up to @timeout_ms for it. 0 or -errno. */
int http_server_run(struct http_server *s, int timeout_ms);

/*
 * The stop: no connection is taken any more (the listening socket is
 * closed), a request that comes on one kept open gets 503 and its close,
 * parked requests get 503, and the replies under way are written to their
 * end. A client that reads nothing for @stall_s is dropped, and it all
 * takes @max_ms at most (a client that reads a byte at a time). Returns
 * how many replies it gave up on, or -errno. Only http_server_free() may
 * follow.
 */
int http_server_drain(struct http_server *s, unsigned stall_s, unsigned max_ms);

/* The request: its path (no query), its query argument @name or NULL. */
const char *http_path(const struct http_request *req);
const char *http_arg(const struct http_request *req, const char *name);

/*
 * Answers @req with @status, @content_type and @len bytes of @body (taken:
 * freed by the server; NULL for none). @headers: NULL-terminated pairs of
 * extra headers. A parked request is resumed. 0 or -errno.
 */
int http_reply(struct http_request *req, unsigned status, const char *content_type, char *body,
	       size_t len, const char *const *headers);

/* Suspends @req until http_reply(), which the caller owes it: a parked
 * request lives until answered (http_server_drain() and
 * http_server_free() answer those left). */
int http_park(struct http_request *req);

/* A parked request whose client has closed its end. */
bool http_abandoned(const struct http_request *req);

#endif
