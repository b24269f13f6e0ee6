/*
 * Differential conformance: a caller must not be able to tell a hooked
 * function from the real one. tests/targets/conform calls every function
 * the agent hooks in every documented outcome and prints what it observed
 * (return values, errno, who holds a lock after the call, which cleanup
 * handlers ran, blocks' contents, sizes and alignment); its output is the
 * same in every run, so the output under each agent session must equal the
 * plain one, line by line:
 *   - heap, block and mutex, each with every call sampled (--heap-rate 1, --block-rate 1ns,
 *     1) and at the default rate; threadcreate (no rate);
 *   - sigstorm: signal handlers that call hooked functions (lock, contended
 *     timedlock, free) while the thread they interrupt is inside a hook
 *     must not deadlock on the agent's locks: plain and under heap, block
 *     and mutex at rate 1, "sigstorm ok" within 15 s.
 *   - the same under other allocators (issue 15): conform-jemalloc,
 *     -tcmalloc and -mimalloc, linked against each, add their own API
 *     (jemalloc's *allocx, mimalloc's mi_*) and every operator new/delete;
 *     heap at rate 1 and at the default rate.
 * A session's test names it; a difference is logged as both lines.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testhelp.h"

TestSuite(conform, .init = th_init, .fini = th_cleanup, .timeout = 120);

/*
 * conform waits up to 20 s for the hooks, and its checks take about a
 * second, plus 4 s when a broken hook deadlocks some of the robust groups
 * (run together) and 4 s for each other group it deadlocks (at most 3).
 * Its storm lasts 1.5 s, 20 s at most where its threads barely run (a
 * deadlock is a storm that never ends: its threads asleep, logged).
 */
#define CHECKS_TIMEOUT_MS 45000
#define STORM_TIMEOUT_MS 45000
#define CPROF_EXIT_TIMEOUT_MS 30000
#define MAX_LOGGED_DIFFS 60

static void skip_without_ptrace(void)
{
	if (geteuid() != 0)
		TH_SKIP_MISSING("the agent needs ptrace of the target: run as root");
}

/* ---- comparing outputs ------------------------------------------------- */

struct lines {
	char **v;
	size_t n;
};

/* Splits @text into lines (in place: @text is modified). */
static void split_lines(char *text, struct lines *ret)
{
	size_t alloc = 64;

	ret->n = 0;
	ret->v = malloc(alloc * sizeof(*ret->v));
	cr_assert(ret->v);
	for (char *p = text; *p;) {
		char *nl = strchr(p, '\n');

		if (ret->n == alloc) {
			alloc *= 2;
			ret->v = realloc(ret->v, alloc * sizeof(*ret->v));
			cr_assert(ret->v);
		}
		ret->v[ret->n++] = p;
		if (!nl)
			break;
		*nl = '\0';
		p = nl + 1;
	}
}

/*
 * Compares @plain with @hooked line by line (a longest-common-subsequence
 * diff, so that one missing or extra line is one difference) and logs each
 * line that is only on one side, naming @session. Returns the number of
 * such lines.
 */
static size_t diff_outputs(const char *plain, const char *hooked, const char *session)
{
	char *a_text = strdup(plain), *b_text = strdup(hooked);
	struct lines a, b;
	size_t *lcs, diffs = 0, i = 0, j = 0;

	cr_assert(a_text && b_text);
	split_lines(a_text, &a);
	split_lines(b_text, &b);
	/* lcs[i][j]: common lines of a[i..] and b[j..]. */
	lcs = calloc((a.n + 1) * (b.n + 1), sizeof(*lcs));
	cr_assert(lcs);
#define LCS(x, y) lcs[(x) * (b.n + 1) + (y)]
	for (size_t x = a.n; x-- > 0;)
		for (size_t y = b.n; y-- > 0;)
			LCS(x, y) = strcmp(a.v[x], b.v[y]) == 0
					    ? LCS(x + 1, y + 1) + 1
					    : (LCS(x + 1, y) > LCS(x, y + 1) ? LCS(x + 1, y) : LCS(x, y + 1));
	while (i < a.n || j < b.n) {
		if (i < a.n && j < b.n && strcmp(a.v[i], b.v[j]) == 0) {
			i++;
			j++;
		} else if (i < a.n && (j == b.n || LCS(i + 1, j) >= LCS(i, j + 1))) {
			if (diffs++ < MAX_LOGGED_DIFFS)
				cr_log_error("%s: line %zu, plain:  %s", session, i + 1, a.v[i]);
			i++;
		} else {
			if (diffs++ < MAX_LOGGED_DIFFS)
				cr_log_error("%s: line %zu, hooked: %s", session, j + 1, b.v[j]);
			j++;
		}
	}
#undef LCS
	if (diffs > MAX_LOGGED_DIFFS)
		cr_log_error("%s: %zu more lines differ", session, diffs - MAX_LOGGED_DIFFS);
	free(lcs);
	free(a.v);
	free(b.v);
	free(a_text);
	free(b_text);
	return diffs;
}

