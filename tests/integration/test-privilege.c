/*
 * Least privilege (issue 6): cprof as an ordinary user (nobody, uid 65534,
 * set in a forked child with setresuid, see th_run_as()) profiles its own
 * processes where the kernel allows, and otherwise says which setting or
 * capability is missing and how to fix it. And as root it does not let
 * other users steer it: no symbolic link planted in a shared directory is
 * followed to the output, and the agent's channel (a memfd in the target)
 * cannot be opened by another user.
 *
 * The kernel settings are read, never changed (a shared machine): a test
 * whose setting is not here skips with the reason.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testhelp.h"

#define RUN_TIMEOUT_MS 30000
#define NOBODY 65534

TestSuite(privilege, .init = th_init, .fini = th_cleanup, .timeout = 180);

static void require_root(void)
{
	if (geteuid() != 0)
		TH_SKIP_MISSING("needs root, to become nobody (setresuid) in a child");
}

/* A kernel setting from /proc/sys, or @dflt when it is not there. */
static int sysctl_int(const char *path, int dflt)
{
	FILE *f = fopen(path, "re");
	int v = dflt;

	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = dflt;
		fclose(f);
	}
	return v;
}

/* A directory nobody can write into, for its profiles. */
static const char *nobody_dir(void)
{
	const char *dir = th_tmp_dir("nobody");

	cr_assert(chmod(dir, 0777) == 0);
	return dir;
}

/* Runs cprof as nobody with @args into @r. */
static void run_as_nobody(struct th_run *r, const char *const *args)
{
	th_run_as(NOBODY, NOBODY);
	th_run_cprof_ex(r, RUN_TIMEOUT_MS, 0, 0, args);
	th_run_as((uid_t)-1, (gid_t)-1);
	cr_log_info("as nobody: %s %s: exit %d %.*s", args[0], args[1], r->exit_code,
		    (int)strcspn(r->err, "\n"), r->err);
}
#define AS_NOBODY(r, ...) run_as_nobody((r), (const char *const[]){ __VA_ARGS__, NULL })

/* A busy target owned by nobody. */
static pid_t nobody_target(void)
{
	pid_t pid;

	th_run_as(NOBODY, NOBODY);
	pid = TH_SPAWN("checksum", "60", "--report", th_tmp_path("unused.report"), "--alloc", "1");
	th_run_as((uid_t)-1, (gid_t)-1);
	return pid;
}

/* ---- an ordinary user and its own process -------------------------------- */

/* perf_event_paranoid <= 2 lets a user sample its own threads (user space
 * only): the per-thread mode. */
Test(privilege, cpu_of_own_process)
{
	int paranoid = sysctl_int("/proc/sys/kernel/perf_event_paranoid", 2);
	char out[4200];
	struct th_run r;
	pid_t target;

	require_root();
	snprintf(out, sizeof(out), "%s/cpu.pb.gz", nobody_dir());
	target = nobody_target();
	AS_NOBODY(&r, "cpu", "-p", th_pid_str(target), "-d", "500ms", "-o", out);
	if (paranoid > 2) {
		cr_expect_eq(r.exit_code, 3, "paranoid %d: exit %d:\n%s", paranoid, r.exit_code,
			     r.err);
		cr_expect(strstr(r.err, "kernel.perf_event_paranoid") != NULL, "%s", r.err);
	} else {
		struct profile *p;

		cr_assert_eq(r.exit_code, 0, "paranoid %d: exit %d:\n%s", paranoid, r.exit_code,
			     r.err);
		p = th_load_profile(out);
		cr_expect_gt(p->nsamples, 0, "no samples of nobody's own busy process");
		profile_free(p);
	}
	th_run_release(&r);
	th_assert_let_go(target, false, "after cpu as nobody");
	th_kill(target);
}

/* wall reads /proc and copies stacks as the target's own user may; only its
 * CPU stacks need perf, and without them it still accounts every thread. */
