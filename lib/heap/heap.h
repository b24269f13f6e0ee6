/*
 * Go's heap profile of a process, from the agent's ALLOC and FREE records
 * (lib/agent/wire.h): each sampled allocation's stack is unwound from its
 * copy, and counted in a bucket of (stack, size), as Go's memprofile
 * buckets are; a FREE of a sampled block moves it out of "inuse". Written
 * as runtime/pprof writes the heap profile:
 *
 *   pprof: alloc_objects/count, alloc_space/bytes, inuse_objects/count,
 *   inuse_space/bytes; period_type space/bytes, period = rate; the numeric
 *   label "bytes" = the bucket's block size; values unbiased per bucket
 *   with Go's scaleHeapSample: x / (1 - exp(-avg_size / rate));
 *
 *   text (debug=1): "heap profile: I: IB [A: AB] @ heap/2*rate", then one
 *   "i: ib [a: ab] @ 0xPC ..." line per bucket, most inuse bytes first,
 *   with its frames; raw sampled counts, as Go prints them.
 */
#ifndef CPROF_HEAP_H
#define CPROF_HEAP_H

#include <stdint.h>
#include <stdio.h>

#include "agent/wire.h"
#include "profile/profile.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"

struct heap_opts {
	struct symbolizer *sym; /* the target's, the agent among its modules */
	struct unwinder *unw;   /* on sym's Dwfl */
	uint64_t rate;          /* the session's sampling rate, bytes */
	/*
	 * Optional: called with the rule (unwind_rule()) of every return
	 * address the first time a copied stack's unwind meets it, so that
	 * the agent walks later samples itself (channel_put_rule()).
	 */
	int (*put_rule)(void *arg, uint64_t key, uint64_t rule);
	void *put_rule_arg;
};

struct heap_stats {
	uint64_t allocs;        /* ALLOC records */
	uint64_t frees;         /* FREE records of blocks we had */
	uint64_t unknown_frees; /* FREE records of blocks we never saw */
	uint64_t untracked;     /* ALLOCs the agent could not follow (stay inuse) */
	uint64_t unwound;       /* ALLOCs unwound past the agent */
	uint64_t walked;        /* ALLOCs the agent walked itself (wire.h) */
	uint64_t other_rate;    /* ALLOCs drawn at another rate than opts.rate */
};

struct heap;

int heap_new(struct heap **ret, const struct heap_opts *o);
void heap_free(struct heap *h);

/* One record each (copies the caller has checked: lib/channel). */
int heap_add_alloc(struct heap *h, const struct cprof_wire_alloc *r);
int heap_add_free(struct heap *h, const struct cprof_wire_free *r);

const struct heap_stats *heap_stats(const struct heap *h);

/*
 * A snapshot of the agent's live set (channel_live_ask()), added once every
 * ALLOC published before it was: inuse is then the mean of the snapshots'
 * blocks, not ALLOCs minus FREEs (a stream that lost a FREE would keep a
 * block in use for good). Blocks without a recorded ALLOC count in
 * proportion. Each snapshot of a churning heap is a new draw of Go's
 * sampling: their mean has a smaller error than one.
 */
int heap_add_live(struct heap *h, const struct cprof_wire_live *live, size_t n);
/* Forget the snapshots added so far (a later profile takes new ones). */
void heap_reset_live(struct heap *h);
/* The agent's counts of ALLOCs, and of records of any kind, it dropped. */
void heap_set_lost(struct heap *h, uint64_t lost_allocs, uint64_t lost_records);
/* What each recorded sample's alloc figures are multiplied by (>= 1). */
double heap_alloc_factor(const struct heap *h);
/* The same for inuse; 0 when inuse cannot be known (lost records, no
 * snapshot). */
double heap_inuse_factor(const struct heap *h);

/* scaleHeapSample's: 1 / (1 - exp(-avg / rate)); 1 when rate <= 1. */
double heap_scale(double count, double bytes, uint64_t rate);

/*
 * The pprof profile. @default_type is one of the four sample types (the
 * one pprof shows first); @command_line goes into a comment.
 */
int heap_build(struct heap *h, const char *default_type, const char *command_line,
	       int64_t time_nanos, int64_t duration_nanos, struct profile **ret);

/* Go's debug=1 text, to @f. */
int heap_write_text(struct heap *h, FILE *f);

#endif
