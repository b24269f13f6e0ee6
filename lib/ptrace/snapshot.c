#include "ptrace/ptrace.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
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
/* How long the stops may stall before we look at the state of the threads
 * not stopped yet: a zombie or a thread in uninterruptible sleep. */
#define STALL_NS (2ULL * 1000 * 1000)
/* How long a thread in uninterruptible sleep may keep the others stopped. */
#define D_STATE_GRACE_NS (5ULL * 1000 * 1000)

/* tid -> index in snap->threads, open addressing; a slot holds index + 1. */
struct tid_index {
	uint32_t *slots;
	size_t size; /* a power of two, at least twice the number of threads */
};

struct tracer {
	struct ptrace_snapshot *snap;
	const struct ptrace_snapshot_opts *opts;
	int result;
	bool *reported; /* per thread: its stop (or exit) was seen */
	size_t reported_alloc;
	size_t unreported;
	struct tid_index index;
	uint64_t copy_ns; /* spent copying threads so far */
	uint64_t progress_ns; /* the last report, or the last look at /proc */
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
static ssize_t find_thread(const struct tracer *t, pid_t tid)
{
	const struct tid_index *x = &t->index;

	if (!x->size)
		return -1;
	for (size_t k = tid_slot(x, tid); x->slots[k]; k = (k + 1) & (x->size - 1))
		if (t->snap->threads[x->slots[k] - 1].tid == tid)
			return (ssize_t)x->slots[k] - 1;
	return -1;
}

static void mark_reported(struct tracer *t, size_t i)
{
	if (t->reported[i])
		return;
	t->reported[i] = true;
	t->unreported--;
	t->progress_ns = now_monotonic_ns();
}

static int add_thread(struct tracer *t, pid_t tid)
{
	struct ptrace_snapshot *s = t->snap;
	struct ptrace_thread *th;
	int r;

	r = GROW(s->threads, s->nthreads + 1, s->alloc);
	if (r < 0)
		return r;
	r = GROW(t->reported, s->nthreads + 1, t->reported_alloc);
	if (r < 0)
		return r;
	r = tid_index_reserve(&t->index, s, s->nthreads + 1);
	if (r < 0)
		return r;
	th = &s->threads[s->nthreads];
	memset(th, 0, sizeof(*th));
	th->tid = tid;
	th->syscall = -1;
	t->reported[s->nthreads] = false;
	t->unreported++;
	tid_index_put(&t->index, tid, s->nthreads);
	s->nthreads++;
	/* SEIZE sends no SIGSTOP; INTERRUPT asks for a trap the tracee takes
	 * as soon as it can, reported as PTRACE_EVENT_STOP. */
	if (ptrace(PTRACE_SEIZE, tid, 0, 0) < 0) {
		th->result = errno == ESRCH ? PTRACE_THREAD_EXITED : PTRACE_THREAD_REFUSED;
		th->error = -errno;
		mark_reported(t, s->nthreads - 1);
		return 0;
	}
	if (!s->first_interrupt_ns)
		s->first_interrupt_ns = now_monotonic_ns();
	if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) < 0) {
		/* Only ESRCH is possible here: it died between the two calls. */
		th->result = PTRACE_THREAD_EXITED;
		mark_reported(t, s->nthreads - 1);
		return 0;
	}
	th->result = PTRACE_THREAD_NOT_STOPPED;
	return 0;
}

