/*
 * Hooks of an allocator's own API beside malloc's: jemalloc's *allocx
 * (Debian's libjemalloc2 exports them; folly and RocksDB call them),
 * mimalloc's mi_*, and operator new/delete in all their forms (sized,
 * aligned, nothrow) where the allocator defines them itself (jemalloc,
 * tcmalloc and mimalloc do, with malloc's fast path inlined: no call of
 * theirs goes through a malloc slot).
 *
 * Each is patched only where its real function lies in an allocator object
 * (agent.h, hooks_allocator_marks): libstdc++'s operator new calls malloc
 * through libstdc++'s GOT, which is hooked already, and a hook on both
 * would count every new twice. Inside an allocator object no slot is
 * patched (got.c), for the same reason the other way round.
 *
 * Every hook calls the real function with the caller's arguments and
 * returns its value; the sampling (hooks.c's shared paths) keeps errno.
 * An operator new that throws leaves through the hook's frame (the agent
 * has unwind tables) before anything was recorded, as nothing was
 * allocated.
 *
 * Sizes sampled are the sizes asked for, as for malloc: what the program
 * asked is what a site's bytes mean in Go's profile too.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "agent.h"

/* The C++ ABI's std::align_val_t and const std::nothrow_t &, as C sees them. */
typedef size_t align_val;
typedef const void *nothrow_ref;

static struct {
	/* jemalloc */
	void *(*mallocx)(size_t, int);
	void *(*rallocx)(void *, size_t, int);
	size_t (*xallocx)(void *, size_t, size_t, int);
	void (*dallocx)(void *, int);
	void (*sdallocx)(void *, size_t, int);
	/* operator new */
	void *(*_Znwm)(size_t);
	void *(*_Znam)(size_t);
	void *(*_ZnwmRKSt9nothrow_t)(size_t, nothrow_ref);
	void *(*_ZnamRKSt9nothrow_t)(size_t, nothrow_ref);
	void *(*_ZnwmSt11align_val_t)(size_t, align_val);
	void *(*_ZnamSt11align_val_t)(size_t, align_val);
	void *(*_ZnwmSt11align_val_tRKSt9nothrow_t)(size_t, align_val, nothrow_ref);
	void *(*_ZnamSt11align_val_tRKSt9nothrow_t)(size_t, align_val, nothrow_ref);
	/* operator delete */
	void (*_ZdlPv)(void *);
	void (*_ZdaPv)(void *);
	void (*_ZdlPvm)(void *, size_t);
	void (*_ZdaPvm)(void *, size_t);
	void (*_ZdlPvSt11align_val_t)(void *, align_val);
	void (*_ZdaPvSt11align_val_t)(void *, align_val);
	void (*_ZdlPvmSt11align_val_t)(void *, size_t, align_val);
	void (*_ZdaPvmSt11align_val_t)(void *, size_t, align_val);
	void (*_ZdlPvRKSt9nothrow_t)(void *, nothrow_ref);
	void (*_ZdaPvRKSt9nothrow_t)(void *, nothrow_ref);
	void (*_ZdlPvSt11align_val_tRKSt9nothrow_t)(void *, align_val, nothrow_ref);
	void (*_ZdaPvSt11align_val_tRKSt9nothrow_t)(void *, align_val, nothrow_ref);
	/* mimalloc */
	void *(*mi_malloc)(size_t);
	void *(*mi_zalloc)(size_t);
	void *(*mi_malloc_small)(size_t);
	void *(*mi_zalloc_small)(size_t);
	void *(*mi_calloc)(size_t, size_t);
	void *(*mi_mallocn)(size_t, size_t);
	void *(*mi_new)(size_t);
	void *(*mi_new_nothrow)(size_t);
	void *(*mi_new_n)(size_t, size_t);
	void *(*mi_malloc_aligned)(size_t, size_t);
	void *(*mi_zalloc_aligned)(size_t, size_t);
	void *(*mi_calloc_aligned)(size_t, size_t, size_t);
	void *(*mi_new_aligned)(size_t, size_t);
	void *(*mi_new_aligned_nothrow)(size_t, size_t);
	void *(*mi_realloc)(void *, size_t);
	void *(*mi_reallocn)(void *, size_t, size_t);
	void *(*mi_reallocf)(void *, size_t);
	void *(*mi_rezalloc)(void *, size_t);
	void *(*mi_recalloc)(void *, size_t, size_t);
	void *(*mi_realloc_aligned)(void *, size_t, size_t);
	void *(*mi_expand)(void *, size_t);
	char *(*mi_strdup)(const char *);
	char *(*mi_strndup)(const char *, size_t);
	void (*mi_free)(void *);
	void (*mi_cfree)(void *);
	void (*mi_free_size)(void *, size_t);
	void (*mi_free_aligned)(void *, size_t);
	void (*mi_free_size_aligned)(void *, size_t, size_t);
} api;

