/*
 * Private declarations of cprof-agent.so. Everything here is hidden (the
 * agent lives in another program's symbol namespace). Rooms:
 *   attach.c    the exported API, the session (memfd, state, fork)
 *   got.c       GOT walking, patching and restoring
 *   hooks.c     the allocator hooks and the real functions they call
 *   sampler.c   per-thread countdown, PRNG, exponential draws
 *   liveset.c   the set of sampled live blocks
 *   ring.c      records into the memfd's ring
 *   capture.c   registers and stack bytes of the sampling thread
 *   watchdog.c  the "cprof-agent" task: peer death, heartbeat, commands
 *               (no thread of glibc's: what it runs follows raw.h's rules)
 *   locks.c     the pthread/semaphore hooks: block, mutex, threadcreate
 *   lock.c      the agent's own lock: a short spin, then a futex wait
 *
 * Rules for code reachable from a hook: no printing, no exit, no sleeping
 * but a wait for the agent's own locks (lock.c), and anything that may
 * allocate runs with the thread's recursion guard (agent_in_hook) set.
 */
#ifndef CPROF_AGENT_PRIVATE_H
#define CPROF_AGENT_PRIVATE_H

#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "wire.h"

#define HIDDEN __attribute__((visibility("hidden")))
/* Static TLS: no __tls_get_addr (which may allocate) on the fast path. */
#define AGENT_TLS __thread __attribute__((tls_model("initial-exec")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define AGENT_DEFAULT_RATE (512u << 10)

/* --- sampler.c ------------------------------------------------------------ */

/* Bytes this thread may still allocate before the next sample. 0 = not drawn. */
extern AGENT_TLS uint64_t agent_countdown HIDDEN;
/* Recursion guard: set while the thread runs agent code that may allocate. */
extern AGENT_TLS int agent_in_hook HIDDEN;
/* Sampling rate the heap's hooks use (bytes); written by attach and the
 * watchdog, as the lock hooks' rates (locks.c) are. */
extern uint64_t agent_rate HIDDEN;

/*
 * Called by a hook when an allocation of @size bytes is not below the
 * countdown. Returns true when the allocation is to be sampled; sets the
 * next countdown in any case. A thread's first call draws its countdown and
 * then decides like any other call.
 */
bool sampler_should_sample(uint64_t size) HIDDEN;
/* A gap drawn from Exp(mean @rate), rounded up; 0 when @rate is 1. */
uint64_t sampler_draw(uint64_t rate) HIDDEN;
/* 64 random bits from this thread's generator. */
uint64_t sampler_random(void) HIDDEN;
/* -ln(x) for x in (0, 1]; relative error below 1e-6 (see sampler.c). */
double sampler_neg_log(double x) HIDDEN;

/* --- capture.c ------------------------------------------------------------ */

/* Stores the caller's registers (DWARF order); rip = return address. */
void agent_capture_regs(uint64_t regs[CPROF_REG_COUNT]) HIDDEN;
/* Copies up to @max bytes from @from into @dst, stopping at the first page
 * that is not readable. Never faults. Returns the bytes copied. */
size_t agent_copy_stack(void *dst, uint64_t from, size_t max) HIDDEN;

/* Learn the main thread's stack (attach, not from a hook). */
void capture_init(void) HIDDEN;
/*
 * How many bytes from @rsp up to the end of this thread's stack, at most
 * @max; *@ret_direct when they are known to be mapped (a plain copy will
 * do). Looks up the thread's stack once per thread (raw /proc read).
 */
size_t agent_stack_limit(uint64_t rsp, size_t max, bool *ret_direct) HIDDEN;
/*
 * walk.c: the return addresses of the frames @regs (the sampling function's)
 * start, with cprof's rules @t (2^@bits slots), reading nothing outside
 * [rsp, @hi): at most @max into @pcs. 0 when a frame has no usable rule (the
 * sample then needs its stack copied), else how many, the outermost last.
 */
size_t agent_walk(const struct cprof_wire_rule *t, unsigned bits, const uint64_t *regs, uint64_t hi,
		  uint64_t *pcs, size_t max) HIDDEN;
/* Copies @limit bytes from @rsp as agent_stack_limit() allowed. */
size_t agent_capture_stack(void *dst, uint64_t rsp, size_t limit, bool direct) HIDDEN;
/*
 * A sample's stack into @dst (room for CPROF_WIRE_STACK_MAX bytes, 8-aligned):
 * the frames above @regs walked with cprof's rules (*@ret_walked), or failing
 * that the stack from regs' rsp copied. @limit and @direct are
 * agent_stack_limit()'s for the whole stack. Returns the bytes written (0: a
 * copy failed). Event lock held (the ring's rules).
 */
