#include "heap-keep.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "interrupt.h"
#include "target/target.h"

#define TICK_MS 10
#define REQUEST_MAX 128

/* "\0cprof-heap/PID/STARTTIME": a reused pid is another name. */
static socklen_t socket_name(const struct target *t, struct sockaddr_un *sun)
{
	char path[64], stat[1024], *p;
	unsigned long long start = 0;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", t->pid);
	if (proc_read(path, stat, sizeof(stat) - 1, &n) == 0) {
		stat[n] = '\0';
		p = strrchr(stat, ')');
		/* Field 22, starttime; "%*s" skips fields 3-21 after the ')'. */
		if (p)
			sscanf(p + 2, "%*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
				       "%*s %*s %*s %*s %llu", &start);
	}
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
	return fd;
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads one "\n"-ended line of at most @size - 1 bytes. */
static int read_line(int fd, char *buf, size_t size)
{
	size_t n = 0;

	while (n + 1 < size) {
		ssize_t k = read(fd, buf + n, 1);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -EIO;
		if (buf[n] == '\n') {
			buf[n] = '\0';
			return 0;
		}
		n++;
	}
	return -EPROTO;
}

int keep_request(int fd, const char *request, char **ret, size_t *ret_len)
{
	char line[256];
	unsigned long long len;
	char *body;
	size_t got = 0;

	*ret = NULL;
	*ret_len = 0;
	if (write_all(fd, request, strlen(request)) < 0 || read_line(fd, line, sizeof(line)) < 0)
		return -EIO;
	if (strncmp(line, "ok", 2) != 0) {
		*ret = strdup(line);
		return -EPROTO;
	}
	if (sscanf(line, "ok %llu", &len) != 1)
		return 0; /* "ok stopped" */
	if (len > (1ULL << 32))
		return -EPROTO;
	body = malloc(len + 1);
	if (!body)
		return -ENOMEM;
	while (got < len) {
		ssize_t k = read(fd, body + got, len - got);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			free(body);
			return -EIO;
		}
		got += (size_t)k;
	}
	body[len] = '\0';
	*ret = body;
	*ret_len = len;
	return 0;
}

static bool peer_allowed(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return false;
	return cred.uid == 0 || cred.uid == geteuid();
}

/* One client: one request, one reply. Returns 1 when it asked to stop. */
static int serve_client(int fd, keep_render_fn render, void *ctx)
{
	char req[REQUEST_MAX], index[32], header[64], *body = NULL;
	size_t len = 0;
	int debug = 0, r;
	struct timeval tv = { 2, 0 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (!peer_allowed(fd)) {
		write_all(fd, "error: not allowed\n", 19);
		return 0;
	}
	if (read_line(fd, req, sizeof(req)) < 0)
		return 0;
	if (!strcmp(req, "stop"))
		return 1;
	if (sscanf(req, "profile %31s %d", index, &debug) != 2) {
		write_all(fd, "error: bad request\n", 19);
		return 0;
	}
	r = render(ctx, index, debug, &body, &len);
	if (r < 0) {
		snprintf(header, sizeof(header), "error: %s\n", strerror(-r));
		write_all(fd, header, strlen(header));
		return 0;
	}
	snprintf(header, sizeof(header), "ok %zu\n", len);
	if (write_all(fd, header, strlen(header)) == 0)
		write_all(fd, body, len);
	free(body);
	return 0;
}

void keep_serve(int lfd, struct channel *ch, const struct target *t,
		const struct channel_handlers *h, keep_render_fn render, void *ctx)
{
	int stop_fd = -1;
	bool broken = false;

	while (!interrupt_requested() && target_alive(t->pid)) {
		struct pollfd pfd = { .fd = lfd, .events = POLLIN };

		channel_heartbeat(ch);
		if (!broken && channel_drain(ch, h) == -EPROTO)
			broken = true; /* garbage in the ring: keep the hooks' lifeline only */
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
	keep_end(ch);
	if (stop_fd >= 0) {
		write_all(stop_fd, "ok stopped\n", 11);
		close(stop_fd);
	}
}
