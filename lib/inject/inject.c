/*
 * The remote call of inject.h, step by step:
 *
 *   1. before anything stops: find dlopen/dlsym/dlerror in the target's libc,
 *      the path the agent has (or will have) there, a trampoline page left
 *      by an earlier run;
 *   2. in a tracer thread that blocks every catchable signal: SEIZE and
 *      INTERRUPT one thread at a time, judge it (judge.c), let it go if
 *      unsafe, try the next one;
 *   3. with a safe thread stopped: save its registers and extended state;
 *      if there is no page yet, make it run mmap (PTRACE_SYSCALL to its exit)
 *      from its own syscall instruction; write the code and data; point it
 *      at the code; DETACH. It runs the call on its own and comes back;
 *   4. wait, without ptrace, for the page to say done, and read the results.
 *
 * This file holds the steps' order, the tracer thread and the wait; the
 * agent's path is chosen in agent-path.c, the detour laid in detour.c, the
 * stopped thread handled through remote.c.
 */
#include "inject/inject.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/wire.h"
#include "inject/inject-private.h"
#include "inject/trampoline.h"
#include "ptrace/ptrace.h"
#include "target/target.h"
#include "util/util.h"

#define FRAME_MAX ((TF_XSAVE + TF_XSAVE_MAX + 64 + 8 * TR_COUNT + 63) & ~63)
#define STOP_TIMEOUT_NS (100ULL * 1000 * 1000)
#define MIN_NAP_NS (1000ULL * 1000)
#define MAX_NAP_NS (50ULL * 1000 * 1000)
#define LOOK_DUTY 10

static int seize_error(struct call *c, pid_t tid, int err)
{
	char path[64], buf[4096], *p;
	size_t n;

	if (err != EPERM)
		return -err;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", c->pid, tid);
	if (proc_read(path, buf, sizeof(buf) - 1, &n) == 0) {
		buf[n] = '\0';
		p = strstr(buf, "TracerPid:");
		/* This thread: seized in an earlier round, its stop late. */
		if (p && atoi(p + 10) == gettid())
			return -EALREADY;
		if (p && atoi(p + 10) > 0)
			return -EBUSY;
	}
	return -EPERM;
}

/* 0: launched; -EAGAIN: not this one; other -errno: give up. */
static int try_thread(struct call *c, pid_t tid)
{
	struct user_regs_struct regs;
	uint64_t t0, stopped;
	int status, k;

	c->rep->tried++;
	/* Seen from outside first: a thread asleep where it must not load
	 * the agent (in malloc's lock, the loader's) is not even stopped. */
	if (tid != c->late_tid &&
	    inject_judge_asleep(c->o, c->pid, tid, c->attach_fn != 0 && !c->o->function,
				c->rep->why, sizeof(c->rep->why)) == -EAGAIN) {
		c->rep->refused++;
		return -EAGAIN;
	}
	t0 = now_monotonic_ns();
	if (ptrace(PTRACE_SEIZE, tid, 0, PTRACE_O_TRACESYSGOOD) < 0) {
		if (errno == ESRCH)
			return -EAGAIN;
		k = seize_error(c, tid, errno);
		/* Interrupted in an earlier round and not stopped by then (a
		 * busy machine, a disk wait): the stop is still on its way. */
		if (k != -EALREADY)
			return k;
		if (tid == c->late_tid)
			t0 = c->late_since;
	} else if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) < 0) {
		return -EAGAIN;
	}
	k = inject_wait_stop(tid, &status, STOP_TIMEOUT_NS, false);
	if (k < 0) {
		/* Uninterruptible sleep or no CPU for it: it stays seized, and
		 * the next round waits for its stop again. A thread refused
		 * for its state before says more than this one's delay. */
		if (!c->rep->refused)
			snprintf(c->rep->why, sizeof(c->rep->why), "thread %d did not stop", tid);
		c->late_tid = tid;
		c->late_since = t0;
		return -EAGAIN;
	}
	if (status >> 16 != PTRACE_EVENT_STOP) {
		/* A signal is on its way in: let it go with it. */
		ptrace(PTRACE_DETACH, tid, 0, (void *)(uintptr_t)WSTOPSIG(status));
		snprintf(c->rep->why, sizeof(c->rep->why), "a signal was arriving");
		return -EAGAIN;
	}
	if (WSTOPSIG(status) != SIGTRAP) {
		ptrace(PTRACE_DETACH, tid, 0, 0);
		return -ENOTSUP; /* group-stopped: nothing would run the call */
	}
	waitpid(tid, &status, __WALL | WNOHANG); /* ours: carries no signal */
	stopped = now_monotonic_ns();
	if (ptrace(PTRACE_GETREGS, tid, 0, &regs) < 0)
		return -EAGAIN;
	/* The target's own policy first: a call it forbids is never made. */
	k = inject_seccomp_check(c->pid, tid, regs.rip, c->rep->why, sizeof(c->rep->why));
	if (k < 0) {
		inject_detach(c, tid);
		return k == -ESRCH ? -EAGAIN : k;
	}
	/* Only a resident agent's attach allocates nothing (inject_warm_agent()). */
	k = inject_judge_thread(c->o, tid, &regs, c->attach_fn != 0 && !c->o->function,
				c->rep->why, sizeof(c->rep->why));
	if (k == 0)
		k = inject_launch(c, tid, &regs);
	if (k < 0) {
		if (k == -EAGAIN)
			c->rep->refused++;
		inject_detach(c, tid);
		c->longest_look_ns = MAX(c->longest_look_ns, now_monotonic_ns() - stopped);
		return k == -ESRCH ? -EAGAIN : k;
	}
	c->tid = tid;
	inject_detach(c, tid);
	c->rep->stopped_ns = now_monotonic_ns() - t0;
	return 0;
}

