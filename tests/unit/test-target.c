/* What /proc says about a process (lib/target/). */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "target/set.h"
#include "target/target.h"

Test(target, self)
{
	struct target t;

	cr_assert_eq(target_open(&t, getpid()), 0);
	cr_assert(t.is_self);
	cr_assert_not(t.kernel_thread);
	cr_assert_neq(t.exe[0], '\0');
	cr_assert_eq(t.tracer_pid, 0);
	cr_assert(target_alive(getpid()));
}

Test(target, no_such_process)
{
	struct target t = { .pid = 4242 };
	pid_t child = fork();

	if (child == 0)
		_exit(0);
	cr_assert_gt(child, 0);
	waitpid(child, NULL, 0);
	cr_assert_eq(target_open(&t, child), -ESRCH);
	cr_assert_eq(t.pid, 4242, "output clobbered on failure");
	cr_assert_not(target_alive(child));
}

Test(target, zombie)
{
	struct target t;
	pid_t child = fork();

	if (child == 0)
		_exit(0);
	cr_assert_gt(child, 0);
	/* Wait until it is a zombie without reaping it. */
	for (int i = 0; i < 200 && target_alive(child); i++)
		usleep(5000);
	cr_assert_eq(target_open(&t, child), 0);
	cr_assert_eq(t.state, 'Z');
	cr_assert_not(target_alive(child));
	waitpid(child, NULL, 0);
}

Test(target, kernel_thread)
{
	char comm[64];
	struct target t;

	if (target_process_name(2, comm, sizeof(comm)) < 0 || strcmp(comm, "kthreadd"))
		cr_skip_test("pid 2 is not kthreadd here (a pid namespace?)");
	cr_assert_eq(target_open(&t, 2), 0);
	cr_assert(t.kernel_thread);
	cr_assert_eq(t.exe[0], '\0');
}

static int sleepers_named;

static void *sleeper(void *arg)
{
	pthread_setname_np(pthread_self(), "tt-sleeper");
	__atomic_add_fetch(&sleepers_named, 1, __ATOMIC_RELEASE);
	while (!*(volatile int *)arg)
		usleep(1000);
	return NULL;
}

Test(target, threads_and_names)
{
	pthread_t th[3];
	int stop = 0;
	pid_t *tids;
	size_t n;
	char name[64];
	int named = 0;

	for (int i = 0; i < 3; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, sleeper, &stop), 0);
	/* Each names itself once it runs: on a loaded host, not at once. */
	for (int i = 0; i < 10000 && __atomic_load_n(&sleepers_named, __ATOMIC_ACQUIRE) < 3; i++)
		usleep(1000);
	cr_assert_eq(target_list_tids(getpid(), &tids, &n), 0);
	cr_assert_geq(n, 4);
	for (size_t i = 0; i < n; i++)
		if (target_thread_name(getpid(), tids[i], name, sizeof(name)) == 0 &&
		    !strcmp(name, "tt-sleeper"))
			named++;
	cr_assert_eq(named, 3);
	free(tids);
	stop = 1;
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
}

Test(proc, sysctl)
{
	int v = -100;

	cr_assert_eq(proc_sysctl_int("kernel/perf_event_paranoid", &v), 0);
	cr_assert_geq(v, -1);
	cr_assert_eq(proc_sysctl_int("kernel/no_such_thing", &v), -ENOENT);
}

/* Ourselves: same root, same PID namespace, no other tid. The container
 * case (other root, NSpid with two fields) is tests/integration/
 * test-container.c. */
Test(target, namespaces_of_self)
{
	cr_assert_not(target_other_root(getpid()));
	cr_assert_not(target_other_pidns(getpid()));
	cr_assert_eq(target_ns_tid(getpid(), getpid()), 0);
	cr_assert_eq(target_ns_tid(getpid(), gettid()), 0);
}

/* Unknown (a process gone) answers "not a container", as before. */
Test(target, namespaces_of_the_dead)
{
	pid_t child = fork();

	if (child == 0)
		_exit(0);
	cr_assert_gt(child, 0);
	waitpid(child, NULL, 0);
	cr_assert_not(target_other_root(child));
	cr_assert_not(target_other_pidns(child));
	cr_assert_eq(target_ns_tid(child, child), 0);
}

