/* The window of an agent session (session.h). */
#include "session/session.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "target/target.h"
#include "util/fault.h"
#include "util/util.h"

/* Drain often: a busy target fills the ring fast (ALLOCs carry stacks). */
#define TICK_NS (10ULL * 1000 * 1000)
#define DETACH_TIMEOUT_MS 2000
/* The agent answers within a watchdog tick (100 ms) of its thread
 * running; on a saturated host that thread waits its turn too. */
#define LIVE_TIMEOUT_MS 3000
/* inuse is the mean of snapshots over the window's last second: each one
 * of a churning heap is a new draw of the sampling, so their mean errs less. */
#define LIVE_SPAN_NS (1000ULL * 1000 * 1000)
#define LIVE_EVERY_NS (100ULL * 1000 * 1000)

/* A poll's drain stops at its deadline, but takes this long at least. */
#define DRAIN_MIN_NS (1ULL * 1000 * 1000)

static int drain_until(struct channel *ch, const struct channel_handlers *h,
		       struct window_result *res, uint64_t deadline_ns)
{
	int n;

	if (res->malformed)
		return 0;
	n = channel_drain_until(ch, h, deadline_ns);
	if (n == -EPROTO) {
		res->malformed = true;
		return 0;
	}
	if (n < 0)
		return n;
	res->records += (uint64_t)n;
	return 0;
}

static int drain(struct channel *ch, const struct channel_handlers *h, struct window_result *res)
{
	return drain_until(ch, h, res, UINT64_MAX);
}

/* During the window's last LIVE_SPAN_NS, a snapshot each LIVE_EVERY_NS
 * (the drains hand them over). */
static void ask_live(struct channel *ch, struct window_result *res, uint64_t left_ns,
		     uint64_t now, uint64_t *next)
{
	if (left_ns > LIVE_SPAN_NS || now < *next || res->live_error ||
	    channel_live_pending(ch))
		return;
	if (channel_live_ask(ch) < 0)
		res->live_error = -ENOTSUP;
	*next = now + LIVE_EVERY_NS;
}

/*
 * Drains until the snapshot asked for last has been handed over, or with
 * @written only until the agent has written it: its mark is in the ring,
 * the final drain hands it over, and the hooks need not sample while cprof
 * drains up to it (a full ring took seconds on a saturated host). Those
 * drains are sliced so that the mark is seen soon after it is written.
 */
static int live_wait(struct channel *ch, const struct channel_handlers *h,
		     struct window_result *res, pid_t pid, bool written)
{
	const struct timespec nap = { 0, 5 * 1000 * 1000 };
	uint64_t deadline = now_monotonic_ns() + LIVE_TIMEOUT_MS * 1000000ULL;
	int r;

	/* By the clock: on a saturated host each turn takes longer. */
	while (written ? !channel_live_written(ch) : channel_live_pending(ch)) {
		if (now_monotonic_ns() >= deadline || res->malformed) {
			res->live_error = res->malformed ? -EPROTO : -ETIMEDOUT;
			break;
		}
		if (!target_alive(pid)) {
			res->target_exited = true;
			break;
		}
		channel_heartbeat(ch);
		nanosleep(&nap, NULL);
		r = written ? drain_until(ch, h, res, now_monotonic_ns() + TICK_NS)
			    : drain(ch, h, res);
		if (r < 0)
			return r;
	}
	return 0;
}

/* A snapshot asked for unless one is pending, then live_wait(). */
static int live_ask_wait(struct channel *ch, const struct channel_handlers *h,
			 struct window_result *res, pid_t pid, bool written)
{
	if (!channel_live_pending(ch) && channel_live_ask(ch) < 0) {
		res->live_error = -ENOTSUP;
		return 0;
	}
	return live_wait(ch, h, res, pid, written);
}

int agent_window_live(struct channel *ch, const struct channel_handlers *h,
		      struct window_result *res, pid_t pid)
{
	return live_ask_wait(ch, h, res, pid, false);
}

