/*
 * What an ALLOC record carries for unwinding: the registers of the sampling
 * function and the stack above them. cprof unwinds with DWARF CFI from there
 * (the agent is built with .eh_frame; the target need not have frame
 * pointers).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "agent.h"

/*
 * agent_capture_regs(regs): store every general register in DWARF order as
 * the caller has it; rsp as it is after our return, rip = our return address.
 * So the snapshot describes the caller at the instruction after the call,
 * where its CFI is valid. A plain asm function: the compiler must not save or
 * clobber anything in between.
 */
__asm__(".text\n"
	".p2align 4\n"
	".globl agent_capture_regs\n"
	".hidden agent_capture_regs\n"
	".type agent_capture_regs, @function\n"
	"agent_capture_regs:\n"
	".cfi_startproc\n"
	"\tmovq %rax, 0(%rdi)\n"
	"\tmovq %rdx, 8(%rdi)\n"
	"\tmovq %rcx, 16(%rdi)\n"
	"\tmovq %rbx, 24(%rdi)\n"
	"\tmovq %rsi, 32(%rdi)\n"
	"\tmovq %rdi, 40(%rdi)\n"
	"\tmovq %rbp, 48(%rdi)\n"
	"\tleaq 8(%rsp), %rax\n"
	"\tmovq %rax, 56(%rdi)\n"
	"\tmovq %r8, 64(%rdi)\n"
	"\tmovq %r9, 72(%rdi)\n"
	"\tmovq %r10, 80(%rdi)\n"
	"\tmovq %r11, 88(%rdi)\n"
	"\tmovq %r12, 96(%rdi)\n"
	"\tmovq %r13, 104(%rdi)\n"
	"\tmovq %r14, 112(%rdi)\n"
	"\tmovq %r15, 120(%rdi)\n"
	"\tmovq (%rsp), %rax\n"
	"\tmovq %rax, 128(%rdi)\n"
	"\tret\n"
	".cfi_endproc\n"
	".size agent_capture_regs, .-agent_capture_regs\n");

/*
 * The copy goes through process_vm_readv() on ourselves: the kernel stops at
 * the first unmapped page instead of faulting, which a memcpy cannot do (a
 * stack on sigaltstack or a coroutine has no bounds we could know). Reading
 * our own process needs no ptrace permission. Partial transfers happen at
 * iovec granularity, so the source is split at page boundaries.
 */
size_t agent_copy_stack(void *dst, uint64_t from, size_t max)
{
	struct iovec local = { .iov_base = dst, .iov_len = max };
	struct iovec remote[CPROF_WIRE_STACK_MAX / 4096 + 2];
	uint64_t page = 4096, at = from, end = from + max;
	int n = 0;
	ssize_t got;

	if (max == 0 || end < from)
		return 0;
	while (at < end && n < (int)(sizeof(remote) / sizeof(remote[0]))) {
		uint64_t next = (at & ~(page - 1)) + page;

		if (next > end)
			next = end;
		remote[n].iov_base = (void *)(uintptr_t)at;
		remote[n].iov_len = next - at;
		n++;
		at = next;
	}
	local.iov_len = at - from;
	got = process_vm_readv(agent_pid, &local, 1, remote, (unsigned long)n, 0);
	return got > 0 ? (size_t)got : 0;
}

/*
 * Where the copy stops: the end of the thread's stack, not merely the next
 * unmapped page. Found without calling anything: the program may be inside
 * any library function when it allocates (pthread_getattr_np(), for one,
 * holds a lock while it calls realloc, and calling it again from the hook
 * deadlocks). So:
 *   - the main thread: its [stack] mapping, read from /proc/self/maps at
 *     attach (raw read(), no stdio), up to __libc_stack_end (the address of
 *     argc, where _start's frame begins) and a little slack for a loader
 *     that moved the stack up past arguments it consumed: above lie argv,
 *     the environment and auxv, no frames (and the environment may hold
 *     secrets);
 *   - a glibc thread: its TCB and static TLS block sit right above its stack
 *     at the top of the same mapping; glibc sizes that block with
 *     _dl_get_tls_static_info() (TCB included, rounded to its alignment:
 *     nptl's tls_static_size_for_stack()), so the stack ends that far below
 *     the mapping's end. Without that function, below our own TLS variable
 *     (which lies in the block, above the stack, but up to the unused
 *     static TLS surplus too high: most of a shallow stack's copy);
 *   - anything else (sigaltstack, coroutines): up to the first unmapped page.
 */
#define MAIN_STACK_SLACK 256

static uint64_t main_stack_lo, main_stack_hi;
static uint64_t static_tls_size; /* 0: unknown */

static uint64_t parse_hex(const char **p)
{
	uint64_t v = 0;

	for (;; (*p)++) {
		char c = **p;

		if (c >= '0' && c <= '9')
			v = v * 16 + (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v * 16 + (uint64_t)(c - 'a' + 10);
		else
			return v;
	}
}

/*
 * Calls @fn(lo, hi, line, arg) for each line of /proc/self/maps until it
 * returns true. Raw reads, no stdio, no malloc: callable from a hook.
 */
static void maps_each(bool (*fn)(uint64_t lo, uint64_t hi, const char *line, void *arg), void *arg)
{
	char buf[4096];
	size_t have = 0;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
		char *nl, *line = buf;

		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = '\0';
		while ((nl = strchr(line, '\n'))) {
			const char *p = line;
			uint64_t lo, hi;

			*nl = '\0';
			lo = parse_hex(&p);
			p++;
			hi = parse_hex(&p);
			if (fn(lo, hi, line, arg))
				goto out_close;
			line = nl + 1;
		}
		have = strlen(line);
		memmove(buf, line, have);
	}
out_close:
	close(fd);
}

