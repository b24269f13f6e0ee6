#include "wall/wall-profiler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "maps/maps.h"
#include "perf/perf.h"
#include "session/agent-task.h"
#include "symbolize/symbolize.h"
#include "target/target.h"
#include "threads/threads.h"
#include "unwind/unwind.h"
#include "util/util.h"
#include "wall/wall-private.h"

#define MAX_FRAMES 256
#define STACK_BYTES 8192
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
#define LIVENESS_NS (100ULL * 1000 * 1000)
/* A tick may take this share of cprof's time at most: more threads, rarer
 * ticks (every interval is still accounted in full). */
#define TICK_DUTY 10

/* Addresses that are never a PC: the frames of time without a stack. */
#define ADDR_OFF_UNSEEN 0
#define ADDR_RUN_UNSAMPLED 1

static const struct profile_value_type wall_types[] = {
	{ "samples", "count" },
	{ "wall", "nanoseconds" },
};

struct wall_thread {
	pid_t tid;
	int fd;              /* its schedstat */
	int status_fd;       /* its status, once read; -1: not yet */
	bool alive, listed;
	uint64_t last_ns;    /* accounted up to here (CLOCK_MONOTONIC) */
	struct wall_clocks clk;
	bool fresh;          /* its next read is its clocks' baseline */
	struct wall_clocks next; /* this tick's read, at next_at */
	uint64_t next_at;
	int next_r;
	struct wall_where where; /* with next, if where_known */
	bool where_known;
	bool awake;              /* not asleep at the last read that said where */
	uint64_t awake_voluntary; /* its switches to sleep then */
	bool began_on_cpu;       /* what it owes at the start is run time */
	uint64_t ahead_run, ahead_wait; /* given before its clocks had them */
	struct wall_waits waits;
	uint64_t owed_ns;        /* counted twice so far: off the CPU, then waiting */
	uint64_t waited_ns;      /* given to its samples as runnable */
	uint64_t taken_ns;       /* of that, taken back (take_back_owed()) */
	bool exited;             /* perf said it ended: accounted to its end */
	bool own;                /* the cprof agent's task, known late: its samples go */
	uint64_t run_ns;         /* its clock's run time in the window */
	struct wall_run_stacks runs; /* what its CPU samples caught */
	bool looked;
	struct wall_off_stack off;
	uint64_t *run_pcs;   /* its last CPU sample's stack */
	size_t nrun, run_alloc;
	const char *name;
};

struct wall_profiler {
	struct wall_profiler_opts opts;
	struct perf_opts popts;
	struct symbolizer *sym;
	struct unwinder *unw;       /* sym's */
	struct perf_session *perf; /* NULL: refused, no CPU stacks */
	struct perf_session *switches; /* NULL: none, or closed (too many) */
	bool switches_decided;
	uint64_t switches_counted; /* by the threads' status, since the start */
	uint64_t switches_since, switch_records; /* the rate's window */
	struct profile *profile;
	struct maps maps;
	struct wall_thread *threads;
	size_t nthreads, threads_alloc;
	struct u64map by_tid; /* tid -> index + 1 */
	struct u64map births; /* tid -> perf time of birth, for threads not seen yet */
	struct agent_tasks agent; /* the cprof agent's task: in no sample, no thread */
	const char *process_name;
	uint64_t tick_ns, start_mono, end_mono, next_tick, last_liveness;
	bool started, running, run_added;
	uint64_t rng;
	uint64_t tick_cost; /* smoothed */
	struct wall_profiler_stats stats;
	uint64_t pcs[MAX_FRAMES], locs[MAX_FRAMES];
};

static struct wall_thread *thread_of(struct wall_profiler *p, pid_t tid)
{
	uint64_t v;

	return u64map_get(&p->by_tid, (uint64_t)tid, &v) ? &p->threads[v - 1] : NULL;
}

static const char *name_of(struct wall_profiler *p, pid_t tid)
{
	struct wall_thread *t = thread_of(p, tid);
	char buf[64];

	if (t && t->name)
		return t->name;
	if (target_thread_name(p->opts.pid, tid, buf, sizeof(buf)) < 0)
		return p->process_name;
	return profile_intern(p->profile, buf);
}

static const char *state_name(char state)
{
	switch (state) {
	case 'R':
		return "running";
	case 'D':
		return "disk";
	case 'T':
	case 't':
		return "stopped";
	}
	return "sleeping";
}

/* The frame of time that has no stack: @addr is ADDR_*. */
static int synthetic_location(struct wall_profiler *p, uint64_t addr, uint64_t *ret)
{
	static const char *const names[] = {
		[ADDR_OFF_UNSEEN] = "[off-CPU: stack not seen]",
		[ADDR_RUN_UNSAMPLED] = "[running: not sampled]",
	};

	return profile_named_location(p->profile, addr, names[addr], ret);
}

