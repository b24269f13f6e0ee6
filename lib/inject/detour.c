/*
 * The detour a chosen thread is sent on: the page of trampoline code and
 * its data (mapped by the thread itself on a first load, from a memfd),
 * the frame laid on its stack with its registers and extended state, and
 * its launch; pages an earlier load left are found for the call to unmap.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "agent/wire.h"
#include "inject/inject-private.h"
#include "inject/trampoline.h"
#include "ptrace/ptrace.h"
#include "util/util.h"

/* glibc's SIGSETXID (__SIGRTMIN + 1), bit signo - 1 of a kernel sigset:
 * answered on the detour's calls (trampoline.h). Injection is into glibc
 * only (dlopen from libc.so.6). */
#define SIGWAKE_MASK (1ULL << (33 - 1))
#define EFLAGS_DF (1u << 10)
#define EFLAGS_AC (1u << 18)

/* Where the data block is in the target. */
uint64_t inject_data_block(const struct call *c)
{
	return c->entry ? c->data : c->page + TRAMP_DATA;
}

uint64_t *inject_field(struct call *c, unsigned off)
{
	return (uint64_t *)(c->image + TRAMP_DATA + off);
}

/* Pages an earlier load left (cprof gone before it unmapped them): the
 * detour's code, a memfd of ours mapped read+execute, with the data block
 * after it. Unmapped by a resident agent's call (TD_UNMAP). */
void inject_find_old_page(struct call *c)
{
	const struct maps *m = c->o->maps;

	for (size_t i = 0; i + 1 < m->n; i++) {
		const struct map_entry *e = &m->entries[i];
		uint64_t magic, done;

		if (!strstr(e->path, "/memfd:" DETOUR_NAME) || e->end - e->start != TRAMP_DATA ||
		    e->prot != (MAPS_READ | MAPS_EXEC) || m->entries[i + 1].start != e->end)
			continue;
		if (inject_peek(c->pid, e->start + TRAMP_DATA + TD_MAGIC, &magic, sizeof(magic)) < 0 ||
		    inject_peek(c->pid, e->start + TRAMP_DATA + TD_DONE, &done, sizeof(done)) < 0)
			continue;
		if (magic == TRAMP_MAGIC && done == 1) {
			c->old_page = e->start;
			return;
		}
	}
}

static int write_code(struct call *c, int fd)
{
	char path[64];
	size_t len = (size_t)(cprof_tramp_code_end - cprof_tramp_code);
	int mfd, r = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", c->pid, fd);
	mfd = open(path, O_WRONLY | O_CLOEXEC);
	if (mfd < 0)
		return -errno;
	if (pwrite(mfd, cprof_tramp_code, len, 0) != (ssize_t)len)
		r = -EIO;
	close(mfd);
	return r;
}

/*
 * The detour's pages for a first load, never writable and executable at
 * once (what MDWE and systemd's MemoryDenyWriteExecute= allow): the code
 * in a memfd mapped read+execute, the data block in an anonymous page
 * right after it (the code reaches it rip-relative). The memfd's name goes
 * below the thread's red zone, where the frame will be written later.
 */
static int map_detour(struct call *c, pid_t tid, const struct user_regs_struct *orig)
{
	uint64_t name = (orig->rsp - TF_RET_POP - 8 * TR_COUNT - 64) & ~(uint64_t)15;
	uint64_t fd, base = 0, v;
	int k;

	if (inject_poke(tid, name, DETOUR_NAME, sizeof(DETOUR_NAME)) < 0) {
		snprintf(c->rep->why, sizeof(c->rep->why), "its stack could not take the detour");
		return -EAGAIN;
	}
	k = REMOTE(c, tid, orig, &fd, SYS_memfd_create, name, MFD_CLOEXEC, 0, 0, 0, 0);
	if (inject_remote_failed(k, fd))
		return k < 0 ? k : (int)fd;
	k = write_code(c, (int)fd);
	if (k < 0)
		goto out_close;
	k = REMOTE(c, tid, orig, &base, SYS_mmap, 0, TRAMP_SIZE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, (uint64_t)-1, 0);
	if (inject_remote_failed(k, base)) {
		k = k < 0 ? k : (int)base;
		base = 0;
		goto out_close;
	}
	k = REMOTE(c, tid, orig, &v, SYS_mmap, base, TRAMP_DATA, PROT_READ | PROT_EXEC,
		   MAP_SHARED | MAP_FIXED, fd, 0);
	if (inject_remote_failed(k, v)) {
		k = k < 0 ? k : (int)v;
		REMOTE(c, tid, orig, &v, SYS_munmap, base, TRAMP_SIZE, 0, 0, 0, 0);
		goto out_close;
	}
	c->page = base;
	c->page_tid = tid;
	k = 0;
out_close:
	REMOTE(c, tid, orig, &v, SYS_close, fd, 0, 0, 0, 0, 0);
	return k;
}

