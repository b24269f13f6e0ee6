/*
 * lib/unwind: the test process takes its own registers and a copy of its own
 * stack a few calls deep, then unwinds the COPY. glibc's backtrace() (libgcc's
 * DWARF unwinder, run on the live stack at the same spot) is the oracle: an
 * independent unwinder must find the same return addresses.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "capture-regs.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"
#include "util/util.h"

#define MAX_STACK (128 * 1024)
#define MAX_FRAMES 128

struct capture {
	struct unwind_input in;
	uint8_t *stack;
	void *bt[MAX_FRAMES];
	int nbt;
	uint64_t stack_top;
};

static uint64_t stack_top(void)
{
	pthread_attr_t attr;
	void *addr;
	size_t size;

	cr_assert_eq(pthread_getattr_np(pthread_self(), &attr), 0);
	cr_assert_eq(pthread_attr_getstack(&attr, &addr, &size), 0);
	pthread_attr_destroy(&attr);
	return (uint64_t)(uintptr_t)addr + size;
}

/*
 * process_vm_readv, not memcpy: the way cprof reads a target, and it does
 * not trip AddressSanitizer on the red zones of the live frames it copies.
 */
static __attribute__((noinline)) void capture_here(struct capture *c)
{
	uint64_t regs[UNWIND_NREGS];
	struct iovec local, remote;
	uint64_t sp;
	size_t n;

	CAPTURE_REGS(regs);
	c->nbt = backtrace(c->bt, MAX_FRAMES);
	sp = regs[UNWIND_REG_RSP];
	n = MIN(c->stack_top - sp, (uint64_t)MAX_STACK);
	c->stack = malloc(n);
	cr_assert_not_null(c->stack);
	local = (struct iovec){ c->stack, n };
	remote = (struct iovec){ (void *)(uintptr_t)sp, n };
	cr_assert_eq(process_vm_readv(getpid(), &local, 1, &remote, 1, 0), (ssize_t)n);
	memcpy(c->in.regs, regs, sizeof(regs));
	c->in.stack = c->stack;
	c->in.stack_size = n;
	c->in.stack_start = sp;
	NO_TAIL();
}

/* ---- the stacks ------------------------------------------------------- */

static struct capture cap;

static __attribute__((noinline)) void level3(void)
{
	capture_here(&cap);
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

static bool captured_in_cmp;

static __attribute__((noinline)) int cmp_ints(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	if (!captured_in_cmp) {
		captured_in_cmp = true;
		capture_here(&cap);
	}
	return (x > y) - (x < y);
}

static __attribute__((noinline)) void sort_some(void)
{
	int v[64];

	void (*libc_qsort)(void *, size_t, size_t, int (*)(const void *, const void *));
	void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);

	cr_assert_not_null(libc);
	/* libc's own, not a sanitizer's interceptor of the name. */
	libc_qsort = (void (*)(void *, size_t, size_t, int (*)(const void *, const void *)))
		dlsym(libc, "qsort");
	dlclose(libc);
	cr_assert_not_null(libc_qsort);
	for (int i = 0; i < 64; i++)
		v[i] = (i * 37) % 64;
	/* libc's qsort between our frames: no frame pointers in there. */
	libc_qsort(v, 64, sizeof(v[0]), cmp_ints);
	NO_TAIL();
}

static void on_usr1(int sig)
{
	(void)sig;
	capture_here(&cap);
	NO_TAIL();
}

static __attribute__((noinline)) void signal_self(void)
{
	struct sigaction sa = { .sa_handler = on_usr1 };

	sigemptyset(&sa.sa_mask);
	cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	pthread_kill(pthread_self(), SIGUSR1);
	NO_TAIL();
}

enum scenario { NESTED, QSORT, SIGNAL };

static __attribute__((noinline)) void *thread_main(void *arg)
{
	enum scenario sc = (enum scenario)(uintptr_t)arg;

	cap.stack_top = stack_top();
	switch (sc) {
	case NESTED:
		level1();
		break;
	case QSORT:
		sort_some();
		break;
	case SIGNAL:
		signal_self();
		break;
	}
	NO_TAIL();
	return NULL;
}

