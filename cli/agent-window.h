/*
 * The window of an agent session as a command runs it (lib/session/):
 * Ctrl-C ends it, a progress line shows it, and how it ended is said.
 */
#ifndef CPROF_AGENT_WINDOW_H
#define CPROF_AGENT_WINDOW_H

#include <stdint.h>

#include "channel/channel.h"
#include "session/session.h"
#include "target/target.h"

/*
 * Runs the window on @ch for @duration_ns, then ends the session.
 * @what names the records in the progress line ("samples", "events").
 * Returns 0 (also when the target exited or Ctrl-C came: see @res), or a
 * handler's -errno.
 */
int agent_window(struct channel *ch, const struct target *t, uint64_t duration_ns,
		 const struct channel_handlers *h, const char *what, struct window_result *res);

/* The same, but the session goes on after the window (cprof heap --keep). */
int agent_window_keep(struct channel *ch, const struct target *t, uint64_t duration_ns,
		      const struct channel_handlers *h, const char *what,
		      struct window_result *res);

/* Says how the window ended when it was not simply the duration. */
void agent_window_report(const struct window_result *w, const struct target *t);

#endif
