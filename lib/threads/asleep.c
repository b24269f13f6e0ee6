/*
 * The threads a snapshot need not stop. A thread asleep in a system call
 * changes neither its registers nor its user stack until it wakes: it is
 * read from outside before the others are stopped (its call, its time on a
 * cpu, its stack, unwound from sp and pc alone), and confirmed once they
 * are let go. Still in the same call, not a nanosecond more on a cpu: it
 * slept through the snapshot's instant, and what was read is what a stop
 * would have shown. One that woke, or whose walk needed a register besides
 * sp and pc, is stopped as before.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "maps/maps.h"
#include "ptrace/ptrace.h"
#include "target/target.h"
#include "threads/threads-private.h"
#include "unwind/unwind.h"
#include "util/util.h"

/* What a stopped thread's copy reads at most, the same here. */
#define MAX_STACK (256 * 1024)
#define MAX_FRAMES 256

static int compare_tid(const void *a, const void *b)
{
	const struct asleep *x = a, *y = b;

	return (x->tid > y->tid) - (x->tid < y->tid);
}

static struct asleep *find(const struct asleep_set *s, pid_t tid)
{
	struct asleep key = { .tid = tid };

	return s->n ? bsearch(&key, s->a, s->n, sizeof(*s->a), compare_tid) : NULL;
}

/* @a's call, clock and walk; false when it must be stopped instead, with
 * @ret_refused set when /proc would not say. */
static bool look_at(struct asleep *a, pid_t pid, const struct maps *maps, struct unwinder *unw,
		    struct stack_walk *w, int *ret_refused)
{
	uint64_t pcs[MAX_FRAMES];
	int n = target_thread_call(pid, a->tid, &a->call);

	if ((n == -EACCES || n == -EPERM) && !*ret_refused)
		*ret_refused = n;
	if (n < 0 || a->call.nr < 0 || !a->call.sp)
		return false;
	if (target_thread_run_ns(pid, a->tid, &a->run_ns) < 0)
		return false;
	w->regs[UNWIND_REG_RSP] = a->call.sp;
	w->regs[UNWIND_REG_RIP] = a->call.pc;
	if (stack_walk(w, a->tid, maps, unw, pcs, MAX_FRAMES) < 0 || w->n <= 0 || w->gave_out)
		return false;
	n = w->n;
	a->pcs = malloc((size_t)n * sizeof(*pcs));
	if (!a->pcs)
		return false;
	memcpy(a->pcs, pcs, (size_t)n * sizeof(*pcs));
	a->npcs = (size_t)n;
	a->by_frame_pointers = n > 1 && unwinder_by_frame_pointers(unw);
	return true;
}

int asleep_look(struct asleep_set *ret, pid_t pid, const struct thread_record *before,
		size_t n, const struct maps *maps, struct unwinder *unw)
{
	struct stack_walk w = { .sp_pc_only = true, .first = MAX_STACK, .most = MAX_STACK };

	memset(ret, 0, sizeof(*ret));
	if (!maps)
		return 0;
	ret->a = calloc(n ? n : 1, sizeof(*ret->a));
	if (!ret->a)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct asleep *a = &ret->a[ret->n];

		if (before[i].state != 'S' && before[i].state != 'D')
			continue;
		*a = (struct asleep){ .tid = before[i].tid };
		if (look_at(a, pid, maps, unw, &w, &ret->refused))
			ret->n++;
	}
	stack_walk_release(&w);
	qsort(ret->a, ret->n, sizeof(*ret->a), compare_tid);
	return 0;
}

bool asleep_skip(void *set, pid_t tid)
{
	return find(set, tid) != NULL;
}

bool asleep_skip_but_woken(void *set, pid_t tid)
{
	const struct asleep *a = find(set, tid);

	return !a || a->confirmed;
}

size_t asleep_confirm(struct asleep_set *s, pid_t pid)
{
	size_t woke = 0;

	for (size_t i = 0; i < s->n; i++) {
		struct asleep *a = &s->a[i];
		struct target_call again;
		uint64_t run_ns;

		a->confirmed = target_thread_call(pid, a->tid, &again) == 0 &&
			       target_call_same(&a->call, &again) &&
			       target_thread_run_ns(pid, a->tid, &run_ns) == 0 && run_ns == a->run_ns;
		if (!a->confirmed) {
			/* Gone, or woke: stopped now if it is still there. */
			woke++;
			continue;
		}
		if (a->call.nr == NR_RESTART_SYSCALL)
			a->call.nr = ptrace_restarted_call(a->tid, a->call.pc);
	}
	return woke;
}

const struct asleep *asleep_find(const struct asleep_set *s, pid_t tid)
{
	const struct asleep *a = find(s, tid);

	return a && a->confirmed ? a : NULL;
}

void asleep_release(struct asleep_set *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->a[i].pcs);
	free(s->a);
	memset(s, 0, sizeof(*s));
}
