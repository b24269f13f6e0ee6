/* Every kind of profile behind one set of verbs (profiler.h). */
#include "profiler/profiler.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/wire.h"
#include "profiler/kinds.h"
#include "profiler/profiler-private.h"
#include "symbolize/symbolize.h"
#include "util/util.h"

int new_profiler(struct profiler **ret, const struct profiler_ops *ops, const char *kind,
		 void *impl)
{
	struct profiler *p = calloc(1, sizeof(*p));

	if (!p) {
		ops->free(impl);
		return -ENOMEM;
	}
	*p = (struct profiler){ .ops = ops, .kind = kind, .impl = impl };
	*ret = p;
	return 0;
}

/* ---- cpu ----------------------------------------------------------------- */

static int cpu_start(struct profiler *p, char *err, size_t errlen)
{
	int r = cpu_profiler_start(p->impl);

	if (r < 0)
		snprintf(err, errlen, "cannot start sampling: %s", strerror(-r));
	return r;
}

static int cpu_poll(struct profiler *p, int timeout_ms)
{
	return cpu_profiler_poll(p->impl, timeout_ms);
}

static int cpu_stop(struct profiler *p)
{
	return cpu_profiler_stop(p->impl);
}

static int cpu_finish(struct profiler *p, struct profile **ret)
{
	return cpu_profiler_finish(p->impl, ret);
}

static void cpu_facts(const struct profiler *p, struct profiler_facts *ret)
{
	const struct cpu_profiler_stats *st = cpu_profiler_stats(p->impl);

	*ret = (struct profiler_facts){ .window_ns = st->window_ns, .count = st->samples,
					.lost = st->lost, .pause_ns = -1,
					.target_exited = st->target_exited };
}

static void cpu_free(void *impl)
{
	cpu_profiler_free(impl);
}

static int no_text(struct profiler *p, int debug, FILE *f)
{
	(void)p;
	(void)debug;
	(void)f;
	return -ENOTSUP;
}

static const struct profiler_ops cpu_ops = {
	.start = cpu_start, .poll = cpu_poll, .stop = cpu_stop, .finish = cpu_finish,
	.write_text = no_text, .facts = cpu_facts, .free = cpu_free,
};

int profiler_new_cpu(struct profiler **ret, const struct cpu_profiler_opts *o, char *err,
		     size_t errlen)
{
	struct cpu_profiler *c;
	int r;

	*ret = NULL;
	r = cpu_profiler_new(&c, o, err, errlen);
	return r < 0 ? r : new_profiler(ret, &cpu_ops, "cpu", c);
}

/* ---- wall ---------------------------------------------------------------- */

static int wall_start(struct profiler *p, char *err, size_t errlen)
{
	int r = wall_profiler_start(p->impl);

	if (r < 0)
		snprintf(err, errlen, "cannot start the wall clock: %s", strerror(-r));
	return r;
}

static int wall_poll(struct profiler *p, int timeout_ms)
{
	return wall_profiler_poll(p->impl, timeout_ms);
}

static int wall_stop(struct profiler *p)
{
	return wall_profiler_stop(p->impl);
}

static int wall_finish(struct profiler *p, struct profile **ret)
{
	return wall_profiler_finish(p->impl, ret);
}

static void wall_facts(const struct profiler *p, struct profiler_facts *ret)
{
	const struct wall_profiler_stats *st = wall_profiler_stats(p->impl);

	*ret = (struct profiler_facts){ .window_ns = st->window_ns, .count = st->ticks,
					.lost = st->lost, .pause_ns = -1,
					.target_exited = st->target_exited };
}

static void wall_free(void *impl)
{
	wall_profiler_free(impl);
}

static const struct profiler_ops wall_ops = {
	.start = wall_start, .poll = wall_poll, .stop = wall_stop, .finish = wall_finish,
	.write_text = no_text, .facts = wall_facts, .free = wall_free,
};

int profiler_new_wall(struct profiler **ret, const struct wall_profiler_opts *o, char *err,
		      size_t errlen)
{
	struct wall_profiler *w;
	int r;

	*ret = NULL;
	r = wall_profiler_new(&w, o, err, errlen);
	return r < 0 ? r : new_profiler(ret, &wall_ops, "wall", w);
}

