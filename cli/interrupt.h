/*
 * SIGINT, SIGTERM, SIGHUP and SIGQUIT end a collection early: the first one
 * sets a flag that the collection loop checks (poll returns EINTR), and the
 * profile of what was collected is still written. A SIGHUP ignored when
 * cprof started (nohup) stays ignored.
 *
 * A second one ends cprof at once, but never while the target is touched:
 * from interrupt_install() (or interrupt_guard()) until
 * interrupt_target_released(), a thread of the target may be stopped with
 * registers of cprof's, or its allocator hooked, and cprof dying there
 * would leave it so. Then the second signal only hurries: cprof puts the
 * target back as the first one asked, and interrupt_target_released() ends
 * it there, without writing.
 */
#ifndef CPROF_INTERRUPT_H
#define CPROF_INTERRUPT_H

#include <stdbool.h>
#include <sys/types.h>

#include "util/cancel.h"

/* The handlers, and the target guarded. */
void interrupt_install(void);
bool interrupt_requested(void);
/* The same, for lib/'s long steps. */
extern const struct cancel interrupt_cancel;
/* Forgets a request and handles the next signal again; the target stays
 * guarded (a background session's). */
void interrupt_reset(void);
/* The target is touched again (the next window of a loop). */
void interrupt_guard(void);
/* @pid is as cprof found it: a second signal that came meanwhile ends cprof
 * now, by that signal, after saying so. */
void interrupt_target_released(pid_t pid);

#endif
