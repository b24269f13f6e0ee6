/*
 * Generated code (issue 26) on a real JIT, Debian's node: a hot JavaScript
 * function runs from V8's anonymous executable memory, while node maps
 * part of its own text a second time high in the address space, so that
 * libdw's module for node spans the JIT code. cpu must name a JIT address
 * as one ("[JIT] 0x..."), never by one of node's symbols, and no mapping of
 * the profile may claim it; with node's perf map (--perf-basic-prof), by
 * the map's name; without, a note says how to have one written.
 *
 * Generated code has no CFI: the walk goes on through it by its frame
 * pointers (libdw's x86-64 backend), down to node's main, and the profile
 * says how many stacks went so; cpu's share for fib is perf's.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testhelp.h"

/* The share of the leaves a hot fib() must have, named as JIT code. */
#define JIT_LEAF_MIN 0.5
/* The share of fib's samples whose stack goes on below fib to main. */
#define JIT_REACH_MAIN_MIN 0.9
/* fib's self share in cpu against perf record's over the same window,
 * at most this many points apart. */
#define JIT_FIB_MAX_POINTS 10
/* Snapshots threads takes at most to catch node's main thread in JS. */
#define JIT_SNAPSHOTS 5

TestSuite(jit, .init = th_init, .fini = th_cleanup, .timeout = 120);

static const char fib_js[] =
	"function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n"
	"process.stdout.write('ready\\n');\n"
	"const end = Date.now() + 30000;\n"
	"while (Date.now() < end) fib(25);\n";

/* fib and a part of the time in V8's own code (JSON, allocation). */
static const char mix_js[] =
	"function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n"
	"function churn(n) {\n"
	"  const a = [];\n"
	"  for (let i = 0; i < n; i++) a.push({ k: 'k' + i });\n"
	"  return JSON.stringify(a).length;\n"
	"}\n"
	"process.stdout.write('ready\\n');\n"
	"const end = Date.now() + 30000;\n"
	"while (Date.now() < end) { fib(24); churn(3000); }\n";

/* node running @js hot (@perf_map: --perf-basic-prof), once its
 * functions are compiled. */
static pid_t spawn_node(const char *js, bool perf_map)
{
	const char *script = th_tmp_path("script.js");
	char *node = th_find_in_path("node"), logfile[600];
	pid_t pid;
	FILE *f;

	if (!node)
		TH_SKIP_MISSING("node is not installed: apt-get install nodejs (scripts/setup)");
	th_require_perf(false);
	f = fopen(script, "we");
	cr_assert_not_null(f);
	fputs(js, f);
	fclose(f);
	/* --perf-basic-prof also logs code events: into the test's own files. */
	snprintf(logfile, sizeof(logfile), "--logfile=%s", th_tmp_path("v8.log"));
	pid = th_spawn_cmd(perf_map ? (const char *const[]){ node, "--perf-basic-prof", logfile,
							    "--no-logfile-per-isolate", script,
							    NULL }
				    : (const char *const[]){ node, script, NULL },
			   "node");
	free(node);
	th_sleep_ms(500); /* fib is compiled by then */
	return pid;
}

static struct profile *profile_cpu(pid_t pid, const char *duration, const char *hz)
{
	const char *out = th_tmp_path("node-cpu.pb.gz");
	struct th_run r;

	TH_CPROF(&r, 60000, "cpu", "-p", th_pid_str(pid), "-d", duration, "-F", hz, "-o", out);
	cr_assert_eq(r.exit_code, 0, "cpu: exit %d\n%s", r.exit_code, r.err);
	th_run_release(&r);
	return th_load_profile(out);
}

/* node running fib.js hot (@perf_map: --perf-basic-prof), its cpu profile
 * over 2 s. */
static struct profile *profile_node(bool perf_map, pid_t *ret_pid)
{
	*ret_pid = spawn_node(fib_js, perf_map);
	return profile_cpu(*ret_pid, "2s", "100");
}

static void remove_perf_map(pid_t pid)
{
	char map[64];

	snprintf(map, sizeof(map), "/tmp/perf-%d.map", (int)pid);
	unlink(map);
}

static bool is_fib(const char *name)
{
	return strstr(name, "fib") && strstr(name, ".js");
}

/* Does the stack of @s go down to node's main (or to libc's caller of it,
 * main being inlined or tail-called)? */
