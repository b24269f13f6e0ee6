/* Taking the threads snapshot: everything slow happens before the threads
 * are stopped (modules, /proc reads) or after they are let go (unwinding). */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "maps/maps.h"
#include "symbolize/symbolize.h"
#include "target/claim.h"
#include "target/target.h"
#include "threads/threads-private.h"
#include "threads/threads.h"
#include "unwind/unwind.h"
#include "util/util.h"

#define MAX_FRAMES 256
/* Thread stacks in use are a few KiB; deep recursion gets this much. */
#define MAX_STACK (256 * 1024)
#define STOP_TIMEOUT_MS 1000
/* An injection's look for a safe thread and its call, at their longest. */
#define CLAIM_WAIT_MS 15000

/* State, name, CPU time and last cpu of one thread, from
 * /proc/PID/task/TID/stat. */
static void read_thread_proc(pid_t pid, struct thread_record *t)
{
	char path[80], buf[1024];
	unsigned long utime = 0, stime = 0;
	const char *p;
	long hz = sysconf(_SC_CLK_TCK);

	if (target_thread_name(pid, t->tid, t->name, sizeof(t->name)) < 0)
		snprintf(t->name, sizeof(t->name), "?");
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, t->tid);
	if (proc_read(path, buf, sizeof(buf), NULL) < 0) {
		t->state = 'X';
		return;
	}
	p = strrchr(buf, ')');
	t->cpu = -1;
	if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu"
			 " %*d %*d %*d %*d %*d %*d %*u %*u %*d %*u %*u %*u %*u %*u %*u %*u"
			 " %*u %*u %*u %*u %*u %*u %*d %d",
			 &t->state, &utime, &stime, &t->cpu) < 3)
		return;
	if (hz > 0)
		t->cpu_ns = (uint64_t)(utime + stime) * (1000000000ULL / (uint64_t)hz);
}

/*
 * Moves the calling thread (and the tracers it starts, which inherit it)
 * off the cpus the target's running threads were last on, where others are
 * allowed: what the snapshot costs in cpu then delays none of them, as it
 * does, up to a scheduler tick at a time, beside them. @saved gets the
 * affinity to restore; returns how many cpus it left, 0 when none.
 */
static int keep_off_running(const struct thread_record *t, size_t n, cpu_set_t *saved)
{
	cpu_set_t off;

	if (sched_getaffinity(0, sizeof(*saved), saved) < 0)
		return 0;
	off = *saved;
	for (size_t i = 0; i < n; i++)
		if (t[i].state == 'R' && t[i].cpu >= 0 && t[i].cpu < CPU_SETSIZE)
			CPU_CLR(t[i].cpu, &off);
	if (CPU_COUNT(&off) == 0 || CPU_EQUAL(&off, saved) ||
	    sched_setaffinity(0, sizeof(off), &off) < 0)
		return 0;
	return CPU_COUNT(saved) - CPU_COUNT(&off);
}

/* TracerPid of one thread: another debugger may hold just that one. */
static pid_t thread_tracer(pid_t pid, pid_t tid)
{
	char path[80], buf[2048];
	const char *p;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
	if (proc_read(path, buf, sizeof(buf), NULL) < 0)
		return 0;
	p = strstr(buf, "\nTracerPid:");
	return p ? (pid_t)strtol(p + 12, NULL, 10) : 0;
}

/*
 * The state letter was read just before the stop; the registers at the stop
 * know better whether the thread was blocked in a call or running.
 */
static void settle_state(struct thread_record *t)
{
	if (t->state == 'R' && t->syscall >= 0)
		t->state = 'S';
	else if ((t->state == 'S' || t->state == 'D') && t->syscall < 0)
		t->state = 'R';
}

static int compare_tid(const void *a, const void *b)
{
	const struct thread_record *x = a, *y = b;

	return (x->tid > y->tid) - (x->tid < y->tid);
}

