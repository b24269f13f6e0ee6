/*
 * A copy of the agent where a target in another mount namespace (a
 * container) can dlopen it: cprof's own file is not in its tree.
 *
 * The copy is code the target will run, so nobody but root (or cprof's
 * user) may be able to replace it before the target's dlopen, including the
 * target's own user (issue 6: cprof never runs code from a path the
 * target's user can write):
 * - the directory is reached from an fd of /proc/PID/root one component at
 *   a time with O_NOFOLLOW (a symlink planted in the container could
 *   otherwise point the walk at a host directory, since absolute links
 *   resolve against cprof's root);
 * - it and every directory above it up to the target's root must be owned
 *   by root or cprof's user and either writable by the owner only or sticky
 *   (then only the file's owner, cprof, can rename or unlink the copy); it
 *   must not be mounted noexec or read-only;
 * - the file gets an unguessable name, is created O_EXCL|O_NOFOLLOW mode
 *   0644, and is checked after writing: the same inode under that name,
 *   ours, one link, 0644, and byte for byte the agent.
 * The copy stays after the run: the agent is never unloaded, and a later
 * run finds it resident by this path and reuses it. A copy that another
 * process of the container loaded is used again if it checks out the same
 * way (ours, one link, 0644, the same bytes).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "inject/inject-private.h"
#include "util/util.h"

#define AGENT_MAX (64u << 20)

/* Tried in this order: /dev/shm is often noexec (Docker mounts it so). */
static const char *const place_dirs[] = { "tmp", "var/tmp", "dev/shm" };

/* Who could rename or replace an entry in it: root and cprof's user only. */
static bool dir_is_ours(int dfd)
{
	struct stat st;

	if (fstat(dfd, &st) < 0 || !S_ISDIR(st.st_mode))
		return false;
	if (st.st_uid != 0 && st.st_uid != geteuid())
		return false;
	return !(st.st_mode & (S_IWGRP | S_IWOTH)) || (st.st_mode & S_ISVTX);
}

/*
 * @rel ("var/tmp") under @rootfd, each component a real directory that
 * only root or cprof's user can change, the root included: whoever could
 * rename a directory on the way could put another file at the path.
 * -EPERM when one is not.
 */
static int open_dir_nofollow(int rootfd, const char *rel)
{
	char part[64];
	int fd = rootfd;

	if (!dir_is_ours(rootfd))
		return -EPERM;
	while (*rel) {
		size_t n = strcspn(rel, "/");
		int next;

		if (n == 0 || n >= sizeof(part)) {
			next = -EINVAL;
		} else {
			memcpy(part, rel, n);
			part[n] = '\0';
			next = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (next < 0)
				next = -errno;
			else if (!dir_is_ours(next)) {
				close(next);
				next = -EPERM;
			}
		}
		if (fd != rootfd)
			close(fd);
		if (next < 0)
			return next;
		fd = next;
		rel += n;
		rel += *rel == '/';
	}
	return fd;
}

/* Code can be mapped from it and files created in it. */
static bool dir_is_usable(int dfd)
{
	struct statvfs vfs;

	return fstatvfs(dfd, &vfs) == 0 && !(vfs.f_flag & (ST_NOEXEC | ST_RDONLY));
}

static int read_agent(const char *path, uint8_t **ret, size_t *ret_len)
{
	struct stat st;
	uint8_t *buf;
	size_t len = 0;
	int fd, r = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    st.st_size > AGENT_MAX) {
		r = -EINVAL;
		goto out_close;
	}
	buf = malloc((size_t)st.st_size);
	if (!buf) {
		r = -ENOMEM;
		goto out_close;
	}
	while (len < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : -EIO;
			free(buf);
			goto out_close;
		}
		len += (size_t)n;
	}
	*ret = buf;
	*ret_len = len;
out_close:
	close(fd);
	return r;
}

/*
 * The file under @name in @dfd is a regular file, ours, one link, 0644, and
 * byte for byte @agent; and @wfd's inode, unless @wfd is -1.
 */
