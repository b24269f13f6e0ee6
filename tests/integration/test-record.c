/*
 * `cprof record` end to end: every kind of one process in one window, in
 * one directory.
 *
 *  - on tests/targets/locks (ab): every file, each profile readable, the
 *    manifest naming each; block's sites against the waiter's own clock
 *    (the truth test-locks holds `cprof block` to), the threads' dumps
 *    naming its threads; nothing traced or hooked afterwards;
 *  - a static binary: the agent's kinds refused with their reason in the
 *    manifest and on stderr, the others written, exit 5;
 *  - a directory that exists is refused before the target is touched;
 *  - SIGINT ends the window and everything is still written;
 *  - --loop: windows one after another, the oldest beyond --keep-last
 *    removed, the loop ended by -d, SIGTERM or the target's exit, and the
 *    target let go after each.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/wire.h"
#include "testhelp.h"

TestSuite(record, .init = th_init, .fini = th_cleanup, .timeout = 180);

/* --loop's test: windows of 1 s over 10 s, the last kept. */
#define LOOP_WINDOWS_MIN 3
#define LOOP_KEEP_LAST 2

/* The bound block's sites are held to (test-locks' BLOCK_MAX_ERR). */
#define RECORD_BLOCK_MAX_ERR 0.15

static const char *const pprof_files[] = {
	"cpu.pb.gz", "wall.pb.gz", "threads-start.pb.gz", "heap.pb.gz", "block.pb.gz",
	"mutex.pb.gz", "threadcreate.pb.gz", "threads-end.pb.gz",
};

/*
 * A target for the tests that judge what record writes and when it ends,
 * not a figure: demo's workers paced to 2000 requests a second (half a
 * CPU) give every kind its events and leave the CPUs to cprof.
 */
static pid_t paced_demo(const char *seconds)
{
	return TH_SPAWN("demo", seconds, "2", "2000");
}

static void skip_without_ptrace(void)
{
	if (geteuid() != 0)
		TH_SKIP_MISSING("record loads the agent and stops threads: run as root");
}

static char *slurp(const char *dir, const char *name)
{
	char path[512], *text;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	text = th_read_text(path, NULL);
	cr_assert_not_null(text, "no %s", path);
	return text;
}

static struct profile *load(const char *dir, const char *name)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return th_load_profile(path);
}

/* The manifest's pause_ns of @kind's file, 0 when none. */
static double manifest_pause_ns(const char *manifest, const char *kind)
{
	char key[64];
	const char *at;

	snprintf(key, sizeof(key), "{\"kind\":\"%s\"", kind);
	at = strstr(manifest, key);
	at = at ? strstr(at, "\"pause_ns\":") : NULL;
	return at ? fmax(0, strtod(at + strlen("\"pause_ns\":"), NULL)) : 0;
}

/* "SITE COUNT NS" lines of the locks target's report, for @site. */
static double truth_ns(pid_t pid, const char *report, const char *site)
{
	char line[256], name[64];
	unsigned long long c, ns;
	double found = -1;
	FILE *f = th_report_open(pid, report);

	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%63s %llu %llu", name, &c, &ns) == 3 && !strcmp(name, site))
			found = (double)ns;
	fclose(f);
	cr_assert_geq(found, 0, "no truth for %s", site);
	return found;
}

