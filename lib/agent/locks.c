/*
 * The hooks of block, mutex and threadcreate sessions (Go's three other
 * runtime profiles, for pthreads):
 *
 * - Every lock is tried first (trylock, trywait): when it is free, the hook
 *   costs that try and nothing else, no clock read. Only a lock that would
 *   block is timed around the real call.
 * - block: a wait of d nanoseconds at rate r is always recorded when d >= r,
 *   else with probability d / r; cprof counts the short ones as r
 *   nanoseconds (wire.h, EVENT), as Go's blockevent() and saveblockevent()
 *   do.
 * - mutex: a thread that waits registers in a small table keyed by the
 *   lock's address (the sum of waiters' start times and their number). An
 *   unlock of a lock with waiters is charged the time they have waited so
 *   far, n * now - sum, and their start times move to now, so that each
 *   nanosecond of waiting is charged once, to the thread that held the lock
 *   then (Go's mutex profile: the holder's unlock stack). One in `rate`
 *   charges is recorded.
 * - threadcreate: every successful pthread_create, with its stack.
 *
 * While no session of the kind runs, the hooks call the real function and
 * nothing else (they are not even patched in, except after a dlopen race).
 */
#include <errno.h>
#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"

/* ---- the waiters' table -------------------------------------------------- */

#define WAIT_SLOTS 1024 /* locks with waiters at once; more are not charged */
#define WAIT_STRIPES 64

struct wait_slot {
	uint64_t lock;     /* address; 0 = free */
	uint64_t waiters;  /* threads waiting now */
	uint64_t start_sum; /* sum of their start times (ns), moved by charges */
};

static struct wait_slot wait_slots[WAIT_SLOTS];
static int wait_stripe_locks[WAIT_STRIPES];
/* Waiters anywhere: an unlock looks at the table only when this is not 0. */
static uint64_t waiters_total;

/*
 * A stripe is held with the thread's recursion guard set: a signal handler
 * that interrupts it and calls a hooked lock function then goes straight to
 * the real one instead of spinning on the stripe its own thread holds.
 * Every caller comes from a hook that found the guard clear.
 */
static void stripe_lock(unsigned s)
{
	agent_in_hook = 1;
	agent_lock_take(&wait_stripe_locks[s]);
}

static void stripe_unlock(unsigned s)
{
	agent_lock_give(&wait_stripe_locks[s]);
	agent_in_hook = 0;
}

static unsigned slot_hash(uint64_t lock)
{
	return (unsigned)((lock * 0x9e3779b97f4a7c15ull) >> 54); /* 10 bits */
}

/*
 * The slot of @lock within its stripe's probe window (the 16 slots after
 * the hash, all in one stripe since 1024 / 64 = 16 and the window wraps
 * inside it), creating it if @create. Stripe lock held.
 */
static struct wait_slot *slot_find(uint64_t lock, bool create)
{
	unsigned h = slot_hash(lock), base = h & ~15u;
	struct wait_slot *free_slot = NULL;

	for (unsigned i = 0; i < 16; i++) {
		struct wait_slot *s = &wait_slots[base + ((h + i) & 15u)];

		if (s->lock == lock)
			return s;
		if (!s->lock && !free_slot)
			free_slot = s;
	}
	if (create && free_slot) {
		free_slot->lock = lock;
		free_slot->waiters = 0;
		free_slot->start_sum = 0;
		return free_slot;
	}
	return NULL;
}

static unsigned stripe_of(uint64_t lock)
{
	return slot_hash(lock) >> 4;
}

static void wait_begin(uint64_t lock, uint64_t start)
{
	unsigned st = stripe_of(lock);
	struct wait_slot *s;

	stripe_lock(st);
	s = slot_find(lock, true);
	if (s) {
		s->waiters++;
		s->start_sum += start;
		__atomic_fetch_add(&waiters_total, 1, __ATOMIC_RELAXED);
	}
	stripe_unlock(st);
}

