/*
 * The target's seccomp filters against the system calls a load makes.
 *
 * A hardened service (systemd's SystemCallFilter=, MemoryDenyWriteExecute=,
 * a sandbox of its own) may kill itself for a system call cprof would make
 * it make: the detour's mmap, the loader's, the agent's memfd and task.
 * So before a thread is sent on the detour, its filters (read with
 * PTRACE_SECCOMP_GET_FILTER while it is stopped: CAP_SYS_ADMIN) are run
 * here, a classic BPF interpreter, on each such call; any answer but allow
 * refuses the load, naming the call, before the target made any of them.
 */
#include "inject/inject-private.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>

#include "target/target.h"

#define MAX_FILTERS 64
#define MAX_INSNS BPF_MAXINSNS
#define MFD_FLAGS (MFD_CLOEXEC | 2u /* MFD_ALLOW_SEALING */)

/* One call with the arguments that matter to filters (flags, protections). */
struct probe {
	int nr;
	const char *what;
	uint64_t args[6];
};

#define RW (PROT_READ | PROT_WRITE)
#define RX (PROT_READ | PROT_EXEC)

static const struct probe probes[] = {
	/* The detour's pages and its way back (inject.c, trampoline-body.inc). */
	{ SYS_memfd_create, "memfd_create", { 0, MFD_CLOEXEC } },
	{ SYS_mmap, "mmap of anonymous read+write memory", { 0, 8192, RW, MAP_PRIVATE | MAP_ANONYMOUS, (uint64_t)-1 } },
	{ SYS_mmap, "mmap of a file read+execute", { 0, 4096, RX, MAP_SHARED | MAP_FIXED, 3 } },
	{ SYS_close, "close", { 3 } },
	{ SYS_munmap, "munmap", { 0, 8192 } },
	{ SYS_rt_sigprocmask, "rt_sigprocmask", { SIG_SETMASK, 0, 0, 8 } },
	{ SYS_rt_sigprocmask, "rt_sigprocmask(SIG_UNBLOCK)", { SIG_UNBLOCK, 0, 0, 8 } },
	{ SYS_rt_sigprocmask, "rt_sigprocmask(SIG_BLOCK)", { SIG_BLOCK, 0, 0, 8 } },
	/* dlopen. */
	{ SYS_openat, "openat", { (uint64_t)AT_FDCWD, 0, O_RDONLY | O_CLOEXEC } },
	{ SYS_read, "read", { 3 } },
	{ SYS_pread64, "pread64", { 3 } },
	{ SYS_newfstatat, "newfstatat", { 3, 0, 0, AT_EMPTY_PATH } },
	{ SYS_fstat, "fstat", { 3 } },
	{ SYS_mmap, "mmap of a file read-only", { 0, 4096, PROT_READ, MAP_PRIVATE | MAP_DENYWRITE, 3 } },
	{ SYS_mmap, "mmap of a library's code", { 0, 4096, RX, MAP_PRIVATE | MAP_FIXED | MAP_DENYWRITE, 3 } },
	{ SYS_mmap, "mmap of a library's data", { 0, 4096, RW, MAP_PRIVATE | MAP_FIXED | MAP_DENYWRITE, 3 } },
	{ SYS_mmap, "mmap of anonymous memory (fixed)", { 0, 4096, RW, MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS, (uint64_t)-1 } },
	{ SYS_mprotect, "mprotect read-only (RELRO)", { 0, 4096, PROT_READ } },
	{ SYS_mprotect, "mprotect read+write (the GOT)", { 0, 4096, RW } },
	{ SYS_mprotect, "mprotect to no access", { 0, 4096, PROT_NONE } },
	{ SYS_futex, "futex", { 0 } },
	/* The agent's session and its task (lib/agent/). */
	{ SYS_memfd_create, "memfd_create (sealable)", { 0, MFD_FLAGS } },
	{ SYS_ftruncate, "ftruncate", { 3 } },
	{ SYS_fcntl, "fcntl(F_ADD_SEALS)", { 3, 1033 /* F_ADD_SEALS */ } },
	{ SYS_fallocate, "fallocate", { 3, 3 /* PUNCH_HOLE | KEEP_SIZE */ } },
	{ SYS_mmap, "mmap of shared memory", { 0, 4096, RW, MAP_SHARED, 3 } },
	{ SYS_clone, "clone of a thread",
	  { CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
	    CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID } },
	{ SYS_pidfd_open, "pidfd_open", { 1 } },
	{ SYS_prctl, "prctl(PR_SET_NAME)", { PR_SET_NAME } },
	{ SYS_poll, "poll", { 0, 1 } },
	{ SYS_nanosleep, "nanosleep", { 0 } },
	{ SYS_futex, "futex(FUTEX_WAIT_PRIVATE) (the agent's locks)", { 0, FUTEX_WAIT_PRIVATE } },
	{ SYS_futex, "futex(FUTEX_WAKE_PRIVATE)", { 0, FUTEX_WAKE_PRIVATE } },
	{ SYS_clock_gettime, "clock_gettime", { 1 } },
	{ SYS_kill, "kill", { 1, 0 } },
	{ SYS_getpid, "getpid", { 0 } },
	{ SYS_gettid, "gettid", { 0 } },
	{ SYS_madvise, "madvise", { 0, 4096, MADV_DONTNEED } },
	{ SYS_exit, "exit of a thread", { 0 } },
};

