#ifndef CPROF_INJECT_PRIVATE_H
#define CPROF_INJECT_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#include "inject/inject.h"

/*
 * Is the stopped thread @tid, with registers @r, safe to send on the detour?
 * Unwinds a copy of its stack and looks at every frame; with @in_alloc_ok
 * (a resident agent's attach alone) frames of the allocator are fine.
 * Returns 0 when safe, -EAGAIN when not (@why, @len says why), -ESRCH when
 * it is gone.
 */
int inject_judge_thread(const struct inject_opts *o, pid_t tid, const struct user_regs_struct *r,
			bool in_alloc_ok, char *why, size_t len);

/* Loads what judging needs (symbol tables, CFI) before anything stops. */
void inject_warm_up(const struct inject_opts *o);

/*
 * The same judgement of a thread asleep in a call, from outside and
 * without a stop (its sp and pc from /proc, its stack copied while it
 * sleeps): -EAGAIN with @why when it is seen where it must not load the
 * agent (asleep inside malloc's lock, the loader's); 0 when it is not
 * asleep, or may be fit: it is stopped and judged as ever.
 */
int inject_judge_asleep(const struct inject_opts *o, pid_t pid, pid_t tid, bool in_alloc_ok,
			char *why, size_t len);

/* The threads of @pid, those asleep in a harmless system call first. */
int inject_order_threads(pid_t pid, pid_t **ret_tids, size_t *ret_n);

/*
 * seccomp.c: would the seccomp filters of stopped thread @tid (its pc @ip)
 * let it make every system call a load makes? 0 when they would (or it
 * has none), -EKEYREJECTED with @why when one would be refused, kill it,
 * or cannot be known (the filter unreadable without CAP_SYS_ADMIN).
 */
int inject_seccomp_check(pid_t pid, pid_t tid, uint64_t ip, char *why, size_t len);

/*
 * place.c: copies @agent_path into @pid's root (a container's /tmp,
 * /var/tmp or /dev/shm: the first that only root or cprof's user can
 * change) under an unguessable name; @ret_path gets the path as the target
 * sees it. Returns 0 (a new copy), 1 (one that an earlier run left there
 * for another process, checked as a new one would be), -EROFS (no such
 * directory) or -EXDEV (the copy did not check out).
 */
int inject_place_agent(pid_t pid, const char *agent_path, char *ret_path, size_t size);
/* Removes a copy placed by inject_place_agent() that was never loaded. */
void inject_unplace_agent(pid_t pid, const char *path);

/* ---- one call into the target, shared by its rooms ----------------------- */

#define DETOUR_NAME "cprof-detour"
#define MAX_PENDING 8

struct call {
	pid_t pid;
	const struct inject_opts *o;
	struct inject_report *rep;
	uint64_t dlopen, dlsym, dlerror, syscall_fn, setcancel;
	/* The resident agent's attach function, when it ran a session before
	 * (inject_warm_agent()): called alone, by any thread not in the loader, from
	 * the agent's own copy of the trampoline (entry), its data block at
	 * data; 0 when the code goes to a page. */
	uint64_t attach_fn, entry, data;
	uint64_t old_page; /* a page an earlier load left, unmapped by the call */
	uint64_t page; /* the trampoline page in the target; 0: none yet */
	pid_t page_tid; /* the thread that mapped it */
	pid_t tid;     /* the thread sent on the detour */
	int pending[MAX_PENDING]; /* signals to hand back to it */
	size_t npending;
	int result;
	uint8_t *image; /* TRAMP_SIZE bytes: what the page will hold */
	uint8_t *frame; /* FRAME_MAX bytes: the frame for the thread's stack */
	size_t xsave_size;
	bool fxsave;
	uint64_t sigmask; /* the chosen thread's, put back by the trampoline */
	uint64_t longest_look_ns; /* the longest a refused thread was held, this round */
	bool left_by_tail;        /* the thread left the page by the agent's tail */
	pid_t late_tid;           /* interrupted, not stopped within STOP_TIMEOUT_NS */
	uint64_t late_since;      /* when it was interrupted */
};

/* remote.c: the tracer's hands on a stopped thread. */
int inject_peek(pid_t pid, uint64_t addr, void *buf, size_t len);
int inject_poke(pid_t pid, uint64_t addr, const void *buf, size_t len);
/* Waits up to @timeout_ns for @tid's stop (@collect: reaped, else left
 * for the caller); 0, -ETIMEDOUT or -ESRCH. */
int inject_wait_stop(pid_t tid, int *status, uint64_t timeout_ns, bool collect);
/* Lets @tid go, with the signals kept for it handed back. */
void inject_detach(struct call *c, pid_t tid);
/* A signal that stopped the thread, kept to be handed back on release. */
void inject_keep_signal(struct call *c, int sig);
/* System call @nr with @args, run by stopped thread @tid from the state
 * @orig (whose registers it changes: the caller puts them back). Its
 * result, or -errno from ptrace. */
int inject_remote(struct call *c, pid_t tid, const struct user_regs_struct *orig, long nr,
		  const uint64_t args[6], uint64_t *ret);
#define REMOTE(c, tid, orig, ret, nr, ...) \
	inject_remote((c), (tid), (orig), (nr), (const uint64_t[6]){ __VA_ARGS__ }, (ret))
bool inject_remote_failed(int k, uint64_t v);

/* agent-path.c: which agent the call loads. */
const char *inject_function_of(const struct inject_opts *o);
/* Has the resident agent held a session? */
bool inject_warm_agent(pid_t pid);
int inject_choose_agent_path(struct call *c);

/* detour.c: the page, the frame and the launch. */
uint64_t inject_data_block(const struct call *c);
uint64_t *inject_field(struct call *c, unsigned off);
void inject_find_old_page(struct call *c);
int inject_launch(struct call *c, pid_t tid, const struct user_regs_struct *orig);

#endif
