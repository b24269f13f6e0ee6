/*
 * cprof heap under the allocators beyond glibc's (issue 15): Debian's
 * libjemalloc2, libtcmalloc-minimal4 and libmimalloc2.0, each linked into
 * heapsites (calling its own API: jemalloc's mallocx/rallocx/xallocx/
 * sdallocx/dallocx, mimalloc's mi_*, operator new/delete sized, aligned and
 * nothrow as the allocator defines them) and each LD_PRELOADed into the
 * plain heapsites: the same accuracy as glibc's (heap-accuracy.h).
 *
 * Rate 512 for 4 s at 8000 rounds/s gives the small sites as many samples
 * as test-heap's 1 KiB for 8 s (~1000 for the 16-byte sites: 15% is 4.7
 * standard deviations), in half the time.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "heap-accuracy.h"
#include "testhelp.h"

TestSuite(heap_alloc, .init = th_init, .fini = th_cleanup, .timeout = 120);

#define LIBDIR "/usr/lib/x86_64-linux-gnu/"

static void skip_unless_ready(void)
{
	if (geteuid() != 0)
		TH_SKIP_MISSING("cprof heap needs ptrace of the target: run as root");
	th_skip_accuracy_when_sanitized();
}

static void run(pid_t pid, const char *report, const char *what)
{
	check_heapsites_accuracy(pid, report, "512", 512, "4s", what);
}

/* heapsites-ALLOCATOR, built when its -dev package was installed. */
static void linked(const char *prog, const char *package)
{
	const char *report = th_tmp_path("heapsites-alloc.report");
	char path[4096];

	skip_unless_ready();
	snprintf(path, sizeof(path), "%s/%s", TARGETS_DIR, prog);
	if (access(path, X_OK) != 0)
		TH_SKIP_MISSING("%s is not built: %s was not installed when cprof was configured "
			     "(scripts/setup installs it)", prog, package);
	run(TH_SPAWN(prog, "30", report, "256", "8000"), report, prog);
}

/* The plain heapsites with @lib preloaded. */
static void preloaded(const char *lib, const char *package)
{
	const char *report = th_tmp_path("heapsites-preload.report");
	char what[256];
	pid_t pid;

	skip_unless_ready();
	if (access(lib, R_OK) != 0)
		TH_SKIP_MISSING("%s is missing: install %s (scripts/setup does)", lib, package);
	snprintf(what, sizeof(what), "heapsites with LD_PRELOAD=%s", lib);
	/* Only the target: it reads its environment once it runs ("ready"). */
	cr_assert_eq(setenv("LD_PRELOAD", lib, 1), 0);
	pid = TH_SPAWN("heapsites", "30", report, "256", "8000");
	unsetenv("LD_PRELOAD");
	run(pid, report, what);
}

Test(heap_alloc, jemalloc_linked)
{
	linked("heapsites-jemalloc", "libjemalloc-dev");
}

Test(heap_alloc, jemalloc_preloaded)
{
	preloaded(LIBDIR "libjemalloc.so.2", "libjemalloc2");
}

Test(heap_alloc, tcmalloc_linked)
{
	linked("heapsites-tcmalloc", "libgoogle-perftools-dev");
}

Test(heap_alloc, tcmalloc_preloaded)
{
	preloaded(LIBDIR "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4");
}

Test(heap_alloc, mimalloc_linked)
{
	linked("heapsites-mimalloc", "libmimalloc-dev");
}

Test(heap_alloc, mimalloc_preloaded)
{
	preloaded(LIBDIR "libmimalloc.so.2", "libmimalloc2.0");
}

/* ---- allocators cprof cannot hook: said plainly, exit 2 ----------------- */

/* The exit status of a refused target (cprof(1)); docs/measured.md quotes it. */
#define REFUSED_EXIT 2

/* cprof heap on @prog refuses with REFUSED_EXIT and says @expect. */
static void refused(const char *prog, const char *expect)
{
	char path[4096];
	struct th_run r;
	pid_t pid;

	if (geteuid() != 0)
		TH_SKIP_MISSING("cprof heap needs ptrace of the target: run as root");
	snprintf(path, sizeof(path), "%s/%s", TARGETS_DIR, prog);
	if (access(path, X_OK) != 0)
		TH_SKIP_MISSING("%s is not built: libjemalloc-dev was not installed when cprof was "
			     "configured (scripts/setup installs it)", prog);
	pid = TH_SPAWN(prog, "20");
	TH_CPROF(&r, 30000, "heap", "-p", th_pid_str(pid), "-d", "1s", "-o",
		 th_tmp_path("refused.pb.gz"));
	th_run_log(&r, prog);
	cr_expect_eq(r.exit_code, REFUSED_EXIT, "%s: exit %d, not %d", prog, r.exit_code,
		     REFUSED_EXIT);
	cr_expect(strstr(r.err, expect), "%s: cprof did not say '%s':\n%s", prog, expect, r.err);
	cr_expect(strstr(r.err, "GOT"), "%s: cprof did not say why:\n%s", prog, r.err);
	cr_expect(access(th_tmp_path("refused.pb.gz"), F_OK) != 0, "%s: a profile was written", prog);
	th_assert_let_go(pid, false, prog);
	th_kill(pid);
	th_run_release(&r);
}

Test(heap_alloc, own_malloc_refused)
{
	refused("ownmalloc", "its executable defines malloc itself");
}

Test(heap_alloc, prefixed_jemalloc_refused)
{
	refused("ownmalloc-prefix", "jemalloc is linked into its executable (it defines je_malloc)");
}

Test(heap_alloc, static_jemalloc_refused)
{
	refused("ownmalloc-jemalloc", "jemalloc is linked into its executable (it defines malloc)");
}
