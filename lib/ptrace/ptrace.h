/*
 * A consistent snapshot of every thread of a process: PTRACE_SEIZE and
 * PTRACE_INTERRUPT all of them, copy registers and stack bytes, detach all,
 * and only then let the caller unwind (offline, from the copies).
 *
 * The threads are shared out between tracer threads, one per cpu (up to
 * four), each seizing, copying and detaching its own share; none lets go
 * before every share is stopped.
 *
 * The target comes first:
 * - Every ptrace call happens in a tracer thread created for the snapshot.
 *   When it ends, the kernel detaches anything still attached to it (a
 *   thread that never reached its stop, e.g. in uninterruptible sleep, is
 *   let go that way), and if cprof is killed the same happens: SEIZE never
 *   leaves a thread stopped behind.
 * - A signal that arrives during the snapshot (a signal-delivery stop) is
 *   handed back on PTRACE_DETACH, so it is delivered once, not lost.
 * - A process stopped by SIGSTOP before the snapshot stays stopped after it.
 * - Catchable signals are blocked in the tracer threads: only SIGKILL can
 *   end them mid-snapshot, and then the kernel detaches.
 */
#ifndef CPROF_PTRACE_H
#define CPROF_PTRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#include "maps/maps.h"
#include "unwind/unwind.h"

enum ptrace_thread_result {
	PTRACE_THREAD_STOPPED,   /* registers and stack were copied */
	PTRACE_THREAD_EXITED,    /* exited during the snapshot */
	PTRACE_THREAD_NOT_STOPPED, /* did not stop in time (uninterruptible sleep) */
	PTRACE_THREAD_REFUSED,   /* PTRACE_SEIZE failed (errno in .error) */
};

struct ptrace_thread {
	pid_t tid;
	enum ptrace_thread_result result;
	int error;          /* -errno for REFUSED */
	int pending_signal; /* signal-delivery stop: handed back on detach */
	bool group_stopped; /* the process was stopped (SIGSTOP) before us */
	/*
	 * The system call the thread was blocked in when it stopped, -1 for
	 * none (it was running user code, or a call had just returned). A
	 * call restarted after an earlier stop (nanosleep after gdb, strace or
	 * another snapshot) runs as restart_syscall; the number here is then
	 * the original call's, read from the wrapper's "mov $NR, %eax;
	 * syscall" just before the PC.
	 */
	int64_t syscall;
	struct unwind_input user; /* regs, stack copy (owned by the snapshot) */
	uint64_t stopped_ns;      /* CLOCK_MONOTONIC when its stop was seen */
};

struct ptrace_snapshot {
	pid_t pid;
	struct ptrace_thread *threads;
	size_t nthreads, alloc;
	uint64_t first_interrupt_ns; /* CLOCK_MONOTONIC */
	uint64_t last_detach_ns;
	uint64_t pause_ns;           /* last_detach - first_interrupt */
	uint64_t all_stopped_ns;     /* when the last thread was seen stopped (and copied) */
	unsigned listings;           /* reads of /proc/PID/task */
	size_t skipped;              /* threads of the first listing left to the caller */
	unsigned tracers;            /* tracer threads that shared the work */
	/* The stack copies, most of them (private: see ptrace_snapshot_release()). */
	void *stack_pool;
	size_t stack_pool_size;
};

struct ptrace_snapshot_opts {
	size_t max_stack;      /* bytes copied per thread at most (from rsp - 128) */
	/* How long the stops may stall (no thread stopping) before the threads
	 * not stopped yet are given up; the pause never lasts more than ten
	 * times that. */
	unsigned stop_timeout_ms;
	const struct maps *maps;  /* read beforehand: bounds the stack copies */
	unsigned tracers;         /* tracer threads at most; 0: one per cpu, up to four */
	/* A thread the caller reads without a stop (asleep in a call): never
	 * seized. NULL: every thread is stopped. */
	bool (*skip)(void *arg, pid_t tid);
	void *skip_arg;
};

/*
 * Takes the snapshot. Returns 0 (even if some threads exited or could not
 * be stopped: see each thread's result), -ESRCH when the process is gone,
 * -EPERM when no thread could be seized (already traced, or not allowed)
 * and none was left to the caller (opts->skip).
 */
int ptrace_snapshot_take(struct ptrace_snapshot *ret, pid_t pid,
			 const struct ptrace_snapshot_opts *o);
void ptrace_snapshot_release(struct ptrace_snapshot *s);

/* ---- pieces shared by every ptrace user (stops.c) ---------------------- */

#define NR_RESTART_SYSCALL 219
/* include/linux/errno.h: what a blocking call returns when a stop interrupts it. */
#define ERESTARTSYS 512
#define ERESTARTNOINTR 513
#define ERESTARTNOHAND 514
#define ERESTART_RESTARTBLOCK 516

/*
 * waitpid(@tid, __WALL | WNOHANG) that leaves a stop uncollected (see
 * stops.c). Returns @tid with *@ret_status set, 0 if nothing to report, -1
 * with errno on error.
 */
pid_t ptrace_peek_stop(pid_t tid, int *ret_status);

/*
 * The call a thread in restart_syscall continues (after an earlier stop)
 * at @rip, read from the code before it; NR_RESTART_SYSCALL when unknown.
 */
int64_t ptrace_restarted_call(pid_t tid, uint64_t rip);

/* @r -> @d[UNWIND_NREGS], in DWARF register order. */
void ptrace_regs_to_unwind(const struct user_regs_struct *r, uint64_t *d);

/* ---- a thread's stack read from outside and walked (stack-walk.c) ------ */

/*
 * What to walk and how much to copy: the copy starts @below bytes under
 * rsp, holds @first bytes, and grows (fourfold, up to @most and the end of
 * rsp's mapping) while the walk runs off its end. @copied, when set, runs
 * after each copy and before its walk: a thread that may have woken is
 * checked there, and its error ends the walk. The buffer is kept in the
 * struct for the next walk: stack_walk_release() frees it.
 */
struct stack_walk {
	uint64_t regs[UNWIND_NREGS]; /* rsp and rip at least */
	bool sp_pc_only;             /* only those two (unwind_input) */
	size_t below, first, most;
	int (*copied)(void *arg);
	void *arg;
	/* The result of the last stack_walk(). */
	int n;         /* unwinder_unwind()'s: frames, or -errno */
	bool gave_out; /* unwinder_gave_out() */
	size_t used;   /* bytes of the last copy the walk read */
	uint64_t read; /* bytes read from the thread, every copy */
	/* Private. */
	uint8_t *buf;
	size_t buf_size;
};

/*
 * Copies @tid's stack and walks it into @ret_pcs (at most @max). Returns 0
 * with the walk's result in @w, -ENOENT when rsp is in no mapping of
 * @maps, the read's -errno (-EIO when it read nothing), or @copied's.
 */
int stack_walk(struct stack_walk *w, pid_t tid, const struct maps *maps, struct unwinder *unw,
	       uint64_t *ret_pcs, size_t max);
void stack_walk_release(struct stack_walk *w);

/* Was the stopped thread asleep in a system call (that will restart)? */
bool ptrace_was_blocked(const struct user_regs_struct *r);

/*
 * Where a thread stopped with @r continues, and with which rax, if it is let
 * go with no signal handler to run: an interrupted call restarts (rip - 2,
 * the syscall instruction, rax = its number or restart_syscall). Code that
 * takes a thread on a detour (lib/inject/) and returns it by itself must go
 * back there, as the kernel would have.
 */
void ptrace_resume_point(const struct user_regs_struct *r, uint64_t *ret_rip, uint64_t *ret_rax);

#endif
