#include "profile/profile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "profile/profile-private.h"

int profile_new(struct profile **ret, const struct profile_value_type *types, size_t ntypes)
{
	struct profile *p;
	int r;

	if (!ret || (!types && ntypes))
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	strpool_init(&p->strings);
	u64map_init(&p->location_by_address);
	u64map_init(&p->function_by_key);
	u64map_init(&p->sample_by_key);

	if (ntypes) {
		p->sample_types = calloc(ntypes, sizeof(*p->sample_types));
		if (!p->sample_types) {
			r = -ENOMEM;
			goto out_free_profile;
		}
	}
	p->nsample_types = ntypes;
	for (size_t i = 0; i < ntypes; i++) {
		p->sample_types[i].type = profile_intern(p, types[i].type);
		p->sample_types[i].unit = profile_intern(p, types[i].unit);
		if (!p->sample_types[i].type || !p->sample_types[i].unit) {
			r = -ENOMEM;
			goto out_free_profile;
		}
	}
	*ret = p;
	return 0;

out_free_profile:
	profile_free(p);
	return r;
}

void profile_free(struct profile *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nsamples; i++) {
		free(p->samples[i].location_ids);
		free(p->samples[i].values);
		free(p->samples[i].labels);
	}
	free(p->samples);
	for (size_t i = 0; i < p->nlocations; i++)
		free(p->locations[i].lines);
	free(p->locations);
	free(p->functions);
	free(p->mappings);
	free(p->comments);
	free(p->sample_types);
	u64map_release(&p->location_by_address);
	u64map_release(&p->function_by_key);
	u64map_release(&p->sample_by_key);
	strpool_release(&p->strings);
	free(p);
}

const char *profile_intern(struct profile *p, const char *s)
{
	return strpool_intern(&p->strings, s);
}

/* Interns @s, keeping NULL as NULL (the setters' "not set"). */
static int intern_optional(struct profile *p, const char *s, const char **ret)
{
	const char *v = NULL;

	if (s) {
		v = profile_intern(p, s);
		if (!v)
			return -ENOMEM;
	}
	*ret = v;
	return 0;
}

int profile_set_period(struct profile *p, const char *type, const char *unit, int64_t period)
{
	const char *t = NULL, *u = NULL;

	/* A NULL type leaves the period without a type, as pprof allows. */
	if (type) {
		t = profile_intern(p, type);
		u = profile_intern(p, unit);
		if (!t || !u)
			return -ENOMEM;
	}
	p->period_type.type = t;
	p->period_type.unit = u;
	p->period = period;
	return 0;
}

int profile_set_default_sample_type(struct profile *p, const char *type)
{
	return intern_optional(p, type, &p->default_sample_type);
}

int profile_set_drop_frames(struct profile *p, const char *regex)
{
	return intern_optional(p, regex, &p->drop_frames);
}

int profile_add_comment(struct profile *p, const char *text)
{
	const char *s = profile_intern(p, text);

	if (!s || GROW(p->comments, p->ncomments + 1, p->comments_alloc) < 0)
		return -ENOMEM;
	p->comments[p->ncomments++] = s;
	return 0;
}

int profile_add_mapping(struct profile *p, const struct profile_mapping *m, uint64_t *ret_id)
{
	struct profile_mapping *n;
	const char *file, *build_id;

	if (!m)
		return -EINVAL;
	file = profile_intern(p, m->file);
	build_id = profile_intern(p, m->build_id);
	if (!file || !build_id || GROW(p->mappings, p->nmappings + 1, p->mappings_alloc) < 0)
		return -ENOMEM;
	n = &p->mappings[p->nmappings];
	*n = *m;
	n->id = ++p->nmappings;
	n->file = file;
	n->build_id = build_id;
	if (ret_id)
		*ret_id = n->id;
	return 0;
}

uint64_t profile_function_hash(const char *name, const char *system_name, const char *file,
			       int64_t start_line)
{
	const char *key[3] = { name, system_name, file };

	return hash_bytes(&start_line, sizeof(start_line), hash_bytes(key, sizeof(key), 0));
}

