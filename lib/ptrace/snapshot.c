#include "ptrace/ptrace.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "target/target.h"
#include "util/util.h"

/* The pause is never longer than this many times opts->stop_timeout_ms. */
#define STALLS_AT_MOST 10
/* Give up listing after this many rounds: a fork bomb of threads must not
 * keep the others stopped. */
#define MAX_LISTINGS 64
/* Below rsp lies the red zone, which leaf functions use without moving rsp. */
#define RED_ZONE 128
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
/*
 * Tracer threads at most, and the fewest threads worth one more: each
 * started tracer costs a thread creation before the pause, and on a machine
 * of N cpus more than N only queue behind one another.
 */
#define MAX_TRACERS 4
#define MIN_SHARE 4
/* Stack bytes per thread made ready (faulted in) before the pause: the
 * live part of a sleeping thread's stack is a few KiB. */
#define POOL_READY_PER_THREAD 8192

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* tid -> index in snap->threads, open addressing; a slot holds index + 1. */
struct tid_index {
	uint32_t *slots;
	size_t size; /* a power of two, at least twice the number of threads */
};

struct crew;

/*
 * One tracer thread and its share of the threads. A tracee answers only to
 * the thread that seized it (PTRACE_GETREGS and PTRACE_DETACH from any
 * other fail with ESRCH), so each tracer makes every ptrace call of its own
 * share, from seize to detach.
 */
struct tracer {
	struct crew *crew;
	pthread_t thread;
	size_t lo, hi;         /* its share: snap->threads[lo, hi) */
	size_t unreported;     /* of its share, threads whose stop was not seen */
	uint64_t first_interrupt_ns, last_detach_ns;
	uint64_t copy_ns;      /* spent copying threads so far */
	uint64_t progress_ns;  /* the last report, or the last look at /proc */
	uint64_t slept_ns;     /* asleep since then: the cpu left to the threads */
};

/*
 * Several tracers share the work of one snapshot, each on its own cpu: the
 * ptrace calls of one thread (a few microseconds each) are the pause, and
 * one tracer makes them one after the other. The first tracer (the thread
 * ptrace_snapshot_take() starts) lists the threads, starts the others and
 * takes the last share, to which the threads born meanwhile are added; the
 * others seize, wait for and copy their share, then wait for the word to
 * let go, which comes once every thread of every share is stopped: the
 * snapshot stays one instant.
 */
struct crew {
	struct ptrace_snapshot *snap;
	const struct ptrace_snapshot_opts *opts;
	int result;
	bool *reported; /* per thread: its stop (or exit) was seen; by its tracer only */
	size_t reported_alloc;
	struct tid_index index;
	/* Stack copies: bump-allocated from one mapping (snap->stack_pool). */
	atomic_size_t pool_used;
	uint64_t stall_ns, deadline;
	struct tracer tracers[MAX_TRACERS];
	unsigned ntracers;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool go;                  /* the shares are given out: seize */
	unsigned helpers_stopped; /* helpers whose share is all stopped */
	bool release;             /* every share is: let go */
};

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
static int reserve_threads(struct crew *c, size_t n)
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
static size_t record_thread(struct crew *c, pid_t tid)
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

static void seize_thread(struct tracer *t, size_t i)
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

static bool skipped(const struct crew *c, pid_t tid)
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
		if (find_thread(c, tids[i]) >= 0 || skipped(c, tids[i]))
			continue;
		r = reserve_threads(c, c->snap->nthreads + 1);
		if (r < 0)
			break;
		seize_thread(t, record_thread(c, tids[i]));
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

static void copy_thread(struct tracer *t, struct ptrace_thread *th);

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

		copy_thread(t, th);
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
static void wait_for_stops(struct tracer *t)
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

/*
 * Room for a stack copy of @size bytes: from the snapshot's pool, made
 * before the pause (a malloc per thread inside it grew the tracer's arena
 * one mprotect at a time, and each fresh page faulted on the copy), or from
 * malloc once the pool is used up.
 */
static void *stack_alloc(struct crew *c, size_t size)
{
	struct ptrace_snapshot *s = c->snap;
	size_t rounded = (size + 63) & ~(size_t)63;
	size_t at;

	if (s->stack_pool) {
		at = atomic_fetch_add(&c->pool_used, rounded);
		if (at <= s->stack_pool_size && rounded <= s->stack_pool_size - at)
			return (uint8_t *)s->stack_pool + at;
	}
	return malloc(size);
}

static bool in_pool(const struct ptrace_snapshot *s, const void *p)
{
	const uint8_t *b = s->stack_pool;

	return b && (const uint8_t *)p >= b && (const uint8_t *)p < b + s->stack_pool_size;
}

static void stack_free(const struct ptrace_snapshot *s, const void *p)
{
	if (!in_pool(s, p))
		free((void *)p);
}

/*
 * Reserves room for the stack copies of @n threads, max_stack each (address
 * space only), and faults in the first few KiB a thread: the copies inside
 * the pause then neither call malloc nor, mostly, fault. Without it (the
 * mapping refused, strict overcommit say), each copy gets a malloc.
 */
static void stack_pool_make(struct crew *c, size_t n)
{
	struct ptrace_snapshot *s = c->snap;
	size_t size = n * c->opts->max_stack, ready = n * POOL_READY_PER_THREAD;
	void *p;

	if (!size)
		return;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		 -1, 0);
	if (p == MAP_FAILED)
		return;
	if (ready > size)
		ready = size;
	if (madvise(p, ready, MADV_POPULATE_WRITE) < 0)
		memset(p, 0, ready);
	s->stack_pool = p;
	s->stack_pool_size = size;
}

