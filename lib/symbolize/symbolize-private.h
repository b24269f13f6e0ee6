/* Inside lib/symbolize: the symbolizer's state and the rooms' entry points. */
#ifndef CPROF_SYMBOLIZE_PRIVATE_H
#define CPROF_SYMBOLIZE_PRIVATE_H

#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "maps/maps.h"
#include "symbolize/symbolize.h"
#include "util/util.h"

/* symtab.c: a module's function symbols sorted by address, built once. */
struct symtab_entry {
	uint64_t addr, size; /* absolute (biased) address */
	const char *name;    /* owned by libelf, lives as long as the Dwfl */
};

struct symtab {
	struct symtab_entry *entries;
	size_t nr;
};

int symtab_build(struct symtab *t, Dwfl_Module *mod);
/* The symbol that covers @addr, or NULL. */
const struct symtab_entry *symtab_find(const struct symtab *t, uint64_t addr);
void symtab_release(struct symtab *t);

/* One module of the target, hung on the Dwfl_Module's userdata. */
struct sym_module {
	Dwfl_Module *mod;
	pid_t pid;        /* whose /proc/PID/root and map_files it is opened from */
	uint64_t map_end; /* end of its first mapping; 0 if unknown */
	bool other_root;  /* the target is in a container: paths are its own */
	struct symbol_module pub;
	const char *base_name; /* for "name+0xoff" */
	bool has_elf;
	Dwarf_Addr bias; /* address - bias = ELF virtual address */
	bool prepared;   /* symtab built, DWARF looked for */
	struct symtab symtab;
	/* fde.c: .eh_frame_hdr's table of function starts, in the ELF's data. */
	const unsigned char *fde_table;
	size_t fde_count;	/* 0: none read */
	uint64_t fde_base;	/* the address its offsets are from */
};

/* fde.c: finds @m's table of function starts, if it has the usual one. */
void fde_table_find(struct sym_module *m);
/* The start of the function whose code holds @address, by the FDE that
 * covers it; false when none does. */
bool fde_function_start(struct sym_module *m, uint64_t address, uint64_t *ret_start);

/* perfmap.c: /tmp/perf-PID.map, sorted by start. */
struct perfmap_entry {
	uint64_t start, end;
	const char *name; /* pooled */
	size_t seq;       /* its line: a later one wins */
};

struct perfmap {
	struct perfmap_entry *v;
	size_t n, alloc;
	bool found; /* the file was there when last read */
};

struct symbolizer {
	unsigned refs;            /* symbolizer_ref()'s, the creator's included */
	pid_t pid;
	Dwfl_Callbacks callbacks; /* libdw keeps a pointer to these */
	char *debuginfo_path;     /* NULL: libdw's default */
	bool other_root;          /* target_other_root() */
	Dwfl *dwfl;
	struct unwinder *unw; /* symbolizer_unwinder()'s, once asked */
	const char *exe; /* /proc/PID/exe as it was at symbolizer_new(); pooled */
	const char *program; /* the main module's path as started, or NULL; pooled */
	struct sym_module *main_module;
	struct sym_module **modules;
	size_t nmodules, modules_alloc;

	struct strpool strings; /* every name and path handed out */

	/* cache.c: address -> index in @infos. */
	struct u64map cache;
	struct symbol_info *infos;
	size_t ninfos, infos_alloc;

	/* Scratch for building one address's frames. */
	struct symbol_frame *scratch;
	size_t scratch_alloc;

	/* regions.c: the target's mappings, read again before each fill. */
	struct maps maps;
	/* perfmap.c: the JIT's names, read with the maps. */
	struct perfmap perfmap;
};

/* dwfl-process.c */
struct sym_module *symbolizer_module_of(struct symbolizer *s, uint64_t address);
/* Builds the symbol table and looks for DWARF, once. */
void sym_module_prepare(struct sym_module *m);

/* cache.c: cached "no module here" answers may now have one (a module
 * reported, a perf map read): forget them. 0 or -ENOMEM. */
int sym_cache_forget_moduleless(struct symbolizer *s);

/* regions.c: the mappings beyond libdw's modules. Reads them into
 * s->maps (kept as they were on failure). 0 or -errno. */
int sym_regions_read(struct symbolizer *s);
/* @address is in a mapping of no file (anonymous, [heap], [stack]...):
 * no module's, whatever libdw's span says. */
bool sym_region_outside_files(const struct symbolizer *s, uint64_t address);
/* @address is in anonymous executable memory: generated code. */
bool sym_region_is_jit(const struct symbolizer *s, uint64_t address);
/* @address as the address of its file's first view (the mapping of its
 * ELF header, which libdw's module is reported from): itself unless its
 * mapping is another view of the file, mapped elsewhere. */
uint64_t sym_region_translate(const struct symbolizer *s, uint64_t address);
/* The mapping a profile gives @address: its file's image that libdw's
 * module describes, or the other view of the file that holds it; start,
 * end and file offset. False when no file's mapping holds it. */
bool sym_region_run(const struct symbolizer *s, uint64_t address, uint64_t *ret_start,
		    uint64_t *ret_end, uint64_t *ret_offset);
/* A name for an address no module holds: the perf map's, else "[JIT]
 * 0x..." in executable anonymous memory, "[heap] 0x...", "[anon] 0x...",
 * else "0x...". Pooled. */
const char *sym_region_name(struct symbolizer *s, uint64_t address);

/* perfmap.c: reads the target's perf map into s->perfmap (none: empty).
 * 0 or -ENOMEM. */
int perfmap_read(struct symbolizer *s);
/* The map's name for @address, or NULL. */
const char *perfmap_name(const struct symbolizer *s, uint64_t address);

/* lines.c: what DWARF says about one address. */
struct dwarf_frames {
	size_t n;         /* frames put in s->scratch, innermost first */
	bool complete;    /* the last is the (non-inlined) containing function */
	const char *file; /* if !complete: where the last frame was inlined */
	int line;
	uint64_t entry; /* the containing function's entry address, 0 if unknown */
};

/* Fills @ret (n == 0: no DWARF function here). Returns 0 or -ENOMEM. */
int lines_frames(struct symbolizer *s, struct sym_module *m, uint64_t address,
		 struct dwarf_frames *ret);
/* Puts @f at s->scratch[@n], growing it. 0 or -ENOMEM. */
int scratch_push(struct symbolizer *s, size_t n, const struct symbol_frame *f);
/* File and line of @address from the line table alone; false if none. */
bool lines_file_line(struct symbolizer *s, struct sym_module *m, uint64_t address,
		     const char **ret_file, int *ret_line);

/* demangle.c: C++ (Itanium ABI) and Rust (legacy and v0) names as their
 * languages print them; NULL when @name is none of those, is not valid, or
 * memory ran out. The result is pooled in @sp. */
const char *demangle_pooled(struct strpool *sp, const char *name);
/* The same, returning a malloc()ed string (NULL: not demangled). */
char *demangle(const char *name);

#endif
