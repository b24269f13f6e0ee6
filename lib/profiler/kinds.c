/* The kinds cprof takes and a set of them opened on one target (kinds.h). */
#include "profiler/kinds.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "agent/wire.h"
#include "heap/allocator.h"
#include "perf/perf.h"
#include "target/target.h"

static const struct {
	const char *name;
	uint32_t events;
} table[KIND_N] = {
	[KIND_CPU] = { "cpu", 0 },
	[KIND_WALL] = { "wall", 0 },
	[KIND_THREADS] = { "threads", 0 },
	[KIND_HEAP] = { "heap", CPROF_EVENTS_HEAP },
	[KIND_BLOCK] = { "block", CPROF_EVENTS_BLOCK },
	[KIND_MUTEX] = { "mutex", CPROF_EVENTS_MUTEX },
	[KIND_THREADCREATE] = { "threadcreate", CPROF_EVENTS_THREADCREATE },
};

const char *kind_name(enum kind k)
{
	return k < KIND_N ? table[k].name : NULL;
}

enum kind kind_by_name(const char *name)
{
	unsigned k;

	for (k = 0; k < KIND_N && strcmp(name, table[k].name); k++)
		;
	return (enum kind)k;
}

uint32_t kind_events(enum kind k)
{
	return k < KIND_N ? table[k].events : 0;
}

static void refuse(struct kinds_opened *ret, unsigned k, int error, const char *why)
{
	ret->error[k] = error;
	snprintf(ret->refused[k], sizeof(ret->refused[k]), "%s", why);
}

/* What keeps the agent out of @o's target (@why), or 0. */
static int agent_barred(const struct kinds_opts *o, char *why, size_t size)
{
	char state;

	if (!o->agent.agent_path) {
		snprintf(why, size, "%s", o->agent_why && o->agent_why[0] ? o->agent_why
						: "cannot find cprof-agent.so (set CPROF_AGENT)");
		return -ENOENT;
	}
	if (target_thread_state(o->pid, o->pid, &state) == 0 && state == 'T') {
		snprintf(why, size, "pid %d (%s) is stopped (SIGSTOP or a debugger): no thread "
			 "can load the agent", o->pid, o->comm);
		return -EAGAIN;
	}
	return 0;
}

/* The agent's kinds asked for, on one session (profiler_new_agents()). */
static void open_agent(const struct kinds_opts *o, struct kinds_opened *ret)
{
	struct agent_profiler_opts ao = o->agent;
	struct profiler *ps[CPROF_KINDS];
	struct heap_allocator a;
	char why[KINDS_WHY_MAX];
	size_t n = 0;
	int r;

	ao.pid = o->pid;
	ao.command_line = o->command_line;
	ao.sym = o->sym;
	ao.events = 0;
	if (o->asked[KIND_HEAP] && heap_allocator_unhookable(o->pid, &a)) {
		heap_allocator_why(&a, why, sizeof(why));
		refuse(ret, KIND_HEAP, -ENOTSUP, why);
	}
	for (unsigned k = 0; k < KIND_N; k++)
		if (table[k].events && o->asked[k] && !ret->error[k])
			ao.events |= table[k].events;
	if (!ao.events)
		return;
	r = agent_barred(o, why, sizeof(why));
	if (r == 0)
		r = profiler_new_agents(ps, &n, &ao, o->comm, why, sizeof(why));
	for (unsigned k = 0, i = 0; k < KIND_N; k++) {
		if (!(ao.events & table[k].events))
			continue;
		if (r < 0)
			refuse(ret, k, r, why);
		else
			ret->p[k] = ps[i++];
	}
}

static void open_samplers(const struct kinds_opts *o, struct kinds_opened *ret)
{
	struct cpu_profiler_opts co = {
		.pid = o->pid, .hz = o->hz,
		.scope = perf_system_scope_allowed() ? PERF_SCOPE_SYSTEM : PERF_SCOPE_THREAD,
		.kernel = perf_kernel_samples_allowed(), .command_line = o->command_line,
		.sym = o->sym,
	};
	struct wall_profiler_opts wo = { .pid = o->pid, .hz = o->hz,
					 .command_line = o->command_line, .sym = o->sym };
	char why[KINDS_WHY_MAX];
	int r;

	if (o->asked[KIND_CPU] && (r = profiler_new_cpu(&ret->p[KIND_CPU], &co, why,
							 sizeof(why))) < 0)
		refuse(ret, KIND_CPU, r, why);
	if (o->asked[KIND_WALL] && (r = profiler_new_wall(&ret->p[KIND_WALL], &wo, why,
							   sizeof(why))) < 0)
		refuse(ret, KIND_WALL, r, why);
	if (o->asked[KIND_THREADS] &&
	    (r = profiler_new_threads(&ret->p[KIND_THREADS], o->pid, o->sym,
				      o->command_line)) < 0)
		refuse(ret, KIND_THREADS, r, "out of memory");
}

void kinds_open(const struct kinds_opts *o, struct kinds_opened *ret)
{
	memset(ret, 0, sizeof(*ret));
	open_agent(o, ret);
	open_samplers(o, ret);
}

void kinds_close(struct kinds_opened *k)
{
	for (unsigned i = 0; i < KIND_N; i++) {
		profiler_free(k->p[i]);
		k->p[i] = NULL;
	}
}
