#include "output.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pprof/pprof.h"
#include "report.h"
#include "util/util.h"

const char *output_name(const struct output *o)
{
	return strcmp(o->path, "-") ? o->path : "stdout";
}

static int open_tmpfile(struct output *o)
{
	mode_t mask = umask(0);
	int fd;

	umask(mask);
	fd = open(o->dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666 & ~mask);
	if (fd >= 0)
		return fd;
	/* Filesystems without O_TMPFILE: a named temporary, removed on failure. */
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
		return -errno;
	snprintf(o->tmp_name, sizeof(o->tmp_name), "%s/.cprof-XXXXXX", o->dir);
	fd = mkostemp(o->tmp_name, O_CLOEXEC);
	if (fd < 0) {
		o->tmp_name[0] = '\0';
		return -errno;
	}
	fchmod(fd, 0666 & ~mask);
	return fd;
}

/*
 * A symbolic link at the output path is followed only where the kernel's
 * fs.protected_symlinks would follow it (cprof runs as root, and that sysctl
 * may be off): outside a sticky world-writable directory such as /tmp, or
 * when the link belongs to us or to the directory's owner. Otherwise another
 * user could plant /tmp/cpu.pb.gz -> /dev/sda and have root write there.
 * Returns 0 when following is safe, -EPERM (and the reason in @why) if not.
 */
static int symlink_safe(const char *path, const struct stat *lst, char *why, size_t whylen)
{
	struct stat dst;
	char *copy = strdup(path);
	int r;

	if (!copy)
		return -ENOMEM;
	r = stat(dirname(copy), &dst);
	free(copy);
	if (r < 0)
		return -errno;
	if (!(dst.st_mode & S_ISVTX) || !(dst.st_mode & S_IWOTH) || lst->st_uid == geteuid() ||
	    lst->st_uid == dst.st_uid)
		return 0;
	snprintf(why, whylen, "'%s' is a symbolic link owned by uid %u in a shared directory "
			      "(sticky, world-writable): not following it\n"
			      "hint: remove the link, or choose another path with -o",
		 path, (unsigned)lst->st_uid);
	return -EPERM;
}

int output_prepare(struct output *o, const char *path, bool binary, char *why, size_t whylen)
{
	struct stat st;
	char *copy;
	int fd, r, nofollow = O_NOFOLLOW;

	memset(o, 0, sizeof(*o));
	o->path = path;
	o->fd = -1;
	if (!strcmp(path, "-")) {
		if (binary && isatty(STDOUT_FILENO)) {
			snprintf(why, whylen, "refusing to write a binary profile to a terminal\n"
					      "hint: redirect stdout, or use -o FILE");
			return -ENOTTY;
		}
		o->fd = STDOUT_FILENO;
		o->in_place = true;
		return 0;
	}
	if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
		r = symlink_safe(path, &st, why, whylen);
		if (r < 0)
			return r;
		nofollow = 0;
	}
	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode)) {
			snprintf(why, whylen, "'%s' is a directory\n"
					      "hint: give a file name, e.g. -o %s/cpu.pb.gz", path, path);
			return -EISDIR;
		}
		if (!S_ISREG(st.st_mode)) {
			/* A device or FIFO: write in place, never replace it. */
			fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | nofollow);
			if (fd < 0 && errno == ENXIO && S_ISFIFO(st.st_mode)) {
				/* Not opened blocking: cprof must not hang before it starts. */
				snprintf(why, whylen, "cannot write '%s': it is a FIFO with no reader\n"
						      "hint: start the reader first", path);
				return -ENXIO;
			}
			if (fd < 0)
				goto out_errno;
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
			o->fd = fd;
			o->in_place = true;
			return 0;
		}
		if (access(path, W_OK) < 0)
			goto out_errno;
	}
	copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	snprintf(o->dir, sizeof(o->dir), "%s", dirname(copy));
	free(copy);
	fd = open_tmpfile(o);
	if (fd < 0) {
		/* The profile is written beside its destination, then renamed. */
		snprintf(why, whylen, "cannot write '%s': cannot create a file in '%s': %s\n"
				      "hint: choose another path with -o, or fix the directory's "
				      "permissions", path, o->dir, strerror(-fd));
		return fd;
	}
	o->fd = fd;
	return 0;

out_errno:
	fd = -errno;
	snprintf(why, whylen, "cannot write '%s': %s\n"
			      "hint: choose another path with -o, or fix the directory's permissions",
		 path, strerror(errno));
	return fd;
}

/*
 * An earlier file at the destination is kept as DEST.old, as perf keeps
 * perf.data.old: a link under a temporary name renamed over DEST.old, so
 * that DEST itself is never missing. Only a regular file: a device, a FIFO
 * or stdout is written in place.
 */