static bool is_main_stack(uint64_t lo, uint64_t hi, const char *line, void *arg)
{
	(void)arg;
	if (!strstr(line, "[stack]"))
		return false;
	main_stack_lo = lo;
	main_stack_hi = hi;
	return true;
}

struct range_query {
	uint64_t addr, lo, hi;
};

static bool contains(uint64_t lo, uint64_t hi, const char *line, void *arg)
{
	struct range_query *q = arg;

	(void)line;
	if (q->addr < lo || q->addr >= hi)
		return false;
	q->lo = lo;
	q->hi = hi;
	return true;
}

void capture_init(void)
{
	static bool done;

	/* Once: the main stack stays, and a later attach may run on a thread
	 * stopped inside malloc, where dlsym has no business. */
	if (done)
		return;
	done = true;
	maps_each(is_main_stack, NULL);
	/* ld.so's; dlsym is fine here (attach, not a hook). */
	void **end = dlsym(RTLD_DEFAULT, "__libc_stack_end");
	void (*tls_info)(size_t *size, size_t *align) = (void (*)(size_t *, size_t *))
		dlsym(RTLD_DEFAULT, "_dl_get_tls_static_info");
	uint64_t e = end && *end ? (uint64_t)(uintptr_t)*end + MAIN_STACK_SLACK : 0;
	size_t size = 0, align = 0;

	if (e > main_stack_lo && e < main_stack_hi)
		main_stack_hi = e;
	if (tls_info) {
		tls_info(&size, &align);
		/* The alignment is a power of two; anything else is not glibc's. */
		if (align && !(align & (align - 1)) && size < (1u << 20))
			static_tls_size = (size + align - 1) & ~(uint64_t)(align - 1);
	}
}

/*
 * A glibc thread's stack mapping, looked up once per thread (on its first
 * sample: /proc/self/maps, raw) and kept in TLS. Within it, and within the
 * main thread's [stack], the copy is a plain memcpy: the bytes from rsp to
 * the mapping's end are mapped for as long as the thread runs on them. That
 * saves process_vm_readv's system call on every sample, which a
 * malloc-bound program would feel.
 */
/* [lo, top): where its frames are. top 0: not looked up yet; 1: none found. */
static AGENT_TLS uint64_t thread_stack_lo, thread_stack_top;

size_t agent_stack_limit(uint64_t rsp, size_t max, bool *ret_direct)
{
	uint64_t tls = (uint64_t)(uintptr_t)&agent_countdown, end;

	*ret_direct = false;
	if (rsp >= main_stack_lo && rsp < main_stack_hi) {
		*ret_direct = true;
		return main_stack_hi - rsp < max ? (size_t)(main_stack_hi - rsp) : max;
	}
	if (!thread_stack_top) {
		struct range_query q = { .addr = rsp };

		maps_each(contains, &q);
		/* Ours only if our TLS sits in it too (not a coroutine's stack). */
		if (q.hi && tls >= q.lo && tls < q.hi) {
			uint64_t top = q.hi - static_tls_size;

			thread_stack_lo = q.lo;
			/* Our TLS is in the block: above the stack's top. A top
			 * that is not means a layout we do not know. */
			thread_stack_top = static_tls_size && top > rsp && top <= tls ? top : tls;
		} else {
			thread_stack_top = 1;
		}
	}
	if (rsp >= thread_stack_lo && rsp < thread_stack_top) {
		*ret_direct = true;
		end = thread_stack_top;
		return end - rsp < max ? (size_t)(end - rsp) : max;
	}
	/* 64 MiB: more than any thread stack glibc would put below its TLS. */
	if (rsp < tls && tls - rsp < (64ull << 20))
		return tls - rsp < max ? (size_t)(tls - rsp) : max;
	return max;
}

/*
 * The thread's own stack, copied by the agent's own instruction: the
 * program's memcpy may be someone else's (ASan's checks what it copies,
 * and a stack holds its redzones: the program was stopped with a report),
 * and the compiler calls memcpy for a copy of unknown size.
 */
static void copy_own_stack(void *dst, const void *src, size_t n)
{
	__asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}

size_t agent_capture_stack(void *dst, uint64_t rsp, size_t limit, bool direct)
{
	if (!direct)
		return agent_copy_stack(dst, rsp, limit);
	copy_own_stack(dst, (const void *)(uintptr_t)rsp, limit);
	return limit;
}

size_t agent_sample_stack(void *dst, const uint64_t *regs, size_t limit, bool direct,
			  bool *ret_walked)
{
	size_t frames = 0;

	if (direct && agent_ring.rules)
		frames = agent_walk(agent_ring.rules, agent_ring.rules_bits, regs,
				    regs[CPROF_REG_RSP] + limit, dst, CPROF_RULES_MAX_FRAMES);
	*ret_walked = frames > 0;
	if (frames)
		return frames * sizeof(uint64_t);
	if (limit > CPROF_WIRE_STACK_MAX)
		limit = CPROF_WIRE_STACK_MAX;
	return agent_capture_stack(dst, regs[CPROF_REG_RSP], limit, direct);
}

static AGENT_TLS uint32_t cached_tid;

uint32_t agent_tid(void)
{
	if (unlikely(!cached_tid))
		cached_tid = (uint32_t)gettid();
	return cached_tid;
}

void capture_forget_thread(void)
{
	cached_tid = 0;
	thread_stack_lo = 0;
	thread_stack_top = 0;
}
