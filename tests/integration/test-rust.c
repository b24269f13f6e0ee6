/*
 * Rust targets, names as rustc prints them. tests/targets/rust/spin.rs is
 * compiled here with the rustc installed (Debian's, or rustup's when first
 * in PATH), once with the legacy mangling (rustc's default) and once with
 * -C symbol-mangling-version=v0, and profiled by `cprof cpu`:
 *
 *  - its hot functions are in the profile under the names rustfilt
 *    (rustc-demangle) prints: legacy "spin::Busy<T>::spin" (that mangling
 *    keeps the generic parameters of the definition), v0
 *    "<spin::Busy<u64>>::spin" (the instance's arguments);
 *  - no name keeps a hash ("::h4ab55ab15241c6ff"), a crate disambiguator
 *    ("spin[de33402ef7736faa]"), a "$LT$" escape or a ".llvm.N" suffix;
 *  - every Rust name in the profile is what rustfilt prints for its
 *    system_name (the mangled name the profile keeps beside it);
 *  - `cprof view --top 10` is `go tool pprof -top -nodecount=10`, row by row;
 *  - `cprof threads --debug 2` writes Go's "name(...)" after Rust names,
 *    never a doubled parameter list.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testhelp.h"

#define RUN_TIMEOUT_MS 60000

TestSuite(rust, .init = th_init, .fini = th_cleanup, .timeout = 240);

static char *rustc_or_skip(void)
{
	char *rustc = th_find_in_path("rustc");
	struct th_run r;

	if (!rustc)
		TH_SKIP_MISSING("rustc is not installed (Debian package rustc; scripts/setup "
			     "installs it): no Rust target to profile");
	th_run_cmd_ex(&r, 30000, 0, 0, (const char *const[]){ rustc, "--version", NULL });
	cr_log_info("%s: %s", rustc, r.out);
	th_run_release(&r);
	return rustc;
}

/* Compiles spin.rs into a fresh directory; returns the executable's path. */
static char *build_spin(const char *rustc, bool v0)
{
	char *exe;
	const char *argv[12];
	size_t n = 0;
	struct th_run r;

	cr_assert(asprintf(&exe, "%s/spin-%s", th_tmp_dir("rust"), v0 ? "v0" : "legacy") > 0);
	argv[n++] = rustc;
	argv[n++] = "-C";
	argv[n++] = "opt-level=1";
	argv[n++] = "-g";
	if (v0) {
		/* Stable since Rust 1.59 (Debian 12 has 1.63). */
		argv[n++] = "-C";
		argv[n++] = "symbol-mangling-version=v0";
	}
	argv[n++] = "-o";
	argv[n++] = exe;
	argv[n++] = SOURCE_DIR "/tests/targets/rust/spin.rs";
	argv[n] = NULL;
	th_run_cmd_ex(&r, 180000, 0, 0, argv);
	cr_assert_eq(r.exit_code, 0, "rustc %s: exit %d:\n%s%s", v0 ? "(v0)" : "(legacy)",
		     r.exit_code, r.out, r.err);
	th_run_release(&r);
	return exe;
}

static bool is_hex(const char *s, size_t n)
{
	return strspn(s, "0123456789abcdef") >= n;
}

/* The traces of a half-done Rust name, or NULL. */
static const char *rust_leftover(const char *name)
{
	const char *p;

	if (strchr(name, '$'))
		return "a $ escape";
	if (strstr(name, ".llvm."))
		return "a .llvm. suffix";
	for (p = strstr(name, "::h"); p; p = strstr(p + 1, "::h"))
		if (is_hex(p + 3, 16))
			return "a hash";
	for (p = strchr(name, '['); p; p = strchr(p + 1, '['))
		if (is_hex(p + 1, 16) && p[17] == ']')
			return "a crate disambiguator";
	if (!strncmp(name, "_R", 2) || !strncmp(name, "_ZN", 3))
		return "no demangling";
	return NULL;
}

/* A mangled Rust name: v0, or legacy (ends with "17h" + 16 hex + "E"). */
static bool is_rust_symbol(const char *sym)
{
	const char *h;

	if (!strncmp(sym, "_R", 2))
		return true;
	if (strncmp(sym, "_ZN", 3) != 0)
		return false;
	for (h = strstr(sym, "17h"); h; h = strstr(h + 1, "17h"))
		if (is_hex(h + 3, 16) && h[19] == 'E')
			return true;
	return false;
}

