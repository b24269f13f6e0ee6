/*
 * Views of a profile for people: pprof's -top table, folded stacks (the
 * collapsed format of flamegraph.pl, inferno and speedscope), an indented
 * call tree and a self-contained interactive flame-graph SVG. They read any
 * struct profile: one cprof built, or one pprof_decode() read from a file
 * that Go's runtime/pprof wrote.
 *
 * Every view shows one sample type (its index in p->sample_types) and sees
 * the stacks as pprof does: function names by location line, inlined frames
 * expanded (innermost first in a location), drop_frames applied.
 *
 * Writers print to a FILE and return 0 or -errno (-EIO when the stream
 * reports an error, -ENOMEM); they never print anywhere else.
 */
#ifndef CPROF_VIEW_H
#define CPROF_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "profile/profile.h"

enum view_format {
	VIEW_PPROF,  /* gzipped profile.proto: not a view, the profile itself */
	VIEW_TOP,    /* pprof -top */
	VIEW_FOLDED, /* "root;child;leaf VALUE" lines */
	VIEW_TREE,   /* indented call tree */
	VIEW_SVG,    /* interactive flame graph */
};

/* "pprof", "top", "folded", "tree", "svg": 0, or -EINVAL for another name. */
int view_format_from_name(const char *name, enum view_format *ret);
/* By the path's extension: .svg, .folded, .txt (top), anything else pprof. */
enum view_format view_format_from_path(const char *path);
const char *view_format_name(enum view_format f);

/*
 * The sample type a view shows: the one named @type ("cpu", "inuse_space";
 * "type/unit" is accepted too), or with @type NULL the profile's
 * default_sample_type, else the last type (pprof's rule). -ENOENT when no
 * type has that name or the profile has no sample types.
 */
int view_sample_index(const struct profile *p, const char *type, size_t *ret);

struct view_func {
	const char *name; /* interned in the profile */
	int64_t flat;     /* value where it is the leaf (innermost line of the first location) */
	int64_t cum;      /* value of the samples it appears in, once per sample */
	bool inlined;     /* some caller inlined it: pprof's "(inline)" */
	bool called;      /* ... and some called it: "(partial-inline)" with inlined */
};

/*
 * Per-function flat and cum of sample type @index, in pprof -top order:
 * flat descending, then name, then cum descending. *ret is malloc'd.
 */
int view_functions(const struct profile *p, size_t index, struct view_func **ret,
		   size_t *ret_n);

/*
 * pprof's value label: @v of @unit ("nanoseconds", "bytes", "count", ...)
 * in @out_unit ("ms", "kB", ...; "auto" picks the largest unit the value
 * reaches), "%.2f" with ".00" trimmed: "1.50s", "512kB", "42".
 */
void view_format_value(int64_t v, const char *unit, const char *out_unit, char *buf,
		       size_t size);

/*
 * pprof -top: the header lines ("Type:", "Duration:", "Dropped N nodes",
 * "Showing nodes accounting for X, Y% of Z total"), then flat, flat%,
 * sum%, cum, cum%, name. Nodes whose cum is below 0.5% of the total are
 * dropped as pprof does by default; @max_rows > 0 keeps only the first
 * rows (pprof -nodecount), 0 keeps all.
 */
int view_write_top(const struct profile *p, size_t index, size_t max_rows, FILE *f);

/* One line per distinct stack, root first: "main;work;leaf 1234". Stacks
 * of value 0 are left out; lines are sorted by stack. */
int view_write_folded(const struct profile *p, size_t index, FILE *f);

/*
 * The call tree from the roots down, two spaces per level: each line
 * "CUM CUM% FLAT name", children by cum descending. Subtrees below 0.5% of
 * the total are folded into one "..." line per parent.
 */
int view_write_tree(const struct profile *p, size_t index, FILE *f);

