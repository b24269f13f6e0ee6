/*
 * The functions the patched GOT entries point to. Each calls the real
 * function first, then pays for sampling only a thread-local compare and
 * subtraction (the countdown, sampler.c); frees pay one load while no sampled
 * block is live, a filter bit otherwise, and a lock-free probe only when that
 * bit is set (liveset.c).
 *
 * Everything beyond the countdown runs in noinline functions with the
 * recursion guard set: what they call may allocate, and those allocations
 * must pass straight through. They keep errno as the real call left it.
 */
#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

struct real_funcs agent_real;

uint64_t agent_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Write an ALLOC for @addr: registers here, and the frames above them
 * walked (walk.c) or, failing that, the stack above them copied. */
static __attribute__((noinline)) void record_alloc(uint64_t addr, uint64_t size)
{
	struct cprof_wire_alloc *r;
	uint64_t regs[CPROF_REG_COUNT];
	uint32_t tid = agent_tid(), bytes;
	size_t stack, limit;
	bool direct, walked;

	agent_capture_regs(regs);
	liveset_prefetch(addr);
	/* How far the stack is known: all of it for a walk, a copy's worth
	 * for a copy. */
	limit = agent_stack_limit(regs[CPROF_REG_RSP], 64u << 20, &direct);
	event_lock();
	r = ring_reserve(sizeof(*r) + CPROF_WIRE_STACK_MAX);
	if (!r) {
		/* Live all the same: what is in use comes from the set. */
		AGENT_COUNT_LOCKED(lost_allocs, 1);
		AGENT_COUNT_LOCKED(lost_alloc_bytes, size);
		if (!liveset_insert(addr, size | CPROF_LIVE_UNRECORDED))
			AGENT_COUNT_LOCKED(untracked, 1);
		event_unlock();
		return;
	}
	stack = agent_sample_stack(r->stack, regs, limit, direct, &walked);
	if (stack == 0)
		AGENT_COUNT(errors, 1);
	r->time_ns = 0; /* not recorded (wire.h) */
	r->tid = tid;
	r->flags = (walked ? CPROF_ALLOC_WALKED : 0) |
		   (liveset_insert(addr, size) ? 0 : CPROF_ALLOC_UNTRACKED);
	r->address = addr;
	r->size = size;
	r->rate = __atomic_load_n(&agent_rate, __ATOMIC_RELAXED);
	memcpy(r->regs, regs, sizeof(regs));
	r->stack_size = (uint32_t)stack;
	r->pad = 0;
	bytes = (uint32_t)((sizeof(*r) + stack + 7) & ~(size_t)7);
	r->hdr.type = CPROF_REC_ALLOC;
	r->hdr.size = bytes;
	if (r->flags & CPROF_ALLOC_UNTRACKED)
		AGENT_COUNT_LOCKED(untracked, 1);
	AGENT_COUNT_LOCKED(samples, 1);
	AGENT_COUNT_LOCKED(sampled_bytes, size);
	ring_commit(bytes);
	event_unlock();
}

/* Event lock held. */
static void record_free_locked(uint64_t addr, uint64_t size)
{
	struct cprof_wire_free *r = ring_reserve(sizeof(*r));

	if (!r)
		return;
	r->hdr.type = CPROF_REC_FREE;
	r->hdr.size = sizeof(*r);
	r->time_ns = 0; /* not recorded (wire.h) */
	r->address = addr;
	r->size = size;
	r->tid = agent_tid();
	r->pad = 0;
	AGENT_COUNT_LOCKED(frees, 1);
	ring_commit(sizeof(*r));
}

void hooks_emit_free(uint64_t addr, uint64_t size)
{
	/* cprof never heard of an unrecorded block: nothing to tell. */
	if (size & CPROF_LIVE_UNRECORDED)
		return;
	event_lock();
	record_free_locked(addr, size);
	event_unlock();
}

