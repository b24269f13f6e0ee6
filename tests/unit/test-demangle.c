/*
 * demangle(): names as their languages print them, checked three ways:
 *
 *  - against the names written out in the table below;
 *  - against the demanglers the world uses, run at test time: `c++filt -i`
 *    (Debian's binutils; -i leaves out what c++filt calls implementation
 *    details: Rust's hashes and crate disambiguators) for C++ and Rust, and
 *    `rustfilt` (rustc-demangle, Rust's own demangler) for Rust;
 *  - for C++, against libstdc++'s __cxa_demangle (what cprof used before) on
 *    every C++ name libstdc++ itself exports.
 *
 * Where cprof differs from an oracle on purpose, the test says so:
 *  - ".llvm.<number>" (ThinLTO's promotion suffix, new with each build) is
 *    dropped everywhere; c++filt prints "f() [clone .llvm.123]", rustfilt
 *    keeps it when another suffix follows ("f.llvm.123.cold");
 *  - a Rust name keeps its other suffixes as rustfilt prints them
 *    ("spin::main.cold"); libiberty's Rust demangler, and so c++filt,
 *    drops them.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "symbolize/symbolize-private.h"
#include "testhelp.h"

TestSuite(demangle, .init = th_init, .fini = th_cleanup, .timeout = 60);

enum lang { CXX, RUST };

struct name_case {
	enum lang lang;
	const char *mangled;
	const char *want; /* what cprof prints */
	const char *kept; /* Rust: the suffix cprof keeps and c++filt drops */
};