/*
 * The waiter got the lock. Its start time may have been moved forward by
 * charges meanwhile: take out its share, never more than is left.
 */
static void wait_end(uint64_t lock, uint64_t start)
{
	unsigned st = stripe_of(lock);
	struct wait_slot *s;

	stripe_lock(st);
	s = slot_find(lock, false);
	if (s && s->waiters) {
		uint64_t share = s->start_sum / s->waiters;

		(void)start;
		s->start_sum -= share;
		if (--s->waiters == 0)
			s->lock = 0;
		__atomic_fetch_sub(&waiters_total, 1, __ATOMIC_RELAXED);
	}
	stripe_unlock(st);
}

/* Nanoseconds the waiters of @lock waited since the last charge. */
static uint64_t wait_charge(uint64_t lock, uint64_t now)
{
	unsigned st = stripe_of(lock);
	struct wait_slot *s;
	uint64_t delay = 0;

	stripe_lock(st);
	s = slot_find(lock, false);
	if (s && s->waiters) {
		uint64_t until_now = s->waiters * now;

		if (until_now > s->start_sum)
			delay = until_now - s->start_sum;
		s->start_sum = until_now;
	}
	stripe_unlock(st);
	return delay;
}

void locks_reset(void)
{
	memset(wait_slots, 0, sizeof(wait_slots));
	__atomic_store_n(&waiters_total, 0, __ATOMIC_RELAXED);
}

void locks_reset_after_fork(void)
{
	/* A stripe another thread of the parent held at the fork stays held
	 * in the child, where that thread does not exist. */
	memset(wait_stripe_locks, 0, sizeof(wait_stripe_locks));
	locks_reset();
}

int locks_resolve(void)
{
	/* Once: a later attach may run on a thread stopped inside malloc
	 * (inject.c), where dlsym has no business. */
	if (agent_real.pthread_mutex_trylock && agent_real.pthread_rwlock_tryrdlock &&
	    agent_real.pthread_rwlock_trywrlock && agent_real.sem_trywait)
		return 0;
	agent_real.pthread_mutex_trylock = dlsym(RTLD_DEFAULT, "pthread_mutex_trylock");
	agent_real.pthread_rwlock_tryrdlock = dlsym(RTLD_DEFAULT, "pthread_rwlock_tryrdlock");
	agent_real.pthread_rwlock_trywrlock = dlsym(RTLD_DEFAULT, "pthread_rwlock_trywrlock");
	agent_real.sem_trywait = dlsym(RTLD_DEFAULT, "sem_trywait");
	if (!agent_real.pthread_mutex_trylock || !agent_real.pthread_rwlock_tryrdlock ||
	    !agent_real.pthread_rwlock_trywrlock || !agent_real.sem_trywait)
		return -ENOENT;
	return 0;
}

/* ---- records ------------------------------------------------------------- */

uint64_t agent_block_rate = CPROF_WIRE_BLOCK_RATE_DEFAULT;
uint64_t agent_mutex_rate = CPROF_WIRE_MUTEX_RATE_DEFAULT;

static bool session_wants(uint32_t events)
{
	return (__atomic_load_n(&agent_events, __ATOMIC_RELAXED) & events) &&
	       __atomic_load_n(&agent_sampling, __ATOMIC_RELAXED);
}

