/* cprof serve's HTTP server on libmicrohttpd (http.h). */
#include "serve/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/util.h"

/* As Go's net.Listen: the kernel's own bound (net.core.somaxconn). */
#define LISTEN_BACKLOG SOMAXCONN

#define STOPPING HTTP_STOPPING "\n"

enum request_state { REQ_NEW, REQ_HANDLED, REQ_PARKED, REQ_RESUMED };

struct http_request {
	struct http_server *server;
	struct MHD_Connection *conn;
	enum request_state state;
	char *path;
	/* An answer given while parked, queued once MHD calls back. */
	struct MHD_Response *resp;
	unsigned status;
	struct http_request *next;
};

struct http_server {
	struct http_server_opts o;
	struct MHD_Daemon *d;
	int fd;
	char address[sizeof(((struct sockaddr_un *)0)->sun_path) + 64];
	char *unix_path; /* the socket made, removed at the end */
	ino_t unix_ino;
	/* Every request from its headers to its reply's last byte (or its
	 * connection's end): parked ones, and the replies under way. */
	struct http_request *live;
	bool draining;  /* http_server_drain(): no request is routed ... */
	unsigned stall_s; /* ... and a client silent this long is dropped */
	int given_up;   /* replies it gave up on */
};

static void live_remove(struct http_server *s, struct http_request *req)
{
	for (struct http_request **pp = &s->live; *pp; pp = &(*pp)->next)
		if (*pp == req) {
			*pp = req->next;
			return;
		}
}

/* Constant time in the token's length: no timing oracle for a guess. */
static bool token_ok(const struct http_server *s, struct MHD_Connection *c)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	const char *t = s->o.token;
	size_t n = strlen(t), hn;
	unsigned char diff = 0;

	if (!h || strncasecmp(h, "Bearer ", 7) != 0)
		return false;
	h += 7;
	hn = strlen(h);
	for (size_t i = 0; i < n; i++)
		diff |= (unsigned char)t[i] ^ (unsigned char)(i < hn ? h[i] : 0);
	return diff == 0 && hn == n;
}

static struct MHD_Response *make_response(const char *content_type, char *body, size_t len,
					  const char *const *headers)
{
	struct MHD_Response *r;

	if (!body)
		len = 0; /* a body that could not be made: an empty one */
	r = MHD_create_response_from_buffer(len, body ? body : (char *)"",
					    body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(body);
		return NULL;
	}
	if (content_type)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	for (size_t i = 0; headers && headers[i] && headers[i + 1]; i += 2)
		MHD_add_response_header(r, headers[i], headers[i + 1]);
	return r;
}

static enum MHD_Result queue(struct http_request *req)
{
	enum MHD_Result r = MHD_queue_response(req->conn, req->status, req->resp);

	MHD_destroy_response(req->resp);
	req->resp = NULL;
	req->state = REQ_HANDLED;
	return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	struct http_server *s = cls;
	struct http_request *req = *con_cls;

	(void)method;
	(void)version;
	(void)upload;
	if (!req) {
		req = calloc(1, sizeof(*req));
		if (!req)
			return MHD_NO;
		req->server = s;
		req->conn = c;
		req->path = strdup(url);
		req->next = s->live;
		s->live = req;
		*con_cls = req;
		/* Answered from the next call on, once the request is whole: a
		 * response queued before would close the connection. */
		return req->path ? MHD_YES : MHD_NO;
	}
	/* Bodies are read and dropped: no endpoint takes one. */
	if (*upload_size) {
		*upload_size = 0;
		return MHD_YES;
	}
	/* Resumed without an answer (none could be made): the connection
	 * ends. */
	if (req->state == REQ_RESUMED)
		return req->resp ? queue(req) : MHD_NO;
	if (req->state != REQ_NEW)
		return MHD_YES;
	req->state = REQ_HANDLED;
	if (s->draining) {
		static const char *const h[] = { MHD_HTTP_HEADER_CONNECTION, "close", NULL };

		MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, s->stall_s);
		return http_reply(req, MHD_HTTP_SERVICE_UNAVAILABLE, HTTP_TEXT, strdup(STOPPING),
				  sizeof(STOPPING) - 1, h) == 0 ? MHD_YES : MHD_NO;
	}
	if (s->o.token && !token_ok(s, c)) {
		static const char *const h[] = { "WWW-Authenticate", "Bearer", NULL };

		return http_reply(req, MHD_HTTP_UNAUTHORIZED, HTTP_TEXT, strdup("Unauthorized\n"), 13,
				  h) == 0 ? MHD_YES : MHD_NO;
	}
	s->o.handle(s->o.arg, req);
	return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode why)
{
	struct http_server *s = cls;
	struct http_request *req = *con_cls;

	(void)c;
	if (!req)
		return;
	if (s->draining && why == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED)
		s->given_up++;
	live_remove(s, req);
	if (req->resp)
		MHD_destroy_response(req->resp);
	free(req->path);
	free(req);
	*con_cls = NULL;
}

