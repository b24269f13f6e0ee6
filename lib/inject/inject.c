/*
 * The remote call of inject.h, step by step:
 *
 *   1. before anything stops: find dlopen/dlsym/dlerror in the target's libc,
 *      the path the agent has (or will have) there, a trampoline page left
 *      by an earlier run;
 *   2. in a tracer thread that blocks every catchable signal: SEIZE and
 *      INTERRUPT one thread at a time, judge it (judge.c), let it go if
 *      unsafe, try the next one;
 *   3. with a safe thread stopped: save its registers and extended state;
 *      if there is no page yet, make it run mmap (PTRACE_SYSCALL to its exit)
 *      from its own syscall instruction; write the code and data; point it
 *      at the code; DETACH. It runs the call on its own and comes back;
 *   4. wait, without ptrace, for the page to say done, and read the results.
 */
#include "inject/inject.h"

#include <dirent.h>
#include <errno.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/wire.h"
#include "inject/inject-private.h"
#include "inject/trampoline.h"
#include "ptrace/ptrace.h"
#include "target/target.h"
#include "util/util.h"

#define DETOUR_NAME "cprof-detour"
#define FRAME_MAX ((TF_XSAVE + TF_XSAVE_MAX + 64 + 8 * TR_COUNT + 63) & ~63)
#define STOP_TIMEOUT_NS (100ULL * 1000 * 1000)
#define SYSCALL_TIMEOUT_NS (1000ULL * 1000 * 1000)
#define MAX_PENDING 8
/* glibc's SIGSETXID (__SIGRTMIN + 1), bit signo - 1 of a kernel sigset:
 * answered on the detour's calls (trampoline.h). Injection is into glibc
 * only (dlopen from libc.so.6). */
#define SIGWAKE_MASK (1ULL << (33 - 1))
#define MIN_NAP_NS (1000ULL * 1000)
#define MAX_NAP_NS (50ULL * 1000 * 1000)
#define LOOK_DUTY 10
#define EFLAGS_DF (1u << 10)
#define EFLAGS_AC (1u << 18)

struct call {
	pid_t pid;
	const struct inject_opts *o;
	struct inject_report *rep;
	uint64_t dlopen, dlsym, dlerror, syscall_fn, setcancel;
	/* The resident agent's attach function, when it ran a session before
	 * (warm_agent()): called alone, by any thread not in the loader, from
	 * the agent's own copy of the trampoline (entry), its data block at
	 * data; 0 when the code goes to a page. */
	uint64_t attach_fn, entry, data;
	uint64_t old_page; /* a page an earlier load left, unmapped by the call */
	uint64_t page; /* the trampoline page in the target; 0: none yet */
	pid_t page_tid; /* the thread that mapped it */
	pid_t tid;     /* the thread sent on the detour */
	int pending[MAX_PENDING]; /* signals to hand back to it */
	size_t npending;
	int result;
	uint8_t *image; /* TRAMP_SIZE bytes: what the page will hold */
	uint8_t *frame; /* FRAME_MAX bytes: the frame for the thread's stack */
	size_t xsave_size;
	bool fxsave;
	uint64_t sigmask; /* the chosen thread's, put back by the trampoline */
	uint64_t longest_look_ns; /* the longest a refused thread was held, this round */
	bool left_by_tail;        /* the thread left the page by the agent's tail */
	pid_t late_tid;           /* interrupted, not stopped within STOP_TIMEOUT_NS */
	uint64_t late_since;      /* when it was interrupted */
};

/* ---- memory of the target -------------------------------------------- */

static int peek(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };

	return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -EFAULT;
}