Test(privilege, wall_of_own_process)
{
	int paranoid = sysctl_int("/proc/sys/kernel/perf_event_paranoid", 2);
	char out[4200];
	struct profile *p;
	struct th_run r;
	pid_t target;

	require_root();
	snprintf(out, sizeof(out), "%s/wall.pb.gz", nobody_dir());
	target = nobody_target();
	AS_NOBODY(&r, "wall", "-p", th_pid_str(target), "-d", "500ms", "-o", out);
	cr_assert_eq(r.exit_code, 0, "paranoid %d: exit %d:\n%s", paranoid, r.exit_code, r.err);
	if (paranoid > 2)
		cr_expect(strstr(r.err, "no stacks for the running time") != NULL, "%s", r.err);
	else if (paranoid > 0) /* no events on the CPUs: a dearer way, said */
		cr_expect(strstr(r.err, "events on the target's threads") != NULL, "%s", r.err);
	p = th_load_profile(out);
	cr_expect_gt(p->nsamples, 0, "no samples of nobody's own process");
	cr_expect_gt(profile_total(p, 1), 400000000, "%.3f s of wall time in a 0.5 s window",
		     profile_total(p, 1) / 1e9);
	profile_free(p);
	th_run_release(&r);
	th_assert_let_go(target, false, "after wall as nobody");
	th_kill(target);
}

/* What paranoid 2 does not allow (system-wide sampling, which needs <= 0):
 * refused with the setting, its value and the fix. */
Test(privilege, cpu_system_mode_refused_precisely)
{
	int paranoid = sysctl_int("/proc/sys/kernel/perf_event_paranoid", 2);
	struct th_run r;
	pid_t target;

	require_root();
	if (paranoid <= 0)
		cr_skip_test("kernel.perf_event_paranoid is %d: everyone may sample system-wide",
			     paranoid);
	target = nobody_target();
	AS_NOBODY(&r, "cpu", "-p", th_pid_str(target), "-d", "300ms", "--mode", "system", "-o",
		  "/dev/null");
	cr_expect_eq(r.exit_code, 3, "exit %d, want 3:\n%s", r.exit_code, r.err);
	cr_expect(strstr(r.err, "kernel.perf_event_paranoid is ") != NULL,
		  "the refusal does not name the setting:\n%s", r.err);
	cr_expect(strstr(r.err, "CAP_PERFMON") != NULL && strstr(r.err, "sysctl ") != NULL,
		  "the refusal does not say how to fix it:\n%s", r.err);
	th_run_release(&r);
	th_assert_let_go(target, false, "after a refused cpu --mode system");
	th_kill(target);
}

/* ptrace of a process of the same user: allowed unless Yama says no. */
static void require_same_uid_ptrace(void)
{
	int scope = sysctl_int("/proc/sys/kernel/yama/ptrace_scope", 0);

	if (scope > 0)
		cr_skip_test("kernel.yama.ptrace_scope is %d: only a parent (or CAP_SYS_PTRACE) "
			     "may trace; this test needs 0", scope);
}

/*
 * busy's main thread sleeps its whole life in one clock_nanosleep: asleep
 * however slow cprof is. checksum's threads all wake within 100 ms, and
 * under ASan beside another suite all of them once woke before cprof read
 * them, which said nothing of the permission.
 */
static pid_t nobody_sleeper(void)
{
	pid_t pid;

	th_run_as(NOBODY, NOBODY);
	pid = TH_SPAWN("busy", "1", "60");
	th_run_as((uid_t)-1, (gid_t)-1);
	return pid;
}

Test(privilege, threads_of_own_process)
{
	struct th_run r;
	pid_t target;

	require_root();
	require_same_uid_ptrace();
	target = nobody_sleeper();
	AS_NOBODY(&r, "threads", "-p", th_pid_str(target), "--debug", "2");
	cr_expect_eq(r.exit_code, 0, "exit %d:\n%s", r.exit_code, r.err);
	cr_expect(strstr(r.out, "\"busy-0\"") != NULL, "no busy-0 thread:\n%s", r.out);
	/* /proc/PID/task/TID/syscall asks what ptrace does: granted here. */
	cr_expect(strstr(r.out, "read asleep without a stop:") != NULL,
		  "no thread read without a stop:\n%s", r.out);
	th_run_release(&r);
	th_assert_let_go(target, false, "after threads as nobody");
	th_kill(target);
}

Test(privilege, heap_of_own_process)
{
	char out[4200];
	struct th_run r;
	pid_t target;

	require_root();
	require_same_uid_ptrace();
	snprintf(out, sizeof(out), "%s/heap.pb.gz", nobody_dir());
	target = nobody_target();
	AS_NOBODY(&r, "heap", "-p", th_pid_str(target), "-d", "500ms", "--heap-rate", "4KiB", "-o", out);
	cr_expect_eq(r.exit_code, 0, "exit %d:\n%s", r.exit_code, r.err);
	if (r.exit_code == 0)
		profile_free(th_load_profile(out));
	th_run_release(&r);
	th_assert_let_go(target, false, "after heap as nobody");
	th_kill(target);
}

