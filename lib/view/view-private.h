/* What the views share: a profile's stacks as function names, and the call
 * tree built from them. */
#ifndef CPROF_VIEW_PRIVATE_H
#define CPROF_VIEW_PRIVATE_H

#include "view.h"

/* The label pprof gives OLD's samples under -diff_base (Sample.DiffBaseSample). */
#define VIEW_DIFF_BASE_LABEL "pprof::base"

/* Of a sample type, the share of the total below which pprof drops a node. */
#define VIEW_NODE_FRACTION 0.005

/* How a frame was reached, for pprof's "(inline)" marks: as an inlined
 * line of its location, or as the outermost (a call); the bits of the
 * samples merged into one stack are or'ed. */
enum { VIEW_CALLED = 1, VIEW_INLINED = 2 };

struct view_stack {
	const char **frames; /* root first; points into the profile or the pool */
	uint8_t *how;        /* per frame: VIEW_CALLED and/or VIEW_INLINED (root: 0) */
	size_t n;
	int64_t value;
};

/*
 * The samples of one type as pprof sees them (drop_frames applied, inlined
 * frames expanded), merged by their frame names and sorted root first,
 * leaving out stacks of value 0 and samples @filter drops (NULL: none).
 * @total is the sum of all sample values, those with no frames and those
 * the filter drops included (pprof's total: it is taken before the filters),
 * each counted as its absolute value; where some samples are labelled
 * pprof::base, of those alone (pprof's computeTotal).
 */
struct view_stacks {
	struct view_stack *stacks;
	size_t n;
	int64_t total;
	int64_t kept; /* sum of the stacks with a frame: pprof's graph total, of
		       * which its node cut-off is taken (total without filters,
		       * but for frameless samples) */
	const char *unit; /* of the sample type */
	const char **frames; /* storage of every stack's frames */
	uint8_t *hows;       /* ... and of their how */
	struct strpool names; /* names made up for locations without a function */
};

int view_stacks_collect(const struct profile *p, size_t index, const struct view_filter *filter,
			struct view_stacks *ret);
void view_stacks_release(struct view_stacks *s);

/* The tree of stacks: node 0 is the root ("all"), children in name order. */
struct view_node {
	const char *name;
	int64_t total; /* this frame and everything above it */
	int64_t self;  /* samples that end here */
	size_t first_child, last_child, next_sibling; /* 0: none */
	unsigned depth; /* root 0 */
};

struct view_tree {
	struct view_node *nodes;
	size_t n, alloc;
	unsigned max_depth;
	struct view_stacks stacks; /* what it was built from: owns some names */
};

/* view_stacks_collect(), then the tree of those stacks. */
int view_tree_build(const struct profile *p, size_t index, const struct view_filter *filter,
		    struct view_tree *ret);

/* The writers of view.h, of the samples @filter keeps. */
int view_top_write(const struct profile *p, size_t index, size_t max_rows,
		   const struct view_filter *filter, FILE *f);
int view_folded_write(const struct profile *p, size_t index, const struct view_filter *filter,
		      FILE *f);
int view_tree_write(const struct profile *p, size_t index, const struct view_filter *filter,
		    FILE *f);
int view_svg_write(const struct profile *p, size_t index, const char *title,
		   const struct view_filter *filter, FILE *f);

/*
 * The flame graph of a built tree. With @delta (per node of @t; NULL: an
 * ordinary flame graph) each frame is coloured as flamegraph.pl colours a
 * differential one: red by how much it grew, blue by how much it shrank,
 * full colour at @max_delta.
 */
int view_svg_write_tree(const struct view_tree *t, const char *type, const char *title,
			const int64_t *delta, int64_t max_delta, FILE *f);

/* pprof's "Active filters:" lines: how many, and each "tagfocus=SPEC". */
size_t view_filter_count(const struct view_filter *f);
const char *view_filter_text(const struct view_filter *f, size_t i);

/*
 * A read-only copy of @p's struct with only the samples @f keeps, for the
 * encoder: it shares everything else with @p (never free or change it, nor
 * use it after @p goes); free *ret_kept, its samples array, after use.
 */
int view_filter_apply(const struct profile *p, const struct view_filter *f,
		      struct profile *ret_view, struct profile_sample **ret_kept);
void view_tree_release(struct view_tree *t);

/* The unit pprof's -top and -tree choose for all values of a report
 * (selectOutputUnit: the smallest non-zero value decides). */
const char *view_output_unit(const char *unit, const int64_t *values, size_t n, int64_t total,
			     char *buf, size_t size);

/* pprof's percentage: "  100%", "%5.2f%%" from 1%, "%5.2g%%" below. */
void view_format_percent(int64_t v, int64_t total, char *buf, size_t size);

/* What @write writes to a memory stream, into a malloc'd *ret (format.c). */
int view_render_stream(int (*write)(const void *arg, FILE *f), const void *arg, char **ret,
		       size_t *ret_len);

/* A stream's error flag as -EIO (format.c). */
int view_stream_status(FILE *f);

#endif