/* Runs @path with argv[0] @argv0 ("sleep 30"); returns its pid once exec'd. */
/* Started: its exe is sleep and its cmdline laid out (the exec installs
 * the exe before it writes the arguments on the new stack). */
static pid_t exec_sleep(const char *path, const char *argv0)
{
	char exe[64], cmdline[64], buf[256];
	pid_t child = fork();

	if (child == 0) {
		execl(path, argv0, "30", (char *)NULL);
		_exit(127);
	}
	cr_assert_gt(child, 0);
	snprintf(exe, sizeof(exe), "/proc/%d/exe", (int)child);
	snprintf(cmdline, sizeof(cmdline), "/proc/%d/cmdline", (int)child);
	for (int i = 0; i < 400; i++) {
		ssize_t n = readlink(exe, buf, sizeof(buf) - 1);
		size_t len = 0;

		if (n > 0 && (buf[n] = '\0', strstr(buf, "sleep")) &&
		    proc_read(cmdline, buf, sizeof(buf), &len) == 0 && len > 0 &&
		    !strncmp(buf, argv0, strlen(buf)))
			return child;
		usleep(5000);
	}
	cr_assert_fail("%s did not start", path);
	return -1;
}

static void end_sleep(pid_t child)
{
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}

/* Started through a symlink (Debian's redis-server -> redis-check-rdb): the
 * link's path, from argv[0] whole or up to a space (a rewritten process
 * title); started by the file's own name: -ENOENT. */
Test(target, program_path_through_a_symlink)
{
	char dir[] = "/tmp/cprof-test-target-XXXXXX", link[128], title[160], got[256];
	struct target t;
	pid_t child;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(link, sizeof(link), "%s/linked-app", dir);
	snprintf(title, sizeof(title), "%s 127.0.0.1:6379", link);
	cr_assert_eq(symlink("/usr/bin/sleep", link), 0);

	for (int i = 0; i < 2; i++) {
		child = exec_sleep(link, i == 0 ? link : title);
		cr_assert_eq(target_open(&t, child), 0);
		cr_assert_str_eq(t.exe, "/usr/bin/sleep");
		cr_assert_eq(target_program_path(child, t.exe, got, sizeof(got)), 0);
		cr_assert_str_eq(got, link);
		end_sleep(child);
	}
	child = exec_sleep("/usr/bin/sleep", "sleep");
	cr_assert_eq(target_program_path(child, "/usr/bin/sleep", got, sizeof(got)), -ENOENT);
	end_sleep(child);
	unlink(link);
	rmdir(dir);
}

struct call_thread {
	pid_t tid;
	int fds[2];            /* the sleeper reads fds[0] until it closes */
	volatile int *stop;    /* the spinner spins until it is set */
};

static void *asleep_in_read(void *arg)
{
	struct call_thread *c = arg;
	char b;

	c->tid = gettid();
	return (void *)(intptr_t)read(c->fds[0], &b, 1);
}

static void *spinning(void *arg)
{
	struct call_thread *c = arg;

	c->tid = gettid();
	while (!*c->stop)
		;
	return NULL;
}

/*
 * thread-call.c: a thread asleep in read(2) says so, with its stack and
 * program pointers, and spends no cpu time between two reads; a spinning
 * thread is "running" and its clock moves.
 */
