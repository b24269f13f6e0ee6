/* cprof heap from jemalloc's own profiler: what cprof says of it. The work
 * is lib/session/jemalloc.c's. */
#include "heap-jemalloc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "report.h"
#include "util/util.h"

bool heap_jemalloc_auto(const struct target *t)
{
	return jemalloc_present(t->pid) && jemalloc_prof_at_start(t->pid);
}

int heap_jemalloc_check(const struct target *t)
{
	if (jemalloc_present(t->pid))
		return 0;
	report_error("pid %d (%s) does not use jemalloc as a shared library: there is no "
		     "jemalloc profiler to read", t->pid, t->comm);
	report_hint("without --source jemalloc, cprof heap samples its allocations with hooks");
	return EXIT_TARGET;
}

/* What to say when jemalloc's profiler cannot be read; an exit code. */
static int dump_error(const struct target *t, int r, const struct jemalloc_dump *d)
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
			     "root)", t->pid, t->comm, d->path);
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

int heap_jemalloc_error(const struct target *t, int r, const struct jemalloc_dump *d)
{
	if (r == -ECANCELED || d->failed == JEMALLOC_DUMP)
		return dump_error(t, r, d);
	if (d->failed == JEMALLOC_FILE)
		report_error("cannot make a file for jemalloc's profile in the root of pid %d (%s) "
			     "(/tmp, /var/tmp, /dev/shm): %s", t->pid, t->comm, strerror(-r));
	else
		report_error("cannot read jemalloc's heap profile of pid %d (%s): %s", t->pid,
			     t->comm, r == -EBADMSG ? "not in jemalloc's heap_v2 format" : strerror(-r));
	return EXIT_FAIL;
}

void heap_jemalloc_summary(const struct run *run)
{
	const struct jemalloc_dump *d = profiler_jemalloc_dump(run->p);
	const struct jeprof *j = d->prof;

	report_note("wrote %s: jemalloc's own heap profile, %zu %s, one sample per %llu %s on "
		    "average", output_name(&run->out), j->nbuckets,
		    plural(j->nbuckets, "backtrace", "backtraces"), (unsigned long long)j->period,
		    plural(j->period, "byte", "bytes"));
	if (d->inactive)
		report_warning("jemalloc's profiler is paused in pid %d (prof.active is false): the "
			       "profile holds what it sampled while it was active", run->target.pid);
	if (j->all.accum_objects == 0 && j->all.cur_objects != 0)
		report_note("alloc_objects and alloc_space are 0: jemalloc counts allocations only "
			    "with MALLOC_CONF=prof_accum:true");
}
