/*
 * A thread's stack read from outside (process_vm_readv(), no stop of its
 * own) and walked: the one way a sleeping thread's stack is taken (threads'
 * snapshot, wall, the injector's judge), so that each copies only what its
 * walk needs and ends on a short read.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "ptrace/ptrace.h"
#include "util/util.h"

/* Reads [@start, @start + @len) of @tid into @w's buffer; returns the bytes read. */
static ssize_t copy(struct stack_walk *w, pid_t tid, uint64_t start, size_t len)
{
	struct iovec local, remote;
	ssize_t n;

	if (w->buf_size < len) {
		uint8_t *b = realloc(w->buf, len);

		if (!b)
			return -ENOMEM;
		w->buf = b;
		w->buf_size = len;
	}
	local = (struct iovec){ w->buf, len };
	remote = (struct iovec){ (void *)(uintptr_t)start, len };
	n = process_vm_readv(tid, &local, 1, &remote, 1, 0);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	w->read += (uint64_t)n;
	return n;
}

int stack_walk(struct stack_walk *w, pid_t tid, const struct maps *maps, struct unwinder *unw,
	       uint64_t *ret_pcs, size_t max)
{
	uint64_t sp = w->regs[UNWIND_REG_RSP];
	uint64_t start = sp > w->below ? sp - w->below : 0;
	const struct map_entry *m = maps_find(maps, sp);
	size_t room, want;
	bool ran_off;

	w->n = -ENODATA;
	w->gave_out = true;
	w->used = 0;
	w->read = 0;
	if (!m)
		return -ENOENT;
	room = (size_t)MIN(m->end - start, (uint64_t)w->most);
	want = MIN(w->first, room);
	for (;;) {
		struct unwind_input in = { .stack_start = start, .sp_pc_only = w->sp_pc_only };
		ssize_t len = copy(w, tid, start, want);
		int r;

		if (len < 0)
			return (int)len;
		if (w->copied) {
			r = w->copied(w->arg);
			if (r < 0)
				return r;
		}
		memcpy(in.regs, w->regs, sizeof(in.regs));
		in.stack = w->buf;
		in.stack_size = (size_t)len;
		w->n = unwinder_unwind(unw, &in, ret_pcs, max);
		w->used = unwinder_stack_used(unw, &ran_off);
		/* A short read is all there is to have: asking again for more
		 * would read the same, for ever. */
		if (!ran_off || (size_t)len >= room || (size_t)len < want)
			break;
		want = MIN(want * 4, room);
	}
	w->gave_out = unwinder_gave_out(unw);
	return 0;
}

void stack_walk_release(struct stack_walk *w)
{
	free(w->buf);
	w->buf = NULL;
	w->buf_size = 0;
}