/* ---- threads: the snapshot is the whole window ---------------------------- */

static int threads_start(struct profiler *p, char *err, size_t errlen)
{
	struct threads_snapshot *s;
	int r;

	if (p->impl)
		return -EALREADY;
	r = threads_snapshot_take(&s, p->pid, p->sym, err, errlen);
	if (r == 0)
		p->impl = s;
	return r;
}

static int threads_poll(struct profiler *p, int timeout_ms)
{
	(void)timeout_ms;
	return p->impl ? 1 : -EINVAL;
}

static int threads_stop(struct profiler *p)
{
	return p->impl ? 0 : -EINVAL;
}

static int threads_finish(struct profiler *p, struct profile **ret)
{
	*ret = NULL;
	return p->impl ? threads_build_profile(p->impl, p->command_line, ret) : -EINVAL;
}

static int threads_text(struct profiler *p, int debug, FILE *f)
{
	if (!p->impl)
		return -EINVAL;
	if (debug == 1)
		return threads_write_debug1(p->impl, f);
	return debug == 2 ? threads_write_debug2(p->impl, f) : -ENOTSUP;
}

/* Its count is the threads stopped (those refused are in the text). */
static void threads_facts(const struct profiler *p, struct profiler_facts *ret)
{
	const struct threads_snapshot *s = p->impl;

	*ret = (struct profiler_facts){ .count = s ? s->nstopped : 0,
					.pause_ns = s ? (int64_t)s->pause_ns : -1 };
}

static struct symbolizer *threads_sym(const struct profiler *p)
{
	const struct threads_snapshot *s = p->impl;

	return s ? s->sym : NULL;
}

static void threads_free(void *impl)
{
	threads_snapshot_free(impl);
}

static const struct profiler_ops threads_ops = {
	.start = threads_start, .poll = threads_poll, .stop = threads_stop,
	.finish = threads_finish, .write_text = threads_text, .facts = threads_facts,
	.symbolizer = threads_sym, .free = threads_free,
};

int profiler_new_threads(struct profiler **ret, pid_t pid, struct symbolizer *sym,
			 const char *command_line)
{
	int r;

	*ret = NULL;
	r = new_profiler(ret, &threads_ops, "threads", NULL);
	if (r == 0) {
		(*ret)->pid = pid;
		(*ret)->command_line = command_line;
		(*ret)->sym = sym ? symbolizer_ref(sym) : NULL;
	}
	return r;
}

/* ---- heap, block, mutex, threadcreate: the agent's ---------------------- */

static int agent_start(struct profiler *p, char *err, size_t errlen)
{
	return agent_profiler_start(p->impl, err, errlen);
}

/* The agent's window ends by itself; a target gone is said as cpu's is. */
static int agent_poll(struct profiler *p, int timeout_ms)
{
	int r = agent_profiler_poll(p->impl, timeout_ms);

	if (r > 0 && agent_profiler_window(p->impl)->target_exited)
		return -ESRCH;
	return r;
}

static int agent_stop(struct profiler *p)
{
	return agent_profiler_stop(p->impl);
}

static int agent_finish(struct profiler *p, struct profile **ret)
{
	return agent_profiler_finish(p->impl, p->events, ret);
}

static int agent_text(struct profiler *p, int debug, FILE *f)
{
	return debug == 1 ? agent_profiler_write_text(p->impl, p->events, f) : -ENOTSUP;
}

static void agent_facts(const struct profiler *p, struct profiler_facts *ret)
{
	const struct window_result *w = agent_profiler_window(p->impl);
	const struct agent_session *s = agent_profiler_session(p->impl);

	*ret = (struct profiler_facts){ .window_ns = w->window_ns,
					.count = agent_profiler_count(p->impl, p->events),
					.lost = w->counters.lost,
					.pause_ns = s->rep.tid ? (int64_t)s->rep.stopped_ns : -1,
					.target_exited = w->target_exited };
}

