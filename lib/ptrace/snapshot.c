/*
 * The snapshot's tracers at work: every thread seized and interrupted, its
 * stop waited for (or its exit, or its uninterruptible sleep given up on),
 * copied, and let go once every thread of every share is stopped; threads
 * born meanwhile are listed again and taken too.
 */
#include "ptrace/ptrace.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ptrace/snapshot-private.h"
#include "target/target.h"
#include "util/util.h"

/* The pause is never longer than this many times opts->stop_timeout_ms. */
#define STALLS_AT_MOST 10
/* Give up listing after this many rounds: a fork bomb of threads must not
 * keep the others stopped. */
#define MAX_LISTINGS 64
/*
 * The longest the tracer sleeps between two looks. Its waking up (at
 * SCHED_FIFO) is a scheduling point on its cpu: a thread we woke to take its
 * stop may otherwise wait behind a busy thread until that one's time slice
 * ends, milliseconds later.
 */
#define NAP_NS (50ULL * 1000)
/* About the cpu time a thread takes from PTRACE_INTERRUPT to its stop. */
#define STOP_CPU_NS (3ULL * 1000)
/* How long the stops may stall before we look at the state of the threads
 * not stopped yet: a zombie or a thread in uninterruptible sleep. */
#define STALL_NS (2ULL * 1000 * 1000)
/* How long a thread in uninterruptible sleep may keep the others stopped. */
#define D_STATE_GRACE_NS (5ULL * 1000 * 1000)

static size_t tid_slot(const struct tid_index *x, pid_t tid)
{
	return ((uint32_t)tid * 2654435761u) & (x->size - 1);
}

static void tid_index_put(struct tid_index *x, pid_t tid, size_t i)
{
	size_t k = tid_slot(x, tid);

	while (x->slots[k])
		k = (k + 1) & (x->size - 1);
	x->slots[k] = (uint32_t)i + 1;
}

/* Makes room for @n threads: rehashes the @s->nthreads known so far. */
static int tid_index_reserve(struct tid_index *x, const struct ptrace_snapshot *s, size_t n)
{
	size_t size = x->size ? x->size : 64;
	uint32_t *slots;

	if (n * 2 <= x->size)
		return 0;
	while (size < n * 2)
		size *= 2;
	slots = calloc(size, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	free(x->slots);
	x->slots = slots;
	x->size = size;
	for (size_t i = 0; i < s->nthreads; i++)
		tid_index_put(x, s->threads[i].tid, i);
	return 0;
}

/* The index of thread @tid in @s->threads, -1 if it is not there. */
static ssize_t find_thread(const struct crew *c, pid_t tid)
{
	const struct tid_index *x = &c->index;

	if (!x->size)
		return -1;
	for (size_t k = tid_slot(x, tid); x->slots[k]; k = (k + 1) & (x->size - 1))
		if (c->snap->threads[x->slots[k] - 1].tid == tid)
			return (ssize_t)x->slots[k] - 1;
	return -1;
}

static void mark_reported(struct tracer *t, size_t i)
{
	if (t->crew->reported[i])
		return;
	t->crew->reported[i] = true;
	t->unreported--;
	t->progress_ns = now_monotonic_ns();
	t->slept_ns = 0;
}

/*
 * Room for @n threads in every per-thread array. Made before the tracers
 * start for the first listing, so that no array moves under them; later
 * only the first tracer grows them, while the others wait.
 */
int snapshot_reserve_threads(struct crew *c, size_t n)
{
	struct ptrace_snapshot *s = c->snap;
	int r;

	r = GROW(s->threads, n, s->alloc);
	if (r < 0)
		return r;
	r = GROW(c->reported, n, c->reported_alloc);
	if (r < 0)
		return r;
	return tid_index_reserve(&c->index, s, n);
}

/* Adds @tid to the snapshot, not seized yet (room reserved). */
size_t snapshot_record_thread(struct crew *c, pid_t tid)
{
	struct ptrace_snapshot *s = c->snap;
	struct ptrace_thread *th = &s->threads[s->nthreads];

	memset(th, 0, sizeof(*th));
	th->tid = tid;
	th->syscall = -1;
	th->result = PTRACE_THREAD_NOT_STOPPED;
	c->reported[s->nthreads] = false;
	tid_index_put(&c->index, tid, s->nthreads);
	return s->nthreads++;
}

void snapshot_seize_thread(struct tracer *t, size_t i)
{
	struct ptrace_thread *th = &t->crew->snap->threads[i];

	t->unreported++;
	/* SEIZE sends no SIGSTOP; INTERRUPT asks for a trap the tracee takes
	 * as soon as it can, reported as PTRACE_EVENT_STOP. */
	if (ptrace(PTRACE_SEIZE, th->tid, 0, 0) < 0) {
		th->result = errno == ESRCH ? PTRACE_THREAD_EXITED : PTRACE_THREAD_REFUSED;
		th->error = -errno;
		mark_reported(t, i);
		return;
	}
	if (!t->first_interrupt_ns)
		t->first_interrupt_ns = now_monotonic_ns();
	if (ptrace(PTRACE_INTERRUPT, th->tid, 0, 0) < 0) {
		/* Only ESRCH is possible here: it died between the two calls. */
		th->result = PTRACE_THREAD_EXITED;
		mark_reported(t, i);
	}
}

bool snapshot_skipped(const struct crew *c, pid_t tid)
{
	return c->opts->skip && c->opts->skip(c->opts->skip_arg, tid);
}

/* The first tracer: seizes every thread not seen yet, as its own. Returns
 * how many were new. */
static int seize_new_threads(struct tracer *t)
{
	struct crew *c = t->crew;
	pid_t *tids;
	size_t n;
	int r, added = 0;

	r = target_list_tids(c->snap->pid, &tids, &n);
	c->snap->listings++;
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		if (find_thread(c, tids[i]) >= 0 || snapshot_skipped(c, tids[i]))
			continue;
		r = snapshot_reserve_threads(c, c->snap->nthreads + 1);
		if (r < 0)
			break;
		snapshot_seize_thread(t, snapshot_record_thread(c, tids[i]));
		t->hi = c->snap->nthreads;
		added++;
	}
	free(tids);
	return r < 0 ? r : added;
}

