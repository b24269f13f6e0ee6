/*
 * The window of an agent profiler as a command shows it: how the window
 * ended when it was not simply the duration.
 */
#ifndef CPROF_AGENT_WINDOW_H
#define CPROF_AGENT_WINDOW_H

#include <stdint.h>

#include "session/session.h"
#include "target/target.h"

/* Says how the window ended when it was not simply the duration. */
void agent_window_report(const struct window_result *w, const struct target *t);

/* Its part that is the agent's own: a malformed ring, a session the agent
 * ended early, a span sampled that is not the window asked for, hooks not
 * confirmed gone. */
void agent_window_report_agent(const struct window_result *w, const struct target *t);

#endif
