/*
 * Test helpers: see testhelp.h. Processes are only ever signalled by the pid
 * we got from fork(), and only while we have not reaped them, so a recycled
 * pid can never be hit.
 */
#include "agent/wire.h"
#include "testhelp.h"
#include "target/target.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/perf_event.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pprof/pprof.h"
#include "../targets/truth.h"

#ifndef CPROF_BIN
#error "CPROF_BIN must be defined by the build"
#endif

/* ---- bookkeeping ------------------------------------------------------- */

#define MAX_CHILDREN 64
#define MAX_TMPFILES 256

/*
 * Every child we started and have not forgotten. Targets get a reaper
 * thread, as they would have a parent that reaps them in real life (a
 * profiler must see its target vanish, not linger as our zombie). The lock
 * makes "not reaped yet" and "signal it" one step: a reaped pid may already
 * belong to someone else.
 */
static struct child {
	bool used;
	pid_t pid;
	int fd; /* read end of its stdout, -1 if none */
	char *early;	  /* what it printed after "ready\n", read with it */
	size_t early_len; /* (th_read_until() hands it out first) */
	bool reaped;
	int status;	  /* wait status, once reaped */
	struct rusage ru; /* its resource usage, once reaped */
	bool has_reaper;
	pthread_t reaper;
} children[MAX_CHILDREN];
static pthread_mutex_t children_lock = PTHREAD_MUTEX_INITIALIZER;

static char *tmpfiles[MAX_TMPFILES];
static size_t ntmpfiles;

uint64_t th_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void th_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

static struct child *find_child(pid_t pid)
{
	for (size_t i = 0; i < MAX_CHILDREN; i++)
		if (children[i].used && children[i].pid == pid)
			return &children[i];
	return NULL;
}

static void *reaper_main(void *arg)
{
	struct child *c = arg;
	siginfo_t si;

	/*
	 * Wait for the exit without reaping, then reap under the lock. When
	 * this process is also the child's tracer (lib/inject tests), waitid
	 * reports its ptrace stops even without WSTOPPED: those are not exits,
	 * and must stay for the tracer to see.
	 */
	for (;;) {
		const struct timespec nap = { 0, 1000000 };
		int r = waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOWAIT);

		if (r == -1 && errno == EINTR)
			continue;
		if (r == 0 && (si.si_code == CLD_TRAPPED || si.si_code == CLD_STOPPED)) {
			nanosleep(&nap, NULL);
			continue;
		}
		break;
	}
	pthread_mutex_lock(&children_lock);
	if (!c->reaped) {
		while (wait4(c->pid, &c->status, 0, &c->ru) == -1 && errno == EINTR)
			;
		c->reaped = true;
	}
	pthread_mutex_unlock(&children_lock);
	return NULL;
}

static void track(pid_t pid, int fd, bool reap)
{
	struct child *c = NULL;

	pthread_mutex_lock(&children_lock);
	for (size_t i = 0; i < MAX_CHILDREN && !c; i++)
		if (!children[i].used)
			c = &children[i];
	if (c) {
		memset(c, 0, sizeof(*c));
		c->used = true;
		c->pid = pid;
		c->fd = fd;
	}
	pthread_mutex_unlock(&children_lock);
	if (!c) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		cr_assert_fail("too many child processes in one test");
	}
	if (reap) {
		cr_assert(pthread_create(&c->reaper, NULL, reaper_main, c) == 0);
		c->has_reaper = true;
	}
}

/* Forgets a reaped child. */
static void untrack(struct child *c)
{
	if (c->has_reaper)
		pthread_join(c->reaper, NULL);
	if (c->fd >= 0)
		close(c->fd);
	free(c->early);
	pthread_mutex_lock(&children_lock);
	c->used = false;
	pthread_mutex_unlock(&children_lock);
}

void th_kill(pid_t pid)
{
	struct child *c;

	pthread_mutex_lock(&children_lock);
	c = pid > 0 ? find_child(pid) : NULL;
	if (c && !c->reaped) {
		kill(pid, SIGKILL);
		while (wait4(pid, &c->status, 0, &c->ru) == -1 && errno == EINTR)
			;
		c->reaped = true;
	}
	pthread_mutex_unlock(&children_lock);
	if (c)
		untrack(c);
}

void th_init(void)
{
	/* A child that closes its end of a pipe must not kill the test (children
	 * get the default dispositions back in child_setup()). */
	signal(SIGPIPE, SIG_IGN);
	mkdir(TEST_TMPDIR, 0755);
}

/*
 * Removes @path: a file, or a directory and everything in it, never
 * following a symlink nor crossing into another file system (a container
 * root of test-container may have had mounts in it).
 */
static void remove_at(int dirfd, const char *name, dev_t dev)
{
	struct stat st;
	struct dirent *e;
	DIR *d;
	int fd;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return;
	if (!S_ISDIR(st.st_mode)) {
		unlinkat(dirfd, name, 0);
		return;
	}
	if (st.st_dev != dev)
		return;
	fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return;
	}
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			remove_at(fd, e->d_name, dev);
	closedir(d);
	unlinkat(dirfd, name, AT_REMOVEDIR);
}

static void remove_tree(const char *path)
{
	struct stat st;

	if (lstat(path, &st) == 0)
		remove_at(AT_FDCWD, path, st.st_dev);
}

void th_cleanup(void)
{
	for (size_t i = 0; i < MAX_CHILDREN; i++)
		if (children[i].used)
			th_kill(children[i].pid);
	for (size_t i = 0; i < ntmpfiles; i++) {
		if (!getenv("CPROF_TEST_KEEP"))
			remove_tree(tmpfiles[i]);
		free(tmpfiles[i]);
	}
	ntmpfiles = 0;
}

const char *th_tmp_path(const char *name)
{
	static unsigned counter;
	char *path;

	cr_assert(ntmpfiles < MAX_TMPFILES);
	cr_assert(asprintf(&path, "%s/%s-%d-%u", TEST_TMPDIR, name, (int)getpid(), counter++) > 0);
	unlink(path);
	tmpfiles[ntmpfiles++] = path;
	return path;
}

const char *th_tmp_dir(const char *name)
{
	const char *path = th_tmp_path(name);

	cr_assert(mkdir(path, 0755) == 0, "mkdir %s: %s", path, strerror(errno));
	return path;
}

int th_dir_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

/* In a child after fork: die with the test, default signal dispositions. */
/* Who the children started next run as (th_run_as()); -1: as we do. */
static uid_t run_uid = (uid_t)-1;
static gid_t run_gid = (gid_t)-1;

void th_run_as(uid_t uid, gid_t gid)
{
	run_uid = uid;
	run_gid = gid;
}

static void child_setup(pid_t parent)
{
	sigset_t none;

	/* Before PR_SET_PDEATHSIG: a change of credentials clears it. */
	if (run_uid != (uid_t)-1 && (setgroups(0, NULL) != 0 || setresgid(run_gid, run_gid, run_gid) != 0 ||
				     setresuid(run_uid, run_uid, run_uid) != 0)) {
		dprintf(STDERR_FILENO, "cannot become uid %u: %s\n", (unsigned)run_uid,
			strerror(errno));
		_exit(126);
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	int devnull = open("/dev/null", O_RDONLY);
	if (devnull >= 0) {
		dup2(devnull, STDIN_FILENO);
		close(devnull);
	}
}

/* ---- targets ----------------------------------------------------------- */

pid_t th_spawn_target(const char *name, const char *const *args)
{
	char path[4096];

	if (name[0] == '/')
		return th_spawn_path(name, args);
	snprintf(path, sizeof(path), "%s/%s", TARGETS_DIR, name);
	return th_spawn_path(path, args);
}

pid_t th_spawn_path(const char *path, const char *const *args)
{
	const char *argv[32];
	size_t argc = 0;

	cr_assert(access(path, X_OK) == 0, "target %s is not built: %s", path, strerror(errno));
	argv[argc++] = path;
	for (; args && *args; args++) {
		cr_assert(argc < ARRAY_SIZE(argv) - 1);
		argv[argc++] = *args;
	}
	argv[argc] = NULL;
	return th_spawn_cmd(argv, path);
}

/* Keeps what a target printed after "ready\n" in the same read. */
static void keep_early(pid_t pid, const char *data, size_t len)
{
	struct child *c;

	if (!len)
		return;
	pthread_mutex_lock(&children_lock);
	c = find_child(pid);
	if (c && !c->early) {
		c->early = malloc(len);
		if (c->early) {
			memcpy(c->early, data, len);
			c->early_len = len;
		}
	}
	pthread_mutex_unlock(&children_lock);
}

pid_t th_spawn_cmd(const char *const *argv, const char *name)
{
	int fds[2];
	pid_t parent = getpid(), pid;

	cr_assert(pipe2(fds, O_CLOEXEC) == 0);
	pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		child_setup(parent);
		dup2(fds[1], STDOUT_FILENO);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(fds[1]);
	track(pid, fds[0], true);

	/* Wait for "ready\n", at most TH_READY_TIMEOUT_S. */
	char buf[256];
	size_t len = 0;
	uint64_t deadline = th_now_ns() + TH_READY_TIMEOUT_S * 1000000000ULL;
	for (;;) {
		struct pollfd pfd = {fds[0], POLLIN, 0};
		uint64_t now = th_now_ns();

		cr_assert(now < deadline, "target %s did not say ready within %d s", name,
			  TH_READY_TIMEOUT_S);
		int n = poll(&pfd, 1, (int)((deadline - now) / 1000000) + 1);
		if (n < 0 && errno == EINTR)
			continue;
		cr_assert(n >= 0, "poll: %s", strerror(errno));
		if (n == 0)
			continue;
		ssize_t r = read(fds[0], buf + len, sizeof(buf) - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		cr_assert(r > 0, "target %s exited before it was ready", name);
		len += (size_t)r;
		buf[len] = '\0';
		char *ready = strstr(buf, "ready\n");
		if (ready) {
			keep_early(pid, ready + 6, len - (size_t)(ready + 6 - buf));
			return pid;
		}
		cr_assert(len < sizeof(buf) - 1, "target %s printed garbage before ready", name);
	}
}

/* True if @buf[0, @len) holds @line as a whole, finished line. */
static bool has_line(const char *buf, size_t len, const char *line)
{
	size_t n = strlen(line);
	const char *p = buf, *end = buf + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));

		if (!nl)
			return false;
		if ((size_t)(nl - p) == n && memcmp(p, line, n) == 0)
			return true;
		p = nl + 1;
	}
	return false;
}

