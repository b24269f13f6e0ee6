/*
 * A thread's time into the profile: each interval its clocks tell, split
 * into running, waiting for a CPU and off it, on the stacks it was seen on;
 * its run time divided among its CPU samples' stacks at the end, and what
 * was counted twice taken back, so that its time adds up to its life.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "target/target.h"
#include "threads/threads.h"
#include "wall/wall-private.h"

/* Addresses that are never a PC: the frames of time without a stack. */
#define ADDR_OFF_UNSEEN 0
#define ADDR_RUN_UNSAMPLED 1

static const char *name_of(struct wall_profiler *p, pid_t tid)
{
	struct wall_thread *t = wall_thread_of(p, tid);
	char buf[64];

	if (t && t->name)
		return t->name;
	if (target_thread_name(p->opts.pid, tid, buf, sizeof(buf)) < 0)
		return p->s.process_name;
	return profile_intern(p->s.profile, buf);
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

	return profile_named_location(p->s.profile, addr, names[addr], ret);
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
			r = profile_location_for_address(p->s.profile, pcs[i], &p->locs[i]);
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
	return profile_add_sample(p->s.profile, p->locs, n, values, labels, nlabels);
}

static int add_time(struct wall_profiler *p, pid_t tid, const uint64_t *pcs, size_t n,
		    uint64_t addr, const char *state, int64_t syscall, uint64_t ns)
{
	return add_samples(p, tid, pcs, n, addr, state, syscall, 1, ns);
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
void wall_count_switches(struct wall_profiler *p, struct wall_thread *t, uint64_t ddelay)
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
int wall_add_running(struct wall_profiler *p, struct wall_thread *t)
{
	const struct wall_run_stacks *rs = &t->runs;
	bool scaled = p->s.popts.scope == PERF_SCOPE_SYSTEM || rs->period_ns > t->run_ns;
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

/* The thread a sample of time waiting for a CPU belongs to, or NULL. */
static struct wall_thread *waiter_of(struct wall_profiler *p, const struct profile_sample *s)
{
	const struct profile_label *tid = profile_sample_label(s, "thread_id");
	const struct profile_label *state = profile_sample_label(s, "state");
	struct wall_thread *t;

	if (!tid || !state || strcmp(state->str, "runnable"))
		return NULL;
	t = wall_thread_of(p, (pid_t)tid->num);
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
void wall_take_back_owed(struct wall_profiler *p)
{
	struct profile *pr = p->s.profile;
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
int wall_add_final(struct wall_profiler *p, struct wall_thread *t, uint64_t end)
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
bool wall_awake_through(struct wall_thread *t)
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
int wall_account(struct wall_profiler *p, struct wall_thread *t, uint64_t now)
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
		wall_count_switches(p, t, ddelay);
	wall_waits_settle(&t->waits);
	/* Given before, as the thread's state then: in the clocks now. */
	paid = MIN(t->ahead_run, drun);
	t->ahead_run -= paid;
	drun -= paid;
	paid = MIN(t->ahead_wait, ddelay);
	t->ahead_wait -= paid;
	ddelay -= paid;
	awake = wall_awake_through(t);
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
		wall_look_now(p, t);
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