Test(target, thread_call_and_clock)
{
	volatile int stop = 0;
	struct call_thread sleeper = { .stop = &stop }, spinner = { .stop = &stop };
	struct target_call a, b;
	uint64_t r0, r1;
	pthread_t ts, tr;

	cr_assert_eq(pipe(sleeper.fds), 0);
	cr_assert_eq(pthread_create(&ts, NULL, asleep_in_read, &sleeper), 0);
	cr_assert_eq(pthread_create(&tr, NULL, spinning, &spinner), 0);
	usleep(50000);
	cr_assert_eq(target_thread_call(getpid(), sleeper.tid, &a), 0);
	cr_assert(!a.running);
	cr_assert_eq(a.nr, 0, "asleep in call %lld, not read (0)", (long long)a.nr);
	cr_assert_eq(a.args[0], (uint64_t)sleeper.fds[0]);
	cr_assert(a.sp && a.pc);
	cr_assert_eq(target_thread_run_ns(getpid(), sleeper.tid, &r0), 0);
	usleep(20000);
	cr_assert_eq(target_thread_call(getpid(), sleeper.tid, &b), 0);
	cr_assert(target_call_same(&a, &b));
	cr_assert_eq(target_thread_run_ns(getpid(), sleeper.tid, &r1), 0);
	cr_assert_eq(r0, r1, "a thread asleep in read ran %llu ns", (unsigned long long)(r1 - r0));

	cr_assert_eq(target_thread_call(getpid(), spinner.tid, &a), 0);
	cr_assert(a.running, "a spinning thread is not running: call %lld", (long long)a.nr);
	cr_assert_eq(target_thread_run_ns(getpid(), spinner.tid, &r0), 0);
	usleep(20000);
	cr_assert_eq(target_thread_run_ns(getpid(), spinner.tid, &r1), 0);
	cr_assert_gt(r1, r0, "a spinning thread's clock stood still");
	stop = 1;
	pthread_join(tr, NULL);
	close(sleeper.fds[1]);
	pthread_join(ts, NULL);
	close(sleeper.fds[0]);
	cr_assert_eq(target_thread_call(getpid(), sleeper.tid, &a), -ESRCH);
}

/* ---- a set of processes (set.c) ---------------------------------------- */

static void expect_pids(const char *arg, const pid_t *want, size_t n)
{
	pid_t *got = NULL;
	size_t ngot = 0;
	char why[128] = "";

	cr_assert_eq(target_pids_parse(arg, &got, &ngot, why, sizeof(why)), 0, "'%s': %s", arg,
		     why);
	cr_assert_eq(ngot, n, "'%s': %zu pids", arg, ngot);
	for (size_t i = 0; i < n; i++)
		cr_expect_eq(got[i], want[i], "'%s' [%zu]: %d", arg, i, got[i]);
	free(got);
}

static void expect_refused(const char *arg, int error, const char *said)
{
	pid_t *got = NULL;
	size_t ngot = 0;
	char why[128] = "";

	cr_assert_eq(target_pids_parse(arg, &got, &ngot, why, sizeof(why)), error, "'%s'", arg);
	cr_expect(strstr(why, said), "'%s': '%s' does not say '%s'", arg, why, said);
	cr_expect_null(got);
}

Test(target_set, pid_lists)
{
	expect_pids("505", (pid_t[]){ 505 }, 1);
	expect_pids("505 506", (pid_t[]){ 505, 506 }, 2);
	expect_pids("505,506", (pid_t[]){ 505, 506 }, 2);
	expect_pids(" 7,\t8\n9 ,, 7 ", (pid_t[]){ 7, 8, 9 }, 3);
	expect_pids("4194304", (pid_t[]){ 4194304 }, 1);
	expect_refused("505 x6", -EINVAL, "invalid pid 'x6': not a number");
	expect_refused("0", -ERANGE, "out of range");
	expect_refused("4194305", -ERANGE, "out of range");
	expect_refused("99999999999999999999999999999999999", -ERANGE, "out of range");
	expect_refused("-5", -ERANGE, "out of range");
	expect_refused(" , ", -EINVAL, "no pid given");
	expect_refused("", -EINVAL, "no pid given");
}

/* A child that forks @n grandchildren; each lives 30 s at most. Their
 * pids through @pipefd's read end. */
static pid_t spawn_tree(int n, pid_t *kids)
{
	int fd[2];
	pid_t pid;

	cr_assert_eq(pipe(fd), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(fd[0]);
		alarm(30);
		for (int i = 0; i < n; i++) {
			pid_t k = fork();

			if (k == 0) {
				alarm(30);
				pause();
				_exit(0);
			}
			if (write(fd[1], &k, sizeof(k)) != sizeof(k))
				_exit(1);
		}
		close(fd[1]);
		pause();
		_exit(0);
	}
	close(fd[1]);
	for (int i = 0; i < n; i++)
		cr_assert_eq(read(fd[0], &kids[i], sizeof(kids[i])), (ssize_t)sizeof(kids[i]));
	close(fd[0]);
	return pid;
}

