#include "session/keep.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/util.h"

#define TICK_MS 10
/* The most one turn of the serve loop drains for. */
#define DRAIN_BUDGET_NS (100ULL * 1000 * 1000)
#define REQUEST_MAX 128
/* What one client may hold the serve loop for, request and reply: well
 * inside the agent's heartbeat bound, CPROF_WIRE_HEARTBEAT_ALONE_TIMEOUT_MS. */
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

int keep_end(struct channel *ch)
{
	int r = channel_command(ch, CPROF_CMD_DETACH, CPROF_STATE_DETACHED, 2000);

	if (r == 0)
		channel_give_back(ch);
	return r;
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

/* Waits for @fd to be ready for @events until @deadline: 0 or -ETIMEDOUT. */
static int wait_ready(int fd, short events, uint64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = events };
		uint64_t now = now_monotonic_ns();
		int k;

		if (now >= deadline)
			return -ETIMEDOUT;
		k = poll(&p, 1, (int)((deadline - now + 999999) / 1000000));
		if (k > 0)
			return 0;
		if (k < 0 && errno != EINTR)
			return -errno;
	}
}

/* Neither end lets the other hold it past @deadline, a trickle no more
 * than silence: the serve loop is also the agent's heartbeat. */
static int write_all(int fd, const void *buf, size_t len, uint64_t deadline)
{
	const char *p = buf;

	while (len) {
		ssize_t n;
		int k = wait_ready(fd, POLLOUT, deadline);

		if (k < 0)
			return k;
		n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_some(int fd, void *buf, size_t len, uint64_t deadline)
{
	for (;;) {
		ssize_t n;
		int k = wait_ready(fd, POLLIN, deadline);

		if (k < 0)
			return k;
		n = recv(fd, buf, len, MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		return n > 0 ? (int)n : -EIO;
	}
}

/* Reads one "\n"-ended line of at most @size - 1 bytes. */
static int read_line(int fd, char *buf, size_t size, uint64_t deadline)
{
	for (size_t n = 0; n + 1 < size; n++) {
		int k = read_some(fd, buf + n, 1, deadline);

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
	uint64_t deadline = after_ms(KEEP_CLIENT_TIMEOUT_MS);
	char line[256];
	unsigned long long len;
	char *body;
	size_t got = 0;
	int k;

	*ret = NULL;
	*ret_len = 0;
	k = write_all(fd, request, strlen(request), deadline);
	if (k == 0)
		k = read_line(fd, line, sizeof(line), deadline);
	if (k < 0)
		return k == -ETIMEDOUT ? k : -EIO;
	if (strncmp(line, "ok", 2) != 0) {
		/* Said on a terminal: printable ASCII only. */
		for (char *c = line; *c; c++)
			if (*c < 0x20 || *c > 0x7e)
				*c = '?';
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
	deadline = after_ms(KEEP_CLIENT_TIMEOUT_MS);
	while (got < len) {
		k = read_some(fd, body + got, len - got, deadline);
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

/* One client: one request, one reply. Returns 1 when it asked to stop. */
static int serve_client(int fd, keep_render_fn render, void *ctx)
{
	char req[REQUEST_MAX], index[32], header[64], *body = NULL;
	uint64_t deadline = after_ms(SERVE_REQUEST_MS);
	size_t len = 0;
	int debug = 0, r;

	if (!peer_allowed(fd)) {
		write_all(fd, "error: not allowed\n", 19, deadline);
		return 0;
	}
	if (read_line(fd, req, sizeof(req), deadline) < 0)
		return 0;
	if (!strcmp(req, "stop"))
		return 1;
	if (sscanf(req, "profile %31s %d", index, &debug) != 2) {
		write_all(fd, "error: bad request\n", 19, deadline);
		return 0;
	}
	r = render(ctx, index, debug, &body, &len);
	/* From the rendered profile on: the client's reading is what may stall. */
	deadline = after_ms(SERVE_REPLY_MS);
	if (r < 0) {
		snprintf(header, sizeof(header), "error: %s\n", strerror(-r));
		write_all(fd, header, strlen(header), deadline);
		return 0;
	}
	snprintf(header, sizeof(header), "ok %zu\n", len);
	if (write_all(fd, header, strlen(header), deadline) == 0)
		write_all(fd, body, len, deadline);
	free(body);
	return 0;
}

void keep_serve(int lfd, struct channel *ch, const struct target *t,
		const struct channel_handlers *h, keep_render_fn render, void *ctx,
		bool (*cancelled)(void))
{
	int stop_fd = -1;
	bool broken = false;

	while (!(cancelled && cancelled()) && target_alive(t->pid)) {
		struct pollfd pfd = { .fd = lfd, .events = POLLIN };
		struct channel_counters c;

		if (ch) {
			channel_heartbeat(ch);
			/* Bounded: a ring filled while a client held the loop
			 * must not hold the next heartbeat too. */
			if (!broken && channel_drain_until(ch, h, now_monotonic_ns() +
							   DRAIN_BUDGET_NS) == -EPROTO)
				broken = true; /* garbage in the ring: keep the hooks' lifeline only */
			/* The agent ended the session (it took us for gone): no
			 * more answers from totals that no longer move; the name
			 * goes, and the next 'cprof heap' starts afresh. */
			channel_counters(ch, &c);
			if (c.state == CPROF_STATE_DETACHED)
				break;
		}
		if (poll(&pfd, 1, TICK_MS) > 0) {
			int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

			if (cfd < 0)
				continue;
			if (serve_client(cfd, render, ctx) == 1) {
				stop_fd = cfd;
				break;
			}
			close(cfd);
		}
	}
	close(lfd);
	if (ch)
		keep_end(ch);
	if (stop_fd >= 0) {
		write_all(stop_fd, "ok stopped\n", 11, after_ms(SERVE_REPLY_MS));
		close(stop_fd);
	}
}
