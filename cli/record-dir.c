#include "record-dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pprof/pprof.h"

void record_dir_stamp(char *buf, size_t size)
{
	time_t now = time(NULL);
	struct tm tm;

	localtime_r(&now, &tm);
	strftime(buf, size, "%Y%m%d-%H%M%S", &tm);
}

/* @path, or the default name, into @buf without its trailing slashes; one
 * that does not exist yet. Its length, or -errno with @why. */
static int new_name(char *buf, size_t size, const char *path, pid_t pid, char *why,
		    size_t whylen)
{
	struct stat st;
	char stamp[32];
	int n;

	if (path) {
		n = snprintf(buf, size, "%s", path);
	} else {
		record_dir_stamp(stamp, sizeof(stamp));
		n = snprintf(buf, size, "cprof-%d-%s", (int)pid, stamp);
	}
	/* Room for ".tmp-XXXXXX", a window's name and a file name inside. */
	if (n <= 0 || (size_t)n + 128 >= size) {
		snprintf(why, whylen, "the directory's name is too long");
		return -ENAMETOOLONG;
	}
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = '\0';
	if (lstat(buf, &st) == 0) {
		snprintf(why, whylen, "%s exists: cprof record never writes into an earlier record",
			 buf);
		return -EEXIST;
	}
	return n;
}

int record_dir_make_parent(char *buf, size_t size, const char *path, pid_t pid, char *why,
			   size_t whylen)
{
	int n = new_name(buf, size, path, pid, why, whylen);

	if (n < 0)
		return n;
	/* Owner only, as each window's (mkdtemp): a record holds what was
	 * read of the target's memory. */
	if (mkdir(buf, 0700) < 0) {
		n = -errno;
		snprintf(why, whylen, "cannot make %s: %s", buf, strerror(errno));
		return n;
	}
	return 0;
}

int record_dir_make(struct record_dir *d, const char *path, pid_t pid, char *why, size_t whylen)
{
	int n;

	memset(d, 0, sizeof(*d));
	n = new_name(d->final, sizeof(d->final), path, pid, why, whylen);
	if (n < 0)
		return n;
	memcpy(d->tmp, d->final, (size_t)n);
	memcpy(d->tmp + n, ".tmp-XXXXXX", sizeof(".tmp-XXXXXX"));
	if (!mkdtemp(d->tmp)) {
		int r = -errno;
		const char *slash = strrchr(d->final, '/');

		/* The directory it is made in is what is missing or refused. */
		if (!slash)
			snprintf(why, whylen, "cannot make %s in the current directory: %s",
				 d->final, strerror(-r));
		else
			snprintf(why, whylen, "cannot make %s in %.*s: %s", slash + 1,
				 slash == d->final ? 1 : (int)(slash - d->final), d->final,
				 strerror(-r));
		d->tmp[0] = '\0';
		return r;
	}
	return 0;
}

FILE *record_dir_open(const struct record_dir *d, const char *name)
{
	char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/%s", d->tmp, name);
	return fopen(path, "we");
}

int record_dir_write_profile(const struct record_dir *d, const char *name,
			     const struct profile *p)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	FILE *f;
	int r;

	r = pprof_encode_gzip(p, &buf, &len);
	if (r < 0)
		return r;
	f = record_dir_open(d, name);
	if (!f) {
		r = -errno;
		goto out_free;
	}
	if (fwrite(buf, 1, len, f) != len)
		r = -EIO;
	if (fclose(f) != 0 && r == 0)
		r = -errno;
out_free:
	free(buf);
	return r;
}

int record_dir_commit(struct record_dir *d)
{
	/* RENAME_NOREPLACE: a directory made meanwhile under the final name
	 * (another cprof's) is not replaced, even an empty one. */
	if (renameat2(AT_FDCWD, d->tmp, AT_FDCWD, d->final, RENAME_NOREPLACE) < 0)
		return -errno;
	d->tmp[0] = '\0';
	return 0;
}

/*
 * Its files by the directory opened once, never by path: a directory
 * swapped for a link to another meanwhile (in a world-writable one such
 * as /tmp) is not followed, and rmdir() takes no link either.
 */
int record_dir_remove(const char *path)
{
	struct dirent *e;
	DIR *dir;
	int fd;

	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return -errno;
	}
	while ((e = readdir(dir))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		unlinkat(fd, e->d_name, 0);
	}
	closedir(dir);
	return rmdir(path) < 0 ? -errno : 0;
}

void record_dir_abort(struct record_dir *d)
{
	if (!d->tmp[0])
		return;
	record_dir_remove(d->tmp);
	d->tmp[0] = '\0';
}
