/* cprof serve's loop, windows and agent (serve.h); Go's paths are routes.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/wire.h"
#include "profiler/kinds.h"
#include "serve/serve-private.h"
#include "session/session.h"
#include "target/target.h"
#include "threads/threads.h"
#include "util/fault.h"
#include "util/util.h"

/* The loop's tick: the agent's heartbeat and the windows' drains. */
#define TICK_MS 50
/* Go's runtime/pprof samples at 100 Hz. */
#define SAMPLE_HZ 100
/* Go's server takes every connection: so many that idle ones do not hold
 * a scraper out, each small (headers beyond it get 431), and dropped
 * after IDLE_TIMEOUT_S without a byte either way. */
#define MAX_CONNECTIONS 2048
#define IDLE_TIMEOUT_S 10
#define CONNECTION_MEMORY (8u << 10)

/* The kind (lib/profiler/kinds.h) each of the agent's endpoints shows. */
static const enum kind agent_kind[SK_NAMED] = {
	[SK_HEAP] = KIND_HEAP,	 [SK_ALLOCS] = KIND_HEAP,		[SK_BLOCK] = KIND_BLOCK,
	[SK_MUTEX] = KIND_MUTEX, [SK_THREADCREATE] = KIND_THREADCREATE, [SK_GOROUTINE] = KIND_N,
};

static uint32_t events_of(enum serve_kind k)
{
	return k < SK_NAMED ? kind_events(agent_kind[k]) : 0;
}

int serve_new(struct serve **ret, const struct serve_opts *o, char *err, size_t errlen)
{
	struct serve *s = calloc(1, sizeof(*s));
	struct http_server_opts ho = {
		.listen = o->listen, .token = o->token, .max_connections = MAX_CONNECTIONS,
		.idle_timeout_s = IDLE_TIMEOUT_S, .connection_memory = CONNECTION_MEMORY,
		.handle = serve_route,
	};
	struct unwinder *unw = NULL;
	int r;

	if (!s)
		return -ENOMEM;
	s->o = *o;
	agent_tasks_init(&s->agent, o->pid);
	s->start_realtime_ns = now_realtime_ns();
	r = symbolizer_new(&s->sym, o->pid);
	if (r < 0) {
		snprintf(err, errlen, "cannot read the modules of pid %d: %s", o->pid,
			 strerror(-r));
		goto out_free;
	}
	r = symbolizer_unwinder(s->sym, &unw);
	for (int k = SK_BLOCK; r == 0 && k <= SK_MUTEX; k++) {
		struct contention_opts co = { .events = events_of(k), .sym = s->sym,
					      .unw = unw };

		r = contention_new(&s->empty[k], &co);
	}
	if (r < 0) {
		snprintf(err, errlen, "cannot set up: %s", strerror(-r));
		goto out_free;
	}
	ho.arg = s;
	r = http_server_new(&s->http, &ho, err, errlen);
	if (r < 0)
		goto out_free;
	*ret = s;
	return 0;

out_free:
	serve_free(s);
	return r;
}

const char *serve_address(const struct serve *s)
{
	return http_server_address(s->http);
}

int serve_load_agent(struct serve *s, const struct agent_profiler_opts *o, char *err,
		     size_t errlen)
{
	struct kinds_opts ko = { .pid = s->o.pid, .comm = s->o.comm, .agent = *o,
				 .command_line = s->o.command_line, .sym = s->sym };
	int r = -ENOENT;

	s->o.agent = *o;
	ko.asked[KIND_HEAP] = !s->o.heap_refused;
	ko.asked[KIND_THREADCREATE] = true;
	ko.asked[KIND_BLOCK] = o->rates[CPROF_KIND_BLOCK] != 0;
	ko.asked[KIND_MUTEX] = o->rates[CPROF_KIND_MUTEX] != 0;
	/* A window over at once, the session kept: serve drains it. */
	ko.agent.duration_ns = 1;
	ko.agent.keep = true;
	ko.agent.cancel = s->o.cancel;
	kinds_open(&ko, &s->agent_kinds);
	for (int k = 0; k < KIND_N; k++) {
		if (s->agent_kinds.p[k] && !s->ap)
			s->ap = profiler_agent(s->agent_kinds.p[k]);
		if (s->agent_kinds.error[k] && r == -ENOENT) {
			r = s->agent_kinds.error[k];
			snprintf(err, errlen, "%s", s->agent_kinds.refused[k]);
		}
	}
	r = s->ap ? agent_profiler_start(s->ap, err, errlen) : r;
	if (r == -ECANCELED)
		snprintf(err, errlen, "interrupted before the agent was loaded");
	if (r == 0 && !agent_profiler_kept(s->ap)) {
		snprintf(err, errlen, "the agent's session did not open");
		r = -EIO;
	}
	if (r == 0)
		r = agent_profiler_stop(s->ap);
	if (r == 0 && fault_injected("serve-agent")) {
		snprintf(err, errlen, "test fault");
		r = -EIO;
	}
	if (r < 0) {
		snprintf(s->agent_why, sizeof(s->agent_why), "%s", err);
		kinds_close(&s->agent_kinds);
		s->ap = NULL;
	}
	return r;
}