int th_read_until(pid_t pid, const char *line, int timeout_ms, char **ret_out)
{
	uint64_t deadline = th_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
	size_t len = 0, alloc = 4096;
	char *buf = malloc(alloc);
	int fd = -1, ret;
	struct child *c;

	cr_assert(buf);
	buf[0] = '\0';
	pthread_mutex_lock(&children_lock);
	c = find_child(pid);
	if (c) {
		fd = c->fd;
		if (c->early) {
			if (c->early_len + 1 > alloc) {
				free(buf);
				alloc = c->early_len + 1;
				buf = malloc(alloc);
			}
			if (buf) {
				memcpy(buf, c->early, c->early_len);
				len = c->early_len;
			}
			free(c->early);
			c->early = NULL;
			c->early_len = 0;
		}
	}
	pthread_mutex_unlock(&children_lock);
	cr_assert(buf);
	buf[len] = '\0';
	cr_assert(fd >= 0, "th_read_until: %d is not a target of ours with its stdout", (int)pid);
	for (;;) {
		struct pollfd pfd = {fd, POLLIN, 0};
		uint64_t now = th_now_ns();
		ssize_t r;
		int n;

		if (has_line(buf, len, line)) {
			ret = 0;
			break;
		}
		if (now >= deadline) {
			ret = -ETIMEDOUT;
			break;
		}
		n = poll(&pfd, 1, (int)((deadline - now) / 1000000) + 1);
		if (n < 0 && errno == EINTR)
			continue;
		cr_assert(n >= 0, "poll: %s", strerror(errno));
		if (n == 0)
			continue;
		if (len + 4096 + 1 > alloc) {
			alloc *= 2;
			buf = realloc(buf, alloc);
			cr_assert(buf);
		}
		r = read(fd, buf + len, alloc - len - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			ret = -EPIPE;
			break;
		}
		len += (size_t)r;
		buf[len] = '\0';
	}
	*ret_out = buf;
	return ret;
}

bool th_signal(pid_t pid, int sig)
{
	struct child *c;
	bool sent = false;

	pthread_mutex_lock(&children_lock);
	c = pid > 0 ? find_child(pid) : NULL;
	if (c && !c->reaped)
		sent = kill(pid, sig) == 0;
	pthread_mutex_unlock(&children_lock);
	return sent;
}

bool th_alive(pid_t pid)
{
	siginfo_t si;
	bool alive = false;

	pthread_mutex_lock(&children_lock);
	struct child *c = find_child(pid);
	if (c && !c->reaped) {
		memset(&si, 0, sizeof(si));
		alive = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
			si.si_pid == 0;
	}
	pthread_mutex_unlock(&children_lock);
	return alive;
}

/*
 * How child @pid ended, without reaping it: "exit 3", "killed by signal 11"
 * or "still running". Says why a target vanished mid-test.
 */
const char *th_fate(pid_t pid, char *buf, size_t size)
{
	struct child *c;
	siginfo_t si;
	int status = -1;

	memset(&si, 0, sizeof(si));
	pthread_mutex_lock(&children_lock);
	c = find_child(pid);
	if (c && c->reaped)
		status = c->status;
	else if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid)
		status = si.si_code == CLD_EXITED ? W_EXITCODE(si.si_status, 0) : si.si_status;
	pthread_mutex_unlock(&children_lock);
	if (status == -1)
		snprintf(buf, size, c ? "still running" : "not a child of the test");
	else if (WIFEXITED(status))
		snprintf(buf, size, "exit %d", WEXITSTATUS(status));
	else
		snprintf(buf, size, "killed by signal %d, %s", WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	return buf;
}

/* th_wait_exit(), and the child's resource usage in *@ret_ru if non-NULL. */
static int wait_exit_ru(pid_t pid, int timeout_ms, struct rusage *ret_ru)
{
	uint64_t deadline = th_now_ns() + (uint64_t)timeout_ms * 1000000ULL;

	for (;;) {
		int status = -1;
		bool done = false;

		pthread_mutex_lock(&children_lock);
		struct child *c = find_child(pid);
		if (!c) {
			pthread_mutex_unlock(&children_lock);
			return -1;
		}
		if (!c->reaped && !c->has_reaper) {
			pid_t r = wait4(pid, &c->status, WNOHANG, &c->ru);
			if (r == pid)
				c->reaped = true;
		}
		if (c->reaped) {
			status = c->status;
			if (ret_ru)
				*ret_ru = c->ru;
			done = true;
		}
		pthread_mutex_unlock(&children_lock);
		if (done) {
			untrack(c);
			return status;
		}
		if (th_now_ns() >= deadline)
			return -1;
		th_sleep_ms(5);
	}
}

int th_wait_exit(pid_t pid, int timeout_ms)
{
	return wait_exit_ru(pid, timeout_ms, NULL);
}

pid_t th_make_zombie(void)
{
	pid_t pid = fork();

	cr_assert(pid >= 0);
	if (pid == 0)
		_exit(0);
	track(pid, -1, false);
	/* Wait until it really is a zombie. */
	for (int i = 0; i < 2000; i++) {
		siginfo_t si;

		memset(&si, 0, sizeof(si));
		if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
		    si.si_pid == pid)
			return pid;
		th_sleep_ms(1);
	}
	cr_assert_fail("child %d did not exit", (int)pid);
	return -1;
}

pid_t th_dead_pid(void)
{
	for (int tries = 0; tries < 100; tries++) {
		pid_t pid = fork();

		cr_assert(pid >= 0);
		if (pid == 0)
			_exit(0);
		while (waitpid(pid, NULL, 0) == -1 && errno == EINTR)
			;
		/* Reaped: free, unless the kernel already gave it to someone. */
		if (kill(pid, 0) == -1 && errno == ESRCH)
			return pid;
	}
	cr_assert_fail("could not find a free pid");
	return -1;
}

