/* A set of processes: a PID list, process trees, a cgroup (set.h). */
#include "target/set.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "target/target.h"
#include "util/parse.h"
#include "util/util.h"

/* A cgroup tree is walked no deeper than this (systemd nests a few). */
#define CGROUP_MAX_DEPTH 32

struct pids {
	pid_t *v;
	size_t n, alloc;
};

static bool has(const struct pids *s, pid_t pid)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i] == pid)
			return true;
	return false;
}

static int add(struct pids *s, pid_t pid)
{
	if (GROW(s->v, s->n + 1, s->alloc) < 0)
		return -ENOMEM;
	s->v[s->n++] = pid;
	return 0;
}

int target_pids_parse(const char *arg, pid_t **ret, size_t *ret_n, char *why, size_t whylen)
{
	struct pids s = { 0 };
	const char *p = arg;
	int r = 0;

	while (r == 0 && *p) {
		char word[32];
		size_t len;
		pid_t pid;

		while (*p == ',' || isspace((unsigned char)*p))
			p++;
		len = strcspn(p, ", \t\n\r\v\f");
		if (!len)
			break;
		snprintf(word, sizeof(word), "%.*s", (int)MIN(len, sizeof(word) - 1), p);
		r = len < sizeof(word) ? parse_pid(word, &pid) : -ERANGE;
		if (r < 0)
			snprintf(why, whylen, "invalid pid '%.*s': %s", (int)MIN(len, 64), p,
				 r == -ERANGE ? "out of range (1 to 4194304)" : "not a number");
		else if (!has(&s, pid))
			r = add(&s, pid);
		p += len;
	}
	if (r == 0 && !s.n) {
		snprintf(why, whylen, "no pid given");
		r = -EINVAL;
	}
	if (r < 0) {
		free(s.v);
		return r;
	}
	*ret = s.v;
	*ret_n = s.n;
	return 0;
}

static bool is_cgroup(const char *dir)
{
	char procs[PATH_MAX];

	return snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir) < (int)sizeof(procs) &&
	       access(procs, F_OK) == 0;
}

bool target_cgroup_is_root(const char *dir)
{
	char parent[PATH_MAX];
	char *slash;

	if (snprintf(parent, sizeof(parent), "%s", dir) >= (int)sizeof(parent))
		return false;
	slash = strrchr(parent, '/');
	if (!slash || slash == parent)
		return true;
	*slash = '\0';
	return !is_cgroup(parent);
}

/* @path under the mount point of mountinfo @line when it is a cgroup
 * filesystem of type @type ("cgroup2", "cgroup"). */
static bool under_mount(const char *line, const char *type, const char *path, char *buf,
			size_t size)
{
	char mnt[PATH_MAX], fstype[32];
	const char *sep = strstr(line, " - ");

	if (!sep || sscanf(sep, " - %31s", fstype) != 1 || strcmp(fstype, type) ||
	    sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
		return false;
	path += strspn(path, "/");
	return snprintf(buf, size, "%s%s%s", mnt, path[0] ? "/" : "", path) < (int)size &&
	       is_cgroup(buf);
}

int target_cgroup_dir(const char *path, char *buf, size_t size)
{
	static const char *const types[] = { "cgroup2", "cgroup" };
	char line[2 * PATH_MAX];
	bool found = false;
	FILE *f;

	if (path[0] == '/' && is_cgroup(path)) {
		if (snprintf(buf, size, "%s", path) >= (int)size)
			return -ENAMETOOLONG;
		return 0;
	}
	for (size_t t = 0; t < ARRAY_SIZE(types) && !found; t++) {
		f = fopen("/proc/self/mountinfo", "re");
		if (!f)
			return -errno;
		while (!found && fgets(line, sizeof(line), f))
			found = under_mount(line, types[t], path, buf, size);
		fclose(f);
	}
	return found ? 0 : -ENOENT;
}

/* Every process of the cgroup at @dir and of those below it. */
static int add_cgroup(struct pids *s, const char *dir, int depth)
{
	char path[PATH_MAX], line[32];
	struct dirent *e;
	FILE *f;
	DIR *d;
	int r = 0;

	if (depth > CGROUP_MAX_DEPTH)
		return 0;
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? 0 : -errno; /* removed meanwhile */
	while (r == 0 && fgets(line, sizeof(line), f)) {
		pid_t pid;

		line[strcspn(line, "\n")] = '\0';
		if (parse_pid(line, &pid) == 0 && !has(s, pid))
			r = add(s, pid);
	}
	fclose(f);
	d = opendir(dir);
	if (!d)
		return r;
	while (r == 0 && (e = readdir(d))) {
		if (e->d_type != DT_DIR || e->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path))
			continue;
		r = add_cgroup(s, path, depth + 1);
	}
	closedir(d);
	return r;
}

/* The parent of every process, from /proc/PID/stat. */
struct parent {
	pid_t pid, ppid;
};

static int read_parents(struct parent **ret, size_t *ret_n)
{
	struct parent *v = NULL;
	size_t n = 0, alloc = 0;
	struct dirent *e;
	DIR *d = opendir("/proc");
	int r = 0;

	if (!d)
		return -errno;
	while (r == 0 && (e = readdir(d))) {
		char path[64], buf[512], *close;
		pid_t pid, ppid;
		size_t len;

		if (parse_pid(e->d_name, &pid) < 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/stat", pid);
		if (proc_read(path, buf, sizeof(buf), &len) < 0)
			continue; /* gone meanwhile */
		/* The comm may hold spaces and parentheses: the last ')'. */
		close = strrchr(buf, ')');
		if (!close || sscanf(close, ") %*c %d", &ppid) != 1)
			continue;
		r = GROW(v, n + 1, alloc);
		if (r == 0)
			v[n++] = (struct parent){ pid, ppid };
	}
	closedir(d);
	if (r < 0) {
		free(v);
		return r;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

/* The descendants of every process in @s, added to it. */
static int add_descendants(struct pids *s)
{
	struct parent *all = NULL;
	size_t n = 0;
	int r = read_parents(&all, &n);

	/* Breadth first: @s grows as its members' children are found. */
	for (size_t i = 0; r == 0 && i < s->n; i++)
		for (size_t k = 0; r == 0 && k < n; k++)
			if (all[k].ppid == s->v[i] && !has(s, all[k].pid))
				r = add(s, all[k].pid);
	free(all);
	return r;
}

static int compare_pid(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;

	return (x > y) - (x < y);
}

int target_set_list(const struct target_set_spec *spec, pid_t **ret, size_t *ret_n)
{
	struct pids s = { 0 }, live = { 0 };
	int r = 0;

	for (size_t i = 0; r == 0 && i < spec->npids; i++)
		if (!has(&s, spec->pids[i]))
			r = add(&s, spec->pids[i]);
	if (r == 0 && spec->cgroup)
		r = add_cgroup(&s, spec->cgroup, 0);
	if (r == 0 && spec->children)
		r = add_descendants(&s);
	for (size_t i = 0; r == 0 && i < s.n; i++)
		if (target_alive(s.v[i]))
			r = add(&live, s.v[i]);
	free(s.v);
	if (r < 0) {
		free(live.v);
		return r;
	}
	if (live.n)
		qsort(live.v, live.n, sizeof(*live.v), compare_pid);
	*ret = live.v;
	*ret_n = live.n;
	return 0;
}
