/*
 * The socket of heap --keep is an abstract unix name, which anyone may bind
 * (issue 22): cprof must take nothing from a process it cannot trust, and
 * nothing unbounded from one it can.
 *
 * A fake server binds the name cprof computes for a live target, before
 * any cprof does: as another user (a squatter: refused, whatever it would
 * say), and as ourselves (trusted, but its answer is bounded and never
 * reaches the terminal raw).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/wire.h"
#include "target/target.h"
#include "util/util.h"
#include "testhelp.h"

TestSuite(keep, .init = th_init, .fini = th_cleanup, .timeout = 120);

/* cprof's name for @pid's background session: "\0cprof-heap/PID/START". */
static socklen_t keep_name(pid_t pid, struct sockaddr_un *sun)
{
	char path[64], stat[1024], *p;
	unsigned long long start = 0;
	size_t n = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	cr_assert_eq(proc_read(path, stat, sizeof(stat), &n), 0);
	p = strrchr(stat, ')');
	cr_assert_not_null(p);
	cr_assert_eq(sscanf(p + 2, "%*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
				   "%*s %*s %*s %*s %llu", &start), 1);
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	n = (size_t)snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1, "cprof-heap/%d/%llu",
			     pid, start);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/*
 * A child that binds @pid's name (as @uid unless it is -1), says "bound" on
 * a pipe, then answers each client with @reply (@len bytes), followed by
 * @stream bytes of 'x', until killed. A NULL @reply: it never answers.
 */
static pid_t fake_server(pid_t pid, uid_t uid, const char *reply, size_t len, size_t stream)
{
	struct sockaddr_un sun;
	socklen_t sl = keep_name(pid, &sun);
	int ready[2];
	char b;
	pid_t child;

	cr_assert_eq(pipe(ready), 0);
	child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		int fd;

		alarm(60);
		if (uid != (uid_t)-1 && (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 ||
					 setresuid(uid, uid, uid) < 0))
			_exit(2);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fd < 0 || bind(fd, (struct sockaddr *)&sun, sl) < 0 || listen(fd, 8) < 0)
			_exit(3);
		if (write(ready[1], "b", 1) != 1)
			_exit(4);
		for (;;) {
			int c = accept(fd, NULL, NULL);
			char req[256];

			if (c < 0)
				continue;
			if (read(c, req, sizeof(req)) < 0)
				_exit(5);
			if (!reply)
				pause(); /* silent: holds the client until killed */
			if (write(c, reply, len) == (ssize_t)len) {
				static char chunk[1 << 16];

				memset(chunk, 'x', sizeof(chunk));
				for (size_t sent = 0; sent < stream; sent += sizeof(chunk))
					if (write(c, chunk, sizeof(chunk)) < 0)
						break; /* the client left */
			}
			close(c);
		}
	}
	close(ready[1]);
	cr_assert_eq(read(ready[0], &b, 1), 1, "the fake server could not bind");
	close(ready[0]);
	return child;
}

static void stop_server(pid_t child)
{
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}

/* A process only to name the socket after (fake_server() answers for it):
 * it sleeps, so that the test's CPU goes to the cprof it runs. */
static pid_t named_target(void)
{
	return TH_SPAWN("regcheck", "sleep", "60");
}

static void fetch(struct th_run *r, pid_t target, const char *out)
{
	TH_CPROF(r, 60000, "heap", "-p", th_pid_str(target), "-o", out);
}

Test(keep, squatter_of_another_user_is_not_trusted)
{
	pid_t target = named_target(), server;
	char garbage[80] = "ok 64\n";
	const char *out = th_tmp_path("squatted.pb.gz");
	struct th_run r;

	if (geteuid() != 0)
		TH_SKIP_MISSING("needs root to bind the name as another user");
	memset(garbage + 6, 'x', 64);
	server = fake_server(target, 65534, garbage, 70, 0);
	unlink(out);
	fetch(&r, target, out);
	stop_server(server);
	cr_assert_neq(r.exit_code, 0, "cprof took a profile from another user's process:\n%s", r.err);
	cr_assert_not_null(strstr(r.err, "held by a process of another user"), "%s", r.err);
	cr_assert_neq(access(out, F_OK), 0, "a profile was written from the squatter's bytes");
	th_run_release(&r);
}

Test(keep, answers_are_bounded_and_printable)
{
	pid_t target = named_target(), server;
	const char *out = th_tmp_path("bounded.pb.gz");
	static const char escape[] = "error: \x1b]0;owned\x07\x1b[31mred\n";
	struct th_run r;

	/* A body of 4 GiB is refused before a byte of it is read (the server
	 * sends 512 MiB of it, if anyone takes them). */
	server = fake_server(target, (uid_t)-1, "ok 4294967296\n", 14, 512u << 20);
	fetch(&r, target, out);
	stop_server(server);
	cr_assert_neq(r.exit_code, 0, "%s", r.err);
	cr_assert_lt(r.ru.ru_maxrss, 256 << 10, "cprof grew to %ld KiB", r.ru.ru_maxrss);
	th_run_release(&r);

	/* An error text is printed without its escapes. */
	server = fake_server(target, (uid_t)-1, escape, sizeof(escape) - 1, 0);
	fetch(&r, target, out);
	stop_server(server);
	cr_assert_neq(r.exit_code, 0, "%s", r.err);
	cr_assert_null(strchr(r.err, '\x1b'), "an escape reached the terminal: %s", r.err);
	cr_assert_null(strchr(r.err, '\x07'), "a bell reached the terminal: %s", r.err);
	th_run_release(&r);
}