static bool reaches_main(const struct profile *p, const struct profile_sample *s)
{
	for (size_t i = 0; i < s->nlocations; i++)
		if (th_location_has(p, s->location_ids[i], "main") ||
		    th_location_has(p, s->location_ids[i], "__libc_start_call_main"))
			return true;
	return false;
}

Test(jit, node_code_is_named_as_jit_not_as_node)
{
	double total = 0, jit = 0, named_by_node = 0, reached = 0;
	struct profile *p;
	pid_t pid;

	p = profile_node(false, &pid);
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		const struct profile_location *l = th_location(p, s->location_ids[0]);
		const char *leaf = th_leaf_name(p, s);
		double v = (double)s->values[0];

		total += v;
		if (strncmp(leaf, "[JIT] 0x", 8) != 0)
			continue;
		jit += v;
		if (reaches_main(p, s))
			reached += v;
		cr_expect_eq(l->mapping_id, 0, "%s has a mapping", leaf);
		for (size_t m = 0; m < p->nmappings; m++)
			if (p->mappings[m].start <= l->address && l->address < p->mappings[m].limit &&
			    p->mappings[m].file && strstr(p->mappings[m].file, "node"))
				named_by_node += v;
	}
	cr_log_info("measured: node fib: %.1f%% of the samples' leaves in JIT code, %.1f%% of "
		    "those reach main", 100 * jit / total, jit ? 100 * reached / jit : 0);
	cr_assert_gt(total, 0);
	cr_expect_geq(jit / total, JIT_LEAF_MIN, "only %.1f%% of the leaves named as JIT code",
		      100 * jit / total);
	/* The walk needs no names. */
	cr_expect_geq(reached, JIT_REACH_MAIN_MIN * jit,
		      "only %.1f%% of JIT code's stacks go on to main", jit ? 100 * reached / jit : 0);
	cr_expect_eq(named_by_node, 0, "a mapping of node claims JIT code");
	cr_expect(th_has_comment(p, "--perf-basic-prof"), "no note of the missing perf map");
	profile_free(p);
	th_kill(pid);
}

/* ...and its stacks go on through the JIT frames, by frame pointers. */
Test(jit, node_code_is_named_by_its_perf_map)
{
	double total = 0, fib = 0, reached = 0;
	struct profile *p;
	pid_t pid;

	p = profile_node(true, &pid);
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		double v = (double)s->values[0];

		total += v;
		if (!is_fib(th_leaf_name(p, s)))
			continue;
		fib += v;
		if (reaches_main(p, s))
			reached += v;
	}
	cr_log_info("measured: node --perf-basic-prof fib: %.1f%% of the leaves named by the map, "
		    "%.1f%% of those reach main", 100 * fib / total, fib ? 100 * reached / fib : 0);
	cr_assert_gt(total, 0);
	cr_expect_geq(fib / total, JIT_LEAF_MIN, "only %.1f%% of the leaves are fib",
		      100 * fib / total);
	cr_expect_geq(reached, JIT_REACH_MAIN_MIN * fib,
		      "only %.1f%% of fib's stacks go on to main", fib ? 100 * reached / fib : 0);
	cr_expect(th_has_comment(p, "went on by frame pointers"), "no note of the walk by rbp");
	cr_expect(!th_has_comment(p, "--perf-basic-prof"), "the perf map was there");
	profile_free(p);
	th_kill(pid);
	remove_perf_map(pid);
}

/*
 * fib's share of the samples of `perf script` on @data by each sample's
 * user-space leaf, or -1 (none); @ret_samples: how many it has. Kernel
 * frames above the leaf are skipped: cpu without --kernel charges a sample
 * taken in the kernel to the code that entered it, and on a busy machine
 * many of perf's cpu-clock samples are taken on the way back to user mode.
 */
