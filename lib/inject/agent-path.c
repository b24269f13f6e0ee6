/*
 * Which agent a load uses: the resident one again where it ran a session
 * before, else ours at a path the target sees as the very same file, else
 * a copy placed in the target's root (place.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "inject/inject-private.h"
#include "inject/trampoline.h"
#include "target/target.h"
#include "util/util.h"

const char *inject_function_of(const struct inject_opts *o)
{
	return o->function ? o->function : "cprof_agent_attach_events";
}

static bool is_agent(const char *path)
{
	const char *b = strrchr(path, '/');

	return b && strncmp(b + 1, "cprof-agent", 11) == 0 && strstr(b, ".so");
}

/* stat() of @path as process @pid resolves it (target_open_in_root()). */
static int stat_in_root(pid_t pid, const char *path, struct stat *ret)
{
	int fd = target_open_in_root(pid, path, 0), r = 0;

	if (fd < 0)
		return fd;
	if (fstat(fd, ret) < 0)
		r = -errno;
	close(fd);
	return r;
}

/*
 * Has the resident agent held a session? Its memfd is among the target's
 * files from its first attach on, which got done all that attach does once
 * (resolving functions with dlsym, pthread_atfork): what is left of an
 * attach then allocates nothing and takes no lock of the loader's but
 * dl_iterate_phdr's (reentrant), so a thread stopped inside malloc may run
 * it. A thread inside the loader, a signal handler or the agent still may
 * not (judge.c).
 */
bool inject_warm_agent(pid_t pid)
{
	char dir[64], path[320], link[128];
	struct dirent *d;
	bool warm = false;
	DIR *fds;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	fds = opendir(dir);
	if (!fds)
		return false;
	while (!warm && (d = readdir(fds))) {
		ssize_t n;

		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		warm = strncmp(link, "/memfd:cprof-agent", 18) == 0;
	}
	closedir(fds);
	return warm;
}

/*
 * A resident agent is used again, by the path it was loaded from (dlopen of
 * the same path returns it, never a second copy that would hook the first).
 * Otherwise ours, if the target sees the very same file at that path, else
 * a copy placed in the target's root (place.c).
 */
int inject_choose_agent_path(struct call *c)
{
	const struct maps *m = c->o->maps;
	struct stat a, b;
	int r;

	for (size_t i = 0; i < m->n; i++)
		if (is_agent(m->entries[i].path)) {
			if (strstr(m->entries[i].path, " (deleted)"))
				return -EXDEV;
			snprintf(c->rep->agent_path, sizeof(c->rep->agent_path), "%s",
				 m->entries[i].path);
			if (inject_warm_agent(c->pid) &&
			    inject_find_function(c->pid, m, "cprof-agent", inject_function_of(c->o),
						 &c->attach_fn) == 0 &&
			    inject_find_function(c->pid, m, "cprof-agent", "cprof_agent_tramp",
						 &c->entry) == 0 &&
			    inject_find_function(c->pid, m, "cprof-agent", "cprof_agent_tramp_data",
						 &c->data) == 0)
				c->rep->resident = 1;
			else
				c->attach_fn = c->entry = c->data = 0;
			return 0;
		}
	if (c->o->agent_path[0] != '/' || strlen(c->o->agent_path) >= TD_PATH_MAX)
		return -EINVAL;
	if (stat(c->o->agent_path, &a) < 0)
		return -errno;
	if (stat_in_root(c->pid, c->o->agent_path, &b) == 0 && a.st_dev == b.st_dev &&
	    a.st_ino == b.st_ino) {
		snprintf(c->rep->agent_path, sizeof(c->rep->agent_path), "%s",
			 c->o->agent_path);
		return 0;
	}
	/* Another root (a container): the target gets a copy of its own. */
	r = inject_place_agent(c->pid, c->o->agent_path, c->rep->agent_path,
			       sizeof(c->rep->agent_path));
	if (r < 0) {
		c->rep->place_error = r;
		return -EXDEV;
	}
	c->rep->placed = r == 0 ? 1 : 2;
	return 0;
}