pid_t th_spawn_daemon(const char *const *argv, const char *log_path)
{
	pid_t parent = getpid(), pid;
	int log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	cr_assert(log >= 0, "cannot create %s: %s", log_path, strerror(errno));
	pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		child_setup(parent);
		dup2(log, STDOUT_FILENO);
		dup2(log, STDERR_FILENO);
		execv(argv[0], (char *const *)argv);
		dprintf(STDERR_FILENO, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(log);
	track(pid, -1, true);
	return pid;
}

/* ---- running cprof ----------------------------------------------------- */

static void append(char **buf, size_t *len, size_t *alloc, const char *data, size_t n)
{
	if (*len + n + 1 > *alloc) {
		size_t na = *alloc ? *alloc : 4096;
		while (na < *len + n + 1)
			na *= 2;
		char *nb = realloc(*buf, na);
		cr_assert(nb);
		*buf = nb;
		*alloc = na;
	}
	memcpy(*buf + *len, data, n);
	*len += n;
	(*buf)[*len] = '\0';
}

/*
 * Forks and execs @argv[0] with stdout and stderr piped to us. Returns the
 * pid; *ret_out and *ret_err are the read ends.
 */
static pid_t spawn_piped(const char *const *argv, char *const *envp, int *ret_out, int *ret_err)
{
	int out[2], err[2];
	pid_t parent = getpid(), pid;

	cr_assert(pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0);
	pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		child_setup(parent);
		dup2(out[1], STDOUT_FILENO);
		dup2(err[1], STDERR_FILENO);
		if (envp)
			execve(argv[0], (char *const *)argv, envp);
		else
			execv(argv[0], (char *const *)argv);
		dprintf(STDERR_FILENO, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	*ret_out = out[0];
	*ret_err = err[0];
	track(pid, -1, false);
	return pid;
}

/* Each thread of @pid: its state, wait channel and system call, logged. */
static void log_threads(pid_t pid, const char *who)
{
	char path[400], stat[512], wchan[128], sc[128];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	while (d && (e = readdir(d))) {
		const char *st, *name;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid, e->d_name);
		stat[0] = wchan[0] = sc[0] = '\0';
		if (proc_read(path, stat, sizeof(stat), NULL) < 0)
			continue;
		st = strrchr(stat, ')');
		snprintf(path, sizeof(path), "/proc/%d/task/%s/wchan", (int)pid, e->d_name);
		proc_read(path, wchan, sizeof(wchan), NULL);
		snprintf(path, sizeof(path), "/proc/%d/task/%s/syscall", (int)pid, e->d_name);
		proc_read(path, sc, sizeof(sc), NULL);
		sc[strcspn(sc, "\n")] = '\0';
		name = strchr(stat, '(');
		cr_log_warn("%s %d thread %s %.*s: state %c, wchan %s, syscall %s", who, (int)pid,
			    e->d_name, name && st ? (int)(st + 1 - name) : 0, name ? name : "",
			    st && st[1] ? st[2] : '?', wchan, sc);
	}
	if (d)
		closedir(d);
}

/* Each thread's user-space stack, by eu-stack (elfutils): where a thread
 * waits in a library, which its wait channel alone does not say. */
static void log_stacks(pid_t pid, const char *who)
{
	char cmd[64], line[512];
	unsigned n = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "eu-stack -p %d 2>&1", (int)pid);
	f = popen(cmd, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f) && n++ < 120) {
		line[strcspn(line, "\n")] = '\0';
		cr_log_warn("%s %d: %s", who, (int)pid, line);
	}
	pclose(f);
}

void th_log_where(pid_t pid, const char *who)
{
	log_threads(pid, who);
	log_stacks(pid, who);
}

/* A child that timed out, and its own children (heap --keep's daemon),
 * as they were: where each thread waited. */
static void log_hung(pid_t pid)
{
	struct dirent *e;
	DIR *d = opendir("/proc");

	log_threads(pid, "timed out: pid");
	while (d && (e = readdir(d))) {
		char path[300], stat[512];
		const char *st;
		int ppid = 0;

		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		if (proc_read(path, stat, sizeof(stat), NULL) < 0)
			continue;
		st = strrchr(stat, ')');
		if (st && sscanf(st + 2, "%*c %d", &ppid) == 1 && ppid == pid)
			log_threads((pid_t)atoi(e->d_name), "timed out: its child");
	}
	if (d)
		closedir(d);
}

/* Whether @pid has a handler for @sig (SigCgt of /proc/PID/status). */
static bool catches(pid_t pid, int sig)
{
	char status[4096];
	const char *p;
	unsigned long long mask;

	if (th_task_read(pid, pid, "status", status, sizeof(status)) < 0)
		return false;
	p = strstr(status, "SigCgt:");
	if (!p || sscanf(p + 7, "%llx", &mask) != 1)
		return false;
	return mask & (1ULL << (sig - 1));
}

/*
 * Collects the output of a child started by spawn_piped() until it exits,
 * sending @sig after @sig_after_ms, killing it after @timeout_ms. A signal
 * a test means for cprof's handler waits until cprof has one: on a loaded
 * host (and under ASan) a program may not have reached main @sig_after_ms
 * after its start, and the kernel's default action tests nothing of ours.
 */
static const char *signal_text;
static int signal_nth;
static pid_t signal_pid;

void th_run_signal_after_nth(const char *text, int nth, pid_t pid)
{
	signal_text = text;
	signal_nth = nth;
	signal_pid = pid;
}

void th_run_signal_after(const char *text, pid_t pid)
{
	th_run_signal_after_nth(text, 1, pid);
}

/* How many times @text is in @s. */
static int count_of(const char *s, const char *text)
{
	int n = 0;

	for (const char *at = strstr(s, text); at; at = strstr(at + 1, text))
		n++;
	return n;
}

static void collect(struct th_run *r, int timeout_ms, int sig, int sig_after_ms)
{
	size_t out_alloc = 0, err_alloc = 0;
	bool out_open = true, err_open = true;
	uint64_t deadline = r->start_ns + (uint64_t)timeout_ms * 1000000ULL;
	uint64_t sig_at = r->start_ns + (uint64_t)sig_after_ms * 1000000ULL;
	const char *text = signal_text;
	int nth = signal_nth;
	pid_t to = signal_pid ? signal_pid : r->pid;
	char buf[65536];

	signal_text = NULL;
	signal_nth = 0;
	signal_pid = 0;
	if (text)
		sig_at = UINT64_MAX;
	append(&r->out, &r->out_len, &out_alloc, "", 0);
	append(&r->err, &r->err_len, &err_alloc, "", 0);
	while (out_open || err_open) {
		struct pollfd pfd[2] = {{out_open ? r->out_fd : -1, POLLIN, 0},
					{err_open ? r->err_fd : -1, POLLIN, 0}};
		uint64_t now = th_now_ns();

		if (text && sig_at == UINT64_MAX && count_of(r->err, text) >= nth)
			sig_at = now + (uint64_t)sig_after_ms * 1000000ULL;
		if (sig && !r->signal_ns && now >= sig_at &&
		    (to != r->pid || sig == SIGKILL || sig == SIGSTOP || catches(r->pid, sig))) {
			kill(to, sig);
			r->signal_ns = now;
		}
		if (now >= deadline) {
			r->timed_out = true;
			break;
		}
		uint64_t until = deadline;
		if (sig && !r->signal_ns)
			until = MIN(until, MAX(sig_at, now + 10000000));
		int n = poll(pfd, 2, (int)((until - now) / 1000000) + 1);
		if (n < 0 && errno == EINTR)
			continue;
		cr_assert(n >= 0);
		for (int i = 0; i < 2; i++) {
			if (!pfd[i].revents)
				continue;
			ssize_t k = read(pfd[i].fd, buf, sizeof(buf));
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0) {
				*(i == 0 ? &out_open : &err_open) = false;
				continue;
			}
			if (i == 0)
				append(&r->out, &r->out_len, &out_alloc, buf, (size_t)k);
			else
				append(&r->err, &r->err_len, &err_alloc, buf, (size_t)k);
		}
	}
	close(r->out_fd);
	close(r->err_fd);
	r->out_fd = r->err_fd = -1;

	if (!r->timed_out) {
		/* Output closed: the process should be exiting. */
		uint64_t now = th_now_ns();
		int left = now < deadline ? (int)((deadline - now) / 1000000) + 1 : 0;
		int status = wait_exit_ru(r->pid, left, &r->ru);
		if (status == -1) {
			r->timed_out = true;
		} else {
			r->status = status;
			r->end_ns = th_now_ns();
			r->end_rt = realtime_ns();
		}
	}
	if (r->timed_out) {
		log_hung(r->pid);
		th_kill(r->pid);
		r->end_ns = th_now_ns();
		r->end_rt = realtime_ns();
		r->exit_code = -1;
		return;
	}
	if (WIFEXITED(r->status))
		r->exit_code = WEXITSTATUS(r->status);
	else if (WIFSIGNALED(r->status))
		r->exit_code = 128 + WTERMSIG(r->status);
	else
		r->exit_code = -1;
}

void th_run_cmd_ex(struct th_run *r, int timeout_ms, int sig, int sig_after_ms,
		   const char *const *argv)
{
	memset(r, 0, sizeof(*r));
	cr_assert(access(argv[0], X_OK) == 0, "%s is not executable", argv[0]);
	r->start_ns = th_now_ns();
	r->start_rt = realtime_ns();
	r->pid = spawn_piped(argv, NULL, &r->out_fd, &r->err_fd);
	collect(r, timeout_ms, sig, sig_after_ms);
}

