/*
 * A thread's waits for a CPU, split between the stack it ran on and the one
 * it slept on. A wait follows a preemption (the thread waits where it ran)
 * or a wake-up (it waits to return from the call it slept in); schedstat
 * gives only their sum. The kernel's switch records tell which exactly;
 * without them, a wait per preemption and a wait per wake-up are fitted
 * over the thread's intervals to its switch counts.
 */
#include <stdlib.h>

#include "util/util.h"
#include "wall/wall-private.h"

void wall_waits_switch(struct wall_waits *w, uint64_t time, bool out, bool preempted)
{
	if (GROW(w->records, w->nrecords + 1, w->records_alloc) < 0)
		return;
	w->records[w->nrecords++] = (struct wall_switch_record){ time, out, preempted };
}

static int by_time(const void *a, const void *b)
{
	const struct wall_switch_record *x = a, *y = b;

	return (x->time > y->time) - (x->time < y->time);
}

/* Each CPU has its ring: a thread's records come in time order only once
 * sorted (it may leave one CPU and come back on another). A preempted
 * thread's wait ends when it is back on a CPU. */
void wall_waits_settle(struct wall_waits *w)
{
	if (!w->nrecords)
		return;
	qsort(w->records, w->nrecords, sizeof(*w->records), by_time);
	for (size_t i = 0; i < w->nrecords; i++) {
		const struct wall_switch_record *sw = &w->records[i];

		if (sw->out) {
			w->preempted_at = sw->preempted ? sw->time : 0;
			continue;
		}
		if (w->preempted_at && sw->time > w->preempted_at)
			w->preempted_wait += sw->time - w->preempted_at;
		w->preempted_at = 0;
	}
	w->nrecords = 0;
}

void wall_waits_forget_switches(struct wall_waits *w)
{
	w->nrecords = 0;
	w->preempted_at = 0;
	w->preempted_wait = 0;
	w->given_ahead = 0;
	/* The counts were not read while the records came: the next read is
	 * a new baseline, not one interval. */
	w->sw_known = false;
	w->last_slept = w->last_preempted = 0;
}

/*
 * The share of waits that followed @preempted preemptions rather than
 * @slept wake-ups. The two waits differ (CFS places a woken thread ahead of
 * those that ran on, a preempted one behind them): each is fitted by least
 * squares, and until the fit holds the counts alone share them.
 */
static unsigned preempted_share(const struct wall_waits *w, uint64_t preempted, uint64_t slept)
{
	double det = w->pp * w->ss - w->ps * w->ps, wp, ws, all;

	if (det > 1e-6 * w->pp * w->ss) {
		wp = (w->pd * w->ss - w->sd * w->ps) / det;
		ws = (w->sd * w->pp - w->pd * w->ps) / det;
		all = wp * (double)preempted + ws * (double)slept;
		if (wp >= 0 && ws >= 0 && all > 0)
			return (unsigned)(WALL_SHARE_ONE * wp * (double)preempted / all);
	}
	return (unsigned)(preempted * WALL_SHARE_ONE / (slept + preempted));
}

/*
 * Read whenever the thread ran, so that the counts belong to the interval
 * whose waits they split. A switch late in one interval ends its wait in
 * the next: an interval's waits follow the switches of two. A wait that
 * ends with no switch since keeps the last shares.
 */
uint64_t wall_waits_count(struct wall_waits *w, pid_t pid, pid_t tid,
			  const struct wall_switches *known, uint64_t ddelay)
{
	struct wall_switches sw;
	uint64_t slept = 0, preempted = 0;
	double q, s, d = (double)ddelay;

	if (known)
		sw = *known;
	else if (wall_switches_read(pid, tid, &sw) < 0)
		return 0;
	if (w->sw_known && (sw.voluntary > w->sw.voluntary || sw.preempted > w->sw.preempted)) {
		slept = sw.voluntary - MIN(sw.voluntary, w->sw.voluntary);
		preempted = sw.preempted - MIN(sw.preempted, w->sw.preempted);
		q = (double)(preempted + w->last_preempted);
		s = (double)(slept + w->last_slept);
		w->last_slept = slept;
		w->last_preempted = preempted;
		w->pp += q * q;
		w->ps += q * s;
		w->ss += s * s;
		w->pd += q * d;
		w->sd += s * d;
		w->preempted_share = preempted_share(w, (uint64_t)q, (uint64_t)s);
	}
	w->sw = sw;
	w->sw_known = true;
	return slept + preempted;
}

uint64_t wall_waits_preempted(struct wall_waits *w, bool exact, uint64_t ddelay)
{
	uint64_t preempted = MIN(w->preempted_wait, w->given_ahead);

	if (!exact)
		return ddelay * w->preempted_share / WALL_SHARE_ONE;
	w->preempted_wait -= preempted;
	w->given_ahead -= preempted;
	preempted = MIN(ddelay, w->preempted_wait);
	w->preempted_wait -= preempted;
	return preempted;
}

void wall_waits_given_ahead(struct wall_waits *w, uint64_t ns)
{
	w->given_ahead += ns;
}

void wall_waits_release(struct wall_waits *w)
{
	free(w->records);
	w->records = NULL;
	w->nrecords = w->records_alloc = 0;
}