/* ---- running conform ----------------------------------------------------- */

/* The program the test runs: conform, or one of its allocator builds. */
static const char *conform_prog = "conform";

/* The output of `conform ARGS...` run alone, up to and with "done". */
static char *plain_output(const char *mode, const char *kind)
{
	pid_t pid = kind ? TH_SPAWN(conform_prog, mode, kind) : TH_SPAWN(conform_prog, mode);
	char *out;
	int r = th_read_until(pid, "done", CHECKS_TIMEOUT_MS, &out);

	cr_assert_eq(r, 0, "conform %s%s%s (plain) did not end with done (%s); it printed:\n%s", mode,
		     kind ? " " : "", kind ? kind : "", strerror(-r), out);
	th_kill(pid);
	return out;
}

/* Logs cprof's log file (its stdout and stderr). */
static void log_cprof(const char *log_path, const char *session)
{
	uint8_t *buf;
	size_t len;

	if (th_read_file(log_path, &buf, &len) != 0)
		return;
	cr_log_info("%s: cprof said:\n%.*s", session, (int)len, (const char *)buf);
	free(buf);
}

/* Why the target's output ended before "done", when it exited. */
static void log_target_exit(pid_t pid, const char *session)
{
	int status = th_wait_exit(pid, 2000);

	if (status == -1)
		cr_log_error("%s: conform closed its output but did not exit", session);
	else if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
		cr_log_error("%s: conform exit 3: the hooks went away during the checks", session);
	else if (WIFEXITED(status) && WEXITSTATUS(status) == 4)
		cr_log_error("%s: conform exit 4: never hooked within 20 s", session);
	else if (WIFEXITED(status))
		cr_log_error("%s: conform exit %d", session, WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		cr_log_error("%s: conform killed by signal %d", session, WTERMSIG(status));
}

/*
 * Runs `conform [sigstorm] KIND` under `cprof KIND -p PID -d 20s [RATE_OPTION
 * RATE] -o OUT` until it printed "done" (within @timeout_ms), stops cprof
 * with SIGINT, and checks that cprof exited 0 and let the target go.
 * Returns the target's output, up to "done" if it got there (*@ret_done);
 * when it did not, the reason is logged.
 */
static char *session_output(const char *kind, const char *rate, bool storm, int timeout_ms,
			    const char *session, bool *ret_done)
{
	const char *log_path = th_tmp_path("conform-cprof.log");
	const char *profile = th_tmp_path("conform.pb.gz");
	const char *argv[16];
	size_t argc = 0;
	pid_t pid, cprof;
	char *out;
	int r, status;

	pid = storm ? TH_SPAWN(conform_prog, "sigstorm", kind) : TH_SPAWN(conform_prog, kind);
	argv[argc++] = CPROF_BIN;
	argv[argc++] = kind;
	argv[argc++] = "-p";
	argv[argc++] = th_pid_str(pid);
	argv[argc++] = "-d";
	argv[argc++] = "20s";
	if (rate) {
		argv[argc++] = th_rate_option(kind);
		argv[argc++] = rate;
	}
	argv[argc++] = "-o";
	argv[argc++] = profile;
	argv[argc] = NULL;
	cprof = th_spawn_daemon(argv, log_path);

	r = th_read_until(pid, "done", timeout_ms, &out);
	if (r == -ETIMEDOUT) {
		/* A deadlock has threads asleep on a futex; a slow machine has
		 * them running, and cprof's log says how far it got. */
		cr_log_error("%s: conform did not end within %.0f s: a deadlock in the agent? "
			     "It printed:\n%s",
			     session, timeout_ms / 1e3, out);
		th_log_where(pid, "conform: pid");
		log_cprof(log_path, session);
	}
	else if (r == -EPIPE)
		log_target_exit(pid, session);

	th_signal(cprof, SIGINT);
	status = th_wait_exit(cprof, CPROF_EXIT_TIMEOUT_MS);
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		log_cprof(log_path, session);
		cr_log_error("%s: cprof %s", session,
			     status == -1 ? "did not exit after SIGINT" : "did not exit 0");
	}
	if (th_alive(pid))
		th_assert_let_go(pid, false, session);
	th_kill(pid);
	cr_expect(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "%s: cprof did not exit 0 (wait status %#x)", session, status);
	*ret_done = r == 0;
	return out;
}