static void end_tree(pid_t pid, const pid_t *kids, int n)
{
	for (int i = 0; i < n; i++)
		kill(kids[i], SIGKILL);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static bool listed(const pid_t *v, size_t n, pid_t pid)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == pid)
			return true;
	return false;
}

Test(target_set, children_and_grandchildren)
{
	pid_t kids[2], top = spawn_tree(2, kids), *v = NULL;
	struct target_set_spec s = { .pids = &top, .npids = 1 };
	size_t n = 0;

	cr_assert_eq(target_set_list(&s, &v, &n), 0);
	cr_expect(n == 1 && v[0] == top, "without --children: %zu pids", n);
	free(v);
	s.children = true;
	cr_assert_eq(target_set_list(&s, &v, &n), 0);
	cr_expect_eq(n, 3, "%zu pids in a tree of 3", n);
	cr_expect(listed(v, n, top) && listed(v, n, kids[0]) && listed(v, n, kids[1]));
	for (size_t i = 1; i < n; i++)
		cr_expect_lt(v[i - 1], v[i], "not ascending");
	free(v);
	/* One that dies leaves the set: a zombie is no process to profile. */
	kill(kids[0], SIGKILL);
	for (int i = 0; i < 200 && target_alive(kids[0]); i++)
		usleep(10000);
	cr_assert_eq(target_set_list(&s, &v, &n), 0);
	cr_expect(n == 2 && !listed(v, n, kids[0]), "%zu pids after one died", n);
	free(v);
	end_tree(top, kids, 2);
}

static bool write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");
	bool ok = f && fputs(text, f) >= 0;

	if (f && fclose(f) != 0)
		ok = false;
	return ok;
}

Test(target_set, a_cgroup_and_those_below_it)
{
	char root[256], name[64], dir[400], sub[480], buf[600], rel[80], text[32];
	pid_t kids[1], top, *v = NULL;
	struct target_set_spec s = { 0 };
	size_t n = 0;

	if (geteuid() != 0)
		cr_skip_test("moving a process into a cgroup needs root");
	if (target_cgroup_dir("/", root, sizeof(root)) < 0)
		cr_skip_test("no cgroup filesystem is mounted");
	snprintf(name, sizeof(name), "cprof-test-%d", getpid());
	snprintf(dir, sizeof(dir), "%s/%s", root, name);
	snprintf(sub, sizeof(sub), "%s/inner", dir);
	if (mkdir(dir, 0755) < 0 || mkdir(sub, 0755) < 0)
		cr_skip_test("cannot make a cgroup under %s: %s", root, strerror(errno));
	top = spawn_tree(1, kids);
	snprintf(buf, sizeof(buf), "%s/cgroup.procs", dir);
	snprintf(text, sizeof(text), "%d\n", top);
	if (!write_file(buf, text)) {
		int e = errno;

		end_tree(top, kids, 1);
		rmdir(sub);
		rmdir(dir);
		cr_skip_test("cannot move a process into %s: %s", dir, strerror(e));
	}
	snprintf(buf, sizeof(buf), "%s/cgroup.procs", sub);
	snprintf(text, sizeof(text), "%d\n", kids[0]);
	cr_assert(write_file(buf, text), "cannot move %d into %s", kids[0], sub);
	/* Relative to the mount, as /proc/PID/cgroup says it. */
	snprintf(rel, sizeof(rel), "/%s", name);
	cr_assert_eq(target_cgroup_dir(rel, buf, sizeof(buf)), 0);
	cr_expect_str_eq(buf, dir);
	s.cgroup = dir;
	cr_assert_eq(target_set_list(&s, &v, &n), 0);
	cr_expect(n == 2 && listed(v, n, top) && listed(v, n, kids[0]), "%zu pids", n);
	free(v);
	cr_expect_eq(target_cgroup_dir("/no-such-cgroup-of-cprof", buf, sizeof(buf)), -ENOENT);
	end_tree(top, kids, 1);
	for (int i = 0; i < 200 && target_alive(kids[0]); i++)
		usleep(10000);
	cr_expect_eq(rmdir(sub), 0, "%s: %s", sub, strerror(errno));
	cr_expect_eq(rmdir(dir), 0, "%s: %s", dir, strerror(errno));
}