static int keep_old(struct output *o)
{
	char old[4200], tmp[4300];
	struct stat st;

	if (lstat(o->path, &st) < 0 || !S_ISREG(st.st_mode))
		return 0;
	snprintf(old, sizeof(old), "%s.old", o->path);
	snprintf(tmp, sizeof(tmp), "%s.cprof-%d", old, getpid());
	if (link(o->path, tmp) < 0)
		return -errno;
	if (rename(tmp, old) < 0) {
		int r = -errno;

		unlink(tmp);
		return r;
	}
	report_note("kept the earlier %s as %s", o->path, old);
	return 0;
}

static int link_into_place(struct output *o)
{
	char proc[64], tmp[4200];
	int r;

	r = keep_old(o);
	if (r < 0)
		return r;
	if (o->tmp_name[0]) {
		if (rename(o->tmp_name, o->path) < 0)
			return -errno;
		o->tmp_name[0] = '\0';
		return 0;
	}
	/* Give the unnamed file a name beside the destination, then rename it
	 * over: rename is what makes replacing an old profile atomic. */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", o->fd);
	/* Nothing there yet: link it straight in, with no name in between that
	 * a kill could leave behind. linkat never replaces a file, so an old
	 * one goes the long way. */
	if (linkat(AT_FDCWD, proc, AT_FDCWD, o->path, AT_SYMLINK_FOLLOW) == 0)
		return 0;
	if (errno != EEXIST)
		return -errno;
	for (int i = 0; i < 100; i++) {
		snprintf(tmp, sizeof(tmp), "%s/.cprof-%d-%d", o->dir, getpid(), i);
		if (linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) == 0)
			break;
		if (errno != EEXIST)
			return -errno;
		tmp[0] = '\0';
	}
	if (!tmp[0])
		return -EEXIST;
	if (rename(tmp, o->path) < 0) {
		r = -errno;
		unlink(tmp);
		return r;
	}
	return 0;
}

int output_commit_profile(struct output *o, const struct profile *p)
{
	uint8_t *gz = NULL;
	size_t gz_len;
	int r;

	r = pprof_encode_gzip(p, &gz, &gz_len);
	if (r < 0) {
		output_abort(o);
		return r;
	}
	r = output_commit_bytes(o, gz, gz_len);
	free(gz);
	return r;
}

int output_commit_view(struct output *o, const struct profile *p, enum view_format format,
		       size_t max_rows, const char *title)
{
	char *buf = NULL;
	size_t len, index = 0;
	int r;

	if (format == VIEW_PPROF)
		return output_commit_profile(o, p);
	r = view_sample_index(p, NULL, &index);
	if (r == 0)
		r = view_render(p, index, format, max_rows, title, &buf, &len);
	if (r < 0) {
		output_abort(o);
		return r;
	}
	r = output_commit_bytes(o, buf, len);
	free(buf);
	return r;
}

int output_commit_bytes(struct output *o, const void *buf, size_t len)
{
	int r;

	if (o->fd < 0)
		return -EBADF;
	/* From here on a failure is the output's, not the profile's. */
	o->write_failed = true;
	r = write_full(o->fd, buf, len);
	if (r < 0)
		goto out_abort;
	if (o->in_place) {
		/* stdout or a device: flush what can be flushed; EINVAL means "not a file". */
		if (fsync(o->fd) < 0 && errno != EINVAL && errno != EROFS)
			r = -errno;
		goto out_done;
	}
	if (fsync(o->fd) < 0) {
		r = -errno;
		goto out_abort;
	}
	r = link_into_place(o);
	if (r < 0)
		goto out_abort;
out_done:
	o->write_failed = r < 0;
	if (o->fd != STDOUT_FILENO)
		close(o->fd);
	o->fd = -1;
	return r;
out_abort:
	output_abort(o);
	return r;
}

void output_abort(struct output *o)
{
	if (o->tmp_name[0]) {
		unlink(o->tmp_name);
		o->tmp_name[0] = '\0';
	}
	if (o->fd >= 0 && o->fd != STDOUT_FILENO)
		close(o->fd);
	o->fd = -1;
}

void output_forget(struct output *o)
{
	o->tmp_name[0] = '\0';
	if (o->fd >= 0 && o->fd != STDOUT_FILENO)
		close(o->fd);
	o->fd = -1;
}

int output_report_failure(const struct output *o, int r)
{
	if (!o->write_failed) {
		report_error("cannot build the profile: %s", strerror(-r));
		return EXIT_FAIL;
	}
	report_error("cannot write the profile to '%s': %s", output_name(o), strerror(-r));
	if (r == -ENOSPC || r == -EDQUOT)
		report_hint("the file system or device is full: free some space, or choose another "
			    "path with -o");
	return EXIT_OUTPUT;
}

void output_title(const char *cmd, pid_t pid, const struct profile *p, char *buf, size_t size)
{
	size_t index;

	if (view_sample_index(p, NULL, &index) == 0)
		snprintf(buf, size, "cprof %s -p %d: %s", cmd, (int)pid,
			 p->sample_types[index].type);
	else
		snprintf(buf, size, "cprof %s -p %d", cmd, (int)pid);
}
