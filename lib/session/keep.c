#include "session/keep.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "session/profiler.h"
#include "util/util.h"

#define TICK_MS 10
#define REQUEST_MAX 128
/* What one client may hold the serve loop for, request and reply; the
 * heartbeat goes on meanwhile, the draining waits (the ring may fill). */
#define SERVE_REQUEST_MS 2000
#define SERVE_REPLY_MS 4000

/* "\0cprof-heap/PID/STARTTIME": a reused pid is another name. */
static socklen_t socket_name(const struct target *t, struct sockaddr_un *sun)
{
	unsigned long long start = 0;
	size_t n;

	target_start_time(t->pid, &start);
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	n = (size_t)snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1, "cprof-heap/%d/%llu",
			     t->pid, start);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

void keep_socket_label(const struct target *t, char *buf, size_t size)
{
	struct sockaddr_un sun;
	socklen_t len = socket_name(t, &sun);

	snprintf(buf, size, "@%.*s", (int)(len - offsetof(struct sockaddr_un, sun_path) - 1),
		 sun.sun_path + 1);
}

int keep_bind(const struct target *t)
{
	struct sockaddr_un sun;
	socklen_t len = socket_name(t, &sun);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sun, len) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	return fd;
}

int keep_listen(int fd)
{
	return listen(fd, 8) < 0 ? -errno : 0;
}

/*
 * The other end runs as root or as us: an abstract name is anyone's to
 * bind, and neither end trusts what another user's process would say (a
 * profile of its making, a request for ours).
 */
static bool peer_allowed(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return false;
	return cred.uid == 0 || cred.uid == geteuid();
}

int keep_connect(const struct target *t)
{
	struct sockaddr_un sun;
	socklen_t len = socket_name(t, &sun);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sun, len) < 0) {
		close(fd);
		return -ENOENT;
	}
	if (!peer_allowed(fd)) {
		close(fd);
		return -EACCES;
	}
	return fd;
}

/*
 * One end of a connection: neither end lets the other hold it past
 * @deadline, a trickle no more than silence. The daemon's end beats @beat
 * (NULL on the client's end) while it waits: its serve loop is the agent's
 * heartbeat, which a slow client must not stop.
 */
struct conn {
	int fd;
	uint64_t deadline;
	struct agent_profiler *beat;
};

/* Waits for @c to be ready for @events: 0, -ETIMEDOUT or -errno. */
static int wait_ready(const struct conn *c, short events)
{
	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = events };
		uint64_t now = now_monotonic_ns();
		uint64_t ms;
		int k;

		if (now >= c->deadline)
			return -ETIMEDOUT;
		ms = (c->deadline - now + 999999) / 1000000;
		if (c->beat)
			ms = MIN(ms, TICK_MS);
		k = poll(&p, 1, (int)ms);
		if (c->beat)
			agent_profiler_tend(c->beat, false);
		if (k > 0)
			return 0;
		if (k < 0 && errno != EINTR)
			return -errno;
	}
}

