/*
 * cprof heap from jemalloc's own heap profiler (issue 15): jeprofsites
 * (tests/targets/jeprofsites.c), linked with Debian's libjemalloc2 and
 * started with MALLOC_CONF=prof:true,prof_accum:true,lg_prof_sample:12, so
 * that jemalloc samples every allocation site from the start; its truth
 * is what each site allocated and what two of them keep.
 *
 * The parser on a dump the target's jemalloc wrote itself, then cprof heap
 * --source jemalloc (the agent's dump), --source auto, and the refusal
 * when the profiler is off. Sites within 15% (5,000 to 9,000 samples
 * each: 15% is over 10 standard deviations), what the retaining sites keep
 * within 5% (their ~9,000 and ~4,000 samples: 1% and 1.6% standard
 * deviations), and the sites that free at once near 0 in use.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "heap/jemalloc-prof.h"
#include "profiler/profiler.h"
#include "session/jemalloc.h"
#include "symbolize/symbolize.h"
#include "site-truth.h"
#include "testhelp.h"

TestSuite(heap_jemalloc, .init = th_init, .fini = th_cleanup, .timeout = 120);

/*
 * The bounds docs/measured.md quotes (tests/unit/test-docs checks them):
 * each site's objects and bytes within JEPROF_SITE_MAX_ERR of its truth,
 * what a site keeps within JEPROF_KEPT_MAX_ERR.
 */
#define JEPROF_SITE_MAX_ERR 0.15
#define JEPROF_KEPT_MAX_ERR 0.05
#define PROG "jeprofsites-jemalloc"
#define PERIOD 4096
#define MALLOC_CONF_ON "prof:true,prof_accum:true,lg_prof_sample:12"

static const char *const freeing[] = { "small_64", "medium_4k", "large_256k" };
static const char *const retaining[] = { "retain_1k", "retain_16k" };

/*
 * Skips unless jeprofsites is built and its jemalloc has the profiler built
 * in (Debian's has: --enable-prof): the target's own dump must succeed.
 */
static void skip_unless_built(void)
{
	const char *dump = th_tmp_path("jeprofsites-probe.heap");
	char path[4096];
	struct th_run r;
	bool no_prof;
	int code;

	snprintf(path, sizeof(path), "%s/%s", TARGETS_DIR, PROG);
	if (access(path, X_OK) != 0)
		TH_SKIP_MISSING("%s is not built: libjemalloc-dev was not installed when cprof was "
			     "configured (scripts/setup installs it)", PROG);
	cr_assert_eq(setenv("MALLOC_CONF", "prof:true", 1), 0);
	th_run_cmd_ex(&r, 30000, 0, 0,
		      (const char *const[]){ path, "0", th_tmp_path("jeprofsites-probe.report"),
					     dump, NULL });
	unsetenv("MALLOC_CONF");
	unlink(dump);
	code = r.exit_code;
	no_prof = code != 0 && strstr(r.err, "prof.dump");
	th_run_log(&r, "jeprofsites dumping itself");
	th_run_release(&r);
	if (no_prof)
		cr_skip_test("the jemalloc %s is linked with has no heap profiler (built without "
			     "--enable-prof)", PROG);
	cr_assert_eq(code, 0, "%s could not dump its own profile", PROG);
}

/*
 * Starts jeprofsites with @conf as MALLOC_CONF (NULL: none) for @seconds;
 * with @dump, it has its jemalloc dump there itself. Skips when that
 * jemalloc has no profiler (the dump is refused).
 */
static pid_t spawn(const char *conf, const char *report, const char *dump, const char *seconds)
{
	pid_t pid;

	skip_unless_built();
	unlink(report);
	if (conf)
		cr_assert_eq(setenv("MALLOC_CONF", conf, 1), 0);
	pid = dump ? TH_SPAWN(PROG, seconds, report, dump) : TH_SPAWN(PROG, seconds, report);
	unsetenv("MALLOC_CONF");
	return pid;
}

/* The profile against the truth: per site, alloc within 15%; in use within
 * 5% for the retaining sites, under 1% of what the others allocated. */
