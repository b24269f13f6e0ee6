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
#include "session/keep.h"
#include "session/profiler.h"
#include "target/target.h"
#include "util/fault.h"
#include "util/util.h"

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
			     t->pid, (int)server, KEEP_CLIENT_TIMEOUT_MS / 1000);
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

/*
 * The terminal's Ctrl-C, ^Z and hangup reach the background sampler through
 * the parent only: its own process group, deaf to the terminal's job
 * control. Not setsid(): a new session is a new scheduling autogroup, and
 * a kernel's EEVDF has been seen to leave a new autogroup no cpu for as
 * long as niced threads spin beside it, the agent's heartbeat with it.
 */
static void detach_from_terminal(void)
{
	struct sigaction sa;

	setpgid(0, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGTTIN, &sa, NULL);
	sigaction(SIGTTOU, &sa, NULL);
	sigaction(SIGTSTP, &sa, NULL);
}

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
		detach_from_terminal();
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

		if (n == 1) {
			/* The child printed --json's object, whatever it said. */
			report_json_printed();
			return code;
		}
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

int keep_go_on(int lfd, int code_fd, int code, struct agent_profiler *ap, const struct target *t,
	       keep_render_fn render, void *ctx, const char *written)
{
	int r, null;

	r = keep_listen(lfd);
	if (r == 0 && fault_injected("keep-listen"))
		r = -EADDRINUSE;
	if (r < 0) {
		char name[128];

		keep_socket_label(t, name, sizeof(name));
		report_error("cannot start background heap sampling of pid %d (%s): listen on "
			     "'%s': %s", t->pid, t->comm, name, strerror(-r));
		report_hint("%s was written; the hooks are removed", written);
		return keep_give_up(lfd, code_fd, EXIT_FAIL, ap);
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
		agent_profiler_end(ap);
		return code;
	}
	interrupt_reset();
	keep_serve(lfd, ap, t, render, ctx, &interrupt_cancel);
	return code;
}

int keep_give_up(int lfd, int code_fd, int code, struct agent_profiler *ap)
{
	/* On a failure the hooks go before the foreground exits with it (not
	 * a second later, when the agent's watchdog sees us gone). */
	if (code != EXIT_OK && ap)
		agent_profiler_end(ap);
	tell_foreground(code_fd, code);
	close(lfd);
	return code;
}