static int write_all(const struct conn *c, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n;
		int k = wait_ready(c, POLLOUT);

		if (k < 0)
			return k;
		n = send(c->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_some(const struct conn *c, void *buf, size_t len)
{
	for (;;) {
		ssize_t n;
		int k = wait_ready(c, POLLIN);

		if (k < 0)
			return k;
		n = recv(c->fd, buf, len, MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		return n > 0 ? (int)n : -EIO;
	}
}

/* Reads one "\n"-ended line of at most @size - 1 bytes. */
static int read_line(const struct conn *c, char *buf, size_t size)
{
	for (size_t n = 0; n + 1 < size; n++) {
		int k = read_some(c, buf + n, 1);

		if (k < 0)
			return k;
		if (buf[n] == '\n') {
			buf[n] = '\0';
			return 0;
		}
	}
	return -EPROTO;
}

static uint64_t after_ms(unsigned ms)
{
	return now_monotonic_ns() + (uint64_t)ms * 1000000ULL;
}

int keep_request(int fd, const char *request, char **ret, size_t *ret_len)
{
	struct conn c = { .fd = fd, .deadline = after_ms(KEEP_CLIENT_TIMEOUT_MS) };
	char line[256];
	unsigned long long len;
	char *body;
	size_t got = 0;
	int k;

	*ret = NULL;
	*ret_len = 0;
	k = write_all(&c, request, strlen(request));
	if (k == 0)
		k = read_line(&c, line, sizeof(line));
	if (k < 0)
		return k == -ETIMEDOUT ? k : -EIO;
	if (strncmp(line, "ok", 2) != 0) {
		/* Said on a terminal: printable ASCII only. */
		for (char *p = line; *p; p++)
			if (*p < 0x20 || *p > 0x7e)
				*p = '?';
		*ret = strdup(line);
		return -EPROTO;
	}
	if (sscanf(line, "ok %llu", &len) != 1)
		return 0; /* "ok stopped" */
	if (len > KEEP_BODY_MAX)
		return -EFBIG;
	body = malloc(len + 1);
	if (!body)
		return -ENOMEM;
	c.deadline = after_ms(KEEP_CLIENT_TIMEOUT_MS);
	while (got < len) {
		k = read_some(&c, body + got, len - got);
		if (k < 0) {
			free(body);
			return k == -ETIMEDOUT ? k : -EIO;
		}
		got += (size_t)k;
	}
	body[len] = '\0';
	*ret = body;
	*ret_len = len;
	return 0;
}

/* One client: one request, one reply, beating @beat (may be NULL) while
 * it waits. Returns 1 when it asked to stop. */
static int serve_client(int fd, struct agent_profiler *beat, keep_render_fn render, void *ctx)
{
	struct conn c = { .fd = fd, .deadline = after_ms(SERVE_REQUEST_MS), .beat = beat };
	char req[REQUEST_MAX], index[32], header[64], *body = NULL;
	size_t len = 0;
	int debug = 0, r;

	if (!peer_allowed(fd)) {
		write_all(&c, "error: not allowed\n", 19);
		return 0;
	}
	if (read_line(&c, req, sizeof(req)) < 0)
		return 0;
	if (!strcmp(req, "stop"))
		return 1;
	if (sscanf(req, "profile %31s %d", index, &debug) != 2) {
		write_all(&c, "error: bad request\n", 19);
		return 0;
	}
	r = render(ctx, index, debug, &body, &len);
	/* From the rendered profile on: the client's reading is what may stall. */
	c.deadline = after_ms(SERVE_REPLY_MS);
	if (r < 0) {
		snprintf(header, sizeof(header), "error: %s\n", strerror(-r));
		write_all(&c, header, strlen(header));
		return 0;
	}
	snprintf(header, sizeof(header), "ok %zu\n", len);
	if (write_all(&c, header, strlen(header)) == 0)
		write_all(&c, body, len);
	free(body);
	return 0;
}

void keep_serve(int lfd, struct agent_profiler *p, const struct target *t, keep_render_fn render,
		void *ctx, const struct cancel *cancel)
{
	int stop_fd = -1;
	bool broken = false;

	while (!cancel_asked(cancel) && target_alive(t->pid)) {
		struct pollfd pfd = { .fd = lfd, .events = POLLIN };

		if (p) {
			/* Bounded: a ring filled while a client held the loop
			 * must not hold the next heartbeat too. */
			int r = agent_profiler_tend(p, !broken);

			if (r == -EPROTO)
				broken = true; /* garbage in the ring: keep the hooks' lifeline only */
			/* The agent ended the session (it took us for gone): no
			 * more answers from totals that no longer move; the name
			 * goes, and the next 'cprof heap' starts afresh. */
			else if (r < 0)
				break;
		}
		if (poll(&pfd, 1, TICK_MS) > 0) {
			int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

			if (cfd < 0)
				continue;
			if (serve_client(cfd, p, render, ctx) == 1) {
				stop_fd = cfd;
				break;
			}
			close(cfd);
		}
	}
	close(lfd);
	if (p)
		agent_profiler_end(p);
	if (stop_fd >= 0) {
		struct conn c = { .fd = stop_fd, .deadline = after_ms(SERVE_REPLY_MS) };

		write_all(&c, "ok stopped\n", 11);
		close(stop_fd);
	}
}