static void check_profile(const struct profile *p, const char *report)
{
	struct th_func_sum *sums[4];
	struct site_truth truth[16];
	size_t nsums[4], n = read_truth(report, truth, 16);

	cr_assert_eq(th_sample_type(p, "alloc_objects", "count"), 0);
	cr_assert_eq(th_sample_type(p, "alloc_space", "bytes"), 1);
	cr_assert_eq(th_sample_type(p, "inuse_objects", "count"), 2);
	cr_assert_eq(th_sample_type(p, "inuse_space", "bytes"), 3);
	cr_assert_str_eq(p->period_type.type, "space");
	cr_assert_str_eq(p->period_type.unit, "bytes");
	cr_assert_eq(p->period, PERIOD);
	for (int i = 0; i < 4; i++)
		th_func_sums(p, (size_t)i, &sums[i], &nsums[i]);
	for (size_t i = 0; i < n; i++) {
		const struct site_truth *t = &truth[i];
		struct th_func_sum ao, as;

		if (!strncmp(t->name, "live_", 5))
			continue;
		ao = th_func_get(sums[0], nsums[0], t->name);
		as = th_func_get(sums[1], nsums[1], t->name);
		cr_log_info("measured: jeprof %-10s truth %7llu objects %10llu bytes; profile "
			    "%7lld (%+.1f%%) %10lld "
			    "(%+.1f%%)", t->name, (unsigned long long)t->objects,
			    (unsigned long long)t->bytes, (long long)ao.flat,
			    100.0 * ((double)ao.flat / (double)t->objects - 1), (long long)as.flat,
			    100.0 * ((double)as.flat / (double)t->bytes - 1));
		cr_expect_leq(rel_err((double)ao.flat, (double)t->objects), JEPROF_SITE_MAX_ERR,
			      "%s: alloc_objects %lld, truth %llu", t->name, (long long)ao.flat,
			      (unsigned long long)t->objects);
		cr_expect_leq(rel_err((double)as.flat, (double)t->bytes), JEPROF_SITE_MAX_ERR,
			      "%s: alloc_space %lld, truth %llu", t->name, (long long)as.flat,
			      (unsigned long long)t->bytes);
	}
	for (size_t i = 0; i < ARRAY_SIZE(retaining); i++) {
		char live[64];
		const struct site_truth *t;
		struct th_func_sum io = th_func_get(sums[2], nsums[2], retaining[i]);
		struct th_func_sum is = th_func_get(sums[3], nsums[3], retaining[i]);

		snprintf(live, sizeof(live), "live_%s", retaining[i]);
		t = truth_of(truth, n, live);
		cr_log_info("measured: jeprof %-10s in use: truth %llu objects %llu bytes; "
			    "profile %lld (%+.1f%%) %lld "
			    "(%+.1f%%)", retaining[i], (unsigned long long)t->objects,
			    (unsigned long long)t->bytes, (long long)io.flat,
			    100.0 * ((double)io.flat / (double)t->objects - 1), (long long)is.flat,
			    100.0 * ((double)is.flat / (double)t->bytes - 1));
		cr_expect_leq(rel_err((double)is.flat, (double)t->bytes), JEPROF_KEPT_MAX_ERR,
			      "%s inuse_space",
			      retaining[i]);
		cr_expect_leq(rel_err((double)io.flat, (double)t->objects), JEPROF_KEPT_MAX_ERR,
			      "%s inuse_objects", retaining[i]);
	}
	for (size_t i = 0; i < ARRAY_SIZE(freeing); i++) {
		const struct site_truth *t = truth_of(truth, n, freeing[i]);
		struct th_func_sum is = th_func_get(sums[3], nsums[3], freeing[i]);

		cr_expect_leq((double)is.flat, 0.01 * (double)t->bytes,
			      "%s frees at once, yet %lld bytes in use", freeing[i],
			      (long long)is.flat);
	}
	/* Every sample says its block size. */
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_label *l = th_label(&p->samples[i], "bytes");

		cr_assert(l && !l->str && l->num > 0, "sample %zu has no numeric bytes label", i);
	}
	for (int i = 0; i < 4; i++)
		free(sums[i]);
}

/* ---- the parser, on what a real jemalloc wrote ---------------------------- */

