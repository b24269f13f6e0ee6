#include "cpu/thread-clocks.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "target/target.h"

/*
 * How often every thread's clock is read: what a thread that ends loses is
 * at most its time since the last read, which the process's clock still
 * holds. A read takes this share of cprof's time at most: more threads,
 * rarer reads.
 */
#define READ_NS (100ULL * 1000 * 1000)
#define READ_DUTY 10

void cpu_clocks_init(struct cpu_clocks *c, pid_t pid)
{
	memset(c, 0, sizeof(*c));
	c->pid = pid;
	u64map_init(&c->by_tid);
}

static struct cpu_thread *thread_of(struct cpu_clocks *c, pid_t tid)
{
	uint64_t v;

	return u64map_get(&c->by_tid, (uint64_t)tid, &v) ? &c->v[v - 1] : NULL;
}

/* One read of @t's clock; the thread is gone for good when it fails. */
static void read_clock(struct cpu_thread *t)
{
	struct target_clock clk;
	uint64_t now = now_monotonic_ns();

	if (t->fd < 0)
		return;
	if (target_clock_read(t->fd, &clk) < 0) {
		close(t->fd);
		t->fd = -1;
		return;
	}
	t->last_ns = clk.run_ns;
	t->last_read = now;
	t->tail_ns = 0;
}

/*
 * A thread seen for the first time: at the window's start its clock is the
 * baseline; one first seen later was born in the window and its clock
 * started there, from zero.
 */
