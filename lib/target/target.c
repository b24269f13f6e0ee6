#include "target/target.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"

#define PF_KTHREAD 0x00200000 /* include/linux/sched.h */

int proc_read(const char *path, char *buf, size_t size, size_t *ret_len)
{
	size_t len = 0;
	int fd, r = 0;

	if (size == 0)
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (len < size - 1) {
		ssize_t n = read(fd, buf + len, size - 1 - len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			/* A task that died between open and read gives ESRCH. */
			r = -errno;
			goto out_close;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	if (ret_len)
		*ret_len = len;
out_close:
	close(fd);
	return r;
}

int proc_sysctl_int(const char *name, int *ret)
{
	char path[256], buf[64];
	char *end;
	long v;
	int r;

	snprintf(path, sizeof(path), "/proc/sys/%s", name);
	r = proc_read(path, buf, sizeof(buf), NULL);
	if (r < 0)
		return r;
	errno = 0;
	v = strtol(buf, &end, 10);
	if (errno || end == buf)
		return -EINVAL;
	*ret = (int)v;
	return 0;
}

int target_start_time(pid_t pid, unsigned long long *ret)
{
	char path[64], buf[1024];
	const char *p;
	int r;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	r = proc_read(path, buf, sizeof(buf), NULL);
	if (r < 0)
		return r == -ENOENT ? -ESRCH : r;
	p = strrchr(buf, ')');
	/* state (3) ... starttime (22): 19 fields after the comm. */
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d"
			 " %*d %*d %*d %*d %llu", ret) != 1)
		return -EINVAL;
	return 0;
}

static void chomp(char *s)
{
	size_t n = strlen(s);

	while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
		s[--n] = '\0';
}

/* /proc/PID/stat: "pid (comm) state ppid ... flags(9th)". comm may hold ')'. */
static int parse_stat(const char *buf, char *ret_state, unsigned long *ret_flags)
{
	const char *p = strrchr(buf, ')');
	unsigned long flags;
	char state;

	if (!p)
		return -EINVAL;
	/* state, ppid, pgrp, session, tty_nr, tpgid, flags */
	if (sscanf(p + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2)
		return -EINVAL;
	*ret_state = state;
	*ret_flags = flags;
	return 0;
}

static int status_field(const char *status, const char *key, long *ret)
{
	const char *p = strstr(status, key);

	if (!p)
		return -ENOENT;
	p += strlen(key);
	*ret = strtol(p, NULL, 10);
	return 0;
}

int target_open(struct target *ret, pid_t pid)
{
	char path[64], buf[4096];
	struct target t = { .pid = pid };
	unsigned long flags = 0;
	ssize_t n;
	long v;
	int r;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	r = proc_read(path, buf, sizeof(buf), NULL);
	if (r == -ENOENT)
		return -ESRCH;
	if (r < 0)
		return r;
	r = parse_stat(buf, &t.state, &flags);
	if (r < 0)
		return r;
	t.kernel_thread = flags & PF_KTHREAD;
	t.is_self = pid == getpid();

	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	if (proc_read(path, t.comm, sizeof(t.comm), NULL) == 0)
		chomp(t.comm);

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	r = proc_read(path, buf, sizeof(buf), NULL);
	if (r == -ENOENT)
		return -ESRCH;
	if (r < 0)
		return r;
	t.tgid = pid;
	if (status_field(buf, "\nTgid:", &v) == 0 && v > 0)
		t.tgid = (pid_t)v;
	if (status_field(buf, "\nUid:", &v) == 0)
		t.uid = (uid_t)v;
	if (status_field(buf, "\nTracerPid:", &v) == 0)
		t.tracer_pid = (pid_t)v;
	if (status_field(buf, "\nThreads:", &v) == 0)
		t.nthreads = (int)v;

	/* Kernel threads and zombies have no exe link; EACCES means not ours. */
	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	n = readlink(path, t.exe, sizeof(t.exe) - 1);
	if (n >= 0) {
		t.exe[n] = '\0';
		t.exe_deleted = n > 10 && !strcmp(t.exe + n - 10, " (deleted)");
	} else if (errno == EACCES || errno == EPERM) {
		if (!t.kernel_thread && t.state != 'Z') {
			r = -errno;
			*ret = t;
			return r;
		}
	}
	*ret = t;
	return 0;
}

bool target_alive(pid_t pid)
{
	char path[64], buf[512], state;
	unsigned long flags;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (proc_read(path, buf, sizeof(buf), NULL) < 0)
		return false;
	if (parse_stat(buf, &state, &flags) < 0)
		return false;
	return state != 'Z' && state != 'X';
}

int target_list_tids(pid_t pid, pid_t **ret_tids, size_t *ret_n)
{
	char path[64];
	pid_t *tids = NULL;
	size_t n = 0, alloc = 0;
	struct dirent *de;
	DIR *d;
	int r = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d)
		return errno == ENOENT ? -ESRCH : -errno;
	while ((errno = 0, de = readdir(d))) {
		char *end;
		long tid = strtol(de->d_name, &end, 10);

		if (*end || tid <= 0)
			continue;
		r = GROW(tids, n + 1, alloc);
		if (r < 0)
			goto out_free;
		tids[n++] = (pid_t)tid;
	}
	if (errno) {
		r = errno == ENOENT ? -ESRCH : -errno;
		goto out_free;
	}
	if (n == 0) {
		/* An empty task directory: the process is exiting. */
		r = -ESRCH;
		goto out_free;
	}
	closedir(d);
	*ret_tids = tids;
	*ret_n = n;
	return 0;

out_free:
	free(tids);
	closedir(d);
	return r;
}

/* A comm file, without its newline; -ESRCH when the task is gone. */
static int read_comm(const char *path, char *buf, size_t size)
{
	int r = proc_read(path, buf, size, NULL);

	if (r == -ENOENT)
		return -ESRCH;
	if (r == 0)
		chomp(buf);
	return r;
}

int target_thread_name(pid_t pid, pid_t tid, char *buf, size_t size)
{
	char path[80];

	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", pid, tid);
	return read_comm(path, buf, size);
}

int target_process_name(pid_t pid, char *buf, size_t size)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	return read_comm(path, buf, size);
}

int target_thread_state(pid_t pid, pid_t tid, char *ret_state)
{
	char path[80], buf[1024];
	unsigned long flags;
	int r;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
	r = proc_read(path, buf, sizeof(buf), NULL);
	if (r == -ENOENT)
		return -ESRCH;
	if (r < 0)
		return r;
	return parse_stat(buf, ret_state, &flags);
}
