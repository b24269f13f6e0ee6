#include "pprof/pprof.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "profile.pb-c.h"

/*
 * The message is built in arrays owned by the encoder and points into the
 * profile where the types agree (stacks, values): protobuf-c only reads them.
 */
struct encoder {
	const struct profile *p;
	int err; /* first failure; later steps become no-ops */

	/* string_table: index 0 is "", as pprof requires. */
	const char **strings;
	size_t nstrings, strings_alloc;
	struct u64map string_index; /* interned address -> index */

	Perftools__Profiles__Profile msg;
	Perftools__Profiles__ValueType period_type;
	Perftools__Profiles__ValueType *types, **type_ptrs;
	Perftools__Profiles__Sample *samples, **sample_ptrs;
	Perftools__Profiles__Label *labels, **label_ptrs; /* of all samples */
	Perftools__Profiles__Mapping *mappings, **mapping_ptrs;
	Perftools__Profiles__Location *locations, **location_ptrs;
	Perftools__Profiles__Line *lines, **line_ptrs; /* of all locations */
	Perftools__Profiles__Function *functions, **function_ptrs;
	int64_t *comments;
};

static void encoder_release(struct encoder *e)
{
	free(e->strings);
	u64map_release(&e->string_index);
	free(e->types);
	free(e->type_ptrs);
	free(e->samples);
	free(e->sample_ptrs);
	free(e->labels);
	free(e->label_ptrs);
	free(e->mappings);
	free(e->mapping_ptrs);
	free(e->locations);
	free(e->location_ptrs);
	free(e->lines);
	free(e->line_ptrs);
	free(e->functions);
	free(e->function_ptrs);
	free(e->comments);
}

/*
 * The string table index of @s; NULL and "" are 0. Every string of a profile
 * is interned, so its address identifies it; one that is not would only cost
 * a duplicate entry.
 */
static int64_t str(struct encoder *e, const char *s)
{
	uint64_t idx;

	if (e->err || !s || !s[0])
		return 0;
	if (u64map_get(&e->string_index, (uintptr_t)s, &idx))
		return (int64_t)idx;
	if (GROW(e->strings, e->nstrings + 1, e->strings_alloc) < 0 ||
	    u64map_put(&e->string_index, (uintptr_t)s, e->nstrings) < 0) {
		e->err = -ENOMEM;
		return 0;
	}
	e->strings[e->nstrings] = s;
	return (int64_t)e->nstrings++;
}

/* calloc that records failure; NULL without error when @n is 0. */
static void *alloc(struct encoder *e, size_t n, size_t size)
{
	void *a;

	if (e->err || !n)
		return NULL;
	a = calloc(n, size);
	if (!a)
		e->err = -ENOMEM;
	return a;
}

static void encode_header(struct encoder *e)
{
	const struct profile *p = e->p;
	Perftools__Profiles__Profile *m = &e->msg;

	e->types = alloc(e, p->nsample_types, sizeof(*e->types));
	e->type_ptrs = alloc(e, p->nsample_types, sizeof(*e->type_ptrs));
	e->comments = alloc(e, p->ncomments, sizeof(*e->comments));
	if (e->err)
		return;
	for (size_t i = 0; i < p->nsample_types; i++) {
		perftools__profiles__value_type__init(&e->types[i]);
		e->types[i].type = str(e, p->sample_types[i].type);
		e->types[i].unit = str(e, p->sample_types[i].unit);
		e->type_ptrs[i] = &e->types[i];
	}
	m->n_sample_type = p->nsample_types;
	m->sample_type = e->type_ptrs;

	if (p->period_type.type) {
		perftools__profiles__value_type__init(&e->period_type);
		e->period_type.type = str(e, p->period_type.type);
		e->period_type.unit = str(e, p->period_type.unit);
		m->period_type = &e->period_type;
	}
	m->period = p->period;
	m->time_nanos = p->time_nanos;
	m->duration_nanos = p->duration_nanos;
	m->drop_frames = str(e, p->drop_frames);
	m->default_sample_type = str(e, p->default_sample_type);
	for (size_t i = 0; i < p->ncomments; i++)
		e->comments[i] = str(e, p->comments[i]);
	m->n_comment = p->ncomments;
	m->comment = e->comments;
}

static void encode_samples(struct encoder *e)
{
	const struct profile *p = e->p;
	size_t nlabels = 0, l = 0;

	for (size_t i = 0; i < p->nsamples; i++)
		nlabels += p->samples[i].nlabels;
	e->samples = alloc(e, p->nsamples, sizeof(*e->samples));
	e->sample_ptrs = alloc(e, p->nsamples, sizeof(*e->sample_ptrs));
	e->labels = alloc(e, nlabels, sizeof(*e->labels));
	e->label_ptrs = alloc(e, nlabels, sizeof(*e->label_ptrs));
	if (e->err)
		return;
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		Perftools__Profiles__Sample *m = &e->samples[i];

		perftools__profiles__sample__init(m);
		m->n_location_id = s->nlocations;
		m->location_id = s->location_ids;
		m->n_value = p->nsample_types;
		m->value = s->values;
		m->n_label = s->nlabels;
		m->label = s->nlabels ? &e->label_ptrs[l] : NULL;
		for (size_t j = 0; j < s->nlabels; j++, l++) {
			const struct profile_label *pl = &s->labels[j];
			Perftools__Profiles__Label *ml = &e->labels[l];

			perftools__profiles__label__init(ml);
			ml->key = str(e, pl->key);
			if (pl->str) {
				ml->str = str(e, pl->str);
			} else {
				ml->num = pl->num;
				ml->num_unit = str(e, pl->num_unit);
			}
			e->label_ptrs[l] = ml;
		}
		e->sample_ptrs[i] = m;
	}
	e->msg.n_sample = p->nsamples;
	e->msg.sample = e->sample_ptrs;
}

