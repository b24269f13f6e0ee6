/*
 * symbolizer_lookup(): one answer per address, computed once. A profile names
 * the same few thousand PCs over and over, and the first answer for an
 * address walks its unit's DIEs (dwarf_getscopes): far dearer than a lookup.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symbolize/symbolize-private.h"

/* A frame from the ELF symbol, or "module+0xoff" when there is none: the
 * offset of the function's start (@start) by its FDE, else of @address. */
static int symbol_frame(struct symbolizer *s, struct sym_module *m,
			const struct symtab_entry *sym, uint64_t start,
			struct symbol_frame *ret)
{
	char buf[512];
	const char *d;

	*ret = (struct symbol_frame){ 0 };
	if (sym) {
		d = demangle_pooled(&s->strings, sym->name);
		ret->system_name = strpool_intern(&s->strings, sym->name);
		ret->function = d ? d : ret->system_name;
	} else {
		/* The ELF address, so that `addr2line -e FILE 0xoff` agrees. */
		snprintf(buf, sizeof(buf), "%s+0x%" PRIx64, m->base_name, start - m->bias);
		ret->function = ret->system_name = strpool_intern(&s->strings, buf);
	}
	return ret->function ? 0 : -ENOMEM;
}

static int resolve_in_module(struct symbolizer *s, struct sym_module *m, uint64_t address,
			     struct symbol_info *ret, size_t *ret_n)
{
	const struct symtab_entry *sym;
	struct dwarf_frames df;
	struct symbol_frame f;
	uint64_t start = 0;
	int r;

	sym_module_prepare(m);
	sym = symtab_find(&m->symtab, address);
	r = lines_frames(s, m, address, &df);
	if (r < 0)
		return r;
	if (!sym && !df.complete && !fde_function_start(m, address, &start))
		start = address;

	if (df.n && df.complete) {
		*ret_n = df.n;
	} else {
		/* No DWARF function, or inlined frames whose container has no
		 * name: the ELF symbol is the outermost frame. */
		r = symbol_frame(s, m, sym, start, &f);
		if (r < 0)
			return r;
		if (df.n) {
			f.file = df.file;
			f.line = df.line;
		} else if (!lines_file_line(s, m, address, &f.file, &f.line)) {
			f.file = NULL;
			f.line = 0;
		}
		r = scratch_push(s, df.n, &f);
		if (r < 0)
			return r;
		*ret_n = df.n + 1;
	}
	if (sym)
		ret->offset_in_function = address - sym->addr;
	else if (df.entry && address >= df.entry)
		ret->offset_in_function = address - df.entry;
	else if (start)
		ret->offset_in_function = address - start;
	ret->module = &m->pub;
	return 0;
}

static int resolve(struct symbolizer *s, uint64_t address, struct symbol_info *ret)
{
	uint64_t at = sym_region_translate(s, address);
	struct sym_module *m = symbolizer_module_of(s, at);
	struct symbol_frame *frames;
	size_t n = 0;
	int r;

	*ret = (struct symbol_info){ 0 };
	if (m) {
		r = resolve_in_module(s, m, at, ret, &n);
	} else {
		struct symbol_frame f = { 0 };

		f.function = f.system_name = sym_region_name(s, address);
		r = f.function ? scratch_push(s, 0, &f) : -ENOMEM;
		n = 1;
	}
	if (r < 0)
		return r;
	frames = malloc(n * sizeof(*frames));
	if (!frames)
		return -ENOMEM;
	memcpy(frames, s->scratch, n * sizeof(*frames));
	ret->frames = frames;
	ret->nframes = n;
	return 0;
}

int symbolizer_lookup(struct symbolizer *s, uint64_t address, struct symbol_info *ret)
{
	struct symbol_info info;
	uint64_t idx;
	int r;

	if (u64map_get(&s->cache, address, &idx)) {
		*ret = s->infos[idx];
		return 0;
	}
	r = GROW(s->infos, s->ninfos + 1, s->infos_alloc);
	if (r < 0)
		return r;
	r = resolve(s, address, &info);
	if (r < 0)
		return r;
	r = u64map_put(&s->cache, address, s->ninfos);
	if (r < 0) {
		free((void *)info.frames);
		return r;
	}
	s->infos[s->ninfos++] = info;
	*ret = info;
	return 0;
}

int sym_cache_forget_moduleless(struct symbolizer *s)
{
	struct u64map m;
	int r;

	u64map_init(&m);
	for (size_t i = 0; i < s->cache.size; i++) {
		if (!s->cache.used[i] || !s->infos[s->cache.values[i]].module)
			continue;
		r = u64map_put(&m, s->cache.keys[i], s->cache.values[i]);
		if (r < 0) {
			u64map_release(&m);
			return r;
		}
	}
	u64map_release(&s->cache);
	s->cache = m;
	return 0;
}
