/* A profile's samples of one type, as stacks of function names. */
#include <errno.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"
#include "view-private.h"

int view_sample_index(const struct profile *p, const char *type, size_t *ret)
{
	const char *want = type ? type : p->default_sample_type;

	if (p->nsample_types == 0)
		return -ENOENT;
	if (!want || !*want) {
		*ret = p->nsample_types - 1;
		return 0;
	}
	for (size_t i = 0; i < p->nsample_types; i++) {
		const struct profile_value_type *t = &p->sample_types[i];
		size_t len = strlen(t->type);

		if (!strcmp(want, t->type) ||
		    (!strncmp(want, t->type, len) && want[len] == '/' && !strcmp(want + len + 1, t->unit))) {
			*ret = i;
			return 0;
		}
	}
	/* pprof falls back to the default when the profile names none it has. */
	if (!type) {
		*ret = p->nsample_types - 1;
		return 0;
	}
	return -ENOENT;
}

/* What drop_frames does to a location (pprof's Profile.Prune). */
struct loc_prune {
	bool whole;   /* every line matched: the location goes */
	bool beneath; /* the frames below it (towards the leaf) go */
	size_t first; /* the first line kept */
};

static const struct profile_location *location(const struct profile *p, uint64_t id)
{
	return id && id <= p->nlocations ? &p->locations[id - 1] : NULL;
}

static const char *function_name(const struct profile *p, uint64_t id)
{
	return id && id <= p->nfunctions ? p->functions[id - 1].name : NULL;
}

static int prune_locations(const struct profile *p, struct loc_prune **ret)
{
	struct loc_prune *lp = calloc(p->nlocations + 1, sizeof(*lp));
	char *pattern = NULL;
	regex_t re;

	if (!lp)
		return -ENOMEM;
	*ret = lp;
	if (!p->drop_frames || !*p->drop_frames)
		return 0;
	if (asprintf(&pattern, "^(%s)$", p->drop_frames) < 0)
		return -ENOMEM;
	/* A pattern POSIX cannot read is ignored: the view is still useful. */
	if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0) {
		free(pattern);
		return 0;
	}
	free(pattern);
	for (size_t l = 0; l < p->nlocations; l++) {
		const struct profile_location *loc = &p->locations[l];

		/* From the outermost line in: the first match decides. */
		for (size_t k = loc->nlines; k-- > 0;) {
			const char *name = function_name(p, loc->lines[k].function_id);

			if (!name || !*name || regexec(&re, name, 0, NULL, 0) != 0)
				continue;
			lp[l].beneath = true;
			lp[l].whole = k == loc->nlines - 1;
			lp[l].first = k + 1;
			break;
		}
	}
	regfree(&re);
	return 0;
}

/* The locations of @s that pprof keeps: [*ret_from, s->nlocations). */
static size_t pruned_start(const struct profile *p, const struct loc_prune *lp,
			   const struct profile_sample *s)
{
	bool user = false;

	/* From the root to the leaf; frames before the first user frame stay. */
	for (size_t i = s->nlocations; i-- > 0;) {
		const struct profile_location *loc = location(p, s->location_ids[i]);
		const struct loc_prune *pr = loc ? &lp[loc - p->locations] : NULL;

		if (!pr || (!pr->whole && !pr->beneath)) {
			user = true;
			continue;
		}
		if (!user)
			continue;
		return pr->whole ? i + 1 : i;
	}
	return 0;
}

/* pprof's name for a location without a function: address and object. */
static const char *address_name(const struct profile *p, struct view_stacks *vs,
				const struct profile_location *loc)
{
	const char *file = NULL, *base;
	char buf[512];

	if (loc->mapping_id && loc->mapping_id <= p->nmappings)
		file = p->mappings[loc->mapping_id - 1].file;
	if (file && *file) {
		base = strrchr(file, '/');
		snprintf(buf, sizeof(buf), "%016llx [%s]", (unsigned long long)loc->address,
			 base ? base + 1 : file);
	} else {
		snprintf(buf, sizeof(buf), "%016llx <unknown>", (unsigned long long)loc->address);
	}
	return strpool_intern(&vs->names, buf);
}

/* Appends a frame; @inlined: it is an inlined line, called by the frame before. */
static int push_frame(struct view_stacks *vs, const char *name, bool inlined, size_t *n,
		      size_t *alloc)
{
	size_t a = *alloc;

	if (GROW(vs->frames, *n + 1, *alloc) < 0)
		return -ENOMEM;
	if (GROW(vs->hows, *n + 1, a) < 0)
		return -ENOMEM;
	vs->frames[*n] = name;
	vs->hows[*n] = inlined ? VIEW_INLINED : VIEW_CALLED;
	(*n)++;
	return 0;
}