/* MHD's own messages are not printed: lib/ never does. */
static void on_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	(void)fmt;
	(void)ap;
}

static int listen_unix(struct http_server *s, const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct stat st;
	mode_t old;
	int fd, r;

	if (strlen(path) >= sizeof(sun.sun_path) || path[0] != '/') {
		snprintf(err, errlen, "a unix socket's path must be absolute and under %zu bytes",
			 sizeof(sun.sun_path));
		return -EINVAL;
	}
	strcpy(sun.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* Made 0600 from the start: there is no moment where others may connect. */
	old = umask(0177);
	r = bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 ? -errno : 0;
	umask(old);
	if (r == 0 && fstat(fd, &st) == 0 && stat(path, &st) == 0)
		s->unix_ino = st.st_ino;
	if (r < 0) {
		snprintf(err, errlen, "cannot bind %s: %s", path, strerror(-r));
		close(fd);
		return r;
	}
	s->unix_path = strdup(path);
	snprintf(s->address, sizeof(s->address), "unix:%s", path);
	return fd;
}

/* 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104: reachable from this host only. */
static bool is_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24 == 127;
	if (ss->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

static int listen_inet(struct http_server *s, const char *spec, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[256], port[16], shown[INET6_ADDRSTRLEN];
	const char *colon = strrchr(spec, ':');
	size_t hl;
	int fd = -1, one = 1, r;

	hl = colon ? (size_t)(colon - spec) : 0;
	if (!colon || hl == 0 || hl >= sizeof(host) || strlen(colon + 1) >= sizeof(port) ||
	    !colon[1]) {
		snprintf(err, errlen, "expected HOST:PORT (127.0.0.1:6060, [::1]:6060) or "
			 "unix:/PATH");
		return -EINVAL;
	}
	memcpy(host, spec, hl);
	host[hl] = '\0';
	if (host[0] == '[' && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = '\0';
	}
	strcpy(port, colon + 1);
	r = getaddrinfo(host, port, &hints, &ai);
	if (r != 0) {
		snprintf(err, errlen, "cannot resolve '%s': %s", spec, gai_strerror(r));
		return -EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot bind %s: %s", spec, strerror(-r));
		goto out;
	}
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;

		inet_ntop(AF_INET6, &a->sin6_addr, shown, sizeof(shown));
		snprintf(s->address, sizeof(s->address), "[%s]:%u", shown, ntohs(a->sin6_port));
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;

		inet_ntop(AF_INET, &a->sin_addr, shown, sizeof(shown));
		snprintf(s->address, sizeof(s->address), "%s:%u", shown, ntohs(a->sin_port));
	}
	/* What was bound decides, not how it was named: a name can resolve
	 * to any address. */
	if (!s->o.token && !is_loopback(&ss)) {
		snprintf(err, errlen, "'%s' is %s, not a loopback address; without a token only "
			 "127.0.0.0/8 and ::1 are served", spec, s->address);
		r = -EADDRNOTAVAIL;
		goto out;
	}
	r = fd;
	fd = -1;
out:
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	return r;
}

int http_server_new(struct http_server **ret, const struct http_server_opts *o, char *err,
		    size_t errlen)
{
	struct http_server *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return -ENOMEM;
	s->o = *o;
	s->fd = -1;
	if (!strncmp(o->listen, "unix:", 5))
		r = listen_unix(s, o->listen + 5, err, errlen);
	else
		r = listen_inet(s, o->listen, err, errlen);
	if (r < 0)
		goto out_free;
	s->fd = r;
	if (listen(s->fd, LISTEN_BACKLOG) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot listen on %s: %s", o->listen, strerror(-r));
		goto out_free;
	}
	s->d = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL,
				on_request, s,
				MHD_OPTION_LISTEN_SOCKET, (MHD_socket)s->fd,
				MHD_OPTION_CONNECTION_LIMIT, o->max_connections,
				MHD_OPTION_CONNECTION_TIMEOUT, o->idle_timeout_s,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, o->connection_memory,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
				MHD_OPTION_EXTERNAL_LOGGER, on_log, NULL,
				MHD_OPTION_END);
	if (!s->d) {
		r = -EIO;
		snprintf(err, errlen, "libmicrohttpd would not start on %s", o->listen);
		goto out_free;
	}
	*ret = s;
	return 0;

out_free:
	http_server_free(s);
	return r;
}