static int poke(pid_t pid, uint64_t addr, const void *buf, size_t len)
{
	struct iovec local = { (void *)buf, len }, remote = { (void *)(uintptr_t)addr, len };

	return process_vm_writev(pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -EFAULT;
}

/* Where the data block is in the target. */
static uint64_t data_block(const struct call *c)
{
	return c->entry ? c->data : c->page + TRAMP_DATA;
}

static uint64_t *field(struct call *c, unsigned off)
{
	return (uint64_t *)(c->image + TRAMP_DATA + off);
}

/* Pages an earlier load left (cprof gone before it unmapped them): the
 * detour's code, a memfd of ours mapped read+execute, with the data block
 * after it. Unmapped by a resident agent's call (TD_UNMAP). */
static void find_old_page(struct call *c)
{
	const struct maps *m = c->o->maps;

	for (size_t i = 0; i + 1 < m->n; i++) {
		const struct map_entry *e = &m->entries[i];
		uint64_t magic, done;

		if (!strstr(e->path, "/memfd:" DETOUR_NAME) || e->end - e->start != TRAMP_DATA ||
		    e->prot != (MAPS_READ | MAPS_EXEC) || m->entries[i + 1].start != e->end)
			continue;
		if (peek(c->pid, e->start + TRAMP_DATA + TD_MAGIC, &magic, sizeof(magic)) < 0 ||
		    peek(c->pid, e->start + TRAMP_DATA + TD_DONE, &done, sizeof(done)) < 0)
			continue;
		if (magic == TRAMP_MAGIC && done == 1) {
			c->old_page = e->start;
			return;
		}
	}
}

/* ---- the agent's path ------------------------------------------------- */

static const char *function_of(const struct inject_opts *o)
{
	return o->function ? o->function : "cprof_agent_attach_events";
}

static bool is_agent(const char *path)
{
	const char *b = strrchr(path, '/');

	return b && strncmp(b + 1, "cprof-agent", 11) == 0 && strstr(b, ".so");
}

/* stat() of @path as process @pid resolves it (target_open_in_root()). */
static int stat_in_root(pid_t pid, const char *path, struct stat *ret)
{
	int fd = target_open_in_root(pid, path, 0), r = 0;

	if (fd < 0)
		return fd;
	if (fstat(fd, ret) < 0)
		r = -errno;
	close(fd);
	return r;
}

/*
 * Has the resident agent held a session? Its memfd is among the target's
 * files from its first attach on, which got done all that attach does once
 * (resolving functions with dlsym, pthread_atfork): what is left of an
 * attach then allocates nothing and takes no lock of the loader's but
 * dl_iterate_phdr's (reentrant), so a thread stopped inside malloc may run
 * it. A thread inside the loader, a signal handler or the agent still may
 * not (judge.c).
 */
static bool warm_agent(pid_t pid)
{
	char dir[64], path[320], link[128];
	struct dirent *d;
	bool warm = false;
	DIR *fds;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	fds = opendir(dir);
	if (!fds)
		return false;
	while (!warm && (d = readdir(fds))) {
		ssize_t n;

		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		warm = strncmp(link, "/memfd:cprof-agent", 18) == 0;
	}
	closedir(fds);
	return warm;
}

/*
 * A resident agent is used again, by the path it was loaded from (dlopen of
 * the same path returns it, never a second copy that would hook the first).
 * Otherwise ours, if the target sees the very same file at that path, else
 * a copy placed in the target's root (place.c).
 */
static int choose_agent_path(struct call *c)
{
	const struct maps *m = c->o->maps;
	struct stat a, b;
	int r;

	for (size_t i = 0; i < m->n; i++)
		if (is_agent(m->entries[i].path)) {
			if (strstr(m->entries[i].path, " (deleted)"))
				return -EXDEV;
			snprintf(c->rep->agent_path, sizeof(c->rep->agent_path), "%s",
				 m->entries[i].path);
			if (warm_agent(c->pid) &&
			    inject_find_function(c->pid, m, "cprof-agent", function_of(c->o),
						 &c->attach_fn) == 0 &&
			    inject_find_function(c->pid, m, "cprof-agent", "cprof_agent_tramp",
						 &c->entry) == 0 &&
			    inject_find_function(c->pid, m, "cprof-agent", "cprof_agent_tramp_data",
						 &c->data) == 0)
				c->rep->resident = 1;
			else
				c->attach_fn = c->entry = c->data = 0;
			return 0;
		}
	if (c->o->agent_path[0] != '/' || strlen(c->o->agent_path) >= TD_PATH_MAX)
		return -EINVAL;
	if (stat(c->o->agent_path, &a) < 0)
		return -errno;
	if (stat_in_root(c->pid, c->o->agent_path, &b) == 0 && a.st_dev == b.st_dev &&
	    a.st_ino == b.st_ino) {
		snprintf(c->rep->agent_path, sizeof(c->rep->agent_path), "%s",
			 c->o->agent_path);
		return 0;
	}
	/* Another root (a container): the target gets a copy of its own. */
	r = inject_place_agent(c->pid, c->o->agent_path, c->rep->agent_path,
			       sizeof(c->rep->agent_path));
	if (r < 0) {
		c->rep->place_error = r;
		return -EXDEV;
	}
	c->rep->placed = r == 0 ? 1 : 2;
	return 0;
}

/* ---- ptrace steps (tracer thread) ---------------------------------------- */

static int wait_stop(pid_t tid, int *status, uint64_t timeout_ns, bool collect)
{
	const struct timespec pause = { 0, 20000 };
	uint64_t deadline = now_monotonic_ns() + timeout_ns;

	for (;;) {
		pid_t w = collect ? waitpid(tid, status, __WALL | WNOHANG)
				  : ptrace_peek_stop(tid, status);

		if (w < 0)
			return -ESRCH;
		if (w > 0)
			return WIFSTOPPED(*status) ? 0 : -ESRCH;
		if (now_monotonic_ns() >= deadline)
			return -ETIMEDOUT;
		nanosleep(&pause, NULL);
	}
}

static void detach(struct call *c, pid_t tid)
{
	int first = c->npending ? c->pending[0] : 0;

	ptrace(PTRACE_DETACH, tid, 0, (void *)(uintptr_t)first);
	/* More than one arrived meanwhile (rare): send the rest again. */
	for (size_t i = 1; i < c->npending; i++)
		syscall(SYS_tgkill, c->pid, tid, c->pending[i]);
	c->npending = 0;
}

static void keep_signal(struct call *c, int sig)
{
	if (c->npending < MAX_PENDING)
		c->pending[c->npending++] = sig;
}

/*
 * Runs one system call in the stopped thread: PTRACE_SYSCALL to its entry
 * and exit stops, all within SYSCALL_TIMEOUT_NS.
 *
 * A signal that arrives first stops the thread in signal-delivery-stop
 * before the call ran (signals are taken on the way back to user space,
 * and the exit stop comes before that): this thread is given up, and the
 * caller puts its registers back and detaches with that signal, which the
 * thread then takes as if it had never been stopped (siginfo intact).
 * Holding such signals back would lose them, and a stream of signals would
 * keep the thread from ever reaching the call.
 */
static int remote_syscall(struct call *c, pid_t tid, struct user_regs_struct *r)
{
	uint64_t deadline = now_monotonic_ns() + SYSCALL_TIMEOUT_NS, now;
	unsigned syscall_stops = 0;
	int status, k;

	if (ptrace(PTRACE_SETREGS, tid, 0, r) < 0 || ptrace(PTRACE_SYSCALL, tid, 0, 0) < 0)
		return -ESRCH;
	while (syscall_stops < 2) {
		now = now_monotonic_ns();
		k = now < deadline ? wait_stop(tid, &status, deadline - now, true) : -ETIMEDOUT;
		if (k == -ETIMEDOUT) {
			/* Cannot happen for mmap; get the thread back to a stop. */
			ptrace(PTRACE_INTERRUPT, tid, 0, 0);
			if (wait_stop(tid, &status, SYSCALL_TIMEOUT_NS, true) < 0)
				return -ESRCH;
			if (status >> 16 == 0 && WSTOPSIG(status) != (SIGTRAP | 0x80))
				keep_signal(c, WSTOPSIG(status));
			return -ETIMEDOUT;
		}
		if (k < 0)
			return k;
		if (WSTOPSIG(status) == (SIGTRAP | 0x80)) {
			syscall_stops++;
		} else if (status >> 16 == 0) {
			keep_signal(c, WSTOPSIG(status));
			snprintf(c->rep->why, sizeof(c->rep->why), "a signal was arriving");
			return -EAGAIN;
		}
		if (syscall_stops < 2 && ptrace(PTRACE_SYSCALL, tid, 0, 0) < 0)
			return -ESRCH;
	}
	return ptrace(PTRACE_GETREGS, tid, 0, r) < 0 ? -ESRCH : 0;
}

/* Where the thread can run a syscall instruction: right behind its pc if
 * it was asleep in a call, else inside libc's syscall(). */
static int syscall_site(struct call *c, pid_t tid, const struct user_regs_struct *r,
			uint64_t *ret)
{
	uint8_t code[64];

	if (ptrace_was_blocked(r) && peek(tid, r->rip - 2, code, 2) == 0 && code[0] == 0x0f &&
	    code[1] == 0x05) {
		*ret = r->rip - 2;
		return 0;
	}
	if (!c->syscall_fn || peek(tid, c->syscall_fn, code, sizeof(code)) < 0)
		return -ENOTSUP;
	for (size_t i = 0; i + 1 < sizeof(code); i++)
		if (code[i] == 0x0f && code[i + 1] == 0x05) {
			*ret = c->syscall_fn + i;
			return 0;
		}
	return -ENOTSUP;
}

/* System call @nr with @args, run by stopped thread @tid from the state
 * @orig (whose registers it changes: the caller puts them back). Its
 * result, or -errno from ptrace. */
static int remote(struct call *c, pid_t tid, const struct user_regs_struct *orig, long nr,
		  const uint64_t args[6], uint64_t *ret)
{
	struct user_regs_struct r = *orig;
	uint64_t site;
	int k;

	k = syscall_site(c, tid, orig, &site);
	if (k < 0)
		return k;
	r.rip = site;
	r.rax = (uint64_t)nr;
	r.orig_rax = (uint64_t)-1; /* no restart of the interrupted call */
	r.rdi = args[0];
	r.rsi = args[1];
	r.rdx = args[2];
	r.r10 = args[3];
	r.r8 = args[4];
	r.r9 = args[5];
	k = remote_syscall(c, tid, &r);
	if (k < 0)
		return k;
	*ret = r.rax;
	return 0;
}

#define REMOTE(c, tid, orig, ret, nr, ...) \
	remote((c), (tid), (orig), (nr), (const uint64_t[6]){ __VA_ARGS__ }, (ret))

static bool remote_failed(int k, uint64_t v)
{
	return k < 0 || v > (uint64_t)-4096;
}

/* The code, through the memfd's /proc entry (ptrace access allows it). */
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

	if (poke(tid, name, DETOUR_NAME, sizeof(DETOUR_NAME)) < 0) {
		snprintf(c->rep->why, sizeof(c->rep->why), "its stack could not take the detour");
		return -EAGAIN;
	}
	k = REMOTE(c, tid, orig, &fd, SYS_memfd_create, name, MFD_CLOEXEC, 0, 0, 0, 0);
	if (remote_failed(k, fd))
		return k < 0 ? k : (int)fd;
	k = write_code(c, (int)fd);
	if (k < 0)
		goto out_close;
	k = REMOTE(c, tid, orig, &base, SYS_mmap, 0, TRAMP_SIZE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, (uint64_t)-1, 0);
	if (remote_failed(k, base)) {
		k = k < 0 ? k : (int)base;
		base = 0;
		goto out_close;
	}
	k = REMOTE(c, tid, orig, &v, SYS_mmap, base, TRAMP_DATA, PROT_READ | PROT_EXEC,
		   MAP_SHARED | MAP_FIXED, fd, 0);
	if (remote_failed(k, v)) {
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
	*field(c, TD_MAGIC) = TRAMP_MAGIC;
	*field(c, TD_DLOPEN) = c->dlopen;
	*field(c, TD_DLSYM) = c->dlsym;
	*field(c, TD_DLERROR) = c->dlerror;
	*field(c, TD_FLAGS) = RTLD_NOW;
	if (c->o->function) {
		snprintf((char *)field(c, TD_STR), TD_STR_MAX, "%s",
			 c->o->string ? c->o->string : "");
		*field(c, TD_ARG0) = c->o->string ? data_block(c) + TD_STR : 0;
		*field(c, TD_ARG1) = *field(c, TD_ARG2) = *field(c, TD_ARG3) = 0;
	} else {
		*field(c, TD_ARG0) = (uint64_t)(int64_t)c->o->cprof_pid;
		*field(c, TD_ARG1) = c->o->rate;
		*field(c, TD_ARG2) = c->o->ring_size;
		*field(c, TD_ARG3) = c->o->events ? c->o->events : CPROF_EVENTS_HEAP;
	}
	*field(c, TD_DONE) = 0;
	*field(c, TD_UNMAP) = c->old_page;
	/* Preset: the trampoline calls it alone (no dlopen, no dlsym). */
	*field(c, TD_FUNC) = c->attach_fn;
	*field(c, TD_HANDLE) = c->attach_fn ? 1 : 0;
	snprintf((char *)field(c, TD_SYM), TD_SYM_MAX, "%s", function_of(c->o));
	snprintf((char *)field(c, TD_TAILSYM), TD_TAILSYM_MAX, "cprof_agent_tramp_tail");
	*field(c, TD_TAIL) = 0;
	snprintf((char *)field(c, TD_PATH), TD_PATH_MAX, "%s", c->rep->agent_path);
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
static int launch(struct call *c, pid_t tid, const struct user_regs_struct *orig)
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
	if (poke(tid, entry, c->frame, frame_len) < 0) {
		snprintf(c->rep->why, sizeof(c->rep->why), "its stack could not take the detour's frame");
		k = -EAGAIN;
		goto out_restore;
	}
	/* The data block: the agent's own, or the one after the code. */
	k = poke(c->pid, data_block(c), c->image + TRAMP_DATA, TD_END);
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

static int seize_error(struct call *c, pid_t tid, int err)
{
	char path[64], buf[4096], *p;
	size_t n;

	if (err != EPERM)
		return -err;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", c->pid, tid);
	if (proc_read(path, buf, sizeof(buf) - 1, &n) == 0) {
		buf[n] = '\0';
		p = strstr(buf, "TracerPid:");
		/* This thread: seized in an earlier round, its stop late. */
		if (p && atoi(p + 10) == gettid())
			return -EALREADY;
		if (p && atoi(p + 10) > 0)
			return -EBUSY;
	}
	return -EPERM;
}

/* 0: launched; -EAGAIN: not this one; other -errno: give up. */
static int try_thread(struct call *c, pid_t tid)
{
	struct user_regs_struct regs;
	uint64_t t0, stopped;
	int status, k;

	c->rep->tried++;
	/* Seen from outside first: a thread asleep where it must not load
	 * the agent (in malloc's lock, the loader's) is not even stopped. */
	if (tid != c->late_tid &&
	    inject_judge_asleep(c->o, c->pid, tid, c->attach_fn != 0 && !c->o->function,
				c->rep->why, sizeof(c->rep->why)) == -EAGAIN) {
		c->rep->refused++;
		return -EAGAIN;
	}
	t0 = now_monotonic_ns();
	if (ptrace(PTRACE_SEIZE, tid, 0, PTRACE_O_TRACESYSGOOD) < 0) {
		if (errno == ESRCH)
			return -EAGAIN;
		k = seize_error(c, tid, errno);
		/* Interrupted in an earlier round and not stopped by then (a
		 * busy machine, a disk wait): the stop is still on its way. */
		if (k != -EALREADY)
			return k;
		if (tid == c->late_tid)
			t0 = c->late_since;
	} else if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) < 0) {
		return -EAGAIN;
	}
	k = wait_stop(tid, &status, STOP_TIMEOUT_NS, false);
	if (k < 0) {
		/* Uninterruptible sleep or no CPU for it: it stays seized, and
		 * the next round waits for its stop again. A thread refused
		 * for its state before says more than this one's delay. */
		if (!c->rep->refused)
			snprintf(c->rep->why, sizeof(c->rep->why), "thread %d did not stop", tid);
		c->late_tid = tid;
		c->late_since = t0;
		return -EAGAIN;
	}
	if (status >> 16 != PTRACE_EVENT_STOP) {
		/* A signal is on its way in: let it go with it. */
		ptrace(PTRACE_DETACH, tid, 0, (void *)(uintptr_t)WSTOPSIG(status));
		snprintf(c->rep->why, sizeof(c->rep->why), "a signal was arriving");
		return -EAGAIN;
	}
	if (WSTOPSIG(status) != SIGTRAP) {
		ptrace(PTRACE_DETACH, tid, 0, 0);
		return -ENOTSUP; /* group-stopped: nothing would run the call */
	}
	waitpid(tid, &status, __WALL | WNOHANG); /* ours: carries no signal */
	stopped = now_monotonic_ns();
	if (ptrace(PTRACE_GETREGS, tid, 0, &regs) < 0)
		return -EAGAIN;
	/* The target's own policy first: a call it forbids is never made. */
	k = inject_seccomp_check(c->pid, tid, regs.rip, c->rep->why, sizeof(c->rep->why));
	if (k < 0) {
		detach(c, tid);
		return k == -ESRCH ? -EAGAIN : k;
	}
	/* Only a resident agent's attach allocates nothing (warm_agent()). */
	k = inject_judge_thread(c->o, tid, &regs, c->attach_fn != 0 && !c->o->function,
				c->rep->why, sizeof(c->rep->why));
	if (k == 0)
		k = launch(c, tid, &regs);
	if (k < 0) {
		if (k == -EAGAIN)
			c->rep->refused++;
		detach(c, tid);
		c->longest_look_ns = MAX(c->longest_look_ns, now_monotonic_ns() - stopped);
		return k == -ESRCH ? -EAGAIN : k;
	}
	c->tid = tid;
	detach(c, tid);
	c->rep->stopped_ns = now_monotonic_ns() - t0;
	return 0;
}