/* The countdown ran out (or was never drawn). */
__attribute__((noinline)) void hooks_alloc_slow(void *p, uint64_t size)
{
	int saved_errno = errno;

	if (agent_in_hook)
		return;
	agent_in_hook = 1;
	if (sampler_should_sample(size) && p && __atomic_load_n(&agent_sampling, __ATOMIC_RELAXED))
		record_alloc((uint64_t)(uintptr_t)p, size);
	agent_patch_if_pending();
	agent_in_hook = 0;
	errno = saved_errno;
}

/*
 * The hot entry points (malloc, calloc) take the countdown BEFORE the real
 * call: when it does not run out, the hook ends in a tail jump to the real
 * function (no frame, no call/ret of its own, nothing kept across the call).
 * A failed allocation then still counts its bytes, which only matters for
 * sizes that cannot be satisfied, a vanishing share of any real program's
 * bytes.
 */

/* Remove @addr from the live set if it is there; true with its size. */
static __attribute__((noinline)) bool take_sampled(uint64_t addr, uint64_t *ret_size)
{
	bool hit;

	if (!liveset_maybe_contains(addr))
		return false;
	event_lock();
	hit = liveset_remove(addr, ret_size);
	event_unlock();
	return hit;
}

__attribute__((noinline)) void hooks_free_slow(void *p)
{
	uint64_t size;
	int saved_errno = errno;

	agent_in_hook = 1;
	if (take_sampled((uint64_t)(uintptr_t)p, &size))
		hooks_emit_free((uint64_t)(uintptr_t)p, size);
	else
		AGENT_COUNT(filter_false_hits, 1);
	agent_in_hook = 0;
	errno = saved_errno;
}

static void hook_free(void *p)
{
	hooks_before_free(p);
	agent_real.free(p);
}

/* The countdown ran out: allocate, then sample (alloc_slow draws anew). */
static __attribute__((noinline)) void *malloc_slow(size_t size)
{
	void *p = agent_real.malloc(size);

	hooks_alloc_slow(p, size);
	return p;
}

static void *hook_malloc(size_t size)
{
	if (hooks_countdown_take(size))
		return agent_real.malloc(size);
	return malloc_slow(size);
}

static __attribute__((noinline)) void *calloc_slow(size_t nmemb, size_t size, size_t total)
{
	void *p = agent_real.calloc(nmemb, size);

	hooks_alloc_slow(p, total);
	return p;
}

static void *hook_calloc(size_t nmemb, size_t size)
{
	size_t total;

	if (__builtin_mul_overflow(nmemb, size, &total))
		total = SIZE_MAX;
	if (hooks_countdown_take(total))
		return agent_real.calloc(nmemb, size);
	return calloc_slow(nmemb, size, total);
}

/*
 * realloc of a sampled block: FREE of the old block, then the new block is a
 * fresh allocation that is sampled (or not) like any other, so the sampling
 * probabilities cprof corrects for stay true. The old block leaves the set
 * before the real call (it may be freed inside) and comes back if the call
 * fails, when the old block is still live.
 */
__attribute__((noinline)) void hooks_realloc_finish(void *old, uint64_t old_size, bool failed)
{
	int saved_errno = errno;

	agent_in_hook = 1;
	if (failed) {
		event_lock();
		liveset_insert((uint64_t)(uintptr_t)old, old_size);
		event_unlock();
	} else {
		hooks_emit_free((uint64_t)(uintptr_t)old, old_size);
	}
	agent_in_hook = 0;
	errno = saved_errno;
}

__attribute__((noinline)) bool hooks_realloc_take(void *old, uint64_t *ret_size)
{
	bool hit;

	agent_in_hook = 1;
	hit = take_sampled((uint64_t)(uintptr_t)old, ret_size);
	agent_in_hook = 0;
	return hit;
}

static void *hook_realloc(void *old, size_t size)
{
	uint64_t old_size = 0;
	bool was = unlikely(hooks_may_be_sampled(old)) && hooks_realloc_take(old, &old_size);
	void *p = agent_real.realloc(old, size);

	if (unlikely(was))
		hooks_realloc_finish(old, old_size, !p && size != 0);
	if (p)
		hooks_after_alloc(p, size);
	return p;
}

