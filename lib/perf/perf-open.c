/* Opening events and mapping their rings, for both scopes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "perf/perf-private.h"
#include "target/target.h"
#include "util/util.h"

/* Smallest ring worth having: 8 pages hold 3 samples with 8 KiB stacks. */
#define MIN_RING_PAGES 8

static int sys_perf_event_open(struct perf_event_attr *attr, pid_t pid, int cpu, int group,
			       unsigned long flags)
{
	long fd = syscall(SYS_perf_event_open, attr, pid, cpu, group, flags);

	return fd < 0 ? -errno : (int)fd;
}

static void perf_attr_init(struct perf_event_attr *attr, const struct perf_opts *o)
{
	memset(attr, 0, sizeof(*attr));
	attr->size = sizeof(*attr);
	attr->type = PERF_TYPE_SOFTWARE;
	/*
	 * A cpu-wide event measures the cpu's time, a per-task event the task's:
	 * both are hrtimer-driven software clocks, the only kind a VM without a
	 * PMU offers.
	 */
	attr->config = o->scope == PERF_SCOPE_SYSTEM ? PERF_COUNT_SW_CPU_CLOCK
						     : PERF_COUNT_SW_TASK_CLOCK;
	attr->sample_period = o->period_ns;
	attr->sample_type = PERF_SAMPLE_FIELDS;
	attr->sample_regs_user = PERF_REGS_MASK;
	attr->sample_stack_user = o->stack_bytes;
	attr->disabled = 1;
	attr->inherit = o->scope == PERF_SCOPE_THREAD;
	/*
	 * With exclude_kernel the timer sample is dropped whenever it fires in
	 * the kernel, so time in system calls would vanish. Kept, the sample
	 * still carries the user registers and stack of the syscall site: Go's
	 * semantics (its profile counts user + system CPU time).
	 */
	attr->exclude_kernel = !o->kernel;
	attr->exclude_hv = 1;
	attr->exclude_idle = o->scope == PERF_SCOPE_SYSTEM;
	/*
	 * The user part of a call chain would be frame pointers, which Debian's
	 * libc has not: user stacks come from DWARF unwinding of the stack copy,
	 * so only the kernel's part is asked for.
	 */
	if (o->kernel_stacks && o->kernel) {
		attr->sample_type |= PERF_SAMPLE_CALLCHAIN;
		attr->exclude_callchain_user = 1;
	} else {
		attr->exclude_callchain_kernel = 1;
	}
	attr->comm = 1;
	attr->task = o->task;
	if (o->switches_only) {
		/* A dummy event counts nothing: its records alone, each with
		 * its sample id (pid, tid, time, cpu). */
		attr->config = PERF_COUNT_SW_DUMMY;
		attr->sample_period = 0;
		attr->sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;
		attr->sample_regs_user = 0;
		attr->sample_stack_user = 0;
		attr->exclude_kernel = 1;
		attr->exclude_callchain_kernel = 0;
		attr->comm = 0;
		attr->task = 0;
		attr->context_switch = 1;
	}
	attr->sample_id_all = 1;
	attr->use_clockid = 1;
	attr->clockid = CLOCK_MONOTONIC;
	/*
	 * Wake the reader only when a ring is half full: it drains on its own
	 * jittered timer instead. Woken by the watermark, it ran right after a
	 * sample, between two samples of the cpu it took from the target, and
	 * so its own CPU time was counted as the target's.
	 */
	attr->watermark = 1;
	attr->wakeup_watermark = (uint32_t)(o->ring_pages * (size_t)sysconf(_SC_PAGESIZE) / 2);
}