size_t agent_sample_stack(void *dst, const uint64_t *regs, size_t limit, bool direct,
			  bool *ret_walked) HIDDEN;
/* This thread's kernel id, cached (gettid() is a system call). */
uint32_t agent_tid(void) HIDDEN;
/* A fork child forgets what it cached about its parent's thread. */
void capture_forget_thread(void) HIDDEN;
/* Our pid, set at attach (getpid() is a system call). */
extern pid_t agent_pid HIDDEN;

/* --- ring.c --------------------------------------------------------------- */

struct ring {
	struct cprof_wire_header *hdr; /* NULL when there is no session */
	uint8_t *data;
	uint32_t size;
	const struct cprof_wire_rule *rules; /* cprof's (wire.h), after the ring */
	unsigned rules_bits;
	struct cprof_wire_live *live; /* the snapshot's room, after the rules */
};

extern struct ring agent_ring HIDDEN;

/* lock.c: a lock word that a waiter sleeps on once a short spin failed. */
bool agent_lock_try(int *word) HIDDEN;
void agent_lock_take(int *word) HIDDEN;
void agent_lock_give(int *word) HIDDEN;

void event_lock(void) HIDDEN;
void event_unlock(void) HIDDEN;
/* Reserve @bytes (8-aligned) at data_head, writing a PAD first if needed.
 * Returns NULL when full (lost is counted). Event lock held. */
void *ring_reserve(uint32_t bytes) HIDDEN;
/* The same, but a full ring is no loss (the caller tries again later). */
void *ring_try_reserve(uint32_t bytes) HIDDEN;
/* Publish what ring_reserve() returned. Event lock held. */
void ring_commit(uint32_t bytes) HIDDEN;

/* --- liveset.c ------------------------------------------------------------ */

/* Sampled blocks the set holds at most (beyond: untracked). */
#define LIVESET_CAPACITY (1u << 17)

int liveset_init(void) HIDDEN;
/* Every block in the set (sizes may carry CPROF_LIVE_UNRECORDED) into
 * @dst, at most @max; how many. Event lock held. */
size_t liveset_snapshot(struct cprof_wire_live *dst, size_t max) HIDDEN;
/* Empty the set (event lock held). */
void liveset_clear(void) HIDDEN;
/* Insert (event lock held). Returns false when the set is full. */
bool liveset_insert(uint64_t addr, uint64_t size) HIDDEN;
/* Start loading the lines liveset_insert(@addr) will write (no lock needed:
 * a hint only). A sample's walk then hides the misses: the table is touched
 * once per sample, so its lines are rarely still cached. */
void liveset_prefetch(uint64_t addr) HIDDEN;
/*
 * What free() asks first (liveset.c), on a cache line of its own (it changes
 * only when a sample is taken or freed, so the counts and slots a sample
 * writes do not cost every other core a miss on its next free()).
 *
 * @state is 0 while the set is empty: free() then loads one word and no
 * more. From empty up to LIVESET_FEW live blocks it is LIVESET_FEW_HELD and
 * @few holds the blocks themselves (free slots: LIVESET_NO_BLOCK): a free()
 * compares its address with them, on this line, and the answer is exact.
 * Beyond, it is LIVESET_MANY until the set is empty again, and @filter is the
 * current table's filter: two bits per live address, both in one 64-bit word;
 * where it is and how many bits it has (2^n, n in the low 6 bits of the
 * page-aligned address) in one word. A clear bit means "not in the set".
 */
#define LIVESET_FEW 4
#define LIVESET_FEW_HELD 1
#define LIVESET_MANY 2
#define LIVESET_NO_BLOCK UINT64_MAX

struct liveset_ref {
	uint64_t state;
	uintptr_t filter;
	uint64_t few[LIVESET_FEW];
} __attribute__((aligned(64)));
extern struct liveset_ref liveset_ref HIDDEN;

/*
 * The hash's top bits pick the word, the next twelve its two bits. The fold
 * before the multiply is for blocks whose addresses differ only in high bits
 * (glibc's mmap()ed blocks, 8 MiB + a page apart), which a multiply alone
 * crowds into a few words, sending frees to a lookup they do not need
 * (tests/unit/test-agent.c, liveset_filter_lets_few_frees_through).
 */