Test(record, every_kind_in_one_directory)
{
	static const char *const sites[] = { "site_a", "site_b" };
	const char *report = th_tmp_path("locks-record.report");
	const char *dir = th_tmp_path("record-all");
	char *manifest, *summary, *dump;
	struct th_func_sum *sums;
	double pause;
	struct cprof_wire_header *h;
	struct profile *p;
	struct th_run r;
	size_t nsums;
	pid_t pid;

	skip_without_ptrace();
	th_require_perf(false);
	pid = TH_SPAWN("locks", "ab", "30", "500", report);
	TH_CPROF(&r, 120000, "record", "-p", th_pid_str(pid), "-d", "3s", "-o", dir);
	th_run_log(&r, "record");
	cr_assert_eq(r.exit_code, 0, "record: exit %d\n%s", r.exit_code, r.err);
	th_run_release(&r);
	for (size_t i = 0; i < sizeof(pprof_files) / sizeof(pprof_files[0]); i++) {
		char kind[64];

		p = load(dir, pprof_files[i]);
		profile_free(p);
		manifest = slurp(dir, "manifest.json");
		snprintf(kind, sizeof(kind), "\"file\":\"%s\"", pprof_files[i]);
		cr_expect(strstr(manifest, kind), "the manifest does not name %s", pprof_files[i]);
		free(manifest);
	}
	manifest = slurp(dir, "manifest.json");
	cr_expect(strstr(manifest, "\"refused\":[]"), "%s", manifest);
	pause = manifest_pause_ns(manifest, "threads");
	free(manifest);
	summary = slurp(dir, "summary.txt");
	cr_expect(strstr(summary, "written: cpu wall threads heap block mutex threadcreate "
				  "threads-end"), "%s", summary);
	/* The heap's table in use and allocated: a target that churns holds
	 * little at the end. */
	cr_expect(strstr(summary, "Type: inuse_space") && strstr(summary, "Type: alloc_space"),
		  "the summary lacks a heap index: %s", summary);
	free(summary);
	dump = slurp(dir, "threads-start.txt");
	cr_expect(strstr(dump, "waiter") || strstr(dump, "wait_"), "%s", dump);
	free(dump);

	/*
	 * block: every wait of 0.5 ms and more recorded at the default rate.
	 * The threads' first snapshot falls inside the agent's window: a
	 * waiter it stopped between its clock and the lock call has the stop
	 * in its truth, not in a wait, so the truth may exceed by the pause.
	 */
	p = load(dir, "block.pb.gz");
	th_func_sums(p, 1, &sums, &nsums);
	for (size_t i = 0; i < 2; i++) {
		double got = (double)th_func_get(sums, nsums, sites[i]).flat;
		double truth = truth_ns(pid, report, sites[i]);
		double err = got > truth ? got / truth - 1 : (truth - pause - got) / truth;

		cr_log_info("measured: record's block: %s %.1f ms, truth %.1f ms (%+.1f%%), "
			    "the snapshot's pause %.1f ms", sites[i], got / 1e6, truth / 1e6,
			    100 * (got / truth - 1), pause / 1e6);
		(void)err;
#ifndef __SANITIZE_ADDRESS__ /* accuracy: the plain build's */
		cr_expect_leq(err, RECORD_BLOCK_MAX_ERR, "%s: %.1f ms, truth %.1f ms, pause %.1f ms",
			      sites[i], got / 1e6, truth / 1e6, pause / 1e6);
#endif
	}
	free(sums);
	profile_free(p);
	th_assert_let_go(pid, false, "after record");
	h = th_agent_header(pid);
	cr_assert_not_null(h, "no agent channel after record");
	cr_expect_eq(h->hooked, 0, "%llu GOT entries still hooked", (unsigned long long)h->hooked);
	munmap(h, CPROF_WIRE_HEADER_SIZE);
	th_kill(pid);
}

Test(record, the_agents_kinds_refused_on_a_static_binary)
{
	const char *dir = th_tmp_path("record-static");
	char *manifest;
	struct profile *p;
	struct th_run r;
	pid_t pid;

	skip_without_ptrace();
	th_require_perf(false);
	pid = TH_SPAWN("statictarget", "30");
	TH_CPROF(&r, 60000, "record", "-p", th_pid_str(pid), "-d", "1s", "-o", dir);
	th_run_log(&r, "record");
	cr_assert_eq(r.exit_code, 5, "static: exit %d\n%s", r.exit_code, r.err);
	/* The agent's four kinds for one reason: said once, with its hint. */
	cr_expect(strstr(r.err, "heap, block, mutex, threadcreate: not recorded"), "%s", r.err);
	cr_expect(strstr(r.err, "statically linked") &&
			  !strstr(strstr(r.err, "statically linked") + 1, "statically linked"),
		  "the reason is not said once: %s", r.err);
	cr_expect(strstr(r.err, "\ncprof: hint: "), "no hint: %s", r.err);
	th_run_release(&r);
	manifest = slurp(dir, "manifest.json");
	cr_expect(strstr(manifest, "{\"kind\":\"heap\",\"why\":"), "%s", manifest);
	cr_expect(strstr(manifest, "\"hint\":\"") && !strstr(manifest, "\\nhint: "),
		  "the hint is not a field of its own: %s", manifest);
	cr_expect(strstr(manifest, "\"file\":\"cpu.pb.gz\""), "%s", manifest);
	free(manifest);
	p = load(dir, "threads-start.pb.gz");
	cr_expect_gt(p->nsamples, 0);
	profile_free(p);
	th_assert_let_go(pid, false, "after record on a static binary");
	th_kill(pid);
}