int perf_online_cpus(int **ret_cpus, size_t *ret_n)
{
	char buf[4096];
	int *cpus = NULL;
	size_t n = 0, alloc = 0;
	char *p = buf;
	int r;

	r = proc_read("/sys/devices/system/cpu/online", buf, sizeof(buf), NULL);
	if (r < 0)
		return r;
	/* A list like "0-3,5,7-8\n". */
	while (*p && *p != '\n') {
		char *end;
		long a = strtol(p, &end, 10), b;

		if (end == p || a < 0)
			goto out_inval;
		b = a;
		p = end;
		if (*p == '-') {
			b = strtol(p + 1, &end, 10);
			if (end == p + 1 || b < a || b - a > 65536)
				goto out_inval;
			p = end;
		}
		for (long c = a; c <= b; c++) {
			r = GROW(cpus, n + 1, alloc);
			if (r < 0)
				goto out_free;
			cpus[n++] = (int)c;
		}
		if (*p == ',')
			p++;
	}
	if (!n)
		goto out_inval;
	*ret_cpus = cpus;
	*ret_n = n;
	return 0;
out_inval:
	r = -EINVAL;
out_free:
	free(cpus);
	return r;
}

static int session_add_fd(struct perf_session *s, int fd)
{
	int r = GROW(s->fds, s->nfds + 1, s->fds_alloc);

	if (r < 0)
		return r;
	s->fds[s->nfds++] = fd;
	s->stats.nevents++;
	return 0;
}

static int ring_map(struct perf_ring *ring, const struct perf_opts *o)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	void *base = mmap(NULL, (o->ring_pages + 1) * page, PROT_READ | PROT_WRITE, MAP_SHARED,
			  ring->fd, 0);

	if (base == MAP_FAILED)
		return -errno;
	ring->base = base;
	ring->data_size = o->ring_pages * page;
	return 0;
}

/* Opens the event of @pid on ring @ring's cpu, the ring's own or redirected. */
static int open_on_ring(struct perf_session *s, struct perf_event_attr *attr, pid_t pid,
			struct perf_ring *ring)
{
	int fd, r;

	fd = sys_perf_event_open(attr, pid, ring->cpu, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0)
		return fd;
	r = session_add_fd(s, fd);
	if (r < 0) {
		close(fd);
		return r;
	}
	if (ring->fd < 0) {
		ring->fd = fd;
		/*
		 * Unprivileged users may lock only kernel.perf_event_mlock_kb
		 * (516 KiB by default) in rings: halve until it fits, rather
		 * than refuse to profile.
		 */
		for (;;) {
			r = ring_map(ring, &s->opts);
			if (r != -EPERM && r != -ENOMEM)
				return r;
			if (s->opts.ring_pages <= MIN_RING_PAGES)
				return r;
			s->opts.ring_pages /= 2;
		}
	}
	/* Every event of a cpu writes into that cpu's single ring. */
	if (ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, ring->fd) < 0)
		return -errno;
	return 0;
}

static bool tid_seen(const pid_t *seen, size_t n, pid_t tid)
{
	for (size_t i = 0; i < n; i++)
		if (seen[i] == tid)
			return true;
	return false;
}

/*
 * One event per (thread, cpu). Threads born while we open are caught by
 * listing /proc/PID/task again until a listing brings nothing new; threads
 * born after an event exists inherit it.
 */
static int open_thread_scope(struct perf_session *s, struct perf_event_attr *attr)
{
	pid_t *seen = NULL;
	size_t nseen = 0, seen_alloc = 0;
	bool any_new = true;
	int r = 0;

	while (any_new) {
		pid_t *tids;
		size_t ntids;

		any_new = false;
		r = target_list_tids(s->opts.pid, &tids, &ntids);
		if (r < 0)
			goto out_free;
		for (size_t i = 0; i < ntids; i++) {
			if (tid_seen(seen, nseen, tids[i]))
				continue;
			any_new = true;
			r = GROW(seen, nseen + 1, seen_alloc);
			if (r < 0)
				break;
			seen[nseen++] = tids[i];
			for (size_t c = 0; c < s->nrings; c++) {
				r = open_on_ring(s, attr, tids[i], &s->rings[c]);
				if (r == -ESRCH) /* the thread exited meanwhile */
					break;
				if (r < 0)
					break;
			}
			if (r == -ESRCH)
				r = 0;
			if (r < 0)
				break;
		}
		free(tids);
		if (r < 0)
			goto out_free;
	}
	if (!target_alive(s->opts.pid))
		r = -ESRCH;
out_free:
	free(seen);
	return r;
}