/*
 * A flame graph in the manner of flamegraph.pl: roots at the bottom, one
 * box per frame, width by value. An embedded script gives each box a title
 * (function, value, percent), zooms into a clicked box, searches names by
 * regular expression (the Search button, Ctrl-F or '/') showing the matched
 * percent, and resets the zoom (Reset Zoom, Escape). @title heads it; NULL
 * gives "Flame Graph". Needs no network and no other file. Its URL may
 * carry ?s=REGEX (search on load) and z=NAME (zoom into NAME's first frame).
 */
int view_write_svg(const struct profile *p, size_t index, const char *title, FILE *f);

/* Renders @format into a malloc'd buffer (for all-or-nothing output). */
int view_render(const struct profile *p, size_t index, enum view_format format,
		size_t max_rows, const char *title, char **ret, size_t *ret_len);

/*
 * Label filters, as go tool pprof's -tagfocus and -tagignore: a view of a
 * filtered profile shows only the samples every focus matches and no
 * ignore does. A @spec is KEY=REGEX[,REGEX...] (a string label KEY that one
 * regex matches, unanchored), REGEX[,REGEX...] without a key (each matches
 * some string label as "key:value"), or a numeric range [KEY=]N, N:, :N or
 * N:M (a numeric label KEY, or any, in it, both ends included).
 *
 * As in pprof, the total that percentages and the 0.5% cut-off of -top and
 * --tree are taken of stays the whole profile's; a flame graph spans what
 * is kept, and folded stacks add up to it.
 */
struct view_filter;

/* Adds a focus (@ignore false) or an ignore to *f, created if NULL. -EINVAL
 * with the reason in @why for a spec that cannot be read; -ENOMEM. */
int view_filter_add(struct view_filter **f, bool ignore, const char *spec, char *why,
		    size_t size);
void view_filter_free(struct view_filter *f);
/* Whether @s passes @f (a NULL filter keeps all). */
bool view_filter_keeps(const struct view_filter *f, const struct profile_sample *s);

/* view_render() of the samples @filter keeps (NULL: all); VIEW_PPROF
 * writes the profile with only those samples. */
int view_render_filtered(const struct profile *p, size_t index, enum view_format format,
			 size_t max_rows, const char *title, const struct view_filter *filter,
			 char **ret, size_t *ret_len);

/*
 * Two profiles compared, as go tool pprof compares them: NEW less OLD,
 * which every view shows with signed values. VIEW_DIFF_BASE is pprof's
 * -diff_base: OLD's samples stay apart, labelled pprof::base=true, and
 * percentages are of OLD's total. VIEW_DIFF_SUBTRACT is pprof's -base: the
 * difference is a plain profile, percentages of the sum of its absolute
 * values. @normalize (pprof's -normalize) first scales NEW's values so that
 * each sample type sums to OLD's. The flame graph keeps NEW's widths and
 * colours each frame by its change: red grew, blue shrank, white the same.
 */
enum view_diff_mode {
	VIEW_DIFF_BASE,
	VIEW_DIFF_SUBTRACT,
};

struct view_diff;

/* -EINVAL with the reason in @why when the profiles cannot be compared
 * (other sample or period types), -EOVERFLOW, -ENOMEM. Keeps no pointer to
 * @cur or @base. */
int view_diff_new(const struct profile *cur, const struct profile *base,
		  enum view_diff_mode mode, bool normalize, struct view_diff **ret, char *why,
		  size_t size);
/* The merged profile (NEW's sample types): what --pprof writes. */
const struct profile *view_diff_profile(const struct view_diff *d);
/* view_render_filtered() of the comparison. */
int view_diff_render(const struct view_diff *d, size_t index, enum view_format format,
		     size_t max_rows, const char *title, const struct view_filter *filter,
		     char **ret, size_t *ret_len);
void view_diff_free(struct view_diff *d);

/* pprof's Normalize factors: per sample type, OLD's sum / NEW's (0 when
 * NEW's is 0), into @ret[cur->nsample_types]. */
void view_diff_ratios(const struct profile *cur, const struct profile *base, double *ret);

#endif
