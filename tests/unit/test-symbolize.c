/*
 * lib/symbolize on the test process itself (and on a forked copy of it that
 * then exits): names, file:line and inline frames of code whose truth this
 * file knows, libc, the vDSO, addresses with no module or no symbol.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profile/profile.h"
#include "symbolize/symbolize-private.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"
#include "util/util.h"
#include "testhelp.h"
#include "th-elf.h"

/* The address of this very instruction. */
#define HERE(pc) __asm__ volatile("1: leaq 1b(%%rip), %0" : "=r"(pc))

static const int known_decl_line = __LINE__ + 1;
static __attribute__((noinline)) uint64_t known_function(int *ret_line)
{
	uint64_t pc;

	HERE(pc); *ret_line = __LINE__;
	return pc;
}

static const int leaf_decl_line = __LINE__ + 1;
static inline __attribute__((always_inline)) uint64_t inlined_leaf(int *ret_line)
{
	uint64_t pc;

	HERE(pc); *ret_line = __LINE__;
	return pc;
}

static __attribute__((noinline)) uint64_t outer_of_inline(int *leaf_line, int *call_line)
{
	uint64_t pc;

	pc = inlined_leaf(leaf_line); *call_line = __LINE__;
	return pc;
}

static struct symbolizer *sym;

static void setup(void)
{
	cr_assert_eq(symbolizer_new(&sym, getpid()), 0);
}

static void teardown(void)
{
	symbolizer_unref(sym);
	sym = NULL;
}

TestSuite(symbolize, .init = setup, .fini = teardown);

static const char *base(const char *path)
{
	const char *s = path ? strrchr(path, '/') : NULL;

	return s ? s + 1 : path;
}

static uint64_t libc_function(const char *name)
{
	void *h = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
	void *f;

	cr_assert_not_null(h);
	/* From libc's own handle: a sanitizer may interpose the global name. */
	f = dlsym(h, name);
	dlclose(h);
	cr_assert_not_null(f, "no %s in libc", name);
	return (uint64_t)(uintptr_t)f;
}

static const char *self_exe(void)
{
	static char buf[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);

	cr_assert_gt(n, 0);
	buf[n] = '\0';
	return buf;
}

Test(symbolize, function_file_and_line)
{
	struct symbol_info si;
	int line;
	uint64_t pc = known_function(&line);

	cr_assert_eq(symbolizer_lookup(sym, pc, &si), 0);
	cr_assert_eq(si.nframes, 1);
	cr_assert_str_eq(si.frames[0].function, "known_function");
	cr_assert_str_eq(si.frames[0].system_name, "known_function");
	cr_assert_not_null(si.frames[0].file);
	cr_assert_str_eq(base(si.frames[0].file), "test-symbolize.c");
	cr_assert_eq(si.frames[0].line, line);
	cr_assert_eq(si.frames[0].start_line, known_decl_line);
	cr_assert_eq(si.offset_in_function, pc - (uint64_t)(uintptr_t)known_function);

	cr_assert_not_null(si.module);
	cr_assert_str_eq(si.module->path, self_exe());
	cr_assert(si.module->has_symbols);
	cr_assert(si.module->has_lines);
	cr_assert_gt(strlen(si.module->build_id), 0);
	cr_assert(si.module->start <= pc && pc < si.module->end);
}

Test(symbolize, inline_frames_innermost_first)
{
	struct symbol_info si;
	int leaf_line, call_line;
	uint64_t pc = outer_of_inline(&leaf_line, &call_line);

	cr_assert_eq(symbolizer_lookup(sym, pc, &si), 0);
	cr_assert_eq(si.nframes, 2);
	cr_assert_str_eq(si.frames[0].function, "inlined_leaf");
	cr_assert_eq(si.frames[0].line, leaf_line);
	cr_assert_eq(si.frames[0].start_line, leaf_decl_line);
	cr_assert_str_eq(base(si.frames[0].file), "test-symbolize.c");
	/* The caller's line is the call site of the inlined function. */
	cr_assert_str_eq(si.frames[1].function, "outer_of_inline");
	cr_assert_eq(si.frames[1].line, call_line);
	cr_assert_str_eq(base(si.frames[1].file), "test-symbolize.c");
	cr_assert_eq(si.offset_in_function, pc - (uint64_t)(uintptr_t)outer_of_inline);
}

