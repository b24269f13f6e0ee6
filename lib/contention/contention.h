/*
 * The block, mutex and threadcreate profiles of a process, from the agent's
 * EVENT records (lib/agent/wire.h): stacks as the agent walked them, or
 * unwound from the record's copy (which teaches the agent that walk),
 * aggregated per stack, written as Go writes them (runtime/pprof):
 *
 *   block, mutex   sample types contentions/count, delay/nanoseconds;
 *                  period type contentions/count, period 1 (Go's layout);
 *   threadcreate   sample type threadcreate/count.
 *
 * Estimates, not raw sums: a block wait d shorter than the rate r counts
 * r nanoseconds and r / d events (Go's saveblockevent() since 1.17; the agent
 * kept it with probability d / r); a mutex record counts rate times (one
 * in rate was kept), its delay too (Go's SetMutexProfileFraction).
 */
#ifndef CPROF_CONTENTION_H
#define CPROF_CONTENTION_H

#include <stdint.h>
#include <stdio.h>

#include "agent/wire.h"
#include "profile/profile.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"

struct contention_opts {
	uint32_t events;        /* CPROF_EVENTS_BLOCK, _MUTEX or _THREADCREATE */
	struct symbolizer *sym; /* the target's, the agent among its modules */
	struct unwinder *unw;   /* on sym's Dwfl */
	/* Optional: where the rules of the frames of copied stacks go, so that
	 * the agent walks later records itself (channel_put_rule()). */
	int (*put_rule)(void *arg, uint64_t key, uint64_t rule);
	void *put_rule_arg;
};

struct contention_stats {
	uint64_t records;  /* EVENT records taken */
	uint64_t ignored;  /* of another kind than the profile's */
	uint64_t unwound;  /* unwound past the agent into the program */
	uint64_t walked;   /* records whose stack the agent walked itself */
	double events;     /* estimated events (contentions, creations) */
	double delay_ns;   /* estimated delay */
};

struct contention;

int contention_new(struct contention **ret, const struct contention_opts *o);
void contention_free(struct contention *c);

/* Takes one record (a copy the caller has checked: size, stack_size). */
int contention_add(struct contention *c, const struct cprof_wire_event *ev);

const struct contention_stats *contention_stats(const struct contention *c);

/*
 * The pprof profile of what was added. @command_line goes into a comment;
 * @time_nanos and @duration_nanos are the window's.
 */
int contention_build(struct contention *c, const char *command_line, int64_t time_nanos,
		     int64_t duration_nanos, struct profile **ret);

/*
 * Go's legacy text (debug=1): "--- contention:" (block) or "--- mutex:",
 * "cycles/second=1000000000" (cycles are nanoseconds here), "sampling
 * period=RATE", then "DELAY COUNT @ 0xPC ..." per stack, most delay first,
 * with its frame lines; threadcreate: "threadcreate profile: total N" and
 * "COUNT @ 0xPC ...". Values are the estimates, rounded.
 */
int contention_write_text(struct contention *c, uint64_t rate, FILE *f);

#endif
