/*
 * Which thread may load the agent. dlopen takes the loader's lock and
 * allocates, and takes glibc's lock of its thread list to give the agent's
 * static TLS to every thread; cprof_agent_attach_events allocates too. A
 * thread stopped while it holds the allocator's lock (inside malloc), the
 * loader's (inside dlopen, dl_iterate_phdr, a constructor) or the thread
 * list's (pthread_create, pthread_join, setuid: GL(dl_stack_cache_lock))
 * would wait for itself forever, and an abandoned dlopen leaves
 * _dl_load_lock held: every later dlopen of the process hangs. So the
 * stopped thread's stack is unwound (from a copy, with the same DWARF
 * unwinder as cpu profiles) and refused if any frame, inline ones
 * included, is in such code, or if the unwind does not reach the thread's
 * start, in which case nothing can be proven.
 */
#include "inject/inject-private.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptrace/ptrace.h"
#include "target/target.h"
#include "util/util.h"

#define RED_ZONE 128
#define STACK_COPY (64u << 10)
#define MAX_FRAMES 256
/* dlopen + the agent's attach use a few KiB; ask for a margin. */
#define STACK_NEEDED (64u << 10)

/* The allocator's functions: they hold (or wait for) its locks. A resident
 * agent's attach alone allocates nothing, and may run inside them. */
static const char *const alloc_names[] = {
	"malloc", "calloc", "realloc", "free", "cfree", "memalign", "valloc", "pvalloc",
	"posix_memalign", "aligned_alloc", "reallocarray", "sysmalloc", "systrim",
	"__libc_malloc", "__libc_calloc", "__libc_realloc", "__libc_free", "__libc_memalign",
	"__libc_valloc", "__libc_pvalloc", "__libc_alloc_buffer_allocate",
};

static const char *const alloc_prefixes[] = {
	"_int_", "_mid_memalign", "arena_", "tcache_", "malloc_", "__malloc_",
};

/* Functions that hold (or wait for) the loader's locks, or run under a
 * signal's or fork's constraints: linkage names, ... */
static const char *const unsafe_names[] = {
	"dlopen", "dlmopen", "dlsym", "dlvsym", "dlclose", "dlerror", "dladdr", "dladdr1",
	"dlinfo", "dl_iterate_phdr", "fork", "_Fork", "vfork", "exit", "_exit", "__cxa_finalize",
	"__restore_rt", "_Unwind_Find_FDE", "__libc_early_init", "pthread_create",
	"__cxa_atexit", "atexit", "on_exit", "__cxa_thread_atexit_impl",
};

/* ... and prefixes of glibc's (and libgcc's, and the agent's) internals. */
static const char *const unsafe_prefixes[] = {
	"_dl_", "__dl",
	"___dl", "dlopen_", "dlsym_", "dlmopen_", "_dlerror", "__libc_dl", "__run_fork",
	"__run_exit", "__register_frame", "__deregister_frame", "cprof_agent_",
	/* glibc's thread list: stacks cached and freed (pthread_join, a
	 * detached thread's end), setuid's round of every thread, and the
	 * lock the exit functions' list is under. */
	"__nptl_", "__pthread_create", "setxid_", "__new_exitfn", "__internal_atexit",
};

/* A frame named so is where a thread's stack begins. */
static const char *const roots[] = {
	"_start", "start_thread", "clone3", "__clone3", "clone", "__clone",
	"__libc_start_call_main",
};

/*
 * Whether @name is one of @list, or starts with one with @prefix. glibc's
 * internal aliases (__GI___nptl_free_tcb) are their function's name, and a
 * part split off by the compiler (malloc.cold, setxid_mark_thread.constprop.0)
 * is its function's.
 */
static bool in_list(const char *name, const char *const *list, size_t n, bool prefix)
{
	size_t len;

	if (strncmp(name, "__GI_", 5) == 0)
		name += 5;
	len = strcspn(name, ".");
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(list[i]);

		if (prefix ? strncmp(name, list[i], l) == 0 :
			     l == len && strncmp(name, list[i], len) == 0)
			return true;
	}
	return false;
}