void th_run_cprof_ex(struct th_run *r, int timeout_ms, int sig, int sig_after_ms,
		     const char *const *args)
{
	const char *argv[64];
	size_t argc = 0;

	cr_assert(access(CPROF_BIN, X_OK) == 0, "%s is not built", CPROF_BIN);
	argv[argc++] = CPROF_BIN;
	for (; args && *args; args++) {
		cr_assert(argc < ARRAY_SIZE(argv) - 1);
		argv[argc++] = *args;
	}
	argv[argc] = NULL;
	th_run_cmd_ex(r, timeout_ms, sig, sig_after_ms, argv);
}

void th_run_release(struct th_run *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

void th_run_log(const struct th_run *r, const char *what)
{
	cr_log_info("%s: exit %d%s after %.2f s; stderr:\n%s", what, r->exit_code,
		    r->timed_out ? " (timed out)" : "", (double)(r->end_ns - r->start_ns) / 1e9,
		    r->err ? r->err : "");
}

/* ---- files and profiles ------------------------------------------------ */

int th_read_file(const char *path, uint8_t **ret_buf, size_t *ret_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint8_t *buf = NULL;
	size_t len = 0, alloc = 0;

	if (fd < 0)
		return -errno;
	for (;;) {
		if (len == alloc) {
			size_t na = alloc ? alloc * 2 : 65536;
			uint8_t *nb = realloc(buf, na);
			if (!nb) {
				free(buf);
				close(fd);
				return -ENOMEM;
			}
			buf = nb;
			alloc = na;
		}
		ssize_t n = read(fd, buf + len, alloc - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = -errno;
			free(buf);
			close(fd);
			return e;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	*ret_buf = buf;
	*ret_len = len;
	return 0;
}

char *th_read_text(const char *path, size_t *ret_len)
{
	uint8_t *buf = NULL, *text;
	size_t len = 0;

	if (th_read_file(path, &buf, &len) < 0)
		return NULL;
	text = realloc(buf, len + 1);
	cr_assert_not_null(text, "out of memory for %s", path);
	text[len] = '\0';
	if (ret_len)
		*ret_len = len;
	return (char *)text;
}

bool th_is_gzip(const uint8_t *buf, size_t len)
{
	return len >= 2 && buf[0] == 0x1f && buf[1] == 0x8b;
}

struct profile *th_load_profile(const char *path)
{
	uint8_t *buf;
	size_t len;
	struct profile *p = NULL;
	int r = th_read_file(path, &buf, &len);

	cr_assert(r == 0, "cannot read %s: %s", path, strerror(-r));
	cr_assert(th_is_gzip(buf, len), "%s is not gzipped (%zu bytes)", path, len);
	r = pprof_decode(buf, len, &p);
	free(buf);
	cr_assert(r == 0 && p, "pprof_decode(%s): %s", path, strerror(-r));
	return p;
}

int th_sample_type(const struct profile *p, const char *type, const char *unit)
{
	for (size_t i = 0; i < p->nsample_types; i++)
		if (p->sample_types[i].type && p->sample_types[i].unit &&
		    strcmp(p->sample_types[i].type, type) == 0 &&
		    strcmp(p->sample_types[i].unit, unit) == 0)
			return (int)i;
	return -1;
}

double th_sample_sum(const struct profile *p, const char *type, const char *unit)
{
	int vi = th_sample_type(p, type, unit);
	double sum = 0;

	cr_assert_geq(vi, 0, "no sample type %s/%s", type, unit);
	for (size_t i = 0; i < p->nsamples; i++)
		sum += (double)p->samples[i].values[vi];
	return sum;
}

FILE *th_report_open(pid_t pid, const char *path)
{
	FILE *f;

	unlink(path);
	cr_assert(th_signal(pid, SIGUSR2), "pid %d is gone: no report at %s", pid, path);
	for (int waited = 0; waited < 5000 && access(path, R_OK) != 0; waited += 10)
		th_sleep_ms(10);
	f = fopen(path, "re");
	cr_assert_not_null(f, "pid %d wrote no report at %s", pid, path);
	return f;
}

void th_ring_report(pid_t pid, const char *path, struct th_ring_report *r)
{
	char line[128];
	FILE *f = th_report_open(pid, path);

	memset(r, 0, sizeof(*r));
	r->single = -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long v;
		char key[32];

		if (sscanf(line, "%31s %llu", key, &v) != 2)
			continue;
		if (!strcmp(key, "ops"))
			r->ops = v;
		else if (!strcmp(key, "cpu_ns"))
			r->cpu_ns = v;
		else if (!strcmp(key, "hooked_ops"))
			r->hooked_ops = v;
		else if (!strcmp(key, "live_objects"))
			r->live_objects = v;
		else if (!strcmp(key, "live_bytes"))
			r->live_bytes = v;
		else if (!strcmp(key, "single"))
			r->single = (int)v;
	}
	fclose(f);
}

const struct profile_location *th_location(const struct profile *p, uint64_t id)
{
	if (id >= 1 && id <= p->nlocations && p->locations[id - 1].id == id)
		return &p->locations[id - 1];
	for (size_t i = 0; i < p->nlocations; i++)
		if (p->locations[i].id == id)
			return &p->locations[i];
	return NULL;
}

const struct profile_function *th_function(const struct profile *p, uint64_t id)
{
	if (id >= 1 && id <= p->nfunctions && p->functions[id - 1].id == id)
		return &p->functions[id - 1];
	for (size_t i = 0; i < p->nfunctions; i++)
		if (p->functions[i].id == id)
			return &p->functions[i];
	return NULL;
}

const struct profile_mapping *th_mapping(const struct profile *p, uint64_t id)
{
	for (size_t i = 0; i < p->nmappings; i++)
		if (p->mappings[i].id == id)
			return &p->mappings[i];
	return NULL;
}

const struct profile_label *th_label(const struct profile_sample *s, const char *key)
{
	for (size_t i = 0; i < s->nlabels; i++)
		if (s->labels[i].key && strcmp(s->labels[i].key, key) == 0)
			return &s->labels[i];
	return NULL;
}

static const char *function_name(const struct profile *p, uint64_t function_id)
{
	const struct profile_function *f = th_function(p, function_id);

	return f && f->name ? f->name : "";
}

bool th_location_has(const struct profile *p, uint64_t id, const char *func)
{
	const struct profile_location *loc = th_location(p, id);

	for (size_t i = 0; loc && i < loc->nlines; i++)
		if (strcmp(function_name(p, loc->lines[i].function_id), func) == 0)
			return true;
	return false;
}

bool th_has_comment(const struct profile *p, const char *text)
{
	for (size_t i = 0; i < p->ncomments; i++)
		if (strstr(p->comments[i], text))
			return true;
	return false;
}

const char *th_leaf_name(const struct profile *p, const struct profile_sample *s)
{
	const struct profile_location *loc;

	if (s->nlocations == 0 || !(loc = th_location(p, s->location_ids[0])) || loc->nlines == 0)
		return "";
	return function_name(p, loc->lines[0].function_id);
}

const char *th_root_name(const struct profile *p, const struct profile_sample *s)
{
	const struct profile_location *loc;

	if (s->nlocations == 0 || !(loc = th_location(p, s->location_ids[s->nlocations - 1])) ||
	    loc->nlines == 0)
		return "";
	return function_name(p, loc->lines[loc->nlines - 1].function_id);
}

static int cmp_sum_cum(const void *a, const void *b)
{
	const struct th_func_sum *x = a, *y = b;

	if (x->cum != y->cum)
		return x->cum < y->cum ? 1 : -1;
	return strcmp(x->name, y->name);
}

void th_func_sums(const struct profile *p, size_t vi, struct th_func_sum **ret, size_t *ret_n)
{
	/* Functions are aggregated by name: one function can appear under several
	 * ids (e.g. one per inlined copy with its own file or start line). */
	struct th_func_sum *sums = calloc(p->nfunctions + 1, sizeof(*sums));
	size_t *slot = calloc(p->nfunctions + 1, sizeof(*slot)); /* function index -> sums index */
	size_t n = 0;
	size_t *seen = NULL, seen_alloc = 0;

	cr_assert(sums && slot);
	for (size_t i = 0; i < p->nfunctions; i++) {
		const char *name = p->functions[i].name ? p->functions[i].name : "";
		size_t j;

		for (j = 0; j < n; j++)
			if (strcmp(sums[j].name, name) == 0)
				break;
		if (j == n)
			sums[n++].name = name;
		slot[i] = j;
	}
	for (size_t s = 0; s < p->nsamples; s++) {
		const struct profile_sample *sm = &p->samples[s];
		int64_t v = sm->values[vi];
		size_t nseen = 0;

		for (size_t l = 0; l < sm->nlocations; l++) {
			const struct profile_location *loc = th_location(p, sm->location_ids[l]);

			for (size_t k = 0; loc && k < loc->nlines; k++) {
				const struct profile_function *f =
					th_function(p, loc->lines[k].function_id);
				if (!f)
					continue;
				size_t j = slot[f - p->functions];
				if (l == 0 && k == 0)
					sums[j].flat += v;
				size_t q;
				for (q = 0; q < nseen; q++)
					if (seen[q] == j)
						break;
				if (q < nseen)
					continue; /* recursion: once per sample */
				if (nseen == seen_alloc) {
					seen_alloc = seen_alloc ? seen_alloc * 2 : 64;
					seen = realloc(seen, seen_alloc * sizeof(*seen));
					cr_assert(seen);
				}
				seen[nseen++] = j;
				sums[j].cum += v;
			}
		}
	}
	free(seen);
	free(slot);
	qsort(sums, n, sizeof(*sums), cmp_sum_cum);
	*ret = sums;
	*ret_n = n;
}

struct th_func_sum th_func_get(const struct th_func_sum *s, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(s[i].name, name) == 0)
			return s[i];
	return (struct th_func_sum){name, 0, 0};
}

/* ---- what the kernel allows ------------------------------------------ */

static int try_perf_open(pid_t pid, int cpu)
{
	struct perf_event_attr attr;
	int fd;

	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = pid == -1 ? PERF_COUNT_SW_CPU_CLOCK : PERF_COUNT_SW_TASK_CLOCK;
	attr.disabled = 1;
	attr.exclude_kernel = 1;
	fd = (int)syscall(SYS_perf_event_open, &attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

void th_require_perf(bool system)
{
	int r = try_perf_open(0, -1);

	if (r < 0)
		TH_SKIP_MISSING("perf_event_open is not allowed here (%s): cprof cpu cannot sample",
			     strerror(-r));
	if (system && (r = try_perf_open(-1, 0)) < 0)
		TH_SKIP_MISSING("cpu-wide perf events are not allowed here (%s; "
			     "kernel.perf_event_paranoid or no CAP_PERFMON)",
			     strerror(-r));
}

/* ---- go tool pprof ----------------------------------------------------- */

char *th_find_in_path(const char *prog)
{
	const char *path = getenv("PATH");
	char *copy, *save = NULL, *dir, *found = NULL;

	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	copy = strdup(path);
	cr_assert(copy);
	for (dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		char *cand;
		cr_assert(asprintf(&cand, "%s/%s", dir, prog) > 0);
		if (access(cand, X_OK) == 0) {
			found = cand;
			break;
		}
		free(cand);
	}
	free(copy);
	return found;
}

int th_pprof_top(const char *path, char **ret_out)
{
	return th_pprof_top_ex(path, NULL, ret_out);
}

int th_pprof_top_ex(const char *path, const char *const *opts, char **ret_out)
{
	char *go = th_find_in_path("go");
	char *env[8], *home, *cache, *pathenv, *tmp;
	const char *argv[16] = {go, "tool", "pprof", "-top"};
	size_t n = 4;
	struct th_run r;

	for (; opts && *opts && n < 14; opts++)
		argv[n++] = *opts;
	argv[n++] = path;
	argv[n] = NULL;

	if (!go)
		TH_SKIP_MISSING("go is not installed: cannot check %s with `go tool pprof`", path);
	cr_assert(asprintf(&home, "HOME=%s/gohome", TEST_TMPDIR) > 0);
	cr_assert(asprintf(&cache, "GOCACHE=%s/gohome/cache", TEST_TMPDIR) > 0);
	cr_assert(asprintf(&tmp, "PPROF_TMPDIR=%s/gohome", TEST_TMPDIR) > 0);
	cr_assert(asprintf(&pathenv, "PATH=%s", getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin") >
		  0);
	mkdir(home + 5, 0755);
	env[0] = home;
	env[1] = cache;
	env[2] = tmp;
	env[3] = pathenv;
	env[4] = "GOTOOLCHAIN=local";
	env[5] = "GOFLAGS=";
	env[6] = NULL;

	memset(&r, 0, sizeof(r));
	r.start_ns = th_now_ns();
	r.start_rt = realtime_ns();
	r.pid = spawn_piped(argv, env, &r.out_fd, &r.err_fd);
	collect(&r, 120000, 0, 0);
	if (ret_out) {
		char *all;
		cr_assert(asprintf(&all, "%s%s", r.out, r.err) >= 0);
		*ret_out = all;
	}
	if (r.exit_code != 0)
		cr_log_info("go tool pprof -top %s: exit %d\n%s%s", path, r.exit_code, r.out,
			    r.err);
	th_run_release(&r);
	free(go);
	free(home);
	free(cache);
	free(tmp);
	free(pathenv);
	return r.exit_code;
}

void th_assert_pprof_ok(const char *path)
{
	char *out = NULL;
	int code = th_pprof_top(path, &out);

	cr_assert_eq(code, 0, "go tool pprof -top rejected %s:\n%s", path, out ? out : "");
	free(out);
}

/* ---- cprof view against go tool pprof ------------------------------------ */

struct row {
	char flat[32], cum[32];
	char name[512]; /* with pprof's "(inline)" mark, if any */
};

/* The rows under the "flat  flat%" header of a pprof -top table. */
static size_t parse_top(const char *text, struct row *rows, size_t max)
{
	const char *p = strstr(text, "      flat  flat%   sum%        cum   cum%\n");
	size_t n = 0;

	cr_assert_not_null(p, "no -top header in:\n%s", text);
	p = strchr(p, '\n') + 1;
	while (*p && n < max) {
		const char *end = strchr(p, '\n');
		char pct1[16], pct2[16], pct3[16];
		int used = 0;

		if (!end)
			end = p + strlen(p);
		if (sscanf(p, "%31s %15s %15s %31s %15s%n", rows[n].flat, pct1, pct2, rows[n].cum,
			   pct3, &used) == 5) {
			const char *name = p + used + 2;

			snprintf(rows[n].name, sizeof(rows[n].name), "%.*s", (int)(end - name), name);
			n++;
		}
		p = *end ? end + 1 : end;
	}
	return n;
}

struct agreement {
	size_t go_rows, view_rows, flat_same, cum_same, missing;
	bool same_table; /* from the header line "flat  flat%" on, byte for byte */
};

/* @view_extra and @go_extra: options of a comparison (NULL-terminated, at
 * most 3; NULL: none); with them the whole outputs must be the same. */
static void view_agrees(const char *path, const char *const *view_extra,
			const char *const *go_extra, const char *index, int top)
{
	static struct row go_rows[512], view_rows[512];
	const char *view_args[12] = { "view", path }, *go_opts[8] = { NULL };
	char sample_index[128], nodecount[32], top_arg[32];
	struct agreement a = { 0 };
	size_t nv = 2, ng = 0;
	struct th_run r;
	char *go_out = NULL, *go_top;

	for (size_t i = 0; view_extra && view_extra[i] && nv < 5; i++)
		view_args[nv++] = view_extra[i];
	for (size_t i = 0; go_extra && go_extra[i] && ng < 3; i++)
		go_opts[ng++] = go_extra[i];

	if (index) {
		view_args[nv++] = "--index";
		view_args[nv++] = index;
		snprintf(sample_index, sizeof(sample_index), "-sample_index=%s", index);
		go_opts[ng++] = sample_index;
	}
	if (top) {
		snprintf(top_arg, sizeof(top_arg), "%d", top);
		view_args[nv++] = "--top";
		view_args[nv++] = top_arg;
		snprintf(nodecount, sizeof(nodecount), "-nodecount=%d", top);
		go_opts[ng++] = nodecount;
	}
	th_run_cprof_ex(&r, 60000, 0, 0, view_args);
	cr_assert_eq(r.exit_code, 0, "cprof view %s: exit %d: %s", path, r.exit_code, r.err);
	a.view_rows = parse_top(r.out, view_rows, 512);
	cr_assert_eq(th_pprof_top_ex(path, go_opts, &go_out), 0, "%s", go_out);
	go_top = strstr(go_out, "      flat  flat%");
	cr_assert_not_null(go_top, "go tool pprof -top printed no table:\n%s", go_out);
	a.go_rows = parse_top(go_out, go_rows, 512);
	a.same_table = !strcmp(strstr(r.out, "      flat  flat%"), go_top);
	for (size_t i = 0; i < a.go_rows; i++) {
		size_t j;

		for (j = 0; j < a.view_rows; j++)
			if (!strcmp(go_rows[i].name, view_rows[j].name))
				break;
		if (j == a.view_rows) {
			a.missing++;
			cr_log_warn("%s: '%s' is in pprof's table, not in cprof view's", path,
				    go_rows[i].name);
			continue;
		}
		a.flat_same += !strcmp(go_rows[i].flat, view_rows[j].flat);
		a.cum_same += !strcmp(go_rows[i].cum, view_rows[j].cum);
		cr_expect_str_eq(view_rows[j].flat, go_rows[i].flat, "%s: flat of %s", path,
				 go_rows[i].name);
	}
	fprintf(stderr, "view: %s%s%s%s%s%s%s%s%s: go tool pprof -top %zu rows, cprof view %zu rows; "
			"flat equal %zu/%zu, cum equal %zu/%zu, whole table %s\n",
		strrchr(path, '/') + 1, go_extra ? " " : "", go_extra ? go_extra[0] : "",
		go_extra && go_extra[1] ? " " : "", go_extra && go_extra[1] ? go_extra[1] : "",
		index ? " --index " : "", index ? index : "",
		top ? " --top " : "", top ? top_arg : "", a.go_rows, a.view_rows, a.flat_same,
		a.go_rows, a.cum_same, a.go_rows, a.same_table ? "identical" : "differs");
	cr_expect_gt(a.go_rows, 0, "pprof's table is empty");
	cr_expect_eq(a.view_rows, a.go_rows, "row counts differ");
	cr_expect_eq(a.missing, 0);
	cr_expect_eq(a.flat_same, a.go_rows);
	cr_expect(a.same_table, "the tables differ:\n%s\nvs pprof's:\n%s", r.out, go_top);
	if (go_extra)
		cr_expect_str_eq(r.out, go_out, "%s: the whole outputs differ", path);
	free(go_out);
	th_run_release(&r);
}

void th_view_agrees_with_pprof(const char *path, const char *index, int top)
{
	view_agrees(path, NULL, NULL, index, top);
}

void th_view_diff_agrees_with_pprof(const char *path, const char *base, bool subtract,
				    bool normalize, const char *index)
{
	const char *view_extra[4] = { subtract ? "--base" : "--diff-base", base,
				      normalize ? "--normalize" : NULL, NULL };
	const char *go_extra[3] = { NULL, normalize ? "-normalize" : NULL, NULL };
	char opt[PATH_MAX + 16];

	snprintf(opt, sizeof(opt), "-%s=%s", subtract ? "base" : "diff_base", base);
	go_extra[0] = opt;
	view_agrees(path, view_extra, go_extra, index, 0);
}

/* ---- the truth, measured from outside ---------------------------------- */

struct reading {
	int64_t rt;  /* CLOCK_REALTIME, middle of the reading */
	int64_t cpu; /* process CPU time */
};

struct th_cpuclock {
	pid_t pid;
	clockid_t clock;
	pthread_t thread;
	pthread_mutex_t lock;
	struct reading *r;
	size_t n, alloc;
	bool stop;
	bool gone;	 /* the process exited: its last reading is final */
	int64_t max_gap; /* widest interval interpolated over, ns */
	int64_t gone_rt; /* first time the clock could not be read */
};

static void *cpuclock_main(void *arg)
{
	struct th_cpuclock *c = arg;
	struct sched_param sp = {.sched_priority = 10};

	/*
	 * On a loaded machine a normal thread can be kept off the CPU for tens
	 * of ms, leaving a hole in the readings right where a window starts or
	 * ends. As root, poll at a real-time priority (a few us every 2 ms).
	 */
	pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
	for (;;) {
		struct timespec ts;
		int64_t a, b;
		int rc;

		/* A reading is stamped with the middle of [a, b]: retry the ones
		 * that were preempted in between. */
		for (int tries = 0;; tries++) {
			a = realtime_ns();
			rc = clock_gettime(c->clock, &ts);
			b = realtime_ns();
			if (rc != 0 || b - a < 100000 || tries == 10)
				break;
		}
		/* A zombie's clock still reads its final value: that is the truth
		 * for the rest of any window, like a gone process's last reading.
		 * (A leader that called pthread_exit() also shows Z while its
		 * other threads run: no target here does that.) */
		bool zombie = false;
		char path[64], buf[512];
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)c->pid);
		FILE *f = fopen(path, "re");
		if (f) {
			size_t k = fread(buf, 1, sizeof(buf) - 1, f);
			buf[k] = '\0';
			fclose(f);
			char *rp = strrchr(buf, ')');
			zombie = rp && (rp[2] == 'Z' || rp[2] == 'X');
		}

		pthread_mutex_lock(&c->lock);
		if (rc != 0 || zombie) {
			if (rc == 0 && c->n < c->alloc) {
				c->r[c->n].rt = a + (b - a) / 2;
				c->r[c->n].cpu = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
				c->n++;
			}
			c->gone = true;
			c->gone_rt = a;
			pthread_mutex_unlock(&c->lock);
			return NULL;
		}
		if (c->n == c->alloc) {
			size_t na = c->alloc ? c->alloc * 2 : 4096;
			struct reading *nr = realloc(c->r, na * sizeof(*nr));
			if (!nr) {
				pthread_mutex_unlock(&c->lock);
				return NULL;
			}
			c->r = nr;
			c->alloc = na;
		}
		c->r[c->n].rt = a + (b - a) / 2;
		c->r[c->n].cpu = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
		c->n++;
		bool stop = c->stop;
		pthread_mutex_unlock(&c->lock);
		if (stop)
			return NULL;
		struct timespec d = {0, 2000000};
		nanosleep(&d, NULL);
	}
}

struct th_cpuclock *th_cpuclock_start(pid_t pid)
{
	struct th_cpuclock *c = calloc(1, sizeof(*c));

	cr_assert(c);
	c->pid = pid;
	cr_assert(clock_getcpuclockid(pid, &c->clock) == 0, "clock_getcpuclockid(%d)", (int)pid);
	pthread_mutex_init(&c->lock, NULL);
	cr_assert(pthread_create(&c->thread, NULL, cpuclock_main, c) == 0);
	/* The first reading must exist before anything it measures starts. */
	for (;;) {
		pthread_mutex_lock(&c->lock);
		bool ok = c->n > 0 || c->gone;
		pthread_mutex_unlock(&c->lock);
		if (ok)
			break;
		th_sleep_ms(1);
	}
	return c;
}

void th_cpuclock_stop(struct th_cpuclock *c)
{
	if (!c || !c->thread)
		return;
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL);
	c->thread = 0;
}

void th_cpuclock_free(struct th_cpuclock *c)
{
	if (!c)
		return;
	th_cpuclock_stop(c);
	pthread_mutex_destroy(&c->lock);
	free(c->r);
	free(c);
}

static int64_t cpu_at(const struct th_cpuclock *c, int64_t t)
{
	if (c->n == 0 || t < c->r[0].rt)
		return -1;
	if (t >= c->r[c->n - 1].rt) {
		/* After the last reading: known only if the process is gone by
		 * then (it used at most one poll interval more than it shows). */
		return c->gone ? c->r[c->n - 1].cpu : -1;
	}
	size_t lo = 0, hi = c->n - 1; /* r[lo].rt <= t < r[hi].rt */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (c->r[mid].rt <= t)
			lo = mid;
		else
			hi = mid;
	}
	const struct reading *a = &c->r[lo], *b = &c->r[hi];
	if (b->rt - a->rt > c->max_gap)
		((struct th_cpuclock *)c)->max_gap = b->rt - a->rt;
	if (b->rt == a->rt)
		return a->cpu;
	return a->cpu +
	       (int64_t)((double)(b->cpu - a->cpu) * (double)(t - a->rt) / (double)(b->rt - a->rt));
}