/* Between looks, no thread stopped: the caller may give up (Ctrl-C). */
static bool cancelled(const struct call *c)
{
	return cancel_asked(&c->o->cancel);
}

/*
 * Rounds of looks, each thread once, until one is safe. Between rounds the
 * threads run for LOOK_DUTY times the longest stop of a round (smoothed),
 * so that looking takes about a tenth of a thread's time at most while it
 * lasts: a look told by the pc alone holds the thread for microseconds and
 * the next round comes a millisecond later, so that even a loop that is
 * inside malloc nearly all the time is caught outside it within a few
 * hundred looks; a look that unwound waits correspondingly longer.
 */
static void *tracer_main(void *arg)
{
	struct call *c = arg;
	uint64_t start = now_monotonic_ns();
	uint64_t deadline = start + (uint64_t)c->o->pick_timeout_ms * 1000000ULL;
	uint64_t cap = start + (uint64_t)c->o->pick_timeout_ms * 1000000ULL * INJECT_PICK_CAP;
	unsigned seed = (unsigned)now_monotonic_ns();
	uint64_t held_ns = 0, now;

	c->result = -EAGAIN;
	while ((now = now_monotonic_ns()) < cap &&
	       (now < deadline || c->rep->tried < INJECT_MIN_LOOKS)) {
		uint64_t nap_ns;
		struct timespec nap;
		pid_t *tids;
		size_t n;

		/* A dying target lists its threads a while longer, and they
		 * never stop: do not wait out the deadline on them. */
		if (!target_alive(c->pid) || inject_order_threads(c->pid, &tids, &n) < 0) {
			c->result = -ESRCH;
			return NULL;
		}
		c->longest_look_ns = 0;
		for (size_t i = 0; i < n; i++) {
			int k = cancelled(c) ? -ECANCELED : try_thread(c, tids[i]);

			if (k != -EAGAIN) {
				c->result = k;
				free(tids);
				return NULL;
			}
		}
		free(tids);
		/* Smoothed: one look that cprof's own preemption made long
		 * must not stall the search. */
		held_ns = held_ns ? (3 * held_ns + c->longest_look_ns) / 4 : c->longest_look_ns;
		nap_ns = MIN(MAX(MIN_NAP_NS, held_ns * LOOK_DUTY), MAX_NAP_NS);
		/* +-50%: not in step with the target's loops. */
		nap_ns = nap_ns / 2 + (uint64_t)rand_r(&seed) % nap_ns;
		nap = (struct timespec){ (time_t)(nap_ns / 1000000000ULL),
					 (long)(nap_ns % 1000000000ULL) };
		if (c->o->looking)
			c->o->looking(c->rep, now_monotonic_ns() - start);
		nanosleep(&nap, NULL);
		if (cancelled(c)) {
			c->result = -ECANCELED;
			return NULL;
		}
	}
	/* Returning ends this thread: the kernel lets go of any thread
	 * still seized (one that never reached its stop). */
	return NULL;
}