static size_t mul_or_max(size_t n, size_t size)
{
	size_t total;

	return __builtin_mul_overflow(n, size, &total) ? SIZE_MAX : total;
}

/* ---- allocations: the real call, then the countdown -------------------- */

#define ALLOC_HOOK(fn, size, params, args)                                    \
	static void *hook_##fn params                                          \
	{                                                                      \
		void *p = api.fn args;                                         \
                                                                               \
		if (p)                                                         \
			hooks_after_alloc(p, (size));                          \
		return p;                                                      \
	}

ALLOC_HOOK(mallocx, size, (size_t size, int flags), (size, flags))
ALLOC_HOOK(_Znwm, size, (size_t size), (size))
ALLOC_HOOK(_Znam, size, (size_t size), (size))
ALLOC_HOOK(_ZnwmRKSt9nothrow_t, size, (size_t size, nothrow_ref nt), (size, nt))
ALLOC_HOOK(_ZnamRKSt9nothrow_t, size, (size_t size, nothrow_ref nt), (size, nt))
ALLOC_HOOK(_ZnwmSt11align_val_t, size, (size_t size, align_val al), (size, al))
ALLOC_HOOK(_ZnamSt11align_val_t, size, (size_t size, align_val al), (size, al))
ALLOC_HOOK(_ZnwmSt11align_val_tRKSt9nothrow_t, size, (size_t size, align_val al, nothrow_ref nt),
	   (size, al, nt))
ALLOC_HOOK(_ZnamSt11align_val_tRKSt9nothrow_t, size, (size_t size, align_val al, nothrow_ref nt),
	   (size, al, nt))
ALLOC_HOOK(mi_malloc, size, (size_t size), (size))
ALLOC_HOOK(mi_zalloc, size, (size_t size), (size))
ALLOC_HOOK(mi_malloc_small, size, (size_t size), (size))
ALLOC_HOOK(mi_zalloc_small, size, (size_t size), (size))
ALLOC_HOOK(mi_calloc, mul_or_max(n, size), (size_t n, size_t size), (n, size))
ALLOC_HOOK(mi_mallocn, mul_or_max(n, size), (size_t n, size_t size), (n, size))
ALLOC_HOOK(mi_new, size, (size_t size), (size))
ALLOC_HOOK(mi_new_nothrow, size, (size_t size), (size))
ALLOC_HOOK(mi_new_n, mul_or_max(n, size), (size_t n, size_t size), (n, size))
ALLOC_HOOK(mi_malloc_aligned, size, (size_t size, size_t al), (size, al))
ALLOC_HOOK(mi_zalloc_aligned, size, (size_t size, size_t al), (size, al))
ALLOC_HOOK(mi_calloc_aligned, mul_or_max(n, size), (size_t n, size_t size, size_t al), (n, size, al))
ALLOC_HOOK(mi_new_aligned, size, (size_t size, size_t al), (size, al))
ALLOC_HOOK(mi_new_aligned_nothrow, size, (size_t size, size_t al), (size, al))

/* strdup's size is known once the copy is: its length, plus the NUL. */
static char *hook_mi_strdup(const char *s)
{
	char *p = api.mi_strdup(s);

	if (p)
		hooks_after_alloc(p, strlen(p) + 1);
	return p;
}

static char *hook_mi_strndup(const char *s, size_t n)
{
	char *p = api.mi_strndup(s, n);

	if (p)
		hooks_after_alloc(p, strlen(p) + 1);
	return p;
}

/* ---- frees: the set asked before the real call (hooks_before_free) ----- */

#define FREE_HOOK(fn, params, args)                                           \
	static void hook_##fn params                                           \
	{                                                                      \
		hooks_before_free(p);                                          \
		api.fn args;                                                   \
	}

