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

static bool same_file(const struct map_entry *a, const struct map_entry *b)
{
	return a->inode == b->inode && !strcmp(a->path, b->path);
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

/* libdw reported a module from the mapping at @at (its first). */
static bool module_from(const struct symbolizer *s, uint64_t at)
{
	Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, at);
	Dwarf_Addr lo;

	return mod && dwfl_module_info(mod, NULL, &lo, NULL, NULL, NULL, NULL, NULL) && lo == at;
}

/*
 * The image of @e's file that libdw's module describes: from the mapping
 * of its ELF header that a module starts at, the mappings of the file that
 * follow it unbroken by another's; [*@lo, *@hi) in s->maps. (A process may
 * map the same file for reading too: not that one.)
 */
static bool first_image(const struct symbolizer *s, const struct map_entry *e, size_t *lo,
			size_t *hi)
{
	const struct map_entry *v = s->maps.entries;

	for (size_t i = 0; i < s->maps.n; i++) {
		if (v[i].offset != 0 || !same_file(&v[i], e) || !module_from(s, v[i].start))
			continue;
		*lo = i;
		for (*hi = i + 1; *hi < s->maps.n && same_file(&v[*hi], e); (*hi)++)
			;
		return true;
	}
	return false;
}

uint64_t sym_region_translate(const struct symbolizer *s, uint64_t address)
{
	const struct map_entry *e = maps_find(&s->maps, address), *v = s->maps.entries;
	size_t lo, hi, at;
	uint64_t off;

	if (!e || !is_file(e) || !first_image(s, e, &lo, &hi))
		return address;
	at = (size_t)(e - v);
	if (at >= lo && at < hi)
		return address; /* in the image itself */
	/* Another view: where the image maps the same file offset. */
	off = e->offset + (address - e->start);
	for (size_t i = lo; i < hi; i++)
		if (v[i].offset <= off && off - v[i].offset < v[i].end - v[i].start)
			return v[i].start + (off - v[i].offset);
	return address;
}

bool sym_region_run(const struct symbolizer *s, uint64_t address, uint64_t *ret_start,
		    uint64_t *ret_end, uint64_t *ret_offset)
{
	const struct map_entry *e = maps_find(&s->maps, address), *lo, *hi, *last;
	const struct map_entry *v = s->maps.entries;
	size_t ilo, ihi;

	/* No maps (never read, the target gone): no entry, and no last one. */
	if (!e || !is_file(e))
		return false;
	last = v + s->maps.n - 1;
	/* The image libdw's module describes is one mapping, as before... */
	if (first_image(s, e, &ilo, &ihi) && (size_t)(e - v) >= ilo && (size_t)(e - v) < ihi) {
		*ret_start = v[ilo].start;
		*ret_end = v[ihi - 1].end;
		*ret_offset = 0;
		return true;
	}
	/* ... another view is its adjacent mappings that keep one start - offset. */
	for (lo = e; lo > v && lo[-1].end == lo->start && same_file(&lo[-1], e) &&
		     lo[-1].start - lo[-1].offset == e->start - e->offset;
	     lo--)
		;
	for (hi = e; hi < last && hi[1].start == hi->end && same_file(&hi[1], e) &&
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
