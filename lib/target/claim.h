/*
 * Claims on a target, shared by every cprof on this machine: what one cprof
 * does to a process that another must not do at the same time.
 *
 *   TARGET_CLAIM_PTRACE  stopping threads of it: a threads snapshot, the
 *                        injection's look for a safe thread and its call
 *                        (the trampoline's data block is one per target);
 *                        held for milliseconds, so the next one waits.
 *   TARGET_CLAIM_AGENT   the agent's session, one per target: held from
 *                        before the injection to after the detach.
 *
 * A claim is a POSIX record lock on a file named for the target's pid, its
 * start time and the kind, in /run/lock (else /tmp): the kernel drops it
 * when cprof dies, however it dies, and F_GETLK names the process holding
 * it. A process does not conflict with itself: one that drives several
 * profilers of a target at once orders their claims itself.
 */
#ifndef CPROF_TARGET_CLAIM_H
#define CPROF_TARGET_CLAIM_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "util/cancel.h"

enum target_claim_kind {
	TARGET_CLAIM_PTRACE = 0,
	TARGET_CLAIM_AGENT = 1,
};

struct target_claim {
	int fd; /* -1: not held */
	enum target_claim_kind kind;
};

/* Who holds a claim another cprof wanted. */
struct target_claim_holder {
	pid_t pid;          /* 0: unknown (another mount of /run/lock, say) */
	char command[256];  /* its command line, printable, "" if unreadable */
};

/*
 * Takes claim @kind on @pid, waiting up to @wait_ms for another process to
 * let go of it (0: not at all); @cancel (may be NULL) is asked between
 * tries and gives up with -ECANCELED. Returns 0, -EBUSY with @ret_holder
 * filled when it stayed held, or another -errno (the lock file could not be
 * made). Release with target_claim_drop().
 */
int target_claim_take(struct target_claim *c, pid_t pid, enum target_claim_kind kind,
		      unsigned wait_ms, const struct cancel *cancel,
		      struct target_claim_holder *ret_holder);

/*
 * True for an error of target_claim_take() that means no lock file can be
 * made here (a read-only or closed /run/lock and /tmp): the caller goes on
 * unclaimed. Nothing is shared with other cprofs then but what the agent
 * checks itself (one session at a time).
 */
static inline bool target_claim_unavailable(int r)
{
	return r == -EACCES || r == -EROFS || r == -EPERM || r == -ENOSPC || r == -EDQUOT;
}

/* The pid holding claim @kind on @pid, 0 when none (or unknown). */
pid_t target_claim_holder(pid_t pid, enum target_claim_kind kind);

/* Lets go of @c (held or not) and removes its lock file. */
void target_claim_drop(struct target_claim *c);

#endif
