#include "heap-jemalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/cprof-agent.h"
#include "report.h"
#include "target/target.h"
#include "util/util.h"

/* A dump holds one line per backtrace and the process's maps: megabytes
 * at most; a larger file is not jemalloc's. */
#define DUMP_MAX_BYTES (256u << 20)
/* The environment read for MALLOC_CONF: the first 256 KiB of it. */
#define ENVIRON_MAX (256u << 10)

/* Where the target can write, as it sees its files; the first that is there. */
static const char *const dump_dirs[] = { "/tmp", "/var/tmp", "/dev/shm" };

bool heap_jemalloc_present(const struct target *t)
{
	struct maps m;
	bool found = false;

	if (maps_read(t->pid, &m) < 0)
		return false;
	for (size_t i = 0; i < m.n && !found; i++) {
		const char *b = strrchr(m.entries[i].path, '/');

		found = b && strncmp(b + 1, "libjemalloc", 11) == 0;
	}
	maps_release(&m);
	return found;
}

/*
 * Whether MALLOC_CONF, as @t started with it (/proc/PID/environ: jemalloc
 * reads it once, at its start), turns the profiler on: its last "prof:"
 * option (jemalloc's malloc_conf_init() lets a later one win) is true.
 * Only a hint for --source auto: jemalloc's own answer comes with the dump.
 */
static bool environ_prof_on(pid_t pid)
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

bool heap_jemalloc_auto(const struct target *t)
{
	return heap_jemalloc_present(t) && environ_prof_on(t->pid);
}

