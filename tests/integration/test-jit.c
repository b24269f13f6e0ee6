/*
 * Generated code (issue 26) on a real JIT, Debian's node: a hot JavaScript
 * function runs from V8's anonymous executable memory, while node maps
 * part of its own text a second time high in the address space, so that
 * libdw's module for node spans the JIT code. cpu must name a JIT address
 * as one ("[JIT] 0x..."), never by one of node's symbols, and no mapping of
 * the profile may claim it; with node's perf map (--perf-basic-prof), by
 * the map's name; without, a note says how to have one written.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testhelp.h"

/* The share of the leaves a hot fib() must have, named as JIT code. */
#define JIT_LEAF_MIN 0.5

TestSuite(jit, .init = th_init, .fini = th_cleanup, .timeout = 120);

static const char fib_js[] =
	"function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n"
	"process.stdout.write('ready\\n');\n"
	"const end = Date.now() + 30000;\n"
	"while (Date.now() < end) fib(25);\n";

/* node running fib.js hot (@perf_map: --perf-basic-prof), its cpu profile
 * over 2 s once fib is compiled. */
static struct profile *profile_node(bool perf_map, pid_t *ret_pid)
{
	const char *script = th_tmp_path("fib.js"), *out = th_tmp_path("node-cpu.pb.gz");
	char *node = th_find_in_path("node"), logfile[600];
	struct profile *p;
	struct th_run r;
	FILE *f;

	if (!node)
		TH_SKIP_MISSING("node is not installed: apt-get install nodejs (scripts/setup)");
	th_require_perf(false);
	f = fopen(script, "we");
	cr_assert_not_null(f);
	fputs(fib_js, f);
	fclose(f);
	/* --perf-basic-prof also logs code events: into the test's own files. */
	snprintf(logfile, sizeof(logfile), "--logfile=%s", th_tmp_path("v8.log"));
	*ret_pid = th_spawn_cmd(perf_map ? (const char *const[]){ node, "--perf-basic-prof", logfile,
								 "--no-logfile-per-isolate",
								 script, NULL }
					 : (const char *const[]){ node, script, NULL },
				"node");
	free(node);
	th_sleep_ms(500); /* fib is compiled by then */
	TH_CPROF(&r, 60000, "cpu", "-p", th_pid_str(*ret_pid), "-d", "2s", "-o", out);
	cr_assert_eq(r.exit_code, 0, "cpu: exit %d\n%s", r.exit_code, r.err);
	th_run_release(&r);
	p = th_load_profile(out);
	return p;
}

Test(jit, node_code_is_named_as_jit_not_as_node)
{
	double total = 0, jit = 0, named_by_node = 0;
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
		cr_expect_eq(l->mapping_id, 0, "%s has a mapping", leaf);
		for (size_t m = 0; m < p->nmappings; m++)
			if (p->mappings[m].start <= l->address && l->address < p->mappings[m].limit &&
			    p->mappings[m].file && strstr(p->mappings[m].file, "node"))
				named_by_node += v;
	}
	cr_log_info("measured: node fib: %.1f%% of the samples' leaves in JIT code",
		    100 * jit / total);
	cr_assert_gt(total, 0);
	cr_expect_geq(jit / total, JIT_LEAF_MIN, "only %.1f%% of the leaves named as JIT code",
		      100 * jit / total);
	cr_expect_eq(named_by_node, 0, "a mapping of node claims JIT code");
	cr_expect(th_has_comment(p, "--perf-basic-prof"), "no note of the missing perf map");
	profile_free(p);
	th_kill(pid);
}

Test(jit, node_code_is_named_by_its_perf_map)
{
	double total = 0, fib = 0;
	char map[64];
	struct profile *p;
	pid_t pid;

	p = profile_node(true, &pid);
	for (size_t i = 0; i < p->nsamples; i++) {
		const char *leaf = th_leaf_name(p, &p->samples[i]);

		total += (double)p->samples[i].values[0];
		if (strstr(leaf, "fib") && strstr(leaf, "fib.js"))
			fib += (double)p->samples[i].values[0];
	}
	cr_log_info("measured: node --perf-basic-prof fib: %.1f%% of the leaves named by the map",
		    100 * fib / total);
	cr_assert_gt(total, 0);
	cr_expect_geq(fib / total, JIT_LEAF_MIN, "only %.1f%% of the leaves are fib",
		      100 * fib / total);
	cr_expect(!th_has_comment(p, "--perf-basic-prof"), "the perf map was there");
	profile_free(p);
	th_kill(pid);
	snprintf(map, sizeof(map), "/tmp/perf-%d.map", (int)pid);
	unlink(map);
}