/* Between looks, no thread stopped: the caller may give up (Ctrl-C). */
static bool cancelled(const struct call *c)
{
	return c->o->cancelled && c->o->cancelled();
}

/*
 * Rounds of looks, each thread once, until one is safe. Between rounds the
 * threads run for LOOK_DUTY times the longest stop of a round (smoothed),
 * so that looking takes about a tenth of a thread's time at most while it
 * lasts: a look told by the pc alone holds the thread for microseconds and
 * the next round comes a millisecond later, so that even a loop that is
 * inside malloc nearly all the time is caught outside it within a few
 * hundred looks; a look that unwound waits correspondingly longer.
 */
static void *tracer_main(void *arg)
{
	struct call *c = arg;
	uint64_t start = now_monotonic_ns();
	uint64_t deadline = start + (uint64_t)c->o->pick_timeout_ms * 1000000ULL;
	unsigned seed = (unsigned)now_monotonic_ns();
	uint64_t held_ns = 0;

	c->result = -EAGAIN;
	while (now_monotonic_ns() < deadline) {
		uint64_t nap_ns;
		struct timespec nap;
		pid_t *tids;
		size_t n;

		/* A dying target lists its threads a while longer, and they
		 * never stop: do not wait out the deadline on them. */
		if (!target_alive(c->pid) || inject_order_threads(c->pid, &tids, &n) < 0) {
			c->result = -ESRCH;
			return NULL;
		}
		c->longest_look_ns = 0;
		for (size_t i = 0; i < n; i++) {
			int k = cancelled(c) ? -ECANCELED : try_thread(c, tids[i]);

			if (k != -EAGAIN) {
				c->result = k;
				free(tids);
				return NULL;
			}
		}
		free(tids);
		/* Smoothed: one look that cprof's own preemption made long
		 * must not stall the search. */
		held_ns = held_ns ? (3 * held_ns + c->longest_look_ns) / 4 : c->longest_look_ns;
		nap_ns = MIN(MAX(MIN_NAP_NS, held_ns * LOOK_DUTY), MAX_NAP_NS);
		/* +-50%: not in step with the target's loops. */
		nap_ns = nap_ns / 2 + (uint64_t)rand_r(&seed) % nap_ns;
		nap = (struct timespec){ (time_t)(nap_ns / 1000000000ULL),
					 (long)(nap_ns % 1000000000ULL) };
		if (c->o->looking)
			c->o->looking(c->rep, now_monotonic_ns() - start);
		nanosleep(&nap, NULL);
		if (cancelled(c)) {
			c->result = -ECANCELED;
			return NULL;
		}
	}
	/* Returning ends this thread: the kernel lets go of any thread
	 * still seized (one that never reached its stop). */
	return NULL;
}

