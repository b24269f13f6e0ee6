/* heap, block, mutex and threadcreate as profiler objects (profiler.h). */
#include "session/profiler.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fault.h"

struct agent_profiler {
	struct agent_profiler_opts o;
	struct agent_session_opts so;
	struct agent_session s;
	struct heap *heap;             /* CPROF_EVENTS_HEAP */
	struct contention *contention[CPROF_KINDS]; /* by CPROF_KIND_*: the others */
	struct channel_handlers h;
	struct agent_window w;
	bool started, stopped;
	int start_result;              /* a second start, by another owner, says it */
	unsigned refs;
	char comm[64];		       /* the target's, for messages */
	char agent_path[PATH_MAX];     /* a copy: the caller's may not last */
};

static bool one_kind(uint32_t events)
{
	return events && !(events & (events - 1));
}

static int on_alloc(const struct cprof_wire_alloc *r, void *arg)
{
	struct agent_profiler *p = arg;

	return p->heap ? heap_add_alloc(p->heap, r) : 0;
}

static int on_free(const struct cprof_wire_free *r, void *arg)
{
	struct agent_profiler *p = arg;

	return p->heap ? heap_add_free(p->heap, r) : 0;
}

static int on_live(const struct cprof_wire_live *e, size_t n, void *arg)
{
	struct agent_profiler *p = arg;

	return p->heap ? heap_add_live(p->heap, e, n) : 0;
}

/* An event goes to its kind's profile; one of a kind not asked for (an
 * older agent's) to none. */
static int on_event(const struct cprof_wire_event *ev, void *arg)
{
	struct agent_profiler *p = arg;
	struct contention *c = agent_profiler_contention(p, cprof_wire_event_events(ev->kind));

	return c ? contention_add(c, ev) : 0;
}

static int put_rule(void *channel, uint64_t key, uint64_t rule)
{
	return channel_put_rule(channel, key, rule);
}