Test(symbolize, libc_function)
{
	struct symbol_info si, mid;
	uint64_t q = libc_function("qsort"), g = libc_function("getpid");

	cr_assert_eq(symbolizer_lookup(sym, q, &si), 0);
	cr_assert_str_eq(si.frames[si.nframes - 1].function, "qsort");
	cr_assert_eq(si.offset_in_function, 0);
	cr_assert_not_null(strstr(si.module->path, "/libc.so.6"));
	cr_assert_eq(strlen(si.module->build_id), 40);
	cr_assert(si.module->has_symbols);
	if (si.module->has_lines) {
		cr_assert_str_eq(base(si.frames[0].file), "msort.c");
		cr_assert_gt(si.frames[0].line, 0);
	} else {
		cr_log_warn("libc without debug info (libc6-dbg): no file:line checked");
	}

	cr_assert_eq(symbolizer_lookup(sym, q + 4, &mid), 0);
	cr_assert_str_eq(mid.frames[mid.nframes - 1].function, "qsort");
	cr_assert_eq(mid.offset_in_function, 4);

	/* getpid and __getpid share an address: either is right. */
	cr_assert_eq(symbolizer_lookup(sym, g, &si), 0);
	cr_assert(!strcmp(si.frames[0].function, "getpid") ||
			  !strcmp(si.frames[0].function, "__getpid"),
		  "getpid is %s", si.frames[0].function);
}

/* The address of @name in the vDSO, from its dynamic symbols. */
static uint64_t vdso_symbol(const char *name)
{
	uint64_t base, found = 0;
	Elf *elf = th_vdso_open(&base);
	struct th_elf_func *funcs;
	size_t n = th_elf_functions(elf, &funcs);

	for (size_t i = 0; i < n && !found; i++)
		if (!strcmp(funcs[i].name, name))
			found = base + funcs[i].value - th_elf_load_vaddr(elf);
	free(funcs);
	th_elf_close(elf);
	cr_assert_neq(found, 0, "no %s in the vDSO", name);
	return found;
}

static void expect_vdso_clock_gettime(struct symbolizer *s, uint64_t addr)
{
	struct symbol_info si;
	const char *name;

	cr_assert_eq(symbolizer_lookup(s, addr, &si), 0);
	cr_assert_not_null(si.module);
	cr_assert_str_eq(si.module->path, "[vdso]");
	cr_assert(si.module->has_symbols);
	/* The vDSO's own name of it (clock_gettime is its weak alias), as perf
	 * says, apart from libc's clock_gettime. */
	name = si.frames[si.nframes - 1].function;
	cr_assert_str_eq(name, "__vdso_clock_gettime", "vdso symbol is %s", name);
}

Test(symbolize, vdso)
{
	expect_vdso_clock_gettime(sym, vdso_symbol("__vdso_clock_gettime"));
}

Test(symbolize, address_without_module_is_hex)
{
	struct symbol_info si;

	cr_assert_eq(symbolizer_lookup(sym, 0x10, &si), 0);
	cr_assert_eq(si.nframes, 1);
	cr_assert_str_eq(si.frames[0].function, "0x10");
	cr_assert_str_eq(si.frames[0].system_name, "0x10");
	cr_assert_null(si.frames[0].file);
	cr_assert_eq(si.frames[0].line, 0);
	cr_assert_null(si.module);
}

Test(symbolize, address_without_symbol_is_module_offset)
{
	struct symbol_info si, k;
	char want[PATH_MAX + 32];
	int line;

	cr_assert_eq(symbolizer_lookup(sym, known_function(&line), &k), 0);
	/* The ELF header: mapped, in the module, in no function. */
	cr_assert_eq(symbolizer_lookup(sym, k.module->start + 0x10, &si), 0);
	cr_assert_eq(si.nframes, 1);
	snprintf(want, sizeof(want), "%s+0x10", base(self_exe()));
	cr_assert_str_eq(si.frames[0].function, want);
	cr_assert_eq(si.module, k.module);
}

