/*
 * target_program_path(): the program as the user started it. /proc/PID/exe
 * is the file the kernel resolved, symlinks followed: Debian's
 * /usr/bin/redis-server is a link to redis-check-rdb, and a profile headed
 * "File: redis-check-rdb" names a program nobody ran. The name the user
 * typed survives in argv[0] (unless the program rewrote it, as redis does
 * with its process title) and in comm (taken by the kernel from the path
 * given to execve, 15 bytes at most). A name is taken only when it leads to
 * the very file of /proc/PID/exe (same device and inode): symbolization and
 * pprof may open it again.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "target/target.h"

/* @path (absolute, in the target's root) is the file @exe. */
static bool same_file(pid_t pid, const char *path, const struct stat *exe)
{
	char full[PATH_MAX + 64];
	struct stat st;
	int n;

	n = snprintf(full, sizeof(full), "/proc/%d/root%s", (int)pid, path);
	if (n < 0 || (size_t)n >= sizeof(full) || stat(full, &st) != 0)
		return false;
	return st.st_dev == exe->st_dev && st.st_ino == exe->st_ino;
}

/*
 * @name as an absolute path, else its last component beside @exe_path (a
 * PATH lookup found it there, as it finds /usr/bin/redis-server beside
 * redis-check-rdb). A relative path with a directory would need the cwd of
 * the moment it was started: its name alone is tried.
 */
static int try_name(pid_t pid, const char *name, const char *exe_path, const struct stat *exe,
		    char *buf, size_t size)
{
	const char *dir_end = strrchr(exe_path, '/'), *last = strrchr(name, '/');
	char path[PATH_MAX];
	int n;

	if (name[0] == '/')
		n = snprintf(path, sizeof(path), "%s", name);
	else
		n = snprintf(path, sizeof(path), "%.*s/%s", (int)(dir_end - exe_path), exe_path,
			     last ? last + 1 : name);
	if (n < 0 || (size_t)n >= sizeof(path) || (size_t)n >= size || path[n - 1] == '/' ||
	    !same_file(pid, path, exe))
		return -ENOENT;
	memcpy(buf, path, (size_t)n + 1);
	return 0;
}

static void read_line(pid_t pid, const char *file, char *buf, size_t size)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	if (proc_read(path, buf, size, NULL) < 0)
		buf[0] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
}

int target_program_path(pid_t pid, const char *exe_path, char *buf, size_t size)
{
	const char *base = exe_path ? strrchr(exe_path, '/') : NULL;
	char argv0[PATH_MAX], comm[64], path[64];
	struct stat exe;

	if (!base || size == 0)
		return -EINVAL;
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	if (stat(path, &exe) != 0)
		return -errno;
	read_line(pid, "comm", comm, sizeof(comm));
	/* Started by the file's own name: nothing to look for. */
	if (comm[0] && !strncmp(base + 1, comm, strlen(comm)))
		return -ENOENT;
	/* The first of the NUL-separated arguments. */
	read_line(pid, "cmdline", argv0, sizeof(argv0));
	/* argv[0] whole, then up to a space: a rewritten title such as
	 * "redis-server 127.0.0.1:6379" starts with the name. */
	if (argv0[0] && try_name(pid, argv0, exe_path, &exe, buf, size) == 0)
		return 0;
	argv0[strcspn(argv0, " ")] = '\0';
	if (argv0[0] && try_name(pid, argv0, exe_path, &exe, buf, size) == 0)
		return 0;
	if (comm[0] && try_name(pid, comm, exe_path, &exe, buf, size) == 0)
		return 0;
	return -ENOENT;
}
