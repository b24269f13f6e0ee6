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

/* The first -errno, or each one's in @errors (when given, 0 else). */
static int stop_all(struct profiler **ps, size_t n, int *errors)
{
	int r = 0;

	for (size_t i = 0; i < n; i++) {
		int k = profiler_stop(ps[i]);

		if (k < 0 && errors && !errors[i])
			errors[i] = k;
		else if (k < 0 && !errors && r == 0)
			r = k;
	}
	return r;
}

/* Each profiler still in its window polled once, the slice shared. 1: all
 * are over; -ESRCH: the target is gone; other -errno with @err, or in
 * @errors, when given, for that one alone. */
static int poll_round(struct profiler **ps, size_t n, bool *over, int *errors, uint64_t left_ns,
		      char *err, size_t errlen)
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
		if (r < 0 && errors) {
			errors[i] = r;
			over[i] = true;
			continue;
		}
		if (r < 0) {
			snprintf(err, errlen, "%s: %s", profiler_kind(ps[i]), strerror(-r));
			return r;
		}
		over[i] = r > 0;
	}
	return 0;
}

int profilers_start(struct profiler **ps, size_t n, char *err, size_t errlen)
{
	char why[1024];

	for (size_t i = 0; i < n; i++) {
		int r;

		why[0] = '\0';
		r = profiler_start(ps[i], why, sizeof(why));
		if (r == 0)
			continue;
		/* Cancelled before the agent was in: its window is empty, over. */
		stop_all(ps, r == -ECANCELED ? i + 1 : i, NULL);
		if (r != -ECANCELED)
			snprintf(err, errlen, "%s: %s", profiler_kind(ps[i]),
				 why[0] ? why : strerror(-r));
		return r;
	}
	return 0;
}

int profilers_window(struct profiler **ps, size_t n, const struct profilers_run_opts *o,
		     bool *ret_exited, char *err, size_t errlen)
{
	uint64_t start = now_monotonic_ns(), next_tick = start + TICK_NS;
	bool *over;
	int r = 0, k;

	*ret_exited = false;
	over = calloc(n ? n : 1, sizeof(*over));
	if (!over) {
		stop_all(ps, n, o->errors);
		return -ENOMEM;
	}
	for (;;) {
		uint64_t now = now_monotonic_ns();

		if (cancel_asked(&o->cancel) || now - start >= o->duration_ns)
			break;
		r = poll_round(ps, n, over, o->errors, o->duration_ns - (now - start), err, errlen);
		if (r == -ESRCH)
			*ret_exited = true;
		if (r != 0)
			break;
		if (o->tick && now >= next_tick) {
			o->tick(o->tick_arg, now - start);
			next_tick += TICK_NS;
		}
	}
	free(over);
	k = stop_all(ps, n, o->errors);
	if (r > 0 || r == -ESRCH)
		r = 0;
	if (r == 0 && k < 0) {
		snprintf(err, errlen, "ending the window: %s", strerror(-k));
		r = k;
	}
	return r;
}

int profilers_run(struct profiler **ps, size_t n, const struct profilers_run_opts *o,
		  bool *ret_exited, char *err, size_t errlen)
{
	int r;

	*ret_exited = false;
	r = profilers_start(ps, n, err, errlen);
	return r < 0 ? r : profilers_window(ps, n, o, ret_exited, err, errlen);
}
