/*
 * A command over a set of processes (-p LIST, --children, --cgroup,
 * --unit): the set listed and checked, a profiler a process run as one
 * (profiler_new_set()), and a summary line a process.
 */
#include "run.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "interrupt.h"
#include "preflight.h"
#include "report.h"
#include "target/set.h"
#include "target/unit.h"
#include "util/util.h"

/* Whether @t is a process of cprof's own: this one, or another cprof
 * (the same program). */
static bool is_cprof(const struct target *t)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (t->is_self)
		return true;
	if (n <= 0)
		return false;
	self[n] = '\0';
	return !strcmp(t->exe, self);
}

/* Why cprof passes over the process @t (opened as @pid); NULL: it takes it. */
static const char *passed_over(const struct run_ops *ops, const struct target *t, pid_t pid)
{
	if (t->tgid != pid)
		return "a thread";
	if (t->kernel_thread)
		return "a kernel thread, no user space";
	if (is_cprof(t))
		return "a cprof process";
	if (t->state == 'Z' || t->state == 'X')
		return "a zombie";
	if (ops->attach && t->tracer_pid)
		return "traced";
	return NULL;
}

/*
 * Whether the set's process @pid can be profiled: the others are passed
 * over, said unless @left_out is NULL (a process that joins in the
 * window). Those the operator named and that cannot be are counted in
 * *@left_out.
 */
static bool keep(const struct run_ops *ops, pid_t pid, bool named, unsigned *left_out)
{
	struct target t;
	int r = target_open(&t, pid);
	const char *why = r == 0 ? passed_over(ops, &t, pid) : NULL;

	if (!left_out || (r == 0 && !why))
		return r == 0 && !why;
	if (r == -ESRCH) {
		if (named) {
			report_warning("pid %d: no such process; left out", pid);
			(*left_out)++;
		}
		return false;
	}
	if (r < 0) {
		report_warning("pid %d: reading /proc/%d failed (%s); left out", pid, pid,
			       strerror(-r));
		(*left_out)++;
		return false;
	}
	if (named && t.tgid != pid && !t.kernel_thread) {
		report_warning("%d is a thread of pid %d (%s): give the process; left out", pid,
			       t.tgid, t.comm);
		(*left_out)++;
	} else if (!strcmp(why, "traced")) {
		report_warning("pid %d (%s): traced by pid %d, which holds its threads; left out",
			       pid, t.comm, t.tracer_pid);
		(*left_out)++;
	} else if (named && t.tgid == pid) {
		report_note("pid %d (%s): %s; left out", pid, t.comm, why);
	}
	return false;
}

/* systemctl is asked once, at the start; it answers in milliseconds, and
 * waits for systemd's bus at worst. */
#define UNIT_TIMEOUT_MS 10000

/* --unit's cgroup, as systemd names it, into @path; an exit code. */
static int unit_cgroup(const char *unit, char *path, size_t size)
{
	char why[256];
	int r = target_unit_cgroup(unit, UNIT_TIMEOUT_MS, path, size, why, sizeof(why));

	switch (r) {
	case 0:
		return 0;
	case -EHOSTDOWN:
	case -ENOENT:
		report_error("cannot find unit '%s': %s", unit,
			     r == -ENOENT ? "there is no systemctl to ask"
					  : "systemd is not running on this machine (no /run/systemd/system)");
		report_hint("give the service's cgroup with --cgroup PATH (/proc/PID/cgroup shows a "
			    "process's), or its pids with -p");
		break;
	case -ESRCH:
		report_error("unit '%s' has no processes: systemd knows no unit of that name, or it "
			     "is not running", unit);
		report_hint("see 'systemctl status %s' and 'systemctl list-units'", unit);
		break;
	case -EIO:
		report_error("cannot find unit '%s': systemctl says: %s", unit,
			     why[0] ? why : "(nothing)");
		break;
	default:
		report_error("cannot find unit '%s': systemctl: %s", unit, strerror(-r));
		break;
	}
	return EXIT_TARGET;
}

/* How the set is listed, kept for the window: processes join it. */
struct run_set {
	struct target_set_spec spec;
	char cgroup[PATH_MAX];
	const struct run_ops *ops;
	void *c;
	const struct run *run;
};

void run_set_free(struct run_set *s)
{
	free(s);
}

static bool named(const struct common_opts *o, pid_t pid)
{
	const pid_t *pids = o->pids ? o->pids : &o->pid;
	size_t n = o->pids ? o->npids : 1;

	for (size_t i = 0; o->have_pid && i < n; i++)
		if (pids[i] == pid)
			return true;
	return false;
}

