/*
 * wall's window: the profiler's verbs (wall-profiler.h), the perf session
 * opened and the ticks driven, the profile finished with its comments.
 */
#include "wall/wall-profiler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "maps/maps.h"
#include "perf/perf.h"
#include "symbolize/symbolize.h"
#include "target/target.h"
#include "threads/threads.h"
#include "unwind/unwind.h"
#include "util/util.h"
#include "wall/wall-private.h"

#define STACK_BYTES 8192

static const struct profile_value_type wall_types[] = {
	{ "samples", "count" },
	{ "wall", "nanoseconds" },
};

int wall_profiler_new(struct wall_profiler **ret, const struct wall_profiler_opts *o, char *err,
		      size_t errlen)
{
	struct wall_profiler *p;
	int r;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->opts = *o;
	u64map_init(&p->by_tid);
	u64map_init(&p->births);
	p->tick_ns = 1000000000ULL / (o->hz ? o->hz : 100);
	r = sampling_init(&p->s,
			  &(struct sampling_opts){ .pid = o->pid,
						   .types = wall_types,
						   .ntypes = ARRAY_SIZE(wall_types),
						   .type = "wall",
						   .unit = "nanoseconds",
						   .period_ns = p->tick_ns,
						   .command_line = o->command_line,
						   .sym = o->sym },
			  err, errlen);
	if (r < 0)
		goto out_free;
	p->s.popts = (struct perf_opts){
		.pid = o->pid,
		.period_ns = p->tick_ns,
		/* Events of the target's own threads make each of its switches
		 * dearer; a CPU's event costs it nothing. */
		.scope = !o->per_thread && perf_system_scope_allowed() ? PERF_SCOPE_SYSTEM
								       : PERF_SCOPE_THREAD,
		.stack_bytes = STACK_BYTES,
		.ring_pages = PERF_SAMPLE_RING_PAGES(o->hz),
		.task = true,
		/* Samples in system calls carry the call's user stack. */
		.kernel = perf_kernel_samples_allowed(),
	};
	r = maps_read(o->pid, &p->maps);
	if (r < 0) {
		snprintf(err, errlen, "cannot read the mappings of pid %d: %s", o->pid,
			 strerror(-r));
		goto out_free;
	}
	/* The syscall file and the stack copies need ptrace access (Yama may
	 * allow it only to a debugger's parent): without, time is still
	 * accounted, stackless. */
	{
		struct wall_look look;

		r = wall_look_read(o->pid, o->pid, &look);
		if (r == -EACCES || r == -EPERM)
			p->stats.stacks_refused = r;
	}
	/* Without CPU samples the running time is still counted, stackless. */
	p->stats.perf_per_thread = p->s.popts.scope == PERF_SCOPE_THREAD;
	r = perf_session_open(&p->s.perf, &p->s.popts);
	if (r < 0) {
		p->s.perf = NULL;
		p->stats.perf_refused = true;
		perf_strerror(r, &p->s.popts, p->stats.perf_error, sizeof(p->stats.perf_error));
	}
	*ret = p;
	return 0;

out_free:
	wall_profiler_free(p);
	return r;
}

int wall_profiler_start(struct wall_profiler *p)
{
	int r;

	p->s.profile->time_nanos = (int64_t)now_realtime_ns();
	target_window_start(&p->s.win, p->opts.pid, now_monotonic_ns());
	r = agent_tasks_search(&p->s.agent, &p->maps, AGENT_TASK_START_WAIT_MS);
	if (r < 0)
		return r;
	r = wall_tick(p, false, NULL); /* the baseline: nothing accounted yet */
	if (r < 0)
		return r;
	p->started = true;
	p->next_tick = now_monotonic_ns() + p->tick_ns;
	if (p->s.perf) {
		r = perf_session_enable(p->s.perf);
		if (r < 0)
			return r;
	}
	p->running = true;
	return 0;
}

static void window_end(struct wall_profiler *p)
{
	p->stats.window_ns = target_window_end(&p->s.win, 0);
	p->s.profile->duration_nanos = (int64_t)p->stats.window_ns;
}

int wall_profiler_poll(struct wall_profiler *p, int timeout_ms)
{
	uint64_t now = now_monotonic_ns();
	int wait_ms = 0, r;

	/* Rounded up: a wait of 0 ms would spin until the tick. */
	if (p->next_tick > now)
		wait_ms = (int)MIN((uint64_t)timeout_ms, (p->next_tick - now + 999999) / 1000000);
	if (p->s.perf) {
		r = perf_session_wait(p->s.perf, wait_ms);
		if (r < 0)
			return r;
	} else if (wait_ms) {
		struct timespec ts = { wait_ms / 1000, (long)(wait_ms % 1000) * 1000000 };

		nanosleep(&ts, NULL);
	}
	r = wall_drain(p);
	if (r < 0)
		return r;
	now = now_monotonic_ns();
	if (now >= p->next_tick) {
		r = wall_take_tick(p);
		if (r < 0 && r != -ESRCH)
			return r;
	}
	p->stats.window_ns = target_window_ns(&p->s.win, now);
	if (target_window_look(&p->s.win, now) == -ESRCH) {
		p->stats.target_exited = true;
		window_end(p);
		return -ESRCH;
	}
	return 0;
}

