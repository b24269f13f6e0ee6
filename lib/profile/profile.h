/*
 * The in-memory profile: pprof's data model (samples -> locations -> lines ->
 * functions, plus mappings), built by the collectors and read by the pprof
 * encoder and the text writers. Every string is interned in the profile and
 * lives as long as it; ids are index + 1 (pprof reserves 0 for "none").
 *
 * The structures are public for reading. Change them only through the
 * functions below, which keep the deduplication indexes in step.
 */
#ifndef CPROF_PROFILE_H
#define CPROF_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/util.h"

struct profile_value_type {
	const char *type; /* "samples", "cpu", "threads", ... */
	const char *unit; /* "count", "nanoseconds", "bytes", ... */
};

struct profile_label {
	const char *key;
	const char *str;      /* string label; NULL for a numeric one */
	int64_t num;          /* numeric label, when str is NULL */
	const char *num_unit; /* optional unit of num; may be NULL */
};

struct profile_mapping {
	uint64_t id;
	uint64_t start, limit, offset; /* as /proc/PID/maps shows the segment */
	const char *file;
	const char *build_id; /* lower-case hex, "" when unknown */
	bool has_functions, has_filenames, has_line_numbers, has_inline_frames;
};

struct profile_function {
	uint64_t id;
	const char *name;        /* human-readable (demangled) */
	const char *system_name; /* as the linker sees it (mangled) */
	const char *file;        /* "" when unknown */
	int64_t start_line;
};

struct profile_line {
	uint64_t function_id;
	int64_t line; /* 0 when unknown */
};

struct profile_location {
	uint64_t id;
	uint64_t mapping_id; /* 0: unknown */
	uint64_t address;    /* leaf: the PC; callers: return address - 1 */
	struct profile_line *lines; /* innermost (inlined) first */
	size_t nlines;
};

struct profile_sample {
	uint64_t *location_ids; /* leaf first */
	size_t nlocations;
	int64_t *values; /* one per sample type */
	struct profile_label *labels;
	size_t nlabels;
};

struct profile {
	struct profile_value_type *sample_types;
	size_t nsample_types;
	struct profile_sample *samples;
	size_t nsamples, samples_alloc;
	struct profile_mapping *mappings;
	size_t nmappings, mappings_alloc;
	struct profile_location *locations;
	size_t nlocations, locations_alloc;
	struct profile_function *functions;
	size_t nfunctions, functions_alloc;
	const char **comments;
	size_t ncomments, comments_alloc;

	struct profile_value_type period_type; /* type NULL: not set */
	int64_t period;
	int64_t time_nanos;     /* start of collection, since the epoch */
	int64_t duration_nanos; /* length of the collection window */
	const char *default_sample_type; /* NULL: pprof's default (the last) */
	const char *drop_frames;         /* regex, NULL: none */

	/* Private: interning and deduplication. */
	struct strpool strings;
	struct u64map location_by_address;
	struct u64map function_by_key;
	struct u64map sample_by_key;
};

/* Creates an empty profile with these sample types (copied). */
int profile_new(struct profile **ret, const struct profile_value_type *types, size_t ntypes);
/* Frees the profile and everything in it; accepts NULL. */
void profile_free(struct profile *p);

/* Interns @s in the profile; returns NULL on -ENOMEM. */
const char *profile_intern(struct profile *p, const char *s);

int profile_set_period(struct profile *p, const char *type, const char *unit, int64_t period);
int profile_set_default_sample_type(struct profile *p, const char *type);
int profile_set_drop_frames(struct profile *p, const char *regex);
int profile_add_comment(struct profile *p, const char *text);

/* Adds a mapping (not deduplicated). *ret_id is its id. */
int profile_add_mapping(struct profile *p, const struct profile_mapping *m, uint64_t *ret_id);

/* The function with these fields, added if new (deduplicated on all four). */
int profile_intern_function(struct profile *p, const char *name, const char *system_name,
			    const char *file, int64_t start_line, uint64_t *ret_id);

/*
 * The location for @address, added (without lines or mapping) if new: one
 * location per distinct address. Symbolization fills it later with
 * profile_location_set().
 */
int profile_location_for_address(struct profile *p, uint64_t address, uint64_t *ret_id);
/*
 * Sets mapping and lines (copied) of location @id, replacing any. -EINVAL,
 * and no change, if @id, @mapping_id (0 is "none") or a function id is unknown.
 */
