/*
 * Addresses of a process -> functions, file:line and inline frames, with
 * libdw. One Dwfl per target process, reported from /proc/PID/maps (the vDSO
 * included) while the process is alive; ELF images are opened up front so
 * that symbolization still works after the target has exited. Results are
 * cached per address: profiles repeat the same PCs thousands of times.
 */
#ifndef CPROF_SYMBOLIZE_H
#define CPROF_SYMBOLIZE_H

#include <elfutils/libdwfl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "profile/profile.h"

struct symbolizer;

struct symbol_frame {
	const char *function;    /* demangled name; never NULL */
	const char *system_name; /* linkage (mangled) name; never NULL */
	const char *file;        /* source file, NULL when unknown */
	int line;                /* 0 when unknown */
	int start_line;          /* line of the function's declaration, 0 if unknown */
};

struct symbol_module {
	const char *path;     /* file name as mapped, "[vdso]", or NULL if no module */
	const char *build_id; /* lower-case hex, "" when the file has none */
	uint64_t start, end;  /* address range of the module in the process */
	uint64_t offset;      /* file offset mapped at @start */
	bool has_symbols, has_lines;
};

struct symbol_info {
	const struct symbol_frame *frames; /* innermost (inlined) first */
	size_t nframes;                    /* >= 1 */
	const struct symbol_module *module;
	uint64_t offset_in_function; /* address - start of the outermost function */
};

/*
 * Reports the modules of live process @pid and opens their ELF files.
 * Several profilers of one target may share one (symbolizer_ref()): its
 * files are opened and its DWARF read once, and each address symbolized
 * once for all their profiles. The last symbolizer_unref() frees it.
 */
int symbolizer_new(struct symbolizer **ret, pid_t pid);
struct symbolizer *symbolizer_ref(struct symbolizer *s);
void symbolizer_unref(struct symbolizer *s);
/* @shared with a reference taken and its modules refreshed (a library
 * loaded since is named too), or, when NULL, symbolizer_new(). */
int symbolizer_share(struct symbolizer **ret, struct symbolizer *shared, pid_t pid);

/* The Dwfl with the target's modules, for lib/unwind. Owned by @s. */
Dwfl *symbolizer_dwfl(struct symbolizer *s);

/* The unwinder on that Dwfl, made at the first call: a Dwfl takes one
 * (unwinder_new()), so every sharer of @s unwinds with this one, from
 * one thread at a time. Owned by @s. 0 or -errno. */
struct unwinder;
int symbolizer_unwinder(struct symbolizer *s, struct unwinder **ret);
/* symbolizer_share() and its unwinder, as a sampler opens the target's
 * modules; @err says which failed. On failure *@ret is the caller's to
 * unref (NULL when the modules could not be read). */
int symbolizer_share_unwinding(struct symbolizer **ret, struct unwinder **ret_unw,
			       struct symbolizer *shared, pid_t pid, char *err, size_t errlen);

/*
 * Re-reads /proc/PID/maps and reports modules that appeared since (dlopen).
 * Safe to call when the process is gone (returns -ESRCH, keeps what it has).
 */
int symbolizer_refresh(struct symbolizer *s);
/* The same for a callback's void * (record_stacks_refresh_with()). */
int symbolizer_refresh_arg(void *symbolizer);

/*
 * Symbolizes @address (a leaf PC or a return address - 1). An address with no
 * symbol still gets one frame, named "module+0xoff" or "0xaddr". The result
 * is cached and stays valid until symbolizer_unref().
 */
int symbolizer_lookup(struct symbolizer *s, uint64_t address, struct symbol_info *ret);

/*
 * Gives every location of @p that has no lines yet its lines, functions and
 * mapping (one profile mapping per module, the main executable first).
 */
int symbolizer_fill_profile(struct symbolizer *s, struct profile *p);

/*
 * The address range of the first module whose file name starts with
 * @prefix (e.g. "cprof-agent"). 0, or -ENOENT.
 */
int symbolizer_module_range(struct symbolizer *s, const char *prefix, uint64_t *ret_start,
			    uint64_t *ret_end);

/*
 * The program's own module (its main executable) once an address in it has
 * been looked up, so its symbols and debug information have been looked
 * for; NULL before, or when it has no module. Owned by @s.
 */
const struct symbol_module *symbolizer_program(struct symbolizer *s);

/* ---- text (text.c) ------------------------------------------------------ */

/* The frame's source file, else its module's path, else "?". */
const char *symbol_file_or_module(const struct symbol_frame *f, const struct symbol_info *info);
/* "libfoo.so+0x1234" and "0x7f..." names (no symbol) carry their own
 * offset; writers still add offset_in_function where it is not 0 (0x1234
 * is then the start of the function, by its FDE). */
bool symbol_name_has_offset(const char *name);
/*
 * The name ends with its own parameter list, as a demangled C++ name does:
 * "ns::f(int)", "C::m() const &", "f() [clone .cold]". C and Rust names
 * do not ("main", "<spin::Busy<(u32, i8)>>::spin", "f::{{closure}}").
 */
bool symbol_name_has_params(const char *name);
/*
 * Writes the frames of @pcs (leaf first) to @f in Go's legacy text layout:
 * "#\t0xPC\tfunction+0xOFF\tfile:line", inlined frames innermost first.
 */
void symbolizer_write_frames(struct symbolizer *s, const uint64_t *pcs, size_t n, FILE *f);

#endif