/* @count samples of @ns of @tid's time in @state, on @pcs (NULL: @addr's frame). */
static int add_samples(struct wall_profiler *p, pid_t tid, const uint64_t *pcs, size_t n,
		       uint64_t addr, const char *state, int64_t syscall, uint64_t count,
		       uint64_t ns)
{
	struct profile_label labels[4];
	size_t nlabels = 3;
	int64_t values[2] = { (int64_t)count, (int64_t)ns };
	const char *call = syscall >= 0 ? syscall_name(syscall) : NULL;
	int r;

	if (!ns)
		return 0;
	if (pcs) {
		for (size_t i = 0; i < n; i++) {
			r = profile_location_for_address(p->profile, pcs[i], &p->locs[i]);
			if (r < 0)
				return r;
		}
	} else {
		r = synthetic_location(p, addr, &p->locs[0]);
		if (r < 0)
			return r;
		n = 1;
	}
	labels[0] = (struct profile_label){ .key = "thread_id", .num = tid };
	labels[1] = (struct profile_label){ .key = "thread_name", .str = name_of(p, tid) };
	labels[2] = (struct profile_label){ .key = "state", .str = state };
	if (!labels[1].str)
		return -ENOMEM;
	if (call)
		labels[nlabels++] = (struct profile_label){ .key = "syscall", .str = call };
	p->stats.accounted_ns += ns;
	return profile_add_sample(p->profile, p->locs, n, values, labels, nlabels);
}

static int add_time(struct wall_profiler *p, pid_t tid, const uint64_t *pcs, size_t n,
		    uint64_t addr, const char *state, int64_t syscall, uint64_t ns)
{
	return add_samples(p, tid, pcs, n, addr, state, syscall, 1, ns);
}

/* ---- CPU samples ------------------------------------------------------- */

static struct wall_thread *add_thread(struct wall_profiler *p, pid_t tid, uint64_t now);

/* A sample's thread keeps its stack, the last it ran on and one of those
 * its run time is divided among (one born since the last tick is added now). */
static int keep_run_stack(struct wall_profiler *p, pid_t tid, const uint64_t *pcs, size_t n,
			  uint64_t period)
{
	struct wall_thread *t = thread_of(p, tid);

	if (!t && p->started)
		t = add_thread(p, tid, now_monotonic_ns());
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
	int n = 0;

	if (!s->has_user || agent_tasks_has(&p->agent, s->tid))
		return 0;
	n = unwinder_unwind(p->unw, &s->user, p->pcs, MAX_FRAMES);
	if (n <= 0) {
		p->pcs[0] = s->user.regs[UNWIND_REG_RIP];
		n = 1;
	}
	p->stats.run_stacks++;
	if (n > 1 && unwinder_by_frame_pointers(p->unw))
		p->stats.by_frame_pointers++;
	p->stats.bytes_read += s->user.stack_size + sizeof(s->user.regs);
	return keep_run_stack(p, s->tid, p->pcs, (size_t)n, s->period);
}

static void disown(struct wall_profiler *p, struct wall_thread *t);

static void on_comm(pid_t tid, const char *name, void *arg)
{
	struct wall_profiler *p = arg;
	struct wall_thread *t = thread_of(p, tid);

	/* The agent's task names itself first: it may have been seen before. */
	agent_tasks_saw_name(&p->agent, name); /* out of memory: known later, or not */
	if (t && agent_tasks_has(&p->agent, tid))
		disown(p, t);
	else if (t)
		t->name = profile_intern(p->profile, name);
}

/* Each CPU has its ring: a thread's switches come in time order only once
 * sorted (it may leave one CPU and come back on another). */