FREE_HOOK(dallocx, (void *p, int flags), (p, flags))
FREE_HOOK(sdallocx, (void *p, size_t size, int flags), (p, size, flags))
FREE_HOOK(_ZdlPv, (void *p), (p))
FREE_HOOK(_ZdaPv, (void *p), (p))
FREE_HOOK(_ZdlPvm, (void *p, size_t size), (p, size))
FREE_HOOK(_ZdaPvm, (void *p, size_t size), (p, size))
FREE_HOOK(_ZdlPvSt11align_val_t, (void *p, align_val al), (p, al))
FREE_HOOK(_ZdaPvSt11align_val_t, (void *p, align_val al), (p, al))
FREE_HOOK(_ZdlPvmSt11align_val_t, (void *p, size_t size, align_val al), (p, size, al))
FREE_HOOK(_ZdaPvmSt11align_val_t, (void *p, size_t size, align_val al), (p, size, al))
FREE_HOOK(_ZdlPvRKSt9nothrow_t, (void *p, nothrow_ref nt), (p, nt))
FREE_HOOK(_ZdaPvRKSt9nothrow_t, (void *p, nothrow_ref nt), (p, nt))
FREE_HOOK(_ZdlPvSt11align_val_tRKSt9nothrow_t, (void *p, align_val al, nothrow_ref nt), (p, al, nt))
FREE_HOOK(_ZdaPvSt11align_val_tRKSt9nothrow_t, (void *p, align_val al, nothrow_ref nt), (p, al, nt))
FREE_HOOK(mi_free, (void *p), (p))
FREE_HOOK(mi_cfree, (void *p), (p))
FREE_HOOK(mi_free_size, (void *p, size_t size), (p, size))
FREE_HOOK(mi_free_aligned, (void *p, size_t al), (p, al))
FREE_HOOK(mi_free_size_aligned, (void *p, size_t size, size_t al), (p, size, al))

/* ---- resizes ------------------------------------------------------------ */

/*
 * As realloc (hooks.c): FREE of the old block if it was sampled, and the
 * new one a fresh allocation. @kept_on_failure: whether a failed call
 * leaves the old block live (realloc's rule) or frees it (mi_reallocf).
 */
#define RESIZE_HOOK(fn, size, kept_on_failure, params, args)                  \
	static void *hook_##fn params                                          \
	{                                                                      \
		uint64_t old_size = 0;                                         \
		bool was = unlikely(hooks_may_be_sampled(old)) &&              \
			   hooks_realloc_take(old, &old_size);                 \
		void *p = api.fn args;                                         \
                                                                               \
		if (unlikely(was))                                             \
			hooks_realloc_finish(old, old_size,                    \
					     !p && (size) != 0 && (kept_on_failure)); \
		if (p)                                                         \
			hooks_after_alloc(p, (size));                          \
		return p;                                                      \
	}

/* rallocx: NULL leaves the old block as it was (size 0 is undefined). */
RESIZE_HOOK(rallocx, size, true, (void *old, size_t size, int flags), (old, size, flags))
RESIZE_HOOK(mi_realloc, size, true, (void *old, size_t size), (old, size))
RESIZE_HOOK(mi_reallocn, mul_or_max(n, size), true, (void *old, size_t n, size_t size),
	    (old, n, size))
RESIZE_HOOK(mi_reallocf, size, false, (void *old, size_t size), (old, size))
RESIZE_HOOK(mi_rezalloc, size, true, (void *old, size_t size), (old, size))
RESIZE_HOOK(mi_recalloc, mul_or_max(n, size), true, (void *old, size_t n, size_t size),
	    (old, n, size))
RESIZE_HOOK(mi_realloc_aligned, size, true, (void *old, size_t size, size_t al), (old, size, al))

/*
 * mi_expand resizes in place: the same block, or NULL and the block as it
 * was. Where it moved on, it is a resize like realloc's.
 */
RESIZE_HOOK(mi_expand, size, true, (void *old, size_t size), (old, size))

/*
 * xallocx resizes in place and returns the block's real size: at least
 * @size when it did, less when it could not (the block then as it was).
 * A block that grew or shrank is counted as realloc's are: FREE of the old
 * size, and an allocation of what was asked, at most size + extra.
 */