static const char *basename_of(const char *path)
{
	const char *b = path ? strrchr(path, '/') : NULL;

	return b ? b + 1 : path ? path : "";
}

/*
 * 0: the frame at @pc is harmless; -EAGAIN with @why otherwise. Names come
 * from the symbol tables only (no DWARF: this runs while the thread is
 * stopped, and inject_warm_up() has loaded them beforehand); glibc's
 * internals that matter (_int_malloc, _dl_*) are in its .symtab (the
 * libc6-dbg file), inlined helpers are judged by the function around them.
 */
static int judge_frame(const struct inject_opts *o, uint64_t pc, bool in_alloc_ok, bool *ret_root,
		       char *why, size_t len)
{
	Dwfl_Module *mod = dwfl_addrmodule(symbolizer_dwfl(o->sym), pc);
	const char *path = NULL, *base, *name;
	GElf_Off off;
	GElf_Sym sym;

	if (mod)
		dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, &path, NULL);
	if (!mod || !path) {
		snprintf(why, len, "a frame at 0x%llx is in no known module", (unsigned long long)pc);
		return -EAGAIN;
	}
	base = basename_of(path);
	/* jemalloc's internal functions have no names in its .dynsym: the
	 * whole module is the allocator (cprof_agent_jemalloc_dump() takes its
	 * locks, dlopen allocates). */
	if (strncmp(base, "ld-linux", 8) == 0 || strncmp(base, "ld-2.", 5) == 0 ||
	    strncmp(base, "cprof-agent", 11) == 0 ||
	    (!in_alloc_ok && strncmp(base, "libjemalloc", 11) == 0)) {
		snprintf(why, len, "it is inside %s", base);
		return -EAGAIN;
	}
	name = dwfl_module_addrinfo(mod, pc, &off, &sym, NULL, NULL, NULL);
	if (!name)
		return 0;
	if (in_list(name, unsafe_names, ARRAY_SIZE(unsafe_names), false) ||
	    in_list(name, unsafe_prefixes, ARRAY_SIZE(unsafe_prefixes), true) ||
	    (!in_alloc_ok && (in_list(name, alloc_names, ARRAY_SIZE(alloc_names), false) ||
			      in_list(name, alloc_prefixes, ARRAY_SIZE(alloc_prefixes), true)))) {
		snprintf(why, len, "it is inside %s (%s)", name, base);
		return -EAGAIN;
	}
	if (in_list(name, roots, ARRAY_SIZE(roots), false))
		*ret_root = true;
	return 0;
}

static int warm_module(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start,
		       void *arg)
{
	Dwarf_Addr bias;

	(void)userdata, (void)name, (void)start, (void)arg;
	dwfl_module_getsymtab(mod);
	dwfl_module_eh_cfi(mod, &bias);
	dwfl_module_dwarf_cfi(mod, &bias);
	return DWARF_CB_OK;
}

void inject_warm_up(const struct inject_opts *o)
{
	dwfl_getmodules(symbolizer_dwfl(o->sym), warm_module, NULL, 0);
}

/* 0 when @r's stack has room for the agent's loading, -EAGAIN with @why when not. */
static int judge_room(const struct inject_opts *o, const struct user_regs_struct *r, char *why,
		      size_t len)
{
	const struct map_entry *m = maps_find(o->maps, r->rsp);

	if (!m) {
		snprintf(why, len, "its stack pointer is in no mapping");
		return -EAGAIN;
	}
	/* Thread stacks are fixed mappings; the main one grows on demand. */
	if (strcmp(m->path, "[stack]") != 0 && r->rsp - m->start < STACK_NEEDED) {
		snprintf(why, len, "its stack has only %llu %s left",
			 (unsigned long long)(r->rsp - m->start),
			 plural(r->rsp - m->start, "byte", "bytes"));
		return -EAGAIN;
	}
	return 0;
}

/*
 * Judges the thread @tid whose registers are @r (only rsp and rip with
 * @sp_pc_only): 0 when it may load the agent, -EAGAIN with @why when not,
 * 1 when a walk from sp and pc alone cannot tell.
 */