const char *serve_agent_lost(const struct serve *s)
{
	return s->agent_lost ? s->agent_why : NULL;
}

int serve_replies_cut(const struct serve *s)
{
	return s->replies_cut;
}

/* The agent's session ended (the hooks go) and let go of. */
static void agent_end(struct serve *s)
{
	agent_profiler_end(s->ap);
	kinds_close(&s->agent_kinds);
	s->ap = NULL;
}

/* The agent's records drained, its heartbeat kept; a session it ended
 * itself is gone for good (its figures would stand still). */
static void agent_tick(struct serve *s)
{
	int r = s->ap ? agent_profiler_tend(s->ap, true) : 0;

	if (r == 0)
		return;
	if (r == -EPROTO)
		snprintf(s->agent_why, sizeof(s->agent_why), "the agent's ring held a malformed "
			 "record: its session was ended");
	else
		snprintf(s->agent_why, sizeof(s->agent_why), "the agent ended its session "
			 "(it took cprof for gone): restart cprof serve");
	s->agent_lost = true;
	agent_end(s);
}

/* Why kind @k cannot be had, or NULL. */
static const char *unavailable(const struct serve *s, enum serve_kind k, char *why,
			       size_t whylen)
{
	if ((k == SK_HEAP || k == SK_ALLOCS) && s->o.heap_refused) {
		snprintf(why, whylen, "heap profiling is not available: %s", s->o.heap_refused);
		return why;
	}
	if (k == SK_GOROUTINE || s->ap)
		return NULL;
	if ((k == SK_BLOCK || k == SK_MUTEX) && !s->o.agent.rates[cprof_wire_first_kind(
							  events_of(k))])
		return NULL;
	snprintf(why, whylen, "%s profiling is not available: %s", kind_name(agent_kind[k]),
		 s->agent_why[0] ? s->agent_why : "the agent is not loaded");
	return why;
}

static struct contention *empty_of(struct serve *s, enum serve_kind k)
{
	if (s->ap && (k == SK_BLOCK || k == SK_MUTEX) &&
	    agent_profiler_contention(s->ap, events_of(k)))
		return NULL;
	return k == SK_BLOCK || k == SK_MUTEX ? s->empty[k] : NULL;
}

#define INTERVAL_NS (SERVE_SNAPSHOT_INTERVAL_MS * 1000000ULL)

/* A snapshot may start now: one at a time (the loop's tick runs between
 * two, however long each takes), their starts the interval apart, and a
 * request's as far after the last one as its pause asks (snapshot_take()).
 * A delta's end waits for the interval only: a delta has one end, so the
 * stops take at most twice the share, and its client is not kept waiting
 * for twenty times a pause a loaded host drew out. */
static bool snapshot_ready(const struct serve *s, bool delta_end)
{
	uint64_t now = now_monotonic_ns();

	return !s->snapshot_since_tick && now - s->snapshot_ns >= INTERVAL_NS &&
	       (delta_end || now >= s->snapshot_next_ns);
}

unsigned serve_snapshot_retry_s(const struct serve *s)
{
	uint64_t now = now_monotonic_ns();
	uint64_t next = MAX(s->snapshot_next_ns, s->snapshot_ns + INTERVAL_NS);
	uint64_t wait = next > now ? next - now : 0;

	return (unsigned)MAX(1, (wait + 999999999) / 1000000000);
}