int perf_session_open(struct perf_session **ret, const struct perf_opts *o)
{
	struct perf_event_attr attr;
	struct perf_session *s;
	int *cpus = NULL;
	size_t ncpus = 0;
	int r;

	if ((!o->period_ns && !o->switches_only) || o->stack_bytes % 8 || !o->ring_pages ||
	    (o->ring_pages & (o->ring_pages - 1)))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->opts = *o;
	r = perf_online_cpus(&cpus, &ncpus);
	if (r < 0)
		goto out_free;
	s->rings = calloc(ncpus, sizeof(*s->rings));
	s->pfds = calloc(ncpus, sizeof(*s->pfds));
	/* The largest record: header, fixed fields, regs, the stack copy. */
	s->record_size = 512 + PERF_REGS_COUNT * 8 + o->stack_bytes;
	s->record = malloc(MAX(s->record_size, (size_t)65536));
	s->record_size = MAX(s->record_size, (size_t)65536);
	if (!s->rings || !s->pfds || !s->record) {
		r = -ENOMEM;
		goto out_free;
	}
	for (size_t i = 0; i < ncpus; i++)
		s->rings[i] = (struct perf_ring){ .fd = -1, .cpu = cpus[i] };
	s->nrings = ncpus;

	perf_attr_init(&attr, o);
	if (o->scope == PERF_SCOPE_SYSTEM) {
		for (size_t c = 0; c < s->nrings && r >= 0; c++)
			r = open_on_ring(s, &attr, -1, &s->rings[c]);
	} else {
		r = open_thread_scope(s, &attr);
	}
	if (r < 0)
		goto out_free;
	for (size_t c = 0; c < s->nrings; c++)
		s->pfds[c] = (struct pollfd){ .fd = s->rings[c].fd, .events = POLLIN };
	free(cpus);
	*ret = s;
	return 0;

out_free:
	free(cpus);
	perf_session_free(s);
	return r;
}

static int for_each_fd(struct perf_session *s, unsigned long request)
{
	for (size_t i = 0; i < s->nfds; i++)
		if (ioctl(s->fds[i], request, 0) < 0)
			return -errno;
	return 0;
}

int perf_session_enable(struct perf_session *s)
{
	return for_each_fd(s, PERF_EVENT_IOC_ENABLE);
}

int perf_session_disable(struct perf_session *s)
{
	return for_each_fd(s, PERF_EVENT_IOC_DISABLE);
}

int perf_session_wait(struct perf_session *s, int timeout_ms)
{
	int n = poll(s->pfds, s->nrings, timeout_ms);

	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	return n;
}

const struct perf_stats *perf_session_stats(const struct perf_session *s)
{
	return &s->stats;
}

void perf_session_free(struct perf_session *s)
{
	size_t page;

	if (!s)
		return;
	page = (size_t)sysconf(_SC_PAGESIZE);
	for (size_t c = 0; c < s->nrings; c++)
		if (s->rings[c].base)
			munmap(s->rings[c].base, s->rings[c].data_size + page);
	for (size_t i = 0; i < s->nfds; i++)
		close(s->fds[i]);
	free(s->fds);
	free(s->rings);
	free(s->pfds);
	free(s->record);
	free(s);
}

bool perf_kernel_samples_allowed(void)
{
	int paranoid = 2;

	return geteuid() == 0 ||
	       (proc_sysctl_int("kernel/perf_event_paranoid", &paranoid) == 0 && paranoid <= 1);
}

bool perf_system_scope_allowed(void)
{
	int paranoid = 2;

	if (geteuid() == 0)
		return true;
	/* Without root, CAP_PERFMON would allow it too; the open will tell. */
	return proc_sysctl_int("kernel/perf_event_paranoid", &paranoid) == 0 && paranoid <= 0;
}
