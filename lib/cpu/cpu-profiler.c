#include "cpu/cpu-profiler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/thread-clocks.h"
#include "kernel/kernel.h"
#include "sampling/sampling.h"
#include "symbolize/symbolize.h"
#include "target/target.h"
#include "unwind/unwind.h"
#include "util/util.h"

#define MAX_FRAMES 256
/* perf copies at most this much of each thread's stack per sample. */
#define STACK_BYTES 8192
/* Frames of CPU no sample caught; their addresses are never a PC. */
#define ADDR_ENDED 0
#define ADDR_QUIET 1
#define ENDED_FRAME "[unsampled: short-lived threads]"
#define QUIET_FRAME "[unsampled: too little CPU to sample]"
/* How often to look whether the target still exists. */

static const struct profile_value_type cpu_types[] = {
	{ "samples", "count" },
	{ "cpu", "nanoseconds" },
};

struct cpu_profiler {
	struct cpu_profiler_opts opts;
	struct sampling s;
	struct u64map thread_names; /* tid -> const char * interned in s.profile */
	struct u64map ns_tids;      /* tid -> tid in the target's PID namespace */
	bool other_pidns;           /* the target is in a container */
	clockid_t cpu_clock;
	bool have_cpu_clock;
	uint64_t cpu_clock_start, cpu_clock_last;
	struct cpu_clocks clocks; /* what each thread's samples are weighed by */
	uint64_t agent_samples;     /* its samples, left out */
	bool running;
	struct cpu_profiler_stats stats;
	struct kallsyms ksyms; /* with kernel_stacks */
	uint64_t pcs[PERF_KERNEL_FRAMES + MAX_FRAMES];
	uint64_t locs[PERF_KERNEL_FRAMES + MAX_FRAMES];
};

/*
 * A system-wide event's clock ticks in wall time on each cpu, so a workload
 * that wakes on a round timer (every 4 or 10 ms) is seen at the same phase
 * every time, and its total comes out too low or too high. A period 1/73
 * longer than asked shares no small multiple with round timers and sweeps
 * their phase within a fraction of a second. The profile records the period
 * really used.
 */
static uint64_t sampling_period(const struct cpu_profiler_opts *o)
{
	uint64_t period = 1000000000ULL / (o->hz ? o->hz : 100);

	if (o->scope == PERF_SCOPE_SYSTEM)
		period += period / 73;
	return period;
}

static bool read_cpu_clock(struct cpu_profiler *p, uint64_t *ret)
{
	uint64_t now = now_monotonic_ns();
	struct timespec ts;

	if (!p->have_cpu_clock || clock_gettime(p->cpu_clock, &ts) < 0)
		return false;
	cpu_clocks_process_read(&p->clocks, now);
	*ret = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	return true;
}

static const char *thread_name(struct cpu_profiler *p, pid_t tid)
{
	char buf[64];
	uint64_t v;
	const char *name;

	if (u64map_get(&p->thread_names, (uint64_t)tid, &v))
		return (const char *)(uintptr_t)v;
	/* A thread gone already keeps the process's name: better than none. */
	if (target_thread_name(p->opts.pid, tid, buf, sizeof(buf)) < 0) {
		name = p->s.process_name;
	} else {
		name = profile_intern(p->s.profile, buf);
		/* A new thread's name: the first sign of the agent's task. */
		if (agent_tasks_saw_name(&p->s.agent, buf) < 0)
			return NULL;
	}
	if (name && u64map_put(&p->thread_names, (uint64_t)tid, (uintptr_t)name) < 0)
		return NULL;
	return name;
}

/* The tid as the target's PID namespace numbers it; 0 when the same (or
 * gone before we asked). Read once per thread. */
static pid_t ns_tid(struct cpu_profiler *p, pid_t tid)
{
	uint64_t v;
	pid_t n;

	if (!p->other_pidns)
		return 0;
	if (u64map_get(&p->ns_tids, (uint64_t)tid, &v))
		return (pid_t)v;
	n = target_ns_tid(p->opts.pid, tid);
	u64map_put(&p->ns_tids, (uint64_t)tid, (uint64_t)n); /* only a cache */
	return n;
}

static void on_comm(pid_t tid, const char *name, void *arg)
{
	struct cpu_profiler *p = arg;
	const char *s = profile_intern(p->s.profile, name);

	if (s)
		u64map_put(&p->thread_names, (uint64_t)tid, (uintptr_t)s);
	agent_tasks_saw_name(&p->s.agent, name); /* out of memory: known later, or not */
}

