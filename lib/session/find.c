/* Where the agent is, and whether root may load it (session.h). */
#include "session/session.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * Whether the entry @st (@path) could only have been put there by root:
 * owned by root, writable by nobody else, and the kind expected (a
 * directory on the way, a regular file at the end). 0, or -EPERM with the
 * reason in @why.
 */
static int root_only_entry(const struct stat *st, const char *path, bool last, char *why,
			   size_t whylen)
{
	if (S_ISLNK(st->st_mode)) {
		snprintf(why, whylen, "'%s' is a symbolic link", path);
		return -EPERM;
	}
	if (last ? !S_ISREG(st->st_mode) : !S_ISDIR(st->st_mode)) {
		snprintf(why, whylen, "'%s' is not a %s", path, last ? "regular file" : "directory");
		return -EPERM;
	}
	if (st->st_uid != 0) {
		snprintf(why, whylen, "%s '%s' is owned by uid %u, not root",
			 last ? "the file" : "directory", path, (unsigned)st->st_uid);
		return -EPERM;
	}
	if (st->st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(why, whylen, "%s '%s' is writable by %s (mode %04o)",
			 last ? "the file" : "directory", path,
			 st->st_mode & S_IWOTH ? "others" : "its group",
			 (unsigned)(st->st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/*
 * Root runs $CPROF_AGENT's code in another process, and the target opens it
 * by its path later (dlopen), so nobody but root may be able to change what
 * that path holds until then: the file and every directory from "/" down to
 * it owned by root and writable by root alone. A sticky world-writable
 * directory such as /tmp does not count: anyone can add the entries another
 * path resolves through. Walked one component at a time from an fd with
 * O_PATH | O_NOFOLLOW, so a symbolic link swapped in after realpath() is
 * refused, not followed. @path is absolute and canonical (realpath()).
 * 0, or -EPERM with the reason in @why, or -errno.
 */
static int root_only_path(const char *path, char *why, size_t whylen)
{
	char walked[PATH_MAX], part[NAME_MAX + 1];
	const char *p = path;
	struct stat st;
	size_t len = 0;
	int fd, r;

	fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out_close;
	}
	r = root_only_entry(&st, "/", false, why, whylen);
	while (r == 0) {
		size_t n;
		int next;

		p += strspn(p, "/");
		if (!*p)
			break;
		n = strcspn(p, "/");
		if (n >= sizeof(part) || len + 1 + n >= sizeof(walked)) {
			r = -ENAMETOOLONG;
			break;
		}
		memcpy(part, p, n);
		part[n] = '\0';
		walked[len++] = '/';
		memcpy(walked + len, part, n + 1);
		len += n;
		p += n;
		next = openat(fd, part, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			r = -errno;
			break;
		}
		close(fd);
		fd = next;
		if (fstat(fd, &st) < 0) {
			r = -errno;
			break;
		}
		r = root_only_entry(&st, walked, p[strspn(p, "/")] == '\0', why, whylen);
	}
out_close:
	close(fd);
	return r;
}

/*
 * Relative to /proc/self/exe, never to the working directory or $PATH:
 * root must not load code from where it was not put. $CPROF_AGENT too is
 * taken from root's environment (sudo -E) only where root alone could
 * have put it (root_only_path()).
 */
int agent_find(const char *installed_rel, char *buf, size_t size, char *why, size_t whylen)
{
	const char *const rel[] = { "cprof-agent.so", installed_rel };
	const char *env = getenv("CPROF_AGENT");
	char exe[PATH_MAX], *slash;
	ssize_t n;

	if (why && whylen)
		why[0] = '\0';
	if (env && *env) {
		char path[PATH_MAX], reason[PATH_MAX + 128];
		int r;

		if (env[0] != '/' || !realpath(env, path) || access(path, R_OK) < 0 ||
		    strlen(path) >= size)
			return -ENOENT;
		if (geteuid() == 0) {
			r = root_only_path(path, reason, sizeof(reason));
			if (r < 0) {
				if (r != -EPERM)
					snprintf(reason, sizeof(reason), "cannot check '%s': %s",
						 path, strerror(-r));
				if (why && whylen)
					snprintf(why, whylen, "%s", reason);
				return -EPERM;
			}
		}
		memcpy(buf, path, strlen(path) + 1);
		return 0;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -ENOENT;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (!slash)
		return -ENOENT;
	slash[1] = '\0';
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		char path[PATH_MAX * 2], real[PATH_MAX];

		if (!rel[i])
			continue;
		snprintf(path, sizeof(path), "%s%s", exe, rel[i]);
		if (realpath(path, real) && access(real, R_OK) == 0 && strlen(real) < size) {
			memcpy(buf, real, strlen(real) + 1);
			return 0;
		}
	}
	return -ENOENT;
}