int64_t th_cpuclock_between(const struct th_cpuclock *c, int64_t t0, int64_t t1)
{
	struct th_cpuclock *m = (struct th_cpuclock *)c;

	pthread_mutex_lock(&m->lock);
	int64_t a = cpu_at(c, t0), b = cpu_at(c, t1);
	pthread_mutex_unlock(&m->lock);
	if (a < 0 || b < 0)
		return -1;
	return b - a;
}

/* ---- the truth, reported by the target itself --------------------------- */

struct th_truth {
	int nthreads;
	pid_t tids[TRUTH_MAX_THREADS];
	bool fifo;
	bool final;
	size_t n;	/* records */
	size_t stride;	/* int64_t per record: stamp, process, threads */
	int64_t *v;	/* record k at v[k * stride] */
};

/* Copies the whole records of the ring @h (mapped, @size bytes, validated)
 * into @t, oldest first. */
static void truth_copy(struct th_truth *t, const struct truth_header *h)
{
	const uint8_t *ring = (const uint8_t *)h + h->header_size;
	size_t ring_size = (size_t)h->capacity * h->record_size;
	uint8_t *copy = malloc(ring_size);

	cr_assert(copy);
	/* final is stored after the last record's count: read it first. */
	t->final = __atomic_load_n(&h->final, __ATOMIC_ACQUIRE) != 0;
	uint64_t w0 = __atomic_load_n(&h->written, __ATOMIC_ACQUIRE);
	memcpy(copy, ring, ring_size);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	uint64_t w1 = __atomic_load_n(&h->written, __ATOMIC_ACQUIRE);
	/* The writer may be filling the slot of record w1: it held w1 - capacity. */
	uint64_t lo = w1 + 1 > h->capacity ? w1 + 1 - h->capacity : 0;

	t->stride = 2 + (size_t)t->nthreads;
	t->v = calloc(w0 > lo ? w0 - lo : 1, t->stride * sizeof(int64_t));
	cr_assert(t->v);
	for (uint64_t i = lo; i < w0; i++) {
		const struct truth_record *r =
			(const struct truth_record *)(copy + (i % h->capacity) * h->record_size);
		int64_t *out = &t->v[t->n * t->stride];
		int64_t rt = r->rt_before + (r->rt_after - r->rt_before) / 2;

		/* Keep the stamps in order (a step of the realtime clock would
		 * break the search): such a record is dropped. */
		if (t->n > 0 && rt < out[-(ptrdiff_t)t->stride])
			continue;
		out[0] = rt;
		out[1] = r->process;
		for (int k = 0; k < t->nthreads; k++)
			out[2 + k] = r->thread[k];
		t->n++;
	}
	free(copy);
}

