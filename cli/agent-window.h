/*
 * The window of an agent profiler as a command shows it: a progress line
 * on stderr, and how the window ended when it was not simply the duration.
 */
#ifndef CPROF_AGENT_WINDOW_H
#define CPROF_AGENT_WINDOW_H

#include <stdint.h>

#include "session/session.h"
#include "target/target.h"

struct window_progress {
	const struct target *t;
	const char *what; /* the records counted ("samples", "records") */
	char total[32];   /* the window's duration, as written */
};

void window_progress_init(struct window_progress *p, const struct target *t, const char *what,
			  uint64_t duration_ns);

/* window_opts.progress's: "profiling pid N (comm): 3s / 30s, 1234 samples". */
void window_progress(void *arg, uint64_t elapsed_ns, uint64_t records);

/* Says how the window ended when it was not simply the duration. */
void agent_window_report(const struct window_result *w, const struct target *t);

#endif
