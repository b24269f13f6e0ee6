/*
 * A target in a container: another mount namespace (its files are under
 * /proc/PID/root, its paths are not ours) and another PID namespace (its
 * thread ids are not the ones the host sees, and it cannot see cprof).
 */
#include "target/target.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/openat2.h>

static bool same_file(const char *a, const char *b)
{
	struct stat x, y;

	if (stat(a, &x) < 0 || stat(b, &y) < 0)
		return true; /* cannot tell: assume ours, as before containers */
	return x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

bool target_other_root(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/root", (int)pid);
	return !same_file("/proc/self/root", path);
}

int target_open_in_root(pid_t pid, const char *path, int flags)
{
	struct open_how how = { .flags = (uint64_t)(O_PATH | O_CLOEXEC | flags),
				.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
	char root[64], there[PATH_MAX + 64];
	int rootfd, fd;

	snprintf(root, sizeof(root), "/proc/%d/root", (int)pid);
	rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return -errno;
	fd = (int)syscall(SYS_openat2, rootfd, path, &how, sizeof(how));
	if (fd < 0 && errno == ENOSYS) {
		snprintf(there, sizeof(there), "%s%s", root, path);
		fd = open(there, O_PATH | O_CLOEXEC | flags);
	}
	if (fd < 0)
		fd = -errno;
	close(rootfd);
	return fd;
}

bool target_other_pidns(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
	return !same_file("/proc/self/ns/pid", path);
}

pid_t target_ns_tid(pid_t pid, pid_t tid)
{
	char path[80], buf[4096];
	const char *p, *last;
	long v;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)tid);
	if (proc_read(path, buf, sizeof(buf), NULL) < 0)
		return 0;
	p = strstr(buf, "\nNSpid:");
	if (!p)
		return 0;
	p += 7;
	/* "NSpid:\t4242\t7": ours first, the innermost namespace's last. */
	last = NULL;
	for (const char *q = p; *q && *q != '\n'; q++)
		if ((*q == '\t' || *q == ' ') && q[1] >= '0' && q[1] <= '9')
			last = q + 1;
	if (!last || last == p + 1)
		return 0;
	v = strtol(last, NULL, 10);
	return v > 0 && v != tid ? (pid_t)v : 0;
}
