/*
 * What perf tells of the target's threads during the window: their CPU
 * samples' stacks, their names, births and ends, and the kernel's switch
 * records while they are cheap enough to take.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wall/wall-private.h"

/* PERF_RECORD_SWITCH: header and sample id (pid, tid, time, cpu). */
#define SWITCH_RECORD_BYTES 32
/*
 * The kernel's switch records tell exactly which waits for a CPU followed a
 * preemption, but each costs the target's switch a little and cprof 32
 * bytes: above this many a second (or this many threads, an event each a
 * CPU) they are closed and the split is estimated.
 */
#define SWITCH_RECORDS_MAX 10000
#define SWITCH_THREADS_MAX 512 /* wall_split_reason() says the figure */
#define SWITCH_RING_PAGES 64
/* PERF_RECORD_FORK, _EXIT: header, four ids, time, sample id. */
#define TASK_RECORD_BYTES 56

/* A sample's thread keeps its stack, the last it ran on and one of those
 * its run time is divided among (one born since the last tick is added now). */
static int keep_run_stack(struct wall_profiler *p, pid_t tid, const uint64_t *pcs, size_t n,
			  uint64_t period)
{
	struct wall_thread *t = wall_thread_of(p, tid);

	if (!t && p->started)
		t = wall_thread_add(p, tid, now_monotonic_ns());
	if (!t || t->own)
		return 0;
	if (GROW(t->run_pcs, n, t->run_alloc) < 0)
		return -ENOMEM;
	memcpy(t->run_pcs, pcs, n * sizeof(*pcs));
	t->nrun = n;
	return wall_run_stacks_add(&t->runs, pcs, n, period);
}

static int on_sample(const struct perf_sample *s, void *arg)
{
	struct wall_profiler *p = arg;
	bool by_fp;
	int n;

	if (agent_tasks_has(&p->s.agent, s->tid))
		return 0;
	n = sampling_user_stack(&p->s, s, p->pcs, WALL_MAX_FRAMES, &by_fp);
	if (n == 0)
		return 0;
	p->stats.run_stacks++;
	if (by_fp)
		p->stats.by_frame_pointers++;
	p->stats.bytes_read += s->user.stack_size + sizeof(s->user.regs);
	return keep_run_stack(p, s->tid, p->pcs, (size_t)n, s->period);
}

static void on_comm(pid_t tid, const char *name, void *arg)
{
	struct wall_profiler *p = arg;
	struct wall_thread *t = wall_thread_of(p, tid);

	/* The agent's task names itself first: it may have been seen before. */
	agent_tasks_saw_name(&p->s.agent, name); /* out of memory: known later, or not */
	if (t && agent_tasks_has(&p->s.agent, tid))
		wall_thread_disown(p, t);
	else if (t)
		t->name = profile_intern(p->s.profile, name);
}

/* Each CPU has its ring: a thread's switches come in time order only once
 * sorted (it may leave one CPU and come back on another). */
static void on_cpu_switch(pid_t tid, uint64_t time, bool out, bool preempted, void *arg)
{
	struct wall_profiler *p = arg;
	struct wall_thread *t = wall_thread_of(p, tid);

	p->stats.bytes_read += SWITCH_RECORD_BYTES;
	p->switch_records++;
	if (t)
		wall_waits_switch(&t->waits, time, out, preempted);
}

/* From now on the waits for a CPU are shared by estimate. */
static void close_switches(struct wall_profiler *p, enum wall_split why)
{
	perf_session_free(p->switches);
	p->switches = NULL;
	p->stats.split = why;
	for (size_t i = 0; i < p->nthreads; i++)
		wall_waits_forget_switches(&p->threads[i].waits);
}

/*
 * The switch records, after the first tick, where the budget allows them:
 * the threads' own counts tell how often they switch before any record
 * costs them anything.
 */
void wall_switches_open(struct wall_profiler *p, uint64_t now)
{
	struct perf_opts o = { .pid = p->opts.pid, .scope = PERF_SCOPE_THREAD,
			       .ring_pages = SWITCH_RING_PAGES, .switches_only = true };
	uint64_t rate = p->switches_counted * 1000000000ULL / MAX(now - p->s.win.start_ns, 1);

	p->switches_decided = true;
	if (!p->s.perf) {
		p->stats.split = WALL_SPLIT_REFUSED;
		return;
	}
	if (2 * rate > SWITCH_RECORDS_MAX) {
		p->stats.switch_rate = rate;
		p->stats.split = WALL_SPLIT_TOO_MANY_SWITCHES;
		return;
	}
	if (p->nthreads > SWITCH_THREADS_MAX) {
		p->stats.split = WALL_SPLIT_TOO_MANY_THREADS;
		return;
	}
	if (perf_session_open(&p->switches, &o) < 0 || perf_session_enable(p->switches) < 0) {
		perf_session_free(p->switches);
		p->switches = NULL;
		p->stats.split = WALL_SPLIT_REFUSED;
		return;
	}
	p->stats.split = WALL_SPLIT_EXACT;
	p->switches_since = now_monotonic_ns();
}

/* Switches come at a price per switch: past the budget, none. */
void wall_switches_check(struct wall_profiler *p, uint64_t now)
{
	uint64_t rate;

	if (!p->switches || now - p->switches_since < 1000000000ULL)
		return;
	rate = p->switch_records * 1000000000ULL / (now - p->switches_since);
	p->switches_since = now;
	p->switch_records = 0;
	if (rate > SWITCH_RECORDS_MAX) {
		p->stats.switch_rate = rate / 2; /* a record out, one in */
		close_switches(p, WALL_SPLIT_TOO_MANY_SWITCHES);
	}
}

/*
 * Births are kept until the thread is first seen (its clocks start there);
 * an end is accounted at once, from the last tick to the exact time, on the
 * stack the thread was last seen on: no clock can be read after it.
 */
static void on_task(pid_t tid, uint64_t time, bool exited, void *arg)
{
	struct wall_profiler *p = arg;
	struct wall_thread *t = wall_thread_of(p, tid);

	p->stats.bytes_read += TASK_RECORD_BYTES;
	if (!exited) {
		u64map_put(&p->births, (uint64_t)tid, time); /* only a better guess */
		return;
	}
	if (!t || !t->alive || t->exited || !p->started)
		return;
	t->exited = true;
	if (time > t->last_ns)
		wall_add_final(p, t, time); /* out of memory: the profile misses its end */
}

int wall_drain(struct wall_profiler *p)
{
	struct perf_handlers h = { .sample = on_sample, .comm = on_comm, .task = on_task,
				   .arg = p };
	const struct perf_stats *ps;
	int r;

	if (p->switches) {
		struct perf_handlers sh = { .cpu_switch = on_cpu_switch, .arg = p };

		r = perf_session_drain(p->switches, &sh);
		if (r < 0)
			return r;
		if (perf_session_stats(p->switches)->lost)
			close_switches(p, WALL_SPLIT_LOST);
	}
	if (!p->s.perf)
		return 0;
	r = perf_session_drain(p->s.perf, &h);
	ps = perf_session_stats(p->s.perf);
	p->stats.lost = ps->lost;
	return r;
}