int wall_profiler_stop(struct wall_profiler *p)
{
	int r = 0;

	/* Samples first, then the last tick: no sample stands for time after
	 * the window's end. */
	if (p->running && p->s.perf)
		perf_session_disable(p->s.perf);
	if (p->running && p->switches)
		perf_session_disable(p->switches);
	if (wall_drain(p) < 0)
		r = -EIO;
	if (p->running && !p->stats.target_exited && !p->s.win.end_ns) {
		uint64_t end = 0;

		if (wall_tick(p, true, &end) == -ENOMEM)
			r = -ENOMEM;
		target_window_end(&p->s.win, end); /* where the last tick accounted the threads to */
	}
	window_end(p);
	if (!p->run_added)
		wall_take_back_owed(p);
	for (size_t i = 0; i < p->nthreads && !p->run_added; i++)
		if (wall_add_running(p, &p->threads[i]) < 0)
			r = -ENOMEM;
	p->run_added = true;
	p->running = false;
	window_end(p);
	if (!p->stats.target_exited)
		p->stats.target_exited = !target_alive(p->opts.pid);
	return r;
}

const char *wall_split_reason(enum wall_split split)
{
	switch (split) {
	case WALL_SPLIT_EXACT:
		break;
	case WALL_SPLIT_REFUSED:
		return "perf_event_open refused them";
	case WALL_SPLIT_TOO_MANY_THREADS:
		return "an event a thread is too dear above 512 threads";
	case WALL_SPLIT_TOO_MANY_SWITCHES:
		return "the target switches too often for them to be cheap";
	case WALL_SPLIT_LOST:
		return "some were lost";
	}
	return "exact";
}

static int add_comments(struct wall_profiler *p)
{
	char c[512];
	int r = 0;

	if (p->stats.perf_refused) {
		snprintf(c, sizeof(c), "no CPU stacks: perf_event_open refused (%s); running time "
			 "is in [running: not sampled]", p->stats.perf_error);
		r = profile_add_comment(p->s.profile, c);
	}
	if (r == 0 && p->stats.split != WALL_SPLIT_EXACT) {
		snprintf(c, sizeof(c), "runnable time is split between the stack a thread ran on "
			 "and the one it slept on by estimate, not by the kernel's switch records "
			 "(%s)", wall_split_reason(p->stats.split));
		r = profile_add_comment(p->s.profile, c);
	}
	if (r == 0 && p->stats.lost) {
		snprintf(c, sizeof(c), "lost %llu perf %s: buffers overflowed",
			 (unsigned long long)p->stats.lost, plural(p->stats.lost, "record", "records"));
		r = profile_add_comment(p->s.profile, c);
	}
	if (r == 0 && p->stats.by_frame_pointers) {
		unwind_frame_pointer_note(c, sizeof(c), p->stats.by_frame_pointers,
					  p->stats.run_stacks + p->stats.off_stacks);
		r = profile_add_comment(p->s.profile, c);
	}
	return r;
}

/*
 * The samples of threads found to be the agent's task after they were
 * taken for the program's (wall_thread_disown()) go, and the figures with them.
 */
static int drop_own_samples(struct wall_profiler *p)
{
	struct profile *pr = p->s.profile;
	bool any = false;

	for (size_t i = 0; i < p->nthreads; i++)
		any |= p->threads[i].own;
	if (!any)
		return 0;
	for (size_t i = 0; i < pr->nsamples; i++) {
		struct profile_sample *s = &pr->samples[i];
		const struct profile_label *tid = profile_sample_label(s, "thread_id");
		const struct profile_label *state = profile_sample_label(s, "state");
		struct wall_thread *t = tid ? wall_thread_of(p, (pid_t)tid->num) : NULL;
		uint64_t ns = (uint64_t)s->values[1], *figure = &p->stats.off_ns;

		if (!t || !t->own)
			continue;
		if (state && !strcmp(state->str, "running"))
			figure = &p->stats.running_ns;
		else if (state && !strcmp(state->str, "runnable"))
			figure = &p->stats.runnable_ns;
		*figure -= MIN(*figure, ns);
		p->stats.accounted_ns -= MIN(p->stats.accounted_ns, ns);
		s->values[0] = s->values[1] = 0;
	}
	return profile_drop_zero_samples(pr);
}

int wall_profiler_finish(struct wall_profiler *p, struct profile **ret)
{
	uint64_t t0 = now_monotonic_ns();
	int r;

	r = drop_own_samples(p);
	if (r == 0)
		r = agent_tasks_note(&p->s.agent, true, p->s.profile);
	if (r == 0)
		r = add_comments(p);
	if (r < 0)
		return r;
	r = sampling_symbolize(&p->s, NULL);
	if (r < 0)
		return r;
	p->stats.symbolize_ns = now_monotonic_ns() - t0;
	sampling_hand_out(&p->s, ret);
	return 0;
}

const struct wall_profiler_stats *wall_profiler_stats(const struct wall_profiler *p)
{
	return &p->stats;
}

void wall_profiler_free(struct wall_profiler *p)
{
	if (!p)
		return;
	sampling_release(&p->s);
	perf_session_free(p->switches);
	for (size_t i = 0; i < p->nthreads; i++) {
		if (p->threads[i].fd >= 0)
			close(p->threads[i].fd);
		if (p->threads[i].status_fd >= 0)
			close(p->threads[i].status_fd);
		wall_off_stack_release(&p->threads[i].off);
		free(p->threads[i].run_pcs);
		wall_run_stacks_release(&p->threads[i].runs);
		wall_waits_release(&p->threads[i].waits);
	}
	free(p->threads);
	u64map_release(&p->by_tid);
	u64map_release(&p->births);
	maps_release(&p->maps);
	free(p);
}