/* The process exits mid-window: what was collected is written, exit 0 as
 * every command's, and no snapshot of a process that is gone. It ends 1 s
 * into the window, not at a time of its own: on a loaded host, starting
 * the kinds can take longer than a short-lived target lives. */
Test(record, the_target_exits_mid_window)
{
	const char *dir = th_tmp_path("record-exits");
	char *summary, path[4200];
	struct th_run r;
	pid_t pid;

	skip_without_ptrace();
	th_require_perf(false);
	pid = TH_SPAWN("demo", "60", "1", "200");
	th_run_signal_after(" for 10s", pid);
	th_run_cprof_ex(&r, 60000, SIGTERM, 1000,
			(const char *const[]){ "record", "-p", th_pid_str(pid), "-d", "10s", "-o",
					       dir, NULL });
	th_run_log(&r, "record");
	cr_expect_eq(r.exit_code, 0, "exit %d\n%s", r.exit_code, r.err);
	cr_expect(strstr(r.err, "exited during the profile"), "%s", r.err);
	cr_expect(!strstr(r.err, "not recorded"), "%s", r.err);
	th_run_release(&r);
	summary = slurp(dir, "summary.txt");
	cr_expect(strstr(summary, "the process exited during it"), "%s", summary);
	free(summary);
	profile_free(load(dir, "cpu.pb.gz"));
	snprintf(path, sizeof(path), "%s/threads-end.pb.gz", dir);
	cr_expect_neq(access(path, F_OK), 0, "a snapshot of a process that is gone");
	th_kill(pid);
}

Test(record, an_existing_directory_is_refused_before_the_target_is_touched)
{
	const char *dir = th_tmp_path("record-exists");
	struct th_run r;
	pid_t pid;

	skip_without_ptrace();
	pid = TH_SPAWN("regcheck", "sleep", "30");
	cr_assert_eq(mkdir(dir, 0755), 0);
	TH_CPROF(&r, 60000, "record", "-p", th_pid_str(pid), "-d", "1s", "-o", dir);
	cr_expect_eq(r.exit_code, 4, "exit %d\n%s", r.exit_code, r.err);
	cr_expect(strstr(r.err, "exists"), "%s", r.err);
	th_run_release(&r);
	cr_expect_null(th_agent_header(pid), "the agent was loaded before the output was decided");
	th_kill(pid);
}

Test(record, sigint_ends_the_window_and_writes_everything)
{
	const char *dir = th_tmp_path("record-sigint");
	char *manifest;
	struct th_run r;
	pid_t pid;

	skip_without_ptrace();
	th_require_perf(false);
	pid = paced_demo("60");
	/* Within the window: its kinds' start can outlast a fixed delay on a
	 * loaded host, and a SIGINT then is another outcome (exit 5). */
	th_run_signal_after(") for ", 0);
	th_run_cprof_ex(&r, 60000, SIGINT, 1000,
			(const char *const[]){ "record", "-p", th_pid_str(pid), "-d", "30s", "-o",
					       dir, "-k", "cpu,wall,threads", NULL });
	th_run_log(&r, "record");
	cr_assert_eq(r.exit_code, 0, "exit %d\n%s", r.exit_code, r.err);
	cr_expect_lt(r.end_ns - r.start_ns, 20000000000ULL, "the window went on after SIGINT");
	th_run_release(&r);
	manifest = slurp(dir, "manifest.json");
	cr_expect(strstr(manifest, "\"interrupted\":true"), "%s", manifest);
	cr_expect(strstr(manifest, "\"file\":\"wall.pb.gz\""), "%s", manifest);
	cr_expect(!strstr(manifest, "heap"), "heap was not asked for:\n%s", manifest);
	free(manifest);
	th_kill(pid);
}

