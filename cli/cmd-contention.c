/*
 * cprof block, cprof mutex, cprof threadcreate: Go's three other runtime
 * profiles, from the agent's pthread hooks. Options and the report; the run
 * is run.c's, the profiler lib/session/'s, the profile lib/contention/'s.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent-load.h"
#include "agent-window.h"
#include "commands.h"
#include "contention/contention.h"
#include "options.h"
#include "profiler/profiler.h"
#include "report.h"
#include "run.h"
#include "util/parse.h"
#include "util/util.h"

/* What tells the three commands apart. */
struct contention_command {
	const char *name;
	uint32_t events;
	const char *summary; /* --help's first lines */
	const char *rate_option; /* as serve names it; NULL: none */
	int rate_key;            /* its getopt value */
	const char *rate_help;
	uint64_t default_rate;
};

static const struct contention_command block_command = {
	"block", CPROF_EVENTS_BLOCK,
	"Record where the threads of process PID wait: pthread mutexes, rwlocks and\n"
	"condition variables, semaphores (Go's block profile). The stack that waited\n"
	"is charged. Writes contentions/count and delay/nanoseconds.\n",
	"--block-rate", 'B',
	"      --block-rate DURATION  waits this long are always recorded; shorter ones\n"
	"                           with probability wait/rate, counted unbiased\n"
	"                           (default 10us; --rate is its old name, deprecated)\n",
	CPROF_WIRE_BLOCK_RATE_DEFAULT
};

static const struct contention_command mutex_command = {
	"mutex", CPROF_EVENTS_MUTEX,
	"Record lock contention in process PID (Go's mutex profile): the delay that\n"
	"waiters suffered is charged to the stack that held the lock, where it\n"
	"unlocked. Writes contentions/count and delay/nanoseconds.\n",
	"--mutex-fraction", 'M',
	"      --mutex-fraction N   record one in N contention events, values scaled\n"
	"                           by N (default 1: every event; Go's\n"
	"                           SetMutexProfileFraction; --rate is its old name,\n"
	"                           deprecated)\n",
	CPROF_WIRE_MUTEX_RATE_DEFAULT
};

static const struct contention_command threadcreate_command = {
	"threadcreate", CPROF_EVENTS_THREADCREATE,
	"Record the stacks that create threads (pthread_create) in process PID\n"
	"(Go's threadcreate profile). Writes threadcreate/count.\n",
	NULL, 0,
	"",
	1
};

/* One run of one of them. */
struct contention_run {
	const struct contention_command *cmd;
	struct common_opts common;
	uint64_t duration_ns;
	uint64_t rate;
};

static void help(const void *ctx)
{
	const struct contention_command *k = ((const struct contention_run *)ctx)->cmd;

	printf("usage: cprof %s -p PID [-d DURATION]%s [--debug N] [-o FILE] [--format FORMAT] "
	       "[--top N] [--json] [-q]\n\n%s"
	       "Loads cprof-agent.so into the running process; its hooks go when the window\n"
	       "ends (and by themselves within 1 s if cprof dies). Ctrl-C stops early and\n"
	       "still writes the profile.\n\n"
	       "  -p, --pid PID            process to profile\n"
	       "  -d, --duration DURATION  how long to record, e.g. 500ms, 30s, 1m30s (default 30s)\n"
	       "%s"
	       "      --debug N            1: Go's text layout (to stdout without -o); 0: the\n"
	       "                           pprof profile (the default)\n"
	       "  -o, --output FILE        where to write, - for stdout (default %s.pb.gz;\n"
	       "                           a view or text without -o goes to stdout)\n"
	       OPTIONS_OUTPUT_HELP
	       "  -q, --quiet              no progress or summary on stderr\n"
	       "  -h, --help               show this help\n" OPTIONS_EXIT_HELP,
	       k->name,
	       k->events == CPROF_EVENTS_BLOCK ? " [--block-rate DURATION]"
	       : k->events == CPROF_EVENTS_MUTEX ? " [--mutex-fraction N]"
						 : "",
	       k->summary, k->rate_help, k->name);
}

/* @arg of the command's rate option. */
static int parse_rate(struct contention_run *a, const char *arg)
{
	int64_t v;
	int r;

	if (a->cmd->events == CPROF_EVENTS_BLOCK)
		return option_duration(a->cmd->name, a->cmd->rate_option, arg, &a->rate);
	r = option_int(a->cmd->name, a->cmd->rate_option, arg, 1, 1000000000, &v);
	if (r == 0)
		a->rate = (uint64_t)v;
	return r;
}

