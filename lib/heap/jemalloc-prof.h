/*
 * jemalloc's own heap profile (mallctl("prof.dump"), jemalloc's
 * prof_dump_header() and prof_dump_gctx() in src/prof_data.c), read and
 * turned into the profile cprof's hook-based heap path writes (heap.h):
 *
 *   heap_v2/PERIOD
 *     t*: CUROBJS: CURBYTES [ACCUMOBJS: ACCUMBYTES]     (all threads)
 *     tN: ... [...] [thread name]                       (one per thread)
 *   @ 0xADDR 0xADDR ...                                 (a backtrace, leaf first)
 *     t*: CUROBJS: CURBYTES [ACCUMOBJS: ACCUMBYTES]     (its totals)
 *     tN: ...                                           (per thread)
 *   ...
 *   MAPPED_LIBRARIES:
 *   (the process's /proc/self/maps)
 *
 * PERIOD is 2^lg_prof_sample, the mean bytes between samples. The counts
 * are the sampled ones, made (by jemalloc 5.3's prof_do_unbias(), or as
 * they are before it) such that scaling each backtrace's by pprof's
 * scaleHeapSample, 1 / (1 - exp(-(bytes / objects) / PERIOD)), gives the
 * estimate of the true figures. ACCUM figures are 0 unless jemalloc ran
 * with prof_accum:true.
 *
 * The dump comes from the target: untrusted text. The parser bounds every
 * number and line, and fails with -EBADMSG on anything it does not know.
 */
#ifndef CPROF_HEAP_JEMALLOC_PROF_H
#define CPROF_HEAP_JEMALLOC_PROF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "profile/profile.h"
#include "symbolize/symbolize.h"

/* jemalloc's PROF_BT_MAX; a longer backtrace is refused. */
#define JEPROF_MAX_FRAMES 128

struct jeprof_counts {
	uint64_t cur_objects, cur_bytes;
	uint64_t accum_objects, accum_bytes;
};

struct jeprof_bucket {
	uint64_t *addrs; /* as dumped: return addresses, leaf first */
	size_t naddrs;
	struct jeprof_counts c; /* its t*: line */
};

struct jeprof {
	uint64_t period;          /* mean bytes between samples, > 0 */
	struct jeprof_counts all; /* the header's t*: line */
	size_t nthreads;          /* header lines of threads */
	struct jeprof_bucket *buckets;
	size_t nbuckets, alloc;
	size_t maps_offset; /* where MAPPED_LIBRARIES: begins in the text; 0: none */
};

/* Parses @len bytes of @text (not NUL-terminated). 0, -EBADMSG, -ENOMEM. */
int jeprof_parse(const char *text, size_t len, struct jeprof **ret);
void jeprof_free(struct jeprof *j);

/* scaleHeapSample's factor for one backtrace's @objects, @bytes. */
double jeprof_scale(uint64_t objects, uint64_t bytes, uint64_t period);

struct jeprof_build_opts {
	struct symbolizer *sym;   /* the target's modules */
	const char *default_type; /* one of the four sample types, NULL: pprof's */
	const char *command_line; /* the first comment, NULL: none */
	int pid;                  /* named in a comment */
	int64_t time_nanos;       /* when the dump was taken */
	int64_t duration_nanos;   /* how long the process had run by then, 0: unknown */
};

/*
 * The pprof profile, as heap_build() writes one: alloc_objects/count,
 * alloc_space/bytes, inuse_objects/count, inuse_space/bytes, period
 * space/bytes = PERIOD, a numeric label "bytes" = the backtrace's mean
 * block size, values unbiased per backtrace. Each address is a return
 * address (libgcc's _Unwind_GetIP(), libunwind's unw_backtrace()), made
 * address - 1 to fall in the call; the leading frames inside libjemalloc
 * (its backtrace, malloc, operator new) are dropped. Comments say that
 * the figures are jemalloc's since the program started.
 */
int jeprof_build(const struct jeprof *j, const struct jeprof_build_opts *o, struct profile **ret);

/* Go's debug=1 text of it (raw counts, as heap_write_text()), to @f. */
int jeprof_write_text(const struct jeprof *j, struct symbolizer *sym, FILE *f);

#endif