struct dump_file {
	int dirfd, fd;
	char name[64];  /* in dirfd */
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
		snprintf(f->name, sizeof(f->name), "cprof-jemalloc-%016llx.heap",
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

/* What to say when jemalloc's profiler cannot be read; an exit code. */
static int dump_error(const struct target *t, int r, const struct dump_file *f)
{
	switch (r) {
	case -ENOENT:
		report_error("pid %d (%s) does not use jemalloc (no mallctl in it): there is no "
			     "jemalloc profiler to read", t->pid, t->comm);
		report_hint("without --source jemalloc, cprof heap samples its allocations with "
			    "hooks");
		return EXIT_TARGET;
	case -ENOTSUP:
		report_error("the jemalloc of pid %d (%s) was built without its heap profiler "
			     "(opt.prof is unknown to it)", t->pid, t->comm);
		report_hint("use a jemalloc built with --enable-prof (Debian's libjemalloc2 is), or "
			    "--source hooks");
		return EXIT_TARGET;
	case -ENODATA:
		report_error("jemalloc's heap profiler is off in pid %d (%s)", t->pid, t->comm);
		report_hint("it is turned on when the program starts, with MALLOC_CONF=prof:true "
			    "(lg_prof_sample:19 samples every 512 KiB on average, prof_accum:true "
			    "adds alloc_*); --source hooks samples this run with cprof's hooks");
		return EXIT_TARGET;
	case -EFAULT:
		report_error("jemalloc in pid %d (%s) could not write its profile to %s (in its "
			     "root)", t->pid, t->comm, f->path);
		return EXIT_FAIL;
	case -ECANCELED:
		report_note("interrupted before jemalloc's profile was asked for: pid %d was left "
			    "as it was", t->pid);
		return EXIT_FAIL;
	}
	report_error("cannot read jemalloc's heap profile of pid %d (%s): %s", t->pid, t->comm,
		     strerror(-r));
	return EXIT_FAIL;
}

int heap_jemalloc_dump(struct heap_jemalloc *h, const struct target *t)
{
	struct dump_file f = { .dirfd = -1, .fd = -1 };
	char *text = NULL;
	size_t len = 0;
	int r, code, res = 0;

	memset(h, 0, sizeof(*h));
	h->al.fd = -1;
	r = dump_file_create(&f, t->pid);
	if (r < 0) {
		report_error("cannot make a file for jemalloc's profile in the root of pid %d (%s) "
			     "(/tmp, /var/tmp, /dev/shm): %s", t->pid, t->comm, strerror(-r));
		return EXIT_FAIL;
	}
	code = agent_call(&h->al, t, "cprof_agent_jemalloc_dump", f.path, &res);
	if (code)
		goto out_remove;
	h->time_realtime_ns = now_realtime_ns();
	if (res < 0) {
		code = dump_error(t, res, &f);
		goto out_remove;
	}
	h->inactive = res == CPROF_JEMALLOC_INACTIVE;
	r = dump_file_read(&f, &text, &len);
	if (r == 0)
		r = jeprof_parse(text, len, &h->prof);
	if (r < 0) {
		report_error("cannot read jemalloc's heap profile of pid %d (%s): %s", t->pid,
			     t->comm, r == -EBADMSG ? "not in jemalloc's heap_v2 format" : strerror(-r));
		code = EXIT_FAIL;
	}
out_remove:
	dump_file_remove(&f);
	free(text);
	return code;
}

void heap_jemalloc_release(struct heap_jemalloc *h)
{
	jeprof_free(h->prof);
	h->prof = NULL;
	agent_session_release(&h->al);
}

/* --source jemalloc on a target without jemalloc: said before the output
 * is touched. */
static int op_check(void *ctx, struct collection *run)
{
	struct heap_jemalloc_run *a = ctx;

	if (a->required && !heap_jemalloc_present(&run->target)) {
		report_error("pid %d (%s) does not use jemalloc as a shared library: there is no "
			     "jemalloc profiler to read", run->target.pid, run->target.comm);
		report_hint("without --source jemalloc, cprof heap samples its allocations with "
			    "hooks");
		return EXIT_TARGET;
	}
	return COLLECTOR_GO_ON;
}

static int op_take(void *ctx, struct collection *run)
{
	struct heap_jemalloc_run *a = ctx;
	int code;

	report_note("reading jemalloc's own heap profile of pid %d (%s): no hooks, no window; "
		    "what it sampled since the program started", run->target.pid,
		    a->required ? "--source jemalloc"
				: "its MALLOC_CONF turns the profiler on; --source hooks samples "
				  "with cprof's hooks instead");
	code = heap_jemalloc_dump(&a->je, &run->target);
	if (code)
		return code;
	if (a->je.al.rep.tid)
		run->pause_ns = (int64_t)a->je.al.rep.stopped_ns;
	return 0;
}

static int op_build(void *ctx, const struct collection *run, const char *command_line,
		    struct profile **ret)
{
	struct heap_jemalloc_run *a = ctx;
	struct jeprof_build_opts o = {
		.sym = a->je.al.sym,
		.default_type = a->index,
		.command_line = command_line,
		.pid = run->target.pid,
		.time_nanos = (int64_t)a->je.time_realtime_ns,
	};

	return jeprof_build(a->je.prof, &o, ret);
}

static int op_write_text(const void *ctx, int debug, FILE *f)
{
	const struct heap_jemalloc_run *a = ctx;

	(void)debug;
	return jeprof_write_text(a->je.prof, a->je.al.sym, f);
}

static uint64_t op_count(const void *ctx)
{
	const struct heap_jemalloc_run *a = ctx;
	const struct jeprof_counts *c = &a->je.prof->all;

	/* What jemalloc sampled: all of it with prof_accum, else what is live. */
	return c->accum_objects ? c->accum_objects : c->cur_objects;
}

static void op_summary(const void *ctx, const struct collection *run)
{
	const struct heap_jemalloc_run *a = ctx;
	const struct jeprof *j = a->je.prof;

	report_note("wrote %s: jemalloc's own heap profile, %zu %s, one sample per %llu %s on "
		    "average", output_name(&run->out), j->nbuckets,
		    plural(j->nbuckets, "backtrace", "backtraces"), (unsigned long long)j->period,
		    plural(j->period, "byte", "bytes"));
	if (a->je.inactive)
		report_warning("jemalloc's profiler is paused in pid %d (prof.active is false): the "
			       "profile holds what it sampled while it was active", run->target.pid);
	if (j->all.accum_objects == 0 && j->all.cur_objects != 0)
		report_note("alloc_objects and alloc_space are 0: jemalloc counts allocations only "
			    "with MALLOC_CONF=prof_accum:true");
}

static int op_finish(void *ctx, struct collection *run, int code, int argc, char **argv)
{
	struct heap_jemalloc_run *a = ctx;

	(void)run, (void)argc, (void)argv;
	heap_jemalloc_release(&a->je);
	return code;
}

const struct collector_ops heap_jemalloc_ops = {
	.command = "heap",
	.attach = "load the agent into",
	.events = 0,
	.records = "samples",
	.check = op_check,
	.take = op_take,
	.build = op_build,
	.write_text = op_write_text,
	.summary = op_summary,
	.count = op_count,
	.finish = op_finish,
};
