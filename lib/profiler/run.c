/* Several profilers on one target in one window (profiler.h). */
#include "profiler/profiler.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* The longest any one poll waits: a cancel or the window's end is seen
 * within about this. */
#define POLL_SLICE_MS 100
#define TICK_NS 1000000000ULL

static int stop_all(struct profiler **ps, size_t n)
{
	int r = 0;

	for (size_t i = 0; i < n; i++) {
		int k = profiler_stop(ps[i]);

		if (k < 0 && r == 0)
			r = k;
	}
	return r;
}

/* Each profiler still in its window polled once, the slice shared. 1: all
 * are over; -ESRCH: the target is gone; other -errno with @err. */
static int poll_round(struct profiler **ps, size_t n, bool *over, uint64_t left_ns, char *err,
		      size_t errlen)
{
	size_t active = 0;
	int slice;

	for (size_t i = 0; i < n; i++)
		active += !over[i];
	if (!active)
		return 1;
	slice = (int)MIN(left_ns / 1000000 + 1, (uint64_t)POLL_SLICE_MS);
	slice = MAX(slice / (int)active, 1);
	for (size_t i = 0; i < n; i++) {
		int r;

		if (over[i])
			continue;
		r = profiler_poll(ps[i], slice);
		if (r == -ESRCH)
			return r;
		if (r < 0) {
			snprintf(err, errlen, "%s: %s", profiler_kind(ps[i]), strerror(-r));
			return r;
		}
		over[i] = r > 0;
	}
	return 0;
}

int profilers_run(struct profiler **ps, size_t n, const struct profilers_run_opts *o,
		  bool *ret_exited, char *err, size_t errlen)
{
	uint64_t start, next_tick;
	char why[1024];
	bool *over;
	size_t started;
	int r = 0, k;

	*ret_exited = false;
	over = calloc(n ? n : 1, sizeof(*over));
	if (!over)
		return -ENOMEM;
	for (started = 0; started < n; started++) {
		why[0] = '\0';
		r = profiler_start(ps[started], why, sizeof(why));
		/* Cancelled before the agent was in: its window is empty, over. */
		if (r == -ECANCELED) {
			started++;
			break;
		}
		if (r < 0) {
			snprintf(err, errlen, "%s: %s", profiler_kind(ps[started]),
				 why[0] ? why : strerror(-r));
			stop_all(ps, started);
			goto out_free;
		}
	}
	if (r == -ECANCELED) {
		stop_all(ps, started);
		goto out_free;
	}
	start = now_monotonic_ns();
	next_tick = start + TICK_NS;
	for (;;) {
		uint64_t now = now_monotonic_ns();

		if ((o->cancelled && o->cancelled()) || now - start >= o->duration_ns)
			break;
		r = poll_round(ps, n, over, o->duration_ns - (now - start), err, errlen);
		if (r == -ESRCH)
			*ret_exited = true;
		if (r != 0)
			break;
		if (o->tick && now >= next_tick) {
			o->tick(o->tick_arg, now - start);
			next_tick += TICK_NS;
		}
	}
	k = stop_all(ps, n);
	if (r > 0 || r == -ESRCH)
		r = 0;
	if (r == 0 && k < 0) {
		snprintf(err, errlen, "ending the window: %s", strerror(-k));
		r = k;
	}
out_free:
	free(over);
	return r;
}