static const struct name_case cases[] = {
	/* C++: templates, operators, qualifiers, lambdas, ABI tags, clones. */
	{ CXX, "_ZN3foo3barEi", "foo::bar(int)" },
	{ CXX, "_ZNK2ns5inner3BoxIdLi3EE3sumEv", "ns::inner::Box<double, 3>::sum() const" },
	{ CXX, "_ZNK2ns5inner3BoxIdLi3EEplERKS2_",
	  "ns::inner::Box<double, 3>::operator+(ns::inner::Box<double, 3> const&) const" },
	{ CXX, "_ZNK2ns5inner3BoxIdLi3EEcvbEv", "ns::inner::Box<double, 3>::operator bool() const" },
	{ CXX, "_ZNO2ns5inner3BoxIdLi3EE4takeEv", "ns::inner::Box<double, 3>::take() &&" },
	{ CXX, "_ZNV1SclEi", "S::operator()(int) volatile" },
	{ CXX, "_ZN1SnwEm", "S::operator new(unsigned long)" },
	{ CXX, "_ZN1SC1Ev", "S::S()" },
	{ CXX, "_ZN1SD2Ev", "S::~S()" },
	{ CXX, "_ZZ7lambdasiENKUliE_clEi", "lambdas(int)::{lambda(int)#1}::operator()(int) const" },
	{ CXX, "_ZNSt17_Function_handlerIFiiEZ7lambdasiEUliE_E9_M_invokeERKSt9_Any_dataOi",
	  "std::_Function_handler<int (int), lambdas(int)::{lambda(int)#1}>::_M_invoke(std::_Any_data "
	  "const&, int&&)" },
	{ CXX, "_ZN12_GLOBAL__N_16hiddenEPFiPKczEy",
	  "(anonymous namespace)::hidden(int (*)(char const*, ...), unsigned long long)" },
	{ CXX, "_Z3fooB5cxx11v", "foo[abi:cxx11]()" },
	{ CXX, "_Z8variadicIJicdPKcEEiDpT_",
	  "int variadic<int, char, double, char const*>(int, char, double, char const*)" },
	{ CXX, "_Z11mysqld_mainiPPc", "mysqld_main(int, char**)" },
	{ CXX, "_Z5greetRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE.cold",
	  "greet(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > "
	  "const&) [clone .cold]" },
	{ CXX, "_Z3foov.constprop.0.isra.0", "foo() [clone .constprop.0] [clone .isra.0]" },
	{ CXX, "_Z3foov.part.0", "foo() [clone .part.0]" },
	{ CXX, "_Z3foov.llvm.4567890123", "foo()" },
	{ CXX, "_Z3foov.llvm.123.cold", "foo() [clone .cold]" },
	{ CXX, "_ZNK2ns5inner3BoxIdLi3EE3sumEv.llvm.16791135377908753612",
	  "ns::inner::Box<double, 3>::sum() const" },

	/* Rust, legacy mangling: generics, escapes, closures; no hash. */
	{ RUST, "_ZN4spin13Busy$LT$T$GT$4spin17h4ab55ab15241c6ffE", "spin::Busy<T>::spin" },
	{ RUST, "_ZN50_$LT$spin..Busy$LT$T$GT$$u20$as$u20$spin..Step$GT$4step17h39414a9f90ed5631E",
	  "<spin::Busy<T> as spin::Step>::step" },
	{ RUST, "_ZN4spin10in_closure28_$u7b$$u7b$closure$u7d$$u7d$17h0123456789abcdefE",
	  "spin::in_closure::{{closure}}" },
	{ RUST, "_ZN13grep_searcher8searcher4glue27ReadByLine$LT$M$C$R$C$S$GT$4fill17h170dd12cb8a57b57E",
	  "grep_searcher::searcher::glue::ReadByLine<M,R,S>::fill" },
	{ RUST,
	  "_ZN4core3ptr130drop_in_place$LT$core..result..Result$LT$$LP$$RP$$C$alloc..boxed..Box$LT$dyn"
	  "$u20$core..any..Any$u2b$core..marker..Send$GT$$GT$$GT$17h2ce2b911794feb32E",
	  "core::ptr::drop_in_place<core::result::Result<(),alloc::boxed::Box<dyn "
	  "core::any::Any+core::marker::Send>>>" },
	{ RUST,
	  "_ZN4core3ptr85drop_in_place$LT$std..rt..lang_start$LT$$LP$$RP$$GT$..$u7b$$u7b$closure$u7d$"
	  "$u7d$$GT$17h0950708456af621eE.llvm.5692440855055627542",
	  "core::ptr::drop_in_place<std::rt::lang_start<()>::{{closure}}>" },
	{ RUST, "_ZN4spin4main17h9d16d2309a206ce5E.cold", "spin::main.cold", ".cold" },

	/* Rust, v0 mangling: instantiated generics, closures, const generics;
	 * no crate disambiguators. */
	{ RUST, "_RNvMs0_Cs9osdHJuzNgD_4spinINtB5_4BusyyE4spinB5_", "<spin::Busy<u64>>::spin" },
	{ RUST, "_RNvMs0_Cs9osdHJuzNgD_4spinINtB5_4BusyTmaEE4spinB5_",
	  "<spin::Busy<(u32, i8)>>::spin" },
	{ RUST, "_RNvXs1_Cs9osdHJuzNgD_4spinINtB5_4BusyyENtB5_4Step4stepB5_",
	  "<spin::Busy<u64> as spin::Step>::step" },
	{ RUST, "_RINvCs9osdHJuzNgD_4spin11run_closureNCINvB2_10in_closureyE0EB2_",
	  "spin::run_closure::<spin::in_closure<u64>::{closure#0}>" },
	{ RUST, "_RNCNvCs9osdHJuzNgD_4spin4main0B3_", "spin::main::{closure#0}" },
	{ RUST, "_RINvCs9osdHJuzNgD_4spin5arrayKj3_EB2_", "spin::array::<3>" },
	{ RUST,
	  "_RINvNtCsgEmfK2I1SDS_4core3ptr13drop_in_placeINtNtCslNYArtu3iFV_5alloc5boxed3BoxDNtNtB4_"
	  "3any3AnyNtNtB4_6marker4SendEL_EECs9osdHJuzNgD_4spin",
	  "core::ptr::drop_in_place::<alloc::boxed::Box<dyn core::any::Any + core::marker::Send>>" },
	{ RUST,
	  "_RINvNtCsgEmfK2I1SDS_4core3ptr13drop_in_placeNtNtNtCsjrHSEGnQ3l9_3std2io5error5ErrorECs9"
	  "osdHJuzNgD_4spin.llvm.5529572029626710485",
	  "core::ptr::drop_in_place::<std::io::error::Error>" },
	/* From rustc 1.95's own librustc_driver: LLVM split a promoted function. */
	{ RUST,
	  "_RINvMNtCsgEmfK2I1SDS_4core3stre12trim_matchesNvMNtNtB5_4char7methodsc13is_whitespaceECs6"
	  "1nHkvlE5qF_9rustc_ast.llvm.13854487428119197880.cold",
	  "<str>::trim_matches::<<char>::is_whitespace>.cold", ".cold" },
	{ RUST, "_RNvCs9osdHJuzNgD_4spin4main.cold", "spin::main.cold", ".cold" },
};

/* The test's own ".llvm.<decimal>" remover, to feed the oracles. */
static char *without_llvm(const char *name)
{
	char *s = strdup(name), *p;

	cr_assert_not_null(s);
	while ((p = strstr(s, ".llvm.")) != NULL) {
		char *end = p + 6;

		while (*end >= '0' && *end <= '9')
			end++;
		memmove(p, end, strlen(end) + 1);
	}
	return s;
}