static double perf_fib_share(const char *perf, const char *data, long *ret_samples)
{
	bool in_sample = false, named = false;
	long samples = 0, fib = 0;
	struct th_run r;
	char *next;

	th_run_cmd_ex(&r, 60000, 0, 0,
		      (const char *const[]){ perf, "script", "-i", data, "-F", "ip,sym,dso", NULL });
	cr_assert_eq(r.exit_code, 0, "perf script: %s", r.err);
	/* Each sample: its frames, leaf first, "\t 7f... JS:*fib /...:1:13
	 * (/tmp/perf-PID.map)", then a blank line. */
	for (char *line = r.out; line && *line; line = next) {
		char *end = strchr(line, '\n');

		next = end ? end + 1 : NULL;
		if (end)
			*end = '\0';
		if (!*line) {
			in_sample = named = false;
			continue;
		}
		if (!in_sample) {
			in_sample = true;
			samples++;
		}
		if (named || strstr(line, "[kernel.kallsyms]"))
			continue;
		named = true;
		fib += is_fib(line);
	}
	th_run_release(&r);
	*ret_samples = samples;
	return samples > 0 ? (double)fib / (double)samples : -1;
}

Test(jit, node_fib_share_is_perf_s)
{
	const char *data = th_tmp_path("perf.data");
	char *perf = th_find_in_path("perf");
	double total = 0, fib = 0, theirs;
	struct profile *p;
	long their_samples;
	pid_t pid, rec;

	if (!perf)
		TH_SKIP_MISSING("perf is not installed: apt-get install linux-perf");
	pid = spawn_node(mix_js, true);
	rec = th_spawn_daemon((const char *const[]){ perf, "record", "-q", "-e", "cpu-clock", "-F",
						     "999", "-g", "-p", th_pid_str(pid), "-o",
						     data, "--", "sleep", "3", NULL },
			      th_tmp_path("perf.log"));
	p = profile_cpu(pid, "3s", "999");
	th_wait_exit(rec, 30000);
	for (size_t i = 0; i < p->nsamples; i++) {
		total += (double)p->samples[i].values[0];
		if (is_fib(th_leaf_name(p, &p->samples[i])))
			fib += (double)p->samples[i].values[0];
	}
	theirs = perf_fib_share(perf, data, &their_samples);
	free(perf);
	cr_assert_gt(total, 0);
	cr_assert_geq(theirs, 0, "perf recorded no samples");
	cr_log_info("measured: node fib's self share: cprof %.1f%% of %.0f samples, perf %.1f%% "
		    "of %ld", 100 * fib / total, total, 100 * theirs, their_samples);
	cr_expect_leq(fabs(fib / total - theirs) * 100, JIT_FIB_MAX_POINTS,
		      "fib: %.1f%% in cprof, %.1f%% in perf", 100 * fib / total, 100 * theirs);
	profile_free(p);
	th_kill(pid);
	remove_perf_map(pid);
}

/* In @text (threads --debug 2), the block of thread @tid: from its line to
 * the next blank line; NULL when it has none. Ends the block in place. */
static char *thread_block(char *text, pid_t tid)
{
	char head[64], *b, *end;

	snprintf(head, sizeof(head), "thread %d ", (int)tid);
	b = strstr(text, head);
	if (!b)
		return NULL;
	end = strstr(b, "\n\n");
	if (end)
		*end = '\0';
	return b;
}

/* A snapshot's main thread in JS: its frames named, down to main. */
Test(jit, node_threads_walk_through_jit_frames)
{
	bool caught = false;
	pid_t pid;

	pid = spawn_node(fib_js, true);
	for (int i = 0; i < JIT_SNAPSHOTS && !caught; i++) {
		struct th_run r;
		char *b, *leaf;

		TH_CPROF(&r, 60000, "threads", "-p", th_pid_str(pid), "--debug", "2");
		cr_assert_eq(r.exit_code, 0, "threads: exit %d\n%s", r.exit_code, r.err);
		b = thread_block(r.out, pid);
		cr_assert_not_null(b, "no block for thread %d:\n%s", (int)pid, r.out);
		/* The leaf: the line after the block's head. */
		leaf = strchr(b, '\n');
		caught = leaf && strncmp(leaf + 1, "JS:", 3) == 0;
		if (caught) {
			cr_expect(strstr(b, "\nmain(") || strstr(b, "\n__libc_start_call_main("),
				  "the walk stops short of main:\n%s", b);
			cr_expect(strstr(r.out, "went on by frame pointers"), "no note:\n%s", r.out);
		}
		th_run_release(&r);
	}
	cr_expect(caught, "node's main thread was never caught in JS in %d snapshots",
		  JIT_SNAPSHOTS);
	th_kill(pid);
	remove_perf_map(pid);
}
