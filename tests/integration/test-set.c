/*
 * A command over a set of processes (-p LIST, --children, --cgroup,
 * --unit): one profile in which each sample says its process, a process
 * that cannot be profiled named and the others written (exit 5), the
 * refusals of a set where a command takes one process.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "target/set.h"
#include "target/target.h"
#include "testhelp.h"

TestSuite(set, .init = th_init, .fini = th_cleanup, .timeout = 120);

/* A pool's workers: the pool's descendants, as /proc says now. */
static size_t workers_of(pid_t pool, pid_t *ret, size_t max)
{
	struct target_set_spec spec = { .pids = &pool, .npids = 1, .children = true };
	pid_t *v = NULL;
	size_t n = 0, k = 0;

	cr_assert_eq(target_set_list(&spec, &v, &n), 0);
	for (size_t i = 0; i < n && k < max; i++)
		if (v[i] != pool)
			ret[k++] = v[i];
	free(v);
	return k;
}

/* Each sample's cpu/nanoseconds by its process_id (and the samples of
 * none), into @ns for the pids of @pids. */
static int64_t by_process(const struct profile *p, const pid_t *pids, size_t n, int64_t *ns)
{
	int vi = th_sample_type(p, "cpu", "nanoseconds");
	int64_t unlabelled = 0;

	cr_assert_geq(vi, 0, "no cpu/nanoseconds");
	memset(ns, 0, n * sizeof(*ns));
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		const struct profile_label *pid = th_label(s, "process_id");
		const struct profile_label *name = th_label(s, "process_name");
		size_t j = 0;

		if (!pid || !name || !name->str) {
			unlabelled += s->values[vi];
			continue;
		}
		for (; j < n && pids[j] != (pid_t)pid->num; j++)
			;
		cr_assert_lt(j, n, "a sample of pid %lld, not one of the set", (long long)pid->num);
		ns[j] += s->values[vi];
	}
	return unlabelled;
}

/* cpu/nanoseconds of the samples of processes other than @except whose
 * stack holds @function. */
static double in_frame(const struct profile *p, pid_t except, const char *function)
{
	int vi = th_sample_type(p, "cpu", "nanoseconds");
	double ns = 0;

	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		const struct profile_label *pid = th_label(s, "process_id");
		bool found = false;

		if (!pid || pid->num == except)
			continue;
		for (size_t l = 0; l < s->nlocations && !found; l++)
			found = th_location_has(p, s->location_ids[l], function);
		if (found)
			ns += (double)s->values[vi];
	}
	return ns;
}

static bool has_comment(const struct profile *p, const char *needle)
{
	for (size_t i = 0; i < p->ncomments; i++)
		if (strstr(p->comments[i], needle))
			return true;
	return false;
}

Test(set, cpu_over_a_pool_and_its_children_labels_each_process)
{
	const char *out = th_tmp_path("pool.pb.gz");
	pid_t pool = TH_SPAWN("pool", "2", "30"), w[8], pids[3];
	int64_t ns[3];
	size_t n = workers_of(pool, w, 8);
	struct th_run r;
	struct profile *p;

	th_require_perf(false);
	cr_assert_eq(n, 2, "the pool has %zu workers, not 2", n);
	TH_CPROF(&r, 60000, "cpu", "-p", th_pid_str(pool), "--children", "-d", "2s", "-o", out);
	th_run_log(&r, "cprof cpu --children");
	cr_assert_eq(r.exit_code, 0, "exit %d: %s", r.exit_code, r.err);
	p = th_load_profile(out);
	pids[0] = pool;
	pids[1] = w[0];
	pids[2] = w[1];
	cr_expect_eq(by_process(p, pids, 3, ns), 0, "samples without their process's labels");
	/* The workers spin, the pool waits: the workers have the CPU time. */
	cr_expect_gt(ns[1], 200 * 1000000LL, "worker %d: %lld ns", w[0], (long long)ns[1]);
	cr_expect_gt(ns[2], 200 * 1000000LL, "worker %d: %lld ns", w[1], (long long)ns[2]);
	cr_expect_lt(ns[0], (ns[1] + ns[2]) / 10, "the pool, which waits, has %lld ns",
		     (long long)ns[0]);
	cr_expect(has_comment(p, "processes:"), "no comment lists the processes");
	/* The workers' time is in worker_spin (its clock reads aside). */
	cr_expect_geq(in_frame(p, pool, "worker_spin"), 0.9 * (double)(ns[1] + ns[2]),
		      "the workers' samples are not in worker_spin");
	cr_expect(strstr(r.err, th_pid_str(w[0])) && strstr(r.err, th_pid_str(w[1])),
		  "the summary does not name each worker: %s", r.err);
	profile_free(p);
	th_run_release(&r);
	th_kill(pool);
}