static int save_xstate(struct call *c, pid_t tid)
{
	struct iovec iov = { c->frame + TF_XSAVE, TF_XSAVE_MAX };

	if (ptrace(PTRACE_GETREGSET, tid, (void *)NT_X86_XSTATE, &iov) == 0) {
		c->xsave_size = iov.iov_len;
		c->fxsave = false;
		return 0;
	}
	if (ptrace(PTRACE_GETFPREGS, tid, 0, c->frame + TF_XSAVE) == 0) {
		c->xsave_size = 512;
		c->fxsave = true;
		return 0;
	}
	return errno == ESRCH ? -ESRCH : -ENOTSUP;
}

/* Fills the data block's image: what to call, with what. */
static void fill_image(struct call *c)
{
	*inject_field(c, TD_MAGIC) = TRAMP_MAGIC;
	*inject_field(c, TD_DLOPEN) = c->dlopen;
	*inject_field(c, TD_DLSYM) = c->dlsym;
	*inject_field(c, TD_DLERROR) = c->dlerror;
	*inject_field(c, TD_FLAGS) = RTLD_NOW;
	if (c->o->function) {
		snprintf((char *)inject_field(c, TD_STR), TD_STR_MAX, "%s",
			 c->o->string ? c->o->string : "");
		*inject_field(c, TD_ARG0) = c->o->string ? inject_data_block(c) + TD_STR : 0;
		*inject_field(c, TD_ARG1) = *inject_field(c, TD_ARG2) = *inject_field(c, TD_ARG3) = 0;
	} else {
		*inject_field(c, TD_ARG0) = (uint64_t)(int64_t)c->o->cprof_pid;
		*inject_field(c, TD_ARG1) = c->o->rate;
		*inject_field(c, TD_ARG2) = c->o->ring_size;
		*inject_field(c, TD_ARG3) = c->o->events ? c->o->events : CPROF_EVENTS_HEAP;
	}
	*inject_field(c, TD_DONE) = 0;
	*inject_field(c, TD_UNMAP) = c->old_page;
	/* Preset: the trampoline calls it alone (no dlopen, no dlsym). */
	*inject_field(c, TD_FUNC) = c->attach_fn;
	*inject_field(c, TD_HANDLE) = c->attach_fn ? 1 : 0;
	snprintf((char *)inject_field(c, TD_SYM), TD_SYM_MAX, "%s", inject_function_of(c->o));
	snprintf((char *)inject_field(c, TD_TAILSYM), TD_TAILSYM_MAX, "cprof_agent_tramp_tail");
	*inject_field(c, TD_TAIL) = 0;
	snprintf((char *)inject_field(c, TD_PATH), TD_PATH_MAX, "%s", c->rep->agent_path);
}

static uint64_t *frame_slot(struct call *c, size_t off)
{
	return (uint64_t *)(c->frame + off);
}

/*
 * Lays out the frame of trampoline.h for a thread stopped with @r: the
 * extended state is at TF_XSAVE already (save_xstate()); the registers go
 * to their fixed place below the thread's rsp. Returns the detour's entry
 * rsp, the frame's start in the target; *ret_len: the bytes to write there.
 */