/*
 * A location that is a name, not code: time a profiler accounts without a
 * stack ("[unsampled: ...]"). @address must never be a PC (0, 1, ...: the
 * first page is never mapped); the same @address gives the same location.
 */
int profile_named_location(struct profile *p, uint64_t address, const char *name,
			   uint64_t *ret_id);

int profile_location_set(struct profile *p, uint64_t id, uint64_t mapping_id,
			 const struct profile_line *lines, size_t nlines);

/*
 * Adds a new location even if one with @address exists, with its mapping and
 * lines (copied). For readers of other tools' profiles, where several
 * locations may share an address (0 when it is unknown). The address index
 * keeps the first location of each address.
 */
int profile_add_location(struct profile *p, uint64_t address, uint64_t mapping_id,
			 const struct profile_line *lines, size_t nlines, uint64_t *ret_id);

/*
 * Adds values to the sample with this stack (location ids, leaf first) and
 * these labels, creating it if new. Samples with the same stack and labels
 * (same keys, values, in the same order) are merged by adding values.
 * Labels are compared as stored: a string label ignores num and num_unit,
 * and a num_unit of "" is the same as NULL. -EINVAL for an unknown location
 * id or a label without a key; -EOVERFLOW, and no change, if a merged value
 * would overflow.
 */
int profile_add_sample(struct profile *p, const uint64_t *location_ids, size_t nlocations,
		       const int64_t *values, const struct profile_label *labels,
		       size_t nlabels);

/* Sample @s's label @key, or NULL. */
const struct profile_label *profile_sample_label(const struct profile_sample *s, const char *key);

/*
 * profile-process.c: the period @type/@unit/@period, the process's name
 * interned (@ret_process_name, for threads gone by then) and the command
 * line as the first comment.
 */
int profile_begin_process(struct profile *p, pid_t pid, const char *type, const char *unit,
			  int64_t period, const char *command_line, const char **ret_process_name);

/* Sum of sample values of type index @i (saturated; 0 past the last type). */
int64_t profile_total(const struct profile *p, size_t i);

/* ---- profile-merge.c: merges, as pprof's profile.Merge ------------------ */

/* How a merge tells a source's mappings and locations from the profile's own. */
enum profile_match {
	/* pprof's keys: a mapping by its size, offset and build ID (else
	 * file), a location by its mapping, address relative to it and lines:
	 * profiles of other processes, builds and producers. Labels are
	 * compared in pprof's order (sampleKey). */
	PROFILE_MATCH_KEY,
	/* One process's profiles: a location by its address, a mapping by its
	 * start and file, labels as they are. */
	PROFILE_MATCH_ADDRESS,
};

struct profile_merge {
	enum profile_match match;
	const double *ratios; /* each sample type's scale (ScaleN); NULL: 1 */
	const char *label;    /* set to "true" on every merged sample; NULL: none */
	/* Set on every merged sample, in place of the source's of their keys
	 * (a process's id and name where processes' profiles meet). */
	const struct profile_label *labels;
	size_t nlabels;
};

/*
 * pprof's Profile.compatible: the same period type and sample types; else
 * -EINVAL with the reason in @why.
 */
int profile_merge_compatible(const struct profile *a, const struct profile *b, char *why,
			     size_t size);
/*
 * Merges @src's samples into @p as @how says, adding the mappings,
 * functions and locations @p lacks. Samples whose scaled values all come to
 * zero are left out; those that add up to zero stay (see
 * profile_drop_zero_samples()). -EINVAL for other sample types, -EOVERFLOW.
 */
int profile_merge(struct profile *p, const struct profile *src, const struct profile_merge *how);
/* pprof's combineHeaders of @srcs into @p: the earliest time, the summed
 * durations, the largest period, every comment once. */
int profile_merge_headers(struct profile *p, const struct profile *const srcs[], size_t n);

/*
 * @p less @base (compatible), as Go's net/http/pprof serves a delta
 * (serveDeltaProfile): @base scaled by -1 and merged into @p by address;
 * the samples that come to zero go. 0 or -errno (-EINVAL: other types).
 */
int profile_subtract(struct profile *p, const struct profile *base);

/* Removes the samples whose every value is zero (pprof's Merge drops them). */
int profile_drop_zero_samples(struct profile *p);

#endif