/* No connection is taken any more: a client that connects now is refused
 * by the kernel, not kept in the backlog of a server that is going. MHD
 * closes the listening socket at its stop unless quiesced off it; then it
 * is ours to close. */
static void stop_listening(struct http_server *s)
{
	if (MHD_quiesce_daemon(s->d) != MHD_INVALID_SOCKET && s->fd >= 0)
		close(s->fd);
	s->fd = -1;
}

/* Suspended connections must be resumed before the stop: with an
 * answer, or, out of memory for one, without (on_request() ends those). */
static void answer_parked(struct http_server *s)
{
	for (struct http_request *req = s->live; req; req = req->next) {
		if (req->state != REQ_PARKED)
			continue;
		if (http_reply(req, MHD_HTTP_SERVICE_UNAVAILABLE, HTTP_TEXT, strdup(STOPPING),
			       sizeof(STOPPING) - 1, NULL) < 0) {
			req->state = REQ_RESUMED;
			MHD_resume_connection(req->conn);
		}
	}
}

void http_server_free(struct http_server *s)
{
	struct stat st;

	if (!s)
		return;
	if (s->d) {
		stop_listening(s);
		answer_parked(s);
		MHD_run(s->d);
		MHD_stop_daemon(s->d);
	}
	if (s->fd >= 0)
		close(s->fd);
	/* Only the socket we made: not a file put there since. */
	if (s->unix_path && stat(s->unix_path, &st) == 0 && S_ISSOCK(st.st_mode) &&
	    st.st_ino == s->unix_ino)
		unlink(s->unix_path);
	free(s->unix_path);
	free(s);
}

const char *http_server_address(const struct http_server *s)
{
	return s->address;
}

int http_server_run(struct http_server *s, int timeout_ms)
{
	return MHD_run_wait(s->d, timeout_ms) == MHD_YES ? 0 : -EIO;
}

int http_server_drain(struct http_server *s, unsigned stall_s, unsigned max_ms)
{
	uint64_t end = now_monotonic_ns() + (uint64_t)max_ms * 1000000;
	int r = 0, left = 0;

	s->draining = true;
	s->stall_s = stall_s;
	stop_listening(s);
	answer_parked(s);
	/* MHD counts the silence from a connection's last byte either way. */
	for (struct http_request *req = s->live; req; req = req->next)
		MHD_set_connection_option(req->conn, MHD_CONNECTION_OPTION_TIMEOUT, stall_s);
	while (s->live && r == 0) {
		uint64_t now = now_monotonic_ns();

		if (now >= end)
			break;
		r = http_server_run(s, (int)((end - now) / 1000000) + 1);
	}
	for (struct http_request *req = s->live; req; req = req->next)
		left++;
	return r < 0 ? r : s->given_up + left;
}

const char *http_path(const struct http_request *req)
{
	return req->path;
}

const char *http_arg(const struct http_request *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

int http_reply(struct http_request *req, unsigned status, const char *content_type, char *body,
	       size_t len, const char *const *headers)
{
	struct MHD_Response *r = make_response(content_type, body, len, headers);

	if (!r)
		return -ENOMEM;
	if (req->state != REQ_PARKED) {
		enum MHD_Result q = MHD_queue_response(req->conn, status, r);

		MHD_destroy_response(r);
		return q == MHD_YES ? 0 : -EIO;
	}
	req->resp = r;
	req->status = status;
	req->state = REQ_RESUMED;
	MHD_resume_connection(req->conn);
	return 0;
}

int http_park(struct http_request *req)
{
	if (req->state != REQ_HANDLED)
		return -EINVAL;
	MHD_suspend_connection(req->conn);
	req->state = REQ_PARKED;
	return 0;
}

bool http_abandoned(const struct http_request *req)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct pollfd pfd;

	if (!ci)
		return false;
	pfd = (struct pollfd){ .fd = ci->connect_fd, .events = POLLRDHUP };
	return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}
