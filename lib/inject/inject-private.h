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

#endif