static uint64_t fill_frame(struct call *c, const struct user_regs_struct *r, size_t *ret_len)
{
	uint64_t g = r->rsp - TF_RET_POP - 8 * TR_COUNT, start, rip, rax, *regs;

	start = (g - TF_XSAVE - c->xsave_size) & ~(uint64_t)63;
	/* The registers sit after the xsave image, at g - start from the frame's start. */
	regs = frame_slot(c, g - start);
	memset(c->frame + TF_XSAVE + c->xsave_size, 0, g - start - TF_XSAVE - c->xsave_size);
	*frame_slot(c, TF_REGS) = g;
	*frame_slot(c, TF_SIGOLD) = c->sigmask;
	*frame_slot(c, TF_CANCELSTATE) = 0;
	*frame_slot(c, TF_FXSAVE) = c->fxsave;
	*frame_slot(c, TF_SETCANCEL) = c->setcancel;
	*frame_slot(c, TF_SIGWAKE) = SIGWAKE_MASK;
	ptrace_resume_point(r, &rip, &rax);
	regs[TR_RAX] = rax;
	regs[TR_RBX] = r->rbx;
	regs[TR_RCX] = r->rcx;
	regs[TR_RDX] = r->rdx;
	regs[TR_RSI] = r->rsi;
	regs[TR_RDI] = r->rdi;
	regs[TR_RBP] = r->rbp;
	regs[TR_RSP] = r->rsp;
	regs[TR_R8] = r->r8;
	regs[TR_R9] = r->r9;
	regs[TR_R10] = r->r10;
	regs[TR_R11] = r->r11;
	regs[TR_R12] = r->r12;
	regs[TR_R13] = r->r13;
	regs[TR_R14] = r->r14;
	regs[TR_R15] = r->r15;
	regs[TR_RFLAGS] = r->eflags;
	regs[TR_RIP] = rip;
	*ret_len = (size_t)(g - start) + 8 * TR_COUNT;
	return start;
}

/* With @tid stopped and judged safe: send it on the detour. */
int inject_launch(struct call *c, pid_t tid, const struct user_regs_struct *orig)
{
	struct user_regs_struct r = *orig;
	uint64_t all = ~(uint64_t)0, entry;
	size_t frame_len;
	int k;

	k = save_xstate(c, tid);
	if (k < 0)
		return k;
	/* Its own mask goes back at the detour's end; meanwhile every signal
	 * waits (trampoline.h). */
	if (ptrace(PTRACE_GETSIGMASK, tid, sizeof(c->sigmask), &c->sigmask) < 0)
		return errno == ESRCH ? -ESRCH : -ENOTSUP;
	if (!c->entry && !c->page) {
		/*
		 * Its system calls with every signal held pending: one taken in
		 * between would be dropped by the next call's resume, and sent
		 * again by cprof without its siginfo (glibc's SIGSETXID handler
		 * ignores one not sent by its own process: setuid() would wait
		 * for it forever).
		 */
		ptrace(PTRACE_SETSIGMASK, tid, sizeof(all), &all);
		k = map_detour(c, tid, orig);
		if (k < 0)
			goto out_restore;
	}
	fill_image(c);
	entry = fill_frame(c, orig, &frame_len);
	/* The frame first: a thread's own stack, written only while it is
	 * stopped; a stack that cannot take it (an unfaulted main stack)
	 * refuses this thread, not the call. */
	if (inject_poke(tid, entry, c->frame, frame_len) < 0) {
		snprintf(c->rep->why, sizeof(c->rep->why), "its stack could not take the detour's frame");
		k = -EAGAIN;
		goto out_restore;
	}
	/* The data block: the agent's own, or the one after the code. */
	k = inject_poke(c->pid, inject_data_block(c), c->image + TRAMP_DATA, TD_END);
	if (k < 0)
		goto out_restore;
	r.rip = c->entry ? c->entry : c->page;
	r.rsp = entry;
	r.orig_rax = (uint64_t)-1;
	/* The ABI wants DF clear at a call; AC would fault unaligned code. */
	r.eflags &= ~(uint64_t)(EFLAGS_DF | EFLAGS_AC);
	if (ptrace(PTRACE_SETREGS, tid, 0, &r) < 0)
		return -ESRCH;
	/*
	 * After the registers: if cprof dies in between, the thread runs the
	 * detour with its own mask (every signal blocked, after map_detour)
	 * and puts its own back (TF_SIGOLD), where the other order would
	 * leave every signal blocked for good. Failing here only leaves the
	 * thread that mask over the detour.
	 */
	ptrace(PTRACE_SETSIGMASK, tid, sizeof(all), &all);
	return 0;

out_restore:
	/* What map_detour changed; xstate it did not touch. */
	ptrace(PTRACE_SETREGS, tid, 0, orig);
	ptrace(PTRACE_SETSIGMASK, tid, sizeof(c->sigmask), &c->sigmask);
	return k;
}