struct filter {
	struct sock_filter *insns;
	unsigned n;
};

/* Runs one filter on @d (the kernel's seccomp_run_filters(), for one). */
static uint32_t run_filter(const struct filter *f, const struct seccomp_data *d)
{
	uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = { 0 };

	for (unsigned pc = 0; pc < f->n; pc++) {
		const struct sock_filter *i = &f->insns[pc];
		uint32_t k = i->k, src = BPF_SRC(i->code) == BPF_X ? x : k;

		switch (BPF_CLASS(i->code)) {
		case BPF_LD:
			if (BPF_MODE(i->code) == BPF_ABS && BPF_SIZE(i->code) == BPF_W &&
			    k + 4 <= sizeof(*d) && k % 4 == 0)
				memcpy(&a, (const uint8_t *)d + k, 4);
			else if (BPF_MODE(i->code) == BPF_IMM)
				a = k;
			else if (BPF_MODE(i->code) == BPF_MEM && k < BPF_MEMWORDS)
				a = mem[k];
			else if (BPF_MODE(i->code) == BPF_LEN)
				a = sizeof(*d);
			else
				return SECCOMP_RET_KILL_PROCESS; /* the kernel refuses such a filter */
			break;
		case BPF_LDX:
			if (BPF_MODE(i->code) == BPF_IMM)
				x = k;
			else if (BPF_MODE(i->code) == BPF_MEM && k < BPF_MEMWORDS)
				x = mem[k];
			else if (BPF_MODE(i->code) == BPF_LEN)
				x = sizeof(*d);
			else
				return SECCOMP_RET_KILL_PROCESS;
			break;
		case BPF_ST:
			if (k < BPF_MEMWORDS)
				mem[k] = a;
			break;
		case BPF_STX:
			if (k < BPF_MEMWORDS)
				mem[k] = x;
			break;
		case BPF_ALU:
			switch (BPF_OP(i->code)) {
			case BPF_ADD: a += src; break;
			case BPF_SUB: a -= src; break;
			case BPF_MUL: a *= src; break;
			case BPF_DIV: a = src ? a / src : 0; break;
			case BPF_MOD: a = src ? a % src : 0; break;
			case BPF_AND: a &= src; break;
			case BPF_OR: a |= src; break;
			case BPF_XOR: a ^= src; break;
			case BPF_LSH: a = src < 32 ? a << src : 0; break;
			case BPF_RSH: a = src < 32 ? a >> src : 0; break;
			case BPF_NEG: a = -a; break;
			default: return SECCOMP_RET_KILL_PROCESS;
			}
			break;
		case BPF_JMP: {
			bool t;

			if (BPF_OP(i->code) == BPF_JA) {
				pc += k;
				continue;
			}
			switch (BPF_OP(i->code)) {
			case BPF_JEQ: t = a == src; break;
			case BPF_JGT: t = a > src; break;
			case BPF_JGE: t = a >= src; break;
			case BPF_JSET: t = (a & src) != 0; break;
			default: return SECCOMP_RET_KILL_PROCESS;
			}
			pc += t ? i->jt : i->jf;
			break;
		}
		case BPF_RET:
			return BPF_RVAL(i->code) == BPF_A ? a : k;
		case BPF_MISC:
			if (BPF_MISCOP(i->code) == BPF_TAX)
				x = a;
			else
				a = x;
			break;
		}
	}
	return SECCOMP_RET_KILL_PROCESS; /* fell off the end: never loaded */
}