static int judge_walk(const struct inject_opts *o, pid_t tid, const struct user_regs_struct *r,
		      bool sp_pc_only, bool in_alloc_ok, char *why, size_t len)
{
	struct stack_walk w = { .sp_pc_only = sp_pc_only, .below = RED_ZONE, .first = STACK_COPY,
				.most = STACK_COPY };
	uint64_t pcs[MAX_FRAMES];
	bool root = false;
	int n, k;

	/* Most refusals are told by the pc alone: the thread is let go in
	 * microseconds, before any copy or unwind. */
	k = judge_frame(o, r->rip, in_alloc_ok, &root, why, len);
	if (k < 0)
		return k;
	k = judge_room(o, r, why, len);
	if (k < 0)
		return k;
	ptrace_regs_to_unwind(r, w.regs);
	k = stack_walk(&w, tid, o->maps, o->unw, pcs, MAX_FRAMES);
	stack_walk_release(&w);
	if (k < 0)
		return k == -ENOMEM ? k : -ESRCH;
	n = w.n;
	if (sp_pc_only && (n < 0 || w.gave_out))
		return 1;
	if (n < 0) {
		snprintf(why, len, "its stack could not be unwound");
		return -EAGAIN;
	}
	/* [0] is the pc, judged above. */
	for (int i = 1; i < n; i++) {
		k = judge_frame(o, pcs[i], in_alloc_ok, &root, why, len);
		if (k < 0)
			return k;
	}
	if (!root) {
		snprintf(why, len, "its stack could not be unwound to its start (%d %s)", n,
			 plural((unsigned long long)n, "frame", "frames"));
		return -EAGAIN;
	}
	return 0;
}

int inject_judge_thread(const struct inject_opts *o, pid_t tid, const struct user_regs_struct *r,
			bool in_alloc_ok, char *why, size_t len)
{
	return judge_walk(o, tid, r, false, in_alloc_ok, why, len);
}

int inject_judge_asleep(const struct inject_opts *o, pid_t pid, pid_t tid, bool in_alloc_ok,
			char *why, size_t len)
{
	struct user_regs_struct r = { 0 };
	struct target_call c;
	char unsafe[200];
	int k;

	if (target_thread_call(pid, tid, &c) < 0 || c.nr < 0 || !c.sp)
		return 0;
	r.rsp = c.sp;
	r.rip = c.pc;
	k = judge_walk(o, tid, &r, true, in_alloc_ok, unsafe, sizeof(unsafe));
	if (k == -EAGAIN)
		snprintf(why, len, "asleep, seen without a stop: %s", unsafe);
	return k == -EAGAIN ? k : 0;
}

/* System calls a thread can be taken out of and put back into with no
 * effect but a restart: waits of every kind. */
static bool harmless_call(long nr)
{
	switch (nr) {
	case 0:   /* read */
	case 7:   /* poll */
	case 23:  /* select */
	case 34:  /* pause */
	case 35:  /* nanosleep */
	case 43:  /* accept */
	case 45:  /* recvfrom */
	case 47:  /* recvmsg */
	case 61:  /* wait4 */
	case 128: /* rt_sigtimedwait */
	case 202: /* futex */
	case 219: /* restart_syscall */
	case 230: /* clock_nanosleep */
	case 232: /* epoll_wait */
	case 270: /* pselect6 */
	case 271: /* ppoll */
	case 281: /* epoll_pwait */
	case 288: /* accept4 */
	case 441: /* epoll_pwait2 */
		return true;
	}
	return false;
}

static bool asleep_in_harmless_call(pid_t pid, pid_t tid)
{
	struct target_call c;

	return target_thread_call(pid, tid, &c) == 0 && c.nr >= 0 && harmless_call(c.nr);
}

int inject_order_threads(pid_t pid, pid_t **ret_tids, size_t *ret_n)
{
	pid_t *tids;
	size_t n, front = 0;
	int r;

	r = target_list_tids(pid, &tids, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++)
		if (asleep_in_harmless_call(pid, tids[i])) {
			pid_t t = tids[front];

			tids[front++] = tids[i];
			tids[i] = t;
		}
	*ret_tids = tids;
	*ret_n = n;
	return 0;
}