/* A goroutine delta's end is due: its second snapshot waits for its turn. */
static bool snapshot_owed(const struct serve *s)
{
	uint64_t now = now_monotonic_ns();

	for (const struct serve_job *j = s->jobs; j; j = j->next)
		if (j->kind == SK_GOROUTINE && now >= j->deadline_ns)
			return true;
	return false;
}

bool serve_snapshot_refused(const struct serve *s)
{
	return !snapshot_ready(s, false) || snapshot_owed(s);
}

/* The one place serve stops the target's threads: when their turn has
 * come, and the start kept for the next. */
static int snapshot_take(struct serve *s, bool delta_end, struct threads_snapshot **ret,
			 char *why, size_t whylen)
{
	uint64_t start = now_monotonic_ns();
	int r;

	if (!snapshot_ready(s, delta_end)) {
		snprintf(why, whylen, "the next goroutine profile may be taken in %u s",
			 serve_snapshot_retry_s(s));
		return -EAGAIN;
	}
	s->snapshot_since_tick = true;
	r = threads_snapshot_take(ret, s->o.pid, s->sym, why, whylen);
	s->snapshot_ns = start;
	s->snapshot_next_ns = start + (r == 0 ? SERVE_SNAPSHOT_SHARE * (*ret)->pause_ns : 0);
	return r;
}

/* What kind @k's profile or text is made of, taken now: the threads'
 * snapshot (*@ret_t; @delta_end: a delta's second), an empty profile of a
 * kind not hooked (*@ret_empty), or the agent's records, with a fresh live
 * set if @live (a text's; a profile's build takes its own). -errno with
 * @why set. */
static int collect(struct serve *s, enum serve_kind k, bool live, bool delta_end,
		   struct threads_snapshot **ret_t, struct contention **ret_empty, char *why,
		   size_t whylen)
{
	int r = 0;

	*ret_t = NULL;
	*ret_empty = empty_of(s, k);
	if (unavailable(s, k, why, whylen))
		return -ENOTSUP;
	if (k == SK_GOROUTINE)
		r = snapshot_take(s, delta_end, ret_t, why, whylen);
	else if (!*ret_empty && live)
		r = agent_profiler_take_live(s->ap);
	if (r < 0 && k != SK_GOROUTINE)
		snprintf(why, whylen, "failed to collect profile: %s", strerror(-r));
	return r;
}

/* serve_build(), and a delta's end (@delta_end). */
static int build(struct serve *s, enum serve_kind k, bool delta_end, struct profile **ret,
		 char *why, size_t whylen)
{
	struct contention *empty;
	struct threads_snapshot *t;
	int r = collect(s, k, false, delta_end, &t, &empty, why, whylen);

	*ret = NULL;
	if (r < 0)
		return r;
	if (t)
		r = threads_build_profile(t, s->o.command_line, ret);
	else if (empty)
		r = contention_build(empty, s->o.command_line, (int64_t)s->start_realtime_ns,
				     (int64_t)(now_realtime_ns() - s->start_realtime_ns), ret);
	else
		r = agent_profiler_build_now(s->ap, events_of(k),
					     k == SK_ALLOCS ? "alloc_space" : "inuse_space", ret);
	threads_snapshot_free(t);
	if (r < 0)
		snprintf(why, whylen, "failed to collect profile: %s", strerror(-r));
	return r;
}

int serve_build(struct serve *s, enum serve_kind k, struct profile **ret, char *why,
		size_t whylen)
{
	return build(s, k, false, ret, why, whylen);
}