static int add_thread(struct cpu_clocks *c, pid_t tid, struct cpu_thread **ret)
{
	struct cpu_thread *t;
	/* Unknown after the end: it ended before, it has nothing to read. */
	int fd = c->stopped ? -ESRCH : target_clock_open(c->pid, tid);

	if (fd == -EACCES || fd == -EPERM)
		return fd;
	if (GROW(c->v, c->n + 1, c->alloc) < 0 ||
	    u64map_put(&c->by_tid, (uint64_t)tid, c->n + 1) < 0) {
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	t = &c->v[c->n++];
	*t = (struct cpu_thread){ .tid = tid, .fd = fd < 0 ? -1 : fd };
	if (!c->opening)
		read_clock(t);
	if (!c->started)
		t->base_ns = t->last_ns;
	*ret = t;
	return 0;
}

/* Every thread listed now that is not known yet. */
static int add_listed(struct cpu_clocks *c)
{
	struct cpu_thread *t;
	pid_t *tids;
	size_t n;
	int r;

	r = target_list_tids(c->pid, &tids, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n && r >= 0; i++)
		if (!thread_of(c, tids[i]))
			r = add_thread(c, tids[i], &t);
	free(tids);
	return r;
}

static void read_all(struct cpu_clocks *c);

int cpu_clocks_open(struct cpu_clocks *c)
{
	int r;

	c->opening = true;
	r = add_listed(c);
	c->opening = false;
	if (r < 0)
		c->refused = r;
	return r;
}

int cpu_clocks_start(struct cpu_clocks *c)
{
	int r;

	if (c->refused)
		return c->refused;
	r = add_listed(c); /* born since they were opened */
	if (r < 0) {
		c->refused = r;
		return r;
	}
	c->started = true;
	return 0;
}

void cpu_clocks_edge(struct cpu_clocks *c)
{
	if (c->refused || !c->started)
		return;
	read_all(c);
	for (size_t i = 0; i < c->n; i++) {
		if (c->stopped)
			c->v[i].alive = c->v[i].fd >= 0;
		else
			c->v[i].base_ns = c->v[i].last_ns;
	}
	if (!c->stopped)
		c->next_read = now_monotonic_ns() + READ_NS;
}

int cpu_clocks_sample(struct cpu_clocks *c, pid_t tid, uint64_t time, uint64_t period)
{
	struct cpu_thread *t;
	int r;

	if (c->refused || !c->started)
		return 0;
	t = thread_of(c, tid);
	if (!t) {
		r = add_thread(c, tid, &t);
		if (r < 0) {
			c->refused = r;
			return r == -ENOMEM ? r : 0;
		}
	}
	if (c->process_read && time >= c->process_read)
		c->after_process_ns += period;
	t->sampled_ns += period;
	if (!t->last_read || time >= t->last_read)
		t->tail_ns += period;
	return 0;
}

void cpu_clocks_process_read(struct cpu_clocks *c, uint64_t now)
{
	c->process_read = now;
	c->after_process_ns = 0;
}

static void read_all(struct cpu_clocks *c)
{
	for (size_t i = 0; i < c->n; i++)
		read_clock(&c->v[i]);
}

void cpu_clocks_tick(struct cpu_clocks *c, uint64_t now)
{
	uint64_t took;

	if (c->refused || !c->started || now < c->next_read)
		return;
	read_all(c);
	took = now_monotonic_ns() - now;
	c->read_cost = c->read_cost ? (3 * c->read_cost + took) / 4 : took;
	c->next_read = now + MAX(READ_NS, c->read_cost * READ_DUTY);
}

int cpu_clocks_stop(struct cpu_clocks *c)
{
	int r = 0;

	if (!c->refused && c->started) {
		/* Born in the window and never sampled: still its CPU. */
		r = add_listed(c);
		if (r == -ESRCH) /* the process is gone: every thread ended */
			r = 0;
		if (r < 0)
			c->refused = r;
	}
	c->stopped = true;
	return r == -ENOMEM ? r : 0;
}

void cpu_clocks_forget(struct cpu_clocks *c, pid_t tid)
{
	struct cpu_thread *t = thread_of(c, tid);

	if (t)
		t->forgotten = true;
}

static uint64_t clock_delta(const struct cpu_thread *t)
{
	if (!t->last_read)
		return 0;
	return t->last_ns > t->base_ns ? t->last_ns - t->base_ns : 0;
}

/*
 * The threads that ended had the process's clock less the others' (when it
 * is known): what their last reads did not see is divided among them by
 * their samples since, or left to ->ended_ns when none has one. Without the
 * process's clock, those samples stand for their periods.
 */
static void settle_ended(struct cpu_clocks *c, uint64_t process_ns, uint64_t alive_ns,
			 struct cpu_clocks_totals *ret)
{
	uint64_t seen = 0, tails = 0, left = 0, share;

	for (size_t i = 0; i < c->n; i++) {
		if (c->v[i].alive || c->v[i].forgotten)
			continue;
		seen += clock_delta(&c->v[i]);
		tails += c->v[i].tail_ns;
		ret->ended_threads++;
	}
	if (process_ns)
		process_ns += c->after_process_ns;
	if (process_ns && process_ns > alive_ns + seen)
		left = process_ns - alive_ns - seen;
	else if (!process_ns)
		left = tails;
	if (!tails)
		ret->ended_ns += left;
	for (size_t i = 0; i < c->n; i++) {
		struct cpu_thread *t = &c->v[i];

		if (t->alive || t->forgotten)
			continue;
		share = tails ? (uint64_t)((unsigned __int128)left * t->tail_ns / tails) : 0;
		t->own_ns = clock_delta(t) + share;
		if (!t->sampled_ns)
			ret->ended_ns += t->own_ns;
	}
}

void cpu_clocks_settle(struct cpu_clocks *c, uint64_t process_ns, struct cpu_clocks_totals *ret)
{
	uint64_t alive_ns = 0;

	memset(ret, 0, sizeof(*ret));
	if (c->refused)
		return;
	for (size_t i = 0; i < c->n; i++) {
		struct cpu_thread *t = &c->v[i];

		if (!t->alive || t->forgotten)
			continue;
		t->own_ns = clock_delta(t);
		alive_ns += t->own_ns;
		if (!t->sampled_ns && t->own_ns) {
			ret->quiet_ns += t->own_ns;
			ret->quiet_threads++;
		}
	}
	settle_ended(c, process_ns, alive_ns, ret);
	for (size_t i = 0; i < c->n; i++) {
		if (c->v[i].forgotten)
			continue;
		ret->sampled_ns += c->v[i].sampled_ns;
		if (c->v[i].sampled_ns)
			ret->weighed_ns += c->v[i].own_ns;
	}
}

uint64_t cpu_clocks_weigh(struct cpu_clocks *c, pid_t tid, uint64_t value)
{
	struct cpu_thread *t = c->refused ? NULL : thread_of(c, tid);
	uint64_t upto;

	if (!t || !t->sampled_ns || t->forgotten)
		return value;
	/* Rounded on the running sum: the parts add up to ->own_ns. */
	t->cum_ns += value;
	upto = (uint64_t)((unsigned __int128)t->own_ns * MIN(t->cum_ns, t->sampled_ns) /
			  t->sampled_ns);
	value = upto - MIN(upto, t->given_ns);
	t->given_ns = MAX(upto, t->given_ns);
	return value;
}

void cpu_clocks_release(struct cpu_clocks *c)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->v[i].fd >= 0)
			close(c->v[i].fd);
	free(c->v);
	u64map_release(&c->by_tid);
	cpu_clocks_init(c, c->pid);
}