static void on_cpu_switch(pid_t tid, uint64_t time, bool out, bool preempted, void *arg)
{
	struct wall_profiler *p = arg;
	struct wall_thread *t = thread_of(p, tid);

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
static void open_switches(struct wall_profiler *p, uint64_t now)
{
	struct perf_opts o = { .pid = p->opts.pid, .scope = PERF_SCOPE_THREAD,
			       .ring_pages = SWITCH_RING_PAGES, .switches_only = true };
	uint64_t rate = p->switches_counted * 1000000000ULL / MAX(now - p->start_mono, 1);

	p->switches_decided = true;
	if (!p->perf) {
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
static void check_switch_rate(struct wall_profiler *p, uint64_t now)
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

static int add_final(struct wall_profiler *p, struct wall_thread *t, uint64_t end);

/*
 * Births are kept until the thread is first seen (its clocks start there);
 * an end is accounted at once, from the last tick to the exact time, on the
 * stack the thread was last seen on: no clock can be read after it.
 */
static void on_task(pid_t tid, uint64_t time, bool exited, void *arg)
{
	struct wall_profiler *p = arg;
	struct wall_thread *t = thread_of(p, tid);

	p->stats.bytes_read += TASK_RECORD_BYTES;
	if (!exited) {
		u64map_put(&p->births, (uint64_t)tid, time); /* only a better guess */
		return;
	}
	if (!t || !t->alive || t->exited || !p->started)
		return;
	t->exited = true;
	if (time > t->last_ns)
		add_final(p, t, time); /* out of memory: the profile misses its end */
}

static int drain(struct wall_profiler *p)
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
	if (!p->perf)
		return 0;
	r = perf_session_drain(p->perf, &h);
	ps = perf_session_stats(p->perf);
	p->stats.lost = ps->lost;
	return r;
}

/* ---- ticks ------------------------------------------------------------- */

/*
 * A stack for the thread asleep now. A thread stack mapped since the maps
 * were read is found by reading them again, once.
 */
static void take_off_stack(struct wall_profiler *p, struct wall_thread *t,
			   const struct wall_look *look)
{
	uint64_t bytes = 0;
	int r;

	r = wall_take_off_stack(p->opts.pid, t->tid, look, &p->maps, p->unw, &t->off, &bytes);
	if (r == -ENOENT) {
		maps_release(&p->maps);
		if (maps_read(p->opts.pid, &p->maps) == 0)
			r = wall_take_off_stack(p->opts.pid, t->tid, look, &p->maps, p->unw,
						&t->off, &bytes);
	}
	p->stats.bytes_read += bytes;
	if (r == 1) {
		p->stats.off_stacks++;
		p->stats.by_frame_pointers += t->off.by_frame_pointers;
	} else if (r == 0) {
		p->stats.off_reused++;
	}
}

/* What the thread does now; if it sleeps, on which stack. */
static void look_now(struct wall_profiler *p, struct wall_thread *t)
{
	struct wall_look look;

	t->looked = true;
	if (wall_look_read(p->opts.pid, t->tid, &look) == 0 && look.state != 'R' && look.sp)
		take_off_stack(p, t, &look);
}

/* The stack for @ns of waiting: @run's if it is known, else @sleep's. */
static int add_wait(struct wall_profiler *p, struct wall_thread *t, bool run_first, uint64_t ns)
{
	const struct wall_off_stack *st = &t->off;

	if (t->nrun && (run_first || !st->valid))
		return add_time(p, t->tid, t->run_pcs, t->nrun, 0, "runnable", -1, ns);
	if (st->valid)
		return add_time(p, t->tid, st->pcs, st->npcs, 0, "runnable", st->look.syscall, ns);
	return add_time(p, t->tid, NULL, 0, ADDR_OFF_UNSEEN, "runnable", -1, ns);
}

/* The thread's switch counts now, for the first tick's rate and the
 * estimate; not read while the records tell the split (a status file a
 * thread that ran, each tick, unless its read said where it was). */
static void count_switches(struct wall_profiler *p, struct wall_thread *t, uint64_t ddelay)
{
	if (p->switches)
		return;
	p->switches_counted += wall_waits_count(&t->waits, p->opts.pid, t->tid,
						t->where_known ? &t->where.sw : NULL, ddelay);
}

/*
 * Time on a run queue follows either a preemption (the thread waits where
 * it ran) or a wake-up (it waits to return from the call it slept in):
 * exactly so by the kernel's switch records, else shared as estimated.
 */
static int add_runnable(struct wall_profiler *p, struct wall_thread *t, uint64_t ddelay)
{
	uint64_t preempted;
	int r;

	preempted = wall_waits_preempted(&t->waits, p->switches != NULL, ddelay);

	r = add_wait(p, t, true, preempted);
	if (r == 0)
		r = add_wait(p, t, false, ddelay - preempted);
	return r;
}

/*
 * Each thread's run time, exact from its clock, on the stacks its CPU
 * samples caught, in proportion to their periods. Per-thread sampling
 * counts the thread's own CPU time, so a sample stands for its period and
 * what the clock has beyond them (in the kernel, where samples may be
 * refused) is [running: not sampled]; cpu-wide sampling catches a thread
 * by chance, so its samples divide the run time and are not counted.
 * Once, after the last tick.
 */
static int add_running(struct wall_profiler *p, struct wall_thread *t)
{
	const struct wall_run_stacks *rs = &t->runs;
	bool scaled = p->popts.scope == PERF_SCOPE_SYSTEM || rs->period_ns > t->run_ns;
	uint64_t given = 0, cum = 0, ns;
	int r = 0;

	if (t->own)
		return 0;
	for (size_t i = 0; i < rs->nv && r == 0; i++) {
		cum += rs->v[i].period_ns;
		ns = scaled ? (uint64_t)((double)t->run_ns * (double)cum / (double)rs->period_ns) -
				      given
			    : rs->v[i].period_ns;
		given += ns;
		r = add_samples(p, t->tid, wall_run_stack_pcs(rs, i), rs->v[i].n, 0, "running",
				-1, rs->v[i].samples, ns);
	}
	if (r == 0 && t->run_ns > given)
		r = add_time(p, t->tid, NULL, 0, ADDR_RUN_UNSAMPLED, "running", -1,
			     t->run_ns - given);
	return r;
}

/* @s's label @key, or NULL. */
static const struct profile_label *label_of(const struct profile_sample *s, const char *key)
{
	for (size_t i = 0; i < s->nlabels; i++)
		if (!strcmp(s->labels[i].key, key))
			return &s->labels[i];
	return NULL;
}

/* The thread a sample of time waiting for a CPU belongs to, or NULL. */
static struct wall_thread *waiter_of(struct wall_profiler *p, const struct profile_sample *s)
{
	const struct profile_label *tid = label_of(s, "thread_id");
	const struct profile_label *state = label_of(s, "state");
	struct wall_thread *t;

	if (!tid || !state || strcmp(state->str, "runnable"))
		return NULL;
	t = thread_of(p, (pid_t)tid->num);
	return t && !t->own ? t : NULL;
}

/* @ns less of @t's run time. */
static void take_back_run(struct wall_profiler *p, struct wall_thread *t, uint64_t ns)
{
	uint64_t cut = MIN(ns, t->run_ns);

	t->run_ns -= cut;
	t->owed_ns -= cut;
	p->stats.running_ns -= MIN(p->stats.running_ns, cut);
}

/*
 * What a thread still owes at the window's end was counted twice: the part
 * before the window of a wait for a CPU in progress at its start (or of
 * run time the kernel had not yet added to its clock, when it was on a CPU
 * then), which no later time off the CPU paid back. It is taken back from
 * what the thread was doing at the start: its waits, in proportion, then
 * its run time, or the other way round, so that each thread's time adds up
 * to its life in the window.
 */
static void take_back_owed(struct wall_profiler *p)
{
	struct profile *pr = p->profile;
	struct wall_thread *t;
	uint64_t cut;

	for (size_t i = 0; i < p->nthreads; i++)
		if (p->threads[i].began_on_cpu)
			take_back_run(p, &p->threads[i], p->threads[i].owed_ns);
	for (size_t i = 0; i < pr->nsamples; i++) {
		int64_t *v = &pr->samples[i].values[1];

		t = waiter_of(p, &pr->samples[i]);
		if (!t || !t->owed_ns || !t->waited_ns)
			continue;
		cut = (uint64_t)((double)*v * (double)MIN(t->owed_ns, t->waited_ns) /
				 (double)t->waited_ns);
		cut = MIN(cut, (uint64_t)*v);
		*v -= (int64_t)cut;
		t->taken_ns += cut;
		p->stats.runnable_ns -= MIN(p->stats.runnable_ns, cut);
		p->stats.accounted_ns -= MIN(p->stats.accounted_ns, cut);
	}
	for (size_t i = 0; i < p->nthreads; i++) {
		t = &p->threads[i];
		t->owed_ns -= MIN(t->owed_ns, t->taken_ns);
		take_back_run(p, t, t->owed_ns);
	}
}

/* From the last tick to the thread's end: where it was last seen. */
static int add_final(struct wall_profiler *p, struct wall_thread *t, uint64_t end)
{
	const struct wall_off_stack *st = &t->off;
	uint64_t ns = end - t->last_ns;

	t->last_ns = end;
	p->stats.off_ns += ns;
	if (st->valid)
		return add_time(p, t->tid, st->pcs, st->npcs, 0, state_name(st->look.state),
				st->look.syscall, ns);
	if (t->nrun)
		return add_time(p, t->tid, t->run_pcs, t->nrun, 0, "running", -1, ns);
	return add_time(p, t->tid, NULL, 0, ADDR_OFF_UNSEEN, "sleeping", -1, ns);
}

/*
 * Whether @t was awake (running or runnable) all through the interval its
 * read ends: awake at the last read that said where, and no switch to
 * sleep since. Remembers where it is now for the next.
 */
static bool awake_through(struct wall_thread *t)
{
	bool through;

	if (!t->where_known)
		return false;
	through = t->awake && t->where.sw.voluntary == t->awake_voluntary;
	t->awake = t->where.awake;
	t->awake_voluntary = t->where.sw.voluntary;
	return through;
}

/*
 * @ns of an interval the thread was awake through that its clocks do not
 * hold yet: the run since the kernel last added to its clock, or the wait
 * it is in now (added when it ends). It is given now to what the thread is
 * doing, and not again when the clocks have it. A thread that never slept
 * waited after a preemption: where it ran.
 */
static int add_ahead(struct wall_profiler *p, struct wall_thread *t, uint64_t ns, uint64_t *drun)
{
	if (t->where.on_cpu) {
		t->ahead_run += ns;
		*drun += ns;
		return 0;
	}
	t->ahead_wait += ns;
	t->waited_ns += ns;
	p->stats.runnable_ns += ns;
	if (p->switches)
		wall_waits_given_ahead(&t->waits, ns);
	return add_wait(p, t, true, ns);
}

/*
 * The interval from the thread's last read to @now, by its clocks as read
 * in this tick's pass: how much of it was run and how much waited for a
 * CPU; the rest it was off its run queue. Off-CPU time goes to the stack
 * it sleeps on now, or, when it runs now, to the one it slept on before.
 */
static int account(struct wall_profiler *p, struct wall_thread *t, uint64_t now)
{
	const struct wall_clocks *c = &t->next;
	uint64_t dt, drun, ddelay, off = 0, owed, paid;
	const struct wall_off_stack *st = &t->off;
	bool ran, awake;
	int r = t->next_r;

	if (r < 0)
		return r;
	dt = now > t->last_ns ? now - t->last_ns : 0;
	drun = c->run_ns - MIN(c->run_ns, t->clk.run_ns);
	ddelay = c->delay_ns - MIN(c->delay_ns, t->clk.delay_ns);
	ran = drun > 0;
	if (ran)
		count_switches(p, t, ddelay);
	wall_waits_settle(&t->waits);
	/* Given before, as the thread's state then: in the clocks now. */
	paid = MIN(t->ahead_run, drun);
	t->ahead_run -= paid;
	drun -= paid;
	paid = MIN(t->ahead_wait, ddelay);
	t->ahead_wait -= paid;
	ddelay -= paid;
	awake = awake_through(t);
	/*
	 * The kernel adds a wait for a CPU to the clock when the wait ends,
	 * and run time at its own ticks: a wait that began before the last
	 * tick was counted off the CPU then and comes again now. What an
	 * interval holds beyond its length is owed by the next ones, so that
	 * a thread's time adds up to its life. A thread awake all through
	 * was off the CPU none of it: what its clocks lack is given ahead.
	 */
	if (dt >= drun + ddelay && awake) {
		r = add_ahead(p, t, dt - drun - ddelay, &drun);
	} else if (dt >= drun + ddelay) {
		off = dt - drun - ddelay;
		owed = MIN(off, t->owed_ns);
		off -= owed;
		t->owed_ns -= owed;
	} else {
		t->owed_ns += drun + ddelay - dt;
	}
	t->clk = *c;
	t->last_ns = now;
	t->run_ns += drun;
	p->stats.running_ns += drun;
	p->stats.runnable_ns += ddelay;
	p->stats.off_ns += off;
	if (ran || !t->looked) {
		look_now(p, t);
	} else {
		p->stats.off_reused += off > 0;
	}
	if (r == 0 && off && st->valid)
		r = add_time(p, t->tid, st->pcs, st->npcs, 0, state_name(st->look.state),
			     st->look.syscall, off);
	else if (r == 0 && off) {
		p->stats.off_unknown++;
		r = add_time(p, t->tid, NULL, 0, ADDR_OFF_UNSEEN, "sleeping", -1, off);
	}
	if (r == 0 && ddelay)
		r = add_runnable(p, t, ddelay);
	if (r == 0)
		t->waited_ns += ddelay;
	return r;
}

static void thread_gone(struct wall_thread *t)
{
	t->alive = false;
	close(t->fd);
	t->fd = -1;
	if (t->status_fd >= 0)
		close(t->status_fd);
	t->status_fd = -1;
}

/*
 * A thread taken for the program's turns out to be the cprof agent's task
 * (seen while it was being started, before it named itself): no more of
 * its time is accounted, and what was goes at the end (drop_own_samples()).
 */
static void disown(struct wall_profiler *p, struct wall_thread *t)
{
	if (t->own)
		return;
	t->own = true;
	if (t->alive)
		thread_gone(t);
	p->stats.threads--;
}

/*
 * A thread seen for the first time: its first read is its clocks'
 * baseline; one born in the window started from zero at its birth,
 * runnable.
 */
static struct wall_thread *add_thread(struct wall_profiler *p, pid_t tid, uint64_t now)
{
	struct wall_thread *t;
	uint64_t birth = 0;
	int fd = wall_clocks_open(p->opts.pid, tid);
	char buf[64];

	if (fd < 0)
		return NULL;
	if (GROW(p->threads, p->nthreads + 1, p->threads_alloc) < 0 ||
	    u64map_put(&p->by_tid, (uint64_t)tid, p->nthreads + 1) < 0) {
		close(fd);
		return NULL;
	}
	t = &p->threads[p->nthreads++];
	memset(t, 0, sizeof(*t));
	t->tid = tid;
	t->fd = fd;
	t->status_fd = -1;
	t->alive = true;
	t->last_ns = now;
	wall_run_stacks_init(&t->runs);
	count_switches(p, t, 0);
	if (target_thread_name(p->opts.pid, tid, buf, sizeof(buf)) == 0)
		t->name = profile_intern(p->profile, buf);
	p->stats.threads++;
	/* Its name may be the first sign of the agent's task (a first load). */
	if (t->name && agent_tasks_saw_name(&p->agent, t->name) == 0 &&
	    agent_tasks_has(&p->agent, tid)) {
		disown(p, t);
		return t;
	}
	if (p->started && (u64map_get(&p->births, (uint64_t)tid, &birth) ||
			   wall_thread_birth_ns(p->opts.pid, tid, &birth) == 0) &&
	    birth >= p->start_mono) {
		t->last_ns = birth; /* its clocks count from there */
		t->awake = true;
		return t;
	}
	t->fresh = true;
	return t;
}

/* A thread's first read: its clocks count from here, its time from @from. */
static void begin(struct wall_profiler *p, struct wall_thread *t, uint64_t from)
{
	t->fresh = false;
	if (t->next_r < 0) {
		thread_gone(t);
		return;
	}
	t->clk = t->next;
	t->last_ns = from;
	awake_through(t);
	t->began_on_cpu = t->where_known && t->where.on_cpu;
	look_now(p, t);
}

/*
 * @t's clocks for this tick, and where it is when that decides what they
 * lack: when it is awake, or ran, and the interval holds more than they
 * do. The window's last read wants it of every such thread.
 */
static void read_clocks(struct wall_profiler *p, struct wall_thread *t, bool last)
{
	const struct wall_clocks *c = &t->next;
	uint64_t drun, ddelay;
	bool want = t->fresh;

	t->where_known = false;
	t->next_r = wall_clocks_read(t->fd, &t->next);
	t->next_at = now_monotonic_ns();
	if (t->next_r < 0)
		return;
	if (!want && (t->awake || c->runs != t->clk.runs)) {
		drun = c->run_ns - MIN(c->run_ns, t->clk.run_ns);
		ddelay = c->delay_ns - MIN(c->delay_ns, t->clk.delay_ns);
		drun -= MIN(drun, t->ahead_run);
		ddelay -= MIN(ddelay, t->ahead_wait);
		want = last || t->next_at > t->last_ns + drun + ddelay;
	}
	if (!want)
		return;
	if (wall_clocks_read_where(p->opts.pid, t->tid, t->fd, &t->status_fd, &t->next,
				   &t->where) == 0) {
		t->next_at = now_monotonic_ns();
		t->where_known = true;
	} else {
		t->awake = false; /* it may have slept: not known */
	}
}

/*
 * Every thread's clocks first, in one short pass, then the slower work
 * (looks, stacks): cprof may be kept off a CPU or slowed (sanitizers) in
 * that work, and the clocks are still of one instant. The window's last
 * tick (@last) ends every thread's time at that instant, @ret_end: a thread
 * read early in a long tick would otherwise be short of the window by the
 * rest of it (seen: 24-80 ms under ASan on a loaded machine).
 */
static int tick(struct wall_profiler *p, bool last, uint64_t *ret_end)
{
	uint64_t now = now_monotonic_ns(), end;
	pid_t *tids;
	size_t n;
	int r, starting;

	r = target_list_tids(p->opts.pid, &tids, &n);
	if (r < 0)
		return r;
	/* After the listing: a task of the agent's in it is known by now. */
	starting = agent_tasks_refresh(&p->agent, p->started ? 0 : AGENT_TASK_START_WAIT_MS);
	if (starting < 0) {
		free(tids);
		return starting;
	}
	for (size_t i = 0; i < p->nthreads; i++)
		p->threads[i].listed = false;
	for (size_t i = 0; i < n; i++) {
		struct wall_thread *t = thread_of(p, tids[i]);

		if (agent_tasks_has(&p->agent, tids[i])) {
			if (t)
				disown(p, t);
			continue;
		}
		/* A task of the agent's being started may be one of the new:
		 * they wait a tick (their clocks count from birth). */
		if (!t && !(starting && p->started))
			t = add_thread(p, tids[i], now);
		if (t)
			t->listed = true;
	}
	free(tids);
	for (size_t i = 0; i < p->nthreads; i++) {
		struct wall_thread *t = &p->threads[i];

		if (t->alive && t->listed && !t->exited)
			read_clocks(p, t, last);
	}
	end = now_monotonic_ns();
	for (size_t i = 0; i < p->nthreads; i++) {
		struct wall_thread *t = &p->threads[i];

		if (!t->alive || !t->listed)
			continue;
		if (t->exited)
			thread_gone(t);
		else if (t->fresh)
			begin(p, t, p->started ? t->next_at : p->start_mono);
		else if (account(p, t, last ? end : t->next_at) == -ESRCH)
			thread_gone(t);
	}
	/* Not listed any more: exited since the last tick. */
	for (size_t i = 0; i < p->nthreads; i++)
		if (p->threads[i].alive && !p->threads[i].listed && p->started)
			thread_gone(&p->threads[i]);
	p->stats.ticks++;
	if (ret_end)
		*ret_end = end;
	return 0;
}

static int take_tick(struct wall_profiler *p)
{
	uint64_t t0 = now_monotonic_ns(), took;
	int r = tick(p, false, NULL);

	took = now_monotonic_ns() - t0;
	if (!p->switches_decided)
		open_switches(p, t0 + took);
	else
		check_switch_rate(p, t0 + took);
	p->tick_cost = p->tick_cost ? (3 * p->tick_cost + took) / 4 : took;
	/* +-25% at random: a thread whose cycle is a multiple of the tick
	 * would otherwise be seen in the same phase of it every time. */
	p->rng = p->rng * 6364136223846793005ULL + 1442695040888963407ULL;
	p->next_tick = t0 + MAX(p->tick_ns * 3 / 4 + (p->rng >> 33) % (p->tick_ns / 2 + 1),
				p->tick_cost * TICK_DUTY);
	return r;
}

/* ---- the window -------------------------------------------------------- */

int wall_profiler_new(struct wall_profiler **ret, const struct wall_profiler_opts *o, char *err,
		      size_t errlen)
{
	struct wall_profiler *p;
	int r;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->opts = *o;
	u64map_init(&p->by_tid);
	u64map_init(&p->births);
	agent_tasks_init(&p->agent, o->pid);
	p->rng = now_monotonic_ns() ^ (uint64_t)o->pid;
	p->tick_ns = 1000000000ULL / (o->hz ? o->hz : 100);
	p->popts = (struct perf_opts){
		.pid = o->pid,
		.period_ns = p->tick_ns,
		/* Events of the target's own threads make each of its switches
		 * dearer; a CPU's event costs it nothing. */
		.scope = perf_system_scope_allowed() ? PERF_SCOPE_SYSTEM : PERF_SCOPE_THREAD,
		.stack_bytes = STACK_BYTES,
		.ring_pages = PERF_SAMPLE_RING_PAGES(o->hz),
		.task = true,
		/* Samples in system calls carry the call's user stack. */
		.kernel = perf_kernel_samples_allowed(),
	};
	r = profile_new(&p->profile, wall_types, ARRAY_SIZE(wall_types));
	if (r == 0)
		r = profile_begin_process(p->profile, o->pid, "wall", "nanoseconds",
					  (int64_t)p->tick_ns, o->command_line, &p->process_name);
	if (r < 0)
		goto out_free;
	r = symbolizer_share(&p->sym, o->sym, o->pid);
	if (r < 0) {
		snprintf(err, errlen, "cannot read the modules of pid %d: %s", o->pid, strerror(-r));
		goto out_free;
	}
	r = symbolizer_unwinder(p->sym, &p->unw);
	if (r < 0) {
		snprintf(err, errlen, "cannot set up unwinding: %s", strerror(-r));
		goto out_free;
	}
	r = maps_read(o->pid, &p->maps);
	if (r < 0) {
		snprintf(err, errlen, "cannot read the mappings of pid %d: %s", o->pid,
			 strerror(-r));
		goto out_free;
	}
	/* The syscall file and the stack copies need ptrace access (Yama may
	 * allow it only to a debugger's parent): without, time is still
	 * accounted, stackless. */
	{
		struct wall_look look;

		r = wall_look_read(o->pid, o->pid, &look);
		if (r == -EACCES || r == -EPERM)
			p->stats.stacks_refused = r;
	}
	/* Without CPU samples the running time is still counted, stackless. */
	p->stats.perf_per_thread = p->popts.scope == PERF_SCOPE_THREAD;
	r = perf_session_open(&p->perf, &p->popts);
	if (r < 0) {
		p->perf = NULL;
		p->stats.perf_refused = true;
		perf_strerror(r, &p->popts, p->stats.perf_error, sizeof(p->stats.perf_error));
	}
	*ret = p;
	return 0;

out_free:
	wall_profiler_free(p);
	return r;
}

int wall_profiler_start(struct wall_profiler *p)
{
	int r;

	p->profile->time_nanos = (int64_t)now_realtime_ns();
	p->start_mono = now_monotonic_ns();
	p->last_liveness = p->start_mono;
	r = agent_tasks_search(&p->agent, &p->maps, AGENT_TASK_START_WAIT_MS);
	if (r < 0)
		return r;
	r = tick(p, false, NULL); /* the baseline: nothing accounted yet */
	if (r < 0)
		return r;
	p->started = true;
	p->next_tick = now_monotonic_ns() + p->tick_ns;
	if (p->perf) {
		r = perf_session_enable(p->perf);
		if (r < 0)
			return r;
	}
	p->running = true;
	return 0;
}

static void window_end(struct wall_profiler *p)
{
	if (!p->end_mono)
		p->end_mono = now_monotonic_ns();
	p->stats.window_ns = p->end_mono - p->start_mono;
	p->profile->duration_nanos = (int64_t)p->stats.window_ns;
}

int wall_profiler_poll(struct wall_profiler *p, int timeout_ms)
{
	uint64_t now = now_monotonic_ns();
	int wait_ms = 0, r;

	/* Rounded up: a wait of 0 ms would spin until the tick. */
	if (p->next_tick > now)
		wait_ms = (int)MIN((uint64_t)timeout_ms, (p->next_tick - now + 999999) / 1000000);
	if (p->perf) {
		r = perf_session_wait(p->perf, wait_ms);
		if (r < 0)
			return r;
	} else if (wait_ms) {
		struct timespec ts = { wait_ms / 1000, (long)(wait_ms % 1000) * 1000000 };

		nanosleep(&ts, NULL);
	}
	r = drain(p);
	if (r < 0)
		return r;
	now = now_monotonic_ns();
	if (now >= p->next_tick) {
		r = take_tick(p);
		if (r < 0 && r != -ESRCH)
			return r;
	}
	p->stats.window_ns = now - p->start_mono;
	if (now - p->last_liveness >= LIVENESS_NS) {
		p->last_liveness = now;
		if (!target_alive(p->opts.pid)) {
			p->stats.target_exited = true;
			window_end(p);
			return -ESRCH;
		}
	}
	return 0;
}

int wall_profiler_stop(struct wall_profiler *p)
{
	int r = 0;

	/* Samples first, then the last tick: no sample stands for time after
	 * the window's end. */
	if (p->running && p->perf)
		perf_session_disable(p->perf);
	if (p->running && p->switches)
		perf_session_disable(p->switches);
	if (drain(p) < 0)
		r = -EIO;
	if (p->running && !p->stats.target_exited && !p->end_mono) {
		uint64_t end = 0;

		if (tick(p, true, &end) == -ENOMEM)
			r = -ENOMEM;
		p->end_mono = end; /* where the last tick accounted the threads to */
	}
	window_end(p);
	if (!p->run_added)
		take_back_owed(p);
	for (size_t i = 0; i < p->nthreads && !p->run_added; i++)
		if (add_running(p, &p->threads[i]) < 0)
			r = -ENOMEM;
	p->run_added = true;
	p->running = false;
	window_end(p);
	if (!p->stats.target_exited)
		p->stats.target_exited = !target_alive(p->opts.pid);
	return r;
}

const char *wall_split_reason(enum wall_split split)
{
	switch (split) {
	case WALL_SPLIT_EXACT:
		break;
	case WALL_SPLIT_REFUSED:
		return "perf_event_open refused them";
	case WALL_SPLIT_TOO_MANY_THREADS:
		return "an event a thread is too dear above 512 threads";
	case WALL_SPLIT_TOO_MANY_SWITCHES:
		return "the target switches too often for them to be cheap";
	case WALL_SPLIT_LOST:
		return "some were lost";
	}
	return "exact";
}

static int add_comments(struct wall_profiler *p)
{
	char c[512];
	int r = 0;

	if (p->stats.perf_refused) {
		snprintf(c, sizeof(c), "no CPU stacks: perf_event_open refused (%s); running time "
			 "is in [running: not sampled]", p->stats.perf_error);
		r = profile_add_comment(p->profile, c);
	}
	if (r == 0 && p->stats.split != WALL_SPLIT_EXACT) {
		snprintf(c, sizeof(c), "runnable time is split between the stack a thread ran on "
			 "and the one it slept on by estimate, not by the kernel's switch records "
			 "(%s)", wall_split_reason(p->stats.split));
		r = profile_add_comment(p->profile, c);
	}
	if (r == 0 && p->stats.lost) {
		snprintf(c, sizeof(c), "lost %llu perf %s: buffers overflowed",
			 (unsigned long long)p->stats.lost, plural(p->stats.lost, "record", "records"));
		r = profile_add_comment(p->profile, c);
	}
	if (r == 0 && p->stats.by_frame_pointers) {
		unwind_frame_pointer_note(c, sizeof(c), p->stats.by_frame_pointers,
					  p->stats.run_stacks + p->stats.off_stacks);
		r = profile_add_comment(p->profile, c);
	}
	return r;
}

/*
 * The samples of threads found to be the agent's task after they were
 * taken for the program's (disown()) go, and the figures with them.
 */
static int drop_own_samples(struct wall_profiler *p)
{
	struct profile *pr = p->profile;
	bool any = false;

	for (size_t i = 0; i < p->nthreads; i++)
		any |= p->threads[i].own;
	if (!any)
		return 0;
	for (size_t i = 0; i < pr->nsamples; i++) {
		struct profile_sample *s = &pr->samples[i];
		const struct profile_label *tid = label_of(s, "thread_id");
		const struct profile_label *state = label_of(s, "state");
		struct wall_thread *t = tid ? thread_of(p, (pid_t)tid->num) : NULL;
		uint64_t ns = (uint64_t)s->values[1], *figure = &p->stats.off_ns;

		if (!t || !t->own)
			continue;
		if (state && !strcmp(state->str, "running"))
			figure = &p->stats.running_ns;
		else if (state && !strcmp(state->str, "runnable"))
			figure = &p->stats.runnable_ns;
		*figure -= MIN(*figure, ns);
		p->stats.accounted_ns -= MIN(p->stats.accounted_ns, ns);
		s->values[0] = s->values[1] = 0;
	}
	return profile_drop_zero_samples(pr);
}

int wall_profiler_finish(struct wall_profiler *p, struct profile **ret)
{
	uint64_t t0 = now_monotonic_ns();
	int r;

	r = drop_own_samples(p);
	if (r == 0)
		r = agent_tasks_note(&p->agent, true, p->profile);
	if (r == 0)
		r = add_comments(p);
	if (r < 0)
		return r;
	symbolizer_refresh(p->sym);
	r = symbolizer_fill_profile(p->sym, p->profile);
	if (r < 0)
		return r;
	p->stats.symbolize_ns = now_monotonic_ns() - t0;
	*ret = p->profile;
	p->profile = NULL;
	return 0;
}

const struct wall_profiler_stats *wall_profiler_stats(const struct wall_profiler *p)
{
	return &p->stats;
}

void wall_profiler_free(struct wall_profiler *p)
{
	if (!p)
		return;
	perf_session_free(p->perf);
	perf_session_free(p->switches);
	for (size_t i = 0; i < p->nthreads; i++) {
		if (p->threads[i].fd >= 0)
			close(p->threads[i].fd);
		if (p->threads[i].status_fd >= 0)
			close(p->threads[i].status_fd);
		wall_off_stack_release(&p->threads[i].off);
		free(p->threads[i].run_pcs);
		wall_run_stacks_release(&p->threads[i].runs);
		wall_waits_release(&p->threads[i].waits);
	}
	free(p->threads);
	u64map_release(&p->by_tid);
	u64map_release(&p->births);
	agent_tasks_release(&p->agent);
	maps_release(&p->maps);
	symbolizer_unref(p->sym);
	profile_free(p->profile);
	free(p);
}