void agent_window_begin(struct agent_window *w, struct channel *ch, pid_t pid,
			const struct window_opts *o, const struct channel_handlers *h)
{
	memset(w, 0, sizeof(*w));
	w->ch = ch;
	w->pid = pid;
	w->o = *o;
	w->h = h;
	w->start = w->next_progress = w->next_live = now_monotonic_ns();
	w->res.start_realtime_ns = now_realtime_ns();
	if (!ch) { /* cancelled before the agent was loaded */
		w->res.interrupted = true;
		w->res.detached = true; /* nothing was hooked */
		w->over = true;
	}
}

/* One tick, its drain stopped at @until: 1 when the window is over, 0
 * while it goes on, or a handler's -errno. */
static int tick(struct agent_window *w, uint64_t now, uint64_t until)
{
	struct window_result *res = &w->res;
	uint64_t elapsed = now - w->start;
	int r;

	channel_heartbeat(w->ch);
	r = drain_until(w->ch, w->h, res, MAX(until, now + DRAIN_MIN_NS));
	if (r >= 0 && fault_injected("window-drain"))
		r = -EIO;
	if (r < 0)
		return r;
	if (cancel_asked(&w->o.cancel))
		res->interrupted = true;
	else if (!target_alive(w->pid))
		res->target_exited = true;
	if (res->interrupted || res->target_exited || elapsed >= w->o.duration_ns)
		return 1;
	if (w->h->live)
		ask_live(w->ch, res, w->o.duration_ns - elapsed, now, &w->next_live);
	if (w->o.progress && now >= w->next_progress) {
		w->o.progress(w->o.arg, elapsed, res->records);
		w->next_progress = now + 1000000000ULL;
	}
	return 0;
}

int agent_window_poll(struct agent_window *w, int timeout_ms)
{
	uint64_t until = now_monotonic_ns() + (uint64_t)MAX(timeout_ms, 0) * 1000000ULL;

	while (!w->over) {
		uint64_t now = now_monotonic_ns(), left = w->start + w->o.duration_ns - now;
		struct timespec nap = { 0, 0 };
		int r = tick(w, now, until);

		if (r < 0)
			return r;
		if (r > 0) {
			w->over = true;
			w->res.window_ns = now_monotonic_ns() - w->start;
			break;
		}
		now = now_monotonic_ns();
		if (now >= until)
			return 0;
		left = w->start + w->o.duration_ns - MIN(now, w->start + w->o.duration_ns);
		nap.tv_nsec = (long)MIN(MIN(TICK_NS, left), until - now);
		nanosleep(&nap, NULL);
	}
	return 1;
}

/*
 * A detached session's figures are of the span its hooks sampled, which
 * began at the attach, before this window, and ended at the detach, after
 * it: the window is made that span (the agent's clock is this host's
 * CLOCK_MONOTONIC). Quiet, the two differ by milliseconds; on a saturated
 * host by seconds, and counts over the one divided by the other would lie.
 */
static void window_of_sampling(struct agent_window *w)
{
	struct window_result *res = &w->res;
	uint64_t on = res->counters.sampling_on_ns, off = res->counters.sampling_off_ns;

	if (!on || off <= on)
		return; /* an agent of an older build, or still sampling */
	res->asked_ns = res->window_ns;
	res->start_realtime_ns = res->start_realtime_ns + on - w->start;
	res->window_ns = off - on;
}

