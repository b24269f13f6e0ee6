/*
 * One thread seen from outside: its clocks, what it is blocked in, and the
 * stack it sleeps on, all from /proc and process_vm_readv(), never a stop.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "ptrace/ptrace.h"
#include "target/target.h"
#include "util/util.h"
#include "wall/wall-private.h"

#define MAX_FRAMES 256
/* A first copy when nothing is known of the thread's depth. */
#define FIRST_COPY 4096
#define MAX_COPY (256u << 10)
/* Above what the last walk read: a deeper call chain in the same sleep. */
#define COPY_MARGIN 1024

int wall_clocks_open(pid_t pid, pid_t tid)
{
	char path[80];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", pid, tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int wall_clocks_read(int fd, struct wall_clocks *ret)
{
	char buf[128];
	unsigned long long run, delay, runs;
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	/* A thread that has exited reads as ESRCH (or nothing). */
	if (n <= 0)
		return n < 0 ? -errno : -ESRCH;
	buf[n] = '\0';
	if (sscanf(buf, "%llu %llu %llu", &run, &delay, &runs) != 3)
		return -EIO;
	ret->run_ns = run;
	ret->delay_ns = delay;
	ret->runs = runs;
	return 0;
}

/* The number after "@key:" at a line's start in a status file's text. */
static int status_number(const char *buf, const char *key, uint64_t *ret)
{
	size_t len = strlen(key);

	for (const char *p = buf; p; p = strchr(p, '\n')) {
		p += *p == '\n';
		if (!strncmp(p, key, len) && p[len] == ':') {
			*ret = strtoull(p + len + 1, NULL, 10);
			return 0;
		}
	}
	return -EIO;
}

/*
 * The status of @tid, through *@fd when it is open (opened here when it is
 * -1 and can be: a file kept open reads in a third of the time of one
 * opened each time, ~8 us against ~28 us here), else by its path.
 */
static int status_text(pid_t pid, pid_t tid, int *fd, char *buf, size_t size)
{
	char path[80];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
	if (fd && *fd < 0)
		*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (!fd || *fd < 0)
		return proc_read(path, buf, size, NULL);
	/* It fits one read: the kernel makes the text whole at offset 0. */
	n = pread(*fd, buf, size - 1, 0);
	if (n <= 0)
		return n < 0 ? -errno : -ESRCH;
	buf[n] = '\0';
	return 0;
}

/* The switch counts and the state letter (NULL: not wanted) of a status
 * file, read through *@fd as status_text() does (@fd NULL: by path). */
static int read_status(pid_t pid, pid_t tid, int *fd, struct wall_switches *ret,
		       char *ret_state)
{
	char buf[4096];
	const char *st;
	int r;

	r = status_text(pid, tid, fd, buf, sizeof(buf));
	if (r < 0)
		return r;
	r = status_number(buf, "voluntary_ctxt_switches", &ret->voluntary);
	if (r == 0)
		r = status_number(buf, "nonvoluntary_ctxt_switches", &ret->preempted);
	if (r < 0 || !ret_state)
		return r;
	st = strstr(buf, "\nState:");
	if (!st)
		return -EIO;
	st += strlen("\nState:");
	st += strspn(st, " \t");
	*ret_state = *st;
	return 0;
}

int wall_switches_read(pid_t pid, pid_t tid, struct wall_switches *ret)
{
	return read_status(pid, tid, NULL, ret, NULL);
}

/* Switches a thread makes in its few microseconds of reads, at most. */
#define WHERE_TRIES 3
/* The status read just before the clocks holds at their instant but for
 * what a switch between them misplaces, which is no longer than the two
 * reads took (~10 us): above this, the status is read again. */
#define WHERE_GAP_NS 50000ULL

/*
 * Every switch off a CPU counts once in the status, voluntary (to sleep) or
 * not, and every switch onto one once in schedstat's runs: a thread is on a
 * CPU exactly when it was put on one once more than it was taken off. A
 * switch between the status and the clocks misplaces only the time after
 * it: less than the gap between the reads when that is short, else none
 * when the counts read after the clocks still agree (a switch onto a CPU
 * between is in runs or not, as it came before the clocks or after). A
 * thread in state R with no switch off since cannot have slept then.
 */
int wall_clocks_read_where(pid_t pid, pid_t tid, int fd, int *status_fd,
			   struct wall_clocks *ret, struct wall_where *ret_where)
{
	struct wall_switches before, after;
	struct wall_clocks c;
	uint64_t t0;
	char state;
	int r;

	for (int i = 0; i < WHERE_TRIES; i++) {
		t0 = now_monotonic_ns();
		r = read_status(pid, tid, status_fd, &before, &state);
		if (r == 0)
			r = wall_clocks_read(fd, &c);
		if (r == 0 && now_monotonic_ns() - t0 > WHERE_GAP_NS) {
			r = read_status(pid, tid, status_fd, &after, NULL);
			if (r == 0 && (before.voluntary != after.voluntary ||
				       before.preempted != after.preempted))
				continue;
		}
		if (r < 0)
			return r;
		*ret = c;
		ret_where->on_cpu = c.runs == before.voluntary + before.preempted + 1;
		ret_where->awake = ret_where->on_cpu || state == 'R';
		ret_where->sw = before;
		return 0;
	}
	return -EAGAIN;
}

/* Field @field (1-based, as proc(5) numbers them) of a stat line. */
static const char *stat_field(const char *buf, int field)
{
	const char *p = strrchr(buf, ')');

	if (!p)
		return NULL;
	p++; /* field 3 starts after ") " */
	for (int i = 2; i < field && p; i++)
		p = strchr(p + 1, ' ');
	return p ? p + 1 : NULL;
}

static int read_stat(pid_t pid, pid_t tid, char *buf, size_t size)
{
	char path[80];

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
	return proc_read(path, buf, size, NULL);
}

int wall_thread_birth_ns(pid_t pid, pid_t tid, uint64_t *ret)
{
	char buf[1024];
	const char *f;
	struct timespec mono, boot;
	long hz = sysconf(_SC_CLK_TCK);
	uint64_t start, now_boot;
	int r = read_stat(pid, tid, buf, sizeof(buf));

	if (r < 0)
		return r;
	f = stat_field(buf, 22);
	if (!f || hz <= 0)
		return -EIO;
	start = strtoull(f, NULL, 10) * (1000000000ULL / (uint64_t)hz);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	clock_gettime(CLOCK_BOOTTIME, &boot);
	now_boot = (uint64_t)boot.tv_sec * 1000000000ULL + (uint64_t)boot.tv_nsec;
	*ret = (uint64_t)mono.tv_sec * 1000000000ULL + (uint64_t)mono.tv_nsec -
	       (now_boot > start ? now_boot - start : 0);
	return 0;
}

static int read_syscall(pid_t pid, pid_t tid, struct wall_look *ret)
{
	struct target_call c;
	int r = target_thread_call(pid, tid, &c);

	if (r < 0)
		return r;
	ret->syscall = c.nr;
	ret->sp = c.sp;
	ret->pc = c.pc;
	return 0;
}

/* The call first: a running thread needs nothing more. */
int wall_look_read(pid_t pid, pid_t tid, struct wall_look *ret)
{
	int r = read_syscall(pid, tid, ret);

	ret->state = 'R';
	if (r < 0 || (ret->syscall < 0 && !ret->sp))
		return r;
	return target_thread_state(pid, tid, &ret->state);
}

static bool same_look(const struct wall_look *a, const struct wall_look *b)
{
	return a->syscall == b->syscall && a->sp == b->sp && a->pc == b->pc;
}

/* Keeps the walk @w made from @look into @st. */
static int keep_walk(struct unwinder *unw, const struct wall_look *look,
		     const struct stack_walk *w, uint64_t *pcs, struct wall_off_stack *st)
{
	const uint64_t *sps = w->n > 0 ? unwinder_frame_sps(unw) : NULL;
	size_t n = w->n > 0 ? (size_t)w->n : 1;

	if (w->n <= 0)
		pcs[0] = look->pc;
	if (GROW(st->pcs, n, st->pcs_alloc) < 0 || GROW(st->slots, n, st->slots_alloc) < 0)
		return -ENOMEM;
	memcpy(st->pcs, pcs, n * sizeof(*pcs));
	st->npcs = n;
	st->by_frame_pointers = n > 1 && unwinder_by_frame_pointers(unw);
	for (size_t i = 1; i < n; i++)
		st->slots[i - 1] = sps && sps[i] >= 8 ? sps[i] - 8 : 0;
	st->want = MIN(w->used + COPY_MARGIN, (size_t)MAX_COPY);
	st->look = *look;
	st->valid = true;
	return 0;
}

/*
 * The chain @st was unwound from, read again word by word: asleep at the
 * same place with the same return addresses in the same slots, the walk
 * would give the same frames (its rules depend on the pcs and sp alone).
 */
static bool chain_unchanged(pid_t tid, const struct wall_off_stack *st, uint64_t *ret_read)
{
	uint64_t words[MAX_FRAMES];
	struct iovec local[MAX_FRAMES], remote[MAX_FRAMES];
	size_t n = st->npcs - 1;
	ssize_t got;

	for (size_t i = 0; i < n; i++) {
		if (!st->slots[i])
			return false;
		local[i] = (struct iovec){ &words[i], sizeof(words[i]) };
		remote[i] = (struct iovec){ (void *)(uintptr_t)st->slots[i], sizeof(words[i]) };
	}
	got = n ? process_vm_readv(tid, local, n, remote, n, 0) : 0;
	if (got != (ssize_t)(n * sizeof(uint64_t)))
		return false;
	*ret_read += (uint64_t)got;
	for (size_t i = 0; i < n; i++)
		if (words[i] != st->pcs[i + 1] + 1)
			return false;
	return true;
}

/* 0 when @tid still sleeps where @look saw it, -EAGAIN when it woke. */
static int still_asleep(pid_t pid, pid_t tid, const struct wall_look *look)
{
	struct wall_look again;
	int r = read_syscall(pid, tid, &again);

	if (r < 0)
		return r;
	return same_look(look, &again) ? 0 : -EAGAIN;
}

struct asleep_at {
	pid_t pid, tid;
	const struct wall_look *look;
};

/* Woke in between: the copy may mix two stacks. */
static int copied(void *arg)
{
	const struct asleep_at *a = arg;

	return still_asleep(a->pid, a->tid, a->look);
}

int wall_take_off_stack(pid_t pid, pid_t tid, const struct wall_look *look,
			const struct maps *maps, struct unwinder *unw, struct wall_off_stack *st,
			uint64_t *ret_read)
{
	struct asleep_at at = { pid, tid, look };
	struct stack_walk w = { .sp_pc_only = true, .first = st->want ? st->want : FIRST_COPY,
				.most = MAX_COPY, .copied = copied, .arg = &at };
	uint64_t pcs[MAX_FRAMES];
	int r;

	*ret_read = 0;
	if (st->valid && same_look(look, &st->look) && chain_unchanged(tid, st, ret_read)) {
		r = still_asleep(pid, tid, look);
		if (r == 0)
			st->look.state = look->state;
		return r;
	}
	w.regs[UNWIND_REG_RSP] = look->sp;
	w.regs[UNWIND_REG_RIP] = look->pc;
	st->valid = false; /* its pcs are rewritten now */
	r = stack_walk(&w, tid, maps, unw, pcs, MAX_FRAMES);
	*ret_read += w.read;
	if (r == 0)
		r = keep_walk(unw, look, &w, pcs, st);
	stack_walk_release(&w);
	return r < 0 ? r : 1;
}

void wall_off_stack_release(struct wall_off_stack *st)
{
	free(st->pcs);
	free(st->slots);
	memset(st, 0, sizeof(*st));
}