static inline uint64_t liveset_filter_hash(uint64_t addr)
{
	uint64_t x = addr >> 4;

	return (x ^ (x >> 16)) * 0xc2b2ae3d27d4eb4full;
}

static inline uint64_t liveset_filter_word(uint64_t hash, unsigned bits)
{
	return hash >> (64 - (bits - 6));
}

static inline unsigned liveset_filter_bit(uint64_t hash, unsigned bits, int k)
{
	return (unsigned)(hash >> (64 - (bits - 6) - 6 * (k + 1))) & 63;
}

static inline uint64_t liveset_filter_mask(uint64_t hash, unsigned bits)
{
	return 1ull << liveset_filter_bit(hash, bits, 0) | 1ull << liveset_filter_bit(hash, bits, 1);
}

/* Is @addr one of liveset_ref.few? Written out: a compare and a branch each,
 * on the line already loaded (a loop here is not unrolled at -O2). */
static inline bool liveset_few_holds(uint64_t addr)
{
	_Static_assert(LIVESET_FEW == 4, "liveset_few_holds() compares four slots");
	return __atomic_load_n(&liveset_ref.few[0], __ATOMIC_RELAXED) == addr ||
	       __atomic_load_n(&liveset_ref.few[1], __ATOMIC_RELAXED) == addr ||
	       __atomic_load_n(&liveset_ref.few[2], __ATOMIC_RELAXED) == addr ||
	       __atomic_load_n(&liveset_ref.few[3], __ATOMIC_RELAXED) == addr;
}

/* Inline, for free()'s fast path: false means surely not sampled. */
static inline bool liveset_filter_hit(uint64_t addr)
{
	uint64_t state = __atomic_load_n(&liveset_ref.state, __ATOMIC_ACQUIRE), hash, mask;
	const uint64_t *words;
	uintptr_t ref;
	unsigned bits;

	if (!state)
		return false;
	if (state == LIVESET_FEW_HELD)
		return liveset_few_holds(addr);
	ref = __atomic_load_n(&liveset_ref.filter, __ATOMIC_ACQUIRE);
	words = (const uint64_t *)(ref & ~(uintptr_t)63);
	bits = (unsigned)(ref & 63);
	hash = liveset_filter_hash(addr);
	mask = liveset_filter_mask(hash, bits);
	return (__atomic_load_n(&words[liveset_filter_word(hash, bits)], __ATOMIC_ACQUIRE) & mask) == mask;
}

/* Lock-free: might @addr be in the set? No false negatives. */
bool liveset_maybe_contains(uint64_t addr) HIDDEN;
/* Remove (event lock held). Returns true and *ret_size if it was there. */
bool liveset_remove(uint64_t addr, uint64_t *ret_size) HIDDEN;

/* --- hooks.c -------------------------------------------------------------- */