static struct symbolizer *agent_sym(const struct profiler *p)
{
	return agent_profiler_session(p->impl)->sym;
}

static void agent_free(void *impl)
{
	agent_profiler_free(impl);
}

static const struct profiler_ops agent_ops = {
	.start = agent_start, .poll = agent_poll, .stop = agent_stop, .finish = agent_finish,
	.write_text = agent_text, .facts = agent_facts, .symbolizer = agent_sym,
	.free = agent_free,
};

static const char *agent_kind(uint32_t events)
{
	for (unsigned k = 0; k < KIND_N; k++)
		if (kind_events((enum kind)k) == events)
			return kind_name((enum kind)k);
	return NULL;
}

int profiler_new_agent(struct profiler **ret, const struct agent_profiler_opts *o,
		       const char *comm, char *err, size_t errlen)
{
	size_t n;
	int r;

	*ret = NULL;
	if (!o->events || (o->events & (o->events - 1))) {
		snprintf(err, errlen, "not one kind of the agent's: events %#x", o->events);
		return -EINVAL;
	}
	r = profiler_new_agents(ret, &n, o, comm, err, errlen);
	return r;
}

int profiler_new_agents(struct profiler **ret, size_t *ret_n, const struct agent_profiler_opts *o,
			const char *comm, char *err, size_t errlen)
{
	struct agent_profiler *a;
	size_t n = 0;
	int r;

	*ret_n = 0;
	r = agent_profiler_new(&a, o, comm, err, errlen);
	if (r < 0)
		return r;
	for (unsigned k = 0; k < CPROF_KINDS && r == 0; k++) {
		uint32_t events = 1u << k;

		if (!(o->events & events))
			continue;
		/* Each owns a reference: new_profiler() drops it on failure. */
		r = new_profiler(&ret[n], &agent_ops, agent_kind(events),
				 n ? agent_profiler_ref(a) : a);
		if (r == 0)
			ret[n++]->events = events;
	}
	if (r < 0) {
		while (n)
			profiler_free(ret[--n]);
		snprintf(err, errlen, "%s", strerror(-r));
		return r;
	}
	*ret_n = n;
	return 0;
}

/* ---- heap from jemalloc's own profiler: a dump, no window -------------- */

struct jemalloc_kind {
	struct jemalloc_dump d;
	struct agent_session_opts so;
	char agent_path[PATH_MAX];
	pid_t pid;
	const char *index, *command_line;
	bool taken;
};

static int jemalloc_start(struct profiler *p, char *err, size_t errlen)
{
	struct jemalloc_kind *j = p->impl;
	int r;

	if (j->taken)
		return -EALREADY;
	j->taken = true;
	r = jemalloc_dump_take(&j->d, j->pid, &j->so);
	if (r < 0 && r != -ECANCELED)
		snprintf(err, errlen, "jemalloc's profile: %s", strerror(-r));
	return r;
}

static int jemalloc_poll(struct profiler *p, int timeout_ms)
{
	const struct jemalloc_kind *j = p->impl;

	(void)timeout_ms;
	return j->d.prof ? 1 : -EINVAL;
}

static int jemalloc_stop(struct profiler *p)
{
	const struct jemalloc_kind *j = p->impl;

	return j->taken ? 0 : -EINVAL;
}

static int jemalloc_finish(struct profiler *p, struct profile **ret)
{
	const struct jemalloc_kind *j = p->impl;
	struct jeprof_build_opts o = {
		.sym = j->d.s.sym,
		.default_type = j->index,
		.command_line = j->command_line,
		.pid = j->pid,
		.time_nanos = (int64_t)j->d.time_realtime_ns,
	};

	*ret = NULL;
	return j->d.prof ? jeprof_build(j->d.prof, &o, ret) : -EINVAL;
}

static int jemalloc_text(struct profiler *p, int debug, FILE *f)
{
	const struct jemalloc_kind *j = p->impl;

	if (!j->d.prof)
		return -EINVAL;
	return debug == 1 ? jeprof_write_text(j->d.prof, j->d.s.sym, f) : -ENOTSUP;
}