int serve_text(struct serve *s, enum serve_kind k, int debug, char **text, size_t *len,
	       char *why, size_t whylen)
{
	struct contention *empty;
	struct threads_snapshot *t;
	int r = collect(s, k, true, false, &t, &empty, why, whylen);
	FILE *f;

	if (r < 0)
		return r;
	f = open_memstream(text, len);
	if (!f) {
		threads_snapshot_free(t);
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	if (t)
		r = debug == 1 ? threads_write_debug1(t, f) : threads_write_debug2(t, f);
	else if (empty)
		r = contention_write_text(empty, 0, f);
	else
		r = agent_profiler_write_text(s->ap, events_of(k), f);
	if (fclose(f) != 0 && r == 0)
		r = -ENOMEM;
	threads_snapshot_free(t);
	if (r < 0) {
		free(*text);
		*text = NULL;
		snprintf(why, whylen, "failed to write profile: %s", strerror(-r));
	}
	return r;
}

long serve_count(struct serve *s, enum serve_kind k)
{
	if (k == SK_GOROUTINE) {
		pid_t *tids = NULL;
		size_t n = 0;
		int r;

		if (target_list_tids(s->o.pid, &tids, &n) < 0)
			return 0;
		/* The target's threads, as the goroutine profile shows them. */
		r = s->agent.word ? agent_tasks_refresh(&s->agent, AGENT_TASK_START_WAIT_MS)
				  : agent_tasks_search(&s->agent, NULL, AGENT_TASK_START_WAIT_MS);
		if (r >= 0)
			agent_tasks_filter(&s->agent, tids, &n);
		free(tids);
		return (long)n;
	}
	if (!s->ap || empty_of(s, k))
		return 0;
	return (long)agent_profiler_count(s->ap, events_of(k));
}

/* ---- windows ------------------------------------------------------------ */

static int sampler_new(struct serve *s, enum serve_kind k, struct profiler **ret, char *why,
		       size_t whylen)
{
	enum kind kind = k == SK_CPU ? KIND_CPU : KIND_WALL;
	struct kinds_opts ko = { .pid = s->o.pid, .comm = s->o.comm, .hz = SAMPLE_HZ,
				 .command_line = s->o.command_line, .sym = s->sym };
	struct kinds_opened *opened = malloc(sizeof(*opened));
	int r;

	if (!opened) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	ko.asked[kind] = true;
	kinds_open(&ko, opened);
	*ret = opened->p[kind];
	r = opened->error[kind];
	snprintf(why, whylen, "%s", opened->refused[kind]);
	free(opened);
	if (r == 0)
		r = profiler_start(*ret, why, whylen);
	if (r < 0) {
		char inner[512];

		snprintf(inner, sizeof(inner), "%s", why);
		snprintf(why, whylen, "Could not enable %s profiling: %s",
			 k == SK_CPU ? "CPU" : "wall", inner);
		profiler_free(*ret);
		*ret = NULL;
	}
	return r;
}

/* A window of kind @k is under way. */
static bool window_running(const struct serve *s, enum serve_kind k)
{
	for (const struct serve_job *j = s->jobs; j; j = j->next)
		if (j->kind == k)
			return true;
	return false;
}

int serve_window(struct serve *s, struct http_request *req, enum serve_kind k,
		 unsigned seconds, char *why, size_t whylen)
{
	struct serve_job *j;
	int r;

	if ((k == SK_CPU || k == SK_WALL) && window_running(s, k))
		return -EBUSY;
	j = calloc(1, sizeof(*j));
	if (!j) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	j->req = req;
	j->kind = k;
	j->deadline_ns = now_monotonic_ns() + (uint64_t)seconds * 1000000000ULL;
	if (k == SK_CPU || k == SK_WALL)
		r = sampler_new(s, k, &j->p, why, whylen);
	else
		r = serve_build(s, k, &j->p0, why, whylen);
	/* Go's serveDeltaProfile(): the first profile collected, then its
	 * time taken and the seconds counted. */
	if (r == 0 && j->p0) {
		j->p0->time_nanos = (int64_t)now_realtime_ns();
		j->deadline_ns = now_monotonic_ns() + (uint64_t)seconds * 1000000000ULL;
	}
	if (r == 0)
		r = http_park(req);
	if (r < 0) {
		profiler_free(j->p);
		profile_free(j->p0);
		free(j);
		return r;
	}
	j->next = s->jobs;
	s->jobs = j;
	return 0;
}

static const char *const delta_names[SK_NAMED] = {
	[SK_HEAP] = "heap-delta",	  [SK_ALLOCS] = "allocs-delta",
	[SK_BLOCK] = "block-delta",	  [SK_MUTEX] = "mutex-delta",
	[SK_THREADCREATE] = "threadcreate-delta", [SK_GOROUTINE] = "goroutine-delta",
};

/* serveDeltaProfile's end: the second profile less the first. */
static void delta_answer(struct serve *s, struct serve_job *j)
{
	struct profile *p1 = NULL;
	char why[1024];
	int64_t t0 = j->p0->time_nanos;
	int r = build(s, j->kind, true, &p1, why, sizeof(why));

	/* At the stop, a goroutine delta whose snapshot's turn has not come:
	 * the threads are not stopped again for it. */
	if (r == -EAGAIN) {
		serve_error(j->req, 503, HTTP_STOPPING);
		return;
	}
	if (r < 0) {
		serve_error(j->req, 500, "failed to collect profile");
		return;
	}
	p1->time_nanos = (int64_t)now_realtime_ns();
	if (profile_subtract(p1, j->p0) < 0) {
		profile_free(p1);
		serve_error(j->req, 500, "failed to compute delta");
		return;
	}
	p1->duration_nanos = p1->time_nanos - t0;
	serve_profile(j->req, p1, delta_names[j->kind]);
}

/* A window over (or cut short): its request answered, the job gone. */
static void job_end(struct serve *s, struct serve_job *j, bool abandoned)
{
	struct profile *p = NULL;

	if (abandoned) {
		/* What Go says when the request's context is done. */
		serve_error(j->req, 500, "context canceled");
	} else if (j->p) {
		if (profiler_stop(j->p) < 0 || profiler_finish(j->p, &p) < 0)
			serve_error(j->req, 500, "failed to collect profile");
		else
			serve_profile(j->req, p, j->kind == SK_CPU ? "profile" : "wall");
	} else {
		delta_answer(s, j);
	}
	profiler_free(j->p);
	profile_free(j->p0);
	free(j);
}

/* Each window drained; those over (their time, the target gone, the
 * client gone) answered, a goroutine delta once its snapshot's turn has
 * come. @all: every one, now. */
static void jobs_tick(struct serve *s, bool all)
{
	uint64_t now = now_monotonic_ns();

	for (struct serve_job **pp = &s->jobs; *pp;) {
		struct serve_job *j = *pp;
		int r = j->p ? profiler_poll(j->p, 0) : 0;
		bool abandoned = http_abandoned(j->req);
		bool waits = now < j->deadline_ns ||
			     (j->kind == SK_GOROUTINE && !snapshot_ready(s, true));

		if (!all && !abandoned && r == 0 && waits) {
			pp = &j->next;
			continue;
		}
		*pp = j->next;
		job_end(s, j, abandoned);
	}
}

int serve_run(struct serve *s, enum serve_end *ret)
{
	int r = 0;

	for (;;) {
		if (cancel_asked(&s->o.cancel)) {
			*ret = SERVE_CANCELLED;
			break;
		}
		if (!target_alive(s->o.pid)) {
			*ret = SERVE_TARGET_EXITED;
			break;
		}
		r = http_server_run(s->http, TICK_MS);
		if (r < 0) {
			*ret = SERVE_FAILED;
			break;
		}
		agent_tick(s);
		/* The heartbeat has had its turn: the next snapshot may come. */
		s->snapshot_since_tick = false;
		jobs_tick(s, false);
	}
	/* Windows under way end with what they have; the hooks go before
	 * the replies under way are written to their end (a SIGTERM cuts none
	 * short), not after a slow client. */
	jobs_tick(s, true);
	if (s->ap)
		agent_end(s);
	if (*ret != SERVE_FAILED) {
		int n = http_server_drain(s->http, SERVE_REPLY_STALL_S, SERVE_STOP_MAX_MS);

		s->replies_cut = n > 0 ? n : 0;
	}
	return r;
}

void serve_free(struct serve *s)
{
	if (!s)
		return;
	jobs_tick(s, true);
	http_server_free(s->http);
	if (s->ap)
		agent_end(s);
	for (int k = 0; k < SK_NAMED; k++)
		contention_free(s->empty[k]);
	symbolizer_unref(s->sym);
	agent_tasks_release(&s->agent);
	free(s);
}
