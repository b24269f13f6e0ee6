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
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "target/target.h"
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
 * @stream bytes of 'x', until killed.
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

static void fetch(struct th_run *r, pid_t target, const char *out)
{
	TH_CPROF(r, 60000, "heap", "-p", th_pid_str(target), "-o", out);
}

Test(keep, squatter_of_another_user_is_not_trusted)
{
	pid_t target = TH_SPAWN("busy", "1", "30"), server;
	char garbage[80] = "ok 64\n";
	const char *out = th_tmp_path("squatted.pb.gz");
	struct th_run r;

	if (geteuid() != 0)
		cr_skip_test("needs root to bind the name as another user");
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
	pid_t target = TH_SPAWN("busy", "1", "30"), server;
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