static int verify_copy(int dfd, const char *name, int wfd, const uint8_t *agent, size_t len)
{
	struct stat w, v;
	uint8_t buf[65536];
	size_t done = 0;
	int fd, r = 0;

	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &v) < 0 || !S_ISREG(v.st_mode) || v.st_uid != geteuid() ||
	    v.st_nlink != 1 || (v.st_mode & 07777) != 0644 || (size_t)v.st_size != len ||
	    (wfd >= 0 && (fstat(wfd, &w) < 0 || w.st_dev != v.st_dev || w.st_ino != v.st_ino))) {
		r = -EXDEV;
		goto out_close;
	}
	while (done < len) {
		ssize_t n = read(fd, buf, MIN(sizeof(buf), len - done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || memcmp(buf, agent + done, (size_t)n) != 0) {
			r = -EXDEV;
			goto out_close;
		}
		done += (size_t)n;
	}
out_close:
	close(fd);
	return r;
}

/* Writes the copy as @name in @dfd; removes it again on any failure. */
static int write_copy(int dfd, const char *name, const uint8_t *agent, size_t len)
{
	int fd, r;

	fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	r = fchmod(fd, 0644) < 0 ? -errno : 0; /* whatever cprof's umask is */
	if (r == 0)
		r = write_full(fd, agent, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (r == 0)
		r = verify_copy(dfd, name, fd, agent, len);
	close(fd);
	if (r < 0)
		unlinkat(dfd, name, 0);
	return r;
}

/*
 * A copy left by an earlier run for another process of the container, if
 * one in @dfd checks out as a fresh one would: its name into @name. Else
 * every new process would leave one more.
 */
static bool find_copy(int dfd, const uint8_t *agent, size_t len, char *name, size_t size)
{
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *e;
	bool found = false;
	DIR *d;

	if (fd < 0)
		return false;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return false;
	}
	while (!found && (e = readdir(d))) {
		size_t n = strlen(e->d_name);

		if (strncmp(e->d_name, "cprof-agent-", 12) != 0 || n < 16 || n >= size ||
		    strcmp(e->d_name + n - 3, ".so") != 0)
			continue;
		if (verify_copy(dfd, e->d_name, -1, agent, len) == 0) {
			memcpy(name, e->d_name, n + 1);
			found = true;
		}
	}
	closedir(d);
	return found;
}

int inject_place_agent(pid_t pid, const char *agent_path, char *ret_path, size_t size)
{
	char root[64], name[64];
	uint64_t rnd;
	uint8_t *agent = NULL;
	size_t len = 0;
	int rootfd, r;

	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		return -EIO;
	/* "cprof-agent" first: is_agent() must know it for a later run. */
	snprintf(name, sizeof(name), "cprof-agent-%016" PRIx64 ".so", rnd);
	r = read_agent(agent_path, &agent, &len);
	if (r < 0)
		return r;
	snprintf(root, sizeof(root), "/proc/%d/root", (int)pid);
	rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0) {
		r = errno == ENOENT ? -ESRCH : -errno;
		goto out_free;
	}
	r = -EROFS; /* no directory fit */
	for (size_t i = 0; i < ARRAY_SIZE(place_dirs); i++) {
		int dfd = open_dir_nofollow(rootfd, place_dirs[i]);

		if (dfd < 0)
			continue;
		if (dir_is_usable(dfd))
			r = find_copy(dfd, agent, len, name, sizeof(name))
				    ? 1
				    : write_copy(dfd, name, agent, len);
		if (r >= 0 && snprintf(ret_path, size, "/%s/%s", place_dirs[i], name) >= (int)size)
			r = -ENAMETOOLONG; /* cannot be: @name is short */
		close(dfd);
		if (r >= 0)
			break;
	}
	close(rootfd);
out_free:
	free(agent);
	return r;
}

void inject_unplace_agent(pid_t pid, const char *path)
{
	char root[64];
	const char *slash = strrchr(path, '/');
	int rootfd;

	snprintf(root, sizeof(root), "/proc/%d/root", (int)pid);
	rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0 || !slash)
		goto out;
	for (size_t i = 0; i < ARRAY_SIZE(place_dirs); i++) {
		size_t n = strlen(place_dirs[i]);
		int dfd;

		if (path[0] != '/' || strncmp(path + 1, place_dirs[i], n) != 0 ||
		    path + 1 + n != slash)
			continue;
		dfd = open_dir_nofollow(rootfd, place_dirs[i]);
		if (dfd >= 0) {
			unlinkat(dfd, slash + 1, 0);
			close(dfd);
		}
		break;
	}
out:
	if (rootfd >= 0)
		close(rootfd);
}