static int on_sample(const struct perf_sample *s, void *arg)
{
	struct cpu_profiler *p = arg;
	struct profile_label labels[3];
	int64_t values[2];
	uint64_t *user = p->pcs + s->nkernel;
	const char *name = thread_name(p, s->tid);
	int n = 0, r;
	bool by_fp;
	pid_t nstid;

	if (!name)
		return -ENOMEM;
	/* cprof's own cost: said in a comment, not in the stacks. */
	if (agent_tasks_has(&p->s.agent, s->tid)) {
		p->agent_samples++;
		return 0;
	}

	/* Kernel frames on top, leaf first; callers are return addresses. */
	for (unsigned i = 0; i < s->nkernel; i++)
		p->pcs[i] = i ? s->kernel_ips[i] - 1 : s->kernel_ips[i];
	n = sampling_user_stack(&p->s, s, user, MAX_FRAMES, &by_fp);
	if (n == 0)
		return 0;
	if (n > 1)
		p->stats.unwound++;
	if (by_fp)
		p->stats.by_frame_pointers++;
	n += (int)s->nkernel;
	for (int i = 0; i < n; i++) {
		r = profile_location_for_address(p->s.profile, p->pcs[i], &p->locs[i]);
		if (r < 0)
			return r;
	}
	labels[0] = (struct profile_label){ .key = "thread_id", .num = s->tid };
	labels[1] = (struct profile_label){ .key = "thread_name", .str = name };
	nstid = ns_tid(p, s->tid);
	labels[2] = (struct profile_label){ .key = "ns_thread_id", .num = nstid };
	values[0] = 1;
	values[1] = (int64_t)s->period;
	r = profile_add_sample(p->s.profile, p->locs, (size_t)n, values, labels, nstid ? 3 : 2);
	if (r < 0)
		return r;
	p->stats.sampled_ns += s->period;
	return cpu_clocks_sample(&p->clocks, s->tid, s->time, s->period);
}

static int drain(struct cpu_profiler *p)
{
	struct perf_handlers h = { .sample = on_sample, .comm = on_comm, .arg = p };
	const struct perf_stats *ps;
	int r = perf_session_drain(p->s.perf, &h);

	ps = perf_session_stats(p->s.perf);
	p->stats.samples = ps->samples - MIN(ps->samples, p->agent_samples);
	p->stats.lost = ps->lost;
	p->stats.foreign = ps->foreign;
	return r;
}

int cpu_profiler_new(struct cpu_profiler **ret, const struct cpu_profiler_opts *o, char *err,
		     size_t errlen)
{
	struct cpu_profiler *p;
	int r;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->opts = *o;
	u64map_init(&p->thread_names);
	u64map_init(&p->ns_tids);
	cpu_clocks_init(&p->clocks, o->pid);
	p->other_pidns = target_other_pidns(o->pid);
	r = sampling_init(&p->s,
			  &(struct sampling_opts){ .pid = o->pid,
						   .types = cpu_types,
						   .ntypes = ARRAY_SIZE(cpu_types),
						   .type = "cpu",
						   .unit = "nanoseconds",
						   .period_ns = sampling_period(o),
						   .command_line = o->command_line,
						   .sym = o->sym },
			  err, errlen);
	if (r < 0)
		goto out_free;
	if (o->kernel_stacks) {
		r = kallsyms_load(&p->ksyms, "/proc/kallsyms");
		if (r < 0) {
			kallsyms_strerror(r, err, errlen);
			goto out_free;
		}
	}
	p->s.popts = (struct perf_opts){
		.pid = o->pid,
		.period_ns = sampling_period(o),
		.scope = o->scope,
		.stack_bytes = STACK_BYTES,
		.ring_pages = PERF_SAMPLE_RING_PAGES(o->hz),
		.kernel = o->kernel,
		.kernel_stacks = o->kernel_stacks,
	};
	r = perf_session_open(&p->s.perf, &p->s.popts);
	if (r < 0) {
		perf_strerror(r, &p->s.popts, err, errlen);
		goto out_free;
	}
	p->have_cpu_clock = clock_getcpuclockid(o->pid, &p->cpu_clock) == 0;
	if (cpu_clocks_open(&p->clocks) == -ENOMEM) {
		r = -ENOMEM;
		goto out_free;
	}
	*ret = p;
	return 0;

out_free:
	cpu_profiler_free(p);
	return r;
}

