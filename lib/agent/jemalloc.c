/*
 * jemalloc's own heap profiler, asked from inside the target: when the
 * process's jemalloc samples allocations itself (started with
 * MALLOC_CONF=prof:true), cprof has the agent write jemalloc's heap profile
 * to a file and reads that instead of hooking anything.
 *
 * Nothing of the agent's stays behind: no hook, no thread, no memory. The
 * file is cprof's to read and delete (lib/heap/jemalloc-prof.h).
 *
 * mallctl("prof.dump") takes jemalloc's own locks (prof_dump_mtx, tdatas_mtx,
 * each backtrace's gctx lock) and allocates: the thread that runs this must
 * hold none of them, i.e. be outside jemalloc, which cprof's judge checks
 * before it sends one (lib/inject/judge.c: frames of libjemalloc refused).
 * prof_dump() asserts that it is not reentered from inside the allocator.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#include "cprof-agent.h"

typedef int (*mallctl_fn)(const char *name, void *oldp, size_t *oldlenp, void *newp,
			  size_t newlen);

/* The process's mallctl: jemalloc's, if it is the allocator in the global
 * scope (linked or LD_PRELOADed). dlsym is fine here: the judge let no
 * thread inside the loader come here. */
static mallctl_fn find_mallctl(void)
{
	return (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
}

static int read_bool(mallctl_fn ctl, const char *name, bool *ret)
{
	size_t len = sizeof(*ret);
	bool v = false;
	int r = ctl(name, &v, &len, NULL, 0);

	if (r != 0)
		return -r;
	if (len != sizeof(v))
		return -EINVAL;
	*ret = v;
	return 0;
}

CPROF_AGENT_API int cprof_agent_jemalloc_dump(const char *path)
{
	mallctl_fn ctl = find_mallctl();
	bool prof = false, active = false;
	int r;

	if (!ctl)
		return -ENOENT;
	/* opt.prof exists only where jemalloc was built with --enable-prof. */
	r = read_bool(ctl, "opt.prof", &prof);
	if (r < 0)
		return -ENOTSUP;
	if (!prof)
		return -ENODATA;
	r = read_bool(ctl, "prof.active", &active);
	if (r < 0)
		return r;
	if (!path)
		return active ? 0 : CPROF_JEMALLOC_INACTIVE;
	/* jemalloc's errno-style result: EFAULT when the file could not be
	 * written (prof_dump_open(): creat() failed). */
	r = ctl("prof.dump", NULL, NULL, (void *)&path, sizeof(path));
	if (r != 0)
		return -r;
	return active ? 0 : CPROF_JEMALLOC_INACTIVE;
}