/* Copies registers and the live part of the stack of a stopped thread. */
static void copy_thread(struct tracer *t, struct ptrace_thread *th)
{
	const struct ptrace_snapshot_opts *o = t->crew->opts;
	struct user_regs_struct regs;
	const struct map_entry *m;
	struct iovec local, remote;
	uint64_t start, end;
	uint8_t *buf;
	ssize_t n;

	if (ptrace(PTRACE_GETREGS, th->tid, 0, &regs) < 0) {
		th->result = PTRACE_THREAD_EXITED;
		return;
	}
	ptrace_regs_to_unwind(&regs, th->user.regs);
	/* A restart_syscall is told what it continues after the release. */
	if (ptrace_was_blocked(&regs))
		th->syscall = (int64_t)regs.orig_rax;
	start = regs.rsp > RED_ZONE ? regs.rsp - RED_ZONE : 0;
	end = start + o->max_stack;
	if (o->maps) {
		m = maps_find(o->maps, regs.rsp);
		if (m && m->end < end)
			end = m->end;
	}
	buf = stack_alloc(t->crew, end - start);
	if (!buf)
		return;
	local = (struct iovec){ buf, end - start };
	remote = (struct iovec){ (void *)(uintptr_t)start, end - start };
	/* A short read ends at the first unmapped page: keep what came. */
	n = process_vm_readv(th->tid, &local, 1, &remote, 1, 0);
	if (n <= 0) {
		stack_free(t->crew->snap, buf);
		return;
	}
	th->user.stack = buf;
	th->user.stack_size = (size_t)n;
	th->user.stack_start = start;
}

/*
 * The calls that stopped threads will continue as restart_syscall: read
 * which from the code before their PC. Code does not change, so this is
 * done after the threads are let go, out of the pause.
 */
static void name_restarted_calls(struct ptrace_snapshot *s)
{
	for (size_t i = 0; i < s->nthreads; i++) {
		struct ptrace_thread *th = &s->threads[i];

		if (th->result == PTRACE_THREAD_STOPPED && th->syscall == NR_RESTART_SYSCALL)
			th->syscall = ptrace_restarted_call(th->tid, th->user.regs[UNWIND_REG_RIP]);
	}
}

/* Lets @t's share go. */
static void detach_share(struct tracer *t)
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

/* Run the pause at real-time priority where allowed: a tracer then waits
 * for no other thread of the machine. It ends with the tracer thread. */
static void raise_priority(void)
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

	raise_priority();
	pthread_mutex_lock(&c->lock);
	while (!c->go)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
	for (size_t i = t->lo; i < t->hi; i++)
		seize_thread(t, i);
	wait_for_stops(t);
	pthread_mutex_lock(&c->lock);
	c->helpers_stopped++;
	pthread_cond_broadcast(&c->cond);
	while (!c->release)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
	detach_share(t);
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
static int start_crew(struct crew *c)
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
	r = reserve_threads(c, n + 1);
	if (r < 0)
		goto out_free;
	for (size_t i = 0; i < n; i++) {
		if (skipped(c, tids[i]))
			s->skipped++;
		else
			tids[kept++] = tids[i];
	}
	n = kept;
	stack_pool_make(c, n + n / 8 + 16);
	for (size_t i = 0; i < n; i++)
		record_thread(c, tids[i]);
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
		seize_thread(first, i);
out_free:
	free(tids);
	return r;
}

/* Waits until every helper holds its share stopped (or gave up on it). */
static void wait_for_helpers(struct crew *c)
{
	pthread_mutex_lock(&c->lock);
	while (c->helpers_stopped < c->ntracers - 1)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
}

/* Lets every share go, and ends the helpers. */
static void release_crew(struct crew *c)
{
	struct ptrace_snapshot *s = c->snap;

	pthread_mutex_lock(&c->lock);
	c->go = true; /* helpers started before an error wait for it */
	c->release = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	detach_share(&c->tracers[0]);
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

/* The first tracer. */
static void *tracer_main(void *arg)
{
	struct crew *c = arg;
	struct tracer *t = &c->tracers[0];
	struct ptrace_snapshot *s = c->snap;
	int r;

	raise_priority();
	c->stall_ns = (uint64_t)c->opts->stop_timeout_ms * 1000000ULL;
	c->deadline = now_monotonic_ns() + STALLS_AT_MOST * c->stall_ns;
	r = start_crew(c);
	if (r < 0) {
		c->result = r;
		goto out_release;
	}
	/* Threads born while we seize: list again until a listing brings none,
	 * with every thread known so far stopped (a stopped thread clones nothing). */
	wait_for_stops(t);
	wait_for_helpers(c);
	while (s->listings < MAX_LISTINGS && now_monotonic_ns() < c->deadline &&
	       !all_known_stopped(s)) {
		r = seize_new_threads(t);
		if (r <= 0)
			break;
		wait_for_stops(t);
	}
	s->all_stopped_ns = now_monotonic_ns();
	/* Refused all, yet the caller read some: threads on their way out. */
	if (all_refused(s) && !s->skipped)
		c->result = s->threads[0].error;
out_release:
	wait_for_helpers(c);
	release_crew(c);
	s->tracers = c->ntracers;
	if (s->first_interrupt_ns)
		s->pause_ns = s->last_detach_ns - s->first_interrupt_ns;
	name_restarted_calls(s);
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
		stack_free(s, s->threads[i].user.stack);
	free(s->threads);
	if (s->stack_pool)
		munmap(s->stack_pool, s->stack_pool_size);
	memset(s, 0, sizeof(*s));
}