/* A worker the pool forks a second into the window is followed from its
 * birth: its samples under its own pid. */
Test(set, a_process_born_in_the_window_joins_the_set)
{
	const char *out = th_tmp_path("born.pb.gz");
	pid_t pool = TH_SPAWN("pool", "1", "30", "1.5"), w[8], pids[3];
	int64_t ns[3];
	size_t n;
	struct th_run r;
	struct profile *p;

	th_require_perf(false);
	TH_CPROF(&r, 60000, "cpu", "-p", th_pid_str(pool), "--children", "-d", "3s", "-o", out);
	th_run_log(&r, "cprof cpu --children, a worker born in the window");
	cr_assert_eq(r.exit_code, 0, "exit %d: %s", r.exit_code, r.err);
	n = workers_of(pool, w, 8);
	cr_assert_eq(n, 2, "the pool has %zu workers, not 2", n);
	p = th_load_profile(out);
	pids[0] = pool;
	pids[1] = w[0];
	pids[2] = w[1];
	cr_expect_eq(by_process(p, pids, 3, ns), 0, "samples without their process's labels");
	/* The later one (the higher pid, none wrapped in a second) was born
	 * 1.5 s into the pool's life, about a second into the window. */
	cr_expect_gt(ns[1], 0, "worker %d has no samples", w[0]);
	cr_expect_gt(ns[2], 100 * 1000000LL, "worker %d, born in the window: %lld ns", w[1],
		     (long long)ns[2]);
	cr_expect(has_comment(p, "born in the window"), "no comment says who was born");
	cr_expect(strstr(r.err, "born in the window"), "%s", r.err);
	profile_free(p);
	th_run_release(&r);
	th_kill(pool);
}

/* A pid that was a process of ours and is no more (reaped). */
static pid_t dead_pid(void)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(0);
	cr_assert_eq(waitpid(pid, NULL, 0), pid);
	return pid;
}

Test(set, a_list_with_a_dead_pid_writes_the_others_and_exits_5)
{
	const char *out = th_tmp_path("list.pb.gz");
	pid_t a = TH_SPAWN("busy", "1", "30"), b = TH_SPAWN("busy", "1", "30");
	pid_t gone = dead_pid(), pids[2] = { a, b };
	char list[64];
	int64_t ns[2];
	struct th_run r;
	struct profile *p;

	th_require_perf(false);
	snprintf(list, sizeof(list), "%d %d,%d", (int)a, (int)gone, (int)b);
	TH_CPROF(&r, 60000, "cpu", "-p", list, "-d", "1s", "-o", out, "--json");
	th_run_log(&r, "cprof cpu with a dead pid");
	cr_assert_eq(r.exit_code, 5, "exit %d: %s", r.exit_code, r.err);
	/* --json says the exit it leaves with, and the processes profiled. */
	snprintf(list, sizeof(list), "\"processes\":[%d,%d]", (int)a, (int)b);
	cr_expect(strstr(r.out, "\"exit\":5,") && strstr(r.out, list), "%s", r.out);
	cr_expect(strstr(r.err, th_pid_str(gone)) && strstr(r.err, "no such process"),
		  "the dead pid is not named: %s", r.err);
	p = th_load_profile(out);
	cr_expect_eq(by_process(p, pids, 2, ns), 0);
	cr_expect_gt(ns[0], 0, "no samples of %d", a);
	cr_expect_gt(ns[1], 0, "no samples of %d", b);
	profile_free(p);
	th_run_release(&r);
	th_kill(a);
	th_kill(b);
}

Test(set, threads_text_heads_each_process)
{
	pid_t a = TH_SPAWN("busy", "1", "30"), b = TH_SPAWN("busy", "2", "30");
	char list[64], head[64];
	struct th_run r;

	if (geteuid() != 0)
		TH_SKIP_MISSING("threads needs ptrace: run as root");
	snprintf(list, sizeof(list), "%d,%d", (int)a, (int)b);
	TH_CPROF(&r, 60000, "threads", "-p", list, "--debug", "1");
	cr_assert_eq(r.exit_code, 0, "exit %d: %s", r.exit_code, r.err);
	snprintf(head, sizeof(head), "pid %d (busy)\n", (int)a);
	cr_expect(strstr(r.out, head), "no heading %s in: %.400s", head, r.out);
	snprintf(head, sizeof(head), "pid %d (busy)\n", (int)b);
	cr_expect(strstr(r.out, head), "no heading %s", head);
	th_run_release(&r);
	th_kill(a);
	th_kill(b);
}