Test(symbolize, cached_answers_are_identical)
{
	struct symbol_info a, b;
	int line;
	uint64_t pc = known_function(&line), q = libc_function("qsort");

	cr_assert_eq(symbolizer_lookup(sym, pc, &a), 0);
	/* Enough other addresses to make the cache grow. */
	for (uint64_t i = 0; i < 300; i++)
		cr_assert_eq(symbolizer_lookup(sym, q + 16 * i, &b), 0);
	cr_assert_eq(symbolizer_lookup(sym, pc, &b), 0);
	cr_assert_eq(a.frames, b.frames);
	cr_assert_eq(a.nframes, b.nframes);
	cr_assert_eq(a.module, b.module);
	cr_assert_eq(a.offset_in_function, b.offset_in_function);
	cr_assert_str_eq(b.frames[0].function, "known_function");
}

Test(symbolize, cxx_names_are_demangled)
{
	void *h = dlopen("libstdc++.so.6", RTLD_LAZY);
	struct symbolizer *s;
	struct symbol_info si;
	char *d;
	void *f;

	if (!h)
		TH_SKIP_MISSING("libstdc++.so.6 is not installed");
	d = demangle("_ZN3foo3barEi");
	cr_assert_not_null(d);
	cr_assert_str_eq(d, "foo::bar(int)");
	free(d);
	cr_assert_null(demangle("main"));

	f = dlsym(h, "_ZNSt9exceptionD1Ev");
	cr_assert_not_null(f);
	cr_assert_eq(symbolizer_new(&s, getpid()), 0);
	cr_assert_eq(symbolizer_lookup(s, (uint64_t)(uintptr_t)f, &si), 0);
	cr_assert_str_eq(si.frames[si.nframes - 1].function, "std::exception::~exception()");
	cr_assert_eq(strncmp(si.frames[si.nframes - 1].system_name, "_ZNSt9exception", 15), 0);
	symbolizer_unref(s);
}

/* Whether the text writers add "+0xOFF" after a name. */
Test(symbolize, names_with_their_own_offset)
{
	static const char *const with[] = { "libfoo.so+0x1234", "libc.so.6+0x0", "0x7f0000001000",
					    "[vdso]+0x9f0" };
	static const char *const without[] = {
		"main",
		"ns::inner::Box<double, 3>::operator+(ns::inner::Box<double, 3> const&) const",
		"core::ptr::drop_in_place::<alloc::boxed::Box<dyn core::any::Any + core::marker::Send>>",
		"core::ptr::drop_in_place<alloc::boxed::Box<dyn core::any::Any+core::marker::Send>>",
		"std::operator+=",
		"0x",
		"lib+0x12g",
		"",
	};

	for (size_t i = 0; i < ARRAY_SIZE(with); i++)
		cr_expect(symbol_name_has_offset(with[i]), "%s", with[i]);
	for (size_t i = 0; i < ARRAY_SIZE(without); i++)
		cr_expect(!symbol_name_has_offset(without[i]), "%s", without[i]);
}

/* Whether cprof threads --debug 2 adds Go's "(...)" after a name. */
Test(symbolize, names_with_their_own_parameter_list)
{
	static const char *const with[] = {
		"mysqld_main(int, char**)",
		"ns::inner::Box<double, 3>::sum() const",
		"ns::inner::Box<double, 3>::take() &&",
		"S::operator()(int) volatile",
		"lambdas(int)::{lambda(int)#1}::operator()(int) const",
		"greet(std::string const&) [clone .cold]",
		"foo() const [clone .constprop.0] [clone .isra.0]",
		"int variadic<int, char>(int, char)",
	};
	static const char *const without[] = {
		"main",
		"work_a.cold",
		"spin::Busy<T>::spin",
		"<spin::Busy<(u32, i8)>>::spin",
		"spin::in_closure::{{closure}}",
		"spin::run_closure::<spin::in_closure<u64>::{closure#0}>",
		"core::ptr::drop_in_place::<fn()>",
		"spin::main.cold",
		"libfoo.so+0x1234",
		"0x7f0000001000",
		"[clone .cold]",
		"",
	};

	for (size_t i = 0; i < ARRAY_SIZE(with); i++)
		cr_expect(symbol_name_has_params(with[i]), "%s", with[i]);
	for (size_t i = 0; i < ARRAY_SIZE(without); i++)
		cr_expect(!symbol_name_has_params(without[i]), "%s", without[i]);
}

