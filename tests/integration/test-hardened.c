/*
 * Hardened targets (issue 22): MDWE set by the process itself, and seccomp
 * filters as systemd's MemoryDenyWriteExecute= installs them (EPERM or
 * kill on a mapping both writable and executable, or made executable
 * later) or stricter ones (any executable mapping). cprof either works
 * without what the policy forbids, or refuses before the target made a
 * single call of the load, naming the filter; the target always lives, and
 * no page writable and executable is ever left in it.
 *
 * The target is tests/targets/hardened.c: a malloc loop under its policy.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "testhelp.h"

TestSuite(hardened, .init = th_init, .fini = th_cleanup, .timeout = 120);

/* Lines of @pid's maps holding @what. */
static int maps_lines(pid_t pid, const char *what)
{
	char path[64], line[512];
	FILE *f;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "re");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

static void heap_works(const char *mode)
{
	pid_t pid = TH_SPAWN("hardened", mode, "20");
	const char *out = th_tmp_path("hardened.pb.gz");
	struct profile *p;
	struct th_run r;

	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(pid), "-d", "1s", "-o", out);
	cr_assert_eq(r.exit_code, 0, "%s: cprof heap: exit %d: %s", mode, r.exit_code, r.err);
	th_run_release(&r);
	p = th_load_profile(out);
	cr_assert_gt(p->nsamples, 0, "%s: no sample", mode);
	profile_free(p);
	cr_assert(th_alive(pid), "%s: the target died", mode);
	cr_assert_eq(maps_lines(pid, " rwxp "), 0, "%s: a page writable and executable", mode);
	cr_assert_eq(maps_lines(pid, "cprof-detour"), 0, "%s: the detour's code left", mode);
	th_assert_let_go(pid, false, mode);
}

static void refused_untouched(const char *mode)
{
	pid_t pid = TH_SPAWN("hardened", mode, "20");
	struct th_run r;

	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(pid), "-d", "1s", "-o",
		 th_tmp_path("hardened.pb.gz"));
	cr_assert_eq(r.exit_code, 2, "%s: cprof heap: exit %d: %s", mode, r.exit_code, r.err);
	cr_assert_not_null(strstr(r.err, "seccomp filter would"), "%s: %s", mode, r.err);
	th_run_release(&r);
	th_sleep_ms(100);
	cr_assert(th_alive(pid), "%s: the target died", mode);
	cr_assert_eq(maps_lines(pid, "cprof"), 0, "%s: cprof left something mapped", mode);
	th_assert_let_go(pid, false, mode);
}

Test(hardened, mdwe_by_prctl)
{
	heap_works("mdwe");
}

Test(hardened, seccomp_write_exec_errno)
{
	heap_works("wx-errno");
}

Test(hardened, seccomp_write_exec_kill)
{
	heap_works("wx-kill");
}

Test(hardened, seccomp_any_exec_errno_refused)
{
	refused_untouched("exec-errno");
}

Test(hardened, seccomp_any_exec_kill_refused)
{
	refused_untouched("exec-kill");
}
