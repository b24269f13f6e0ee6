#include "pprof/pprof.h"

#include <errno.h>
#include <stdlib.h>

#include "pprof/pprof-private.h"
#include "profile.pb-c.h"

/*
 * Reading a foreign profile: its ids are whatever its writer chose (any
 * nonzero u64, in any order), so each one is mapped to the id the new
 * profile gives it. Anything that does not resolve is -EBADMSG.
 */
struct decoder {
	const Perftools__Profiles__Profile *msg;
	struct profile *p;
	struct u64map functions; /* foreign id -> our id */
	struct u64map mappings;
	struct u64map locations;
	/* Scratch for one location or sample, reused. */
	struct profile_line *lines;
	size_t lines_alloc;
	uint64_t *ids;
	size_t ids_alloc;
	struct profile_label *labels;
	size_t labels_alloc;
};

static void decoder_release(struct decoder *d)
{
	u64map_release(&d->functions);
	u64map_release(&d->mappings);
	u64map_release(&d->locations);
	free(d->lines);
	free(d->ids);
	free(d->labels);
}

/* The string at @idx of the string table, or -EBADMSG. */
static int str_at(const struct decoder *d, int64_t idx, const char **ret)
{
	if (idx < 0 || (uint64_t)idx >= d->msg->n_string_table)
		return -EBADMSG;
	*ret = d->msg->string_table[idx];
	return 0;
}

/*
 * As str_at(), but "" means "not set": NULL. Index 0 is "", and so may be any
 * other index; the encoder writes every "" as index 0, so telling them apart
 * here would not survive a round trip (a string label "" would come back a
 * numeric label and merge with another sample).
 */
static int str_or_null(const struct decoder *d, int64_t idx, const char **ret)
{
	const char *s;
	int r = str_at(d, idx, &s);

	if (r < 0)
		return r;
	*ret = s[0] ? s : NULL;
	return 0;
}

/* Records @foreign -> @ours; a zero or repeated foreign id is malformed. */
static int map_id(struct u64map *m, uint64_t foreign, uint64_t ours)
{
	if (!foreign || u64map_get(m, foreign, NULL))
		return -EBADMSG;
	return u64map_put(m, foreign, ours);
}

/* Our id for @foreign; 0 is allowed (and kept) only where @zero_ok. */
static int lookup_id(const struct u64map *m, uint64_t foreign, bool zero_ok, uint64_t *ret)
{
	if (!foreign && zero_ok) {
		*ret = 0;
		return 0;
	}
	return u64map_get(m, foreign, ret) ? 0 : -EBADMSG;
}

/* The profile's API says -EINVAL for a bad reference; here that is bad input. */
static int input_error(int r)
{
	return r == -EINVAL ? -EBADMSG : r;
}

static int decode_new(struct decoder *d)
{
	const Perftools__Profiles__Profile *m = d->msg;
	struct profile_value_type *types = NULL;
	int r = 0;

	if (m->n_sample_type) {
		types = calloc(m->n_sample_type, sizeof(*types));
		if (!types)
			return -ENOMEM;
	}
	for (size_t i = 0; i < m->n_sample_type && r >= 0; i++) {
		r = str_at(d, m->sample_type[i]->type, &types[i].type);
		if (r >= 0)
			r = str_at(d, m->sample_type[i]->unit, &types[i].unit);
	}
	if (r >= 0)
		r = profile_new(&d->p, types, m->n_sample_type);
	free(types);
	return r;
}

static int decode_header(struct decoder *d)
{
	const Perftools__Profiles__Profile *m = d->msg;
	const char *s, *unit;
	int r;

	if (m->period_type) {
		r = str_at(d, m->period_type->type, &s);
		if (r < 0)
			return r;
		r = str_at(d, m->period_type->unit, &unit);
		if (r < 0)
			return r;
		r = profile_set_period(d->p, s, unit, m->period);
		if (r < 0)
			return r;
	}
	d->p->period = m->period;
	d->p->time_nanos = m->time_nanos;
	d->p->duration_nanos = m->duration_nanos;

	r = str_or_null(d, m->default_sample_type, &s);
	if (r >= 0)
		r = profile_set_default_sample_type(d->p, s);
	if (r >= 0)
		r = str_or_null(d, m->drop_frames, &s);
	if (r >= 0)
		r = profile_set_drop_frames(d->p, s);
	for (size_t i = 0; i < m->n_comment && r >= 0; i++) {
		r = str_at(d, m->comment[i], &s);
		if (r >= 0)
			r = profile_add_comment(d->p, s);
	}
	return r;
}

static int decode_functions(struct decoder *d)
{
	for (size_t i = 0; i < d->msg->n_function; i++) {
		const Perftools__Profiles__Function *f = d->msg->function[i];
		const char *name, *system_name, *file;
		uint64_t id;
		int r;

		r = str_at(d, f->name, &name);
		if (r >= 0)
			r = str_at(d, f->system_name, &system_name);
		if (r >= 0)
			r = str_at(d, f->filename, &file);
		if (r >= 0)
			r = profile_intern_function(d->p, name, system_name, file, f->start_line,
						    &id);
		/* Two foreign functions may become one: both ids map to it. */
		if (r >= 0)
			r = map_id(&d->functions, f->id, id);
		if (r < 0)
			return r;
	}
	return 0;
}