/* A library loaded now, after the symbolizer was made: td_init's
 * address in libthread_db (its handle in *@ret_h). */
static uint64_t load_late_library(void **ret_h)
{
	uint64_t addr;

	if (dlopen("libthread_db.so.1", RTLD_LAZY | RTLD_NOLOAD))
		cr_skip_test("libthread_db.so.1 is loaded already");
	*ret_h = dlopen("libthread_db.so.1", RTLD_LAZY);
	if (!*ret_h)
		TH_SKIP_MISSING("no libthread_db.so.1");
	addr = (uint64_t)(uintptr_t)dlsym(*ret_h, "td_init");
	cr_assert_neq(addr, 0);
	return addr;
}

Test(symbolize, refresh_finds_dlopened_modules)
{
	struct symbol_info si;
	void *h;
	uint64_t addr = load_late_library(&h);

	cr_assert_eq(symbolizer_lookup(sym, addr, &si), 0);
	cr_assert_null(si.module);
	cr_assert_eq(symbolizer_refresh(sym), 0);
	cr_assert_eq(symbolizer_lookup(sym, addr, &si), 0);
	cr_assert_not_null(si.module);
	cr_assert_not_null(strstr(si.module->path, "libthread_db.so.1"));
	cr_assert_not_null(strstr(si.frames[si.nframes - 1].function, "td_init"));
	dlclose(h);
}

/*
 * A symbolizer shared by several profilers (cprof record): the sharer sees
 * a library loaded since it was made, the object lives until the last
 * reference is dropped, and every sharer unwinds with its one unwinder.
 */
Test(symbolize, shared_until_the_last_reference)
{
	struct symbolizer *shared = NULL, *wrong = NULL;
	struct unwinder *u1 = NULL, *u2 = NULL, *other = NULL;
	struct symbol_info si;
	void *h;
	uint64_t addr = load_late_library(&h);

	cr_assert_eq(symbolizer_share(&wrong, sym, getppid()), -EINVAL);
	cr_assert_null(wrong);
	cr_assert_eq(symbolizer_share(&shared, sym, getpid()), 0);
	cr_assert_eq(shared, sym, "a sharer gets the same object");
	cr_assert_eq(symbolizer_unwinder(shared, &u1), 0);
	cr_assert_eq(symbolizer_unwinder(sym, &u2), 0);
	cr_assert_eq(u1, u2, "one unwinder for every sharer");
	cr_assert_eq(unwinder_new(&other, symbolizer_dwfl(sym), getpid()), -EBUSY);

	/* The creator lets go first: the sharer's object lives on. */
	symbolizer_unref(sym);
	sym = NULL;
	cr_assert_eq(symbolizer_lookup(shared, addr, &si), 0);
	cr_assert_not_null(si.module, "the share refreshed the modules");
	cr_assert_not_null(strstr(si.frames[si.nframes - 1].function, "td_init"));
	symbolizer_unref(shared);
	dlclose(h);
}