/* An EVENT with this thread's stack (registers taken here). */
static __attribute__((noinline)) void record_event(uint32_t kind, uint64_t object,
						    uint64_t value, uint64_t rate)
{
	struct cprof_wire_event *r;
	uint64_t regs[CPROF_REG_COUNT];
	uint32_t bytes;
	size_t limit, stack;
	bool direct, walked;
	int saved_errno = errno;

	if (agent_in_hook)
		return;
	agent_in_hook = 1;
	agent_capture_regs(regs);
	/* All of it: a walk reads up to the stack's top, a copy less. */
	limit = agent_stack_limit(regs[CPROF_REG_RSP], 64u << 20, &direct);
	event_lock();
	r = ring_reserve(sizeof(*r) + CPROF_WIRE_STACK_MAX);
	if (!r)
		goto out_unlock;
	stack = agent_sample_stack(r->stack, regs, limit, direct, &walked);
	if (stack == 0)
		AGENT_COUNT(errors, 1);
	r->time_ns = agent_now_ns();
	r->tid = agent_tid();
	r->kind = kind;
	r->object = object;
	r->value = value;
	r->rate = rate;
	memcpy(r->regs, regs, sizeof(regs));
	r->stack_size = (uint32_t)stack;
	r->flags = walked ? CPROF_EVENT_WALKED : 0;
	bytes = (uint32_t)((sizeof(*r) + stack + 7) & ~(size_t)7);
	r->hdr.type = CPROF_REC_EVENT;
	r->hdr.size = bytes;
	AGENT_COUNT_LOCKED(samples, 1);
	ring_commit(bytes);
out_unlock:
	event_unlock();
	agent_patch_if_pending();
	agent_in_hook = 0;
	errno = saved_errno;
}

/* A wait of @ns that ended now: block's sampling (see the top). */
static __attribute__((noinline)) void blocked(uint32_t kind, const void *obj, uint64_t ns)
{
	uint64_t rate = __atomic_load_n(&agent_block_rate, __ATOMIC_RELAXED);

	if (!session_wants(CPROF_EVENTS_BLOCK))
		return;
	if (rate > 1 && ns < rate && sampler_random() % rate >= ns)
		return;
	record_event(kind, (uint64_t)(uintptr_t)obj, ns, rate);
}

/* An unlock: charge the waiters' delay to this stack (1 in rate). */
static __attribute__((noinline)) void charge_unlock(uint32_t kind, const void *obj)
{
	uint64_t rate = __atomic_load_n(&agent_mutex_rate, __ATOMIC_RELAXED);
	uint64_t delay = wait_charge((uint64_t)(uintptr_t)obj, agent_now_ns());

	if (!delay)
		return;
	if (rate > 1 && sampler_random() % rate != 0)
		return;
	record_event(kind, (uint64_t)(uintptr_t)obj, delay, rate);
}

static inline bool tracking_waits(void)
{
	return session_wants(CPROF_EVENTS_BLOCK | CPROF_EVENTS_MUTEX);
}

/* ---- the hooks ----------------------------------------------------------- */

/*
 * The common shape of a lock hook: try; if busy, time the real call, with
 * the waiter registered for the mutex profile meanwhile. Whatever else the
 * try answers is the caller's answer: a lock taken (0, or EOWNERDEAD from a
 * robust mutex whose owner died) or an error the real call would give too
 * (ENOTRECOVERABLE, EAGAIN, EINVAL).
 */
#define TIMED_WAIT(kind, obj, call)                                                     \
	do {                                                                            \
		uint64_t t0_ = agent_now_ns(), t1_;                                     \
		int r_;                                                                 \
		wait_begin((uint64_t)(uintptr_t)(obj), t0_);                            \
		r_ = (call);                                                            \
		t1_ = agent_now_ns();                                                   \
		wait_end((uint64_t)(uintptr_t)(obj), t0_);                              \
		blocked((kind), (obj), t1_ - t0_);                                      \
		return r_;                                                              \
	} while (0)

#define TRY_THEN_TIMED_WAIT(kind, obj, try_call, call)                                  \
	do {                                                                            \
		int try_ = (try_call);                                                  \
		if (try_ != EBUSY)                                                      \
			return try_;                                                    \
		TIMED_WAIT(kind, obj, call);                                            \
	} while (0)

