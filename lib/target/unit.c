/* A systemd unit's cgroup, asked of systemctl (unit.h). */
#include "target/unit.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/util.h"

extern char **environ;

struct output {
	int fd;
	char text[4096];
	size_t len;
};

/* Reads what there is of @o; false at its end. */
static bool read_some(struct output *o)
{
	char scratch[512];
	size_t room = sizeof(o->text) - 1 - o->len;
	ssize_t n = read(o->fd, room ? o->text + o->len : scratch, room ? room : sizeof(scratch));

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return true;
	if (n <= 0)
		return false;
	if (room)
		o->len += (size_t)n;
	o->text[o->len] = '\0';
	return true;
}

/* Both outputs of @pid to their end, for @timeout_ms at most; its status. */
static int collect(pid_t pid, struct output *out, struct output *err, int timeout_ms, int *status)
{
	uint64_t deadline = now_monotonic_ns() + (uint64_t)timeout_ms * 1000000;
	struct pollfd p[2] = { { .fd = out->fd, .events = POLLIN }, { .fd = err->fd, .events = POLLIN } };
	int r = 0;

	while (p[0].fd >= 0 || p[1].fd >= 0) {
		uint64_t now = now_monotonic_ns();

		if (now >= deadline) {
			r = -ETIMEDOUT;
			kill(pid, SIGKILL);
			break;
		}
		if (poll(p, 2, (int)((deadline - now) / 1000000) + 1) < 0 && errno != EINTR) {
			r = -errno;
			kill(pid, SIGKILL);
			break;
		}
		for (int i = 0; i < 2; i++)
			if (p[i].fd >= 0 && p[i].revents && !read_some(i ? err : out))
				p[i].fd = -1;
	}
	while (waitpid(pid, status, 0) < 0 && errno == EINTR)
		;
	return r;
}

static void first_line(const char *text, char *buf, size_t size)
{
	snprintf(buf, size, "%.*s", (int)strcspn(text, "\n"), text);
}

int target_unit_cgroup(const char *unit, int timeout_ms, char *buf, size_t size, char *why,
		       size_t whylen)
{
	char *const argv[] = { "systemctl", "show", "--no-pager", "-p", "ControlGroup", "--value",
			       "--", (char *)unit, NULL };
	struct output out = { .fd = -1 }, err = { .fd = -1 };
	int po[2] = { -1, -1 }, pe[2] = { -1, -1 };
	posix_spawn_file_actions_t fa;
	int r, status = 0;
	size_t len;
	pid_t pid;

	if (whylen)
		why[0] = '\0';
	if (access("/run/systemd/system", F_OK) < 0)
		return -EHOSTDOWN;
	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
		r = -errno;
		goto out_close;
	}
	r = -posix_spawn_file_actions_init(&fa);
	if (r < 0)
		goto out_close;
	r = -posix_spawn_file_actions_adddup2(&fa, po[1], STDOUT_FILENO);
	if (r == 0)
		r = -posix_spawn_file_actions_adddup2(&fa, pe[1], STDERR_FILENO);
	if (r == 0)
		r = -posix_spawnp(&pid, "systemctl", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (r < 0)
		goto out_close;
	close(po[1]);
	close(pe[1]);
	po[1] = pe[1] = -1;
	out.fd = po[0];
	err.fd = pe[0];
	r = collect(pid, &out, &err, timeout_ms, &status);
	if (r < 0)
		goto out_close;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		first_line(err.text, why, whylen);
		r = -EIO;
		goto out_close;
	}
	len = strcspn(out.text, "\n");
	if (len == 0) {
		r = -ESRCH;
		goto out_close;
	}
	if (len >= size) {
		r = -ENAMETOOLONG;
		goto out_close;
	}
	memcpy(buf, out.text, len);
	buf[len] = '\0';
	r = 0;

out_close:
	for (int i = 0; i < 2; i++) {
		if (po[i] >= 0)
			close(po[i]);
		if (pe[i] >= 0)
			close(pe[i]);
	}
	return r;
}