static void classify_stop(struct ptrace_thread *th, int status)
{
	if (WIFEXITED(status) || WIFSIGNALED(status)) {
		th->result = PTRACE_THREAD_EXITED;
		return;
	}
	if (!WIFSTOPPED(status))
		return;
	th->result = PTRACE_THREAD_STOPPED;
	th->stopped_ns = now_monotonic_ns();
	if (status >> 16 == PTRACE_EVENT_STOP) {
		/* Ours, or a group-stop (SIGSTOP & co) that the process was in. */
		int sig = WSTOPSIG(status);

		th->group_stopped = sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN ||
				    sig == SIGTTOU;
		return;
	}
	/* A signal-delivery stop: the signal must be handed back at detach. */
	th->pending_signal = WSTOPSIG(status);
}

/*
 * A thread that exited but cannot be reaped yet (a thread-group leader that
 * called pthread_exit stays a zombie while others run) never reports a stop:
 * look at its state rather than wait for the deadline. Nor does a thread in
 * uninterruptible sleep until it wakes: waiting for it would keep every
 * other thread stopped for as long as it sleeps, so after a short
 * grace it is given up; the kernel lets it go when the tracer thread ends.
 */
static void check_unstoppable(struct tracer *t)
{
	struct ptrace_snapshot *s = t->crew->snap;
	bool grace_over = now_monotonic_ns() - t->first_interrupt_ns >= D_STATE_GRACE_NS;

	for (size_t i = t->lo; i < t->hi; i++) {
		char state;

		if (t->crew->reported[i])
			continue;
		if (target_thread_state(s->pid, s->threads[i].tid, &state) < 0 ||
		    state == 'Z' || state == 'X') {
			mark_reported(t, i);
			s->threads[i].result = PTRACE_THREAD_EXITED;
		} else if (state == 'D' && grace_over) {
			mark_reported(t, i);
			s->threads[i].result = PTRACE_THREAD_NOT_STOPPED;
		}
	}
}

/*
 * Thread @i reported @status (or @gone: it was reaped by nobody we know).
 * Each thread is copied as soon as it is seen stopped: the copies then cost
 * no pause of their own, they fill time spent waiting for the slowest.
 */
static void take_report(struct tracer *t, size_t i, int status, bool gone)
{
	struct ptrace_thread *th = &t->crew->snap->threads[i];

	mark_reported(t, i);
	if (gone)
		th->result = PTRACE_THREAD_EXITED;
	else
		classify_stop(th, status);
	if (th->result == PTRACE_THREAD_STOPPED) {
		uint64_t start = now_monotonic_ns();

		snapshot_copy_thread(t, th);
		t->copy_ns += now_monotonic_ns() - start;
	}
}

/*
 * Looks at every thread of the share still awaited, one waitid(P_PID)
 * each: the kernel finds that tid directly, where waitid(P_ALL) would walk
 * every tracee, stops already collected included, on every call.
 */
