/* heap, block, mutex and threadcreate as profiler objects (profiler.h). */
#include "session/profiler.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct agent_profiler {
	struct agent_profiler_opts o;
	struct agent_session_opts so;
	struct agent_session s;
	struct heap *heap;             /* CPROF_EVENTS_HEAP */
	struct contention *contention; /* the others */
	struct channel_handlers h;
	struct agent_window w;
	bool started, stopped;
	char comm[64];		       /* the target's, for messages */
	char agent_path[PATH_MAX];     /* a copy: the caller's may not last */
};

static int on_alloc(const struct cprof_wire_alloc *r, void *arg)
{
	return heap_add_alloc(arg, r);
}

static int on_free(const struct cprof_wire_free *r, void *arg)
{
	return heap_add_free(arg, r);
}

static int on_live(const struct cprof_wire_live *e, size_t n, void *arg)
{
	return heap_add_live(arg, e, n);
}

static int on_event(const struct cprof_wire_event *ev, void *arg)
{
	return contention_add(arg, ev);
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
	if (o->events != CPROF_EVENTS_HEAP && o->events != CPROF_EVENTS_BLOCK &&
	    o->events != CPROF_EVENTS_MUTEX && o->events != CPROF_EVENTS_THREADCREATE) {
		snprintf(err, errlen, "not one kind of the agent's: events %#x", o->events);
		return -EINVAL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->o = *o;
	snprintf(p->comm, sizeof(p->comm), "%s", comm ? comm : "?");
	snprintf(p->agent_path, sizeof(p->agent_path), "%s", o->agent_path ? o->agent_path : "");
	p->o.agent_path = p->agent_path;
	p->so = (struct agent_session_opts){
		.agent_path = p->agent_path,
		.events = o->events,
		.rate = o->rate,
		.ring_size = AGENT_SESSION_RING_SIZE,
		.pick_timeout_ms = AGENT_SESSION_PICK_TIMEOUT_MS,
		.call_timeout_ms = AGENT_SESSION_CALL_TIMEOUT_MS,
		.cancelled = o->cancelled,
		.looking = o->looking,
	};
	r = agent_session_prepare(&p->s, o->pid);
	if (r < 0) {
		agent_session_strerror(&p->s, &p->so, r, comm, err, errlen);
		agent_profiler_free(p);
		return r;
	}
	*ret = p;
	return 0;
}

/* The records' taker, on the session's modules (the agent's among them). */
static int new_builder(struct agent_profiler *p)
{
	struct channel *rules = p->o.copy_stacks ? NULL : p->s.ch;
	int r;

	if (p->o.events == CPROF_EVENTS_HEAP) {
		struct heap_opts ho = { .sym = p->s.sym, .unw = p->s.unw, .rate = p->o.rate,
					.put_rule = rules ? put_rule : NULL, .put_rule_arg = rules };

		r = heap_new(&p->heap, &ho);
		p->h = (struct channel_handlers){ .alloc = on_alloc, .free = on_free,
						  .live = on_live, .arg = p->heap };
	} else {
		struct contention_opts co = { .events = p->o.events, .sym = p->s.sym,
					      .unw = p->s.unw, .put_rule = rules ? put_rule : NULL,
					      .put_rule_arg = rules };

		r = contention_new(&p->contention, &co);
		p->h = (struct channel_handlers){ .event = on_event, .arg = p->contention };
	}
	return r;
}

int agent_profiler_start(struct agent_profiler *p, char *err, size_t errlen)
{
	struct window_opts wo = { .duration_ns = p->o.duration_ns, .keep = p->o.keep,
				  .cancelled = p->o.cancelled, .progress = p->o.progress,
				  .arg = p->o.progress_arg };
	int r;

	if (p->started)
		return -EALREADY;
	p->started = true;
	r = agent_session_open(&p->s, &p->so);
	if (r < 0 && r != -ECANCELED) {
		agent_session_strerror(&p->s, &p->so, r, p->comm, err, errlen);
		return r;
	}
	/* Cancelled: an empty window over at once, and an empty profile. */
	if (new_builder(p) < 0)
		return -ENOMEM;
	agent_window_begin(&p->w, p->s.ch, p->o.pid, &wo, &p->h);
	return r;
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

int agent_profiler_finish(struct agent_profiler *p, struct profile **ret)
{
	const struct window_result *w = &p->w.res;
	int r;

	*ret = NULL;
	if (!p->stopped)
		return -EINVAL;
	if (p->heap)
		r = heap_build(p->heap, p->o.heap_index ? p->o.heap_index : "inuse_space",
			       p->o.command_line, (int64_t)w->start_realtime_ns,
			       (int64_t)w->window_ns, ret);
	else
		r = contention_build(p->contention, p->o.command_line,
				     (int64_t)w->start_realtime_ns, (int64_t)w->window_ns, ret);
	if (r == 0)
		r = agent_note_lost(&w->counters, *ret);
	if (r < 0) {
		profile_free(*ret);
		*ret = NULL;
	}
	return r;
}

int agent_profiler_write_text(struct agent_profiler *p, FILE *f)
{
	if (!p->stopped)
		return -EINVAL;
	return p->heap ? heap_write_text(p->heap, f)
		       : contention_write_text(p->contention, p->o.rate, f);
}

const struct window_result *agent_profiler_window(const struct agent_profiler *p)
{
	return &p->w.res;
}

const struct agent_session *agent_profiler_session(const struct agent_profiler *p)
{
	return &p->s;
}

uint64_t agent_profiler_count(const struct agent_profiler *p)
{
	if (p->heap)
		return heap_stats(p->heap)->allocs;
	return p->contention ? contention_stats(p->contention)->records : 0;
}

struct heap *agent_profiler_heap(const struct agent_profiler *p)
{
	return p->heap;
}

struct contention *agent_profiler_contention(const struct agent_profiler *p)
{
	return p->contention;
}

struct channel *agent_profiler_channel(const struct agent_profiler *p)
{
	return p->s.ch;
}

const struct channel_handlers *agent_profiler_handlers(const struct agent_profiler *p)
{
	return &p->h;
}

void agent_profiler_free(struct agent_profiler *p)
{
	if (!p)
		return;
	/* A window begun and never ended: the hooks go now, not at the
	 * agent's own timeout. */
	if (p->started && !p->stopped)
		agent_profiler_stop(p);
	agent_session_release(&p->s);
	heap_free(p->heap);
	contention_free(p->contention);
	free(p);
}
