#include "heap-keep.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "interrupt.h"
#include "output.h"
#include "pprof/pprof.h"
#include "report.h"
#include "target/target.h"
#include "util/util.h"

#define TICK_MS 10
#define REQUEST_MAX 128
/* What a client takes from a background session at most: a profile, and
 * how long it waits for the header (the session renders it first), and then
 * for the body. */
#define BODY_MAX (256u << 20)
#define CLIENT_TIMEOUT_MS 30000
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
	uint64_t deadline = after_ms(CLIENT_TIMEOUT_MS);
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
	if (len > BODY_MAX)
		return -EFBIG;
	body = malloc(len + 1);
	if (!body)
		return -ENOMEM;
	deadline = after_ms(CLIENT_TIMEOUT_MS);
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
		const struct channel_handlers *h, keep_render_fn render, void *ctx)
{
	int stop_fd = -1;
	bool broken = false;

	while (!interrupt_requested() && target_alive(t->pid)) {
		struct pollfd pfd = { .fd = lfd, .events = POLLIN };
		struct channel_counters c;

		channel_heartbeat(ch);
		if (!broken && channel_drain(ch, h) == -EPROTO)
			broken = true; /* garbage in the ring: keep the hooks' lifeline only */
		/* The agent ended the session (it took us for gone): no more
		 * answers from totals that no longer move; the name goes, and
		 * the next 'cprof heap' starts afresh. */
		channel_counters(ch, &c);
		if (c.state == CPROF_STATE_DETACHED)
			break;
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
		write_all(stop_fd, "ok stopped\n", 11, after_ms(SERVE_REPLY_MS));
		close(stop_fd);
	}
}

/* A view of the pprof bytes the background session sent. */
static int commit_view_of(struct output *out, const char *body, size_t len,
			  const struct common_opts *o, const struct target *t)
{
	struct profile *p = NULL;
	char title[256];
	int r = pprof_decode((const uint8_t *)body, len, &p);

	if (r == 0) {
		output_title("heap", t->pid, p, title, sizeof(title));
		r = output_commit_view(out, p, o->format, (size_t)o->top, title);
	}
	profile_free(p);
	return r;
}

/* The background session's answer to a "profile" request, into @o's output. */
static int keep_fetch(int fd, const struct common_opts *o, const char *index,
		      const struct target *t)
{
	struct output out;
	char req[64], why[1024], *body = NULL;
	struct ucred cred = { 0 };
	socklen_t cred_len = sizeof(cred);
	size_t len = 0;
	pid_t server;
	int r, code;

	r = output_prepare(&out, o->output, !o->debug && o->format == VIEW_PPROF, why,
			   sizeof(why));
	if (r < 0) {
		close(fd);
		report_error_text(NULL, why);
		return EXIT_OUTPUT;
	}
	snprintf(req, sizeof(req), "profile %s %d\n", index, o->debug);
	server = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0 ? cred.pid : 0;
	r = keep_request(fd, req, &body, &len);
	close(fd);
	if (r == 0 && !o->debug && o->format != VIEW_PPROF)
		r = commit_view_of(&out, body, len, o, t);
	else if (r == 0)
		r = output_commit_bytes(&out, body, len);
	if (r < 0 && out.write_failed) {
		code = output_report_failure(&out, r);
	} else if (r == -ETIMEDOUT) {
		report_error("cannot get the profile of pid %d from its background sampling: its "
			     "cprof (pid %d) did not answer within %d s",
			     t->pid, (int)server, CLIENT_TIMEOUT_MS / 1000);
		report_hint("a hung one can be killed: the agent in pid %d sees it gone and "
			    "unhooks", t->pid);
		output_abort(&out);
		code = EXIT_FAIL;
	} else if (r < 0) {
		report_error("cannot get the profile of pid %d from its background sampling: %s",
			     t->pid, r == -EPROTO && body ? body : strerror(-r));
		output_abort(&out);
		code = EXIT_FAIL;
	} else {
		report_note("wrote %s: the heap profile of pid %d since background sampling began",
			    output_name(&out), t->pid);
		code = EXIT_OK;
	}
	free(body);
	return code;
}

