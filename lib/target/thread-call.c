/*
 * What a thread is blocked in, and whether it ran, seen from outside:
 * /proc/PID/task/TID/syscall and schedstat, never a stop.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "target/target.h"

/*
 * "NR ARG1 .. ARG6 SP PC" while blocked in a call, "-1 SP PC" when blocked
 * outside one (a page fault, a stop), "running" otherwise.
 */
static int parse_call(const char *buf, struct target_call *ret)
{
	uint64_t v[9];
	int n;

	memset(ret, 0, sizeof(*ret));
	ret->nr = -1;
	if (strncmp(buf, "running", 7) == 0) {
		ret->running = true;
		return 0;
	}
	if (strncmp(buf, "-1 ", 3) == 0) {
		n = sscanf(buf + 3, "%" SCNx64 " %" SCNx64, &v[0], &v[1]);
		if (n != 2)
			return -EIO;
		ret->sp = v[0];
		ret->pc = v[1];
		return 0;
	}
	n = sscanf(buf, "%" SCNu64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64
		   " %" SCNx64 " %" SCNx64 " %" SCNx64,
		   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]);
	if (n != 9)
		return -EIO;
	ret->nr = (int64_t)v[0];
	memcpy(ret->args, &v[1], sizeof(ret->args));
	ret->sp = v[7];
	ret->pc = v[8];
	return 0;
}

/* /proc/@pid/task/@tid/@name into @buf; -ESRCH once the thread is gone. */
static int read_task_file(pid_t pid, pid_t tid, const char *name, char *buf, size_t size)
{
	char path[80];
	int r;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/%s", pid, tid, name);
	r = proc_read(path, buf, size, NULL);
	return r == -ENOENT ? -ESRCH : r;
}

int target_thread_call(pid_t pid, pid_t tid, struct target_call *ret)
{
	char buf[256];
	int r = read_task_file(pid, tid, "syscall", buf, sizeof(buf));

	return r < 0 ? r : parse_call(buf, ret);
}

bool target_call_same(const struct target_call *a, const struct target_call *b)
{
	return a->running == b->running && a->nr == b->nr && a->sp == b->sp && a->pc == b->pc &&
	       !memcmp(a->args, b->args, sizeof(a->args));
}

int target_thread_run_ns(pid_t pid, pid_t tid, uint64_t *ret)
{
	char buf[128];
	unsigned long long run;
	int r = read_task_file(pid, tid, "schedstat", buf, sizeof(buf));

	if (r < 0)
		return r;
	if (sscanf(buf, "%llu", &run) != 1)
		return -EIO;
	*ret = run;
	return 0;
}