/* What jemalloc sampled: all of it with prof_accum, else what is live. */
static void jemalloc_facts(const struct profiler *p, struct profiler_facts *ret)
{
	const struct jemalloc_kind *j = p->impl;
	const struct jeprof_counts *c = j->d.prof ? &j->d.prof->all : NULL;

	*ret = (struct profiler_facts){
		.count = !c ? 0 : c->accum_objects ? c->accum_objects : c->cur_objects,
		.pause_ns = j->d.s.rep.tid ? (int64_t)j->d.s.rep.stopped_ns : -1,
	};
}

static struct symbolizer *jemalloc_sym(const struct profiler *p)
{
	const struct jemalloc_kind *j = p->impl;

	return j->d.s.sym;
}

static void jemalloc_free(void *impl)
{
	struct jemalloc_kind *j = impl;

	jemalloc_dump_release(&j->d);
	free(j);
}

static const struct profiler_ops jemalloc_ops = {
	.start = jemalloc_start, .poll = jemalloc_poll, .stop = jemalloc_stop,
	.finish = jemalloc_finish, .write_text = jemalloc_text, .facts = jemalloc_facts,
	.symbolizer = jemalloc_sym, .free = jemalloc_free,
};

int profiler_new_jemalloc(struct profiler **ret, pid_t pid, const struct agent_session_opts *so,
			  const char *index, const char *command_line)
{
	struct jemalloc_kind *j = calloc(1, sizeof(*j));

	*ret = NULL;
	if (!j)
		return -ENOMEM;
	j->pid = pid;
	j->so = *so;
	snprintf(j->agent_path, sizeof(j->agent_path), "%s", so->agent_path ? so->agent_path : "");
	j->so.agent_path = j->agent_path;
	j->index = index;
	j->command_line = command_line;
	j->d.s.fd = -1;
	j->d.s.claim.fd = -1;
	return new_profiler(ret, &jemalloc_ops, "heap", j);
}

/* ---- the verbs ----------------------------------------------------------- */

const char *profiler_kind(const struct profiler *p)
{
	return p->kind;
}

int profiler_start(struct profiler *p, char *err, size_t errlen)
{
	return p->ops->start(p, err, errlen);
}

int profiler_poll(struct profiler *p, int timeout_ms)
{
	return p->ops->poll(p, timeout_ms);
}

int profiler_stop(struct profiler *p)
{
	return p->ops->stop(p);
}

int profiler_finish(struct profiler *p, struct profile **ret)
{
	return p->ops->finish(p, ret);
}

int profiler_write_text(struct profiler *p, int debug, FILE *f)
{
	return p->ops->write_text(p, debug, f);
}

uint64_t profiler_count(const struct profiler *p)
{
	struct profiler_facts f;

	p->ops->facts(p, &f);
	return f.count;
}

void profiler_facts(const struct profiler *p, struct profiler_facts *ret)
{
	p->ops->facts(p, ret);
}

struct symbolizer *profiler_symbolizer(const struct profiler *p)
{
	return p->ops->symbolizer ? p->ops->symbolizer(p) : NULL;
}

const struct cpu_profiler_stats *profiler_cpu_stats(const struct profiler *p)
{
	return p->ops == &cpu_ops ? cpu_profiler_stats(p->impl) : NULL;
}

const struct wall_profiler_stats *profiler_wall_stats(const struct profiler *p)
{
	return p->ops == &wall_ops ? wall_profiler_stats(p->impl) : NULL;
}

const struct threads_snapshot *profiler_threads_snapshot(const struct profiler *p)
{
	return p->ops == &threads_ops ? p->impl : NULL;
}

struct agent_profiler *profiler_agent(const struct profiler *p)
{
	return p->ops == &agent_ops ? p->impl : NULL;
}

const struct jemalloc_dump *profiler_jemalloc_dump(const struct profiler *p)
{
	return p->ops == &jemalloc_ops ? p->impl : NULL;
}

void profiler_free(struct profiler *p)
{
	if (!p)
		return;
	if (p->impl)
		p->ops->free(p->impl);
	symbolizer_unref(p->sym);
	free(p);
}
