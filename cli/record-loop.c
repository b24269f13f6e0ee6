/*
 * cprof record --loop: window after window, each a record of its own in
 * DIR/YYYYmmdd-HHMMSS/, for the hours before an incident is understood.
 * Each window is a whole session: the target is left between two as after
 * any cprof (the agent stays resident, unhooked, and the next window's
 * attach finds it), so stopping the loop at any moment leaves it as
 * stopping one record does. The gap between windows (writing one, opening
 * the next) is in the manifests' window starts and lengths.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "interrupt.h"
#include "record-dir.h"
#include "record.h"
#include "report.h"
#include "util/util.h"

/* A window shorter than this is not begun at the end of -d TOTAL. */
#define LOOP_MIN_WINDOW_NS 100000000ULL

struct loop {
	char dir[PATH_MAX];
	int pidfd;              /* the target's, to see its exit between windows; -1 */
	char **kept;            /* this run's windows, oldest first */
	size_t nkept, akept;
	unsigned written, partial;
};

static bool target_gone(const struct loop *l, pid_t pid)
{
	struct pollfd p = { .fd = l->pidfd, .events = POLLIN };

	if (l->pidfd < 0)
		return !target_alive(pid);
	return poll(&p, 1, 0) != 0;
}

/* DIR/YYYYmmdd-HHMMSS, or with -2, -3 ... when a window of the same second
 * is there. */
static int window_name(const struct loop *l, char *buf, size_t size)
{
	struct stat st;
	char stamp[32];
	int n;

	record_dir_stamp(stamp, sizeof(stamp));
	n = snprintf(buf, size, "%s/%s", l->dir, stamp);
	for (int i = 2; n > 0 && (size_t)n < size && lstat(buf, &st) == 0 && i < 100; i++)
		n = snprintf(buf, size, "%s/%s-%d", l->dir, stamp, i);
	return n > 0 && (size_t)n < size ? 0 : -ENAMETOOLONG;
}

/* @path kept; the oldest beyond @keep_last removed. */
static void keep(struct loop *l, const char *path, unsigned keep_last)
{
	char *copy = strdup(path);
	int r;

	if (!copy || GROW(l->kept, l->nkept + 1, l->akept) < 0) {
		free(copy);
		return;
	}
	l->kept[l->nkept++] = copy;
	if (!keep_last || l->nkept <= keep_last)
		return;
	r = record_dir_remove(l->kept[0]);
	if (r < 0)
		report_warning("cannot remove %s (beyond --keep-last %u): %s", l->kept[0],
			       keep_last, strerror(-r));
	free(l->kept[0]);
	memmove(l->kept, l->kept + 1, --l->nkept * sizeof(*l->kept));
}

int record_loop(const struct record_opts *o, uint64_t interval_ns, uint64_t total_ns,
		unsigned keep_last, const struct target *t)
{
	struct loop l = { .pidfd = -1 };
	struct record_opts w = *o;
	char why[PATH_MAX + 128], path[PATH_MAX];
	uint64_t start = now_monotonic_ns();
	int first = EXIT_OK, code = EXIT_OK;

	if (record_dir_make_parent(l.dir, sizeof(l.dir), o->dir, t->pid, why, sizeof(why)) < 0) {
		report_error("%s", why);
		return EXIT_OUTPUT;
	}
	l.pidfd = (int)syscall(SYS_pidfd_open, t->pid, 0);
	w.dir = path;
	for (w.interval = 1;; w.interval++) {
		uint64_t elapsed = now_monotonic_ns() - start;

		w.duration_ns = interval_ns;
		if (total_ns && total_ns - elapsed < interval_ns)
			w.duration_ns = total_ns - elapsed;
		if (window_name(&l, path, sizeof(path)) < 0) {
			code = EXIT_OUTPUT;
			report_error("cannot name a window in %s", l.dir);
			break;
		}
		code = record_once(&w, t);
		if (w.interval == 1)
			first = code;
		/* One that wrote nothing may still be there, its manifest saying why. */
		if (access(path, F_OK) == 0)
			keep(&l, path, keep_last);
		if (code != EXIT_OK && code != EXIT_PARTIAL)
			break;
		l.written++;
		l.partial += code == EXIT_PARTIAL;
		elapsed = now_monotonic_ns() - start;
		if (interrupt_requested() || target_gone(&l, t->pid) ||
		    (total_ns && elapsed + LOOP_MIN_WINDOW_NS > total_ns))
			break;
	}
	if (target_gone(&l, t->pid))
		report_note("pid %d is gone: the loop ends", t->pid);
	if (l.written)
		report_note("%u %s in %s%s%s", l.written, plural(l.written, "window", "windows"),
			    l.dir, keep_last && l.written > keep_last ? ", the last ones kept" : "",
			    l.partial ? "; some kinds missing from some: see their manifests" : "");
	else if (!l.nkept)
		rmdir(l.dir);
	if (l.pidfd >= 0)
		close(l.pidfd);
	for (size_t i = 0; i < l.nkept; i++)
		free(l.kept[i]);
	free(l.kept);
	if (!l.written)
		return first;
	return l.partial || code != EXIT_OK ? EXIT_PARTIAL : EXIT_OK;
}