Test(heap_jemalloc, parser_on_real_dump)
{
	const char *report = th_tmp_path("jeprofsites-parse.report");
	const char *dump = th_tmp_path("jeprofsites.heap");
	struct jeprof_build_opts o = { .default_type = "inuse_space", .pid = 0 };
	uint64_t retained = 0, allocated = 0;
	double cur = 0, accum = 0;
	struct symbolizer *sym;
	struct site_truth truth[16];
	struct profile *p;
	struct jeprof *j;
	uint8_t *text;
	size_t len, n;
	pid_t pid;

	unlink(dump);
	pid = spawn(MALLOC_CONF_ON, report, dump, "20");
	cr_assert_eq(th_read_file(dump, &text, &len), 0, "no dump at %s", dump);
	cr_assert_eq(jeprof_parse((const char *)text, len, &j), 0, "the dump did not parse");
	cr_expect_eq(j->period, PERIOD);
	cr_expect_geq(j->nthreads, 1);
	cr_expect_gt(j->maps_offset, 0, "no MAPPED_LIBRARIES section");
	cr_assert_geq(j->nbuckets, ARRAY_SIZE(freeing) + ARRAY_SIZE(retaining));
	/* Unbiased per backtrace, the sums are the program's totals: what the
	 * sites allocated and keep, and a little more (stdio, the arrays). */
	for (size_t i = 0; i < j->nbuckets; i++) {
		const struct jeprof_counts *c = &j->buckets[i].c;

		cr_assert_gt(j->buckets[i].naddrs, 0);
		cur += (double)c->cur_bytes * jeprof_scale(c->cur_objects, c->cur_bytes, PERIOD);
		accum += (double)c->accum_bytes *
			 jeprof_scale(c->accum_objects, c->accum_bytes, PERIOD);
	}
	n = read_truth(report, truth, 16);
	for (size_t i = 0; i < n; i++)
		if (!strncmp(truth[i].name, "live_", 5))
			retained += truth[i].bytes;
		else
			allocated += truth[i].bytes;
	cr_log_info("dump: %zu backtraces, in use %.0f (retained %llu), allocated %.0f (sites "
		    "%llu)", j->nbuckets, cur, (unsigned long long)retained, accum,
		    (unsigned long long)allocated);
	cr_expect_leq(rel_err(cur, (double)retained), 0.05);
	cr_expect_leq(rel_err(accum, (double)allocated), 0.05);

	/* The profile from it, symbolized by the live target's modules. */
	cr_assert_eq(symbolizer_new(&sym, pid), 0);
	o.sym = sym;
	cr_assert_eq(jeprof_build(j, &o, &p), 0);
	check_profile(p, report);
	cr_expect(th_has_comment(p, "jemalloc's own heap profiler"));
	cr_expect_str_eq(p->default_sample_type, "inuse_space");
	profile_free(p);
	symbolizer_unref(sym);
	jeprof_free(j);
	free(text);
	th_kill(pid);
}

/* ---- cprof heap --source -------------------------------------------------- */

static void skip_unless_root(void)
{
	if (geteuid() != 0)
		TH_SKIP_MISSING("cprof heap needs ptrace of the target: run as root");
}

/* No dump of @pid's is left where it writes (its /tmp is ours). Another
 * cprof's dumps, of other processes, may come and go there meanwhile. */
static void assert_no_dump_left(pid_t pid)
{
	struct dirent *d;
	DIR *dir = opendir("/tmp");
	char prefix[64];

	cr_assert_not_null(dir);
	snprintf(prefix, sizeof(prefix), "cprof-jemalloc-%d-", (int)pid);
	while ((d = readdir(dir)))
		cr_expect(strncmp(d->d_name, prefix, strlen(prefix)) != 0,
			  "/tmp/%s was left behind", d->d_name);
	closedir(dir);
}

/* cprof heap @args... on jeprofsites with the profiler on: the profile
 * against the truth, jemalloc named as the source, nothing left behind. */
