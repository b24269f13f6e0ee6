/*
 * cprof's end of the agent's channel (lib/agent/wire.h): the memfd the
 * agent created in the target, opened through /proc/PID/fd and mapped.
 * Every byte of it is UNTRUSTED: the target may be buggy or hostile. The
 * header is checked once, positions on every drain, each record before it
 * is used, and records are copied out before they are looked at (the
 * target can change them under us).
 */
#ifndef CPROF_CHANNEL_H
#define CPROF_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/wire.h"

struct channel;

/* Counters the agent keeps, copied out. */
struct channel_counters {
	uint32_t state, detach_reason, events;
	uint64_t samples, sampled_bytes, frees, lost, untracked, hooked, errors, rate_in_use;
	uint64_t lost_allocs, lost_alloc_bytes;
	uint64_t sampling_on_ns, sampling_off_ns; /* the agent's CLOCK_MONOTONIC */
};

/* What a drain hands over: copies, checked for size and bounds. */
struct channel_handlers {
	int (*alloc)(const struct cprof_wire_alloc *r, void *arg);
	int (*free)(const struct cprof_wire_free *r, void *arg);
	int (*event)(const struct cprof_wire_event *r, void *arg);
	/* Optional: the live set's snapshot (channel_live_ask()), handed over
	 * once the records published before it have been. */
	int (*live)(const struct cprof_wire_live *e, size_t n, void *arg);
	void *arg;
};

/*
 * Opens memfd @fd of @pid. -ESRCH: gone; -EPROTO: not a channel of a
 * compatible agent (magic, version, sizes); -errno otherwise.
 */
int channel_open(struct channel **ret, pid_t pid, int fd);
void channel_close(struct channel *ch);
/*
 * Once the session is over and drained: the ring's, the rules' and the
 * snapshot's pages are freed in the target (the memfd stays, for the next
 * session, holding nothing but its header).
 */
void channel_give_back(struct channel *ch);

/*
 * The same over @size bytes at @map that the caller owns (tests, fuzzing):
 * the header is checked as channel_open() does; no pid (commands and the
 * heartbeat go to the memory only).
 */
int channel_from_memory(struct channel **ret, void *map, size_t size);

/* cprof is alive: the agent detaches by itself when this stops (1 s). */
void channel_heartbeat(struct channel *ch);

/*
 * Sends @cmd (CPROF_CMD_*) and waits up to @timeout_ms for the agent's
 * state to become @state. 0, -ETIMEDOUT, or -ESRCH when the target is gone.
 */
int channel_command(struct channel *ch, uint32_t cmd, uint32_t state, unsigned timeout_ms);
/* The last command channel_command() sent on @ch (CPROF_CMD_NONE: none). */
uint32_t channel_sent(const struct channel *ch);

/* A session of several kinds: each kind's rate, @rates by CPROF_KIND_*
 * (0: as it is), taken by the agent within a watchdog tick. */
void channel_set_rates(struct channel *ch, const uint64_t rates[CPROF_KINDS]);

/*
 * Asks the agent for the sampled blocks live now (wire.h): it answers
 * within a watchdog tick with a LIVE record, which a later drain hands to
 * the live handler at its place in the stream (every ALLOC of those blocks
 * before it). 0, or -ENOTSUP when this agent keeps no snapshot room. Ask
 * again only once no answer is pending: the room holds one snapshot.
 */
int channel_live_ask(struct channel *ch);
bool channel_live_pending(const struct channel *ch);
/* The snapshot asked for last is in the ring, handed over or not yet (an
 * agent of an older build: handed over). */
bool channel_live_written(const struct channel *ch);
/* Snapshots handed to a live handler so far. */
unsigned channel_live_taken(const struct channel *ch);

void channel_counters(const struct channel *ch, struct channel_counters *ret);

/*
 * Teaches the agent how to step over the frame of return address @key
 * (wire.h, struct cprof_wire_rule; unwind_rule() computes @rule).
 * 0; -EEXIST: it knows already; -ENOSPC: no free slot where @key would go;
 * -ENOTSUP: this agent takes no rules.
 */
int channel_put_rule(struct channel *ch, uint64_t key, uint64_t rule);

/*
 * Hands every complete record to @h, frees their space. Returns the number
 * of records handed to a handler, or -EPROTO at the first malformed one (the ring is then
 * unusable: the caller stops reading and says so), or a handler's error.
 */
int channel_drain(struct channel *ch, const struct channel_handlers *h);
/* The same, stopping between two records once @deadline_ns (CLOCK_MONOTONIC,
 * looked at every 256 records) has passed: a long drain leaves the other
 * profilers of a loop their turn. */
int channel_drain_until(struct channel *ch, const struct channel_handlers *h,
			uint64_t deadline_ns);

#endif