/* The output under `cprof KIND [RATE_OPTION RATE]` equals the plain one. */
static void conforms(const char *kind, const char *rate)
{
	char session[96];
	char *plain, *hooked;
	size_t diffs;
	bool done;

	skip_without_ptrace();
	if (rate)
		snprintf(session, sizeof(session), "%s: cprof %s %s %s", conform_prog, kind,
			 th_rate_option(kind), rate);
	else
		snprintf(session, sizeof(session), "%s: cprof %s (its default rate)", conform_prog,
			 kind);
	plain = plain_output("plain", NULL);
	hooked = session_output(kind, rate, false, CHECKS_TIMEOUT_MS, session, &done);
	diffs = diff_outputs(plain, hooked, session);
	cr_assert(done, "%s: conform never printed done", session);
	cr_assert_eq(diffs, 0, "%s: %zu lines differ from the plain run", session, diffs);
	{
		size_t lines = 0;

		for (const char *c = plain; *c; c++)
			lines += *c == '\n';
		cr_log_info("measured: %s: %zu lines identical to the plain run's", session, lines);
	}
	free(plain);
	free(hooked);
}

Test(conform, plain_is_deterministic)
{
	char *a = plain_output("plain", NULL), *b = plain_output("plain", NULL);
	size_t diffs = diff_outputs(a, b, "plain, twice");

	cr_assert_eq(diffs, 0, "conform plain printed different lines in two runs");
	cr_assert(strstr(a, "\ndone\n"), "conform plain did not end with done");
	free(a);
	free(b);
}

Test(conform, heap_every_call)
{
	conforms("heap", "1");
}

Test(conform, heap_default_rate)
{
	conforms("heap", NULL);
}

Test(conform, block_every_wait)
{
	conforms("block", "1ns");
}

Test(conform, block_default_rate)
{
	conforms("block", NULL);
}

Test(conform, mutex_every_contention)
{
	conforms("mutex", "1");
}

Test(conform, mutex_default_rate)
{
	conforms("mutex", NULL);
}

Test(conform, threadcreate)
{
	conforms("threadcreate", NULL);
}

/* ---- other allocators ------------------------------------------------------ */

/* conforms() on @prog, a build of conform against another allocator. */
static void conforms_on(const char *prog, const char *package, const char *kind, const char *rate)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", TARGETS_DIR, prog);
	if (access(path, X_OK) != 0)
		TH_SKIP_MISSING("%s is not built: %s was not installed when cprof was configured "
			     "(scripts/setup installs it)", prog, package);
	conform_prog = prog;
	conforms(kind, rate);
}

Test(conform, jemalloc_heap_every_call)
{
	conforms_on("conform-jemalloc", "libjemalloc-dev", "heap", "1");
}

Test(conform, jemalloc_heap_default_rate)
{
	conforms_on("conform-jemalloc", "libjemalloc-dev", "heap", NULL);
}

Test(conform, tcmalloc_heap_every_call)
{
	conforms_on("conform-tcmalloc", "libgoogle-perftools-dev", "heap", "1");
}

Test(conform, mimalloc_heap_every_call)
{
	conforms_on("conform-mimalloc", "libmimalloc-dev", "heap", "1");
}

/* ---- signal handlers inside a hook --------------------------------------- */

/* `conform sigstorm KIND` under cprof KIND at @rate says "sigstorm ok" in time. */
static void storm(const char *kind, const char *rate)
{
	char session[96];
	char *out;
	bool done;

	skip_without_ptrace();
	snprintf(session, sizeof(session), "sigstorm under cprof %s %s %s", kind,
		 th_rate_option(kind), rate);
	out = session_output(kind, rate, true, STORM_TIMEOUT_MS, session, &done);
	cr_assert(done, "%s: no done within %d s (a deadlock in the agent?)", session,
		  STORM_TIMEOUT_MS / 1000);
	cr_assert_str_eq(out, "sigstorm ok\ndone\n", "%s: conform printed:\n%s", session, out);
	free(out);
}

Test(conform, sigstorm_plain)
{
	char *out = plain_output("sigstorm", "plain");

	cr_assert_str_eq(out, "sigstorm ok\ndone\n", "conform sigstorm plain printed:\n%s", out);
	free(out);
}

Test(conform, sigstorm_heap)
{
	storm("heap", "1");
}

Test(conform, sigstorm_block)
{
	storm("block", "1ns");
}

Test(conform, sigstorm_mutex)
{
	storm("mutex", "1");
}