/* Runs @fn in a tracer thread of its own that blocks every catchable
 * signal (cprof's Ctrl-C must not interrupt a stop), and waits for it. */
static int run_tracer(struct call *c, void *(*fn)(void *))
{
	sigset_t all, old;
	pthread_t th;
	int r;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&th, NULL, fn, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r)
		return -r;
	pthread_join(th, NULL);
	return c->result;
}

/*
 * After a first load: the detour's pages go, so that nothing cprof mapped
 * stays in the target. The thread that took the detour, stopped once more,
 * runs munmap and goes back to where it was (its interrupted call restarted
 * as the detour would). Failing that, the next session's call unmaps them
 * (find_old_page()).
 */
/* One try: -EINPROGRESS while the thread is still on its way out of the
 * code (done is set two instructions before its jump to the agent's tail);
 * out of it, nothing returns into it (trampoline.h). */
static int unmap_once(struct call *c)
{
	struct user_regs_struct orig, r;
	uint64_t v, rip, rax;
	int status, k = -EAGAIN;

	if (ptrace(PTRACE_SEIZE, c->tid, 0, PTRACE_O_TRACESYSGOOD) < 0)
		return -ESRCH;
	if (ptrace(PTRACE_INTERRUPT, c->tid, 0, 0) < 0 ||
	    wait_stop(c->tid, &status, STOP_TIMEOUT_NS, false) < 0)
		goto out_detach;
	if (status >> 16 != PTRACE_EVENT_STOP) {
		keep_signal(c, WSTOPSIG(status));
		goto out_detach;
	}
	waitpid(c->tid, &status, __WALL | WNOHANG);
	if (WSTOPSIG(status) != SIGTRAP || ptrace(PTRACE_GETREGS, c->tid, 0, &orig) < 0)
		goto out_detach;
	if (orig.rip >= c->page && orig.rip < c->page + TRAMP_SIZE) {
		k = -EINPROGRESS;
		goto out_detach;
	}
	if (REMOTE(c, c->tid, &orig, &v, SYS_munmap, c->page, TRAMP_SIZE, 0, 0, 0, 0) == 0 &&
	    v == 0)
		k = 0;
	r = orig;
	ptrace_resume_point(&orig, &rip, &rax);
	r.rip = rip;
	r.rax = rax;
	r.orig_rax = (uint64_t)-1;
	ptrace(PTRACE_SETREGS, c->tid, 0, &r);
out_detach:
	detach(c, c->tid);
	return k;
}