/* ---- output paths in shared directories -------------------------------- */

/* A directory nobody may not write to (root ignores permissions, so this
 * row of the bad-input table is here): exit 4 before the target is touched. */
Test(privilege, output_dir_not_writable)
{
	const char *dir = th_tmp_dir("roots"); /* 0755, root's */
	char out[4200];
	struct th_run r;
	pid_t target;

	require_root();
	require_same_uid_ptrace();
	snprintf(out, sizeof(out), "%s/threads.pb.gz", dir);
	target = nobody_target();
	AS_NOBODY(&r, "threads", "-p", th_pid_str(target), "-o", out);
	cr_expect_eq(r.exit_code, 4, "exit %d, want 4:\n%s", r.exit_code, r.err);
	cr_expect(strstr(r.err, "Permission denied") != NULL, "%s", r.err);
	th_run_release(&r);
	cr_expect_eq(th_dir_entries(dir), 0, "something was written");
	th_assert_let_go(target, false, "after an unwritable output");
	th_kill(target);
}

/*
 * /tmp-like: sticky and world-writable. Nobody plants OUT -> VICTIM; root's
 * cprof refuses it (exit 4, before attaching), and neither the link nor the
 * victim changes. The same link made by root itself is followed as usual.
 */
Test(privilege, symlink_in_shared_dir_not_followed)
{
	const char *shared = th_tmp_dir("shared");
	const char *victim = th_tmp_path("victim");
	char link[4200], text[64] = "";
	struct th_run r;
	struct stat st;
	FILE *f;
	pid_t target;

	require_root();
	cr_assert(chmod(shared, 01777) == 0);
	f = fopen(victim, "we");
	cr_assert(f);
	fputs("precious\n", f);
	fclose(f);
	snprintf(link, sizeof(link), "%s/threads.txt", shared);
	cr_assert(symlink(victim, link) == 0);
	cr_assert(lchown(link, NOBODY, NOBODY) == 0);

	target = TH_SPAWN("busy", "1", "60");
	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", th_pid_str(target), "--debug", "1", "-o",
		 link);
	cr_expect_eq(r.exit_code, 4, "exit %d, want 4:\n%s", r.exit_code, r.err);
	cr_expect(strstr(r.err, "is a symbolic link owned by uid 65534") != NULL, "%s", r.err);
	th_run_release(&r);
	cr_assert(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the planted link was replaced");
	f = fopen(victim, "re");
	cr_assert(f && fgets(text, sizeof(text), f));
	fclose(f);
	cr_expect_str_eq(text, "precious\n", "the victim was written");
	th_assert_let_go(target, false, "after a refused output");

	/* Root's own link in the same directory: used (replaced by the profile). */
	cr_assert(lchown(link, 0, 0) == 0);
	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", th_pid_str(target), "--debug", "1", "-o",
		 link);
	cr_expect_eq(r.exit_code, 0, "root's own link: exit %d:\n%s", r.exit_code, r.err);
	th_run_release(&r);
	th_kill(target);
}

/* A device behind another user's link (the dangerous case: written in place). */
Test(privilege, symlink_to_device_not_followed)
{
	const char *shared = th_tmp_dir("shared");
	char link[4200];
	struct th_run r;
	pid_t target;

	require_root();
	cr_assert(chmod(shared, 01777) == 0);
	snprintf(link, sizeof(link), "%s/cpu.pb.gz", shared);
	cr_assert(symlink("/dev/full", link) == 0);
	cr_assert(lchown(link, NOBODY, NOBODY) == 0);
	target = TH_SPAWN("busy", "1", "60");
	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", th_pid_str(target), "-o", link);
	/* Following it would have written to /dev/full: ENOSPC, also exit 4. */
	cr_expect_eq(r.exit_code, 4, "exit %d, want 4:\n%s", r.exit_code, r.err);
	cr_expect(strstr(r.err, "not following it") != NULL, "the link was followed:\n%s", r.err);
	th_run_release(&r);
	th_kill(target);
}

/* ---- the agent named by CPROF_AGENT --------------------------------------- */

/* Copies the agent built beside cprof to @dir/cprof-agent.so, mode @mode,
 * owner @uid; returns the copy's path (static). */