/* Runs @fn in a tracer thread of its own that blocks every catchable
 * signal (cprof's Ctrl-C must not interrupt a stop), and waits for it. */
static int run_tracer(struct call *c, void *(*fn)(void *))
{
	sigset_t all, old;
	pthread_t th;
	int r;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&th, NULL, fn, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r)
		return -r;
	pthread_join(th, NULL);
	return c->result;
}

/*
 * After a first load: the detour's pages go, so that nothing cprof mapped
 * stays in the target. The thread that took the detour, stopped once more,
 * runs munmap and goes back to where it was (its interrupted call restarted
 * as the detour would). Failing that, the next session's call unmaps them
 * (inject_find_old_page()).
 */
/* One try: -EINPROGRESS while the thread is still on its way out of the
 * code (done is set two instructions before its jump to the agent's tail);
 * out of it, nothing returns into it (trampoline.h). */
static int unmap_once(struct call *c)
{
	struct user_regs_struct orig, r;
	uint64_t v, rip, rax;
	int status, k = -EAGAIN;

	if (ptrace(PTRACE_SEIZE, c->tid, 0, PTRACE_O_TRACESYSGOOD) < 0)
		return -ESRCH;
	if (ptrace(PTRACE_INTERRUPT, c->tid, 0, 0) < 0 ||
	    inject_wait_stop(c->tid, &status, STOP_TIMEOUT_NS, false) < 0)
		goto out_detach;
	if (status >> 16 != PTRACE_EVENT_STOP) {
		inject_keep_signal(c, WSTOPSIG(status));
		goto out_detach;
	}
	waitpid(c->tid, &status, __WALL | WNOHANG);
	if (WSTOPSIG(status) != SIGTRAP || ptrace(PTRACE_GETREGS, c->tid, 0, &orig) < 0)
		goto out_detach;
	if (orig.rip >= c->page && orig.rip < c->page + TRAMP_SIZE) {
		k = -EINPROGRESS;
		goto out_detach;
	}
	if (REMOTE(c, c->tid, &orig, &v, SYS_munmap, c->page, TRAMP_SIZE, 0, 0, 0, 0) == 0 &&
	    v == 0)
		k = 0;
	r = orig;
	ptrace_resume_point(&orig, &rip, &rax);
	r.rip = rip;
	r.rax = rax;
	r.orig_rax = (uint64_t)-1;
	ptrace(PTRACE_SETREGS, c->tid, 0, &r);
out_detach:
	inject_detach(c, c->tid);
	return k;
}

static void *unmap_main(void *arg)
{
	const struct timespec pause = { 0, 1000000 };
	struct call *c = arg;

	for (int i = 0; i < 100; i++) {
		c->result = unmap_once(c);
		if (c->result != -EINPROGRESS && c->result != -EAGAIN)
			break;
		nanosleep(&pause, NULL);
	}
	return NULL;
}

/* ---- waiting for the call ---------------------------------------------- */

static int collect(struct call *c, uint64_t launched)
{
	const struct timespec pause = { 0, 500000 };
	uint64_t deadline = launched + (uint64_t)c->o->call_timeout_ms * 1000000ULL;
	uint64_t res[7], done = 0; /* handle, func, ret, errstr, done, unmap, tail */

	for (;;) {
		if (inject_peek(c->pid, inject_data_block(c) + TD_DONE, &done, sizeof(done)) < 0)
			return target_alive(c->pid) ? -EFAULT : -ESRCH;
		if (done == 1)
			break;
		if (now_monotonic_ns() >= deadline)
			return -ETIMEDOUT;
		nanosleep(&pause, NULL);
	}
	c->rep->call_ns = now_monotonic_ns() - launched;
	if (inject_peek(c->pid, inject_data_block(c) + TD_HANDLE, res, sizeof(res)) < 0)
		return -ESRCH;
	c->left_by_tail = res[6] != 0;
	if (!res[0]) {
		char msg[sizeof(c->rep->dlerror)] = "";

		if (res[3])
			inject_peek(c->pid, res[3], msg, sizeof(msg) - 1); /* may be short */
		msg[sizeof(msg) - 1] = '\0';
		snprintf(c->rep->dlerror, sizeof(c->rep->dlerror), "%s", msg);
		return -ENOEXEC;
	}
	if (!res[1])
		return -ENOSYS;
	c->rep->called = 1;
	/* cprof_agent_attach_events returns an int; the target is untrusted. */
	return (int)(int32_t)res[2];
}

