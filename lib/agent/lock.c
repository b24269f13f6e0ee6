/*
 * The agent's locks (event_lock, the session's, the wait table's stripes):
 * a waiter spins briefly, then sleeps on the word (FUTEX_WAIT) until the
 * holder's unlock wakes it. Never a spin alone: a program's SCHED_FIFO
 * thread that waits behind a normal one preempted on its CPU would keep
 * that CPU from the holder, and yield to nobody of a lower priority, until
 * the kernel's real-time throttling let the holder run (about a second).
 *
 * The word: 0 free, 1 held, 2 held and maybe waited on (Drepper's
 * "Futexes Are Tricky", mutex 2). Raw system calls only (raw.h).
 */
#include <linux/futex.h>

#include "agent.h"
#include "raw.h"

/* The holder copies a few KiB at most: most waits end within this. */
#define LOCK_SPINS 100

bool agent_lock_try(int *word)
{
	int unheld = 0;

	return __atomic_compare_exchange_n(word, &unheld, 1, false, __ATOMIC_ACQUIRE,
					   __ATOMIC_RELAXED);
}

void agent_lock_take(int *word)
{
	int c;

	for (int i = 0; i < LOCK_SPINS; i++) {
		if (agent_lock_try(word))
			return;
		__builtin_ia32_pause();
	}
	c = __atomic_exchange_n(word, 2, __ATOMIC_ACQUIRE);
	while (c != 0) {
		RAW4(SYS_futex, word, FUTEX_WAIT_PRIVATE, 2, NULL);
		c = __atomic_exchange_n(word, 2, __ATOMIC_ACQUIRE);
	}
}

void agent_lock_give(int *word)
{
	if (__atomic_exchange_n(word, 0, __ATOMIC_RELEASE) == 2)
		RAW3(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1);
}