/*
 * glibc's trylock of a robust mutex made not recoverable answers
 * ENOTRECOVERABLE and leaves it locked (nptl unlocks it only when the word
 * held its own id, which its successful exchange had just replaced): a
 * robust mutex is never tried, its real call is timed whatever it does.
 */
static inline bool mutex_robust(const pthread_mutex_t *m)
{
	return m->__data.__kind & 0x10; /* glibc's PTHREAD_MUTEX_ROBUST_NORMAL_NP */
}

/*
 * glibc checks a deadline before it tries some locks (rwlocks, semaphores):
 * a call with one it would refuse goes to the real function alone, which
 * answers as it would unhooked (NULL included).
 */
static inline bool deadline_valid(const struct timespec *t)
{
	return t && t->tv_nsec >= 0 && t->tv_nsec < 1000000000L;
}

int hook_pthread_mutex_lock(pthread_mutex_t *m)
{
	if (likely(!tracking_waits()) || agent_in_hook)
		return agent_real.pthread_mutex_lock(m);
	if (mutex_robust(m))
		TIMED_WAIT(CPROF_EV_MUTEX_WAIT, m, agent_real.pthread_mutex_lock(m));
	TRY_THEN_TIMED_WAIT(CPROF_EV_MUTEX_WAIT, m, agent_real.pthread_mutex_trylock(m),
			    agent_real.pthread_mutex_lock(m));
}

int hook_pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t)
{
	if (likely(!tracking_waits()) || agent_in_hook || !deadline_valid(t))
		return agent_real.pthread_mutex_timedlock(m, t);
	if (mutex_robust(m))
		TIMED_WAIT(CPROF_EV_MUTEX_WAIT, m, agent_real.pthread_mutex_timedlock(m, t));
	TRY_THEN_TIMED_WAIT(CPROF_EV_MUTEX_WAIT, m, agent_real.pthread_mutex_trylock(m),
			    agent_real.pthread_mutex_timedlock(m, t));
}

int hook_pthread_mutex_unlock(pthread_mutex_t *m)
{
	if (unlikely(__atomic_load_n(&waiters_total, __ATOMIC_RELAXED) != 0) &&
	    session_wants(CPROF_EVENTS_MUTEX) && !agent_in_hook)
		charge_unlock(CPROF_EV_MUTEX_UNLOCK, m);
	return agent_real.pthread_mutex_unlock(m);
}

int hook_pthread_rwlock_rdlock(pthread_rwlock_t *l)
{
	if (likely(!tracking_waits()) || agent_in_hook)
		return agent_real.pthread_rwlock_rdlock(l);
	TRY_THEN_TIMED_WAIT(CPROF_EV_RWLOCK_RD_WAIT, l, agent_real.pthread_rwlock_tryrdlock(l),
			    agent_real.pthread_rwlock_rdlock(l));
}

int hook_pthread_rwlock_timedrdlock(pthread_rwlock_t *l, const struct timespec *t)
{
	if (likely(!tracking_waits()) || agent_in_hook || !deadline_valid(t))
		return agent_real.pthread_rwlock_timedrdlock(l, t);
	TRY_THEN_TIMED_WAIT(CPROF_EV_RWLOCK_RD_WAIT, l, agent_real.pthread_rwlock_tryrdlock(l),
			    agent_real.pthread_rwlock_timedrdlock(l, t));
}

int hook_pthread_rwlock_wrlock(pthread_rwlock_t *l)
{
	if (likely(!tracking_waits()) || agent_in_hook)
		return agent_real.pthread_rwlock_wrlock(l);
	TRY_THEN_TIMED_WAIT(CPROF_EV_RWLOCK_WR_WAIT, l, agent_real.pthread_rwlock_trywrlock(l),
			    agent_real.pthread_rwlock_wrlock(l));
}