Test(set, a_set_where_one_process_is_taken_is_refused)
{
	pid_t a = TH_SPAWN("busy", "1", "30");
	char list[64];
	struct th_run r;

	snprintf(list, sizeof(list), "%d,1", (int)a);
	TH_CPROF(&r, 30000, "heap", "-p", list, "-d", "1s");
	cr_expect_eq(r.exit_code, 64, "exit %d: %s", r.exit_code, r.err);
	cr_expect(strstr(r.err, "heap looks at one process"), "%s", r.err);
	th_run_release(&r);
	/* Unquoted $(pidof X): a second pid as an argument, and the hint. */
	TH_CPROF(&r, 30000, "cpu", "-p", th_pid_str(a), "1", "-d", "1s");
	cr_expect_eq(r.exit_code, 64, "exit %d: %s", r.exit_code, r.err);
	cr_expect(strstr(r.err, "quote it"), "%s", r.err);
	th_run_release(&r);
	TH_CPROF(&r, 30000, "cpu", "--children", "-d", "1s");
	cr_expect_eq(r.exit_code, 64, "--children without -p: exit %d", r.exit_code);
	th_run_release(&r);
	TH_CPROF(&r, 30000, "cpu", "--cgroup", "/no-such-cgroup-of-cprof", "-d", "1s");
	cr_expect_eq(r.exit_code, 2, "a cgroup that is not: exit %d: %s", r.exit_code, r.err);
	cr_expect(strstr(r.err, "/no-such-cgroup-of-cprof"), "%s", r.err);
	th_run_release(&r);
	/* The whole machine is cpu's and wall's, never a stop of every process. */
	TH_CPROF(&r, 30000, "threads", "--cgroup", "/");
	cr_expect_eq(r.exit_code, 64, "threads --cgroup /: exit %d: %s", r.exit_code, r.err);
	cr_expect(strstr(r.err, "whole machine"), "%s", r.err);
	th_run_release(&r);
	th_kill(a);
}

/* A cgroup of our making, and one process moved into it; NULL when this
 * machine does not let us (said why in @why). */
static bool make_cgroup(pid_t pid, char *dir, size_t size, char *why, size_t whylen)
{
	char root[256], procs[600], text[32];
	FILE *f;

	if (geteuid() != 0)
		return snprintf(why, whylen, "moving a process into a cgroup needs root"), false;
	if (target_cgroup_dir("/", root, sizeof(root)) < 0)
		return snprintf(why, whylen, "no cgroup filesystem is mounted"), false;
	snprintf(dir, size, "%s/cprof-test-set-%d", root, (int)getpid());
	if (mkdir(dir, 0755) < 0)
		return snprintf(why, whylen, "cannot make a cgroup under %s: %s", root,
				strerror(errno)),
		       false;
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
	snprintf(text, sizeof(text), "%d\n", (int)pid);
	f = fopen(procs, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		snprintf(why, whylen, "cannot move a process into %s", dir);
		rmdir(dir);
		return false;
	}
	return true;
}

Test(set, cpu_over_a_cgroup)
{
	const char *out = th_tmp_path("cgroup.pb.gz");
	pid_t a = TH_SPAWN("busy", "1", "30"), pids[1] = { a };
	char dir[512], why[600];
	int64_t ns[1];
	struct th_run r;
	struct profile *p;

	th_require_perf(false);
	if (!make_cgroup(a, dir, sizeof(dir), why, sizeof(why))) {
		th_kill(a);
		cr_skip_test("%s", why);
	}
	TH_CPROF(&r, 60000, "cpu", "--cgroup", dir, "-d", "1s", "-o", out);
	th_kill(a);
	for (int i = 0; i < 200 && target_alive(a); i++)
		usleep(10000);
	cr_expect_eq(rmdir(dir), 0, "%s: %s", dir, strerror(errno));
	cr_assert_eq(r.exit_code, 0, "exit %d: %s", r.exit_code, r.err);
	p = th_load_profile(out);
	cr_expect_eq(by_process(p, pids, 1, ns), 0);
	cr_expect_gt(ns[0], 0, "no samples of the cgroup's process");
	profile_free(p);
	th_run_release(&r);
}