static void *unmap_main(void *arg)
{
	const struct timespec pause = { 0, 1000000 };
	struct call *c = arg;

	for (int i = 0; i < 100; i++) {
		c->result = unmap_once(c);
		if (c->result != -EINPROGRESS && c->result != -EAGAIN)
			break;
		nanosleep(&pause, NULL);
	}
	return NULL;
}

/* ---- waiting for the call ---------------------------------------------- */

static int collect(struct call *c, uint64_t launched)
{
	const struct timespec pause = { 0, 500000 };
	uint64_t deadline = launched + (uint64_t)c->o->call_timeout_ms * 1000000ULL;
	uint64_t res[7], done = 0; /* handle, func, ret, errstr, done, unmap, tail */

	for (;;) {
		if (peek(c->pid, data_block(c) + TD_DONE, &done, sizeof(done)) < 0)
			return target_alive(c->pid) ? -EFAULT : -ESRCH;
		if (done == 1)
			break;
		if (now_monotonic_ns() >= deadline)
			return -ETIMEDOUT;
		nanosleep(&pause, NULL);
	}
	c->rep->call_ns = now_monotonic_ns() - launched;
	if (peek(c->pid, data_block(c) + TD_HANDLE, res, sizeof(res)) < 0)
		return -ESRCH;
	c->left_by_tail = res[6] != 0;
	if (!res[0]) {
		char msg[sizeof(c->rep->dlerror)] = "";

		if (res[3])
			peek(c->pid, res[3], msg, sizeof(msg) - 1); /* may be short */
		msg[sizeof(msg) - 1] = '\0';
		snprintf(c->rep->dlerror, sizeof(c->rep->dlerror), "%s", msg);
		return -ENOEXEC;
	}
	if (!res[1])
		return -ENOSYS;
	c->rep->called = 1;
	/* cprof_agent_attach_events returns an int; the target is untrusted. */
	return (int)(int32_t)res[2];
}

