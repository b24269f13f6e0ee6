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

/* Give up listing after this many rounds: a fork bomb of threads must not
 * keep the others stopped. */
#define MAX_LISTINGS 64
/* Below rsp lies the red zone, which leaf functions use without moving rsp. */
#define RED_ZONE 128
/* How long a stop may take before we look whether the thread is a zombie. */
#define ZOMBIE_CHECK_NS (2ULL * 1000 * 1000)
/* How long a thread in uninterruptible sleep may keep the others stopped. */
#define D_STATE_GRACE_NS (5ULL * 1000 * 1000)

struct tracer {
	struct ptrace_snapshot *snap;
	const struct ptrace_snapshot_opts *opts;
	int result;
	bool *reported; /* per thread: its stop (or exit) was seen */
	size_t reported_alloc;
};

static struct ptrace_thread *find_thread(struct ptrace_snapshot *s, pid_t tid)
{
	for (size_t i = 0; i < s->nthreads; i++)
		if (s->threads[i].tid == tid)
			return &s->threads[i];
	return NULL;
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
	th = &s->threads[s->nthreads];
	memset(th, 0, sizeof(*th));
	th->tid = tid;
	th->syscall = -1;
	t->reported[s->nthreads] = false;
	s->nthreads++;
	/* SEIZE sends no SIGSTOP; INTERRUPT asks for a trap the tracee takes
	 * as soon as it can, reported as PTRACE_EVENT_STOP. */
	if (ptrace(PTRACE_SEIZE, tid, 0, 0) < 0) {
		th->result = errno == ESRCH ? PTRACE_THREAD_EXITED : PTRACE_THREAD_REFUSED;
		th->error = -errno;
		t->reported[s->nthreads - 1] = true;
		return 0;
	}
	if (!s->first_interrupt_ns)
		s->first_interrupt_ns = now_monotonic_ns();
	if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) < 0) {
		/* Only ESRCH is possible here: it died between the two calls. */
		th->result = PTRACE_THREAD_EXITED;
		t->reported[s->nthreads - 1] = true;
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
		if (find_thread(t->snap, tids[i]))
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
			t->reported[i] = true;
			s->threads[i].result = PTRACE_THREAD_EXITED;
		} else if (state == 'D' && grace_over) {
			t->reported[i] = true;
			s->threads[i].result = PTRACE_THREAD_NOT_STOPPED;
		}
	}
}

static void copy_thread(struct tracer *t, struct ptrace_thread *th);


/*
 * Collects stops until every thread reported or the deadline passed. Each
 * thread is copied as soon as it is seen stopped: the copies then cost no
 * pause of their own, they fill time spent waiting for the slowest thread.
 */
static void wait_for_stops(struct tracer *t, uint64_t deadline)
{
	struct ptrace_snapshot *s = t->snap;
	uint64_t next_check = now_monotonic_ns() + ZOMBIE_CHECK_NS;
	const struct timespec poll_interval = { 0, 20000 };

	for (;;) {
		size_t waiting = 0;

		for (size_t i = 0; i < s->nthreads; i++) {
			int status;
			pid_t w;

			if (t->reported[i])
				continue;
			w = ptrace_peek_stop(s->threads[i].tid, &status);
			if (w == 0) {
				waiting++;
				continue;
			}
			t->reported[i] = true;
			if (w < 0) /* ECHILD: gone and reaped by nobody we know */
				s->threads[i].result = PTRACE_THREAD_EXITED;
			else
				classify_stop(&s->threads[i], status);
			if (s->threads[i].result == PTRACE_THREAD_STOPPED)
				copy_thread(t, &s->threads[i]);
		}
		if (!waiting || now_monotonic_ns() >= deadline)
			return;
		if (now_monotonic_ns() >= next_check) {
			check_unstoppable(t);
			next_check = now_monotonic_ns() + ZOMBIE_CHECK_NS;
		}
		/*
		 * Sleep, don't spin: the threads we interrupted need a cpu to
		 * reach their stop, and at SCHED_FIFO a spinning tracer would
		 * keep its cpu from them (measured: 35-150 ms pauses).
		 */
		nanosleep(&poll_interval, NULL);
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
	if (ptrace_was_blocked(&regs))
		th->syscall = (int64_t)regs.orig_rax == NR_RESTART_SYSCALL
				      ? restarted_call(th->tid, regs.rip)
				      : (int64_t)regs.orig_rax;
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
	uint64_t deadline;
	struct sched_param sp = { .sched_priority = 1 };
	int added;

	/* Run the pause at real-time priority where allowed: it tightens it. */
	pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
	added = seize_new_threads(t);
	if (added < 0) {
		t->result = added;
		goto out_detach;
	}
	deadline = now_monotonic_ns() + (uint64_t)t->opts->stop_timeout_ms * 1000000ULL;
	/* Threads born while we seize: list again until a listing brings none,
	 * with every thread known so far stopped (a stopped thread clones nothing). */
	for (;;) {
		wait_for_stops(t, deadline);
		if (s->listings >= MAX_LISTINGS || now_monotonic_ns() >= deadline)
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
	/* Returning ends this thread: the kernel detaches whatever is left. */
	return NULL;
}

int ptrace_snapshot_take(struct ptrace_snapshot *ret, pid_t pid,
			 const struct ptrace_snapshot_opts *o)
{
	struct ptrace_snapshot s = { .pid = pid };
	struct tracer t = { .snap = &s, .opts = o };
	sigset_t all, old;
	pthread_t th;
	int r;

	if (!target_alive(pid))
		return -ESRCH;
	/* The tracer thread inherits this mask: only SIGKILL can stop it. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&th, NULL, tracer_main, &t);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) {
		free(t.reported);
		return -r;
	}
	pthread_join(th, NULL);
	free(t.reported);
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