static void poll_threads(struct tracer *t)
{
	struct ptrace_snapshot *s = t->crew->snap;

	for (size_t i = t->lo; i < t->hi && t->unreported; i++) {
		int status;
		pid_t w;

		if (t->crew->reported[i])
			continue;
		w = ptrace_peek_stop(s->threads[i].tid, &status);
		if (w != 0) /* w < 0: ECHILD, gone and reaped by nobody we know */
			take_report(t, i, status, w < 0);
	}
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL) };

	nanosleep(&ts, NULL);
}

/*
 * Sleeps until a tracee reports (every ptrace stop and exit sends the
 * tracer's process SIGCHLD, blocked in every tracer and in the caller) or
 * @until. With several tracers, the signal wakes one of them: the others
 * look again after their nap.
 * Sleep, don't spin: the threads we interrupted need a cpu to reach their
 * stop, and a tracer at SCHED_FIFO that polls keeps its cpu from them.
 */
static void sleep_until_report(uint64_t until)
{
	uint64_t now = now_monotonic_ns(), left = until > now ? until - now : 0;
	struct timespec ts = { (time_t)(left / 1000000000ULL), (long)(left % 1000000000ULL) };
	sigset_t chld;

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigtimedwait(&chld, NULL, &ts);
}

/*
 * Collects the stops of @t's share until every thread reported, the stops
 * stalled for the crew's stall_ns (none came: the rest cannot stop, or not
 * soon; those are given up), or the deadline passed. Thousands of threads on
 * a busy machine can take seconds to stop, each in its turn on a cpu: as
 * long as they do, they are waited for. A round looks at every awaited
 * thread, then sleeps: while many are awaited, for about the cpu time they
 * need to stop (a tracer at SCHED_FIFO keeps its cpu from the threads it
 * woke onto it, and woken by each first report it would let them have the
 * cpu one at a time), else until a report comes; in both cases for at least four
 * times as long as the round's looking took: each stop sends a SIGCHLD, and
 * a round per stop would cost time quadratic in the number of threads, and
 * the cpu the others need to reach their stop (looking takes the lock their
 * stops take, sighand->siglock). Reading the state of every awaited thread
 * in /proc (check_unstoppable()) costs more than a round: it waits until the
 * stops have stalled (a round found none, and none came while the tracer
 * slept for a while: time it spent looking, at SCHED_FIFO, may have kept
 * them from their cpu).
 */
void snapshot_wait_for_stops(struct tracer *t)
{
	uint64_t stall_ns = t->crew->stall_ns, deadline = t->crew->deadline;

	t->progress_ns = now_monotonic_ns();
	t->slept_ns = 0;
	for (;;) {
		uint64_t start = now_monotonic_ns(), copied = t->copy_ns, looked, now, wake, need,
			 asleep;
		size_t awaited = t->unreported;

		poll_threads(t);
		now = now_monotonic_ns();
		looked = now - start - (t->copy_ns - copied);
		if (!t->unreported || now >= deadline || now - t->progress_ns >= stall_ns)
			return;
		if (t->unreported == awaited && t->slept_ns >= STALL_NS) {
			check_unstoppable(t);
			t->progress_ns = now_monotonic_ns();
			t->slept_ns = 0;
			if (!t->unreported)
				return;
		}
		asleep = now;
		need = t->unreported * STOP_CPU_NS;
		if (need > NAP_NS) {
			/* Many to stop: they need our cpu (most were woken
			 * onto it, behind us) for about that long, and the
			 * report of the first would wake us at once. */
			wake = now + (need < STALL_NS ? need : STALL_NS);
			sleep_ns((wake < deadline ? wake : deadline) - now);
		} else {
			wake = now + NAP_NS;
			sleep_until_report(wake < deadline ? wake : deadline);
		}
		now = now_monotonic_ns();
		if (now - start < 4 * looked)
			sleep_ns(4 * looked - (now - start));
		t->slept_ns += now_monotonic_ns() - asleep;
	}
}

/* Lets @t's share go. */
void snapshot_detach_share(struct tracer *t)
{
	struct ptrace_snapshot *s = t->crew->snap;

	for (size_t i = t->lo; i < t->hi; i++) {
		struct ptrace_thread *th = &s->threads[i];

		if (th->result != PTRACE_THREAD_STOPPED)
			continue;
		/* ESRCH here means it was killed meanwhile: nothing to undo. */
		ptrace(PTRACE_DETACH, th->tid, 0, (void *)(uintptr_t)th->pending_signal);
	}
	t->last_detach_ns = now_monotonic_ns();
}

