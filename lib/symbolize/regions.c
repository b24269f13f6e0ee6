/*
 * What the target's mappings say beyond libdw's modules. libdw makes one
 * module of a file from its first mapping to its last, so a file mapped
 * again far from the rest (node maps part of its text a second time, high
 * in the address space) makes a module that spans whatever lies between:
 * JIT code, the heap. So an address is a module's only where a mapping of
 * a file holds it; and a mapping whose start and file offset disagree with
 * the module's first mapping is another view of the file, whose addresses
 * are the ELF's at that offset.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "symbolize/symbolize-private.h"

static bool is_file(const struct map_entry *e)
{
	return e->inode != 0 || !strcmp(e->path, "[vdso]");
}

int sym_regions_read(struct symbolizer *s)
{
	struct maps m = { 0 };
	int r = maps_read(s->pid, &m);

	if (r < 0)
		return r;
	maps_release(&s->maps);
	s->maps = m;
	r = perfmap_read(s);
	return r < 0 ? r : sym_cache_forget_moduleless(s);
}

bool sym_region_outside_files(const struct symbolizer *s, uint64_t address)
{
	const struct map_entry *e = maps_find(&s->maps, address);

	/* Unknown (mapped since the maps were read): libdw's answer stands. */
	return e && !is_file(e);
}

bool sym_region_is_jit(const struct symbolizer *s, uint64_t address)
{
	const struct map_entry *e = maps_find(&s->maps, address);

	return e && !is_file(e) && (e->prot & MAPS_EXEC);
}

static bool same_file(const struct map_entry *a, const struct map_entry *b)
{
	return a->inode == b->inode && !strcmp(a->path, b->path);
}

/* A mapping of @e's file holds its ELF header (offset 0) at @at. */
static bool header_at(const struct symbolizer *s, const struct map_entry *e, uint64_t at)
{
	const struct map_entry *f = maps_find(&s->maps, at);

	return f && f->start == at && f->offset == 0 && same_file(f, e);
}

/* libdw reported a module from the mapping at @at (its first). */
static bool module_from(const struct symbolizer *s, uint64_t at)
{
	Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, at);
	Dwarf_Addr lo;

	return mod && dwfl_module_info(mod, NULL, &lo, NULL, NULL, NULL, NULL, NULL) && lo == at;
}

uint64_t sym_region_translate(const struct symbolizer *s, uint64_t address)
{
	const struct map_entry *e = maps_find(&s->maps, address);
	uint64_t base;

	if (!e || !is_file(e))
		return address;
	base = e->start - e->offset;
	if (header_at(s, e, base))
		return address; /* one view of the file, whole */
	/* Another view: the one libdw's module was reported from. (A process
	 * may map the same file for reading too: not that one.) */
	for (size_t i = 0; i < s->maps.n; i++) {
		const struct map_entry *f = &s->maps.entries[i];

		if (f->offset == 0 && same_file(f, e) && module_from(s, f->start))
			return address - base + f->start;
	}
	return address;
}

bool sym_region_run(const struct symbolizer *s, uint64_t address, uint64_t *ret_start,
		    uint64_t *ret_end, uint64_t *ret_offset)
{
	const struct map_entry *e = maps_find(&s->maps, address), *lo, *hi;
	const struct map_entry *v = s->maps.entries, *last = v + s->maps.n - 1;

	if (!e || !is_file(e))
		return false;
	/* Adjacent mappings of the file that keep one start - offset. */
	for (lo = e; lo > v && lo[-1].end == lo->start && lo[-1].inode == e->inode &&
		     lo[-1].start - lo[-1].offset == e->start - e->offset;
	     lo--)
		;
	for (hi = e; hi < last && hi[1].start == hi->end && hi[1].inode == e->inode &&
		     hi[1].start - hi[1].offset == e->start - e->offset;
	     hi++)
		;
	*ret_start = lo->start;
	*ret_end = hi->end;
	*ret_offset = lo->offset;
	return true;
}

const char *sym_region_name(struct symbolizer *s, uint64_t address)
{
	const struct map_entry *e = maps_find(&s->maps, address);
	const char *jit = perfmap_name(s, address);
	char buf[128];

	if (jit)
		return jit;
	if (!e || is_file(e))
		snprintf(buf, sizeof(buf), "0x%" PRIx64, address);
	else if (e->prot & MAPS_EXEC)
		snprintf(buf, sizeof(buf), "[JIT] 0x%" PRIx64, address);
	else
		snprintf(buf, sizeof(buf), "%.64s 0x%" PRIx64, e->path[0] ? e->path : "[anon]",
			 address);
	return strpool_intern(&s->strings, buf);
}