int hook_pthread_rwlock_timedwrlock(pthread_rwlock_t *l, const struct timespec *t)
{
	if (likely(!tracking_waits()) || agent_in_hook || !deadline_valid(t))
		return agent_real.pthread_rwlock_timedwrlock(l, t);
	TRY_THEN_TIMED_WAIT(CPROF_EV_RWLOCK_WR_WAIT, l, agent_real.pthread_rwlock_trywrlock(l),
			    agent_real.pthread_rwlock_timedwrlock(l, t));
}

int hook_pthread_rwlock_unlock(pthread_rwlock_t *l)
{
	if (unlikely(__atomic_load_n(&waiters_total, __ATOMIC_RELAXED) != 0) &&
	    session_wants(CPROF_EVENTS_MUTEX) && !agent_in_hook)
		charge_unlock(CPROF_EV_RWLOCK_UNLOCK, l);
	return agent_real.pthread_rwlock_unlock(l);
}

/* A condition wait always blocks (Go's block profile counts Cond.Wait);
 * it is no contention of the condition itself: no waiter registered. It
 * is a cancellation point: nothing is held across the real call, so a
 * cancellation unwinding through this frame leaves nothing behind. */
int hook_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
	uint64_t t0;
	int r;

	if (likely(!session_wants(CPROF_EVENTS_BLOCK)) || agent_in_hook)
		return agent_real.pthread_cond_wait(c, m);
	t0 = agent_now_ns();
	r = agent_real.pthread_cond_wait(c, m);
	blocked(CPROF_EV_COND_WAIT, c, agent_now_ns() - t0);
	return r;
}

int hook_pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t)
{
	uint64_t t0;
	int r;

	if (likely(!session_wants(CPROF_EVENTS_BLOCK)) || agent_in_hook)
		return agent_real.pthread_cond_timedwait(c, m, t);
	t0 = agent_now_ns();
	r = agent_real.pthread_cond_timedwait(c, m, t);
	blocked(CPROF_EV_COND_WAIT, c, agent_now_ns() - t0);
	return r;
}

/*
 * Semaphores answer through errno: a busy try leaves EAGAIN there, which
 * the caller of a wait that then succeeds must not see. A try that fails
 * otherwise (EINVAL) hands the call to the real wait, untimed.
 */
static inline bool sem_busy(sem_t *s, int *ret)
{
	int saved_errno = errno;

	if (agent_real.sem_trywait(s) == 0) {
		*ret = 0;
		return false;
	}
	if (errno != EAGAIN) {
		errno = saved_errno;
		*ret = -1;
		return false;
	}
	errno = saved_errno;
	return true;
}

int hook_sem_wait(sem_t *s)
{
	uint64_t t0;
	int r;

	if (likely(!session_wants(CPROF_EVENTS_BLOCK)) || agent_in_hook)
		return agent_real.sem_wait(s);
	if (!sem_busy(s, &r))
		return r == 0 ? 0 : agent_real.sem_wait(s);
	t0 = agent_now_ns();
	r = agent_real.sem_wait(s);
	blocked(CPROF_EV_SEM_WAIT, s, agent_now_ns() - t0);
	return r;
}

int hook_sem_timedwait(sem_t *s, const struct timespec *t)
{
	uint64_t t0;
	int r;

	if (likely(!session_wants(CPROF_EVENTS_BLOCK)) || agent_in_hook || !deadline_valid(t))
		return agent_real.sem_timedwait(s, t);
	if (!sem_busy(s, &r))
		return r == 0 ? 0 : agent_real.sem_timedwait(s, t);
	t0 = agent_now_ns();
	r = agent_real.sem_timedwait(s, t);
	blocked(CPROF_EV_SEM_WAIT, s, agent_now_ns() - t0);
	return r;
}

int hook_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	int r = agent_real.pthread_create(t, a, fn, arg);

	if (r == 0 && session_wants(CPROF_EVENTS_THREADCREATE) && !agent_in_hook)
		record_event(CPROF_EV_THREAD_CREATE, (uint64_t)*t, 1, 1);
	return r;
}