/* The name, state and clock read before, or now for a thread born since. */
static void fill_from_before(struct threads_snapshot *s, struct thread_record *t,
			     const struct thread_record *before, size_t nbefore)
{
	const struct thread_record *b = bsearch(t, before, nbefore, sizeof(*before), compare_tid);

	if (b) {
		memcpy(t->name, b->name, sizeof(t->name));
		t->state = b->state;
		t->cpu_ns = b->cpu_ns;
	} else {
		read_thread_proc(s->pid, t);
	}
	/* A container's numbering: read after the pause, not before. */
	if (s->other_pidns)
		t->ns_tid = target_ns_tid(s->pid, t->tid);
}

static int take_pcs(struct thread_record *t, const uint64_t *pcs, size_t n)
{
	t->pcs = malloc(n * sizeof(*pcs));
	if (!t->pcs)
		return -ENOMEM;
	memcpy(t->pcs, pcs, n * sizeof(*pcs));
	t->npcs = n;
	return 0;
}

/* The threads of one ptrace snapshot, unwound. */
static int record_stopped(struct threads_snapshot *s, const struct ptrace_snapshot *ps,
			  const struct thread_record *before, size_t nbefore, struct unwinder *unw)
{
	uint64_t pcs[MAX_FRAMES];

	for (size_t i = 0; i < ps->nthreads; i++) {
		const struct ptrace_thread *pt = &ps->threads[i];
		struct thread_record *t;
		int n;

		/* A task of the agent's started during the pause: known since. */
		if (agent_tasks_has(&s->agent, pt->tid))
			continue;
		t = &s->threads[s->nthreads++];
		t->tid = pt->tid;
		t->result = pt->result;
		t->error = pt->error;
		t->syscall = pt->syscall < 0 ? -1 : pt->syscall;
		t->syscall_arg[0] = pt->user.regs[UNWIND_REG_RDI];
		t->syscall_arg[1] = pt->user.regs[UNWIND_REG_RSI];
		fill_from_before(s, t, before, nbefore);
		if (pt->result == PTRACE_THREAD_REFUSED)
			t->tracer = thread_tracer(s->pid, t->tid);
		if (pt->result != PTRACE_THREAD_STOPPED)
			continue;
		s->nstopped++;
		settle_state(t);
		if (pt->group_stopped)
			t->state = 'T';
		n = pt->user.stack ? unwinder_unwind(unw, &pt->user, pcs, MAX_FRAMES) : 0;
		if (n <= 0) {
			pcs[0] = pt->user.regs[UNWIND_REG_RIP];
			n = 1;
		}
		s->nstacks++;
		if (n > 1 && unwinder_by_frame_pointers(unw))
			s->nframe_pointers++;
		if (take_pcs(t, pcs, (size_t)n) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* The threads read asleep and confirmed, walked already; those that woke
 * and could not be stopped after (@late_r), with the reason. */
static int record_asleep(struct threads_snapshot *s, const struct asleep_set *as, int late_r,
			 const struct thread_record *before, size_t nbefore)
{
	for (size_t i = 0; i < as->n; i++) {
		const struct asleep *a = &as->a[i];
		struct thread_record *t;

		if (!a->confirmed && late_r == 0)
			continue;
		t = &s->threads[s->nthreads++];
		t->tid = a->tid;
		if (!a->confirmed) {
			t->result = late_r == -ESRCH ? PTRACE_THREAD_EXITED : PTRACE_THREAD_REFUSED;
			t->error = late_r;
			fill_from_before(s, t, before, nbefore);
			continue;
		}
		t->result = PTRACE_THREAD_STOPPED;
		t->unstopped = true;
		t->syscall = a->call.nr;
		t->syscall_arg[0] = a->call.args[0];
		t->syscall_arg[1] = a->call.args[1];
		fill_from_before(s, t, before, nbefore);
		settle_state(t);
		s->nstopped++;
		s->nasleep++;
		s->nstacks++;
		s->nframe_pointers += a->by_frame_pointers;
		if (take_pcs(t, a->pcs, a->npcs) < 0)
			return -ENOMEM;
	}
	return 0;
}

/*
 * @before: sorted by tid. @late: the threads that woke, stopped after, or
 * the reason they could not be (@late_r), said for each.
 */
static int record_threads(struct threads_snapshot *s, const struct ptrace_snapshot *ps,
			  const struct ptrace_snapshot *late, int late_r,
			  const struct asleep_set *as, const struct thread_record *before,
			  size_t nbefore, struct unwinder *unw)
{
	size_t n = ps->nthreads + late->nthreads + as->n;
	int r;

	s->threads = calloc(n ? n : 1, sizeof(*s->threads));
	if (!s->threads)
		return -ENOMEM;
	r = record_stopped(s, ps, before, nbefore, unw);
	if (r == 0)
		r = record_stopped(s, late, before, nbefore, unw);
	if (r == 0)
		r = record_asleep(s, as, late_r, before, nbefore);
	qsort(s->threads, s->nthreads, sizeof(*s->threads), compare_tid);
	return r;
}

/*
 * What each thread is doing just before the stop: names and states. Not
 * the agent's task: known before the listing (one that exits meanwhile)
 * or read again after it (one started meanwhile, given time to say so).
 */
static int read_before(pid_t pid, struct agent_tasks *agent, struct thread_record **ret,
		       size_t *ret_n)
{
	struct thread_record *recs;
	pid_t *tids;
	size_t n;
	int r;

	r = target_list_tids(pid, &tids, &n);
	if (r < 0)
		return r;
	if (agent_tasks_refresh(agent, AGENT_TASK_START_WAIT_MS) == -ENOMEM) {
		free(tids);
		return -ENOMEM;
	}
	agent_tasks_filter(agent, tids, &n);
	recs = calloc(n ? n : 1, sizeof(*recs));
	if (!recs) {
		free(tids);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		recs[i].tid = tids[i];
		read_thread_proc(pid, &recs[i]);
	}
	free(tids);
	/* Sorted: record_threads() finds each thread's record by tid. */
	qsort(recs, n, sizeof(*recs), compare_tid);
	*ret = recs;
	*ret_n = n;
	return 0;
}

/* ptrace_snapshot_opts.skip: the agent's task, and @fn's (the threads read
 * without a stop). */
struct skip {
	const struct agent_tasks *agent;
	bool (*fn)(void *set, pid_t tid);
	struct asleep_set *set;
};

/*
 * The agent's task runs on through the pause. Its stack is in no record, so
 * a stop would only lengthen the pause; running, it changes nothing the
 * snapshot copies (registers, stacks: it writes the agent's ring and GOT
 * slots), and it waits for no thread of the program for longer than a
 * stopped one is stopped (its session lock is tried, its ring lock yields
 * while spun on). Stopped inside its ring lock, it would leave a thread
 * read asleep, not stopped, that wakes and enters a hook spinning on it
 * until the pause ends.
 */
static bool skip_thread(void *arg, pid_t tid)
{
	const struct skip *k = arg;

	return agent_tasks_has(k->agent, tid) || k->fn(k->set, tid);
}

int threads_snapshot_take(struct threads_snapshot **ret, pid_t pid, struct symbolizer *sym,
			  char *err, size_t errlen)
{
	struct ptrace_snapshot_opts po = { .max_stack = MAX_STACK,
					   .stop_timeout_ms = STOP_TIMEOUT_MS };
	struct ptrace_snapshot ps = { 0 }, late = { 0 };
	struct asleep_set asleep = { 0 };
	struct skip skip = { .fn = asleep_skip, .set = &asleep };
	struct target_claim claim = { .fd = -1 };
	struct target_claim_holder holder;
	struct thread_record *before = NULL;
	struct unwinder *unw = NULL;
	struct threads_snapshot *s;
	struct maps maps = { 0 };
	size_t nbefore = 0;
	cpu_set_t affinity;
	int r, late_r = 0;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->pid = pid;
	agent_tasks_init(&s->agent, pid);
	skip.agent = &s->agent;
	s->other_pidns = target_other_pidns(pid);
	target_process_name(pid, s->comm, sizeof(s->comm));
	/* Before anything stops: the modules (and vDSO), the maps, names. */
	r = symbolizer_share(&s->sym, sym, pid);
	if (r < 0) {
		snprintf(err, errlen, "cannot read the modules of pid %d: %s", pid, strerror(-r));
		goto out_free;
	}
	r = symbolizer_unwinder(s->sym, &unw);
	if (r < 0) {
		snprintf(err, errlen, "cannot set up unwinding: %s", strerror(-r));
		goto out_free;
	}
	r = maps_read(pid, &maps);
	if (r == 0)
		po.maps = &maps;
	r = agent_tasks_search(&s->agent, po.maps, 0);
	if (r >= 0)
		r = read_before(pid, &s->agent, &before, &nbefore);
	if (r < 0) {
		snprintf(err, errlen, "cannot list the threads of pid %d: %s", pid, strerror(-r));
		goto out_free;
	}
	s->cpus_kept_off = keep_off_running(before, nbefore, &affinity);
	/* Those asleep in a call are read now, and not stopped. */
	r = asleep_look(&asleep, pid, before, nbefore, po.maps, unw);
	if (r < 0) {
		snprintf(err, errlen, "out of memory");
		goto out_free;
	}
	s->asleep_refused = asleep.n ? 0 : asleep.refused;
	po.skip = skip_thread;
	po.skip_arg = &skip;
	/* Another cprof stopping threads of it (an injection's look, its
	 * call, a snapshot) is done within CLAIM_WAIT_MS. */
	r = target_claim_take(&claim, pid, TARGET_CLAIM_PTRACE, CLAIM_WAIT_MS, NULL, &holder);
	if (r == -EBUSY) {
		snprintf(err, errlen, "another process (pid %d: %s) kept stopping threads of pid %d "
			 "for %d s", holder.pid, holder.command[0] ? holder.command : "?", pid,
			 CLAIM_WAIT_MS / 1000);
		goto out_free;
	}
	if (r < 0 && !target_claim_unavailable(r)) {
		snprintf(err, errlen, "cannot claim pid %d for a snapshot: %s", pid, strerror(-r));
		goto out_free;
	}
	s->time_nanos = (int64_t)now_realtime_ns();
	r = ptrace_snapshot_take(&ps, pid, &po);
	/* Those that woke since they were read are stopped now: a little
	 * after the others' instant, and read as they are then. */
	if (r == 0 && asleep_confirm(&asleep, pid) > 0) {
		skip.fn = asleep_skip_but_woken;
		late_r = ptrace_snapshot_take(&late, pid, &po);
		s->nwoke = late.nthreads;
	}
	target_claim_drop(&claim);
	if (r < 0) {
		snprintf(err, errlen, "cannot stop the threads of pid %d: %s", pid, strerror(-r));
		goto out_free;
	}
	s->pause_ns = MAX(ps.pause_ns, late.pause_ns);
	/* A task of the agent's started during the pause is known now. */
	if (agent_tasks_refresh(&s->agent, 0) == -ENOMEM) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
		goto out_free;
	}
	if (ps.first_interrupt_ns && ps.all_stopped_ns > ps.first_interrupt_ns)
		s->stopping_ns = ps.all_stopped_ns - ps.first_interrupt_ns;
	/* Every thread runs again: now the slow part. */
	r = record_threads(s, &ps, &late, late_r, &asleep, before, nbefore, unw);
	if (r < 0) {
		snprintf(err, errlen, "out of memory");
		goto out_free;
	}
	/* No thread stopped and the process gone: it exited under us. A
	 * snapshot of nothing is not a result. */
	if (s->nstopped == 0 && !target_alive(pid)) {
		snprintf(err, errlen, "pid %d exited during the snapshot", pid);
		r = -ESRCH;
		goto out_free;
	}
	if (s->cpus_kept_off)
		sched_setaffinity(0, sizeof(affinity), &affinity);
	ptrace_snapshot_release(&ps);
	ptrace_snapshot_release(&late);
	asleep_release(&asleep);
	maps_release(&maps);
	free(before);
	*ret = s;
	return 0;

out_free:
	if (s->cpus_kept_off)
		sched_setaffinity(0, sizeof(affinity), &affinity);
	ptrace_snapshot_release(&ps);
	ptrace_snapshot_release(&late);
	asleep_release(&asleep);
	maps_release(&maps);
	free(before);
	threads_snapshot_free(s);
	return r;
}

void threads_snapshot_free(struct threads_snapshot *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nthreads; i++)
		free(s->threads[i].pcs);
	free(s->threads);
	symbolizer_unref(s->sym);
	agent_tasks_release(&s->agent);
	free(s);
}