static void *hook_reallocarray(void *old, size_t nmemb, size_t size)
{
	uint64_t old_size = 0;
	bool was = unlikely(hooks_may_be_sampled(old)) && hooks_realloc_take(old, &old_size);
	void *p = agent_real.reallocarray(old, nmemb, size);
	size_t total;

	if (__builtin_mul_overflow(nmemb, size, &total))
		total = SIZE_MAX;
	if (unlikely(was))
		hooks_realloc_finish(old, old_size, !p && total != 0);
	if (p)
		hooks_after_alloc(p, total);
	return p;
}

static int hook_posix_memalign(void **ret, size_t alignment, size_t size)
{
	int err = agent_real.posix_memalign(ret, alignment, size);

	if (err == 0)
		hooks_after_alloc(*ret, size);
	return err;
}

static void *hook_aligned_alloc(size_t alignment, size_t size)
{
	void *p = agent_real.aligned_alloc(alignment, size);

	hooks_after_alloc(p, size);
	return p;
}

static void *hook_memalign(size_t alignment, size_t size)
{
	void *p = agent_real.memalign(alignment, size);

	hooks_after_alloc(p, size);
	return p;
}

static void *hook_valloc(size_t size)
{
	void *p = agent_real.valloc(size);

	hooks_after_alloc(p, size);
	return p;
}

static void *hook_pvalloc(size_t size)
{
	void *p = agent_real.pvalloc(size);

	hooks_after_alloc(p, size);
	return p;
}

/* Objects loaded later get their GOT patched too. */
static void *hook_dlopen(const char *file, int flags)
{
	void *h = agent_real.dlopen(file, flags);

	if (h && !agent_in_hook) {
		int saved_errno = errno;

		agent_in_hook = 1;
		agent_patch_new_objects();
		agent_in_hook = 0;
		errno = saved_errno;
	}
	return h;
}

#define HOOK(fn, ev) { #fn, (void *)hook_##fn, (void **)&agent_real.fn, (ev), NULL }
/* x86-64's first glibc version: the condition variables before 2.3.2 (got.c). */
#define HOOK_COMPAT(fn, ev, ver) { #fn, (void *)hook_##fn, (void **)&agent_real.fn, (ev), (ver) }
#define HEAP CPROF_EVENTS_HEAP
#define WAITS (CPROF_EVENTS_BLOCK | CPROF_EVENTS_MUTEX)

const struct hook_entry agent_hooks[] = {
	HOOK(malloc, HEAP),
	HOOK(calloc, HEAP),
	HOOK(realloc, HEAP),
	HOOK(reallocarray, HEAP),
	HOOK(free, HEAP),
	HOOK(posix_memalign, HEAP),
	HOOK(aligned_alloc, HEAP),
	HOOK(memalign, HEAP),
	HOOK(valloc, HEAP),
	HOOK(pvalloc, HEAP),
	HOOK(dlopen, CPROF_EVENTS_ALL),
	HOOK(pthread_mutex_lock, WAITS),
	HOOK(pthread_mutex_timedlock, WAITS),
	HOOK(pthread_mutex_unlock, CPROF_EVENTS_MUTEX),
	HOOK(pthread_rwlock_rdlock, WAITS),
	HOOK(pthread_rwlock_timedrdlock, WAITS),
	HOOK(pthread_rwlock_wrlock, WAITS),
	HOOK(pthread_rwlock_timedwrlock, WAITS),
	HOOK(pthread_rwlock_unlock, CPROF_EVENTS_MUTEX),
	HOOK_COMPAT(pthread_cond_wait, CPROF_EVENTS_BLOCK, "GLIBC_2.2.5"),
	HOOK_COMPAT(pthread_cond_timedwait, CPROF_EVENTS_BLOCK, "GLIBC_2.2.5"),
	HOOK(sem_wait, CPROF_EVENTS_BLOCK),
	HOOK(sem_timedwait, CPROF_EVENTS_BLOCK),
	HOOK(pthread_create, CPROF_EVENTS_THREADCREATE),
};
const size_t agent_nr_hooks = sizeof(agent_hooks) / sizeof(agent_hooks[0]);
uint32_t agent_events;