static void run_source(const char *what, const char *say, const char *const *args)
{
	const char *report = th_tmp_path("jeprofsites-cli.report");
	const char *out = th_tmp_path("heap-jemalloc.pb.gz");
	const char *argv[16] = { "heap", "-p", NULL, "-o", out, "--index", "alloc_space" };
	char fd[256];
	struct profile *p;
	struct th_run r;
	size_t n = 7;
	pid_t pid;

	skip_unless_root();
	pid = spawn(MALLOC_CONF_ON, report, NULL, "30");
	argv[2] = th_pid_str(pid);
	for (size_t i = 0; args[i] && n + 1 < ARRAY_SIZE(argv); i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	th_run_cprof_ex(&r, 60000, 0, 0, argv);
	th_run_log(&r, what);
	cr_assert_eq(r.exit_code, 0, "%s: exit %d", what, r.exit_code);
	cr_expect(strstr(r.err, "jemalloc's own heap profile"), "%s: the source is not said", what);
	cr_expect(strstr(r.err, say), "%s: stderr does not say '%s'", what, say);
	p = th_load_profile(out);
	check_profile(p, report);
	cr_expect(th_has_comment(p, "source: jemalloc's own heap profiler"), "%s: no comment", what);
	cr_expect_str_eq(p->default_sample_type, "alloc_space");
	th_assert_pprof_ok(out);
	/* Nothing hooked: no session's memfd, no thread stopped or traced. */
	th_agent_fd_path(pid, fd, sizeof(fd));
	cr_expect_str_eq(fd, "", "%s: the agent started a session", what);
	th_assert_let_go(pid, false, what);
	assert_no_dump_left(pid);
	cr_expect(th_alive(pid), "%s: the target died", what);
	profile_free(p);
	th_run_release(&r);
	th_kill(pid);
}

Test(heap_jemalloc, source_jemalloc)
{
	run_source("--source jemalloc", "(--source jemalloc)",
		   (const char *const[]){ "--source", "jemalloc", NULL });
}

Test(heap_jemalloc, source_auto_picks_jemalloc)
{
	run_source("--source auto", "its MALLOC_CONF turns the profiler on",
		   (const char *const[]){ NULL });
}

/* Profiler off: --source jemalloc says how to turn it on, exits 2, writes
 * nothing; --source auto samples with the hooks. */
Test(heap_jemalloc, profiler_off)
{
	const char *report = th_tmp_path("jeprofsites-off.report");
	const char *out = th_tmp_path("heap-jemalloc-off.pb.gz");
	struct th_run r;
	pid_t pid;

	skip_unless_root();
	unlink(out);
	pid = spawn(NULL, report, NULL, "30");
	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(pid), "--source", "jemalloc", "-o", out);
	th_run_log(&r, "profiler off");
	cr_expect_eq(r.exit_code, 2, "exit %d, not 2", r.exit_code);
	cr_expect(strstr(r.err, "jemalloc's heap profiler is off"), "the cause is not said");
	cr_expect(strstr(r.err, "MALLOC_CONF=prof:true"), "how to turn it on is not said");
	cr_expect(access(out, F_OK) != 0, "a profile was written");
	th_assert_let_go(pid, false, "profiler off");
	assert_no_dump_left(pid);
	th_run_release(&r);

	/* A short window on the hooks: -d is theirs (cprof-heap(1)). */
	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(pid), "-d", "500ms", "-o", out);
	th_run_log(&r, "auto, profiler off");
	cr_expect_eq(r.exit_code, 0);
	cr_expect(!strstr(r.err, "jemalloc's own"), "auto chose jemalloc's profiler, which is off");
	cr_expect(access(out, F_OK) == 0, "no profile from the hooks");
	th_run_release(&r);
	th_kill(pid);
}

/* A target on glibc's malloc: no jemalloc to read. */
Test(heap_jemalloc, not_jemalloc)
{
	const char *out = th_tmp_path("heap-jemalloc-none.pb.gz");
	struct th_run r;
	pid_t pid;

	skip_unless_root();
	unlink(out);
	pid = TH_SPAWN("busy", "1", "20");
	TH_CPROF(&r, 30000, "heap", "-p", th_pid_str(pid), "--source", "jemalloc", "-o", out);
	th_run_log(&r, "glibc target");
	cr_expect_eq(r.exit_code, 2, "exit %d, not 2", r.exit_code);
	cr_expect(strstr(r.err, "does not use jemalloc"), "the cause is not said");
	cr_expect(access(out, F_OK) != 0, "a profile was written");
	th_run_release(&r);
	th_kill(pid);
}

Test(heap_jemalloc, source_usage)
{
	struct th_run r;

	TH_CPROF(&r, 10000, "heap", "-p", "1", "--source", "jemalloc", "-d", "1s");
	cr_expect_eq(r.exit_code, 64, "-d with --source jemalloc: exit %d", r.exit_code);
	th_run_release(&r);
	TH_CPROF(&r, 10000, "heap", "-p", "1", "--source", "tcmalloc");
	cr_expect_eq(r.exit_code, 64, "--source tcmalloc: exit %d", r.exit_code);
	th_run_release(&r);
}

/*
 * The target first: heapsites-jemalloc allocating 4,000 rounds a second
 * (its thread inside jemalloc a good part of the time, and its profiler,
 * at a 64 KiB period, sampling and taking its locks all the while). Ten
 * dumps in a row each find a moment when the thread is outside jemalloc (a
 * thread stopped inside it could hold a lock prof.dump needs), the program
 * goes on allocating between them, and nothing is left behind. (Without a
 * pause, the loop is inside jemalloc nearly always: cprof then finds no
 * safe moment within 5 s and says so, exit 2, the target untouched.)
 */