/* The allocator functions as the program would call them (resolved once). */
struct real_funcs {
	void *(*malloc)(size_t);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	void *(*reallocarray)(void *, size_t, size_t);
	void (*free)(void *);
	int (*posix_memalign)(void **, size_t, size_t);
	void *(*aligned_alloc)(size_t, size_t);
	void *(*memalign)(size_t, size_t);
	void *(*valloc)(size_t);
	void *(*pvalloc)(size_t);
	void *(*dlopen)(const char *, int);
	/* locks.c's, hooked ... */
	int (*pthread_mutex_lock)(pthread_mutex_t *);
	int (*pthread_mutex_timedlock)(pthread_mutex_t *, const struct timespec *);
	int (*pthread_mutex_unlock)(pthread_mutex_t *);
	int (*pthread_rwlock_rdlock)(pthread_rwlock_t *);
	int (*pthread_rwlock_timedrdlock)(pthread_rwlock_t *, const struct timespec *);
	int (*pthread_rwlock_wrlock)(pthread_rwlock_t *);
	int (*pthread_rwlock_timedwrlock)(pthread_rwlock_t *, const struct timespec *);
	int (*pthread_rwlock_unlock)(pthread_rwlock_t *);
	int (*pthread_cond_wait)(pthread_cond_t *, pthread_mutex_t *);
	int (*pthread_cond_timedwait)(pthread_cond_t *, pthread_mutex_t *,
				      const struct timespec *);
	int (*sem_wait)(sem_t *);
	int (*sem_timedwait)(sem_t *, const struct timespec *);
	int (*pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
	/* ... and called only: the first try of every lock. */
	int (*pthread_mutex_trylock)(pthread_mutex_t *);
	int (*pthread_rwlock_tryrdlock)(pthread_rwlock_t *);
	int (*pthread_rwlock_trywrlock)(pthread_rwlock_t *);
	int (*sem_trywait)(sem_t *);
};

extern struct real_funcs agent_real HIDDEN;

struct hook_entry {
	const char *name;
	void *hook;      /* our function */
	void **real;     /* where agent_real keeps the original */
	uint32_t events; /* CPROF_EVENTS_* sessions that patch it */
	/* A version of the name with another ABI: its slots are not patched. */
	const char *compat_version;
};

/* What the running session records (CPROF_EVENTS_*); 0 between sessions. */
extern uint32_t agent_events HIDDEN;
/* The rates block's and mutex's hooks use, in their units (wire.h). */
extern uint64_t agent_block_rate HIDDEN, agent_mutex_rate HIDDEN;

extern const struct hook_entry agent_hooks[] HIDDEN;
extern const size_t agent_nr_hooks HIDDEN;

/* Resolve agent_real (dlsym). Returns 0 or -ENOENT. Not from a hook. */
int hooks_resolve(void) HIDDEN;
/* The hook_entry for symbol @name among the running session's events, or NULL. */
const struct hook_entry *hooks_find(const char *name) HIDDEN;
/* Is @value one of our hook functions? */
bool hooks_is_hook(uint64_t value) HIDDEN;
/* Emit FREE for a sampled block being freed (event lock taken inside). */
void hooks_emit_free(uint64_t addr, uint64_t size) HIDDEN;

/*
 * The paths every allocator's hooks share (hooks.c for glibc's API,
 * hooks-api.c for jemalloc's, mimalloc's and operator new/delete).
 * An allocation of @size bytes at @p (NULL: failed) after the countdown
 * ran out; errno kept. */
void hooks_alloc_slow(void *p, uint64_t size) HIDDEN;
/* A block that may be sampled is being freed: its FREE, if it was. */
void hooks_free_slow(void *p) HIDDEN;
/* Before a resize of @old: takes it out of the set; true with its size. */
bool hooks_realloc_take(void *old, uint64_t *ret_size) HIDDEN;
/* After the resize of a block hooks_realloc_take() took: back into the set
 * if the call @failed (the old block is still live), else its FREE. */
void hooks_realloc_finish(void *old, uint64_t old_size, bool failed) HIDDEN;

/* True, and the countdown moved on, unless @size bytes run it out. */
static inline bool hooks_countdown_take(uint64_t size)
{
	if (likely(size < agent_countdown)) {
		agent_countdown -= size;
		return true;
	}
	return false;
}

/* After the real call: the rarer entry points (realloc, aligned, ...). */
static inline void hooks_after_alloc(void *p, uint64_t size)
{
	if (!hooks_countdown_take(size))
		hooks_alloc_slow(p, size);
}

/* free(NULL) needs no test of its own: the slow path finds nothing. */
static inline bool hooks_may_be_sampled(const void *p)
{
	return liveset_filter_hit((uint64_t)(uintptr_t)p) && !agent_in_hook;
}

/* Before the real free: once freed, another thread may get (and we may
 * sample) the same address. */
static inline void hooks_before_free(void *p)
{
	if (unlikely(hooks_may_be_sampled(p)))
		hooks_free_slow(p);
}

/*
 * hooks-api.c: an allocator's own API beside malloc's (jemalloc's *allocx,
 * mimalloc's mi_*, operator new/delete as jemalloc, tcmalloc and mimalloc
 * define them). Their entries in agent_hooks follow glibc's.
 */
extern const struct hook_entry agent_api_hooks[] HIDDEN;
extern const size_t agent_nr_api_hooks HIDDEN;
/* Resolve the API hooks' real functions (not from a hook): only those of an
 * allocator object (below) are kept; the rest stay NULL, so never patched. */
void hooks_api_resolve(void) HIDDEN;
/*
 * The objects that implement the allocator, when it is not glibc's: their
 * entry points call each other through their own GOT (mimalloc's malloc
 * calls mi_malloc, jemalloc's operator delete calls free), so a hook there
 * would count one call twice. Their heap slots are left alone; only the
 * callers' are patched. Up to HOOKS_ALLOCATOR_MARKS addresses, one inside
 * each such object (0: none); set by hooks_resolve().
 */
#define HOOKS_ALLOCATOR_MARKS 4
extern uintptr_t hooks_allocator_marks[HOOKS_ALLOCATOR_MARKS] HIDDEN;

/* --- locks.c ------------------------------------------------------------- */

int hook_pthread_mutex_lock(pthread_mutex_t *m) HIDDEN;
int hook_pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t) HIDDEN;
int hook_pthread_mutex_unlock(pthread_mutex_t *m) HIDDEN;
int hook_pthread_rwlock_rdlock(pthread_rwlock_t *l) HIDDEN;
int hook_pthread_rwlock_timedrdlock(pthread_rwlock_t *l, const struct timespec *t) HIDDEN;
int hook_pthread_rwlock_wrlock(pthread_rwlock_t *l) HIDDEN;
int hook_pthread_rwlock_timedwrlock(pthread_rwlock_t *l, const struct timespec *t) HIDDEN;
int hook_pthread_rwlock_unlock(pthread_rwlock_t *l) HIDDEN;
int hook_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) HIDDEN;
int hook_pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
				const struct timespec *t) HIDDEN;