/*
 * A window's edge: every thread's clock and the process's, read together,
 * the edge the middle of the reads. cprof may lose its CPU between them for
 * far longer than they take while the threads run on: such an edge is read
 * again, a few times at most. The process's clock is read inside the
 * threads' reads (after them at the start, before them at the end): what the
 * threads that end are given from it is never more than they had.
 */
#define EDGE_TRIES 5
#define EDGE_SHARP_NS(nthreads) (100 * 1000ULL + 4 * 1000ULL * (nthreads))

static uint64_t read_edge(struct cpu_profiler *p, bool start, bool *ret_process)
{
	uint64_t t0, t1;
	bool process;

	for (int i = 1;; i++) {
		t0 = now_monotonic_ns();
		if (start) {
			cpu_clocks_edge(&p->clocks);
			process = read_cpu_clock(p, &p->cpu_clock_start);
		} else {
			process = read_cpu_clock(p, &p->cpu_clock_last);
			cpu_clocks_edge(&p->clocks);
		}
		t1 = now_monotonic_ns();
		if (t1 - t0 <= EDGE_SHARP_NS(p->clocks.n) || i == EDGE_TRIES)
			break;
	}
	if (ret_process)
		*ret_process = process;
	return t0 + (t1 - t0) / 2;
}

int cpu_profiler_start(struct cpu_profiler *p)
{
	uint64_t realtime, start;
	int r;

	r = agent_tasks_search(&p->s.agent, NULL, AGENT_TASK_START_WAIT_MS);
	if (r < 0)
		return r;
	/* Without the threads' clocks the samples stand as they are. */
	r = cpu_clocks_start(&p->clocks);
	if (r == -ENOMEM)
		return r;
	realtime = now_realtime_ns() - now_monotonic_ns();
	start = read_edge(p, true, NULL);
	p->s.profile->time_nanos = (int64_t)(realtime + start);
	target_window_start(&p->s.win, p->opts.pid, start);
	p->cpu_clock_last = p->cpu_clock_start;
	r = perf_session_enable(p->s.perf);
	if (r < 0)
		return r;
	p->running = true;
	return 0;
}

static void window_end(struct cpu_profiler *p, uint64_t end)
{
	p->stats.window_ns = target_window_end(&p->s.win, end);
	p->s.profile->duration_nanos = (int64_t)p->stats.window_ns;
}

/*
 * 10-30 ms, at random: never in step with the sampling clock, so cprof's own
 * runs are sampled (and dropped as foreign) like any other task's.
 */
static int drain_interval_ms(struct cpu_profiler *p)
{
	p->s.rng = p->s.rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return 10 + (int)((p->s.rng >> 33) % 21);
}

int cpu_profiler_poll(struct cpu_profiler *p, int timeout_ms)
{
	uint64_t now;
	int r;

	r = perf_session_wait(p->s.perf, MIN(timeout_ms, drain_interval_ms(p)));
	if (r < 0)
		return r;
	r = drain(p);
	if (r < 0)
		return r;
	read_cpu_clock(p, &p->cpu_clock_last);
	now = now_monotonic_ns();
	cpu_clocks_tick(&p->clocks, now);
	p->stats.window_ns = target_window_ns(&p->s.win, now);
	r = target_window_look(&p->s.win, now);
	if (r == -ESRCH) {
		p->stats.target_exited = true;
		window_end(p, now);
		return r;
	}
	/* The agent's task's clock, and a new one's tid. */
	if (r == 1) {
		r = agent_tasks_refresh(&p->s.agent, 0);
		if (r < 0)
			return r;
	}
	return 0;
}

int cpu_profiler_stop(struct cpu_profiler *p)
{
	uint64_t end;
	bool process;
	int r = 0;

	if (p->running) {
		r = perf_session_disable(p->s.perf);
		p->running = false;
	}
	if (cpu_clocks_stop(&p->clocks) < 0 && r == 0)
		r = -ENOMEM;
	end = read_edge(p, false, &process);
	if (!process && !p->stats.target_exited)
		p->stats.target_exited = !target_alive(p->opts.pid);
	window_end(p, end);
	if (p->have_cpu_clock)
		p->stats.process_cpu_ns = p->cpu_clock_last - p->cpu_clock_start;
	if (agent_tasks_refresh(&p->s.agent, 0) == -ENOMEM && r == 0)
		r = -ENOMEM;
	if (drain(p) < 0 && r == 0)
		r = -EIO;
	return r;
}

