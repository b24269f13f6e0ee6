/*
 * A sampler's window on a target (cpu's, wall's), on CLOCK_MONOTONIC: its
 * start, its end, said once, and the target's liveness looked at now and
 * then while it goes on, so that a target gone ends the window there.
 */
#include <errno.h>

#include "target/target.h"
#include "util/util.h"

void target_window_start(struct target_window *w, pid_t pid, uint64_t now)
{
	*w = (struct target_window){ .pid = pid, .start_ns = now, .looked_ns = now };
}

uint64_t target_window_ns(const struct target_window *w, uint64_t now)
{
	if (w->end_ns)
		return w->end_ns - w->start_ns;
	return now > w->start_ns ? now - w->start_ns : 0;
}

int target_window_look(struct target_window *w, uint64_t now)
{
	if (now - w->looked_ns < TARGET_LIVENESS_NS)
		return 0;
	w->looked_ns = now;
	if (target_alive(w->pid))
		return 1;
	target_window_end(w, now);
	return -ESRCH;
}

uint64_t target_window_end(struct target_window *w, uint64_t end)
{
	if (!w->end_ns)
		w->end_ns = end ? end : now_monotonic_ns();
	return w->end_ns - w->start_ns;
}
