/* Every kind of profile behind one set of verbs (profiler.h). */
#include "profiler/profiler.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/wire.h"
#include "util/util.h"

struct profiler_ops {
	int (*start)(struct profiler *p, char *err, size_t errlen);
	int (*poll)(struct profiler *p, int timeout_ms);
	int (*stop)(struct profiler *p);
	int (*finish)(struct profiler *p, struct profile **ret);
	int (*write_text)(struct profiler *p, int debug, FILE *f);
	uint64_t (*count)(const struct profiler *p);
	void (*free)(void *impl);
};

struct profiler {
	const struct profiler_ops *ops;
	const char *kind;
	void *impl;
	/* threads: what start takes */
	pid_t pid;
	const char *command_line;
};

static int new_profiler(struct profiler **ret, const struct profiler_ops *ops, const char *kind,
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

static uint64_t cpu_count(const struct profiler *p)
{
	return cpu_profiler_stats(p->impl)->samples;
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
	.write_text = no_text, .count = cpu_count, .free = cpu_free,
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

static uint64_t wall_count(const struct profiler *p)
{
	return wall_profiler_stats(p->impl)->ticks;
}

static void wall_free(void *impl)
{
	wall_profiler_free(impl);
}

static const struct profiler_ops wall_ops = {
	.start = wall_start, .poll = wall_poll, .stop = wall_stop, .finish = wall_finish,
	.write_text = no_text, .count = wall_count, .free = wall_free,
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
	r = threads_snapshot_take(&s, p->pid, err, errlen);
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

static uint64_t threads_count(const struct profiler *p)
{
	const struct threads_snapshot *s = p->impl;

	return s ? s->nthreads : 0;
}

static void threads_free(void *impl)
{
	threads_snapshot_free(impl);
}

static const struct profiler_ops threads_ops = {
	.start = threads_start, .poll = threads_poll, .stop = threads_stop,
	.finish = threads_finish, .write_text = threads_text, .count = threads_count,
	.free = threads_free,
};

int profiler_new_threads(struct profiler **ret, pid_t pid, const char *command_line)
{
	int r;

	*ret = NULL;
	r = new_profiler(ret, &threads_ops, "threads", NULL);
	if (r == 0) {
		(*ret)->pid = pid;
		(*ret)->command_line = command_line;
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
	return agent_profiler_finish(p->impl, ret);
}

static int agent_text(struct profiler *p, int debug, FILE *f)
{
	return debug == 1 ? agent_profiler_write_text(p->impl, f) : -ENOTSUP;
}

static uint64_t agent_count(const struct profiler *p)
{
	return agent_profiler_count(p->impl);
}

static void agent_free(void *impl)
{
	agent_profiler_free(impl);
}

static const struct profiler_ops agent_ops = {
	.start = agent_start, .poll = agent_poll, .stop = agent_stop, .finish = agent_finish,
	.write_text = agent_text, .count = agent_count, .free = agent_free,
};

static const char *agent_kind(uint32_t events)
{
	switch (events) {
	case CPROF_EVENTS_HEAP:
		return "heap";
	case CPROF_EVENTS_BLOCK:
		return "block";
	case CPROF_EVENTS_MUTEX:
		return "mutex";
	case CPROF_EVENTS_THREADCREATE:
		return "threadcreate";
	}
	return NULL;
}

int profiler_new_agent(struct profiler **ret, const struct agent_profiler_opts *o,
		       const char *comm, char *err, size_t errlen)
{
	struct agent_profiler *a;
	int r;

	*ret = NULL;
	r = agent_profiler_new(&a, o, comm, err, errlen);
	return r < 0 ? r : new_profiler(ret, &agent_ops, agent_kind(o->events), a);
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
	return p->ops->count(p);
}

void *profiler_impl(const struct profiler *p)
{
	return p->impl;
}

void profiler_free(struct profiler *p)
{
	if (!p)
		return;
	if (p->impl)
		p->ops->free(p->impl);
	free(p);
}
