/*
 * A client of `cprof serve` for the tests: start it on a target and learn
 * where it listens, GET a path with a plain HTTP/1.1 client (the reply
 * parsed into status, headers and body), end it with a signal.
 */
#ifndef CPROF_TEST_SERVE_CLIENT_H
#define CPROF_TEST_SERVE_CLIENT_H

#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testhelp.h"

/* How long serve may take to say where it listens (the agent's load). */
#define SERVE_READY_MS 30000
/* A request's answer, the windows' seconds included. */
#define REPLY_MS 30000

struct server {
	pid_t pid;
	const char *log;
	char addr[128]; /* "127.0.0.1:PORT" or "unix:/PATH" */
};

/* Starts `cprof serve -p PID ARGS...` and waits for its "serving" line. */
static inline void serve_start(struct server *s, pid_t target, const char *const *args)
{
	static int started;
	const char *argv[24] = { CPROF_BIN, "serve", "-p", th_pid_str(target) };
	uint64_t t0 = th_now_ns();
	char name[32];
	size_t n = 4;

	for (size_t i = 0; args && args[i]; i++)
		argv[n++] = args[i];
	snprintf(name, sizeof(name), "serve-%d.log", started++);
	s->addr[0] = '\0';
	s->log = th_tmp_path(name);
	s->pid = th_spawn_daemon(argv, s->log);
	while (th_now_ns() - t0 < SERVE_READY_MS * 1000000ULL) {
		uint8_t *buf = NULL;
		size_t len = 0;
		char *text = NULL, *at;

		if (th_read_file(s->log, &buf, &len) == 0)
			text = strndup((char *)buf, len);
		free(buf);
		if (text && (at = strstr(text, "serving http://")))
			sscanf(at + strlen("serving http://"), "%127[^/]", s->addr);
		else if (text && (at = strstr(text, "/debug/pprof/ on unix:")))
			sscanf(at + strlen("/debug/pprof/ on "), "%127s", s->addr);
		free(text);
		if (s->addr[0])
			return;
		cr_assert(th_alive(s->pid), "cprof serve ended before serving");
		th_sleep_ms(50);
	}
	cr_assert_fail("cprof serve said nothing of where it listens in %d ms",
		       SERVE_READY_MS);
}

/* A connection to @addr; with @nonblock, one the kernel could not take
 * at once fails rather than waits. */
static inline int connect_ex(const char *addr, int nonblock)
{
	int fd;

	if (!strncmp(addr, "unix:", 5)) {
		struct sockaddr_un sun = { .sun_family = AF_UNIX };

		snprintf(sun.sun_path, sizeof(sun.sun_path), "%.*s", (int)sizeof(sun.sun_path) - 1,
			 addr + 5);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | nonblock, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
			close(fd);
			return -1;
		}
		return fd;
	}
	{
		struct sockaddr_in sin = { .sin_family = AF_INET };
		unsigned port = 0;

		sscanf(strchr(addr, ':') + 1, "%u", &port);
		sin.sin_port = htons((uint16_t)port);
		sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | nonblock, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 &&
		    errno != EINPROGRESS) {
			close(fd);
			return -1;
		}
	}
	return fd;
}

static inline int connect_to(const char *addr)
{
	return connect_ex(addr, 0);
}

struct reply {
	int status;
	char *head; /* the status line and headers */
	char *body;
	size_t body_len;
};

static inline void reply_release(struct reply *r)
{
	free(r->head);
	free(r->body);
	memset(r, 0, sizeof(*r));
}

/* What the connection @fd says until it closes (or @timeout_ms), parsed. */
static inline void read_reply(int fd, struct reply *r, int timeout_ms)
{
	char *buf = NULL, *sep;
	size_t len = 0, alloc = 0;
	uint64_t t0 = th_now_ns();

	memset(r, 0, sizeof(*r));
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if ((int)((th_now_ns() - t0) / 1000000) > timeout_ms)
			break;
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		if (len + 65536 > alloc) {
			alloc = (len + 65536) * 2;
			buf = realloc(buf, alloc + 1);
			cr_assert_not_null(buf);
		}
		n = read(fd, buf + len, alloc - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	if (!buf)
		return;
	buf[len] = '\0';
	sep = strstr(buf, "\r\n\r\n");
	if (!sep) {
		free(buf);
		return;
	}
	*sep = '\0';
	sscanf(buf, "HTTP/1.%*d %d", &r->status);
	r->head = buf;
	r->body_len = len - (size_t)(sep + 4 - buf);
	r->body = malloc(r->body_len + 1);
	memcpy(r->body, sep + 4, r->body_len);
	r->body[r->body_len] = '\0';
}

/* GET @path with @headers (each "Name: value\r\n", may be NULL). */
static inline void get(const struct server *s, const char *path, const char *headers,
		       struct reply *r)
{
	char req[1024];
	int fd = connect_to(s->addr);

	cr_assert_geq(fd, 0, "cannot connect to %s: %s", s->addr, strerror(errno));
	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n",
		 path, headers ? headers : "");
	cr_assert_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	read_reply(fd, r, REPLY_MS);
	close(fd);
}

static inline bool has_header(const struct reply *r, const char *line)
{
	return r->head && strcasestr(r->head, line);
}

/* The whole seconds a 429's Retry-After asks, or 0. */
static inline int retry_after_s(const struct reply *r)
{
	const char *at = r->head ? strcasestr(r->head, "\r\nRetry-After: ") : NULL;

	return at ? (int)strtol(at + 15, NULL, 10) : 0;
}

/* get(), as a client that honours 429: a goroutine profile waits for its
 * turn, which a snapshot drawn out on a loaded host puts off (serve.h's
 * SERVE_SNAPSHOT_SHARE). Five tries at most. */
static inline void get_in_turn(const struct server *s, const char *path, struct reply *r)
{
	for (int i = 0;; i++) {
		get(s, path, NULL, r);
		if (r->status != 429 || i == 4)
			return;
		cr_log_info("%s: 429, again in %d s", path, retry_after_s(r));
		th_sleep_ms(1000 * (retry_after_s(r) > 1 ? retry_after_s(r) : 1));
		reply_release(r);
	}
}

/* serve's end, waited for: its exit code. Its log (where a sanitized build
 * reports) must hold no sanitizer's report. */
static inline int serve_wait(struct server *s)
{
	uint8_t *log = NULL;
	size_t len = 0;
	int st;

	st = th_wait_exit(s->pid, 20000);
	cr_assert_neq(st, -1, "cprof serve did not end within 20 s of its signal");
	if (th_read_file(s->log, &log, &len) == 0)
		cr_expect(!memmem(log, len, "Sanitizer", 9) && !memmem(log, len, "runtime error:", 14),
			  "serve's log:\n%.*s", (int)len, (char *)log);
	free(log);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Ends serve with @sig: its exit code (serve_wait()). */
static inline int serve_stop(struct server *s, int sig)
{
	cr_assert(th_signal(s->pid, sig));
	return serve_wait(s);
}

#endif
