/*
 * The window of an agent session (heap, block, mutex, threadcreate): keep
 * the agent's heartbeat, drain its records into the command's handlers,
 * show progress, stop on the duration, Ctrl-C or the target's exit, then
 * end the session (the agent restores every GOT entry) and take what is
 * left. The command builds its profile from what its handlers collected.
 */
#ifndef CPROF_AGENT_WINDOW_H
#define CPROF_AGENT_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

#include "channel/channel.h"
#include "profile/profile.h"
#include "target/target.h"

struct window_result {
	uint64_t start_realtime_ns; /* for the profile's time_nanos */
	uint64_t window_ns;
	uint64_t records;
	bool target_exited;
	bool interrupted;
	bool detached;     /* the agent confirmed its hooks are gone */
	bool malformed;    /* the ring held garbage: reading stopped there */
	int live_error;    /* -errno: the live set's snapshot was asked for, not had */
	struct channel_counters counters; /* at the end */
};

/*
 * Runs the window on @ch for @duration_ns. @what names the records in the
 * progress line ("samples", "events"). Returns 0 (also when the target
 * exited or Ctrl-C came: see @res), or a handler's -errno.
 */
int agent_window(struct channel *ch, const struct target *t, uint64_t duration_ns,
		 const struct channel_handlers *h, const char *what, struct window_result *res);

/*
 * Asks for the live set's snapshot (unless one is pending) and drains until
 * it was handed to @h->live. With @h->live set, the window itself asks
 * every 100 ms in its last second and waits for the last one. A snapshot
 * the agent did not give goes to @res->live_error; a handler's error is
 * returned.
 */
int agent_window_live(struct channel *ch, const struct channel_handlers *h,
		      struct window_result *res, pid_t pid);

/* Says how the window ended when it was not simply the duration. */
void agent_window_report(const struct window_result *w, const struct target *t);

/* Notes the records the agent lost (ring full), as @c counts them, in @p's
 * comments. */
int agent_note_lost(const struct channel_counters *c, struct profile *p);

/* The same, but the session goes on after the window (cprof heap --keep). */
int agent_window_keep(struct channel *ch, const struct target *t, uint64_t duration_ns,
		      const struct channel_handlers *h, const char *what,
		      struct window_result *res);

#endif
