/*
 * The snapshot's stack copies: a pool reserved before the pause so that a
 * copy inside it neither calls malloc nor faults, each stopped thread's
 * registers and live stack copied into it, and the calls that restart
 * named once the threads are let go.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/uio.h>

#include "ptrace/ptrace.h"
#include "ptrace/snapshot-private.h"
#include "util/util.h"

/* Below rsp lies the red zone, which leaf functions use without moving rsp. */
#define RED_ZONE 128
/* Stack bytes per thread made ready (faulted in) before the pause: the
 * live part of a sleeping thread's stack is a few KiB. */
#define POOL_READY_PER_THREAD 8192

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/*
 * Room for a stack copy of @size bytes: from the snapshot's pool, made
 * before the pause (a malloc per thread inside it grew the tracer's arena
 * one mprotect at a time, and each fresh page faulted on the copy), or from
 * malloc once the pool is used up.
 */
static void *stack_alloc(struct crew *c, size_t size)
{
	struct ptrace_snapshot *s = c->snap;
	size_t rounded = (size + 63) & ~(size_t)63;
	size_t at;

	if (s->stack_pool) {
		at = atomic_fetch_add(&c->pool_used, rounded);
		if (at <= s->stack_pool_size && rounded <= s->stack_pool_size - at)
			return (uint8_t *)s->stack_pool + at;
	}
	return malloc(size);
}

static bool in_pool(const struct ptrace_snapshot *s, const void *p)
{
	const uint8_t *b = s->stack_pool;

	return b && (const uint8_t *)p >= b && (const uint8_t *)p < b + s->stack_pool_size;
}

void snapshot_stack_free(const struct ptrace_snapshot *s, const void *p)
{
	if (!in_pool(s, p))
		free((void *)p);
}

/*
 * Reserves room for the stack copies of @n threads, max_stack each (address
 * space only), and faults in the first few KiB a thread: the copies inside
 * the pause then neither call malloc nor, mostly, fault. Without it (the
 * mapping refused, strict overcommit say), each copy gets a malloc.
 */
void snapshot_stack_pool_make(struct crew *c, size_t n)
{
	struct ptrace_snapshot *s = c->snap;
	size_t size = n * c->opts->max_stack, ready = n * POOL_READY_PER_THREAD;
	void *p;

	if (!size)
		return;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		 -1, 0);
	if (p == MAP_FAILED)
		return;
	if (ready > size)
		ready = size;
	if (madvise(p, ready, MADV_POPULATE_WRITE) < 0)
		memset(p, 0, ready);
	s->stack_pool = p;
	s->stack_pool_size = size;
}

/* Copies registers and the live part of the stack of a stopped thread. */
void snapshot_copy_thread(struct tracer *t, struct ptrace_thread *th)
{
	const struct ptrace_snapshot_opts *o = t->crew->opts;
	struct user_regs_struct regs;
	const struct map_entry *m;
	struct iovec local, remote;
	uint64_t start, end;
	uint8_t *buf;
	ssize_t n;

	if (ptrace(PTRACE_GETREGS, th->tid, 0, &regs) < 0) {
		th->result = PTRACE_THREAD_EXITED;
		return;
	}
	ptrace_regs_to_unwind(&regs, th->user.regs);
	/* A restart_syscall is told what it continues after the release. */
	if (ptrace_was_blocked(&regs))
		th->syscall = (int64_t)regs.orig_rax;
	start = regs.rsp > RED_ZONE ? regs.rsp - RED_ZONE : 0;
	end = start + o->max_stack;
	if (o->maps) {
		m = maps_find(o->maps, regs.rsp);
		if (m && m->end < end)
			end = m->end;
	}
	buf = stack_alloc(t->crew, end - start);
	if (!buf)
		return;
	local = (struct iovec){ buf, end - start };
	remote = (struct iovec){ (void *)(uintptr_t)start, end - start };
	/* A short read ends at the first unmapped page: keep what came. */
	n = process_vm_readv(th->tid, &local, 1, &remote, 1, 0);
	if (n <= 0) {
		snapshot_stack_free(t->crew->snap, buf);
		return;
	}
	th->user.stack = buf;
	th->user.stack_size = (size_t)n;
	th->user.stack_start = start;
}

/*
 * The calls that stopped threads will continue as restart_syscall: read
 * which from the code before their PC. Code does not change, so this is
 * done after the threads are let go, out of the pause.
 */
void snapshot_name_restarted_calls(struct ptrace_snapshot *s)
{
	for (size_t i = 0; i < s->nthreads; i++) {
		struct ptrace_thread *th = &s->threads[i];

		if (th->result == PTRACE_THREAD_STOPPED && th->syscall == NR_RESTART_SYSCALL)
			th->syscall = ptrace_restarted_call(th->tid, th->user.regs[UNWIND_REG_RIP]);
	}
}