struct th_truth *th_truth_load(const char *path, char *why, size_t size)
{
	const struct truth_header *h;
	struct th_truth *t;
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		snprintf(why, size, "truth file %s: %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) != 0 || st.st_size < TRUTH_HEADER_SIZE) {
		snprintf(why, size, "truth file %s: too short for a header", path);
		close(fd);
		return NULL;
	}
	h = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (h == MAP_FAILED) {
		snprintf(why, size, "mmap %s: %s", path, strerror(errno));
		return NULL;
	}
	/* Bounded like any input from outside, before any of it is used. */
	if (h->magic != TRUTH_MAGIC || h->version != TRUTH_VERSION ||
	    h->header_size != TRUTH_HEADER_SIZE) {
		snprintf(why, size, "%s: not a truth file of version %d", path, TRUTH_VERSION);
		goto out_unmap;
	}
	if (h->nthreads > TRUTH_MAX_THREADS ||
	    h->record_size != sizeof(struct truth_record) + 8 * h->nthreads || h->capacity == 0 ||
	    (uint64_t)st.st_size < (uint64_t)h->header_size + (uint64_t)h->capacity * h->record_size) {
		snprintf(why, size, "%s: inconsistent header (%u threads, records of %u bytes, %u of them)",
			 path, h->nthreads, h->record_size, h->capacity);
		goto out_unmap;
	}
	t = calloc(1, sizeof(*t));
	cr_assert(t);
	t->nthreads = (int)h->nthreads;
	for (int i = 0; i < t->nthreads; i++)
		t->tids[i] = h->tids[i];
	t->fifo = h->fifo != 0;
	truth_copy(t, h);
	munmap((void *)h, (size_t)st.st_size);
	if (t->n == 0) {
		snprintf(why, size, "%s: no record", path);
		th_truth_free(t);
		return NULL;
	}
	return t;

out_unmap:
	munmap((void *)h, (size_t)st.st_size);
	return NULL;
}