static const char *agent_copy(const char *dir, mode_t mode, uid_t uid)
{
	static char path[4200];
	uint8_t *buf;
	size_t len;
	int fd;

	snprintf(path, sizeof(path), "%s/cprof-agent.so", dir);
	cr_assert_eq(th_read_file(CPROF_AGENT_PATH, &buf, &len), 0);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, buf, len), (ssize_t)len);
	close(fd);
	free(buf);
	cr_assert(chown(path, uid, uid) == 0 && chmod(path, mode) == 0);
	return path;
}

/* Whether @pid maps a file whose path contains @what. */
static bool maps_contain(pid_t pid, const char *what)
{
	char path[64];
	uint8_t *maps;
	size_t len;
	bool found;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	cr_assert_eq(th_read_file(path, &maps, &len), 0);
	found = memmem(maps, len, what, strlen(what)) != NULL;
	free(maps);
	return found;
}

/* Every directory from "/" down to @dir owned by root and writable by root
 * alone: where root's cprof may take CPROF_AGENT from. */
static bool root_only_dirs(const char *dir)
{
	char path[4200], *slash;
	struct stat st;

	snprintf(path, sizeof(path), "%s", dir);
	for (;;) {
		if (lstat(path[0] ? path : "/", &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 ||
		    (st.st_mode & (S_IWGRP | S_IWOTH)))
			return false;
		if (!path[0])
			return true;
		slash = strrchr(path, '/');
		*slash = '\0';
	}
}

/* Runs `cprof heap` on @target with CPROF_AGENT=@agent; expects the refusal
 * (exit 64, the cause @why, the path, the hint) and an untouched target. */
static void expect_agent_refused(pid_t target, const char *agent, const char *why)
{
	struct th_run r;

	setenv("CPROF_AGENT", agent, 1);
	TH_CPROF(&r, RUN_TIMEOUT_MS, "heap", "-p", th_pid_str(target), "-d", "300ms", "-o",
		 th_tmp_path("agent-env.pb.gz"));
	unsetenv("CPROF_AGENT");
	cr_expect_eq(r.exit_code, 64, "%s: exit %d, want 64:\n%s", agent, r.exit_code, r.err);
	cr_expect(strstr(r.err, "cprof: error: not loading the agent named by CPROF_AGENT") &&
			  strstr(r.err, agent) && strstr(r.err, why),
		  "the refusal of %s does not say '%s':\n%s", agent, why, r.err);
	cr_expect(strstr(r.err, "cprof: hint: ") && strstr(r.err, "unset CPROF_AGENT"),
		  "no hint:\n%s", r.err);
	th_run_release(&r);
	cr_expect(!maps_contain(target, "cprof-agent"), "%s was loaded into the target", agent);
	cr_expect_null(th_agent_header(target), "the target has an agent channel");
	th_assert_let_go(target, false, "after a refused CPROF_AGENT");
}

/*
 * sudo -E passes the user's environment on: root's cprof must not load code
 * that another user could have put or could still change at the path the
 * target will dlopen. Refused before the target is touched (exit 64): a
 * world-writable directory, a group-writable file, a file of another user;
 * taken when root alone owns and can write the file and its directories.
 * An ordinary user's CPROF_AGENT is its own business, as before.
 */
Test(privilege, agent_env_only_from_root_only_paths)
{
	const char *open_dir = th_tmp_dir("agent-0777");
	const char *root_dir = th_tmp_dir("agent-0755");
	const char *agent;
	char maps_entry[4300];
	struct th_run r;
	pid_t target;

	require_root();
	cr_assert(chmod(open_dir, 0777) == 0);
	target = TH_SPAWN("checksum", "60", "--report", th_tmp_path("unused.report"), "--alloc", "1");

	agent = agent_copy(open_dir, 0644, 0);
	/* The first such directory from the root down is named: a checkout
	 * under /tmp (1777) is refused for /tmp already. */
	expect_agent_refused(target, agent,
			     root_only_dirs(th_tmp_dir("agent-probe")) ? "is writable by others (mode 0777)"
								       : "is writable by others");
	/* Not root: taken as it is. */
	setenv("CPROF_AGENT", agent, 1);
	th_run_as(NOBODY, NOBODY);
	TH_CPROF(&r, RUN_TIMEOUT_MS, "--version");
	th_run_as((uid_t)-1, (gid_t)-1);
	unsetenv("CPROF_AGENT");
	cr_expect(strstr(r.out, agent), "nobody's CPROF_AGENT was not taken:\n%s", r.out);
	th_run_release(&r);
	cr_assert(chmod(open_dir, 0755) == 0);

	if (!root_only_dirs(root_dir))
		cr_skip_test("a directory above %s is not root's alone: no place to test the "
			     "accepted case", root_dir);
	agent = agent_copy(root_dir, 0664, 0);
	expect_agent_refused(target, agent, "is writable by its group (mode 0664)");
	agent = agent_copy(root_dir, 0644, NOBODY);
	expect_agent_refused(target, agent, "is owned by uid 65534, not root");
	agent = agent_copy(root_dir, 0666, 0);
	expect_agent_refused(target, agent, "is writable by others (mode 0666)");

	/* root's own copy, 0644 in a root-only 0755 directory: loaded from there. */
	agent = agent_copy(root_dir, 0644, 0);
	setenv("CPROF_AGENT", agent, 1);
	TH_CPROF(&r, RUN_TIMEOUT_MS, "heap", "-p", th_pid_str(target), "-d", "300ms", "-o",
		 th_tmp_path("agent-env.pb.gz"));
	unsetenv("CPROF_AGENT");
	cr_expect_eq(r.exit_code, 0, "root's own agent: exit %d:\n%s", r.exit_code, r.err);
	th_run_release(&r);
	snprintf(maps_entry, sizeof(maps_entry), " %s\n", agent);
	cr_expect(maps_contain(target, maps_entry), "the target did not load %s", agent);
	th_assert_let_go(target, false, "after heap with root's CPROF_AGENT");
	th_kill(target);
}

/* ---- the agent's channel ------------------------------------------------- */

/* Opens @path for reading and for writing as nobody; returns the errnos
 * (0 when it opened) through a pipe. */
static void open_as_nobody(const char *path, int *ret_rd, int *ret_wr)
{
	int fds[2], res[2] = { -1, -1 };
	pid_t child;

	cr_assert(pipe(fds) == 0);
	child = fork();
	cr_assert(child >= 0);
	if (child == 0) {
		int fd;

		if (setgroups(0, NULL) || setresgid(NOBODY, NOBODY, NOBODY) ||
		    setresuid(NOBODY, NOBODY, NOBODY))
			_exit(1);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		res[0] = fd < 0 ? errno : 0;
		fd = open(path, O_RDWR | O_CLOEXEC);
		res[1] = fd < 0 ? errno : 0;
		_exit(write(fds[1], res, sizeof(res)) == sizeof(res) ? 0 : 1);
	}
	close(fds[1]);
	cr_assert(read(fds[0], res, sizeof(res)) == sizeof(res), "the nobody child failed");
	close(fds[0]);
	waitpid(child, NULL, 0);
	*ret_rd = res[0];
	*ret_wr = res[1];
}

/*
 * root profiles root's process with --keep (the agent stays, its memfd
 * open in the target): nobody cannot open that memfd through /proc, for
 * reading or writing, nor ask the background cprof for the profile.
 */
Test(privilege, agent_channel_closed_to_other_users)
{
	char fdpath[320];
	struct th_run r;
	int rd, wr;
	pid_t target;

	require_root();
	target = TH_SPAWN("checksum", "60", "--report", th_tmp_path("unused.report"), "--alloc", "1");
	TH_CPROF(&r, RUN_TIMEOUT_MS, "heap", "-p", th_pid_str(target), "-d", "300ms", "--keep",
		 "-o", th_tmp_path("keep.pb.gz"));
	cr_assert_eq(r.exit_code, 0, "heap --keep: exit %d:\n%s", r.exit_code, r.err);
	th_run_release(&r);
	th_agent_fd_path(target, fdpath, sizeof(fdpath));
	cr_assert(fdpath[0], "no agent memfd in the target after heap --keep");

	open_as_nobody(fdpath, &rd, &wr);
	cr_expect(rd == EACCES || rd == EPERM, "nobody opened the channel for reading (%s)",
		  strerror(rd));
	cr_expect(wr == EACCES || wr == EPERM, "nobody opened the channel for writing (%s)",
		  strerror(wr));

	AS_NOBODY(&r, "heap", "-p", th_pid_str(target), "-o", "/dev/null");
	cr_expect_eq(r.exit_code, 3, "nobody asked for root's background profile: exit %d:\n%s",
		     r.exit_code, r.err);
	th_run_release(&r);

	TH_CPROF(&r, RUN_TIMEOUT_MS, "heap", "-p", th_pid_str(target), "--stop");
	cr_expect_eq(r.exit_code, 0, "heap --stop: exit %d:\n%s", r.exit_code, r.err);
	th_run_release(&r);
	th_assert_let_go(target, false, "after heap --stop");
	th_kill(target);
}