int agent_profiler_new(struct agent_profiler **ret, const struct agent_profiler_opts *o,
		       const char *comm, char *err, size_t errlen)
{
	struct agent_profiler *p;
	int r;

	*ret = NULL;
	if (!o->events || (o->events & ~CPROF_EVENTS_ALL)) {
		snprintf(err, errlen, "not kinds of the agent's: events %#x", o->events);
		return -EINVAL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->o = *o;
	p->refs = 1;
	snprintf(p->comm, sizeof(p->comm), "%s", comm ? comm : "?");
	snprintf(p->agent_path, sizeof(p->agent_path), "%s", o->agent_path ? o->agent_path : "");
	p->o.agent_path = p->agent_path;
	p->so = (struct agent_session_opts){
		.agent_path = p->agent_path,
		.events = o->events,
		.ring_size = AGENT_SESSION_RING_SIZE,
		.pick_timeout_ms = AGENT_SESSION_PICK_TIMEOUT_MS,
		.call_timeout_ms = AGENT_SESSION_CALL_TIMEOUT_MS,
		.cancel = o->cancel,
		.looking = o->looking,
	};
	memcpy(p->so.rates, o->rates, sizeof(p->so.rates));
	r = agent_session_prepare(&p->s, o->pid, o->sym);
	if (r < 0) {
		agent_session_strerror(&p->s, &p->so, r, comm, err, errlen);
		agent_profiler_free(p);
		return r;
	}
	*ret = p;
	return 0;
}

/* The records' takers, one per kind, on the session's modules (the
 * agent's among them). */
static int new_builders(struct agent_profiler *p)
{
	struct channel *rules = p->o.copy_stacks ? NULL : p->s.ch;
	int r = 0;

	p->h = (struct channel_handlers){ .alloc = on_alloc, .free = on_free, .live = on_live,
					  .event = on_event, .arg = p };
	for (unsigned k = 0; k < CPROF_KINDS && r == 0; k++) {
		uint32_t events = 1u << k;

		if (!(p->o.events & events))
			continue;
		if (events == CPROF_EVENTS_HEAP) {
			struct heap_opts ho = { .sym = p->s.sym, .unw = p->s.unw,
						.rate = p->o.rates[k],
						.put_rule = rules ? put_rule : NULL,
						.put_rule_arg = rules };

			r = heap_new(&p->heap, &ho);
		} else {
			struct contention_opts co = { .events = events, .sym = p->s.sym,
						      .unw = p->s.unw,
						      .put_rule = rules ? put_rule : NULL,
						      .put_rule_arg = rules };

			r = contention_new(&p->contention[k], &co);
		}
	}
	if (r == 0 && fault_injected("agent-builders"))
		r = -ENOMEM;
	return r;
}

int agent_profiler_start(struct agent_profiler *p, char *err, size_t errlen)
{
	struct window_opts wo = { .duration_ns = p->o.duration_ns, .keep = p->o.keep,
				  .cancel = p->o.cancel, .progress = p->o.progress,
				  .arg = p->o.progress_arg };
	int r;

	if (p->started) {
		if (p->start_result < 0)
			snprintf(err, errlen, "the agent's session did not start");
		return p->start_result;
	}
	p->started = true;
	r = agent_session_open(&p->s, &p->so);
	if (r < 0 && r != -ECANCELED) {
		agent_session_strerror(&p->s, &p->so, r, p->comm, err, errlen);
		return p->start_result = r;
	}
	/* Cancelled: an empty window over at once, and an empty profile. */
	if (new_builders(p) < 0) {
		snprintf(err, errlen, "cannot set up the profile of pid %d: out of memory",
			 p->o.pid);
		return p->start_result = -ENOMEM;
	}
	agent_window_begin(&p->w, p->s.ch, p->o.pid, &wo, &p->h);
	return p->start_result = r;
}

int agent_profiler_poll(struct agent_profiler *p, int timeout_ms)
{
	return p->started ? agent_window_poll(&p->w, timeout_ms) : -EINVAL;
}

int agent_profiler_stop(struct agent_profiler *p)
{
	int r;

	if (!p->started || p->stopped)
		return p->started ? 0 : -EINVAL;
	p->stopped = true;
	r = agent_window_end(&p->w);
	if (p->heap)
		heap_set_lost(p->heap, p->w.res.counters.lost_allocs, p->w.res.counters.lost);
	return r;
}

/* The window is over and kind @events (one) was recorded in it. */
static bool built_from(const struct agent_profiler *p, uint32_t events)
{
	return p->stopped && one_kind(events) && (p->o.events & events);
}

/* Kind @events' profile of what was taken from @start for @duration
 * (@index first for the heap; NULL: inuse_space), into *@ret. */
static int build_kind(struct agent_profiler *p, uint32_t events, const char *index,
		      int64_t start, int64_t duration, struct profile **ret)
{
	*ret = NULL;
	if (!built_from(p, events))
		return -EINVAL;
	if (events == CPROF_EVENTS_HEAP)
		return heap_build(p->heap, index ? index : "inuse_space", p->o.command_line, start,
				  duration, ret);
	return contention_build(agent_profiler_contention(p, events), p->o.command_line, start,
				duration, ret);
}

/* @r, with *@ret kept on success, freed and NULL on failure. */
static int keep_if_ok(int r, struct profile **ret)
{
	if (r < 0) {
		profile_free(*ret);
		*ret = NULL;
	}
	return r;
}

int agent_profiler_finish(struct agent_profiler *p, uint32_t events, struct profile **ret)
{
	const struct window_result *w = &p->w.res;
	int r = build_kind(p, events, p->o.heap_index, (int64_t)w->start_realtime_ns,
			   (int64_t)w->window_ns, ret);

	if (r == 0)
		r = agent_note_window(w, *ret);
	return keep_if_ok(r, ret);
}

int agent_profiler_write_text(struct agent_profiler *p, uint32_t events, FILE *f)
{
	struct contention *c = agent_profiler_contention(p, events);

	if (!built_from(p, events))
		return -EINVAL;
	return events == CPROF_EVENTS_HEAP ? heap_write_text(p->heap, f)
					   : contention_write_text(c, p->o.rates[cprof_wire_first_kind(events)], f);
}

const struct window_result *agent_profiler_window(const struct agent_profiler *p)
{
	return &p->w.res;
}

const struct agent_session *agent_profiler_session(const struct agent_profiler *p)
{
	return &p->s;
}

uint64_t agent_profiler_count(const struct agent_profiler *p, uint32_t events)
{
	const struct contention *c = agent_profiler_contention(p, events);

	if (events == CPROF_EVENTS_HEAP)
		return p->heap ? heap_stats(p->heap)->allocs : 0;
	return c ? contention_stats(c)->records : 0;
}

struct heap *agent_profiler_heap(const struct agent_profiler *p)
{
	return p->heap;
}

struct contention *agent_profiler_contention(const struct agent_profiler *p, uint32_t events)
{
	return one_kind(events) ? p->contention[cprof_wire_first_kind(events)] : NULL;
}

int agent_profiler_tend(struct agent_profiler *p, bool drain)
{
	struct channel_counters c;

	if (!p->s.ch)
		return -ENOTCONN;
	channel_heartbeat(p->s.ch);
	if (drain && channel_drain_until(p->s.ch, &p->h, now_monotonic_ns() +
					 AGENT_DRAIN_BUDGET_NS) == -EPROTO)
		return -EPROTO;
	channel_counters(p->s.ch, &c);
	return c.state == CPROF_STATE_DETACHED ? -ENOTCONN : 0;
}

bool agent_profiler_kept(const struct agent_profiler *p)
{
	return p->s.ch != NULL;
}

void agent_profiler_end(struct agent_profiler *p)
{
	if (p->s.ch)
		agent_channel_end(p->s.ch);
}

int agent_profiler_take_live(struct agent_profiler *p)
{
	struct window_result w = { 0 };
	struct channel_counters c;
	int r;

	if (!p->heap || !p->s.ch)
		return 0;
	heap_reset_live(p->heap);
	r = agent_window_live(p->s.ch, &p->h, &w, p->o.pid);
	channel_counters(p->s.ch, &c);
	heap_set_lost(p->heap, c.lost_allocs, c.lost);
	return r;
}

int agent_profiler_build_now(struct agent_profiler *p, uint32_t events, const char *index,
			     struct profile **ret)
{
	int64_t start = (int64_t)p->w.res.start_realtime_ns;
	struct channel_counters c = { 0 };
	int r;

	*ret = NULL;
	if (!built_from(p, events))
		return -EINVAL;
	r = agent_profiler_take_live(p);
	if (r == 0)
		r = build_kind(p, events, index, start, (int64_t)now_realtime_ns() - start, ret);
	if (p->s.ch)
		channel_counters(p->s.ch, &c);
	if (r == 0)
		r = agent_note_lost(&c, *ret);
	return keep_if_ok(r, ret);
}

struct agent_profiler *agent_profiler_ref(struct agent_profiler *p)
{
	p->refs++;
	return p;
}

void agent_profiler_free(struct agent_profiler *p)
{
	if (!p || --p->refs)
		return;
	/* A window begun and never ended: the hooks go now, not at the
	 * agent's own timeout. */
	if (p->started && !p->stopped)
		agent_profiler_stop(p);
	agent_session_release(&p->s);
	heap_free(p->heap);
	for (unsigned k = 0; k < CPROF_KINDS; k++)
		contention_free(p->contention[k]);
	free(p);
}
