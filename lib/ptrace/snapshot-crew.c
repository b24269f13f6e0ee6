/*
 * The snapshot's crew: tracer threads, one per cpu we may run on (up to
 * four), started before the pause, each given its share of the threads;
 * the first lists them and takes the last share.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "ptrace/ptrace.h"
#include "ptrace/snapshot-private.h"
#include "target/target.h"
#include "util/util.h"

#define MIN_SHARE 4

/* Run the pause at real-time priority where allowed: a tracer then waits
 * for no other thread of the machine. It ends with the tracer thread. */
void snapshot_raise_priority(void)
{
	struct sched_param sp = { .sched_priority = 1 };

	pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
}

/* A tracer other than the first: the word to begin, its share, then the
 * word to let go. */
static void *helper_main(void *arg)
{
	struct tracer *t = arg;
	struct crew *c = t->crew;

	snapshot_raise_priority();
	pthread_mutex_lock(&c->lock);
	while (!c->go)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
	for (size_t i = t->lo; i < t->hi; i++)
		snapshot_seize_thread(t, i);
	snapshot_wait_for_stops(t);
	pthread_mutex_lock(&c->lock);
	c->helpers_stopped++;
	pthread_cond_broadcast(&c->cond);
	while (!c->release)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
	snapshot_detach_share(t);
	/* Returning ends this thread: the kernel detaches whatever is left. */
	return NULL;
}

/* How many tracers for @n threads: one per cpu we may run on, within limits. */
static unsigned tracers_for(const struct crew *c, size_t n)
{
	unsigned k = (unsigned)(n / MIN_SHARE), most = MAX_TRACERS;
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && (unsigned)CPU_COUNT(&set) < most)
		most = (unsigned)CPU_COUNT(&set);
	if (c->opts->tracers && c->opts->tracers < most)
		most = c->opts->tracers;
	if (k > most)
		k = most;
	return k ? k : 1;
}

/*
 * Lists the threads, starts the helpers (thread creation is slow: before
 * the pause, they then wait for the word), shares the threads out between
 * the tracers that started, the last share the first tracer's, and gives
 * the word: every tracer seizes its share at once.
 */
int snapshot_start_crew(struct crew *c)
{
	struct ptrace_snapshot *s = c->snap;
	struct tracer *first = &c->tracers[0];
	unsigned want;
	size_t n, share, lo = 0, kept = 0;
	pid_t *tids;
	int r;

	r = target_list_tids(s->pid, &tids, &n);
	s->listings++;
	if (r < 0)
		return r;
	r = snapshot_reserve_threads(c, n + 1);
	if (r < 0)
		goto out_free;
	for (size_t i = 0; i < n; i++) {
		if (snapshot_skipped(c, tids[i]))
			s->skipped++;
		else
			tids[kept++] = tids[i];
	}
	n = kept;
	snapshot_stack_pool_make(c, n + n / 8 + 16);
	for (size_t i = 0; i < n; i++)
		snapshot_record_thread(c, tids[i]);
	want = tracers_for(c, n);
	while (c->ntracers < want) {
		struct tracer *h = &c->tracers[c->ntracers];

		*h = (struct tracer){ .crew = c };
		if (pthread_create(&h->thread, NULL, helper_main, h) != 0)
			break;
		c->ntracers++;
	}
	share = (n + c->ntracers - 1) / c->ntracers;
	for (unsigned k = 1; k < c->ntracers; k++) {
		c->tracers[k].lo = lo;
		c->tracers[k].hi = lo + share;
		lo += share;
	}
	first->lo = lo;
	first->hi = n;
	pthread_mutex_lock(&c->lock);
	c->go = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	for (size_t i = first->lo; i < first->hi; i++)
		snapshot_seize_thread(first, i);
out_free:
	free(tids);
	return r;
}

/* Waits until every helper holds its share stopped (or gave up on it). */
void snapshot_wait_for_helpers(struct crew *c)
{
	pthread_mutex_lock(&c->lock);
	while (c->helpers_stopped < c->ntracers - 1)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
}

/* Lets every share go, and ends the helpers. */
void snapshot_release_crew(struct crew *c)
{
	struct ptrace_snapshot *s = c->snap;

	pthread_mutex_lock(&c->lock);
	c->go = true; /* helpers started before an error wait for it */
	c->release = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	snapshot_detach_share(&c->tracers[0]);
	for (unsigned k = 1; k < c->ntracers; k++)
		pthread_join(c->tracers[k].thread, NULL);
	for (unsigned k = 0; k < c->ntracers; k++) {
		const struct tracer *t = &c->tracers[k];

		if (t->first_interrupt_ns &&
		    (!s->first_interrupt_ns || t->first_interrupt_ns < s->first_interrupt_ns))
			s->first_interrupt_ns = t->first_interrupt_ns;
		if (t->last_detach_ns > s->last_detach_ns)
			s->last_detach_ns = t->last_detach_ns;
	}
}