struct th_truth *th_truth_read(const char *path)
{
	char why[320];
	struct th_truth *t = th_truth_load(path, why, sizeof(why));

	cr_assert(t, "%s", why);
	return t;
}

void th_truth_free(struct th_truth *t)
{
	if (!t)
		return;
	free(t->v);
	free(t);
}

int th_truth_nthreads(const struct th_truth *t)
{
	return t->nthreads;
}

pid_t th_truth_tid(const struct th_truth *t, int i)
{
	return i >= 0 && i < t->nthreads ? t->tids[i] : -1;
}

bool th_truth_fifo(const struct th_truth *t)
{
	return t->fifo;
}

/*
 * Column @col of the records at realtime @t, interpolated, or -1 when not
 * covered; the width of the interval it lay in goes to *@ret_gap, and how
 * far the column went in it to *@ret_step (NULL: not wanted).
 */
static int64_t truth_at(const struct th_truth *t, size_t col, int64_t at, int64_t *ret_gap,
			int64_t *ret_step)
{
	const int64_t *first = t->v, *last = &t->v[(t->n - 1) * t->stride];
	int64_t step_;

	if (!ret_step)
		ret_step = &step_;
	*ret_gap = 0;
	*ret_step = 0;
	if (at < first[0])
		return -1;
	if (at >= last[0])
		return at == last[0] || t->final ? last[col] : -1;
	size_t lo = 0, hi = t->n - 1; /* rt[lo] <= at < rt[hi] */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->v[mid * t->stride] <= at)
			lo = mid;
		else
			hi = mid;
	}
	const int64_t *a = &t->v[lo * t->stride], *b = &t->v[hi * t->stride];
	*ret_gap = b[0] - a[0];
	if (a[col] < 0 || b[col] < 0)
		return -1; /* the thread was gone */
	*ret_step = b[col] - a[col];
	return a[col] + (int64_t)((double)(b[col] - a[col]) * (double)(at - a[0]) /
				  (double)(b[0] - a[0]));
}

int64_t th_truth_between(const struct th_truth *t, int i, int64_t t0, int64_t t1)
{
	int64_t g0, g1;

	if (i < TH_TRUTH_PROCESS || i >= t->nthreads || t1 < t0)
		return -1;
	size_t col = i == TH_TRUTH_PROCESS ? 1 : 2 + (size_t)i;
	int64_t a = truth_at(t, col, t0, &g0, NULL), b = truth_at(t, col, t1, &g1, NULL);
	if (a < 0 || b < 0)
		return -1;
	return b - a;
}

int64_t th_truth_gap(const struct th_truth *t, int64_t t0, int64_t t1)
{
	int64_t g0, g1;

	truth_at(t, 1, t0, &g0, NULL);
	truth_at(t, 1, t1, &g1, NULL);
	return g0 > g1 ? g0 : g1;
}

int64_t th_truth_slack(const struct th_truth *t, int i, int64_t t0, int64_t t1)
{
	int64_t g, s0, s1;

	if (i < TH_TRUTH_PROCESS || i >= t->nthreads)
		return -1;
	size_t col = i == TH_TRUTH_PROCESS ? 1 : 2 + (size_t)i;
	if (truth_at(t, col, t0, &g, &s0) < 0 || truth_at(t, col, t1, &g, &s1) < 0)
		return -1;
	return s0 + s1;
}

void th_cpustat_read(struct th_cpustat *s)
{
	unsigned long long v[10] = {0};
	long hz = sysconf(_SC_CLK_TCK);
	struct rusage ru;
	FILE *f = fopen("/proc/stat", "re");

	memset(s, 0, sizeof(*s));
	s->mono_ns = (int64_t)th_now_ns();
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		s->self_ns = th_rusage_ns(&ru);
	if (!f)
		return;
	/* cpu user nice system idle iowait irq softirq steal guest guest_nice */
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		   &v[4], &v[5], &v[6], &v[7]) == 8 &&
	    hz > 0) {
		unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
		s->busy_ns = (int64_t)(busy * (1000000000ULL / (unsigned long long)hz));
		s->ok = true;
	}
	fclose(f);
}

int64_t th_rusage_ns(const struct rusage *ru)
{
	return ((int64_t)ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000000000LL +
	       ((int64_t)ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) * 1000LL;
}

double th_foreign_load(const struct th_cpustat *a, const struct th_cpustat *b, int64_t ours_ns)
{
	cpu_set_t set;
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (!a->ok || !b->ok || b->mono_ns <= a->mono_ns)
		return -1;
	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) < n)
		n = CPU_COUNT(&set);
	int64_t busy = b->busy_ns - a->busy_ns;
	int64_t self = b->self_ns - a->self_ns;
	double foreign =
		(double)(busy - self - ours_ns) / ((double)(b->mono_ns - a->mono_ns) * (double)n);
	return foreign < 0 ? 0 : foreign;
}

int64_t th_cpuclock_gap(const struct th_cpuclock *c)
{
	return c->max_gap;
}

/* The sum over @pid's live threads of their schedstat run times, and with
 * @wait of their times waiting for a CPU too. */
static int64_t schedstat_sum(pid_t pid, bool wait)
{
	char path[64];
	DIR *d;
	struct dirent *e;
	int64_t total = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		char p2[300];
		unsigned long long run = 0, waited = 0;

		if (e->d_name[0] == '.')
			continue;
		snprintf(p2, sizeof(p2), "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
		FILE *f = fopen(p2, "re");
		if (!f)
			continue; /* the thread just exited */
		if (fscanf(f, "%llu %llu", &run, &waited) >= 1)
			total += (int64_t)run + (wait ? (int64_t)waited : 0);
		fclose(f);
	}
	closedir(d);
	return total;
}

