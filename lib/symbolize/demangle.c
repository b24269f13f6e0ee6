/*
 * Names as their languages print them, with GNU libiberty's demanglers (the
 * ones c++filt, gdb and perf use; Debian's libiberty-dev, linked statically):
 *
 *  - C++ (Itanium ABI, "_Z..."): with parameters, exactly as __cxa_demangle
 *    prints them (libstdc++ carries a copy of the same cp-demangle.c):
 *    "ns::C::m(int) const", "f() [clone .cold]";
 *  - Rust, legacy mangling ("_ZN...17h<16 hex>E"): "spin::Busy<T>::spin",
 *    without the hash and with the $LT$/$u20$/.. escapes decoded (C++'s
 *    demangler alone would print "spin::Busy$LT$T$GT$::spin::h4ab5...");
 *  - Rust, v0 mangling ("_R..."): "<spin::Busy<u64>>::spin", without the
 *    crate disambiguators ("spin[de33402ef7736faa]").
 *
 * Hashes and disambiguators are left out as rustc-demangle's "{:#}" form
 * leaves them out (rustfilt, std's backtraces, perf): they differ between
 * builds, and a name that changes with every build breaks `pprof -diff_base`.
 * c++filt prints them because it passes DMGL_VERBOSE by default; `c++filt -i`
 * prints what we print (tests/unit/test-demangle.c compares the two).
 *
 * Suffixes that compilers append to a mangled name (GCC's ".cold",
 * ".constprop.0", ".isra.0", ".part.0"; LLVM's ".llvm.<number>"):
 *
 *  - ".llvm.<number>" is dropped from every name. ThinLTO appends it to a
 *    local function it promotes to global, and the number is a hash of the
 *    module, new with each build (rustc-demangle drops it too; c++filt would
 *    print "f() [clone .llvm.1234]");
 *  - C++ keeps the others as c++filt prints them: "f() [clone .cold]";
 *  - Rust keeps them as rustc-demangle prints them, as they are after the
 *    name: "spin::f.cold". (libiberty's Rust demangler drops any suffix, so
 *    c++filt prints "spin::f": the language's own demangler wins.)
 *
 * No allocation happens inside libiberty here (its _callback entry points
 * print into our buffer), so an allocation failure is ours to report. The
 * C++ demangler keeps arrays proportional to the name on the stack, and
 * refuses names of more than 1024 characters rather than overflow it (GCC
 * PR 87675): those stay mangled, as with __cxa_demangle and c++filt. A
 * symbol table is the target's, so that guard stays on.
 */
#include <libiberty/demangle.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* libiberty.h (which demangle.h includes) has its own; util.h's follows. */
#undef ARRAY_SIZE
#include "symbolize/symbolize-private.h"

/* DMGL_PARAMS: "f(int)", not "f". Not DMGL_VERBOSE: see above. */
#define DEMANGLE_OPTIONS (DMGL_PARAMS | DMGL_ANSI)

struct demangle_buf {
	char *text;
	size_t len, alloc;
	bool failed; /* -ENOMEM on the way: the text is incomplete */
};

static void demangle_append(const char *s, size_t n, void *opaque)
{
	struct demangle_buf *b = opaque;

	if (b->failed)
		return;
	if (GROW(b->text, b->len + n + 1, b->alloc) < 0) {
		b->failed = true;
		return;
	}
	memcpy(b->text + b->len, s, n);
	b->len += n;
	b->text[b->len] = '\0';
}

/*
 * Copies @name without its ".llvm.<number>" parts. ThinLTO writes the number
 * in decimal; hex is taken too, as rustc-demangle does. A later suffix may
 * follow it ("f.llvm.123.cold"). NULL on -ENOMEM.
 */
static char *drop_llvm_suffix(const char *name)
{
	static const char llvm[] = ".llvm.";
	char *out = strdup(name), *p = out;

	while (p && (p = strstr(p, llvm)) != NULL) {
		const char *num = p + strlen(llvm);
		size_t n = strcspn(num, ".");

		if (n > 0 && strspn(num, "0123456789abcdefABCDEF") == n)
			memmove(p, num + n, strlen(num + n) + 1);
		else
			p++;
	}
	return out;
}

/*
 * Where the ".suffix" of a Rust name starts (after the hash's 'E' of a
 * legacy name, at the first '.' of a v0 name), or NULL when it has none.
 * Only called for names that libiberty's Rust demangler accepted, so the
 * legacy hash "17h" + 16 hex digits + "E" is there.
 */
static const char *rust_suffix(const char *name)
{
	const char *p;

	if (strncmp(name, "_R", 2) == 0)
		return strchr(name, '.');
	for (p = strstr(name, "17h"); p; p = strstr(p + 1, "17h")) {
		size_t hex = strspn(p + 3, "0123456789abcdef");

		if (hex == 16 && p[19] == 'E' && (p[20] == '.' || p[20] == '\0'))
			return p[20] ? p + 20 : NULL;
	}
	return NULL;
}

char *demangle(const char *name)
{
	struct demangle_buf b = { 0 };
	char *mangled;

	/* C++ and Rust legacy names start with _Z, Rust v0 with _R; plain C
	 * names are left as they are. */
	if (!name || (strncmp(name, "_Z", 2) != 0 && strncmp(name, "_R", 2) != 0))
		return NULL;
	mangled = drop_llvm_suffix(name);
	if (!mangled)
		return NULL;

	/* Rust first: a legacy Rust name is also a valid C++ name (c++filt
	 * tries them in this order too). */
	if (rust_demangle_callback(mangled, DEMANGLE_OPTIONS, demangle_append, &b)) {
		const char *suffix = rust_suffix(mangled);

		if (suffix)
			demangle_append(suffix, strlen(suffix), &b);
	} else {
		/* A failed attempt may have printed part of a name. */
		b.len = 0;
		b.failed = !cplus_demangle_v3_callback(mangled, DEMANGLE_OPTIONS, demangle_append,
						       &b) || b.failed;
	}
	free(mangled);
	if (b.failed || !b.text) {
		free(b.text);
		return NULL;
	}
	return b.text;
}

const char *demangle_pooled(struct strpool *sp, const char *name)
{
	char *d = demangle(name);
	const char *pooled;

	if (!d)
		return NULL;
	pooled = strpool_intern(sp, d);
	free(d);
	return pooled;
}
