/*
 * unwinder_unwind() on random registers and a random stack copy, with the
 * real Dwfl of this very process (its own ELF files and CFI). Whatever the
 * bytes, it must not crash, must not read outside the copy (the copy is
 * malloc'd to the byte, so AddressSanitizer sees any overread), and must keep
 * its contract: between 1 and max frames, the first one the given PC.
 *
 * Random PCs almost never land in code, so half of the search space points
 * RIP into a real function: every function symbol of every module, sorted by
 * (module, offset) so that an input means the same thing from run to run
 * despite ASLR. Words of the copy can name such an address too, or a place in
 * the copy itself, as markers (flag bit 3):
 *   0xfffe << 48 | off16 << 32 | index32  -> function[index] + off
 *   0xfffd << 48 | off32                  -> stack_start + off
 *
 * Input: a 160-byte header, then the stack copy.
 *   [0]       flags: bit 0 RIP from the function list (else regs[RIP])
 *                    bit 1 RSP = stack_start + rsp_off % (copy size + 64)
 *                    bit 3 decode markers in the copy and in regs
 *                    bit 4 stack_start from the input (else a fixed value)
 *   [1]       max frames - 1 (mod 128)
 *   [2..3]    offset into the function, [4..7] its index
 *   [8..15]   rsp_off, [16..23] stack_start
 *   [24..159] regs in enum unwind_reg order
 *
 * CPROF_FUZZ_UNWIND_SEED=DIR makes the initializer capture a few real stacks
 * of this process and write them to DIR in this format (scripts/fuzz does,
 * for a corpus that matches the binary it runs).
 */
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "capture-regs.h"
#include "fuzz.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"
#include "util/util.h"

#define HEADER_SIZE 160
#define FIXED_STACK_START 0x7ffd12340000ULL
#define MARK_FUNCTION 0xfffeULL
#define MARK_STACK 0xfffdULL
#define MAX_FRAMES 128

enum {
	F_RIP_FUNCTION = 1 << 0,
	F_RSP_IN_COPY = 1 << 1,
	F_MARKERS = 1 << 3,
	F_RAW_STACK_START = 1 << 4,
	F_SP_PC_ONLY = 1 << 5, /* wall's sleeping threads: no other register */
};

struct function {
	const char *module; /* the name as reported, owned by the Dwfl */
	uint64_t module_start;
	uint64_t addr, size;
};

static struct symbolizer *symbolizer;
static struct unwinder *unwinder;
static struct function *functions; /* sorted by (module, offset) */
static size_t nfunctions, functions_alloc;
static uint64_t *by_addr; /* indexes into functions, sorted by address */

static int cmp_function(const void *a, const void *b)
{
	const struct function *x = a, *y = b;
	int c = strcmp(x->module, y->module);
	uint64_t ox = x->addr - x->module_start, oy = y->addr - y->module_start;

	if (c)
		return c;
	return (ox > oy) - (ox < oy);
}

static int cmp_by_addr(const void *a, const void *b)
{
	uint64_t x = functions[*(const uint64_t *)a].addr, y = functions[*(const uint64_t *)b].addr;

	return (x > y) - (x < y);
}

static int collect_module(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start,
			  void *arg)
{
	int nsyms = dwfl_module_getsymtab(mod);

	(void)userdata;
	(void)arg;
	for (int i = 1; i < nsyms; i++) {
		GElf_Sym sym;
		GElf_Addr addr;

		if (!dwfl_module_getsym_info(mod, i, &sym, &addr, NULL, NULL, NULL))
			continue;
		if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || !sym.st_size || !addr)
			continue;
		if (GROW(functions, nfunctions + 1, functions_alloc) < 0)
			abort();
		functions[nfunctions++] = (struct function){ name, start, addr, sym.st_size };
	}
	return DWARF_CB_OK;
}

static void collect_functions(Dwfl *dwfl)
{
	size_t n = 0;

	dwfl_getmodules(dwfl, collect_module, NULL, 0);
	FUZZ_CHECK(nfunctions > 0, "no function symbols in this process");
	qsort(functions, nfunctions, sizeof(*functions), cmp_function);
	/* Aliases (same address) would make the index ambiguous. */
	for (size_t i = 0; i < nfunctions; i++)
		if (!n || functions[i].addr != functions[n - 1].addr)
			functions[n++] = functions[i];
	nfunctions = n;
	by_addr = malloc(nfunctions * sizeof(*by_addr));
	if (!by_addr)
		abort();
	for (size_t i = 0; i < nfunctions; i++)
		by_addr[i] = i;
	qsort(by_addr, nfunctions, sizeof(*by_addr), cmp_by_addr);
}

static uint64_t function_addr(uint64_t index, uint64_t off)
{
	const struct function *f = &functions[index % nfunctions];

	return f->addr + off % f->size;
}

static uint64_t decode_word(uint64_t w, uint64_t stack_start)
{
	if (w >> 48 == MARK_FUNCTION)
		return function_addr(w & 0xffffffff, (w >> 32) & 0xffff);
	if (w >> 48 == MARK_STACK)
		return stack_start + (w & 0xffffffff);
	return w;
}