static int on_option(int c, const char *arg, void *ctx)
{
	struct contention_run *a = ctx;
	const char *name = a->cmd->name;

	switch (c) {
	case 'd':
		return option_duration(name, "duration", arg, &a->duration_ns);
	case 'r':
		if (!a->cmd->rate_option)
			return report_usage(name, "unknown option '--rate'");
		option_deprecated(name, "--rate", a->cmd->rate_option);
		return parse_rate(a, arg);
	case 'B':
	case 'M':
		if (c != a->cmd->rate_key)
			return report_usage(name, "unknown option '%s'",
					    c == 'B' ? "--block-rate" : "--mutex-fraction");
		return parse_rate(a, arg);
	case 'D':
		return option_debug(name, arg, 1, &a->common);
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct contention_run *a)
{
	static const struct option longopts[] = {
		{ "duration", required_argument, NULL, 'd' },
		{ "block-rate", required_argument, NULL, 'B' },
		{ "mutex-fraction", required_argument, NULL, 'M' },
		{ "rate", required_argument, NULL, 'r' }, /* their old name */
		{ "debug", required_argument, NULL, 'D' },
		{ "output", required_argument, NULL, 'o' },
		{}
	};
	int r;

	r = options_parse(a->cmd->name, argc, argv, ":p:d:o:qh", longopts, &a->common, on_option,
			  help, a);
	if (r)
		return r;
	return option_output(a->cmd->name, &a->common);
}

static void summary(const void *ctx, const struct run *run)
{
	const struct contention_run *a = ctx;
	const struct agent_profiler *ap = profiler_agent(run->p);
	const struct contention_stats *st =
		contention_stats(agent_profiler_contention(ap, a->cmd->events));
	const struct window_result *w = agent_profiler_window(ap);
	char window[32];

	format_duration(w->window_ns, window, sizeof(window));
	if (a->cmd->events == CPROF_EVENTS_THREADCREATE)
		report_note("wrote %s: %.0f %s created in a %s window", output_name(&run->out),
			    st->events, plural((unsigned long long)llround(st->events), "thread",
					       "threads"), window);
	else
		report_note("wrote %s: %llu %s (%llu %s walked in the target), ~%.0f %s, ~%.3f "
			    "s of delay in a %s window", output_name(&run->out),
			    (unsigned long long)st->records, plural(st->records, "record", "records"),
			    (unsigned long long)st->walked, plural(st->walked, "stack", "stacks"),
			    st->events,
			    plural((unsigned long long)llround(st->events), "contention",
				   "contentions"), st->delay_ns / 1e9, window);
	if (!w->records)
		report_note("no events in the window: no thread waited (or created a thread) "
			    "through the hooked functions");
	if (w->counters.lost)
		report_warning("%llu %s lost: the agent's ring was full; try a larger --rate",
			       (unsigned long long)w->counters.lost,
			       plural(w->counters.lost, "event", "events"));
}

static int open_profiler(void *ctx, struct run *run)
{
	const struct contention_run *a = ctx;
	struct agent_profiler_opts ao = {
		.pid = run->target.pid,
		.events = a->cmd->events,
		.duration_ns = a->duration_ns,
		.command_line = run->command_line,
	};

	ao.rates[cprof_wire_first_kind(a->cmd->events)] = a->rate;
	return agent_open(run, &ao);
}

static void ended(const void *ctx, const struct run *run)
{
	(void)ctx;
	agent_window_report(agent_profiler_window(profiler_agent(run->p)), &run->target);
}

static int contention_main(int argc, char **argv, const struct contention_command *k)
{
	struct contention_run a = { .cmd = k, .duration_ns = 30ULL * 1000000000ULL,
				    .rate = k->default_rate };
	const struct run_ops ops = {
		.command = k->name,
		.attach = "load the agent into",
		.verb = "profiling",
		.open = open_profiler,
		.counts = { "record", "records" },
		.ended = ended,
		.summary = summary,
	};
	int code = parse_args(argc, argv, &a);

	if (code)
		return code < 0 ? EXIT_OK : code;
	return run_command(&ops, &a, &a.common, a.duration_ns, argc, argv);
}

int cmd_block(int argc, char **argv)
{
	return contention_main(argc, argv, &block_command);
}

int cmd_mutex(int argc, char **argv)
{
	return contention_main(argc, argv, &mutex_command);
}

int cmd_threadcreate(int argc, char **argv)
{
	return contention_main(argc, argv, &threadcreate_command);
}
