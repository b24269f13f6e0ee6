/* jemalloc's own heap profile, dumped by the agent and read (jemalloc.h). */
#include "session/jemalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/cprof-agent.h"
#include "target/target.h"
#include "util/util.h"

/* A dump holds one line per backtrace and the process's maps: megabytes
 * at most; a larger file is not jemalloc's. */
#define DUMP_MAX_BYTES (256u << 20)
/* The environment read for MALLOC_CONF: the first 256 KiB of it. */
#define ENVIRON_MAX (256u << 10)

/* Where the target can write, as it sees its files; the first that is there. */
static const char *const dump_dirs[] = { "/tmp", "/var/tmp", "/dev/shm" };

bool jemalloc_present(pid_t pid)
{
	struct maps m;
	bool found = false;

	if (maps_read(pid, &m) < 0)
		return false;
	for (size_t i = 0; i < m.n && !found; i++) {
		const char *b = strrchr(m.entries[i].path, '/');

		found = b && strncmp(b + 1, "libjemalloc", 11) == 0;
	}
	maps_release(&m);
	return found;
}

/*
 * MALLOC_CONF as @pid started with it (/proc/PID/environ: jemalloc reads
 * it once, at its start); its last "prof:" option counts (jemalloc's
 * malloc_conf_init() lets a later one win).
 */
bool jemalloc_prof_at_start(pid_t pid)
{
	char path[64], *env = malloc(ENVIRON_MAX + 1);
	size_t len = 0;
	bool on = false;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	if (!env || proc_read(path, env, ENVIRON_MAX, &len) < 0) {
		free(env);
		return false;
	}
	env[len] = '\0'; /* the last string, cut short or not, ends */
	for (size_t i = 0; i < len; i += strlen(env + i) + 1) {
		const char *v = env + i;

		if (strncmp(v, "MALLOC_CONF=", 12) != 0)
			continue;
		v += 12;
		while (*v) {
			size_t n = strcspn(v, ",");

			if (n >= 5 && strncmp(v, "prof:", 5) == 0)
				on = (n == 9 && strncmp(v + 5, "true", 4) == 0);
			v += n;
			v += *v == ',';
		}
	}
	free(env);
	return on;
}

struct dump_file {
	int dirfd, fd;
	char name[sizeof("cprof-jemalloc--.heap") + 11 + 16]; /* in dirfd: a pid, a nonce */
	char path[64];  /* as the target sees it, < TD_STR_MAX */
};

/*
 * Creates the file jemalloc will write: a new one (O_EXCL, an unguessable
 * name: nothing another user put there is followed or read), 0600, owned
 * by the target's user so that its creat() may truncate and write it. cprof
 * reads it through this very descriptor, and removes it.
 */
static int dump_file_create(struct dump_file *f, pid_t pid)
{
	char proc[64];
	uint64_t nonce;
	struct stat st;
	int r = -ENOENT;

	f->dirfd = f->fd = -1;
	snprintf(proc, sizeof(proc), "/proc/%d", (int)pid);
	if (stat(proc, &st) < 0)
		return -errno;
	if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
		return -EIO;
	for (size_t i = 0; i < ARRAY_SIZE(dump_dirs); i++) {
		f->dirfd = target_open_in_root(pid, dump_dirs[i], O_DIRECTORY);
		if (f->dirfd < 0) {
			r = f->dirfd;
			continue;
		}
		/* The pid says whose a dump is, to whoever finds one. */
		snprintf(f->name, sizeof(f->name), "cprof-jemalloc-%d-%016llx.heap", (int)pid,
			 (unsigned long long)nonce);
		snprintf(f->path, sizeof(f->path), "%s/%s", dump_dirs[i], f->name);
		f->fd = openat(f->dirfd, f->name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			       0600);
		if (f->fd < 0) {
			r = -errno;
			close(f->dirfd);
			f->dirfd = -1;
			continue;
		}
		/* The owner of /proc/PID is the target's effective user. */
		if (fchown(f->fd, st.st_uid, st.st_gid) < 0 && geteuid() == 0) {
			r = -errno;
			unlinkat(f->dirfd, f->name, 0);
			close(f->fd);
			close(f->dirfd);
			f->fd = f->dirfd = -1;
			continue;
		}
		return 0;
	}
	return r;
}

static void dump_file_remove(struct dump_file *f)
{
	if (f->dirfd >= 0)
		unlinkat(f->dirfd, f->name, 0);
	if (f->fd >= 0)
		close(f->fd);
	if (f->dirfd >= 0)
		close(f->dirfd);
	f->fd = f->dirfd = -1;
}

static int dump_file_read(const struct dump_file *f, char **ret, size_t *ret_len)
{
	size_t len = 0, cap = 0;
	char *buf = NULL;
	int r;

	for (;;) {
		ssize_t n;

		if (len == cap) {
			char *nb;

			if (cap >= DUMP_MAX_BYTES) {
				r = -EFBIG;
				goto out_free;
			}
			cap = cap ? cap * 2 : 1u << 16;
			nb = realloc(buf, cap);
			if (!nb) {
				r = -ENOMEM;
				goto out_free;
			}
			buf = nb;
		}
		n = pread(f->fd, buf + len, cap - len, (off_t)len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			goto out_free;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	*ret = buf;
	*ret_len = len;
	return 0;

out_free:
	free(buf);
	return r;
}

int jemalloc_dump_take(struct jemalloc_dump *d, pid_t pid, const struct agent_session_opts *o)
{
	struct dump_file f = { .dirfd = -1, .fd = -1 };
	char *text = NULL;
	size_t len = 0;
	int r, res = 0;

	r = agent_session_prepare(&d->s, pid, NULL);
	d->prof = NULL;
	d->inactive = false;
	d->failed = 0;
	d->path[0] = '\0';
	if (r < 0) {
		d->failed = JEMALLOC_LOAD;
		return r;
	}
	r = dump_file_create(&f, pid);
	if (r < 0) {
		d->failed = JEMALLOC_FILE;
		return r;
	}
	snprintf(d->path, sizeof(d->path), "%s", f.path);
	r = agent_session_call(&d->s, o, "cprof_agent_jemalloc_dump", f.path, &res);
	if (r < 0) {
		d->failed = JEMALLOC_LOAD;
		goto out_remove;
	}
	d->time_realtime_ns = now_realtime_ns();
	if (res < 0) {
		d->failed = JEMALLOC_DUMP;
		r = res;
		goto out_remove;
	}
	d->inactive = res == CPROF_JEMALLOC_INACTIVE;
	r = dump_file_read(&f, &text, &len);
	if (r == 0)
		r = jeprof_parse(text, len, &d->prof);
	if (r < 0)
		d->failed = JEMALLOC_READ;
out_remove:
	dump_file_remove(&f);
	free(text);
	return r;
}

void jemalloc_dump_release(struct jemalloc_dump *d)
{
	jeprof_free(d->prof);
	d->prof = NULL;
	agent_session_release(&d->s);
}