int keep_ask(const struct target *t, const struct common_opts *o, const char *index, bool stop,
	     bool starting)
{
	char *body = NULL;
	size_t len = 0;
	int fd = keep_connect(t), r;

	if (fd == -EACCES) {
		char name[128];

		keep_socket_label(t, name, sizeof(name));
		report_error("the socket '%s' of pid %d's background heap sampling is held by a "
			     "process of another user: its answers are not taken", name, t->pid);
		report_hint("'ss -xap' names the process bound to it");
		return EXIT_FAIL;
	}
	if (fd < 0) {
		if (!stop)
			return -1;
		report_error("no background heap sampling runs for pid %d (%s)", t->pid, t->comm);
		report_hint("'cprof heap -p %d --keep' starts one", t->pid);
		return EXIT_FAIL;
	}
	if (stop) {
		r = keep_request(fd, "stop\n", &body, &len);
		close(fd);
		free(body);
		if (r < 0) {
			report_error("the background sampling of pid %d did not answer", t->pid);
			return EXIT_FAIL;
		}
		report_note("stopped the background heap sampling of pid %d: its hooks are gone",
			    t->pid);
		return EXIT_OK;
	}
	if (starting) {
		close(fd);
		report_error("background heap sampling (--keep) already runs for pid %d (%s)",
			     t->pid, t->comm);
		report_hint("'cprof heap -p %d' (no -d) returns its profile; --stop ends it",
			    t->pid);
		return EXIT_TARGET;
	}
	return keep_fetch(fd, o, index, t);
}

/* keep_bind() failed with @r: nothing was touched yet. An exit code. */
static int keep_bind_error(const struct target *t, int r)
{
	char name[128];

	keep_socket_label(t, name, sizeof(name));
	if (r == -EADDRINUSE) {
		report_error("cannot start background heap sampling of pid %d (%s): its socket "
			     "name '%s' is taken", t->pid, t->comm, name);
		report_hint("another 'cprof heap -p %d --keep' may be writing its first profile: "
			    "try again once it has; else another process holds that abstract unix "
			    "socket ('ss -xa' lists it)", t->pid);
		return EXIT_TARGET;
	}
	report_error("cannot start background heap sampling of pid %d (%s): socket '%s': %s",
		     t->pid, t->comm, name, strerror(-r));
	return EXIT_FAIL;
}

static volatile sig_atomic_t keep_child;

static void forward_signal(int sig)
{
	if (keep_child > 0)
		kill(keep_child, sig);
}

int keep_start(const struct target *t, int *ret_lfd, int *ret_code_fd)
{
	struct sigaction sa;
	unsigned char code;
	int fds[2], lfd;
	pid_t pid;

	/* The name is taken now, or never: not after the hooks went in and
	 * the foreground said all is well. */
	lfd = keep_bind(t);
	if (lfd < 0)
		return keep_bind_error(t, lfd);
	if (pipe2(fds, O_CLOEXEC) < 0) {
		report_error("cannot start the background sampler: %s", strerror(errno));
		close(lfd);
		return EXIT_FAIL;
	}
	pid = fork();
	if (pid < 0) {
		report_error("cannot fork the background sampler: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		close(lfd);
		return EXIT_FAIL;
	}
	if (pid == 0) {
		close(fds[0]);
		setsid(); /* the terminal's Ctrl-C reaches it through the parent only */
		*ret_lfd = lfd;
		*ret_code_fd = fds[1];
		return -1;
	}
	close(fds[1]);
	close(lfd);
	keep_child = pid;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = forward_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	for (;;) {
		ssize_t n = read(fds[0], &code, 1);

		if (n == 1)
			return code;
		if (n == 0 || errno != EINTR)
			return EXIT_FAIL; /* it died: it said why on stderr */
	}
}

/* Tells the foreground @code; false when it is gone. */
static bool tell_foreground(int code_fd, int code)
{
	unsigned char c = (unsigned char)code;
	bool told = write(code_fd, &c, 1) == 1;

	close(code_fd);
	return told;
}

int keep_go_on(int lfd, int code_fd, int code, struct channel *ch, const struct target *t,
	       const struct channel_handlers *h, keep_render_fn render, void *ctx,
	       const char *written)
{
	int r, null;

	r = keep_listen(lfd);
	if (r < 0) {
		char name[128];

		keep_socket_label(t, name, sizeof(name));
		report_error("cannot start background heap sampling of pid %d (%s): listen on "
			     "'%s': %s", t->pid, t->comm, name, strerror(-r));
		report_hint("%s was written; the hooks are removed", written);
		return keep_give_up(lfd, code_fd, EXIT_FAIL, ch);
	}
	report_note("sampling goes on in the background (pid %d): 'cprof heap -p %d' returns the "
		    "profile since it began, 'cprof heap -p %d --stop' ends it", getpid(), t->pid,
		    t->pid);
	null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		close(null);
	}
	if (!tell_foreground(code_fd, code)) {
		/* Nobody knows we run: end the session instead. */
		close(lfd);
		keep_end(ch);
		return code;
	}
	interrupt_reset();
	keep_serve(lfd, ch, t, h, render, ctx);
	return code;
}

int keep_give_up(int lfd, int code_fd, int code, struct channel *ch)
{
	/* On a failure the hooks go before the foreground exits with it (not
	 * a second later, when the agent's watchdog sees us gone). */
	if (code != EXIT_OK && ch)
		keep_end(ch);
	tell_foreground(code_fd, code);
	close(lfd);
	return code;
}