/* The profile's Rust names against rustfilt's for their system names. */
static void expect_rustfilt_agrees(const struct profile *p)
{
	const char **argv = calloc(p->nfunctions + 2, sizeof(*argv));
	const struct profile_function **fns = calloc(p->nfunctions, sizeof(*fns));
	char *rustfilt = th_find_in_path("rustfilt"), *line, *save = NULL;
	size_t n = 0, k = 0;
	struct th_run r;

	cr_assert(argv && fns);
	if (!rustfilt) {
		cr_log_warn("rustfilt is not installed: Rust names not compared with it");
		goto out_free;
	}
	argv[0] = rustfilt;
	for (size_t i = 0; i < p->nfunctions; i++) {
		const struct profile_function *f = &p->functions[i];

		/* rustfilt keeps ".llvm.N" when a suffix follows it; cprof
		 * drops it always (see lib/symbolize/demangle.c): such names
		 * are left to tests/unit/test-demangle.c. */
		if (!f->system_name || !is_rust_symbol(f->system_name) ||
		    strstr(f->system_name, ".llvm."))
			continue;
		fns[n] = f;
		argv[++n] = f->system_name;
	}
	th_run_cmd_ex(&r, 30000, 0, 0, argv);
	cr_assert_eq(r.exit_code, 0, "rustfilt: %s", r.err);
	for (line = strtok_r(r.out, "\n", &save); line && k < n;
	     line = strtok_r(NULL, "\n", &save), k++)
		cr_expect_str_eq(fns[k]->name, line, "%s: cprof '%s', rustfilt '%s'",
				 fns[k]->system_name, fns[k]->name, line);
	cr_expect_eq(k, n, "rustfilt printed %zu names for %zu", k, n);
	cr_log_info("%zu Rust names of the profile as rustfilt prints them", n);
	th_run_release(&r);
out_free:
	free(rustfilt);
	free(fns);
	free(argv);
}

/* Our own functions have v0 names in @p ("_RNvMs0_Cs..._4spinINtB5_4Busy..."). */
static bool mangles_v0(const struct profile *p)
{
	for (size_t i = 0; i < p->nfunctions; i++) {
		const char *sym = p->functions[i].system_name;

		if (sym && !strncmp(sym, "_R", 2) && strstr(sym, "4spin") && strstr(sym, "4Busy"))
			return true;
	}
	return false;
}

static void run_rust_target(bool v0, const char *const *hot, size_t nhot, const char *threads_frame)
{
	char *rustc, *exe;
	const char *prof = th_tmp_path("spin.pb.gz");
	struct profile *p;
	struct th_func_sum *sums;
	size_t nsums;
	struct th_run r;
	pid_t pid;
	int cpu_vi;

	th_require_perf(false);
	rustc = rustc_or_skip();
	exe = build_spin(rustc, v0);
	/* It outlives every step (the views go through go tool pprof, slow on
	 * a loaded machine) and is killed by its pid at the end. */
	pid = th_spawn_path(exe, (const char *const[]){ "60", NULL });

	TH_CPROF(&r, RUN_TIMEOUT_MS, "cpu", "-p", th_pid_str(pid), "-d", "2s", "-o", prof, "-q");
	cr_assert_eq(r.exit_code, 0, "cprof cpu: exit %d: %s", r.exit_code, r.err);
	th_run_release(&r);

	p = th_load_profile(prof);
	if (!v0 && mangles_v0(p)) {
		/* rustc may one day mangle v0 by default; legacy would then need
		 * -Z unstable-options. */
		profile_free(p);
		th_kill(pid);
		cr_skip_test("%s mangles v0 by default: no legacy names to check", rustc);
	}
	if (v0)
		cr_expect(mangles_v0(p), "-C symbol-mangling-version=v0 made no v0 names");
	for (size_t i = 0; i < p->nfunctions; i++) {
		const char *why = rust_leftover(p->functions[i].name);

		cr_expect_null(why, "'%s' (%s) has %s", p->functions[i].name,
			       p->functions[i].system_name, why);
	}
	cpu_vi = th_sample_type(p, "cpu", "nanoseconds");
	cr_assert_geq(cpu_vi, 0);
	th_func_sums(p, (size_t)cpu_vi, &sums, &nsums);
	for (size_t i = 0; i < nsums && i < 20; i++)
		cr_log_info("cum %12lld ns  %s", (long long)sums[i].cum, sums[i].name);
	for (size_t i = 0; i < nhot; i++) {
		struct th_func_sum s = th_func_get(sums, nsums, hot[i]);

		cr_expect_gt(s.cum, 0, "'%s' is not in the profile", hot[i]);
	}
	expect_rustfilt_agrees(p);
	free(sums);
	profile_free(p);

	th_view_agrees_with_pprof(prof, NULL, 10);

	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", th_pid_str(pid), "--debug", "2");
	cr_assert_eq(r.exit_code, 0, "cprof threads: exit %d: %s", r.exit_code, r.err);
	cr_expect(strstr(r.out, threads_frame), "no '%s' in:\n%s", threads_frame, r.out);
	cr_expect(!strstr(r.out, ")(...)"), "a doubled parameter list:\n%s", r.out);
	th_run_release(&r);

	th_kill(pid);
	free(exe);
	free(rustc);
}

Test(rust, legacy_names)
{
	static const char *const hot[] = {
		"spin::Busy<T>::spin",
		"<spin::Busy<T> as spin::Step>::step",
		"spin::in_closure::{{closure}}",
		"spin::run_closure",
	};

	run_rust_target(false, hot, ARRAY_SIZE(hot), "\nspin::Busy<T>::spin(...)\n\t");
}

Test(rust, v0_names)
{
	static const char *const hot[] = {
		"<spin::Busy<u64>>::spin",
		"<spin::Busy<(u32, i8)>>::spin",
		"<spin::Busy<u64> as spin::Step>::step",
		"spin::in_closure::<u64>::{closure#0}",
		"spin::run_closure",
	};

	run_rust_target(true, hot, ARRAY_SIZE(hot), "\n<spin::Busy<(u32, i8)>>::spin(...)\n\t");
}