uintptr_t hooks_allocator_marks[HOOKS_ALLOCATOR_MARKS];

/* One address in each object that implements the allocator, unless it is
 * glibc's (agent.h): its malloc when that is not libc's, and the names
 * only jemalloc, mimalloc and tcmalloc define. */
static void find_allocator_objects(void)
{
	static const char *const own[] = { "mallocx", "mi_malloc", "tc_malloc" };
	Dl_info m, libc;

	memset(hooks_allocator_marks, 0, sizeof(hooks_allocator_marks));
	if (dladdr((void *)agent_real.malloc, &m) && dladdr((void *)gnu_get_libc_version, &libc) &&
	    m.dli_fbase != libc.dli_fbase)
		hooks_allocator_marks[0] = (uintptr_t)agent_real.malloc;
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
		hooks_allocator_marks[i + 1] = (uintptr_t)dlsym(RTLD_DEFAULT, own[i]);
}

static int hooks_resolve_all(void)
{
	for (size_t i = 0; i < agent_nr_hooks; i++) {
		if (*agent_hooks[i].real)
			continue;
		/* The definition the program's own calls bind to (an
		 * interposed allocator included); never ours: ours are hidden. */
		*agent_hooks[i].real = dlsym(RTLD_DEFAULT, agent_hooks[i].name);
	}
	/* Without the core four there is nothing sensible to hook. */
	if (!agent_real.malloc || !agent_real.free || !agent_real.calloc || !agent_real.realloc)
		return -ENOENT;
	find_allocator_objects();
	hooks_api_resolve();
	return locks_resolve();
}

/*
 * Once, at the first attach that gets this far: a dlsym that finds nothing
 * allocates its error (glibc's _dl_exception_create_format), and once an
 * attach has succeeded the next may run on a thread stopped inside malloc
 * (inject/agent-path.c, inject_warm_agent()): there it waited for the
 * arena lock its own thread held, with the agent's lock taken, and every
 * later attach waited on that. One that failed leaves the agent cold, and
 * the next attach, judged as a first load, tries again.
 */
int hooks_resolve(void)
{
	static bool resolved;
	int r;

	if (resolved)
		return 0;
	r = hooks_resolve_all();
	resolved = r == 0;
	return r;
}

static const struct hook_entry *find_in(const struct hook_entry *t, size_t n, const char *name,
					uint32_t events)
{
	for (size_t i = 0; i < n; i++)
		if (*t[i].real && (t[i].events & events) && strcmp(name, t[i].name) == 0)
			return &t[i];
	return NULL;
}

const struct hook_entry *hooks_find(const char *name)
{
	uint32_t events = __atomic_load_n(&agent_events, __ATOMIC_RELAXED);

	const struct hook_entry *h;

	/* Cheap reject: every hooked name starts with one of these. */
	switch (name[0]) {
	case 'm': case 'c': case 'r': case 'f': case 'p': case 'a': case 'v': case 'd': case 's':
	case '_': case 'x':
		break;
	default:
		return NULL;
	}
	h = find_in(agent_hooks, agent_nr_hooks, name, events);
	return h ? h : find_in(agent_api_hooks, agent_nr_api_hooks, name, events);
}

bool hooks_is_hook(uint64_t value)
{
	for (size_t i = 0; i < agent_nr_hooks; i++)
		if ((uint64_t)(uintptr_t)agent_hooks[i].hook == value)
			return true;
	for (size_t i = 0; i < agent_nr_api_hooks; i++)
		if ((uint64_t)(uintptr_t)agent_api_hooks[i].hook == value)
			return true;
	return false;
}