Test(record, unknown_kind_and_stdout_are_usage_errors)
{
	struct th_run r;

	TH_CPROF(&r, 10000, "record", "-p", "1", "-k", "cpu,disk");
	cr_expect_eq(r.exit_code, 64, "exit %d", r.exit_code);
	cr_expect(strstr(r.err, "unknown kind 'disk'"), "%s", r.err);
	th_run_release(&r);
	TH_CPROF(&r, 10000, "record", "-p", "1", "-o", "-");
	cr_expect_eq(r.exit_code, 64, "exit %d", r.exit_code);
	cr_expect(strstr(r.err, "-o - is not one"), "%s", r.err);
	th_run_release(&r);
}

/* The windows a loop left in @dir, in order (their names sort by time);
 * none half-made. Each one's loop_window into @ret. */
static size_t loop_windows(const char *dir, unsigned *ret, size_t max, char *last, size_t size)
{
	struct dirent **names;
	size_t n = 0;
	int k = scandir(dir, &names, NULL, alphasort);

	cr_assert_geq(k, 0, "no %s", dir);
	for (int i = 0; i < k; i++) {
		char sub[512], *manifest, *at;

		if (names[i]->d_name[0] == '.') {
			free(names[i]);
			continue;
		}
		cr_expect(!strstr(names[i]->d_name, ".tmp-"), "a window left half-made: %s",
			  names[i]->d_name);
		snprintf(sub, sizeof(sub), "%s/%s", dir, names[i]->d_name);
		manifest = slurp(sub, "manifest.json");
		at = strstr(manifest, "\"loop_window\":");
		cr_assert_not_null(at, "%s", manifest);
		if (n < max)
			ret[n] = (unsigned)strtoul(at + strlen("\"loop_window\":"), NULL, 10);
		n++;
		snprintf(last, size, "%s", sub);
		free(manifest);
		free(names[i]);
	}
	free(names);
	return n;
}

Test(record, loop_windows_follow_each_other_and_the_oldest_go)
{
	const char *dir = th_tmp_path("record-loop");
	char last[512], *manifest, keep[16];
	struct cprof_wire_header *h;
	unsigned windows[16];
	struct th_run r;
	struct stat st;
	size_t n;
	pid_t pid;

	skip_without_ptrace();
	th_require_perf(false);
	pid = paced_demo("60");
	/* Room for three windows and the gaps between them (writing one,
	 * opening the next) on a loaded host. */
	snprintf(keep, sizeof(keep), "%d", LOOP_KEEP_LAST);
#ifdef __SANITIZE_ADDRESS__
	/* Sanitized, beside other sanitized suites, a window's start can take
	 * seconds: the loop runs until its third window has begun, which
	 * SIGINT then cuts short. */
	th_run_signal_after_nth(") for ", LOOP_WINDOWS_MIN, 0);
	th_run_cprof_ex(&r, 120000, SIGINT, 300,
			(const char *const[]){ "record", "-p", th_pid_str(pid), "--loop", "1s",
					       "--keep-last", keep, "-d", "100s", "-o", dir, NULL });
#else
	TH_CPROF(&r, 120000, "record", "-p", th_pid_str(pid), "--loop", "1s", "--keep-last", keep,
		 "-d", "10s", "-o", dir);
#endif
	th_run_log(&r, "record --loop");
	cr_assert_eq(r.exit_code, 0, "exit %d\n%s", r.exit_code, r.err);
	th_run_release(&r);
	/* The target's memory, read: for its owner only, as each window. */
	cr_assert_eq(stat(dir, &st), 0, "%s: %s", dir, strerror(errno));
	cr_expect_eq(st.st_mode & 07777, 0700, "%s is mode %o", dir, st.st_mode & 07777);
	n = loop_windows(dir, windows, 16, last, sizeof(last));
	cr_assert_eq(n, LOOP_KEEP_LAST, "%zu windows kept with --keep-last %d", n, LOOP_KEEP_LAST);
	cr_expect_eq(windows[1], windows[0] + 1, "windows %u and %u kept", windows[0], windows[1]);
	/* The oldest went. In the plain build, how many fit in 10 s is also
	 * cprof's speed at writing a window. */
	cr_expect_geq(windows[1], LOOP_WINDOWS_MIN, "only %u windows of 1 s", windows[1]);
	cr_log_info("measured: --loop 1s: %u windows", windows[1]);
	manifest = slurp(last, "manifest.json");
	cr_expect(strstr(manifest, "\"refused\":[]"), "%s", manifest);
	free(manifest);
	th_assert_let_go(pid, false, "after record --loop");
	h = th_agent_header(pid);
	cr_assert_not_null(h, "no agent channel after record --loop");
	cr_expect_eq(h->hooked, 0, "%llu GOT entries still hooked", (unsigned long long)h->hooked);
	munmap(h, CPROF_WIRE_HEADER_SIZE);
	th_kill(pid);
}