/*
 * Runs @prog @opt NAME... for the names of @lang in the table (each after
 * without_llvm() when @strip) and returns its output lines, one per name,
 * in *@ret_lines (NULL-terminated; free each, then the array).
 */
static size_t run_filter(const char *prog, const char *opt, enum lang lang, bool strip,
			 char ***ret_lines)
{
	const char *argv[ARRAY_SIZE(cases) + 3];
	char *names[ARRAY_SIZE(cases)], **lines, *p, *nl;
	size_t n = 0, argc = 0, nlines = 0;
	struct th_run r;

	argv[argc++] = prog;
	if (opt)
		argv[argc++] = opt;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		if (cases[i].lang != lang)
			continue;
		names[n] = strip ? without_llvm(cases[i].mangled) : strdup(cases[i].mangled);
		argv[argc++] = names[n++];
	}
	argv[argc] = NULL;
	th_run_cmd_ex(&r, 30000, 0, 0, argv);
	cr_assert_eq(r.exit_code, 0, "%s: exit %d: %s", prog, r.exit_code, r.err);
	lines = calloc(n + 1, sizeof(*lines));
	cr_assert_not_null(lines);
	for (p = r.out; *p && nlines < n; p = nl + 1) {
		nl = strchr(p, '\n');
		cr_assert_not_null(nl, "%s: unterminated output: %s", prog, p);
		lines[nlines++] = strndup(p, (size_t)(nl - p));
	}
	cr_assert_eq(nlines, n, "%s printed %zu lines for %zu names:\n%s", prog, nlines, n, r.out);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	th_run_release(&r);
	*ret_lines = lines;
	return n;
}

static void free_lines(char **lines)
{
	for (size_t i = 0; lines[i]; i++)
		free(lines[i]);
	free(lines);
}

static void require_program(const char *path, const char *package)
{
	if (access(path, X_OK) != 0)
		TH_SKIP_MISSING("%s is not installed (Debian package %s; scripts/setup installs it)",
			     path, package);
}

Test(demangle, names_as_the_table_says)
{
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char *d = demangle(cases[i].mangled);

		cr_expect_not_null(d, "%s: not demangled", cases[i].mangled);
		if (d)
			cr_expect_str_eq(d, cases[i].want, "%s", cases[i].mangled);
		free(d);
	}
}

/* C++: what `c++filt -i` prints, once ".llvm.N" is gone. */
Test(demangle, cxx_as_cxxfilt_prints_them)
{
	char **lines;
	size_t k = 0;

	require_program("/usr/bin/c++filt", "binutils");
	run_filter("/usr/bin/c++filt", "-i", CXX, true, &lines);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char *d;

		if (cases[i].lang != CXX)
			continue;
		d = demangle(cases[i].mangled);
		cr_expect(d && !strcmp(d, lines[k]), "%s:\n  c++filt -i: %s\n  cprof:      %s",
			  cases[i].mangled, lines[k], d ? d : "(not demangled)");
		cr_expect(!d || !strstr(d, ".llvm."), "%s: %s", cases[i].mangled, d);
		free(d);
		k++;
	}
	free_lines(lines);
}

/* Rust: what `c++filt -i` prints (libiberty's Rust demangler, given the
 * whole name: it drops every suffix itself), then the suffix we keep. */
Test(demangle, rust_as_cxxfilt_prints_them)
{
	char **lines, want[4096];
	size_t k = 0;

	require_program("/usr/bin/c++filt", "binutils");
	run_filter("/usr/bin/c++filt", "-i", RUST, false, &lines);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char *d;

		if (cases[i].lang != RUST)
			continue;
		d = demangle(cases[i].mangled);
		snprintf(want, sizeof(want), "%s%s", lines[k], cases[i].kept ? cases[i].kept : "");
		cr_expect(d && !strcmp(d, want), "%s:\n  c++filt -i: %s\n  cprof:      %s",
			  cases[i].mangled, lines[k], d ? d : "(not demangled)");
		free(d);
		k++;
	}
	free_lines(lines);
}