static int decode_mappings(struct decoder *d)
{
	for (size_t i = 0; i < d->msg->n_mapping; i++) {
		const Perftools__Profiles__Mapping *mm = d->msg->mapping[i];
		struct profile_mapping pm = {
			.start = mm->memory_start,
			.limit = mm->memory_limit,
			.offset = mm->file_offset,
			.has_functions = mm->has_functions,
			.has_filenames = mm->has_filenames,
			.has_line_numbers = mm->has_line_numbers,
			.has_inline_frames = mm->has_inline_frames,
		};
		uint64_t id;
		int r;

		r = str_at(d, mm->filename, &pm.file);
		if (r >= 0)
			r = str_at(d, mm->build_id, &pm.build_id);
		if (r >= 0)
			r = profile_add_mapping(d->p, &pm, &id);
		if (r >= 0)
			r = map_id(&d->mappings, mm->id, id);
		if (r < 0)
			return r;
	}
	return 0;
}

static int decode_locations(struct decoder *d)
{
	for (size_t i = 0; i < d->msg->n_location; i++) {
		const Perftools__Profiles__Location *l = d->msg->location[i];
		uint64_t mapping_id, id;
		int r;

		r = lookup_id(&d->mappings, l->mapping_id, true, &mapping_id);
		if (r < 0)
			return r;
		if (GROW(d->lines, l->n_line, d->lines_alloc) < 0)
			return -ENOMEM;
		for (size_t j = 0; j < l->n_line; j++) {
			r = lookup_id(&d->functions, l->line[j]->function_id, false,
				      &d->lines[j].function_id);
			if (r < 0)
				return r;
			d->lines[j].line = l->line[j]->line;
		}
		/* Not by address: a foreign profile may repeat one (often 0). */
		r = profile_add_location(d->p, l->address, mapping_id, d->lines, l->n_line, &id);
		if (r >= 0)
			r = map_id(&d->locations, l->id, id);
		if (r < 0)
			return input_error(r);
	}
	return 0;
}

static int decode_labels(struct decoder *d, const Perftools__Profiles__Sample *s)
{
	if (GROW(d->labels, s->n_label, d->labels_alloc) < 0)
		return -ENOMEM;
	for (size_t j = 0; j < s->n_label; j++) {
		const Perftools__Profiles__Label *ml = s->label[j];
		struct profile_label *pl = &d->labels[j];
		int r;

		r = str_at(d, ml->key, &pl->key);
		if (r >= 0)
			r = str_or_null(d, ml->str, &pl->str);
		if (r >= 0)
			r = str_or_null(d, ml->num_unit, &pl->num_unit);
		if (r < 0)
			return r;
		/* As pprof reads it: a label with a string is a string label. */
		pl->num = pl->str ? 0 : ml->num;
	}
	return 0;
}

static int decode_samples(struct decoder *d)
{
	for (size_t i = 0; i < d->msg->n_sample; i++) {
		const Perftools__Profiles__Sample *s = d->msg->sample[i];
		int r;

		if (s->n_value != d->p->nsample_types)
			return -EBADMSG;
		if (GROW(d->ids, s->n_location_id, d->ids_alloc) < 0)
			return -ENOMEM;
		for (size_t j = 0; j < s->n_location_id; j++) {
			r = lookup_id(&d->locations, s->location_id[j], false, &d->ids[j]);
			if (r < 0)
				return r;
		}
		r = decode_labels(d, s);
		if (r < 0)
			return r;
		/* Repeated stacks are merged, as pprof itself would show them. */
		r = profile_add_sample(d->p, d->ids, s->n_location_id, s->value, d->labels,
				       s->n_label);
		if (r < 0)
			return input_error(r);
	}
	return 0;
}

static int decode_message(const Perftools__Profiles__Profile *msg, struct profile **ret)
{
	struct decoder d = { .msg = msg };
	int r;

	/* pprof refuses a profile without it, calling it "unrecognized". */
	if (!msg->n_string_table || msg->string_table[0][0])
		return -EBADMSG;
	u64map_init(&d.functions);
	u64map_init(&d.mappings);
	u64map_init(&d.locations);

	r = decode_new(&d);
	if (r < 0)
		goto out_release;
	r = decode_header(&d);
	if (r >= 0)
		r = decode_functions(&d);
	if (r >= 0)
		r = decode_mappings(&d);
	if (r >= 0)
		r = decode_locations(&d);
	if (r >= 0)
		r = decode_samples(&d);
	if (r < 0)
		goto out_free_profile;
	*ret = d.p;
	d.p = NULL;

out_free_profile:
	profile_free(d.p);
out_release:
	decoder_release(&d);
	return r;
}

int pprof_decode(const uint8_t *buf, size_t len, struct profile **ret)
{
	Perftools__Profiles__Profile *msg;
	uint8_t *raw = NULL;
	size_t rawlen = len;
	int r;

	if ((!buf && len) || !ret)
		return -EINVAL;
	if (len >= 2 && buf[0] == 0x1f && buf[1] == 0x8b) {
		r = pprof_gunzip(buf, len, PPROF_MAX_INFLATED, &raw, &rawlen);
		if (r < 0)
			return r;
		buf = raw;
	}
	/* protobuf-c reports malformed bytes and allocation failure alike. */
	msg = perftools__profiles__profile__unpack(NULL, rawlen, buf ? buf : (const uint8_t *)"");
	if (!msg) {
		r = -EBADMSG;
		goto out_free_raw;
	}
	r = decode_message(msg, ret);
	perftools__profiles__profile__free_unpacked(msg, NULL);
out_free_raw:
	free(raw);
	return r;
}