Test(record, loop_ends_at_sigterm_and_at_the_targets_exit)
{
	const char *dir = th_tmp_path("record-loop-term");
	const char *dir2 = th_tmp_path("record-loop-exit");
	char last[512];
	unsigned windows[16];
	struct th_run r;
	pid_t pid;

	skip_without_ptrace();
	th_require_perf(false);
	pid = paced_demo("60");
	th_run_cprof_ex(&r, 60000, SIGTERM, 3000,
			(const char *const[]){ "record", "-p", th_pid_str(pid), "--loop", "1s",
					       "-o", dir, "-k", "cpu,wall,threads,heap", NULL });
	th_run_log(&r, "record --loop, SIGTERM");
	/* A SIGTERM while a window's kinds are being started (the agent's
	 * load first, then the samplers) leaves that window without those not
	 * yet started: partial, said. */
	cr_assert(r.exit_code == 0 ||
			  (r.exit_code == 5 && (strstr(r.err, "interrupted before the agent") ||
						strstr(r.err, "interrupted before it started"))),
		  "exit %d\n%s", r.exit_code, r.err);
	/* Within a window it is cut short and written; between two, none
	 * more is begun. */
	cr_expect_lt(r.end_ns - r.start_ns, 20000000000ULL, "the loop went on after SIGTERM");
	th_run_release(&r);
	cr_expect_geq(loop_windows(dir, windows, 16, last, sizeof(last)), 1);
	th_assert_let_go(pid, false, "after record --loop and SIGTERM");
	th_kill(pid);

	/* No -d: the loop ends with the process (during a window or between
	 * two). */
	pid = paced_demo("3");
	TH_CPROF(&r, 60000, "record", "-p", th_pid_str(pid), "--loop", "1s", "-o", dir2, "-k",
		 "cpu,wall");
	th_run_log(&r, "record --loop, the target exits");
	cr_assert_eq(r.exit_code, 0, "exit %d\n%s", r.exit_code, r.err);
	cr_expect(strstr(r.err, "is gone"), "%s", r.err);
	/* It lived 3 s: the loop did not wait for it to come back. */
	cr_expect_lt(r.end_ns - r.start_ns, 20000000000ULL, "the loop went on after the exit");
	th_run_release(&r);
	cr_expect_geq(loop_windows(dir2, windows, 16, last, sizeof(last)), 1);
}

Test(record, loop_options_are_checked)
{
	struct th_run r;

	TH_CPROF(&r, 10000, "record", "-p", "1", "--keep-last", "3");
	cr_expect_eq(r.exit_code, 64, "exit %d", r.exit_code);
	cr_expect(strstr(r.err, "give --loop"), "%s", r.err);
	th_run_release(&r);
	TH_CPROF(&r, 10000, "record", "-p", "1", "--loop", "500ms");
	cr_expect_eq(r.exit_code, 64, "exit %d", r.exit_code);
	cr_expect(strstr(r.err, "at least 1s"), "%s", r.err);
	th_run_release(&r);
	TH_CPROF(&r, 10000, "record", "-p", "1", "--loop", "1s", "--keep-last", "0");
	cr_expect_eq(r.exit_code, 64, "exit %d", r.exit_code);
	th_run_release(&r);
}