int profile_intern_function(struct profile *p, const char *name, const char *system_name,
			    const char *file, int64_t start_line, uint64_t *ret_id)
{
	struct profile_function *f;
	uint64_t h, idx;

	name = profile_intern(p, name);
	system_name = profile_intern(p, system_name);
	file = profile_intern(p, file);
	if (!name || !system_name || !file)
		return -ENOMEM;

	/* Interned, so equal strings are equal pointers. */
	for (h = profile_function_hash(name, system_name, file, start_line);
	     u64map_get(&p->function_by_key, h, &idx); h++) {
		f = &p->functions[idx];
		if (f->name == name && f->system_name == system_name && f->file == file &&
		    f->start_line == start_line) {
			if (ret_id)
				*ret_id = f->id;
			return 0;
		}
	}

	if (GROW(p->functions, p->nfunctions + 1, p->functions_alloc) < 0 ||
	    u64map_put(&p->function_by_key, h, p->nfunctions) < 0)
		return -ENOMEM;
	f = &p->functions[p->nfunctions];
	f->id = ++p->nfunctions;
	f->name = name;
	f->system_name = system_name;
	f->file = file;
	f->start_line = start_line;
	if (ret_id)
		*ret_id = f->id;
	return 0;
}

/* Checks the references of @lines and copies them into a new array. */
static int copy_lines(const struct profile *p, uint64_t mapping_id,
		      const struct profile_line *lines, size_t nlines,
		      struct profile_line **ret_lines)
{
	struct profile_line *copy = NULL;

	if (mapping_id > p->nmappings || (nlines && !lines))
		return -EINVAL;
	for (size_t i = 0; i < nlines; i++)
		if (!lines[i].function_id || lines[i].function_id > p->nfunctions)
			return -EINVAL;
	if (nlines) {
		copy = calloc(nlines, sizeof(*copy));
		if (!copy)
			return -ENOMEM;
		memcpy(copy, lines, nlines * sizeof(*copy));
	}
	*ret_lines = copy;
	return 0;
}

/* Appends a location; the caller has checked and copied @lines. */
static int append_location(struct profile *p, uint64_t address, uint64_t mapping_id,
			   struct profile_line *lines, size_t nlines, uint64_t *ret_id)
{
	struct profile_location *l;

	if (GROW(p->locations, p->nlocations + 1, p->locations_alloc) < 0)
		return -ENOMEM;
	if (!u64map_get(&p->location_by_address, address, NULL) &&
	    u64map_put(&p->location_by_address, address, p->nlocations) < 0)
		return -ENOMEM;
	l = &p->locations[p->nlocations];
	l->id = ++p->nlocations;
	l->mapping_id = mapping_id;
	l->address = address;
	l->lines = lines;
	l->nlines = nlines;
	if (ret_id)
		*ret_id = l->id;
	return 0;
}

int profile_location_for_address(struct profile *p, uint64_t address, uint64_t *ret_id)
{
	uint64_t idx;

	if (u64map_get(&p->location_by_address, address, &idx)) {
		if (ret_id)
			*ret_id = p->locations[idx].id;
		return 0;
	}
	return append_location(p, address, 0, NULL, 0, ret_id);
}

int profile_add_location(struct profile *p, uint64_t address, uint64_t mapping_id,
			 const struct profile_line *lines, size_t nlines, uint64_t *ret_id)
{
	struct profile_line *copy;
	int r;

	r = copy_lines(p, mapping_id, lines, nlines, &copy);
	if (r < 0)
		return r;
	r = append_location(p, address, mapping_id, copy, nlines, ret_id);
	if (r < 0)
		free(copy);
	return r;
}

int profile_location_set(struct profile *p, uint64_t id, uint64_t mapping_id,
			 const struct profile_line *lines, size_t nlines)
{
	struct profile_location *l;
	struct profile_line *copy;
	int r;

	if (!id || id > p->nlocations)
		return -EINVAL;
	r = copy_lines(p, mapping_id, lines, nlines, &copy);
	if (r < 0)
		return r;
	l = &p->locations[id - 1];
	free(l->lines);
	l->lines = copy;
	l->nlines = nlines;
	l->mapping_id = mapping_id;
	return 0;
}

int profile_named_location(struct profile *p, uint64_t address, const char *name,
			   uint64_t *ret_id)
{
	struct profile_line line = { 0 };
	int r;

	r = profile_location_for_address(p, address, ret_id);
	if (r < 0 || p->locations[*ret_id - 1].nlines)
		return r;
	r = profile_intern_function(p, name, name, "", 0, &line.function_id);
	if (r < 0)
		return r;
	return profile_location_set(p, *ret_id, 0, &line, 1);
}
