/* Between the rooms of lib/threads/: the threads read without a stop. */
#ifndef CPROF_THREADS_PRIVATE_H
#define CPROF_THREADS_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "target/target.h"
#include "threads/threads.h"

struct maps;
struct unwinder;

/* A thread asleep in a call, read from outside (asleep.c). */
struct asleep {
	pid_t tid;
	struct target_call call;
	uint64_t run_ns;  /* its time on a cpu when its stack was read */
	uint64_t *pcs;    /* leaf first, as unwinder_unwind() gives them */
	size_t npcs;
	bool by_frame_pointers; /* unwinder_by_frame_pointers() */
	bool confirmed;   /* slept through the snapshot: asleep_confirm() */
};

struct asleep_set {
	struct asleep *a; /* sorted by tid */
	size_t n;
	int refused;      /* -errno of the first thread's look /proc refused, or 0 */
};

/*
 * Reads each of the @n threads of @before whose state is S or D and that
 * is asleep in a call, and unwinds its stack with @unw: those whose walk
 * reaches the outermost frame from sp and pc alone go into @ret, the
 * others are left to a stop. Without @maps, none.
 */
int asleep_look(struct asleep_set *ret, pid_t pid, const struct thread_record *before,
		size_t n, const struct maps *maps, struct unwinder *unw);

/* ptrace_snapshot_opts.skip for the snapshot: every thread of @set. */
bool asleep_skip(void *set, pid_t tid);

/* Reads each thread of @s again after the snapshot; returns how many woke
 * (or left) meanwhile: not confirmed, to be stopped. */
size_t asleep_confirm(struct asleep_set *s, pid_t pid);

/* ptrace_snapshot_opts.skip for the second snapshot: all but the woken. */
bool asleep_skip_but_woken(void *set, pid_t tid);

/* @tid's confirmed look, or NULL. */
const struct asleep *asleep_find(const struct asleep_set *s, pid_t tid);

void asleep_release(struct asleep_set *s);

#endif