/* A forked copy has our address space: the truth is known in here. */
Test(symbolize, works_after_the_target_exits)
{
	struct symbolizer *s;
	struct symbol_info si;
	int line, status;
	uint64_t vdso = vdso_symbol("__vdso_clock_gettime");
	uint64_t pc = known_function(&line);
	int pipefd[2];
	pid_t child;
	char c;

	cr_assert_eq(pipe(pipefd), 0);
	child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		close(pipefd[1]);
		/* Until the parent closes its end. */
		(void)!read(pipefd[0], &c, 1);
		_exit(0);
	}
	close(pipefd[0]);
	cr_assert_eq(symbolizer_new(&s, child), 0);
	close(pipefd[1]);
	cr_assert_eq(waitpid(child, &status, 0), child);

	/* Nothing looked up before the exit: all of it is read afterwards. */
	cr_assert_eq(symbolizer_lookup(s, pc, &si), 0);
	cr_assert_str_eq(si.frames[0].function, "known_function");
	cr_assert_eq(si.frames[0].line, line);
	expect_vdso_clock_gettime(s, vdso);
	cr_assert_eq(symbolizer_lookup(s, libc_function("qsort"), &si), 0);
	cr_assert_str_eq(si.frames[si.nframes - 1].function, "qsort");
	cr_assert_eq(symbolizer_refresh(s), -ESRCH);
	cr_assert_eq(symbolizer_lookup(s, pc, &si), 0);
	symbolizer_unref(s);
}

Test(symbolize, no_such_process)
{
	struct symbolizer *s = NULL;
	pid_t child = fork();
	int status;

	cr_assert_geq(child, 0);
	if (child == 0)
		_exit(0);
	cr_assert_eq(waitpid(child, &status, 0), child);
	cr_assert_eq(symbolizer_new(&s, child), -ESRCH);
	cr_assert_null(s);
	cr_assert_eq(symbolizer_new(&s, 0), -EINVAL);
}

static const struct profile_location *location(const struct profile *p, uint64_t id)
{
	cr_assert(id >= 1 && id <= p->nlocations);
	return &p->locations[id - 1];
}

static const struct profile_function *function(const struct profile *p, uint64_t id)
{
	cr_assert(id >= 1 && id <= p->nfunctions);
	return &p->functions[id - 1];
}

Test(symbolize, fill_profile)
{
	const struct profile_value_type types[] = { { "samples", "count" } };
	const struct profile_location *l;
	const struct profile_mapping *m;
	struct profile *p;
	int line, leaf_line, call_line;
	uint64_t known = known_function(&line), inl = outer_of_inline(&leaf_line, &call_line);
	uint64_t q = libc_function("qsort");
	uint64_t id_unknown, id_q, id_known, id_inl, id_q2;
	size_t nmappings;

	cr_assert_eq(profile_new(&p, types, 1), 0);
	/* libc first: the main executable's mapping must still be number 1. */
	cr_assert_eq(profile_location_for_address(p, 0x10, &id_unknown), 0);
	cr_assert_eq(profile_location_for_address(p, q, &id_q), 0);
	cr_assert_eq(profile_location_for_address(p, known, &id_known), 0);
	cr_assert_eq(profile_location_for_address(p, inl, &id_inl), 0);
	cr_assert_eq(symbolizer_fill_profile(sym, p), 0);

	cr_assert_geq(p->nmappings, 2);
	m = &p->mappings[0];
	cr_assert_eq(m->id, 1);
	cr_assert_str_eq(m->file, self_exe());
	cr_assert_gt(strlen(m->build_id), 0);
	cr_assert(m->has_functions && m->has_filenames && m->has_line_numbers &&
		  m->has_inline_frames);
	cr_assert(m->start <= known && known < m->limit);

	l = location(p, id_known);
	cr_assert_eq(l->mapping_id, 1);
	cr_assert_eq(l->nlines, 1);
	cr_assert_eq(l->lines[0].line, line);
	cr_assert_str_eq(function(p, l->lines[0].function_id)->name, "known_function");
	cr_assert_str_eq(base(function(p, l->lines[0].function_id)->file), "test-symbolize.c");
	cr_assert_eq(function(p, l->lines[0].function_id)->start_line, known_decl_line);

	l = location(p, id_inl);
	cr_assert_eq(l->nlines, 2);
	cr_assert_str_eq(function(p, l->lines[0].function_id)->name, "inlined_leaf");
	cr_assert_eq(l->lines[0].line, leaf_line);
	cr_assert_str_eq(function(p, l->lines[1].function_id)->name, "outer_of_inline");
	cr_assert_eq(l->lines[1].line, call_line);

	l = location(p, id_unknown);
	cr_assert_eq(l->mapping_id, 0);
	cr_assert_eq(l->nlines, 1);
	cr_assert_str_eq(function(p, l->lines[0].function_id)->name, "0x10");

	l = location(p, id_q);
	cr_assert_gt(l->mapping_id, 1);
	m = &p->mappings[l->mapping_id - 1];
	cr_assert_not_null(strstr(m->file, "/libc.so.6"));
	cr_assert_eq(strlen(m->build_id), 40);
	cr_assert(m->has_functions);
	cr_assert_str_eq(function(p, l->lines[l->nlines - 1].function_id)->name, "qsort");

	/* A second fill adds no mapping twice and leaves filled locations be. */
	nmappings = p->nmappings;
	cr_assert_eq(profile_location_for_address(p, q + 4, &id_q2), 0);
	cr_assert_eq(symbolizer_fill_profile(sym, p), 0);
	cr_assert_eq(p->nmappings, nmappings);
	cr_assert_eq(location(p, id_q2)->mapping_id, location(p, id_q)->mapping_id);
	profile_free(p);
}

