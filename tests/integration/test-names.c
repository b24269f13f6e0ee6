/*
 * One function, one name (issue 26), on live targets, through lib/symbolize
 * at every address and in `cprof cpu` profiles:
 *  - code the compiler copied or split (clone_*.isra.0, .constprop.0,
 *    .part.0, .cold of tests/targets/clones.c) is named by its function;
 *  - the vDSO's functions by its own names (__vdso_clock_gettime, as perf
 *    says), held against the vDSO's symbols read here with libelf;
 *  - code no symbol covers (a stripped binary) by its function's start,
 *    "file+0xSTART", the same at every address of the function.
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
#include "th-elf.h"
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
	cr_log_info("measured: clones: %zu addresses of copies, all named by their function", addresses);
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
	int64_t cum[ARRAY_SIZE(copied)];
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
	for (size_t i = 0; i < ARRAY_SIZE(copied); i++)
		cum[i] = th_func_get(sums, n, copied[i]).cum;
	free(sums);
	cr_log_info("measured: clones: cum ms %s %.0f, %s %.0f, %s %.0f, %s %.0f", copied[0],
		    cum[0] / 1e6, copied[1], cum[1] / 1e6, copied[2], cum[2] / 1e6, copied[3],
		    cum[3] / 1e6);
	for (size_t i = 0; i < ARRAY_SIZE(copied); i++)
		cr_expect_gt(cum[i], 0, "no samples in %s", copied[i]);
	profile_free(p);
	th_kill(pid);
}

/*
 * A profile of vdsoloop: each sample whose leaf is in the "[vdso]" mapping
 * is named by the vDSO's own symbol at that address (its __vdso_ name), or
 * by "[vdso]+0x..." where it has none (code the vDSO does not export: the
 * kvm-clock reader, say), and no other sample is; stacks go on through the
 * vDSO to the target's own callers and main.
 */
#define VDSO_LEAF_MIN 0.5   /* share of samples with their leaf in the vDSO */
#define VDSO_ROOTED_MIN 0.95 /* share of samples that reach main */

Test(names, vdso_functions_by_their_own_names)
{
	int64_t vdso = 0, named = 0, unexported = 0, rooted = 0, callers = 0, total = 0;
	uint64_t base, load;
	struct th_elf_func *funcs;
	struct profile *p;
	size_t nfuncs;
	Elf *elf;
	pid_t pid;

	th_require_perf(false);
	elf = th_vdso_open(&base);
	nfuncs = th_elf_functions(elf, &funcs);
	cr_assert_gt(nfuncs, 0, "the vDSO has no function symbols");
	load = th_elf_load_vaddr(elf);
	pid = TH_SPAWN("vdsoloop", "30");
	p = cpu_profile(pid, "2s", "vdso.pb.gz");
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		const struct profile_location *leaf = th_location(p, s->location_ids[0]);
		const struct profile_mapping *m = th_mapping(p, leaf->mapping_id);
		const char *name = th_leaf_name(p, s);
		const struct th_elf_func *f;
		bool in_vdso = m && !strcmp(m->file, "[vdso]");
		bool caller = false;

		int64_t w = s->values[0]; /* samples/count */

		total += w;
		for (size_t l = 0; l < s->nlocations; l++)
			if (th_location_has(p, s->location_ids[l], "main")) {
				rooted += w;
				break;
			}
		if (!in_vdso) {
			cr_expect(strncmp(name, "__vdso_", 7) && strncmp(name, "[vdso]", 6),
				  "a leaf %s outside the [vdso] mapping", name);
			continue;
		}
		vdso += w;
		for (size_t l = 1; l < s->nlocations; l++)
			caller |= th_location_has(p, s->location_ids[l], "read_clock") ||
				  th_location_has(p, s->location_ids[l], "read_tod");
		/* main's own end check: time() is the vDSO's, called from main. */
		caller |= !strcmp(name, "__vdso_time") && s->nlocations > 1 &&
			  th_location_has(p, s->location_ids[1], "main");
		callers += caller ? w : 0;
		f = th_elf_function_at(funcs, nfuncs, leaf->address - m->start + m->offset + load,
				       "__vdso_");
		if (f) {
			cr_expect_str_eq(name, f->name, "[vdso]+%#llx",
					 (unsigned long long)(leaf->address - m->start));
			named += w;
		} else {
			cr_expect(!strncmp(name, "[vdso]+0x", 9), "[vdso]+%#llx is named %s",
				  (unsigned long long)(leaf->address - m->start), name);
			unexported += w;
		}
	}
	cr_log_info("measured: vdsoloop: %lld samples, %lld with a vDSO leaf: %lld named by its symbol, "
		    "%lld in code it does not export; %lld of those reach their caller; "
		    "%lld reach main",
		    (long long)total, (long long)vdso, (long long)named,
		    (long long)unexported, (long long)callers,
		    (long long)rooted);
	cr_assert_gt(total, 0);
	cr_expect_geq((double)vdso / total, VDSO_LEAF_MIN, "only %lld of %lld leaves in the vDSO",
		      (long long)vdso, (long long)total);
	cr_expect_gt(named, 0, "no leaf named by a vDSO symbol");
	cr_expect_eq(callers, vdso, "vDSO leaves that do not reach their caller (read_clock, "
		     "read_tod, or main for time)");
	cr_expect_geq((double)rooted / total, VDSO_ROOTED_MIN, "only %lld of %lld samples reach main",
		      (long long)rooted, (long long)total);
	free(funcs);
	th_elf_close(elf);
	profile_free(p);
	th_kill(pid);
}