int agent_window_end(struct agent_window *w)
{
	struct window_result *res = &w->res;
	bool detach = !w->o.keep;
	int r = 0, k;

	if (!w->ch)
		return 0;
	if (!w->over) { /* ended early by the caller */
		w->over = true;
		res->window_ns = now_monotonic_ns() - w->start;
	}
	/* The last snapshot asked for, else a first one; failing, the hooks
	 * still go now, not when the watchdog gives up on us. Detaching, they
	 * go once it is written (live_wait()). */
	if (w->h->live && !res->target_exited && !res->live_error) {
		r = channel_live_taken(w->ch) ? live_wait(w->ch, w->h, res, w->pid, detach)
					      : live_ask_wait(w->ch, w->h, res, w->pid, detach);
		if (r == 0 && fault_injected("window-live"))
			r = -EIO;
	}
	if (detach && !res->target_exited) {
		k = channel_command(w->ch, CPROF_CMD_DETACH, CPROF_STATE_DETACHED,
				    DETACH_TIMEOUT_MS);
		res->detached = k == 0;
		if (k == -ESRCH)
			res->target_exited = true;
	}
	/* Whatever was published before the hooks went. */
	k = drain(w->ch, w->h, res);
	channel_counters(w->ch, &res->counters);
	if (detach && res->detached) {
		window_of_sampling(w);
		channel_give_back(w->ch);
	} else if (!detach) {
		res->detached = true; /* not asked: the session goes on */
	}
	return r < 0 ? r : k;
}

int agent_channel_end(struct channel *ch)
{
	struct channel_counters c;
	int r;

	channel_counters(ch, &c);
	if (c.state == CPROF_STATE_DETACHED)
		return 0;
	/* Asked and not answered: the agent is stopped or stuck, and asking
	 * again would wait as long for nothing. Its watchdog ends the session
	 * once it runs and finds cprof gone. */
	if (channel_sent(ch) == CPROF_CMD_DETACH)
		return -ETIMEDOUT;
	r = channel_command(ch, CPROF_CMD_DETACH, CPROF_STATE_DETACHED, DETACH_TIMEOUT_MS);
	if (r == 0)
		channel_give_back(ch);
	return r;
}

int agent_window_run(struct channel *ch, pid_t pid, const struct window_opts *o,
		     const struct channel_handlers *h, struct window_result *res)
{
	struct agent_window w;
	int r, k;

	agent_window_begin(&w, ch, pid, o, h);
	do
		r = agent_window_poll(&w, 1000);
	while (r == 0);
	/* Ended on an error too: the hooks go. */
	k = agent_window_end(&w);
	if (r > 0)
		r = k;
	*res = w.res;
	return r;
}

int agent_note_lost(const struct channel_counters *c, struct profile *p)
{
	char text[128];

	if (!c->lost)
		return 0;
	snprintf(text, sizeof(text), "lost %llu %s: the agent's ring was full",
		 (unsigned long long)c->lost, plural(c->lost, "record", "records"));
	return profile_add_comment(p, text);
}

bool agent_window_stretched(const struct window_result *w)
{
	uint64_t d = w->window_ns > w->asked_ns ? w->window_ns - w->asked_ns
						: w->asked_ns - w->window_ns;

	return w->asked_ns && d * 10 > w->asked_ns;
}

int agent_note_window(const struct window_result *w, struct profile *p)
{
	int r = agent_note_lost(&w->counters, p);

	if (r == 0 && agent_window_stretched(w)) {
		char text[192];

		snprintf(text, sizeof(text), "the agent's hooks sampled for %.3f s around the %.3f "
			 "s window (from the attach to the detach): the figures and the duration are "
			 "of those %.3f s", (double)w->window_ns / 1e9, (double)w->asked_ns / 1e9,
			 (double)w->window_ns / 1e9);
		r = profile_add_comment(p, text);
	}

	if (r == 0 && w->malformed)
		r = profile_add_comment(p, "the agent's ring held malformed records: reading "
					   "stopped there, the figures are short of what followed");
	/* An agent that took cprof for gone unhooked before the window's end. */
	if (r == 0 && (w->counters.detach_reason == CPROF_DETACH_PEER_EXIT ||
		       w->counters.detach_reason == CPROF_DETACH_HEARTBEAT))
		r = profile_add_comment(p, "the agent ended its session before the window did: "
					   "the figures cover only part of the window");
	return r;
}