/*
 * Samples of a thread known as the agent's task only after they were
 * taken (seen while it was being started, before it named itself) go.
 */
static int drop_agent_samples(struct cpu_profiler *p)
{
	bool any = false;

	for (size_t i = 0; i < p->s.profile->nsamples; i++) {
		struct profile_sample *s = &p->s.profile->samples[i];

		if (s->nlabels == 0 || s->labels[0].str ||
		    !agent_tasks_has(&p->s.agent, (pid_t)s->labels[0].num))
			continue;
		p->stats.sampled_ns -= MIN(p->stats.sampled_ns, (uint64_t)s->values[1]);
		p->stats.samples -= MIN(p->stats.samples, (uint64_t)s->values[0]);
		p->agent_samples += (uint64_t)s->values[0];
		s->values[0] = s->values[1] = 0;
		any = true;
	}
	return any ? profile_drop_zero_samples(p->s.profile) : 0;
}

/* @ns of CPU that no sample caught, in a frame of its own: @tid 0 (and
 * @name as its thread's) for threads gone by the window's end. */
static int add_unsampled(struct cpu_profiler *p, uint64_t addr, const char *frame, pid_t tid,
			 uint64_t ns)
{
	struct profile_label labels[2] = { { .key = "thread_id", .num = tid },
					   { .key = "thread_name", .str = frame } };
	int64_t values[2] = { 0, (int64_t)ns };
	uint64_t loc;
	int r;

	if (tid)
		labels[1].str = thread_name(p, tid);
	if (!labels[1].str)
		return -ENOMEM;
	r = profile_named_location(p->s.profile, addr, frame, &loc);
	if (r < 0)
		return r;
	return profile_add_sample(p->s.profile, &loc, 1, values, labels, 2);
}

/*
 * Without the threads' clocks, per-thread events still never sample a
 * thread that lives less than one period (each new thread restarts the
 * count): the process's clock tells the difference, shown as such.
 */
static int add_unweighed(struct cpu_profiler *p, uint64_t process)
{
	uint64_t missing;
	char comment[256];
	int r;

	snprintf(comment, sizeof(comment),
		 "cpu/nanoseconds is the samples' periods, not weighed by the threads' own "
		 "clocks: %s", strerror(-p->clocks.refused));
	r = profile_add_comment(p->s.profile, comment);
	if (r < 0 || p->opts.scope != PERF_SCOPE_THREAD || !process ||
	    process <= p->stats.sampled_ns + p->s.popts.period_ns)
		return r;
	missing = process - p->stats.sampled_ns;
	r = add_unsampled(p, ADDR_ENDED, ENDED_FRAME, 0, missing);
	if (r < 0)
		return r;
	p->stats.unsampled_ns = missing;
	snprintf(comment, sizeof(comment),
		 "per-thread sampling: %.3fs of %.3fs process CPU was in threads too short to "
		 "sample; run as root (system-wide sampling) to attribute it",
		 (double)missing / 1e9, (double)process / 1e9);
	return profile_add_comment(p->s.profile, comment);
}

/* What weigh() did, in the profile's words. */
static int weigh_comments(struct cpu_profiler *p, const struct cpu_clocks_totals *t)
{
	char c[320];
	int r;

	snprintf(c, sizeof(c),
		 "cpu/nanoseconds is each thread's own CPU time in the window (the kernel's "
		 "clock of it, schedstat) divided among its samples: their periods added to "
		 "%.3fs, the clocks of the threads sampled to %.3fs (%+.1f%%)",
		 (double)t->sampled_ns / 1e9, (double)t->weighed_ns / 1e9,
		 t->sampled_ns ? 100.0 * ((double)t->weighed_ns / (double)t->sampled_ns - 1) : 0.0);
	r = profile_add_comment(p->s.profile, c);
	if (r == 0 && t->quiet_threads) {
		snprintf(c, sizeof(c), "%.3fs of CPU in %u %s that no sample caught: %s",
			 (double)t->quiet_ns / 1e9, t->quiet_threads,
			 plural(t->quiet_threads, "thread", "threads"), QUIET_FRAME);
		r = profile_add_comment(p->s.profile, c);
	}
	if (r == 0 && p->stats.unsampled_ns) {
		snprintf(c, sizeof(c), "%.3fs of %.3fs process CPU was in threads that ended "
			 "between two samples: %s",
			 (double)p->stats.unsampled_ns / 1e9,
			 (double)p->stats.process_cpu_ns / 1e9, ENDED_FRAME);
		r = profile_add_comment(p->s.profile, c);
	}
	return r;
}