static size_t hook_xallocx(void *old, size_t size, size_t extra, int flags)
{
	uint64_t old_size = 0;
	bool was = unlikely(hooks_may_be_sampled(old)) && hooks_realloc_take(old, &old_size);
	size_t got = api.xallocx(old, size, extra, flags);
	size_t asked = size + extra < size ? SIZE_MAX : size + extra;

	if (unlikely(was))
		hooks_realloc_finish(old, old_size, got < size);
	if (got >= size)
		hooks_after_alloc(old, got < asked ? got : asked);
	return got;
}

#define API_HOOK(fn) { #fn, (void *)hook_##fn, (void **)&api.fn, CPROF_EVENTS_HEAP, NULL }

const struct hook_entry agent_api_hooks[] = {
	API_HOOK(mallocx),
	API_HOOK(rallocx),
	API_HOOK(xallocx),
	API_HOOK(dallocx),
	API_HOOK(sdallocx),
	API_HOOK(_Znwm),
	API_HOOK(_Znam),
	API_HOOK(_ZnwmRKSt9nothrow_t),
	API_HOOK(_ZnamRKSt9nothrow_t),
	API_HOOK(_ZnwmSt11align_val_t),
	API_HOOK(_ZnamSt11align_val_t),
	API_HOOK(_ZnwmSt11align_val_tRKSt9nothrow_t),
	API_HOOK(_ZnamSt11align_val_tRKSt9nothrow_t),
	API_HOOK(_ZdlPv),
	API_HOOK(_ZdaPv),
	API_HOOK(_ZdlPvm),
	API_HOOK(_ZdaPvm),
	API_HOOK(_ZdlPvSt11align_val_t),
	API_HOOK(_ZdaPvSt11align_val_t),
	API_HOOK(_ZdlPvmSt11align_val_t),
	API_HOOK(_ZdaPvmSt11align_val_t),
	API_HOOK(_ZdlPvRKSt9nothrow_t),
	API_HOOK(_ZdaPvRKSt9nothrow_t),
	API_HOOK(_ZdlPvSt11align_val_tRKSt9nothrow_t),
	API_HOOK(_ZdaPvSt11align_val_tRKSt9nothrow_t),
	API_HOOK(mi_malloc),
	API_HOOK(mi_zalloc),
	API_HOOK(mi_malloc_small),
	API_HOOK(mi_zalloc_small),
	API_HOOK(mi_calloc),
	API_HOOK(mi_mallocn),
	API_HOOK(mi_new),
	API_HOOK(mi_new_nothrow),
	API_HOOK(mi_new_n),
	API_HOOK(mi_malloc_aligned),
	API_HOOK(mi_zalloc_aligned),
	API_HOOK(mi_calloc_aligned),
	API_HOOK(mi_new_aligned),
	API_HOOK(mi_new_aligned_nothrow),
	API_HOOK(mi_realloc),
	API_HOOK(mi_reallocn),
	API_HOOK(mi_reallocf),
	API_HOOK(mi_rezalloc),
	API_HOOK(mi_recalloc),
	API_HOOK(mi_realloc_aligned),
	API_HOOK(mi_expand),
	API_HOOK(mi_strdup),
	API_HOOK(mi_strndup),
	API_HOOK(mi_free),
	API_HOOK(mi_cfree),
	API_HOOK(mi_free_size),
	API_HOOK(mi_free_aligned),
	API_HOOK(mi_free_size_aligned),
};
const size_t agent_nr_api_hooks = sizeof(agent_api_hooks) / sizeof(agent_api_hooks[0]);

/* The load address of the object @addr lies in, or 0. */
static uintptr_t object_base(uintptr_t addr)
{
	Dl_info info;

	if (!addr || !dladdr((void *)addr, &info))
		return 0;
	return (uintptr_t)info.dli_fbase;
}

static bool in_allocator_object(uintptr_t addr)
{
	uintptr_t base = object_base(addr);

	for (int i = 0; base && i < HOOKS_ALLOCATOR_MARKS; i++)
		if (hooks_allocator_marks[i] && object_base(hooks_allocator_marks[i]) == base)
			return true;
	return false;
}

void hooks_api_resolve(void)
{
	for (size_t i = 0; i < agent_nr_api_hooks; i++) {
		const struct hook_entry *h = &agent_api_hooks[i];
		void *real;

		/* Once stored, never cleared: a thread may still be in the
		 * hook of an earlier session, calling through it. */
		if (*h->real)
			continue;
		real = dlsym(RTLD_DEFAULT, h->name);
		if (real && in_allocator_object((uintptr_t)real))
			*h->real = real;
	}
}