int inject_agent(pid_t pid, const struct inject_opts *o, struct inject_report *rep)
{
	struct call c = { .pid = pid, .o = o, .rep = rep };
	struct target_claim claim = { .fd = -1 };
	uint64_t launched = 0;
	int r;

	memset(rep, 0, sizeof(*rep));
	if (o->function && (strlen(o->function) >= TD_SYM_MAX ||
			    (o->string && strlen(o->string) >= TD_STR_MAX)))
		return -EINVAL;
	if (!target_alive(pid))
		return -ESRCH;
	r = inject_find_function(pid, o->maps, "libc.so.", "dlopen", &c.dlopen);
	if (r == -ENOENT)
		r = inject_find_function(pid, o->maps, "libdl.so.", "dlopen", &c.dlopen);
	if (r < 0)
		return r;
	if (inject_find_function(pid, o->maps, "libc.so.", "dlsym", &c.dlsym) < 0 &&
	    inject_find_function(pid, o->maps, "libdl.so.", "dlsym", &c.dlsym) < 0)
		return -ENOENT;
	if (inject_find_function(pid, o->maps, "libc.so.", "dlerror", &c.dlerror) < 0 &&
	    inject_find_function(pid, o->maps, "libdl.so.", "dlerror", &c.dlerror) < 0)
		return -ENOENT;
	inject_find_function(pid, o->maps, "libc.so.", "syscall", &c.syscall_fn);
	if (inject_find_function(pid, o->maps, "libc.so.", "pthread_setcancelstate",
				 &c.setcancel) < 0)
		inject_find_function(pid, o->maps, "libpthread.so.", "pthread_setcancelstate",
				     &c.setcancel);
	c.image = calloc(1, TRAMP_SIZE);
	c.frame = aligned_alloc(64, FRAME_MAX);
	if (!c.image || !c.frame) {
		r = -ENOMEM;
		goto out_free;
	}
	/* Last of the preparations: it may place a copy of the agent. */
	r = choose_agent_path(&c);
	if (r < 0)
		goto out_free;
	/* From the page's or the block's first look to the results read, no
	 * other cprof stops a thread of this target or writes either. */
	r = target_claim_take(&claim, pid, TARGET_CLAIM_PTRACE,
			      o->pick_timeout_ms + o->call_timeout_ms, o->cancelled, &rep->holder);
	if (r < 0 && !target_claim_unavailable(r)) {
		r = r == -EBUSY ? -EUSERS : r;
		goto out_unplace;
	}
	find_old_page(&c);
	inject_warm_up(o);
	r = run_tracer(&c, tracer_main);
	launched = r == 0 ? now_monotonic_ns() : 0;
	if (r == 0) {
		rep->tid = c.tid;
		r = collect(&c, launched);
	}
	/* Mapped for a thread that was then refused (its stack, a signal),
	 * or used and left by the agent's tail: either way nothing of it
	 * stays. A thread that ran the page's own tail may still return
	 * into it (trampoline.h): the next load unmaps it. */
	if (c.page && r != -ETIMEDOUT) {
		if (!launched)
			c.tid = c.page_tid;
		rep->left_pages = launched && !c.left_by_tail ? 1
							       : run_tracer(&c, unmap_main) < 0;
	}
	/* A call that timed out may still write the block: its claim is
	 * kept (the descriptor left open) for as long as this cprof lives. */
	if (r != -ETIMEDOUT)
		target_claim_drop(&claim);
out_unplace:
	/* A copy never loaded goes; one that was (or may yet be) stays, as the
	 * resident agent of later runs. */
	if (r < 0 && rep->placed == 1 && (!launched || r == -ENOEXEC))
		inject_unplace_agent(pid, rep->agent_path);
out_free:
	free(c.frame);
	free(c.image);
	return r;
}