int hook_sem_wait(sem_t *s) HIDDEN;
int hook_sem_timedwait(sem_t *s, const struct timespec *t) HIDDEN;
int hook_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *),
			void *arg) HIDDEN;
/* Resolve the try-functions the hooks call first. 0 or -ENOENT. */
int locks_resolve(void) HIDDEN;
/* Forget every registered waiter (a new session). */
void locks_reset(void) HIDDEN;
/* The same and the stripes, in a fork child: the only thread there is. */
void locks_reset_after_fork(void) HIDDEN;

/* --- got.c ---------------------------------------------------------------- */

/* Patch every not yet patched GOT entry of a hooked function in every loaded
 * object but the agent, ld.so and the vDSO. Caller holds agent_mutex. */
void got_patch_all(void) HIDDEN;
/* Restore every entry that still holds a hook. Caller holds agent_mutex
 * (or is the only thread: fork child). */
void got_restore_all(void) HIDDEN;
/* Entries currently patched. */
uint64_t got_nr_patched(void) HIDDEN;

/* --- attach.c / watchdog.c ------------------------------------------------ */

/* Serializes attach, detach, GOT patching (also from the dlopen hook). */
void agent_lock(void) HIDDEN;
bool agent_trylock(void) HIDDEN;
void agent_unlock(void) HIDDEN;
/* Is sampling on? (state RUNNING) */
extern int agent_sampling HIDDEN;
/* Detach with @reason (enum cprof_wire_detach_reason). 0 or -ENOENT. */
int agent_detach(uint32_t reason) HIDDEN;
/* Same, agent_mutex held. */
int agent_detach_locked(uint32_t reason) HIDDEN;
/* Apply cprof's command and rate fields; agent_mutex held. */
void agent_poll_commands_locked(void) HIDDEN;
/* Does session @session still run? agent_mutex held. */
bool agent_session_running(uint64_t session) HIDDEN;
/* From the dlopen hook: patch what got loaded, if a session runs. */
void agent_patch_new_objects(void) HIDDEN;
/* From a hook's slow path (agent_in_hook set): objects a dlopen could not
 * patch are patched now, if the lock is free. */
void agent_patch_if_pending(void) HIDDEN;
/* Session counter; the watchdog of an older session exits. */
extern uint64_t agent_session HIDDEN;

/* Start the session's watchdog task (after the last one is gone). 0 or -errno. */
int watchdog_start(pid_t cprof_pid, uint64_t session) HIDDEN;
/* A fork child has no watchdog task. */
void watchdog_forget(void) HIDDEN;

/* A counter of the header, if a session runs. */
#define AGENT_COUNT(field, n)                                                  \
	do {                                                                   \
		struct cprof_wire_header *h_ = agent_ring.hdr;                 \
		if (h_)                                                        \
			__atomic_fetch_add(&h_->field, (n), __ATOMIC_RELAXED);  \
	} while (0)
/*
 * The same with the event lock held, as every writer of samples,
 * sampled_bytes, frees and untracked holds it: a plain load and store (still
 * one untorn store for cprof's reads), no locked read-modify-write on every
 * sample. Mixing it with AGENT_COUNT on one field would lose counts.
 */
#define AGENT_COUNT_LOCKED(field, n)                                           \
	do {                                                                   \
		struct cprof_wire_header *h_ = agent_ring.hdr;                 \
		if (h_)                                                        \
			__atomic_store_n(&h_->field, h_->field + (n),          \
					 __ATOMIC_RELAXED);                    \
	} while (0)

uint64_t agent_now_ns(void) HIDDEN;

#endif
