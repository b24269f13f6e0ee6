/*
 * A thread's own clocks as the scheduler keeps them, from
 * /proc/PID/task/TID/schedstat: the time it ran (sum_exec_runtime, what
 * CLOCK_THREAD_CPUTIME_ID, /proc/PID/stat and top read) and the time it
 * waited on a run queue. Kept open and read with pread(), one system call a
 * read, for profilers that read every thread many times a window.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "target/target.h"

int target_clock_open(pid_t pid, pid_t tid)
{
	char path[80];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", pid, tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	return fd;
}

int target_clock_read(int fd, struct target_clock *ret)
{
	char buf[128];
	unsigned long long run, delay;
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	/* A thread that has exited reads as ESRCH (or nothing). */
	if (n <= 0)
		return n < 0 ? -errno : -ESRCH;
	buf[n] = '\0';
	if (sscanf(buf, "%llu %llu", &run, &delay) != 2)
		return -EIO;
	ret->run_ns = run;
	ret->delay_ns = delay;
	return 0;
}
