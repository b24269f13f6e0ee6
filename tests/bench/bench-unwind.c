/*
 * bench-unwind: what lib/unwind costs per stack and per frame, unwinding a
 * copy of this process's own stack taken a few calls deep (nested calls of
 * ours, and from inside libc's qsort, which has no frame pointers), warm:
 * CFI parsed, FDEs cached. Printed, never judged: scripts/bench-micro.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "capture-regs.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"
#include "util/util.h"

#define MAX_STACK (128 * 1024)
#define MAX_FRAMES 128
#define ROUNDS 20000

static struct unwind_input in;
static uint8_t stack_copy[MAX_STACK];
static uint64_t stack_top;
static bool taken;

static __attribute__((noinline)) void capture_here(void)
{
	uint64_t regs[UNWIND_NREGS];
	struct iovec local, remote;
	size_t n;

	CAPTURE_REGS(regs);
	n = MIN(stack_top - regs[UNWIND_REG_RSP], (uint64_t)MAX_STACK);
	local = (struct iovec){ stack_copy, n };
	remote = (struct iovec){ (void *)(uintptr_t)regs[UNWIND_REG_RSP], n };
	if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)n)
		return;
	memcpy(in.regs, regs, sizeof(regs));
	in.stack = stack_copy;
	in.stack_size = n;
	in.stack_start = regs[UNWIND_REG_RSP];
	taken = true;
	NO_TAIL();
}

static __attribute__((noinline)) void level3(void)
{
	capture_here();
	NO_TAIL();
}

static __attribute__((noinline)) void level2(void)
{
	level3();
	NO_TAIL();
}

static __attribute__((noinline)) void level1(void)
{
	level2();
	NO_TAIL();
}

static __attribute__((noinline)) int cmp_ints(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	if (!taken)
		capture_here();
	return (x > y) - (x < y);
}

static __attribute__((noinline)) void sort_some(void)
{
	int v[64];

	for (int i = 0; i < 64; i++)
		v[i] = (i * 37) % 64;
	qsort(v, 64, sizeof(v[0]), cmp_ints);
	NO_TAIL();
}

static void *thread_main(void *arg)
{
	pthread_attr_t attr;
	void *addr;
	size_t size;

	pthread_getattr_np(pthread_self(), &attr);
	pthread_attr_getstack(&attr, &addr, &size);
	pthread_attr_destroy(&attr);
	stack_top = (uint64_t)(uintptr_t)addr + size;
	if (arg)
		sort_some();
	else
		level1();
	return NULL;
}

static int measure(struct unwinder *unw, bool through_qsort, const char *what)
{
	uint64_t pcs[MAX_FRAMES], t0, dt;
	pthread_t t;
	int n;

	taken = false;
	if (pthread_create(&t, NULL, thread_main, through_qsort ? &t : NULL) != 0 ||
	    pthread_join(t, NULL) != 0 || !taken)
		return -1;
	n = unwinder_unwind(unw, &in, pcs, MAX_FRAMES);
	if (n <= 0)
		return -1;
	t0 = now_monotonic_ns();
	for (int i = 0; i < ROUNDS; i++)
		unwinder_unwind(unw, &in, pcs, MAX_FRAMES);
	dt = now_monotonic_ns() - t0;
	printf("unwind %s: %d frames, %.2f us per stack (%.0f ns per frame)\n", what, n,
	       dt / 1e3 / ROUNDS, (double)dt / ROUNDS / n);
	return 0;
}

int main(void)
{
	struct symbolizer *sym;
	struct unwinder *unw;
	int r;

	if (symbolizer_new(&sym, getpid()) < 0 ||
	    unwinder_new(&unw, symbolizer_dwfl(sym), getpid()) < 0) {
		fprintf(stderr, "bench-unwind: no symbolizer or unwinder\n");
		return 1;
	}
	r = measure(unw, false, "nested calls");
	if (r == 0)
		r = measure(unw, true, "through qsort");
	unwinder_free(unw);
	symbolizer_unref(sym);
	return r < 0 ? 1 : 0;
}