/*
 * --unit asks systemctl for the unit's cgroup. This machine has no systemd
 * running (nor a bus for a systemctl of its own): where there is none cprof
 * refuses and names --cgroup. The rest runs where systemd seems to: in a
 * mount namespace of its own with /run/systemd/system (sd_booted(3)'s
 * test), and first in PATH a systemctl that answers `show -p ControlGroup
 * --value` as systemd's does, with a cgroup of our making for its unit and
 * nothing for any other.
 */
Test(set, threads_over_a_systemd_unit)
{
	pid_t a = TH_SPAWN("busy", "1", "30");
	const char *bin = th_tmp_dir("unit-bin");
	char dir[512], why[600], script[1024], fake[600], cmd[2400], no_ns[300] = "", *cg;
	struct th_run r;
	FILE *f;

	TH_CPROF(&r, 30000, "threads", "--unit", "cprof-test.service");
	cr_expect_eq(r.exit_code, 2, "exit %d: %s", r.exit_code, r.err);
	if (access("/run/systemd/system", F_OK) < 0)
		cr_expect(strstr(r.err, "systemd is not running") && strstr(r.err, "--cgroup"), "%s",
			  r.err);
	th_run_release(&r);
	TH_CPROF(&r, 30000, "threads", "--unit", "x.service", "-p", th_pid_str(a));
	cr_expect_eq(r.exit_code, 64, "--unit and -p: exit %d: %s", r.exit_code, r.err);
	th_run_release(&r);
	TH_CPROF(&r, 30000, "heap", "--unit", "x.service", "-d", "1s");
	cr_expect_eq(r.exit_code, 64, "heap --unit: exit %d: %s", r.exit_code, r.err);
	th_run_release(&r);

	if (!make_cgroup(a, dir, sizeof(dir), why, sizeof(why))) {
		th_kill(a);
		cr_skip_test("%s", why);
	}
	/* systemd names a cgroup by its path under the hierarchy's root. */
	cr_assert_eq(target_cgroup_dir("/", fake, sizeof(fake)), 0);
	cg = dir + strlen(fake);
	snprintf(fake, sizeof(fake), "%s/systemctl", bin);
	snprintf(script, sizeof(script),
		 "#!/bin/sh\n"
		 "[ \"$*\" = 'show --no-pager -p ControlGroup --value -- cprof-test.service' ] &&\n"
		 "\techo '%s' && exit 0\n"
		 "echo\n", cg);
	f = fopen(fake, "w");
	cr_assert(f && fputs(script, f) >= 0 && fclose(f) == 0);
	cr_assert_eq(chmod(fake, 0755), 0);
	for (int known = 1; known >= 0 && !no_ns[0]; known--) {
		snprintf(cmd, sizeof(cmd),
			 "mount -t tmpfs cprof-test /run && mkdir -p /run/systemd/system && "
			 "PATH='%s':\"$PATH\" exec '%s' threads --unit %s --debug 1",
			 bin, CPROF_BIN, known ? "cprof-test.service" : "other.service");
		th_run_cmd_ex(&r, 30000, 0, 0,
			      (const char *const[]){ "/usr/bin/unshare", "-m", "/bin/sh", "-c", cmd,
						     NULL });
		if (r.exit_code != 0 && strstr(r.err, "unshare:"))
			snprintf(no_ns, sizeof(no_ns), "%s", r.err);
		else if (known) {
			cr_expect_eq(r.exit_code, 0, "exit %d: %s", r.exit_code, r.err);
			cr_expect(strstr(r.out, th_pid_str(a)), "no pid %d in:\n%s", (int)a, r.out);
		} else {
			cr_expect_eq(r.exit_code, 2, "an unknown unit: exit %d: %s", r.exit_code,
				     r.err);
			cr_expect(strstr(r.err, "has no processes"), "%s", r.err);
		}
		th_run_release(&r);
	}
	th_kill(a);
	for (int i = 0; i < 200 && target_alive(a); i++)
		usleep(10000);
	cr_expect_eq(rmdir(dir), 0, "%s: %s", dir, strerror(errno));
	if (no_ns[0])
		cr_skip_test("no mount namespace of our own: %s", no_ns);
}
