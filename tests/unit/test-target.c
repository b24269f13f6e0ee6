/* What /proc says about a process (lib/target/). */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