int run_prepare_set(const struct run_ops *ops, struct run *run, struct common_opts *o)
{
	struct run_set *set = calloc(1, sizeof(*set));
	struct target_set_spec spec = {
		.pids = o->pids ? o->pids : &o->pid,
		.npids = !o->have_pid ? 0 : o->pids ? o->npids : 1,
		.children = o->children,
	};
	const char *cgroup = o->cgroup;
	char unit_path[PATH_MAX];
	pid_t *pids = NULL;
	size_t n = 0, kept = 0;
	unsigned left_out = 0;
	int r;

	if (!set) {
		report_error("out of memory");
		return EXIT_FAIL;
	}
	run->set_spec = set;
	if (o->unit) {
		r = unit_cgroup(o->unit, unit_path, sizeof(unit_path));
		if (r)
			return r;
		cgroup = unit_path;
	}
	if (cgroup) {
		r = target_cgroup_dir(cgroup, set->cgroup, sizeof(set->cgroup));
		if (r < 0 && o->unit) {
			report_error("cannot find unit '%s''s cgroup '%s': %s", o->unit, cgroup,
				     strerror(-r));
			return EXIT_TARGET;
		}
		if (r < 0) {
			report_error("cannot find cgroup '%s': %s", cgroup, strerror(-r));
			report_hint("give a directory under the cgroup mount, or the path "
				    "/proc/PID/cgroup shows");
			return EXIT_TARGET;
		}
		if (!ops->whole_host && target_cgroup_is_root(set->cgroup))
			return report_usage_hint(ops->command, "give a cgroup under it, or use cpu or "
							       "wall, which read the kernel's counts",
						 "%s %s is the whole machine (%s): %s would stop "
						 "every process on it",
						 o->unit ? "--unit" : "--cgroup",
						 o->unit ? o->unit : cgroup, set->cgroup, ops->command);
		spec.cgroup = set->cgroup;
	}
	/* -p's pids are the command's for its life. */
	set->spec = spec;
	for (size_t i = 0; i < spec.npids; i++)
		if (kill(spec.pids[i], 0) < 0 && errno == ESRCH)
			keep(ops, spec.pids[i], true, &left_out);
	r = target_set_list(&spec, &pids, &n);
	if (r < 0) {
		report_error("cannot list the processes: %s", strerror(-r));
		return EXIT_TARGET;
	}
	for (size_t i = 0; i < n; i++)
		if (keep(ops, pids[i], named(o, pids[i]), &left_out))
			pids[kept++] = pids[i];
	if (!kept) {
		free(pids);
		report_error("no process to profile: %s",
			     o->unit ? "the unit has none cprof can" :
			     o->cgroup ? "the cgroup has none cprof can" : "none of those given can be");
		return EXIT_TARGET;
	}
	run->set = pids;
	run->nset = kept;
	run->left_out = left_out;
	r = target_open(&run->target, pids[0]);
	if (r < 0)
		run->target = (struct target){ .pid = pids[0] };
	o->pid = pids[0];
	snprintf(run->label, sizeof(run->label), "%zu %s (pid %d %s%s)", kept,
		 plural(kept, "process", "processes"), (int)pids[0], run->target.comm,
		 kept > 1 ? ", ..." : "");
	return RUN_GO_ON;
}

static int open_member(void *arg, pid_t pid, struct profiler **ret, char *err, size_t errlen)
{
	const struct run_set *s = arg;

	return s->ops->open_member(s->c, s->run, pid, ret, err, errlen);
}

/* The set now, those cprof cannot take passed over in silence. */
static int list_members(void *arg, pid_t **ret, size_t *ret_n)
{
	const struct run_set *s = arg;
	size_t kept = 0;
	int r = target_set_list(&s->spec, ret, ret_n);

	for (size_t i = 0; r == 0 && i < *ret_n; i++)
		if (keep(s->ops, (*ret)[i], false, NULL))
			(*ret)[kept++] = (*ret)[i];
	if (r == 0)
		*ret_n = kept;
	return r;
}

int run_open_set(const struct run_ops *ops, void *c, struct run *run)
{
	struct run_set *s = run->set_spec;
	char why[2048], err[1024] = "";
	int r;

	preflight_raise_nofile();
	s->ops = ops;
	s->c = c;
	s->run = run;
	r = profiler_new_set(&run->p, ops->command, run->set, run->nset, open_member,
			     list_members, s, why, sizeof(why));
	if (r < 0) {
		report_error("cannot profile any process of the set: %s", why);
		if (r == -EACCES || r == -EPERM)
			return EXIT_PERMISSION;
		return r == -ESRCH ? EXIT_TARGET : EXIT_FAIL;
	}
	r = profiler_start(run->p, err, sizeof(err));
	if (r == -ECANCELED)
		return EXIT_OK;
	if (r < 0) {
		report_error("cannot start on any process of the set: %s", err);
		return r == -ESRCH ? EXIT_TARGET : EXIT_FAIL;
	}
	return 0;
}

unsigned run_summary_set(const struct run_ops *ops, const struct run *run)
{
	size_t n = profiler_set_members(run->p, NULL, 0);
	struct profiler_member *m = calloc(n ? n : 1, sizeof(*m));
	unsigned left_out = run->left_out;
	const char *one = ops->counts[0] ? ops->counts[0] : "event";
	const char *many = ops->counts[1] ? ops->counts[1] : "events";

	if (run->written && strcmp(run->opts->output, "-"))
		report_note("wrote %s: %zu %s, %llu %s", output_name(&run->out), n,
			    plural(n, "process", "processes"), (unsigned long long)run->facts.count,
			    plural(run->facts.count, one, many));
	if (!m)
		n = 0;
	profiler_set_members(run->p, m, n);
	for (size_t i = 0; i < n; i++) {
		if (m[i].error || !m[i].p) {
			report_warning("pid %d (%s) left out: %s", m[i].pid, m[i].comm, m[i].why);
			left_out++;
			continue;
		}
		report_note("pid %d (%s): %llu %s%s%s", m[i].pid, m[i].comm,
			    (unsigned long long)profiler_count(m[i].p),
			    plural(profiler_count(m[i].p), one, many),
			    m[i].born ? ", born in the window" : "",
			    m[i].exited ? ", exited in the window" : "");
	}
	free(m);
	return left_out;
}
