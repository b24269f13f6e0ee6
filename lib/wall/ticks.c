/*
 * The window's ticks: every thread of the target listed, its clocks read
 * at one instant, and each interval accounted; threads seen for the first
 * time begin there, those gone end, and a sleeping thread's stack is taken.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "target/target.h"
#include "wall/wall-private.h"

/* A tick may take this share of cprof's time at most: more threads, rarer
 * ticks (every interval is still accounted in full). */
#define TICK_DUTY 10

struct wall_thread *wall_thread_of(struct wall_profiler *p, pid_t tid)
{
	uint64_t v;

	return u64map_get(&p->by_tid, (uint64_t)tid, &v) ? &p->threads[v - 1] : NULL;
}

/*
 * A stack for the thread asleep now. A thread stack mapped since the maps
 * were read is found by reading them again, once.
 */
static void take_off_stack(struct wall_profiler *p, struct wall_thread *t,
			   const struct wall_look *look)
{
	uint64_t bytes = 0;
	int r;

	r = wall_take_off_stack(p->opts.pid, t->tid, look, &p->maps, p->s.unw, &t->off, &bytes);
	if (r == -ENOENT) {
		maps_release(&p->maps);
		if (maps_read(p->opts.pid, &p->maps) == 0)
			r = wall_take_off_stack(p->opts.pid, t->tid, look, &p->maps, p->s.unw,
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
void wall_look_now(struct wall_profiler *p, struct wall_thread *t)
{
	struct wall_look look;

	t->looked = true;
	if (wall_look_read(p->opts.pid, t->tid, &look) == 0 && look.state != 'R' && look.sp)
		take_off_stack(p, t, &look);
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
void wall_thread_disown(struct wall_profiler *p, struct wall_thread *t)
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
struct wall_thread *wall_thread_add(struct wall_profiler *p, pid_t tid, uint64_t now)
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
	wall_count_switches(p, t, 0);
	if (target_thread_name(p->opts.pid, tid, buf, sizeof(buf)) == 0)
		t->name = profile_intern(p->s.profile, buf);
	p->stats.threads++;
	/* Its name may be the first sign of the agent's task (a first load). */
	if (t->name && agent_tasks_saw_name(&p->s.agent, t->name) == 0 &&
	    agent_tasks_has(&p->s.agent, tid)) {
		wall_thread_disown(p, t);
		return t;
	}
	if (p->started && (u64map_get(&p->births, (uint64_t)tid, &birth) ||
			   wall_thread_birth_ns(p->opts.pid, tid, &birth) == 0) &&
	    birth >= p->s.win.start_ns) {
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
	wall_awake_through(t);
	t->began_on_cpu = t->where_known && t->where.on_cpu;
	wall_look_now(p, t);
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
int wall_tick(struct wall_profiler *p, bool last, uint64_t *ret_end)
{
	uint64_t now = now_monotonic_ns(), end;
	pid_t *tids;
	size_t n;
	int r, starting;

	r = target_list_tids(p->opts.pid, &tids, &n);
	if (r < 0)
		return r;
	/* After the listing: a task of the agent's in it is known by now. */
	starting = agent_tasks_refresh(&p->s.agent, p->started ? 0 : AGENT_TASK_START_WAIT_MS);
	if (starting < 0) {
		free(tids);
		return starting;
	}
	for (size_t i = 0; i < p->nthreads; i++)
		p->threads[i].listed = false;
	for (size_t i = 0; i < n; i++) {
		struct wall_thread *t = wall_thread_of(p, tids[i]);

		if (agent_tasks_has(&p->s.agent, tids[i])) {
			if (t)
				wall_thread_disown(p, t);
			continue;
		}
		/* A task of the agent's being started may be one of the new:
		 * they wait a tick (their clocks count from birth). */
		if (!t && !(starting && p->started))
			t = wall_thread_add(p, tids[i], now);
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
			begin(p, t, p->started ? t->next_at : p->s.win.start_ns);
		else if (wall_account(p, t, last ? end : t->next_at) == -ESRCH)
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

int wall_take_tick(struct wall_profiler *p)
{
	uint64_t t0 = now_monotonic_ns(), took;
	int r = wall_tick(p, false, NULL);

	took = now_monotonic_ns() - t0;
	if (!p->switches_decided)
		wall_switches_open(p, t0 + took);
	else
		wall_switches_check(p, t0 + took);
	p->tick_cost = p->tick_cost ? (3 * p->tick_cost + took) / 4 : took;
	/* +-25% at random: a thread whose cycle is a multiple of the tick
	 * would otherwise be seen in the same phase of it every time. */
	p->s.rng = p->s.rng * 6364136223846793005ULL + 1442695040888963407ULL;
	p->next_tick = t0 + MAX(p->tick_ns * 3 / 4 + (p->s.rng >> 33) % (p->tick_ns / 2 + 1),
				p->tick_cost * TICK_DUTY);
	return r;
}