static __attribute__((noinline, noclone)) unsigned long remap_me(unsigned long x)
{
	return x * 2654435761u + 1;
}

/*
 * The shape node gives its address space: part of the executable's text
 * mapped a second time far above the first, and anonymous executable
 * memory (JIT code) between the two. libdw's module then spans both
 * views: the JIT code must not take its names, the far view must.
 */
Test(symbolize, a_file_mapped_again_far_away)
{
	const struct profile_value_type types[] = { { "samples", "count" } };
	uint64_t fn = (uint64_t)(uintptr_t)remap_me, page = fn & ~4095ULL, id_view, id_jit;
	uint8_t *view, *jit;
	const struct map_entry *e;
	const struct profile_location *l;
	struct symbol_info si;
	struct maps maps = { 0 };
	struct profile *p;
	uint64_t file_off;
	int fd;

	cr_assert_eq(maps_read(getpid(), &maps), 0);
	e = maps_find(&maps, fn);
	cr_assert_not_null(e);
	file_off = page - e->start + e->offset;
	maps_release(&maps);
	fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	cr_assert_geq(fd, 0);
	view = mmap((void *)0x7e0000000000ULL, 8192, PROT_READ | PROT_EXEC,
		    MAP_PRIVATE | MAP_FIXED_NOREPLACE, fd, (off_t)file_off);
	close(fd);
	cr_assert_neq(view, MAP_FAILED, "mmap of the second view: %s", strerror(errno));
	jit = mmap((void *)0x680000000000ULL, 4096, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	cr_assert_neq(jit, MAP_FAILED, "mmap of the JIT page: %s", strerror(errno));
	jit[0] = 0xeb; /* jmp . */
	jit[1] = 0xfe;
	cr_assert_eq(mprotect(jit, 4096, PROT_READ | PROT_EXEC), 0);
	/* The second view is called: it is code, not a copy of bytes. */
	cr_assert_eq(((unsigned long (*)(unsigned long))(view + (fn - page)))(3), remap_me(3));

	symbolizer_unref(sym);
	cr_assert_eq(symbolizer_new(&sym, getpid()), 0);
	cr_assert_eq(symbolizer_lookup(sym, (uint64_t)(uintptr_t)view + (fn - page) + 1, &si), 0);
	cr_expect_str_eq(si.frames[si.nframes - 1].function, "remap_me");
	cr_assert_eq(symbolizer_lookup(sym, (uint64_t)(uintptr_t)jit + 1, &si), 0);
	cr_expect_null(si.module, "the JIT page was taken for %s's",
		       si.module ? si.module->path : "");
	cr_expect(!strncmp(si.frames[0].function, "[JIT] 0x", 8), "%s", si.frames[0].function);

	/* No mapping of the profile claims the JIT page; the far view is one. */
	cr_assert_eq(profile_new(&p, types, 1), 0);
	cr_assert_eq(profile_location_for_address(p, (uint64_t)(uintptr_t)view + (fn - page),
						  &id_view), 0);
	cr_assert_eq(profile_location_for_address(p, (uint64_t)(uintptr_t)jit, &id_jit), 0);
	cr_assert_eq(symbolizer_fill_profile(sym, p), 0);
	for (size_t i = 0; i < p->nmappings; i++)
		cr_expect(!(p->mappings[i].start <= (uint64_t)(uintptr_t)jit &&
			    (uint64_t)(uintptr_t)jit < p->mappings[i].limit),
			  "mapping %s [%#" PRIx64 ", %#" PRIx64 ") claims the JIT page",
			  p->mappings[i].file, p->mappings[i].start, p->mappings[i].limit);
	l = location(p, id_jit);
	cr_expect_eq(l->mapping_id, 0);
	l = location(p, id_view);
	cr_assert_gt(l->mapping_id, 0);
	cr_expect_eq(p->mappings[l->mapping_id - 1].start, (uint64_t)(uintptr_t)view);
	cr_expect_eq(p->mappings[l->mapping_id - 1].offset, file_off);
	profile_free(p);
	munmap(view, 8192);
	munmap(jit, 4096);
}

/* The symbolizer made again: it reads the perf map when it is made. */
static void reread_perf_map(void)
{
	symbolizer_unref(sym);
	cr_assert_eq(symbolizer_new(&sym, getpid()), 0);
}

/* The innermost function named at @address. */
static const char *function_at(uint64_t address)
{
	static struct symbol_info si;

	cr_assert_eq(symbolizer_lookup(sym, address, &si), 0);
	return si.frames[0].function;
}

/*
 * The perf map of generated code, /tmp/perf-PID.map: the last line for an
 * address holds, malformed lines are skipped, and a map that is no
 * regular file (a FIFO no JIT writes) is not waited on.
 */
Test(symbolize, perf_map_names_generated_code)
{
	char path[64];
	uint8_t *jit;
	uint64_t a;
	const char *name;
	FILE *f;

	jit = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		   0);
	cr_assert_neq(jit, MAP_FAILED);
	a = (uint64_t)(uintptr_t)jit;
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)getpid());
	f = fopen(path, "we");
	cr_assert_not_null(f);
	fprintf(f, "%" PRIx64 " 100 old_code\n", a);
	fprintf(f, "not a line\n%" PRIx64 " zz broken\n%" PRIx64 " 0 empty\n", a, a);
	fprintf(f, "%" PRIx64 " 40 LazyCompile:*work /app/work.js:3\n", a);
	fprintf(f, "%" PRIx64 " 10 stub with spaces\n", a + 0x80);
	fclose(f);
	reread_perf_map();
	cr_expect_str_eq(function_at(a + 0x10), "LazyCompile:*work /app/work.js:3");
	cr_expect_str_eq(function_at(a + 0x50), "old_code");
	cr_expect_str_eq(function_at(a + 0x84), "stub with spaces");
	name = function_at(a + 0x200);
	cr_expect(!strncmp(name, "[JIT] 0x", 8), "%s", name);
	unlink(path);

	/* Untrusted text: control characters shown as '?', a line too long
	 * for any name skipped, and the lines after it still read. */
	f = fopen(path, "we");
	cr_assert_not_null(f);
	fprintf(f, "%" PRIx64 " 40 evil\x1b[2Jname\tx\n", a);
	fprintf(f, "%" PRIx64 " 10 ", a + 0x80);
	for (int i = 0; i < 10000; i++)
		fputc('x', f);
	fprintf(f, "\n%" PRIx64 " 10 after_long\n", a + 0x100);
	fclose(f);
	reread_perf_map();
	cr_expect_str_eq(function_at(a + 0x10), "evil?[2Jname?x");
	name = function_at(a + 0x84);
	cr_expect(!strncmp(name, "[JIT] 0x", 8), "%s", name);
	cr_expect_str_eq(function_at(a + 0x104), "after_long");
	/* Anyone may put a file of that name in /tmp: perf reads one owned
	 * by root or the process's user only, and so does cprof. */
	if (geteuid() == 0) {
		cr_assert_eq(chown(path, 65534, 65534), 0, "%s", strerror(errno));
		reread_perf_map();
		name = function_at(a + 0x104);
		cr_expect(!strncmp(name, "[JIT] 0x", 8), "a map owned by uid 65534 was read: %s",
			  name);
	}
	unlink(path);

	cr_assert_eq(mkfifo(path, 0600), 0);
	symbolizer_unref(sym);
	cr_assert_eq(symbolizer_new(&sym, getpid()), 0, "a FIFO for a map held the symbolizer");
	name = function_at(a + 0x10);
	cr_expect(!strncmp(name, "[JIT] 0x", 8), "%s", name);
	unlink(path);
	munmap(jit, 4096);
}