/*
 * True if the process has as many threads as we hold stopped and left to
 * the caller: then it has
 * none we do not know (every one we hold is one of its threads), and the
 * listing of /proc/PID/task, long at thousands of threads, can be spared.
 * Any other count, a thread in uninterruptible sleep or a zombie leader
 * say, leads to the listing.
 */
static bool all_known_stopped(const struct ptrace_snapshot *s)
{
	char path[64], buf[4096];
	size_t stopped = 0;
	const char *p;

	for (size_t i = 0; i < s->nthreads; i++)
		stopped += s->threads[i].result == PTRACE_THREAD_STOPPED;
	snprintf(path, sizeof(path), "/proc/%d/status", s->pid);
	if (proc_read(path, buf, sizeof(buf), NULL) < 0)
		return false;
	p = strstr(buf, "\nThreads:");
	return p && strtoul(p + 9, NULL, 10) == stopped + s->skipped;
}

static bool all_refused(const struct ptrace_snapshot *s)
{
	for (size_t i = 0; i < s->nthreads; i++)
		if (s->threads[i].result != PTRACE_THREAD_REFUSED)
			return false;
	return s->nthreads > 0;
}

/* The first tracer. */
static void *tracer_main(void *arg)
{
	struct crew *c = arg;
	struct tracer *t = &c->tracers[0];
	struct ptrace_snapshot *s = c->snap;
	int r;

	snapshot_raise_priority();
	c->stall_ns = (uint64_t)c->opts->stop_timeout_ms * 1000000ULL;
	c->deadline = now_monotonic_ns() + STALLS_AT_MOST * c->stall_ns;
	r = snapshot_start_crew(c);
	if (r < 0) {
		c->result = r;
		goto out_release;
	}
	/* Threads born while we seize: list again until a listing brings none,
	 * with every thread known so far stopped (a stopped thread clones nothing). */
	snapshot_wait_for_stops(t);
	snapshot_wait_for_helpers(c);
	while (s->listings < MAX_LISTINGS && now_monotonic_ns() < c->deadline &&
	       !all_known_stopped(s)) {
		r = seize_new_threads(t);
		if (r <= 0)
			break;
		snapshot_wait_for_stops(t);
	}
	s->all_stopped_ns = now_monotonic_ns();
	/* Refused all, yet the caller read some: threads on their way out. */
	if (all_refused(s) && !s->skipped)
		c->result = s->threads[0].error;
out_release:
	snapshot_wait_for_helpers(c);
	snapshot_release_crew(c);
	s->tracers = c->ntracers;
	if (s->first_interrupt_ns)
		s->pause_ns = s->last_detach_ns - s->first_interrupt_ns;
	snapshot_name_restarted_calls(s);
	/* Returning ends this thread: the kernel detaches whatever is left. */
	return NULL;
}

int ptrace_snapshot_take(struct ptrace_snapshot *ret, pid_t pid,
			 const struct ptrace_snapshot_opts *o)
{
	struct ptrace_snapshot s = { .pid = pid };
	struct crew c = { .snap = &s, .opts = o };
	sigset_t all, old, chld;
	pthread_t th;
	int r;

	if (!target_alive(pid))
		return -ESRCH;
	pthread_mutex_init(&c.lock, NULL);
	pthread_cond_init(&c.cond, NULL);
	atomic_init(&c.pool_used, 0);
	c.tracers[0].crew = &c;
	c.ntracers = 1;
	/* The tracer threads inherit this mask: only SIGKILL can stop them. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&th, NULL, tracer_main, &c);
	/* SIGCHLD stays blocked here until the end: it is the tracers'
	 * wake-up, and a thread that lets it in would swallow it. */
	chld = old;
	sigaddset(&chld, SIGCHLD);
	pthread_sigmask(SIG_SETMASK, r ? &old : &chld, NULL);
	if (r) {
		r = -r;
		goto out_free;
	}
	pthread_join(th, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	r = c.result;
	if (r < 0) {
		if (r != -ESRCH && !target_alive(pid))
			r = -ESRCH;
		goto out_free;
	}
	*ret = s;
	s = (struct ptrace_snapshot){ 0 };
out_free:
	ptrace_snapshot_release(&s);
	free(c.reported);
	free(c.index.slots);
	pthread_cond_destroy(&c.cond);
	pthread_mutex_destroy(&c.lock);
	return r;
}

void ptrace_snapshot_release(struct ptrace_snapshot *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nthreads; i++)
		snapshot_stack_free(s, s->threads[i].user.stack);
	free(s->threads);
	if (s->stack_pool)
		munmap(s->stack_pool, s->stack_pool_size);
	memset(s, 0, sizeof(*s));
}