/* Go's text frame of @pc, one past the start of function @name, says
 * "@name+0x1": the offset after the name that carries the start. */
static void expect_text_offset(struct symbolizer *s, uint64_t pc, const char *name)
{
	char *text = NULL, want[4200];
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	cr_assert_not_null(f);
	symbolizer_write_frames(s, &pc, 1, f);
	fclose(f);
	snprintf(want, sizeof(want), "\t%s+0x1\t", name);
	cr_expect(strstr(text, want), "no \"%s\" in %s", want, text);
	free(text);
}

/*
 * In a stripped copy of busy, every address of work_a, work_b and work_c
 * (their extent from the unstripped binary) is named alike, by the start of
 * the function: FILE+0xSTART, at offset address - start, which Go's text
 * format writes after it.
 */
Test(names, a_stripped_function_has_one_name)
{
	static const char *const funcs_wanted[] = { "work_a", "work_b", "work_c" };
	const char *path = th_tmp_path("busy-stripped");
	char src[4096];
	struct th_elf_func *funcs;
	struct symbolizer *s;
	uint64_t start, end, load;
	size_t nfuncs, addresses = 0;
	struct th_run r;
	Elf *elf;
	pid_t pid;

	snprintf(src, sizeof(src), "%s/busy", TARGETS_DIR);
	th_run_cmd_ex(&r, 10000, 0, 0,
		      (const char *const[]){ "/usr/bin/strip", "--strip-all", "-o", path, src,
					     NULL });
	cr_assert_eq(r.exit_code, 0, "strip: %s", r.err);
	th_run_release(&r);
	elf = th_elf_open(src);
	nfuncs = th_elf_functions(elf, &funcs);
	load = th_elf_load_vaddr(elf);
	pid = th_spawn_path(path, (const char *const[]){ "1", "30", NULL });
	cr_assert_eq(symbolizer_new(&s, pid), 0);
	cr_assert_eq(symbolizer_module_range(s, "busy-stripped", &start, &end), 0);
	for (size_t w = 0; w < ARRAY_SIZE(funcs_wanted); w++) {
		const struct th_elf_func *f = NULL;
		char want[4096];

		for (size_t i = 0; i < nfuncs && !f; i++)
			if (!strcmp(funcs[i].name, funcs_wanted[w]))
				f = &funcs[i];
		cr_assert_not_null(f, "no %s in busy", funcs_wanted[w]);
		cr_assert_gt(f->size, 0);
		snprintf(want, sizeof(want), "%s+%#llx", strrchr(path, '/') + 1,
			 (unsigned long long)f->value);
		for (uint64_t a = f->value; a < f->value + f->size; a++) {
			struct symbol_info si;

			cr_assert_eq(symbolizer_lookup(s, start + a - load, &si), 0);
			cr_assert_eq(si.nframes, 1);
			cr_assert_str_eq(si.frames[0].function, want, "%s+%#llx is %s", f->name,
					 (unsigned long long)(a - f->value), si.frames[0].function);
			cr_assert_eq(si.offset_in_function, a - f->value);
			addresses++;
		}
		expect_text_offset(s, start + f->value + 1 - load, want);
	}
	cr_log_info("measured: busy-stripped: %zu addresses of work_a/b/c, each named by "
		    "its function's start",
		    addresses);
	symbolizer_unref(s);
	free(funcs);
	th_elf_close(elf);
	th_kill(pid);
}