static void encode_mappings(struct encoder *e)
{
	const struct profile *p = e->p;

	e->mappings = alloc(e, p->nmappings, sizeof(*e->mappings));
	e->mapping_ptrs = alloc(e, p->nmappings, sizeof(*e->mapping_ptrs));
	if (e->err)
		return;
	for (size_t i = 0; i < p->nmappings; i++) {
		const struct profile_mapping *pm = &p->mappings[i];
		Perftools__Profiles__Mapping *m = &e->mappings[i];

		perftools__profiles__mapping__init(m);
		m->id = pm->id;
		m->memory_start = pm->start;
		m->memory_limit = pm->limit;
		m->file_offset = pm->offset;
		m->filename = str(e, pm->file);
		m->build_id = str(e, pm->build_id);
		m->has_functions = pm->has_functions;
		m->has_filenames = pm->has_filenames;
		m->has_line_numbers = pm->has_line_numbers;
		m->has_inline_frames = pm->has_inline_frames;
		e->mapping_ptrs[i] = m;
	}
	e->msg.n_mapping = p->nmappings;
	e->msg.mapping = e->mapping_ptrs;
}

static void encode_locations(struct encoder *e)
{
	const struct profile *p = e->p;
	size_t nlines = 0, l = 0;

	for (size_t i = 0; i < p->nlocations; i++)
		nlines += p->locations[i].nlines;
	e->locations = alloc(e, p->nlocations, sizeof(*e->locations));
	e->location_ptrs = alloc(e, p->nlocations, sizeof(*e->location_ptrs));
	e->lines = alloc(e, nlines, sizeof(*e->lines));
	e->line_ptrs = alloc(e, nlines, sizeof(*e->line_ptrs));
	if (e->err)
		return;
	for (size_t i = 0; i < p->nlocations; i++) {
		const struct profile_location *pl = &p->locations[i];
		Perftools__Profiles__Location *m = &e->locations[i];

		perftools__profiles__location__init(m);
		m->id = pl->id;
		m->mapping_id = pl->mapping_id;
		m->address = pl->address;
		m->n_line = pl->nlines;
		m->line = pl->nlines ? &e->line_ptrs[l] : NULL;
		for (size_t j = 0; j < pl->nlines; j++, l++) {
			perftools__profiles__line__init(&e->lines[l]);
			e->lines[l].function_id = pl->lines[j].function_id;
			e->lines[l].line = pl->lines[j].line;
			e->line_ptrs[l] = &e->lines[l];
		}
		e->location_ptrs[i] = m;
	}
	e->msg.n_location = p->nlocations;
	e->msg.location = e->location_ptrs;
}

static void encode_functions(struct encoder *e)
{
	const struct profile *p = e->p;

	e->functions = alloc(e, p->nfunctions, sizeof(*e->functions));
	e->function_ptrs = alloc(e, p->nfunctions, sizeof(*e->function_ptrs));
	if (e->err)
		return;
	for (size_t i = 0; i < p->nfunctions; i++) {
		const struct profile_function *pf = &p->functions[i];
		Perftools__Profiles__Function *m = &e->functions[i];

		perftools__profiles__function__init(m);
		m->id = pf->id;
		m->name = str(e, pf->name);
		m->system_name = str(e, pf->system_name);
		m->filename = str(e, pf->file);
		m->start_line = pf->start_line;
		e->function_ptrs[i] = m;
	}
	e->msg.n_function = p->nfunctions;
	e->msg.function = e->function_ptrs;
}

int pprof_encode(const struct profile *p, uint8_t **ret_buf, size_t *ret_len)
{
	struct encoder e = { .p = p };
	uint8_t *buf;
	size_t len;
	int r;

	if (!p || !ret_buf || !ret_len)
		return -EINVAL;
	perftools__profiles__profile__init(&e.msg);
	u64map_init(&e.string_index);
	if (GROW(e.strings, 1, e.strings_alloc) < 0) {
		r = -ENOMEM;
		goto out_release;
	}
	e.strings[e.nstrings++] = "";

	encode_header(&e);
	encode_samples(&e);
	encode_mappings(&e);
	encode_locations(&e);
	encode_functions(&e);
	r = e.err;
	if (r < 0)
		goto out_release;
	/* protobuf-c wants char **; it only reads the strings. */
	e.msg.n_string_table = e.nstrings;
	e.msg.string_table = (char **)e.strings;

	len = perftools__profiles__profile__get_packed_size(&e.msg);
	buf = malloc(len ? len : 1);
	if (!buf) {
		r = -ENOMEM;
		goto out_release;
	}
	if (perftools__profiles__profile__pack(&e.msg, buf) != len) {
		free(buf);
		r = -EIO;
		goto out_release;
	}
	*ret_buf = buf;
	*ret_len = len;
	r = 0;

out_release:
	encoder_release(&e);
	return r;
}
