/*
 * The "cprof-agent" task: the target must never stay hooked to a cprof that
 * is gone. It wakes every 100 ms and detaches when
 *   - cprof's process exited, even by SIGKILL: a pidfd becomes readable
 *     (fallback without pidfd_open, Linux < 5.3: kill(pid, 0) says ESRCH);
 *   - cprof's heartbeat did not change for CPROF_WIRE_HEARTBEAT_TIMEOUT_MS
 *     (cprof stopped or hung), or CPROF_WIRE_HEARTBEAT_ALONE_TIMEOUT_MS when
 *     there is no pidfd to tell its death (another PID namespace);
 * and it applies cprof's commands (start, stop, detach, rate). It exits when
 * its session is over, whoever ended it.
 *
 * It is a task glibc never sees: clone() without CLONE_SETTLS, on a stack of
 * our own. pthread_create() would switch a single-threaded process off
 * glibc's single-thread paths (malloc without locks, among them) for good,
 * a lasting slowdown after cprof has left. So everything it runs keeps to
 * raw.h's rules: no thread-local state, no errno, no libc lock, no loader
 * lock. It blocks every signal (the program's handlers must never run on a
 * thread without a TLS of its own), and the kernel clears its tid
 * (cprof_agent_task_tid) when it is gone, which is when its stack may serve
 * the next one.
 *
 * It is cprof's, not the program's: cprof reads that tid from outside and
 * shows the task in no profile (wire.h, CPROF_WIRE_TASK_SYMBOL). So the
 * task stores it itself, once it carries its name, and the kernel clears
 * it: the word names the task exactly while it lives under that name.
 */
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "cprof-agent.h"
#include "raw.h"

#define WATCHDOG_TICK_MS 100
#define WATCHDOG_STACK (64u << 10)

/* The task's kernel id while it lives (stored by the task, cleared by the
 * kernel: CLONE_CHILD_CLEARTID); -1 while it is being started; 0: none. */
CPROF_AGENT_API int32_t cprof_agent_task_tid;
static uint8_t watchdog_stack[WATCHDOG_STACK] __attribute__((aligned(64)));

struct watch {
	pid_t pid;
	int pidfd;
	uint64_t session;
};
static struct watch watch;

static uint64_t raw_now_ns(void)
{
	struct timespec ts = { 0, 0 };

	RAW2(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void raw_sleep_tick(void)
{
	struct timespec ts = { 0, WATCHDOG_TICK_MS * 1000000L };

	RAW2(SYS_nanosleep, &ts, NULL);
}

static bool peer_gone(const struct watch *w)
{
	/* Pid 0: cprof is in a PID namespace we cannot see (we are in a
	 * container): the heartbeat alone tells. */
	if (w->pid == 0) {
		raw_sleep_tick();
		return false;
	}
	if (w->pidfd >= 0) {
		struct pollfd p = { .fd = w->pidfd, .events = POLLIN };

		return RAW3(SYS_poll, &p, 1, WATCHDOG_TICK_MS) > 0;
	}
	raw_sleep_tick();
	return RAW2(SYS_kill, w->pid, 0) == -ESRCH;
}

static int watchdog_main(void *arg)
{
	const struct watch *w = arg;
	uint64_t last_beat = 0, last_change = raw_now_ns();
	uint64_t silence_ns = (w->pidfd >= 0 ? CPROF_WIRE_HEARTBEAT_TIMEOUT_MS
					     : CPROF_WIRE_HEARTBEAT_ALONE_TIMEOUT_MS) * 1000000ull;

	RAW2(SYS_prctl, PR_SET_NAME, CPROF_WIRE_TASK_COMM);
	/* Published once named: a reader that finds this tid finds the name. */
	__atomic_store_n(&cprof_agent_task_tid, (int32_t)RAW0(SYS_gettid), __ATOMIC_RELEASE);
	for (;;) {
		bool gone = peer_gone(w);
		uint64_t now = raw_now_ns(), beat;

		/* A new session's attach holds the lock while it waits for us
		 * to be gone: its session number tells us without the lock. */
		if ((__atomic_load_n(&agent_session, __ATOMIC_RELAXED) & 0xffffffffu) != w->session)
			break;
		if (!agent_trylock())
			continue;
		if (!agent_session_running(w->session)) {
			agent_unlock();
			break;
		}
		if (gone) {
			agent_detach_locked(CPROF_DETACH_PEER_EXIT);
			agent_unlock();
			break;
		}
		beat = __atomic_load_n(&agent_ring.hdr->heartbeat, __ATOMIC_RELAXED);
		if (beat != last_beat) {
			last_beat = beat;
			last_change = now;
		} else if (now - last_change > silence_ns) {
			agent_detach_locked(CPROF_DETACH_HEARTBEAT);
			agent_unlock();
			break;
		}
		agent_poll_commands_locked();
		agent_unlock();
	}
	if (w->pidfd >= 0)
		RAW1(SYS_close, w->pidfd);
	return 0;
}

/* Waits up to @ms for the last session's task to be gone. */
static bool watchdog_wait_gone(int ms)
{
	uint64_t until = raw_now_ns() + (uint64_t)ms * 1000000ull;

	for (;;) {
		int32_t tid = __atomic_load_n(&cprof_agent_task_tid, __ATOMIC_ACQUIRE);
		uint64_t now = raw_now_ns();
		struct timespec left;

		if (tid == 0)
			return true;
		if (now >= until)
			return false;
		left.tv_sec = (time_t)((until - now) / 1000000000ull);
		left.tv_nsec = (long)((until - now) % 1000000000ull);
		RAW4(SYS_futex, &cprof_agent_task_tid, FUTEX_WAIT, tid, &left);
	}
}

int watchdog_start(pid_t cprof_pid, uint64_t session)
{
	const int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
			  CLONE_SYSVSEM | CLONE_CHILD_CLEARTID;
	uint64_t all = ~(uint64_t)0, old = 0;
	long tid;

	/* The last one leaves within a tick once its session is over. */
	if (!watchdog_wait_gone(5 * WATCHDOG_TICK_MS))
		return -EBUSY;
	watch.pid = cprof_pid;
	watch.session = session & 0xffffffffu;
	watch.pidfd = cprof_pid > 0 ? (int)RAW2(SYS_pidfd_open, cprof_pid, 0) : -1;
	if (watch.pidfd < 0)
		watch.pidfd = -1;
	/*
	 * Born with every signal blocked: it inherits this thread's mask. The
	 * system call itself, not pthread_sigmask(), which leaves glibc's
	 * SIGCANCEL open: a thread cancelled while it runs this (on cprof's
	 * detour, asleep in a cancellable wait before) would take the
	 * cancellation here, the session's lock held, and so would the task.
	 */
	RAW4(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, sizeof(all));
	__atomic_store_n(&cprof_agent_task_tid, -1, __ATOMIC_RELAXED);
	tid = clone(watchdog_main, watchdog_stack + sizeof(watchdog_stack), flags, &watch, NULL,
		    NULL, &cprof_agent_task_tid);
	if (tid < 0) {
		tid = -errno;
		__atomic_store_n(&cprof_agent_task_tid, 0, __ATOMIC_RELEASE);
	}
	RAW4(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, sizeof(old));
	if (tid < 0 && watch.pidfd >= 0)
		close(watch.pidfd);
	return tid < 0 ? (int)tid : 0;
}

void watchdog_forget(void)
{
	/* A fork child has no such task: only the thread that forked is. */
	cprof_agent_task_tid = 0;
}
