/*
 * Claims on a target (claim.h): a lock file per kind, locked whole. One
 * file per kind, not one byte each of one file: closing any descriptor of
 * a file drops every POSIX lock the process has on it.
 *
 * The file is named for the pid and its start time, so that a pid used
 * again is another file. It is made mode 0666 in a sticky directory anyone
 * may write: a cprof of the target's own user and root's must see the same
 * locks. Anyone can hold it, which only keeps cprof out with a message
 * naming the holder, never lets two in. The holder removes the file as it
 * lets go; a taker checks after locking that the file it holds is still the
 * one at the path (else it locked a removed file, and tries again).
 */
#include "target/claim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "target/target.h"
#include "util/util.h"

#define TRY_NS (5ULL * 1000 * 1000)

static const char *lock_dir(void)
{
	struct stat st;

	if (stat("/run/lock", &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) &&
	    (st.st_mode & S_IWOTH))
		return "/run/lock";
	return "/tmp";
}

static int lock_path(pid_t pid, enum target_claim_kind kind, char *buf, size_t size)
{
	unsigned long long t;
	int r = target_start_time(pid, &t);

	if (r < 0)
		return r;
	snprintf(buf, size, "%s/cprof-%d-%llu.%s.lock", lock_dir(), pid, t,
		 kind == TARGET_CLAIM_AGENT ? "agent" : "ptrace");
	return 0;
}

/* Opens (making it if need be) the lock file, never following a link. */
static int open_lock(const char *path)
{
	for (int tries = 0; tries < 8; tries++) {
		int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);

		if (fd >= 0 || errno != ENOENT)
			return fd >= 0 ? fd : -errno;
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
		if (fd >= 0) {
			/* Whatever the umask: other users' cprofs lock it too. */
			fchmod(fd, 0666);
			return fd;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EAGAIN;
}

static struct flock whole(short type)
{
	return (struct flock){ .l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
}

/* Still the file at @path: not removed by a last holder meanwhile. */
static bool still_there(int fd, const char *path)
{
	struct stat a, b;

	return fstat(fd, &a) == 0 && a.st_nlink > 0 && lstat(path, &b) == 0 &&
	       a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static void describe_holder(int fd, struct target_claim_holder *h)
{
	struct flock fl = whole(F_WRLCK);
	char path[64], buf[sizeof(h->command)];
	size_t n = 0;

	memset(h, 0, sizeof(*h));
	if (fcntl(fd, F_GETLK, &fl) < 0 || fl.l_type == F_UNLCK || fl.l_pid <= 0)
		return;
	h->pid = fl.l_pid;
	snprintf(path, sizeof(path), "/proc/%d/cmdline", h->pid);
	if (proc_read(path, buf, sizeof(buf), &n) < 0)
		return;
	/* Arguments are NUL-separated; whatever it holds, nothing but
	 * printable ASCII reaches a terminal. */
	while (n && buf[n - 1] == '\0')
		n--;
	for (size_t i = 0; i < n; i++)
		h->command[i] = buf[i] == '\0' ? ' ' : (buf[i] < 0x20 || buf[i] > 0x7e) ? '?' : buf[i];
	h->command[n] = '\0';
}

int target_claim_take(struct target_claim *c, pid_t pid, enum target_claim_kind kind,
		      unsigned wait_ms, const struct cancel *cancel,
		      struct target_claim_holder *ret_holder)
{
	uint64_t deadline = now_monotonic_ns() + (uint64_t)wait_ms * 1000000ULL;
	char path[PATH_MAX];
	int fd = -1, r;

	c->fd = -1;
	c->kind = kind;
	r = lock_path(pid, kind, path, sizeof(path));
	if (r < 0)
		return r;
	for (;;) {
		struct flock fl = whole(F_WRLCK);
		const struct timespec pause = { 0, (long)TRY_NS };

		if (fd < 0) {
			fd = open_lock(path);
			if (fd < 0)
				return fd;
		}
		if (fcntl(fd, F_SETLK, &fl) == 0) {
			if (still_there(fd, path)) {
				c->fd = fd;
				return 0;
			}
			/* Locked a file removed meanwhile: take the new one. */
			close(fd);
			fd = -1;
			continue;
		}
		if (errno != EAGAIN && errno != EACCES) {
			r = -errno;
			break;
		}
		if (now_monotonic_ns() >= deadline) {
			if (ret_holder)
				describe_holder(fd, ret_holder);
			r = -EBUSY;
			break;
		}
		if (cancel_asked(cancel)) {
			r = -ECANCELED;
			break;
		}
		nanosleep(&pause, NULL);
	}
	close(fd);
	return r;
}

pid_t target_claim_holder(pid_t pid, enum target_claim_kind kind)
{
	struct target_claim_holder h = { 0 };
	char path[PATH_MAX];
	int fd;

	if (lock_path(pid, kind, path, sizeof(path)) < 0)
		return 0;
	fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	describe_holder(fd, &h);
	close(fd);
	return h.pid;
}

void target_claim_drop(struct target_claim *c)
{
	char path[PATH_MAX], link[64];
	ssize_t n;

	if (!c || c->fd < 0)
		return;
	/* Removed while still locked: a waiter that then gets the old file
	 * sees it gone (still_there()) and makes a new one. */
	snprintf(link, sizeof(link), "/proc/self/fd/%d", c->fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n > 0) {
		path[n] = '\0';
		if (still_there(c->fd, path))
			unlink(path);
	}
	close(c->fd);
	c->fd = -1;
}