int inject_agent(pid_t pid, const struct inject_opts *o, struct inject_report *rep)
{
	struct call c = { .pid = pid, .o = o, .rep = rep };
	struct target_claim claim = { .fd = -1 };
	uint64_t launched = 0, looking_since;
	int r;

	memset(rep, 0, sizeof(*rep));
	if (o->function && (strlen(o->function) >= TD_SYM_MAX ||
			    (o->string && strlen(o->string) >= TD_STR_MAX)))
		return -EINVAL;
	if (!target_alive(pid))
		return -ESRCH;
	r = inject_find_function(pid, o->maps, "libc.so.", "dlopen", &c.dlopen);
	if (r == -ENOENT)
		r = inject_find_function(pid, o->maps, "libdl.so.", "dlopen", &c.dlopen);
	if (r < 0)
		return r;
	if (inject_find_function(pid, o->maps, "libc.so.", "dlsym", &c.dlsym) < 0 &&
	    inject_find_function(pid, o->maps, "libdl.so.", "dlsym", &c.dlsym) < 0)
		return -ENOENT;
	if (inject_find_function(pid, o->maps, "libc.so.", "dlerror", &c.dlerror) < 0 &&
	    inject_find_function(pid, o->maps, "libdl.so.", "dlerror", &c.dlerror) < 0)
		return -ENOENT;
	inject_find_function(pid, o->maps, "libc.so.", "syscall", &c.syscall_fn);
	if (inject_find_function(pid, o->maps, "libc.so.", "pthread_setcancelstate",
				 &c.setcancel) < 0)
		inject_find_function(pid, o->maps, "libpthread.so.", "pthread_setcancelstate",
				     &c.setcancel);
	c.image = calloc(1, TRAMP_SIZE);
	c.frame = aligned_alloc(64, FRAME_MAX);
	if (!c.image || !c.frame) {
		r = -ENOMEM;
		goto out_free;
	}
	/* Last of the preparations: it may place a copy of the agent. */
	r = inject_choose_agent_path(&c);
	if (r < 0)
		goto out_free;
	/* From the page's or the block's first look to the results read, no
	 * other cprof stops a thread of this target or writes either. */
	r = target_claim_take(&claim, pid, TARGET_CLAIM_PTRACE, inject_claim_wait_ms(o), &o->cancel,
			      &rep->holder);
	if (r < 0 && !target_claim_unavailable(r)) {
		r = r == -EBUSY ? -EUSERS : r;
		goto out_unplace;
	}
	inject_find_old_page(&c);
	inject_warm_up(o);
	looking_since = now_monotonic_ns();
	r = run_tracer(&c, tracer_main);
	rep->looked_ns = now_monotonic_ns() - looking_since;
	launched = r == 0 ? now_monotonic_ns() : 0;
	if (r == 0) {
		rep->tid = c.tid;
		r = collect(&c, launched);
	}
	/* Mapped for a thread that was then refused (its stack, a signal),
	 * or used and left by the agent's tail: either way nothing of it
	 * stays. A thread that ran the page's own tail may still return
	 * into it (trampoline.h): the next load unmaps it. */
	if (c.page && r != -ETIMEDOUT) {
		if (!launched)
			c.tid = c.page_tid;
		rep->left_pages = launched && !c.left_by_tail ? 1
							       : run_tracer(&c, unmap_main) < 0;
	}
	/* A call that timed out may still write the block: its claim is
	 * kept (the descriptor left open) for as long as this cprof lives. */
	if (r != -ETIMEDOUT)
		target_claim_drop(&claim);
out_unplace:
	/* A copy never loaded goes; one that was (or may yet be) stays, as the
	 * resident agent of later runs. */
	if (r < 0 && rep->placed == 1 && (!launched || r == -ENOEXEC))
		inject_unplace_agent(pid, rep->agent_path);
out_free:
	free(c.frame);
	free(c.image);
	return r;
}