/* On a thread of its own, the stack ends at start_thread/clone3. */
static void capture_on_thread(enum scenario sc)
{
	pthread_t t;

	memset(&cap, 0, sizeof(cap));
	captured_in_cmp = false;
	cr_assert_eq(pthread_create(&t, NULL, thread_main, (void *)(uintptr_t)sc), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_not_null(cap.stack, "nothing captured");
}

/* ---- checking --------------------------------------------------------- */

static struct symbolizer *sym;
static struct unwinder *unw;

static void setup(void)
{
	cr_assert_eq(symbolizer_new(&sym, getpid()), 0);
	cr_assert_eq(unwinder_new(&unw, symbolizer_dwfl(sym), getpid()), 0);
}

static void teardown(void)
{
	unwinder_free(unw);
	symbolizer_unref(sym);
	free(cap.stack);
	cap.stack = NULL;
}

TestSuite(unwind, .init = setup, .fini = teardown);

/* The outermost (not inlined) function at @pc. */
static const char *fn(uint64_t pc)
{
	struct symbol_info si;

	cr_assert_eq(symbolizer_lookup(sym, pc, &si), 0);
	return si.frames[si.nframes - 1].function;
}

static bool in_libc(uint64_t pc)
{
	struct symbol_info si;

	cr_assert_eq(symbolizer_lookup(sym, pc, &si), 0);
	return si.module && strstr(si.module->path, "/libc.so");
}

static int find_frame(const uint64_t *pcs, int n, int from, const char *name)
{
	for (int i = from; i < n; i++)
		if (!strcmp(fn(pcs[i]), name))
			return i;
	return -1;
}

static void dump(const uint64_t *pcs, int n)
{
	for (int i = 0; i < n; i++)
		fprintf(stderr, "  #%-2d %#" PRIx64 " %s\n", i, pcs[i], fn(pcs[i]));
	for (int i = 0; i < cap.nbt; i++)
		fprintf(stderr, "  bt %-2d %p %s\n", i, cap.bt[i], fn((uint64_t)(uintptr_t)cap.bt[i]));
}

/*
 * Our callers are return address - 1, backtrace()'s the return address; both
 * give the interrupted PC itself for the frame a signal interrupted.
 * backtrace()'s first entries may be in a sanitizer's interceptor of it.
 */
static void expect_same_as_backtrace(const uint64_t *pcs, int n)
{
	int k = 0;

	while (k < cap.nbt && strcmp(fn((uint64_t)(uintptr_t)cap.bt[k]), "capture_here"))
		k++;
	cr_assert_lt(k, cap.nbt, "backtrace() did not see capture_here");
	if (n != cap.nbt - k)
		dump(pcs, n);
	cr_assert_eq(n, cap.nbt - k, "libdw found %d frames, backtrace() %d", n, cap.nbt - k);
	/* [0] differs: ours is at the capture, backtrace's after its own call. */
	for (int i = 1; i < n; i++) {
		uint64_t bt = (uint64_t)(uintptr_t)cap.bt[i + k];

		if (pcs[i] + 1 != bt && pcs[i] != bt)
			dump(pcs, n);
		cr_assert(pcs[i] + 1 == bt || pcs[i] == bt,
			  "frame %d: %#" PRIx64 " vs backtrace %#" PRIx64, i, pcs[i], bt);
	}
}

Test(unwind, nested_calls_on_a_thread)
{
	uint64_t pcs[MAX_FRAMES];
	int n, i;

	capture_on_thread(NESTED);
	n = unwinder_unwind(unw, &cap.in, pcs, MAX_FRAMES);
	cr_assert_gt(n, 5, "got %d frames", n);
	cr_assert_eq(pcs[0], cap.in.regs[UNWIND_REG_RIP]);
	cr_assert_str_eq(fn(pcs[0]), "capture_here");
	cr_assert_str_eq(fn(pcs[1]), "level3");
	cr_assert_str_eq(fn(pcs[2]), "level2");
	cr_assert_str_eq(fn(pcs[3]), "level1");
	cr_assert_str_eq(fn(pcs[4]), "thread_main");
	/* Beyond: pthread's start (and the sanitizer's, under ASan) down to
	 * clone3, all without frame pointers. */
	cr_assert(in_libc(pcs[n - 1]), "last frame %s not in libc", fn(pcs[n - 1]));
	i = find_frame(pcs, n, 5, "start_thread");
	if (i < 0)
		cr_log_warn("no start_thread by name: libc without symbols (libc6-dbg)?");
	expect_same_as_backtrace(pcs, n);
	cr_assert(!unwinder_by_frame_pointers(unw), "CFI all the way, yet said by rbp");
}

Test(unwind, through_libc_qsort)
{
	uint64_t pcs[MAX_FRAMES];
	int n, c, s, libc = 0;

	capture_on_thread(QSORT);
	n = unwinder_unwind(unw, &cap.in, pcs, MAX_FRAMES);
	c = find_frame(pcs, n, 0, "cmp_ints");
	s = find_frame(pcs, n, 0, "sort_some");
	cr_assert_eq(c, 1);
	cr_assert_gt(s, c + 1, "no frames between comparator and caller");
	for (int i = c + 1; i < s; i++)
		libc += in_libc(pcs[i]);
	if (!libc)
		dump(pcs, n);
	cr_assert_gt(libc, 0, "no libc frame between cmp_ints and sort_some");
	cr_assert_str_eq(fn(pcs[s + 1]), "thread_main");
	expect_same_as_backtrace(pcs, n);
	cr_assert(!unwinder_by_frame_pointers(unw), "CFI all the way, yet said by rbp");
}

Test(unwind, through_a_signal_frame)
{
	uint64_t pcs[MAX_FRAMES];
	int n, h, s;

	capture_on_thread(SIGNAL);
	n = unwinder_unwind(unw, &cap.in, pcs, MAX_FRAMES);
	h = find_frame(pcs, n, 0, "on_usr1");
	s = find_frame(pcs, n, 0, "signal_self");
	cr_assert_eq(h, 1);
	cr_assert_gt(s, h + 1);
	/* The frame after the handler is the sigreturn trampoline: its PC is
	 * not a return address, so no - 1 (it would land in the function before). */
	cr_assert(in_libc(pcs[h + 1]));
	cr_assert_str_eq(fn(pcs[s + 1]), "thread_main");
	expect_same_as_backtrace(pcs, n);
}

/*
 * In the main thread, below the test: Criterion's runner (a stripped
 * library), main, libc's start code and _start in our own executable.
 */
static __attribute__((noinline)) void main_thread_capture(void)
{
	memset(&cap, 0, sizeof(cap));
	cap.stack_top = stack_top();
	capture_here(&cap);
	NO_TAIL();
}

Test(unwind, main_thread_reaches_start)
{
	uint64_t pcs[MAX_FRAMES];
	struct symbol_info si;
	int n;

	main_thread_capture();
	n = unwinder_unwind(unw, &cap.in, pcs, MAX_FRAMES);
	cr_assert_gt(n, 4);
	cr_assert_str_eq(fn(pcs[1]), "main_thread_capture");
	cr_assert_str_eq(fn(pcs[n - 1]), "_start");
	cr_assert(in_libc(pcs[n - 2]));
	cr_assert(in_libc(pcs[n - 3]));
	/* Its name is in libc's full symbol table only (libc6-dbg). */
	cr_assert_eq(symbolizer_lookup(sym, pcs[n - 3], &si), 0);
	if (si.module->has_lines)
		cr_assert_str_eq(fn(pcs[n - 3]), "__libc_start_call_main");
	else
		cr_log_warn("libc without debug symbols: cannot name __libc_start_call_main");
	expect_same_as_backtrace(pcs, n);
}

Test(unwind, caps_at_max)
{
	uint64_t pcs[3];

	capture_on_thread(NESTED);
	cr_assert_eq(unwinder_unwind(unw, &cap.in, pcs, 3), 3);
	cr_assert_str_eq(fn(pcs[2]), "level2");
}

Test(unwind, stops_quietly_where_the_copy_ends)
{
	uint64_t full[MAX_FRAMES], pcs[MAX_FRAMES];
	struct unwind_input in = { 0 };
	int n_full, n;

	capture_on_thread(NESTED);
	n_full = unwinder_unwind(unw, &cap.in, full, MAX_FRAMES);

	/* Only the registers: the leaf and nothing else can be trusted. */
	in = cap.in;
	in.stack = NULL;
	in.stack_size = 0;
	cr_assert_eq(unwinder_unwind(unw, &in, pcs, MAX_FRAMES), 1);
	cr_assert_eq(pcs[0], full[0]);

	/* A short copy: a prefix of the full stack. */
	in = cap.in;
	in.stack_size = 160;
	n = unwinder_unwind(unw, &in, pcs, MAX_FRAMES);
	cr_assert_geq(n, 1);
	cr_assert_lt(n, n_full);
	for (int i = 0; i < n; i++)
		cr_assert_eq(pcs[i], full[i], "frame %d differs", i);
}

/*
 * The vDSO's CFI, read from the image dwfl_linux_proc_report() found: as if
 * capture_here had called clock_gettime, stopped at its first instruction
 * (return address pushed, nothing else). Below that, the real stack.
 */
Test(unwind, through_the_vdso)
{
	uint64_t full[MAX_FRAMES], pcs[MAX_FRAMES], entry;
	struct unwind_input in = { 0 };
	uint8_t *stack;
	void *h, *f;
	int n_full, n;

	h = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
	f = h ? dlsym(h, "__vdso_clock_gettime") : NULL;
	if (!f)
		cr_skip_test("no vDSO clock_gettime to be found");
	entry = (uint64_t)(uintptr_t)f;
	capture_on_thread(NESTED);
	n_full = unwinder_unwind(unw, &cap.in, full, MAX_FRAMES);

	stack = malloc(cap.in.stack_size + 8);
	cr_assert_not_null(stack);
	*(uint64_t *)stack = cap.in.regs[UNWIND_REG_RIP] + 1;
	memcpy(stack + 8, cap.in.stack, cap.in.stack_size);
	in = cap.in;
	in.stack = stack;
	in.stack_size += 8;
	in.stack_start -= 8;
	in.regs[UNWIND_REG_RSP] -= 8;
	in.regs[UNWIND_REG_RIP] = entry;
	n = unwinder_unwind(unw, &in, pcs, MAX_FRAMES);
	free(stack);

	cr_assert_eq(n, n_full + 1);
	cr_assert_eq(pcs[0], entry);
	for (int i = 1; i < n; i++)
		cr_assert_eq(pcs[i], full[i - 1], "frame %d differs", i);
}

Test(unwind, no_pc_is_an_error)
{
	struct unwind_input in = { 0 };
	uint64_t pcs[4];

	cr_assert_eq(unwinder_unwind(unw, &in, pcs, 4), -EINVAL);
	in.regs[UNWIND_REG_RIP] = 0x1234;
	cr_assert_eq(unwinder_unwind(unw, &in, pcs, 0), -EINVAL);
}

/*
 * A function with a frame pointer, in assembly so that its CFI is known at
 * any optimization level: in its body CFA = rbp + 16, rbp saved at CFA - 16.
 */
__asm__(".text\n"
	".type fp_function, @function\n"
	"fp_function:\n"
	".cfi_startproc\n"
	"pushq %rbp\n"
	".cfi_def_cfa_offset 16\n"
	".cfi_offset rbp, -16\n"
	"movq %rsp, %rbp\n"
	".cfi_def_cfa_register rbp\n"
	"fp_function_body:\n"
	"nop\n"
	"nop\n"
	"nop\n"
	"nop\n"
	"popq %rbp\n"
	".cfi_def_cfa rsp, 8\n"
	"ret\n"
	".cfi_endproc\n"
	".size fp_function, .-fp_function\n");
extern const char fp_function_body[];

/*
 * A saved rbp that points at itself and a return address back into the same
 * body: by the CFI, each frame's caller is that frame again. Without a guard
 * the walk would run to @max.
 */
Test(unwind, a_looping_stack_ends)
{
	uint64_t words[4], pcs[64], body = (uint64_t)(uintptr_t)fp_function_body;
	struct unwind_input in = { 0 };
	int n;

	in.stack = (const uint8_t *)words;
	in.stack_size = sizeof(words);
	in.stack_start = 0x10000;
	words[0] = in.stack_start; /* saved rbp */
	words[1] = body + 2;       /* return address */
	words[2] = words[3] = 0;
	in.regs[UNWIND_REG_RIP] = body + 1;
	in.regs[UNWIND_REG_RSP] = in.stack_start;
	in.regs[UNWIND_REG_RBP] = in.stack_start;
	n = unwinder_unwind(unw, &in, pcs, 64);
	cr_assert_eq(n, 2, "a loop ran for %d frames", n);
	cr_assert_eq(pcs[0], body + 1);
	cr_assert_eq(pcs[1], body + 1);
}

/* Where there is no CFI at all libdw falls back to the rbp chain. */
Test(unwind, no_cfi_falls_back_to_frame_pointers)
{
	uint64_t words[4], pcs[64];
	struct unwind_input in = { 0 };
	int n;

	in.stack = (const uint8_t *)words;
	in.stack_size = sizeof(words);
	in.stack_start = 0x10000;
	words[0] = 0;      /* saved rbp: the end of the chain */
	words[1] = 0x2001; /* return address, in no module either */
	words[2] = words[3] = 0;
	in.regs[UNWIND_REG_RIP] = 0x1000;
	in.regs[UNWIND_REG_RSP] = in.stack_start;
	in.regs[UNWIND_REG_RBP] = in.stack_start;
	n = unwinder_unwind(unw, &in, pcs, 64);
	cr_assert_eq(n, 2);
	cr_assert_eq(pcs[0], 0x1000);
	cr_assert_eq(pcs[1], 0x2000);
	cr_assert(unwinder_by_frame_pointers(unw));
}

/*
 * Generated code, as a JIT makes it: in anonymous memory, no CFI, a frame
 * pointer kept. push rbp; mov rbp, rsp; call *rdi; pop rbp; ret. It
 * calls level3(), which takes the copy.
 */
static const uint8_t generated[] = { 0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3 };

/* The walk steps over the generated frame by rbp and goes on by CFI from
 * its C caller, down to the thread's start, as backtrace() cannot. */
Test(unwind, through_generated_code_by_frame_pointers)
{
	uint64_t pcs[MAX_FRAMES], code;
	void (*call)(void (*)(void));
	void *page;
	int n, c;

	page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(page, MAP_FAILED);
	memcpy(page, generated, sizeof(generated));
	cr_assert_eq(mprotect(page, 4096, PROT_READ | PROT_EXEC), 0);
	code = (uint64_t)(uintptr_t)page;
	call = (void (*)(void (*)(void)))page;
	memset(&cap, 0, sizeof(cap));
	cap.stack_top = stack_top();
	call(level3);
	n = unwinder_unwind(unw, &cap.in, pcs, MAX_FRAMES);
	munmap(page, 4096);

	c = find_frame(pcs, n, 0, "level3");
	cr_assert_eq(c, 1);
	if (n < c + 4)
		dump(pcs, n);
	cr_assert_geq(n, c + 4, "the walk ended at the generated code");
	cr_assert(pcs[c + 1] >= code && pcs[c + 1] < code + sizeof(generated),
		  "frame %d: %#" PRIx64 " is not the generated code's", c + 1, pcs[c + 1]);
	if (!strstr(fn(pcs[c + 2]), "through_generated_code_by_frame_pointers"))
		dump(pcs, n);
	cr_assert(strstr(fn(pcs[c + 2]), "through_generated_code_by_frame_pointers"),
		  "frame %d: %s", c + 2, fn(pcs[c + 2]));
	cr_assert(unwinder_by_frame_pointers(unw));
	/* Below, CFI again: Criterion's runner, main, libc's start, _start. */
	cr_assert_str_eq(fn(pcs[n - 1]), "_start");
}

Test(unwind, one_unwinder_per_dwfl)
{
	struct unwinder *other = NULL;

	cr_assert_eq(unwinder_new(&other, symbolizer_dwfl(sym), getpid()), -EBUSY);
	cr_assert_null(other);
}