/*
 * Each thread's samples, weighed so that they add up to its own CPU time in
 * the window; shares within a thread stay those of its samples. The
 * samples/count values stay the counts.
 */
static int weigh(struct cpu_profiler *p)
{
	struct cpu_clocks_totals t;
	/* The process's clock counts the agent's task too: cprof's. */
	uint64_t process = p->stats.process_cpu_ns -
			   MIN(p->stats.process_cpu_ns, agent_tasks_cpu_ns(&p->s.agent));
	int r = 0;

	for (size_t i = 0; i < p->clocks.n; i++)
		if (agent_tasks_has(&p->s.agent, p->clocks.v[i].tid))
			cpu_clocks_forget(&p->clocks, p->clocks.v[i].tid);
	cpu_clocks_settle(&p->clocks, process, &t);
	if (p->clocks.refused)
		return add_unweighed(p, process);
	for (size_t i = 0; i < p->s.profile->nsamples; i++) {
		struct profile_sample *s = &p->s.profile->samples[i];
		const struct profile_label *tid = profile_sample_label(s, "thread_id");

		if (tid && !tid->str)
			s->values[1] = (int64_t)cpu_clocks_weigh(&p->clocks, (pid_t)tid->num,
								 (uint64_t)s->values[1]);
	}
	for (size_t i = 0; i < p->clocks.n && r == 0; i++) {
		const struct cpu_thread *ct = &p->clocks.v[i];

		if (ct->alive && !ct->sampled_ns && ct->own_ns)
			r = add_unsampled(p, ADDR_QUIET, QUIET_FRAME, ct->tid, ct->own_ns);
	}
	/* Below a period: the reads' own spread, not a thread. */
	if (r == 0 && t.ended_ns > p->s.popts.period_ns) {
		r = add_unsampled(p, ADDR_ENDED, ENDED_FRAME, 0, t.ended_ns);
		p->stats.unsampled_ns = t.ended_ns;
	}
	p->stats.weighed = true;
	p->stats.clocks_ns = t.weighed_ns;
	return r < 0 ? r : weigh_comments(p, &t);
}

int cpu_profiler_finish(struct cpu_profiler *p, struct profile **ret)
{
	uint64_t t0 = now_monotonic_ns();
	char comment[256];
	int r;

	if (p->stats.lost) {
		snprintf(comment, sizeof(comment), "lost %llu %s: sample buffers overflowed",
			 (unsigned long long)p->stats.lost, plural(p->stats.lost, "record", "records"));
		r = profile_add_comment(p->s.profile, comment);
		if (r < 0)
			return r;
	}
	if (p->stats.by_frame_pointers) {
		unwind_frame_pointer_note(comment, sizeof(comment), p->stats.by_frame_pointers,
					  p->stats.samples);
		r = profile_add_comment(p->s.profile, comment);
		if (r < 0)
			return r;
	}
	r = sampling_symbolize(&p->s, p->opts.kernel_stacks ? &p->ksyms : NULL);
	if (r < 0)
		return r;
	r = drop_agent_samples(p);
	if (r == 0)
		r = agent_tasks_note(&p->s.agent, true, p->s.profile);
	if (r == 0)
		r = weigh(p);
	if (r < 0)
		return r;
	p->stats.cpu_ns = (uint64_t)profile_total(p->s.profile, 1);
	p->stats.symbolize_ns = now_monotonic_ns() - t0;
	sampling_hand_out(&p->s, ret);
	return 0;
}

const struct cpu_profiler_stats *cpu_profiler_stats(const struct cpu_profiler *p)
{
	return &p->stats;
}

void cpu_profiler_free(struct cpu_profiler *p)
{
	if (!p)
		return;
	sampling_release(&p->s);
	u64map_release(&p->thread_names);
	kallsyms_release(&p->ksyms);
	u64map_release(&p->ns_tids);
	cpu_clocks_release(&p->clocks);
	free(p);
}