/* Seizes every thread not seen yet. Returns how many were new. */
static int seize_new_threads(struct tracer *t)
{
	pid_t *tids;
	size_t n;
	int r, added = 0;

	r = target_list_tids(t->snap->pid, &tids, &n);
	t->snap->listings++;
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		if (find_thread(t, tids[i]) >= 0)
			continue;
		r = add_thread(t, tids[i]);
		if (r < 0)
			break;
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
 * other thread stopped (a whole second was measured), so after a short
 * grace it is given up; the kernel lets it go when the tracer thread ends.
 */
static void check_unstoppable(struct tracer *t)
{
	struct ptrace_snapshot *s = t->snap;
	bool grace_over = now_monotonic_ns() - s->first_interrupt_ns >= D_STATE_GRACE_NS;

	for (size_t i = 0; i < s->nthreads; i++) {
		char state;

		if (t->reported[i])
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
	struct ptrace_thread *th = &t->snap->threads[i];

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
 * Looks at every thread still awaited, one waitid(P_PID) each: the kernel
 * finds that tid directly, where waitid(P_ALL) would walk every tracee,
 * stops already collected included, on every call.
 */
static void poll_threads(struct tracer *t)
{
	struct ptrace_snapshot *s = t->snap;

	for (size_t i = 0; i < s->nthreads && t->unreported; i++) {
		int status;
		pid_t w;

		if (t->reported[i])
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
 * tracer's process SIGCHLD, blocked in this thread and in the caller) or
 * @until.
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
 * Collects stops until every thread reported, the stops stalled for
 * @stall_ns (none came: the rest cannot stop, or not soon; those are given
 * up), or @deadline passed. Thousands of threads on a busy machine can take
 * seconds to stop, each in its turn on a cpu: as long as they do, they are
 * waited for. A
 * round looks at every awaited thread, then sleeps until a report comes,
 * and for at least four times as long as the round's looking took: each
 * stop sends a SIGCHLD, and a round per stop would cost time quadratic in
 * the number of threads, and the cpu the others need to reach their stop
 * (looking takes the lock their stops take, sighand->siglock). Reading the
 * state of every awaited thread in /proc (check_unstoppable()) costs more
 * than a round: it waits until the stops have stalled (a round found none,
 * and none came for a while).
 */
static void wait_for_stops(struct tracer *t, uint64_t stall_ns, uint64_t deadline)
{
	t->progress_ns = now_monotonic_ns();
	for (;;) {
		uint64_t start = now_monotonic_ns(), copied = t->copy_ns, looked, now, wake;
		size_t awaited = t->unreported;

		poll_threads(t);
		now = now_monotonic_ns();
		looked = now - start - (t->copy_ns - copied);
		if (!t->unreported || now >= deadline || now - t->progress_ns >= stall_ns)
			return;
		if (t->unreported == awaited && now - t->progress_ns >= STALL_NS) {
			check_unstoppable(t);
			t->progress_ns = now_monotonic_ns();
			if (!t->unreported)
				return;
		}
		wake = t->progress_ns + STALL_NS;
		if (wake > now + NAP_NS)
			wake = now + NAP_NS;
		sleep_until_report(wake < deadline ? wake : deadline);
		now = now_monotonic_ns();
		if (now - start < 4 * looked)
			sleep_ns(4 * looked - (now - start));
	}
}

/* The call a restart_syscall continues: glibc's wrappers load the number
 * with "b8 imm32" (or "31 c0" for 0) right before "0f 05". */
static int64_t restarted_call(pid_t tid, uint64_t rip)
{
	uint8_t code[7];
	struct iovec local = { code, sizeof(code) };
	struct iovec remote = { (void *)(uintptr_t)(rip - sizeof(code)), sizeof(code) };
	int32_t nr;

	if (rip < sizeof(code) ||
	    process_vm_readv(tid, &local, 1, &remote, 1, 0) != (ssize_t)sizeof(code))
		return NR_RESTART_SYSCALL;
	if (code[5] != 0x0f || code[6] != 0x05)
		return NR_RESTART_SYSCALL;
	if (code[0] == 0xb8) {
		memcpy(&nr, code + 1, sizeof(nr));
		return nr >= 0 ? nr : NR_RESTART_SYSCALL;
	}
	if (code[3] == 0x31 && code[4] == 0xc0)
		return 0;
	return NR_RESTART_SYSCALL;
}

/* Copies registers and the live part of the stack of a stopped thread. */
static void copy_thread(struct tracer *t, struct ptrace_thread *th)
{
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
	/* A restart_syscall is told what it continues after detach_all(). */
	if (ptrace_was_blocked(&regs))
		th->syscall = (int64_t)regs.orig_rax;
	start = regs.rsp > RED_ZONE ? regs.rsp - RED_ZONE : 0;
	end = start + t->opts->max_stack;
	if (t->opts->maps) {
		m = maps_find(t->opts->maps, regs.rsp);
		if (m && m->end < end)
			end = m->end;
	}
	buf = malloc(end - start);
	if (!buf)
		return;
	local = (struct iovec){ buf, end - start };
	remote = (struct iovec){ (void *)(uintptr_t)start, end - start };
	/* A short read ends at the first unmapped page: keep what came. */
	n = process_vm_readv(th->tid, &local, 1, &remote, 1, 0);
	if (n <= 0) {
		free(buf);
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
			th->syscall = restarted_call(th->tid, th->user.regs[UNWIND_REG_RIP]);
	}
}

static void detach_all(struct tracer *t)
{
	struct ptrace_snapshot *s = t->snap;

	for (size_t i = 0; i < s->nthreads; i++) {
		struct ptrace_thread *th = &s->threads[i];

		if (th->result != PTRACE_THREAD_STOPPED)
			continue;
		/* ESRCH here means it was killed meanwhile: nothing to undo. */
		ptrace(PTRACE_DETACH, th->tid, 0, (void *)(uintptr_t)th->pending_signal);
	}
	s->last_detach_ns = now_monotonic_ns();
}

/*
 * True if the process has as many threads as we hold stopped: then it has
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
	return p && strtoul(p + 9, NULL, 10) == stopped;
}

static bool all_refused(const struct ptrace_snapshot *s)
{
	for (size_t i = 0; i < s->nthreads; i++)
		if (s->threads[i].result != PTRACE_THREAD_REFUSED)
			return false;
	return s->nthreads > 0;
}

static void *tracer_main(void *arg)
{
	struct tracer *t = arg;
	struct ptrace_snapshot *s = t->snap;
	uint64_t stall, deadline;
	struct sched_param sp = { .sched_priority = 1 };
	int added;

	/* Run the pause at real-time priority where allowed: it tightens it. */
	pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
	added = seize_new_threads(t);
	if (added < 0) {
		t->result = added;
		goto out_detach;
	}
	stall = (uint64_t)t->opts->stop_timeout_ms * 1000000ULL;
	deadline = now_monotonic_ns() + STALLS_AT_MOST * stall;
	/* Threads born while we seize: list again until a listing brings none,
	 * with every thread known so far stopped (a stopped thread clones nothing). */
	for (;;) {
		wait_for_stops(t, stall, deadline);
		if (s->listings >= MAX_LISTINGS || now_monotonic_ns() >= deadline ||
		    all_known_stopped(s))
			break;
		added = seize_new_threads(t);
		if (added <= 0)
			break;
	}
	s->all_stopped_ns = now_monotonic_ns();
	if (all_refused(s))
		t->result = s->threads[0].error;
out_detach:
	detach_all(t);
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
	struct tracer t = { .snap = &s, .opts = o };
	sigset_t all, old, chld;
	pthread_t th;
	int r;

	if (!target_alive(pid))
		return -ESRCH;
	/* The tracer thread inherits this mask: only SIGKILL can stop it. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&th, NULL, tracer_main, &t);
	/* SIGCHLD stays blocked here until the end: it is the tracer's
	 * wake-up, and a thread that lets it in would swallow it. */
	chld = old;
	sigaddset(&chld, SIGCHLD);
	pthread_sigmask(SIG_SETMASK, r ? &old : &chld, NULL);
	if (r)
		return -r;
	pthread_join(th, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	free(t.reported);
	free(t.index.slots);
	if (t.result < 0) {
		ptrace_snapshot_release(&s);
		return t.result == -ESRCH || !target_alive(pid) ? -ESRCH : t.result;
	}
	*ret = s;
	return 0;
}

void ptrace_snapshot_release(struct ptrace_snapshot *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nthreads; i++)
		free((void *)s->threads[i].user.stack);
	free(s->threads);
	memset(s, 0, sizeof(*s));
}