/* A server that takes the request and says nothing is given up, with its pid. */
Test(keep, silent_server_is_given_up)
{
	pid_t target = named_target(), server;
	const char *out = th_tmp_path("silent.pb.gz");
	char pid_text[32];
	struct th_run r;

	server = fake_server(target, (uid_t)-1, NULL, 0, 0);
	unlink(out);
	fetch(&r, target, out);
	stop_server(server);
	th_run_log(&r, "heap from a silent server");
	cr_assert_eq(r.exit_code, 1, "%s", r.err);
	cr_assert(!r.timed_out, "cprof waited for a silent server for good");
	snprintf(pid_text, sizeof(pid_text), "cprof (pid %d) did not answer", (int)server);
	cr_assert_not_null(strstr(r.err, pid_text), "%s", r.err);
	cr_assert_neq(access(out, F_OK), 0, "a profile was written from nothing");
	th_run_release(&r);
}

/* Connects to @target's background session and trickles @request, one byte
 * every @gap_ms, sampling the agent's heartbeat meanwhile: the longest time
 * it stood still, in ms. */
static unsigned trickle(pid_t target, const struct cprof_wire_header *h, const char *request,
			int gap_ms)
{
	struct sockaddr_un sun;
	socklen_t sl = keep_name(target, &sun);
	uint64_t last = __atomic_load_n(&h->heartbeat, __ATOMIC_RELAXED);
	uint64_t since = th_now_ns(), longest = 0;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sun, sl), 0, "%s", strerror(errno));
	for (const char *c = request; *c; c++) {
		/* The server may hang up on a slow client: it is right to. */
		if (send(fd, c, 1, MSG_NOSIGNAL) != 1)
			break;
		for (int t = 0; t < gap_ms; t += 50) {
			uint64_t hb = __atomic_load_n(&h->heartbeat, __ATOMIC_RELAXED);

			if (hb != last) {
				last = hb;
				since = th_now_ns();
			}
			longest = MAX(longest, th_now_ns() - since);
			th_sleep_ms(50);
		}
	}
	close(fd);
	return (unsigned)(longest / 1000000);
}

/*
 * The background sampler leaves the terminal's job control in a process
 * group of its own, but stays in the caller's session: a new session is a
 * new scheduling autogroup, which a loaded kernel may leave without a cpu
 * (the serve loop, and the agent's heartbeat, with it).
 */
static void assert_in_our_session(const char *err)
{
	const char *p = strstr(err, "in the background (pid ");
	char path[64], stat[1024], *e;
	int sampler = 0, pgrp = 0, sid = 0;

	cr_assert_not_null(p, "heap --keep named no background sampler:\n%s", err);
	sampler = atoi(p + strlen("in the background (pid "));
	snprintf(path, sizeof(path), "/proc/%d/stat", sampler);
	cr_assert_eq(proc_read(path, stat, sizeof(stat), NULL), 0, "no background sampler %d",
		     sampler);
	e = strrchr(stat, ')');
	cr_assert_not_null(e);
	cr_assert_eq(sscanf(e + 2, "%*s %*s %d %d", &pgrp, &sid), 2);
	cr_assert_eq(pgrp, sampler, "the background sampler shares the caller's process group");
	cr_assert_eq(sid, (int)getsid(0), "the background sampler has a session of its own");
}

/*
 * A client of the background session that trickles its request (or never
 * ends it) does not hold the serve loop, which is also the agent's
 * heartbeat: the beat goes on, the agent stays, the next fetch answers.
 */
Test(keep, slow_client_does_not_stall_the_session)
{
	struct cprof_wire_header *h;
	struct th_run r;
	unsigned still;
	pid_t target;

	if (geteuid() != 0)
		TH_SKIP_MISSING("the agent's injection needs ptrace of the target: run as root");
	target = TH_SPAWN("checksum", "60", "--report", th_tmp_path("unused.report"), "--alloc", "1");
	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(target), "-d", "300ms", "--keep", "-o",
		 th_tmp_path("keep.pb.gz"));
	cr_assert_eq(r.exit_code, 0, "heap --keep: exit %d:\n%s", r.exit_code, r.err);
	assert_in_our_session(r.err);
	th_run_release(&r);
	h = th_agent_header(target);
	cr_assert_not_null(h, "no agent channel in the target after heap --keep");

	still = trickle(target, h, "profile inuse_space 0\n", 400);
	cr_log_info("measured: heartbeat stood still %u ms at most under a client trickling its "
		    "request a byte per 400 ms", still);
	cr_assert_lt(still, 5000, "a slow client held the serve loop for %u ms", still);
	cr_assert_neq(__atomic_load_n(&h->state, __ATOMIC_ACQUIRE), CPROF_STATE_DETACHED,
		      "the agent left during a slow client");

	fetch(&r, target, th_tmp_path("after-slow.pb.gz"));
	cr_assert_eq(r.exit_code, 0, "fetch after a slow client: exit %d:\n%s", r.exit_code,
		     r.err);
	th_run_release(&r);
	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(target), "--stop");
	cr_assert_eq(r.exit_code, 0, "heap --stop: exit %d:\n%s", r.exit_code, r.err);
	th_run_release(&r);
	munmap(h, CPROF_WIRE_HEADER_SIZE);
	th_assert_let_go(target, false, "after heap --stop");
	th_kill(target);
}