static int build_input(const uint8_t *data, size_t size, struct unwind_input *in,
		       uint8_t **ret_stack, size_t *ret_max);

/* ---- writing seeds from real stacks ----------------------------------- */

static bool find_function(uint64_t addr, uint64_t *ret_index, uint64_t *ret_off)
{
	size_t lo = 0, hi = nfunctions;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct function *f = &functions[by_addr[mid]];

		if (addr < f->addr)
			hi = mid;
		else if (addr >= f->addr + f->size)
			lo = mid + 1;
		else if (addr - f->addr > 0xffff)
			return false;
		else
			return *ret_index = by_addr[mid], *ret_off = addr - f->addr, true;
	}
	return false;
}

static uint64_t encode_word(uint64_t w, uint64_t sp, uint64_t n)
{
	uint64_t index, off;

	if (w >= sp && w - sp < n)
		return MARK_STACK << 48 | (w - sp);
	if (find_function(w, &index, &off))
		return MARK_FUNCTION << 48 | off << 32 | index;
	return w;
}


static const char *seed_dir;
static int seed_count;

static int unwind_count(const struct unwind_input *in)
{
	uint64_t pcs[MAX_FRAMES];

	return unwinder_unwind(unwinder, in, pcs, MAX_FRAMES);
}

/* Writes the seed, and says how many frames the raw copy and the seed give:
 * the same number, or the encoding lost something. */
static void write_seed(const struct unwind_input *raw, const uint64_t *regs,
		       const uint8_t *stack, size_t n)
{
	struct unwind_input in = { 0 };
	uint8_t *copy;
	size_t max;
	uint8_t *buf = calloc(1, HEADER_SIZE + n);
	uint64_t index, off, w;
	char path[4096];
	int fd;

	if (!buf)
		abort();
	buf[0] = F_RSP_IN_COPY | F_MARKERS;
	buf[1] = MAX_FRAMES - 1;
	if (find_function(regs[UNWIND_REG_RIP], &index, &off)) {
		uint16_t off16 = (uint16_t)off;
		uint32_t index32 = (uint32_t)index;

		buf[0] |= F_RIP_FUNCTION;
		memcpy(buf + 2, &off16, 2);
		memcpy(buf + 4, &index32, 4);
	}
	/* rsp_off 0: the copy starts at rsp. stack_start: the fixed value. */
	for (int i = 0; i < UNWIND_NREGS; i++) {
		w = encode_word(regs[i], regs[UNWIND_REG_RSP], n);
		memcpy(buf + 24 + 8 * i, &w, 8);
	}
	for (size_t i = 0; i + 8 <= n; i += 8) {
		memcpy(&w, stack + i, 8);
		w = encode_word(w, regs[UNWIND_REG_RSP], n);
		memcpy(buf + HEADER_SIZE + i, &w, 8);
	}
	memcpy(buf + HEADER_SIZE + (n & ~(size_t)7), stack + (n & ~(size_t)7), n & 7);
	snprintf(path, sizeof(path), "%s/seed-%d", seed_dir, seed_count++);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	FUZZ_CHECK(fd >= 0, "cannot create %s", path);
	FUZZ_CHECK(write_full(fd, buf, HEADER_SIZE + n) == 0, "cannot write %s", path);
	close(fd);
	FUZZ_CHECK(build_input(buf, HEADER_SIZE + n, &in, &copy, &max) == 0, "build_input");
	fprintf(stderr, "fuzz-unwind: %s: %zu bytes of stack, %d frames (%d from the live copy)\n",
		path, n, unwind_count(&in), unwind_count(raw));
	free(copy);
	free(buf);
}

/* Copies this thread's stack from the current frame, up to 12 KiB, with
 * process_vm_readv (a plain copy would trip over ASan's red zones). */
static __attribute__((noinline)) void capture_here(void)
{
	uint64_t regs[UNWIND_NREGS];
	uint8_t *stack;
	pthread_attr_t attr;
	void *addr;
	size_t size, n;
	struct iovec local, remote;
	struct unwind_input in = { 0 };

	CAPTURE_REGS(regs);
	FUZZ_CHECK(!pthread_getattr_np(pthread_self(), &attr), "pthread_getattr_np");
	FUZZ_CHECK(!pthread_attr_getstack(&attr, &addr, &size), "pthread_attr_getstack");
	pthread_attr_destroy(&attr);
	n = MIN((uint64_t)(uintptr_t)addr + size - regs[UNWIND_REG_RSP], (uint64_t)12288);
	stack = malloc(n);
	if (!stack)
		abort();
	local = (struct iovec){ stack, n };
	remote = (struct iovec){ (void *)(uintptr_t)regs[UNWIND_REG_RSP], n };
	FUZZ_CHECK(process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)n,
		   "process_vm_readv");
	memcpy(in.regs, regs, sizeof(regs));
	in.stack = stack;
	in.stack_size = n;
	in.stack_start = regs[UNWIND_REG_RSP];
	write_seed(&in, regs, stack, n);
	free(stack);
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
	static bool captured;
	int x = *(const int *)a, y = *(const int *)b;

	if (!captured) {
		captured = true;
		capture_here();
	}
	return (x > y) - (x < y);
}