/* Every frame of the symbols of libc's functions @names, as text. */
static char *libc_symbols(const char *const *names, size_t n)
{
	struct symbolizer *s;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	cr_assert_not_null(f);
	cr_assert_eq(symbolizer_new(&s, getpid()), 0);
	for (size_t i = 0; i < n; i++)
		for (uint64_t off = 0; off < 64; off += 16) {
			struct symbol_info si;

			cr_assert_eq(symbolizer_lookup(s, libc_function(names[i]) + off, &si), 0);
			for (size_t k = 0; k < si.nframes; k++)
				fprintf(f, "%s+%" PRIu64 " %s %s:%d\n", names[i], off,
					si.frames[k].function, si.frames[k].file ? si.frames[k].file : "",
					si.frames[k].line);
		}
	symbolizer_unref(s);
	fclose(f);
	return text;
}

/*
 * libc6-dbg's sections are compressed: libdw inflates them all at every
 * open. The uncompressed copy (debug-cache.h) made by one symbolizer is
 * read by the next, and gives every frame of libc the same function, file
 * and line as the compressed file; a copy that is not whole is made again.
 */
Test(symbolize, a_compressed_debug_file_reads_the_same_from_its_copy)
{
	static const char *const names[] = { "qsort", "malloc", "printf", "pthread_create",
					     "nanosleep", "strtod", "regcomp", "fopen" };
	const char *dir = th_tmp_dir("debug-cache");
	char copy[PATH_MAX];
	struct symbol_info si;
	char *plain, *made, *read, *remade;
	struct stat st;
	off_t size;

	cr_assert_eq(symbolizer_lookup(sym, libc_function("qsort"), &si), 0);
	if (!si.module->has_lines)
		TH_SKIP_MISSING("libc without debug info: apt-get install libc6-dbg");
	snprintf(copy, sizeof(copy), "%s/debug/%s.debug", dir, si.module->build_id);
	unlink(copy);
	cr_assert_eq(setenv("CPROF_CACHE_DIR", "off", 1), 0);
	plain = libc_symbols(names, ARRAY_SIZE(names));
	cr_assert_eq(setenv("CPROF_CACHE_DIR", dir, 1), 0);
	made = libc_symbols(names, ARRAY_SIZE(names));
	if (stat(copy, &st) < 0) {
		unsetenv("CPROF_CACHE_DIR");
		cr_skip_test("libc's debug file is not compressed: nothing to copy");
	}
	size = st.st_size;
	read = libc_symbols(names, ARRAY_SIZE(names));
	cr_assert_eq(truncate(copy, size / 2), 0);
	remade = libc_symbols(names, ARRAY_SIZE(names));
	unsetenv("CPROF_CACHE_DIR");
	cr_expect_str_eq(made, plain);
	cr_expect_str_eq(read, plain);
	cr_expect_str_eq(remade, plain);
	cr_assert_eq(stat(copy, &st), 0);
	cr_expect_eq(st.st_size, size, "the copy cut short was not made again");
	cr_log_info("libc's frames, %zu bytes of text, alike from the compressed file and its "
		    "copy (%lld bytes)", strlen(plain), (long long)size);
	free(plain);
	free(made);
	free(read);
	free(remade);
}