int64_t th_schedstat_total(pid_t pid)
{
	return schedstat_sum(pid, false);
}

int64_t th_schedstat_runnable(pid_t pid)
{
	return schedstat_sum(pid, true);
}

int th_task_list(pid_t pid, pid_t *tids, int max)
{
	pid_t *all;
	size_t n;
	int k;

	if (target_list_tids(pid, &all, &n) < 0)
		return 0;
	k = n < (size_t)max ? (int)n : max;
	memcpy(tids, all, (size_t)k * sizeof(*tids));
	free(all);
	return k;
}

/* ---- the target is let go -------------------------------------------- */

/* Reads a small /proc file of thread @tid of @pid. Returns 0 or -1. */
int th_task_read(pid_t pid, pid_t tid, const char *what, char *buf, size_t size)
{
	char path[96];
	size_t k;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/%s", (int)pid, (int)tid, what);
	f = fopen(path, "re");
	if (!f)
		return -1;
	k = fread(buf, 1, size - 1, f);
	fclose(f);
	buf[k] = '\0';
	return 0;
}

/* State letter of thread @tid of @pid, 0 when it is gone. */
char th_task_state(pid_t pid, pid_t tid)
{
	char buf[1024];
	const char *p;

	if (th_task_read(pid, tid, "stat", buf, sizeof(buf)) < 0)
		return 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : 0;
}

/* TracerPid of thread @tid of @pid, -1 when it is gone. */
long th_task_tracer(pid_t pid, pid_t tid)
{
	char path[96], line[256];
	long tracer = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)tid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "TracerPid:", 10) == 0)
			tracer = strtol(line + 10, NULL, 10);
	fclose(f);
	return tracer;
}

/*
 * The target comes first: no thread of @pid may be traced or in a trace
 * stop. With @stopped, every thread must be in group stop (kill -STOP)
 * still; without, none may be. Threads that vanish meanwhile are skipped.
 */
void th_assert_let_go(pid_t pid, bool stopped, const char *after)
{
	pid_t tids[1024];
	int n = th_task_list(pid, tids, 1024);
	char fate[64];

	cr_assert(n > 0, "%s: pid %d has no threads left (%s)", after, (int)pid,
		  th_fate(pid, fate, sizeof(fate)));
	for (int i = 0; i < n; i++) {
		long tracer = th_task_tracer(pid, tids[i]);
		char st = th_task_state(pid, tids[i]);

		if (tracer < 0 || !st)
			continue; /* exited meanwhile */
		cr_assert_eq(tracer, 0, "%s: thread %d of pid %d is still traced by %ld", after,
			     (int)tids[i], (int)pid, tracer);
		cr_assert(st != 't', "%s: thread %d of pid %d is left in a trace stop", after,
			  (int)tids[i], (int)pid);
		if (stopped)
			cr_assert(st == 'T', "%s: thread %d of pid %d was group-stopped and is now '%c'",
				  after, (int)tids[i], (int)pid, st);
		else
			cr_assert(st != 'T', "%s: thread %d of pid %d is left stopped", after,
				  (int)tids[i], (int)pid);
	}
}

const char *th_pid_str(pid_t pid)
{
	static char bufs[8][16];
	static unsigned next;
	char *b = bufs[next++ % 8];

	snprintf(b, sizeof(bufs[0]), "%d", (int)pid);
	return b;
}

void th_agent_fd_path(pid_t pid, char *ret, size_t size)
{
	char dir[64], link[256], path[320];
	struct dirent *e;
	DIR *d;

	ret[0] = '\0';
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	if (!d)
		return;
	while ((e = readdir(d))) {
		ssize_t n;

		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (strstr(link, "memfd:cprof-agent")) {
			snprintf(ret, size, "%s", path);
			break;
		}
	}
	closedir(d);
}

/* The memfd the agent made in @pid, mapped (its header), or NULL. */
struct cprof_wire_header *th_agent_header(pid_t pid)
{
	struct cprof_wire_header *h;
	char path[320];
	int fd;

	th_agent_fd_path(pid, path, sizeof(path));
	if (!path[0])
		return NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	h = mmap(NULL, CPROF_WIRE_HEADER_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	return h == MAP_FAILED ? NULL : h;
}

pid_t th_start_tracer(pid_t tid)
{
	int fds[2];
	char ok = 0;
	pid_t child;

	cr_assert(pipe2(fds, O_CLOEXEC) == 0);
	child = fork();
	cr_assert(child >= 0);
	if (child == 0) {
		char c;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		c = ptrace(PTRACE_SEIZE, tid, 0, 0) == 0 ? 1 : 0;
		if (write(fds[1], &c, 1) != 1 || !c)
			_exit(1);
		for (;;)
			pause();
	}
	close(fds[1]);
	if (read(fds[0], &ok, 1) != 1 || !ok) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		cr_assert_fail("could not PTRACE_SEIZE %d", (int)tid);
	}
	close(fds[0]);
	return child;
}

bool th_on_ci(void)
{
	const char *ci = getenv("CI");

	return ci && !strcmp(ci, "true");
}

void th_skip_accuracy_when_sanitized(void)
{
#ifdef __SANITIZE_ADDRESS__
	cr_skip_test("accuracy is judged in the plain build: ASan slows cprof itself");
#endif
}

static bool stack_in(const struct th_stack *s, size_t n, const char *text)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(s[i].text, text) == 0)
			return true;
	return false;
}

size_t th_stacks_agree(const struct th_stack *a, size_t na, const char *a_name,
		       const struct th_stack *b, size_t nb, const char *b_name, long min)
{
	size_t checked = 0;

	for (size_t i = 0; i < na; i++) {
		if (a[i].count < min)
			continue;
		cr_assert(stack_in(b, nb, a[i].text), "%s only: %s", a_name, a[i].text);
		checked++;
	}
	for (size_t i = 0; i < nb; i++) {
		if (b[i].count < min)
			continue;
		cr_assert(stack_in(a, na, b[i].text), "%s only: %s", b_name, b[i].text);
		checked++;
	}
	return checked;
}

/*
 * A refusal because the only thread cprof could look at never reached its
 * stop in the 5 s it may look for one is the machine's (the thread had no
 * CPU), not the target's state: cprof says to try again, and so does this,
 * twice. A refusal for any other reason (inside malloc, a signal handler)
 * fails at once.
 */
static bool no_cpu_for_the_target(const struct th_run *r)
{
	return r->exit_code == 2 && strstr(r->err, "was safe to load the agent within") &&
	       strstr(r->err, "did not stop");
}

void th_session_ok(const char *kind, pid_t pid, const char *duration, int n)
{
	struct th_run r;

	for (int tries = 0;; tries++) {
		TH_CPROF(&r, 30000, kind, "-p", th_pid_str(pid), "-d", duration, "-q", "-o",
			 th_tmp_path("session.pb.gz"));
		if (r.exit_code != 0)
			th_run_log(&r, kind);
		if (tries == 2 || !no_cpu_for_the_target(&r))
			break;
		cr_log_info("session %d (%s): the target's thread got no CPU to stop; again", n,
			    kind);
		th_run_release(&r);
	}
	cr_assert_eq(r.exit_code, 0, "session %d (%s) failed", n, kind);
	th_run_release(&r);
}

pid_t th_agent_session_keep(pid_t pid)
{
	struct th_run r;
	pid_t tids[4];
	int n;

	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(pid), "-d", "300ms", "--keep", "-q", "-o",
		 th_tmp_path("keep.pb.gz"));
	if (r.exit_code != 0)
		th_run_log(&r, "heap --keep");
	cr_assert_eq(r.exit_code, 0, "heap --keep failed");
	th_run_release(&r);
	n = th_task_list(pid, tids, 4);
	cr_assert_eq(n, 2, "pid %d has %d threads with the agent's session, not its own and "
		     "the agent's", pid, n);
	return tids[0] == pid ? tids[1] : tids[0];
}

void th_agent_session_stop(pid_t pid)
{
	struct th_run r;

	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(pid), "--stop");
	cr_expect_eq(r.exit_code, 0, "heap --stop: exit %d:\n%s", r.exit_code, r.err);
	th_run_release(&r);
}

/* ---- servers on loopback ------------------------------------------------ */

int th_free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port;

	cr_assert(fd >= 0);
	cr_assert(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	cr_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

const char *th_rate_option(const char *kind)
{
	if (!strcmp(kind, "heap"))
		return "--heap-rate";
	if (!strcmp(kind, "block"))
		return "--block-rate";
	cr_assert_str_eq(kind, "mutex", "no rate option for %s", kind);
	return "--mutex-fraction";
}