Test(heap_jemalloc, busy_target_repeated)
{
	const char *out = th_tmp_path("heap-jemalloc-busy.pb.gz");
	const char *report = th_tmp_path("heapsites-busy.report");
	char path[4096], fd[256];
	uint64_t before = 0, after = 0;
	pid_t pid;

	skip_unless_root();
	skip_unless_built();
	snprintf(path, sizeof(path), "%s/heapsites-jemalloc", TARGETS_DIR);
	if (access(path, X_OK) != 0)
		TH_SKIP_MISSING("heapsites-jemalloc is not built (libjemalloc-dev: scripts/setup)");
	cr_assert_eq(setenv("MALLOC_CONF", "prof:true,prof_accum:true,lg_prof_sample:16", 1), 0);
	pid = TH_SPAWN("heapsites-jemalloc", "40", report, "256", "4000");
	unsetenv("MALLOC_CONF");
	for (int i = 0; i < 10; i++) {
		struct profile *p;
		struct th_run r;
		int alloc;

		TH_CPROF(&r, 30000, "heap", "-p", th_pid_str(pid), "--source", "jemalloc", "-q",
			 "-o", out);
		th_run_log(&r, "dump of a busy target");
		cr_assert_eq(r.exit_code, 0, "dump %d: exit %d", i, r.exit_code);
		th_run_release(&r);
		p = th_load_profile(out);
		alloc = th_sample_type(p, "alloc_space", "bytes");
		cr_assert_geq(alloc, 0);
		after = (uint64_t)profile_total(p, (size_t)alloc);
		cr_expect_gt(after, before, "dump %d: the target allocated nothing since the last",
			     i);
		before = after;
		profile_free(p);
		cr_assert(th_alive(pid), "the target died");
	}
	cr_log_info("the target allocated %llu bytes (jemalloc's estimate) by the tenth dump",
		    (unsigned long long)after);
	th_agent_fd_path(pid, fd, sizeof(fd));
	cr_expect_str_eq(fd, "", "the agent started a session");
	th_assert_let_go(pid, false, "ten dumps");
	assert_no_dump_left(pid);
	th_kill(pid);
}

/*
 * lib/session/jemalloc.c on its own, as the profiler kind record will run:
 * the dump holds the same truths as through the command, its file is
 * gone, the target let go; with the profiler off, -ENODATA at the dump
 * step, and nothing left either.
 */
Test(heap_jemalloc, profiler_kind_in_lib)
{
	const char *report = th_tmp_path("jeprofsites-lib.report");
	struct agent_session_opts so = {
		.agent_path = CPROF_AGENT_PATH,
		.pick_timeout_ms = AGENT_SESSION_PICK_TIMEOUT_MS,
		.call_timeout_ms = AGENT_SESSION_CALL_TIMEOUT_MS,
	};
	const struct jemalloc_dump *d;
	struct profile *prof = NULL;
	struct profiler *p;
	char err[256];
	pid_t pid;
	int r;

	skip_unless_root();
	pid = spawn(MALLOC_CONF_ON, report, NULL, "30");
	cr_assert_eq(profiler_new_jemalloc(&p, pid, &so, "alloc_space", "test"), 0);
	r = profiler_start(p, err, sizeof(err));
	cr_assert_eq(r, 0, "%s", err);
	cr_assert_eq(profiler_poll(p, 0), 1, "a dump is over once taken");
	cr_assert_eq(profiler_stop(p), 0);
	cr_assert_eq(profiler_finish(p, &prof), 0);
	cr_assert_str_eq(profiler_kind(p), "heap");
	cr_assert_gt(profiler_count(p), 0);
	check_profile(prof, report);
	d = profiler_jemalloc_dump(p);
	cr_assert(d->path[0] == '/', "the dump's path: '%s'", d->path);
	assert_no_dump_left(pid);
	profile_free(prof);
	profiler_free(p);
	th_assert_let_go(pid, false, "jemalloc's dump from lib");
	th_kill(pid);

	pid = spawn(NULL, report, NULL, "30");
	cr_assert_eq(profiler_new_jemalloc(&p, pid, &so, NULL, "test"), 0);
	r = profiler_start(p, err, sizeof(err));
	d = profiler_jemalloc_dump(p);
	cr_assert_eq(r, -ENODATA, "profiler off: %d (%s)", r, err);
	cr_assert_eq(d->failed, JEMALLOC_DUMP);
	assert_no_dump_left(pid);
	profiler_free(p);
	th_assert_let_go(pid, false, "jemalloc's profiler off, from lib");
	th_kill(pid);
}
