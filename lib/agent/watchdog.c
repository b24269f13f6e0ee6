/*
 * The "cprof-agent" thread: the target must never stay hooked to a cprof
 * that is gone. It wakes every 100 ms and detaches when
 *   - cprof's process exited, even by SIGKILL: a pidfd becomes readable
 *     (fallback without pidfd_open, Linux < 5.3: kill(pid, 0) says ESRCH);
 *   - cprof's heartbeat did not change for CPROF_WIRE_HEARTBEAT_TIMEOUT_MS
 *     (cprof stopped, hung, or in another PID namespace we cannot watch);
 * and it applies cprof's commands (start, stop, detach, rate). It exits when
 * its session is over, whoever ended it.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

#define WATCHDOG_TICK_MS 100

static bool peer_gone(int pidfd, pid_t pid)
{
	/* Pid 0: cprof is in a PID namespace we cannot see (we are in a
	 * container): the heartbeat alone tells. */
	if (pid == 0) {
		struct timespec ts = { 0, WATCHDOG_TICK_MS * 1000000L };

		nanosleep(&ts, NULL);
		return false;
	}
	if (pidfd >= 0) {
		struct pollfd p = { .fd = pidfd, .events = POLLIN };

		return poll(&p, 1, WATCHDOG_TICK_MS) > 0;
	}
	struct timespec ts = { 0, WATCHDOG_TICK_MS * 1000000L };

	nanosleep(&ts, NULL);
	return kill(pid, 0) != 0 && errno == ESRCH;
}

static void *watchdog_main(void *arg)
{
	uint64_t packed = (uint64_t)(uintptr_t)arg;
	pid_t pid = (pid_t)(packed >> 32);
	uint64_t session = packed & 0xffffffffu;
	uint64_t last_beat = 0, last_change = agent_now_ns();
	int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;

	prctl(PR_SET_NAME, "cprof-agent", 0, 0, 0);
	for (;;) {
		bool gone = peer_gone(pidfd, pid);
		uint64_t now = agent_now_ns(), beat;

		agent_lock();
		if (!agent_session_running(session)) {
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
		} else if (now - last_change > CPROF_WIRE_HEARTBEAT_TIMEOUT_MS * 1000000ull) {
			agent_detach_locked(CPROF_DETACH_HEARTBEAT);
			agent_unlock();
			break;
		}
		agent_poll_commands_locked();
		agent_unlock();
	}
	if (pidfd >= 0)
		close(pidfd);
	return NULL;
}

int watchdog_start(pid_t cprof_pid, uint64_t session)
{
	uint64_t packed = ((uint64_t)(uint32_t)cprof_pid << 32) | (session & 0xffffffffu);
	pthread_attr_t attr;
	sigset_t all, old;
	pthread_t t;
	int err;

	if (pthread_attr_init(&attr) != 0)
		return -ENOMEM;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 << 10);
	/* The program's signals are not for us: the thread blocks them all. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&t, &attr, watchdog_main, (void *)(uintptr_t)packed);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	return -err;
}