/* The kernel's order: the most restrictive answer of all filters wins. */
static int severity(uint32_t action)
{
	switch (action & SECCOMP_RET_ACTION_FULL) {
	case SECCOMP_RET_KILL_PROCESS: return 7;
	case SECCOMP_RET_KILL_THREAD: return 6;
	case SECCOMP_RET_TRAP: return 5;
	case SECCOMP_RET_ERRNO: return 4;
	case SECCOMP_RET_USER_NOTIF: return 3;
	case SECCOMP_RET_TRACE: return 2;
	case SECCOMP_RET_LOG: return 1;
	case SECCOMP_RET_ALLOW: return 0;
	}
	return 7;
}

static const char *action_name(uint32_t action)
{
	switch (action & SECCOMP_RET_ACTION_FULL) {
	case SECCOMP_RET_KILL_PROCESS: return "kill the process";
	case SECCOMP_RET_KILL_THREAD: return "kill the thread";
	case SECCOMP_RET_TRAP: return "send SIGSYS";
	case SECCOMP_RET_ERRNO: return "fail it";
	case SECCOMP_RET_USER_NOTIF: return "hand it to a supervisor";
	case SECCOMP_RET_TRACE: return "hand it to a tracer";
	}
	return "refuse it";
}

static void free_filters(struct filter *f, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		free(f[i].insns);
}

/* The filters of stopped thread @tid, newest first. */
static int read_filters(pid_t tid, struct filter *ret, unsigned *ret_n)
{
	unsigned n = 0;

	for (; n < MAX_FILTERS; n++) {
		long len = ptrace(PTRACE_SECCOMP_GET_FILTER, tid, (void *)(uintptr_t)n, NULL);

		if (len < 0 && errno == ENOENT)
			break;
		if (len <= 0 || len > MAX_INSNS) {
			int r = len < 0 ? -errno : -EINVAL;

			free_filters(ret, n);
			return r;
		}
		ret[n].n = (unsigned)len;
		ret[n].insns = calloc((size_t)len, sizeof(struct sock_filter));
		if (!ret[n].insns ||
		    ptrace(PTRACE_SECCOMP_GET_FILTER, tid, (void *)(uintptr_t)n, ret[n].insns) != len) {
			free_filters(ret, n + 1);
			return -ENOMEM;
		}
	}
	*ret_n = n;
	return 0;
}

/* "Seccomp:" of thread @tid: 0 none, 1 strict, 2 filters; -errno. */
static int seccomp_mode(pid_t pid, pid_t tid)
{
	char path[64], buf[4096], *p;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
	if (proc_read(path, buf, sizeof(buf), NULL) < 0)
		return -ESRCH;
	p = strstr(buf, "\nSeccomp:");
	return p ? atoi(p + 9) : 0;
}

int inject_seccomp_check(pid_t pid, pid_t tid, uint64_t ip, char *why, size_t len)
{
	struct filter f[MAX_FILTERS];
	unsigned n = 0;
	int mode = seccomp_mode(pid, tid), r;

	if (mode <= 0)
		return mode;
	if (mode == 1) {
		snprintf(why, len, "it runs in seccomp's strict mode (read, write and exit only)");
		return -EKEYREJECTED;
	}
	r = read_filters(tid, f, &n);
	if (r < 0) {
		snprintf(why, len, "it runs under a seccomp filter that cprof cannot read (%s; "
			 "reading one needs CAP_SYS_ADMIN), so whether the filter would kill it for "
			 "one of the loader's system calls is unknown", strerror(-r));
		return -EKEYREJECTED;
	}
	r = 0;
	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]) && !r; i++) {
		struct seccomp_data d = { .nr = probes[i].nr, .arch = AUDIT_ARCH_X86_64,
					  .instruction_pointer = ip };
		uint32_t worst = SECCOMP_RET_ALLOW;

		memcpy(d.args, probes[i].args, sizeof(d.args));
		for (unsigned k = 0; k < n; k++) {
			uint32_t v = run_filter(&f[k], &d);

			if (severity(v) > severity(worst))
				worst = v;
		}
		if (severity(worst) > severity(SECCOMP_RET_LOG)) {
			snprintf(why, len, "its seccomp filter would %s at the agent's %s",
				 action_name(worst), probes[i].what);
			r = -EKEYREJECTED;
		}
	}
	free_filters(f, n);
	return r;
}