/* Rust: what rustfilt (rustc-demangle) prints, once ".llvm.N" is gone. */
Test(demangle, rust_as_rustfilt_prints_them)
{
	char **lines;
	size_t k = 0;

	require_program("/usr/bin/rustfilt", "rustfilt");
	run_filter("/usr/bin/rustfilt", NULL, RUST, true, &lines);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char *d;

		if (cases[i].lang != RUST)
			continue;
		d = demangle(cases[i].mangled);
		cr_expect(d && !strcmp(d, lines[k]), "%s:\n  rustfilt: %s\n  cprof:    %s",
			  cases[i].mangled, lines[k], d ? d : "(not demangled)");
		cr_expect(d && !strchr(d, '$') && !strstr(d, "::h"), "%s: %s", cases[i].mangled, d);
		free(d);
		k++;
	}
	free_lines(lines);
}

typedef char *(*cxa_demangle_fn)(const char *mangled, char *buf, size_t *len, int *status);

/*
 * Every C++ name that libstdc++ exports prints as its __cxa_demangle prints
 * it (cprof's demangler before libiberty's). Debian 12's libiberty is a
 * newer snapshot than GCC 12's libstdc++: on names with decltype() in a
 * template's return type the two print "(std::declval<T>)()" and
 * "std::declval<T>()" (6 of 79261 names of libLLVM and libclang-cpp; none
 * in libstdc++), and libiberty's spelling is c++filt's.
 */
Test(demangle, cxx_as_libstdcxx_prints_its_own_names)
{
	void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
	const char *argv[] = { "/usr/bin/nm", "-D", "--defined-only", NULL, NULL };
	cxa_demangle_fn cxa;
	Dl_info info;
	struct th_run r;
	size_t names = 0, same = 0;
	char *line, *save = NULL;

	if (!h)
		TH_SKIP_MISSING("libstdc++.so.6 is not installed");
	require_program("/usr/bin/nm", "binutils");
	cxa = (cxa_demangle_fn)dlsym(h, "__cxa_demangle");
	cr_assert_not_null(cxa);
	cr_assert(dladdr((void *)cxa, &info) && info.dli_fname, "no path for libstdc++");
	argv[3] = info.dli_fname;
	th_run_cmd_ex(&r, 30000, 0, 0, argv);
	cr_assert_eq(r.exit_code, 0, "nm: %s", r.err);
	for (line = strtok_r(r.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *name = strrchr(line, ' '), *at, *want, *d;
		int status = -1;

		if (!name || strncmp(name + 1, "_Z", 2) != 0)
			continue;
		name++;
		at = strchr(name, '@'); /* nm -D: "name@@GLIBCXX_3.4" */
		if (at)
			*at = '\0';
		want = cxa(name, NULL, NULL, &status);
		d = demangle(name);
		names++;
		if (status == 0 && d && !strcmp(d, want))
			same++;
		else
			cr_expect_fail("%s:\n  __cxa_demangle: %s\n  cprof:          %s", name,
				       status == 0 ? want : "(not demangled)", d ? d : "(not demangled)");
		free(want);
		free(d);
	}
	fprintf(stderr, "demangle: %zu of %zu C++ names of %s as __cxa_demangle prints them\n",
		same, names, info.dli_fname);
	cr_expect_gt(names, 1000, "too few C++ names in %s", info.dli_fname);
	th_run_release(&r);
	dlclose(h);
}

/* "_Z<n>aaa...av" in @buf (room for @n + 16): "aaa...a()". */
static const char *long_name(char *buf, size_t n)
{
	int len = snprintf(buf, 16, "_Z%zu", n);

	memset(buf + len, 'a', n);
	buf[len + n] = 'v';
	buf[len + n + 1] = '\0';
	return buf;
}

Test(demangle, other_names_are_left_alone)
{
	static const char *const plain[] = {
		"main", "work_a.cold", "_start", "", "_Z", "_R", "_ZN3foo", "_Rnot_rust",
		"_GLOBAL__sub_I_main",
	};
	char *huge, *d;

	cr_expect_null(demangle(NULL));
	for (size_t i = 0; i < ARRAY_SIZE(plain); i++) {
		d = demangle(plain[i]);
		cr_expect_null(d, "'%s' demangled to '%s'", plain[i], d);
		free(d);
	}

	/* A symbol table is the target's: a C++ name of a megabyte (valid: a
	 * function named by a million a's) is refused by libiberty, not
	 * demangled on our stack; up to 1024 characters are demangled. */
	huge = malloc((1 << 20) + 16);
	cr_assert_not_null(huge);
	cr_expect_null(demangle(long_name(huge, 1 << 20)));
	d = demangle(long_name(huge, 1000));
	cr_expect(d && strspn(d, "a") == 1000 && !strcmp(d + 1000, "()"), "%.40s...",
		  d ? d : "(not demangled)");
	free(d);
	free(huge);
}
