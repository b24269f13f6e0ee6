/*
 * One function, one name (issue 26): the names a profile gives code that the
 * compiler copied or split (clone_*.isra.0, .constprop.0, .part.0, .cold of
 * tests/targets/clones.c), and the vDSO's code, on live targets: through
 * lib/symbolize at every address of each copy, and in `cprof cpu` profiles.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile/profile.h"
#include "symbolize/symbolize.h"
#include "testhelp.h"
#include "util/util.h"

#define RUN_TIMEOUT_MS 60000

TestSuite(names, .init = th_init, .fini = th_cleanup, .timeout = 120);

/* The suffixes GCC gives its copies of a function. */
static const char *const clone_suffixes[] = { ".isra.", ".constprop.", ".part.", ".cold" };

/* Index in clone_suffixes of the first suffix @name has, or -1. */
static int clone_kind(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(clone_suffixes); i++)
		if (strstr(name, clone_suffixes[i]))
			return (int)i;
	return -1;
}

/* The function a copy is of: its name up to the first '.'. */
static void plain_name(const char *name, char *buf, size_t size)
{
	snprintf(buf, size, "%.*s", (int)strcspn(name, "."), name);
}

/*
 * Every address of every copy in the live target names the function it is
 * a copy of as its outermost frame, and no frame keeps a clone suffix. Each
 * kind of copy must be in the binary: else there would be nothing to check.
 */
Test(names, every_address_of_a_clone_names_its_function)
{
	pid_t pid = TH_SPAWN("clones", "30");
	struct symbolizer *s;
	uint64_t start, end;
	unsigned kinds = 0;
	size_t addresses = 0;
	Dwfl_Module *mod;
	int n;

	cr_assert_eq(symbolizer_new(&s, pid), 0);
	cr_assert_eq(symbolizer_module_range(s, "clones", &start, &end), 0);
	mod = dwfl_addrmodule(symbolizer_dwfl(s), start);
	cr_assert_not_null(mod);
	n = dwfl_module_getsymtab(mod);
	cr_assert_gt(n, 0);
	for (int i = 0; i < n; i++) {
		char want[256];
		GElf_Sym sym;
		GElf_Addr addr;
		const char *name = dwfl_module_getsym_info(mod, i, &sym, &addr, NULL, NULL, NULL);
		int kind = name ? clone_kind(name) : -1;

		if (kind < 0 || GELF_ST_TYPE(sym.st_info) != STT_FUNC || !sym.st_size)
			continue;
		kinds |= 1u << kind;
		plain_name(name, want, sizeof(want));
		for (uint64_t a = addr; a < addr + sym.st_size; a++) {
			struct symbol_info si;

			cr_assert_eq(symbolizer_lookup(s, a, &si), 0);
			cr_assert_gt(si.nframes, 0);
			cr_assert_str_eq(si.frames[si.nframes - 1].function, want,
					 "%s+%#llx is named %s", name,
					 (unsigned long long)(a - addr),
					 si.frames[si.nframes - 1].function);
			for (size_t f = 0; f < si.nframes; f++)
				cr_assert_lt(clone_kind(si.frames[f].function), 0,
					     "%s+%#llx: frame %zu is %s", name,
					     (unsigned long long)(a - addr), f,
					     si.frames[f].function);
			addresses++;
		}
	}
	cr_log_info("clones: %zu addresses of copies, all named by their function", addresses);
	for (size_t i = 0; i < ARRAY_SIZE(clone_suffixes); i++)
		cr_assert(kinds & (1u << i), "the compiler made no %s copy in clones",
			  clone_suffixes[i]);
	symbolizer_unref(s);
	th_kill(pid);
}

/* `cprof cpu -p PID -d DURATION -F 997` into a fresh file; the profile. */
static struct profile *cpu_profile(pid_t pid, const char *duration, const char *file)
{
	const char *path = th_tmp_path(file);
	struct th_run r;

	TH_CPROF(&r, RUN_TIMEOUT_MS, "cpu", "-p", th_pid_str(pid), "-d", duration, "-F", "997",
		 "-q", "-o", path);
	if (r.exit_code != 0)
		th_run_log(&r, "cpu");
	cr_assert_eq(r.exit_code, 0, "cprof cpu failed");
	th_run_release(&r);
	return th_load_profile(path);
}

/*
 * In a profile of clones: no function has a clone suffix, each copied
 * function has samples under its own name, and no two functions of one
 * source position (file and first line) have two names.
 */
Test(names, a_profile_names_each_function_once)
{
	static const char *const copied[] = { "clone_constprop", "clone_isra", "clone_cold",
					      "clone_part" };
	struct th_func_sum *sums;
	struct profile *p;
	size_t n;
	pid_t pid;

	th_require_perf(false);
	pid = TH_SPAWN("clones", "30");
	p = cpu_profile(pid, "2s", "clones.pb.gz");
	for (size_t i = 0; i < p->nfunctions; i++) {
		const struct profile_function *f = &p->functions[i];

		cr_expect_lt(clone_kind(f->name), 0, "function %s", f->name);
		for (size_t j = 0; j < i; j++) {
			const struct profile_function *g = &p->functions[j];

			if (f->start_line > 0 && f->start_line == g->start_line &&
			    !strcmp(f->file, g->file))
				cr_expect_str_eq(f->name, g->name, "%s:%lld has two names", f->file,
						 (long long)f->start_line);
		}
	}
	th_func_sums(p, (size_t)th_sample_type(p, "cpu", "nanoseconds"), &sums, &n);
	for (size_t i = 0; i < ARRAY_SIZE(copied); i++) {
		struct th_func_sum f = th_func_get(sums, n, copied[i]);

		cr_log_info("clones: %s cum %lld ns", copied[i], (long long)f.cum);
		cr_expect_gt(f.cum, 0, "no samples in %s", copied[i]);
	}
	free(sums);
	profile_free(p);
	th_kill(pid);
}