/* Appends the frames of one location, outermost line first (root order). */
static int push_location(const struct profile *p, struct view_stacks *vs,
			 const struct profile_location *loc, const struct loc_prune *pr, size_t *n,
			 size_t *alloc)
{
	size_t first = pr ? pr->first : 0;
	const char *name;
	bool any = false;

	for (size_t k = loc->nlines; k-- > first;) {
		name = function_name(p, loc->lines[k].function_id);
		if (!name)
			continue;
		if (push_frame(vs, name, any, n, alloc) < 0)
			return -ENOMEM;
		any = true;
	}
	if (any)
		return 0;
	name = address_name(p, vs, loc);
	if (!name)
		return -ENOMEM;
	return push_frame(vs, name, false, n, alloc);
}

static int compare_stacks(const void *a, const void *b)
{
	const struct view_stack *x = a, *y = b;

	for (size_t i = 0; i < x->n && i < y->n; i++) {
		int c = x->frames[i] == y->frames[i] ? 0 : strcmp(x->frames[i], y->frames[i]);

		if (c)
			return c;
	}
	return x->n < y->n ? -1 : x->n > y->n;
}

static bool same_stack(const struct view_stack *x, const struct view_stack *y)
{
	return x->n == y->n && compare_stacks(x, y) == 0;
}

/* Sorts and merges equal stacks; offsets in frames become pointers. */
static void merge_stacks(struct view_stacks *vs)
{
	size_t w = 0;

	if (vs->n == 0)
		return;
	for (size_t i = 0; i < vs->n; i++) {
		size_t at = (size_t)(uintptr_t)vs->stacks[i].frames;

		/* Samples whose every location is unknown leave no frame array at all. */
		vs->stacks[i].frames = vs->frames ? vs->frames + at : NULL;
		vs->stacks[i].how = vs->hows ? vs->hows + at : NULL;
		if (vs->stacks[i].n)
			vs->stacks[i].how[0] = 0; /* a root has no caller */
	}
	qsort(vs->stacks, vs->n, sizeof(*vs->stacks), compare_stacks);
	for (size_t i = 0; i < vs->n; i++) {
		struct view_stack *last = w ? &vs->stacks[w - 1] : NULL;

		if (last && same_stack(last, &vs->stacks[i])) {
			last->value = add_saturated(last->value, vs->stacks[i].value);
			for (size_t k = 0; k < last->n; k++)
				last->how[k] |= vs->stacks[i].how[k];
		} else {
			vs->stacks[w++] = vs->stacks[i];
		}
	}
	vs->n = w;
}

/* pprof's Sample.DiffBaseSample: OLD's samples under -diff_base. */
static bool is_diff_base(const struct profile_sample *s)
{
	for (size_t i = 0; i < s->nlabels; i++)
		if (s->labels[i].str && !strcmp(s->labels[i].key, VIEW_DIFF_BASE_LABEL) &&
		    !strcmp(s->labels[i].str, "true"))
			return true;
	return false;
}

int view_stacks_collect(const struct profile *p, size_t index, const struct view_filter *filter,
			struct view_stacks *ret)
{
	struct view_stacks vs = { 0 };
	struct loc_prune *lp = NULL;
	size_t nframes = 0, frames_alloc = 0, stacks_alloc = 0;
	int64_t base_total = 0;
	int r;

	if (index >= p->nsample_types)
		return -EINVAL;
	strpool_init(&vs.names);
	vs.unit = p->sample_types[index].unit;
	r = prune_locations(p, &lp);
	if (r < 0)
		goto out_fail;
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		int64_t v = s->values[index];
		size_t start = nframes, from;

		vs.total = add_saturated(vs.total, abs_saturated(v));
		if (is_diff_base(s))
			base_total = add_saturated(base_total, abs_saturated(v));
		if (v == 0 || !view_filter_keeps(filter, s))
			continue;
		from = pruned_start(p, lp, s);
		for (size_t l = s->nlocations; l-- > from;) {
			const struct profile_location *loc = location(p, s->location_ids[l]);

			if (!loc)
				continue;
			r = push_location(p, &vs, loc, &lp[loc - p->locations], &nframes,
					  &frames_alloc);
			if (r < 0)
				goto out_fail;
		}
		if (nframes > start)
			vs.kept = add_saturated(vs.kept, v);
		r = GROW(vs.stacks, vs.n + 1, stacks_alloc);
		if (r < 0)
			goto out_fail;
		/* frames may move while it grows: keep offsets until the end. */
		vs.stacks[vs.n++] = (struct view_stack){ .frames = (const char **)(uintptr_t)start,
							 .n = nframes - start, .value = v };
	}
	if (base_total > 0)
		vs.total = base_total;
	merge_stacks(&vs);
	free(lp);
	*ret = vs;
	return 0;

out_fail:
	free(lp);
	view_stacks_release(&vs);
	return r;
}

void view_stacks_release(struct view_stacks *s)
{
	if (!s)
		return;
	free(s->stacks);
	free(s->frames);
	free(s->hows);
	strpool_release(&s->names);
	memset(s, 0, sizeof(*s));
}
