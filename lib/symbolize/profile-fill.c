/*
 * symbolizer_fill_profile(): the profile's bare addresses -> lines,
 * functions and mappings. pprof shows the first mapping as the program
 * ("File: ..."), so the main executable's mapping goes in first.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symbolize/symbolize-private.h"

/* A mapping added by an earlier fill of the same profile is reused. */
static uint64_t existing_mapping(const struct profile *p, const char *path, uint64_t start,
				 uint64_t end)
{
	for (size_t i = 0; i < p->nmappings; i++) {
		const struct profile_mapping *pm = &p->mappings[i];

		if (pm->start == start && pm->limit == end && pm->file && !strcmp(pm->file, path))
			return pm->id;
	}
	return 0;
}

/*
 * The mapping of module @m that holds @address: the run of the file's
 * mappings around it, one view of the file (never addresses it does not
 * map); the module's span when the maps do not say.
 */
static int mapping_id(struct symbolizer *s, struct profile *p, struct u64map *ids,
		      struct sym_module *m, uint64_t address, uint64_t *ret_id)
{
	struct profile_mapping pm;
	uint64_t start = m->pub.start, end = m->pub.end, offset = m->pub.offset, id;
	int r;

	sym_region_run(s, address, &start, &end, &offset);
	if (u64map_get(ids, start, &id)) {
		*ret_id = id;
		return 0;
	}
	sym_module_prepare(m);
	id = existing_mapping(p, m->pub.path, start, end);
	if (!id) {
		/* Say only what the module really gives: pprof then knows
		 * whether symbolizing it again could do better. */
		pm = (struct profile_mapping){
			.start = start,
			.limit = end,
			.offset = offset,
			.file = m->pub.path,
			.build_id = m->pub.build_id,
			.has_functions = m->pub.has_symbols || m->pub.has_lines,
			.has_filenames = m->pub.has_lines,
			.has_line_numbers = m->pub.has_lines,
			.has_inline_frames = m->pub.has_lines,
		};
		r = profile_add_mapping(p, &pm, &id);
		if (r < 0)
			return r;
	}
	r = u64map_put(ids, start, id);
	if (r < 0)
		return r;
	*ret_id = id;
	return 0;
}

static int fill_location(struct symbolizer *s, struct profile *p, struct u64map *ids,
			 size_t i, struct profile_line **lines, size_t *lines_alloc,
			 size_t *ret_unnamed_jit)
{
	struct symbol_info info;
	uint64_t mid = 0;
	int r;

	r = symbolizer_lookup(s, p->locations[i].address, &info);
	if (r < 0)
		return r;
	if (info.module) {
		uint64_t a = p->locations[i].address;
		struct sym_module *m = symbolizer_module_of(s, a);

		/* A view of a file that no module of libdw's spans. */
		if (!m)
			m = symbolizer_module_of(s, sym_region_translate(s, a));
		r = m ? mapping_id(s, p, ids, m, a, &mid) : 0;
		if (r < 0)
			return r;
	} else if (!s->perfmap.found && sym_region_is_jit(s, p->locations[i].address)) {
		(*ret_unnamed_jit)++;
	}
	r = GROW(*lines, info.nframes, *lines_alloc);
	if (r < 0)
		return r;
	for (size_t j = 0; j < info.nframes; j++) {
		const struct symbol_frame *f = &info.frames[j];
		uint64_t fid;

		r = profile_intern_function(p, f->function, f->system_name, f->file ? f->file : "",
					    f->start_line, &fid);
		if (r < 0)
			return r;
		(*lines)[j] = (struct profile_line){ .function_id = fid, .line = f->line };
	}
	return profile_location_set(p, p->locations[i].id, mid, *lines, info.nframes);
}

/* Generated code seen, and no map of its names: say how to get one. */
static int note_unnamed_jit(struct symbolizer *s, struct profile *p, size_t n)
{
	char text[512];

	snprintf(text, sizeof(text), "%zu %s in generated code (JIT) stay addresses: pid %d wrote "
		 "no /tmp/perf-PID.map; have the program write one (node --perf-basic-prof, "
		 "java with perf-map-agent, python3.12 -X perf, DOTNET_PerfMapEnabled=1)",
		 n, n == 1 ? "location" : "locations", (int)s->pid);
	return profile_add_comment(p, text);
}

int symbolizer_fill_profile(struct symbolizer *s, struct profile *p)
{
	struct profile_line *lines = NULL;
	size_t lines_alloc = 0;
	struct u64map ids;
	size_t unnamed_jit = 0;
	uint64_t id;
	int r = 0;

	if (!s || !p)
		return -EINVAL;
	u64map_init(&ids);
	/* The window's end: JIT regions and libraries mapped meanwhile. */
	if (sym_regions_read(s) == -ENOMEM)
		return -ENOMEM;
	if (s->main_module) {
		r = mapping_id(s, p, &ids, s->main_module, s->main_module->pub.start, &id);
		if (r < 0)
			goto out_release;
	}
	for (size_t i = 0; i < p->nlocations; i++) {
		if (p->locations[i].nlines)
			continue;
		r = fill_location(s, p, &ids, i, &lines, &lines_alloc, &unnamed_jit);
		if (r < 0)
			goto out_release;
	}
	if (unnamed_jit)
		r = note_unnamed_jit(s, p, unnamed_jit);

out_release:
	free(lines);
	u64map_release(&ids);
	return r;
}