static __attribute__((noinline)) void *thread_main(void *arg)
{
	int v[16];

	(void)arg;
	level1();
	for (int i = 0; i < 16; i++)
		v[i] = (i * 7) % 16;
	/* Frames of libc's qsort (or of a sanitizer's interceptor) between ours. */
	qsort(v, 16, sizeof(v[0]), cmp_ints);
	NO_TAIL();
	return NULL;
}

static void write_seeds(void)
{
	pthread_t t;

	level1(); /* main thread: up through libFuzzer into main */
	/* A thread's stack ends at clone3: a complete unwind. */
	FUZZ_CHECK(!pthread_create(&t, NULL, thread_main, NULL), "pthread_create");
	pthread_join(t, NULL);
}

/* ---- fuzzing ---------------------------------------------------------- */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int r;

	(void)argc;
	(void)argv;
	r = symbolizer_new(&symbolizer, getpid());
	FUZZ_CHECK(r == 0, "symbolizer_new: %s", strerror(-r));
	r = unwinder_new(&unwinder, symbolizer_dwfl(symbolizer), getpid());
	FUZZ_CHECK(r == 0, "unwinder_new: %s", strerror(-r));
	collect_functions(symbolizer_dwfl(symbolizer));
	seed_dir = getenv("CPROF_FUZZ_UNWIND_SEED");
	if (seed_dir)
		write_seeds();
	return 0;
}

/* Turns fuzz input into an unwind input; the copy is malloc'd to the byte (1
 * for an empty copy, which is then not readable) and returned in *ret_stack. */
static int build_input(const uint8_t *data, size_t size, struct unwind_input *in,
		       uint8_t **ret_stack, size_t *ret_max)
{
	uint8_t header[HEADER_SIZE] = { 0 };
	uint8_t *stack;
	size_t n;
	uint8_t flags;

	memcpy(header, data, MIN(size, sizeof(header)));
	n = size > HEADER_SIZE ? size - HEADER_SIZE : 0;
	stack = malloc(n ? n : 1);
	if (!stack)
		return -ENOMEM;
	if (n)
		memcpy(stack, data + HEADER_SIZE, n);

	flags = header[0];
	*ret_max = 1 + header[1] % MAX_FRAMES;
	memset(in, 0, sizeof(*in));
	in->sp_pc_only = flags & F_SP_PC_ONLY;
	in->stack = stack;
	in->stack_size = n;
	in->stack_start = flags & F_RAW_STACK_START ? fuzz_u64(header + 16, 8) : FIXED_STACK_START;
	for (int i = 0; i < UNWIND_NREGS; i++) {
		in->regs[i] = fuzz_u64(header + 24 + 8 * i, 8);
		if (flags & F_MARKERS)
			in->regs[i] = decode_word(in->regs[i], in->stack_start);
	}
	if (flags & F_RIP_FUNCTION)
		in->regs[UNWIND_REG_RIP] = function_addr(fuzz_u64(header + 4, 4),
							 fuzz_u64(header + 2, 2));
	if (flags & F_RSP_IN_COPY)
		in->regs[UNWIND_REG_RSP] = in->stack_start + fuzz_u64(header + 8, 8) % (n + 64);
	if (flags & F_MARKERS) {
		for (size_t i = 0; i + 8 <= n; i += 8) {
			uint64_t w;

			memcpy(&w, stack + i, 8);
			w = decode_word(w, in->stack_start);
			memcpy(stack + i, &w, 8);
		}
	}
	*ret_stack = stack;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct unwind_input in = { 0 };
	uint64_t pcs[MAX_FRAMES];
	uint8_t *stack;
	size_t max;
	int r;

	if (build_input(data, size, &in, &stack, &max) < 0)
		return 0;
	memset(pcs, 0, sizeof(pcs));
	r = unwinder_unwind(unwinder, &in, pcs, max);
	if (!in.regs[UNWIND_REG_RIP]) {
		FUZZ_CHECK(r == -EINVAL, "unwind from pc 0: %d", r);
	} else if (r < 0) {
		FUZZ_CHECK(r == -ENOENT || r == -ENOMEM, "unwinder_unwind: %d", r);
	} else {
		FUZZ_CHECK(r >= 1 && (size_t)r <= max, "%d frames for at most %zu", r, max);
		FUZZ_CHECK(pcs[0] == in.regs[UNWIND_REG_RIP], "frame 0 is 0x%llx, pc 0x%llx",
			   (unsigned long long)pcs[0],
			   (unsigned long long)in.regs[UNWIND_REG_RIP]);
		for (int i = 0; i < r; i++)
			FUZZ_CHECK(pcs[i], "frame %d is 0", i);
		for (size_t i = (size_t)r; i < MAX_FRAMES; i++)
			FUZZ_CHECK(!pcs[i], "frame %zu written past the count %d", i, r);
	}
	free(stack);
	return 0;
}
