/*
 * cprof block, cprof mutex, cprof threadcreate: Go's three other runtime
 * profiles, from the agent's pthread hooks. Options, the agent's window
 * (agent-load.c, agent-window.c) and the report; the profile is built in
 * lib/contention/.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent-load.h"
#include "agent-window.h"
#include "commands.h"
#include "contention/contention.h"
#include "interrupt.h"
#include "options.h"
#include "output.h"
#include "preflight.h"
#include "report.h"
#include "runbook.h"
#include "util/parse.h"
#include "util/util.h"

struct kind {
	const char *cmd;
	uint32_t events;
	const char *output;  /* default -o with --debug 0 */
	const char *summary; /* --help's first lines */
	const char *rate_help;
	uint64_t default_rate;
};

static const struct kind kinds[] = {
	{ "block", CPROF_EVENTS_BLOCK, "block.pb.gz",
	  "Record where the threads of process PID wait: pthread mutexes, rwlocks and\n"
	  "condition variables, semaphores (Go's block profile). The stack that waited\n"
	  "is charged. Writes contentions/count and delay/nanoseconds.\n",
	  "      --rate DURATION      waits this long are always recorded; shorter ones\n"
	  "                           with probability wait/rate, counted unbiased\n"
	  "                           (default 10us)\n",
	  10000 },
	{ "mutex", CPROF_EVENTS_MUTEX, "mutex.pb.gz",
	  "Record lock contention in process PID (Go's mutex profile): the delay that\n"
	  "waiters suffered is charged to the stack that held the lock, where it\n"
	  "unlocked. Writes contentions/count and delay/nanoseconds.\n",
	  "      --rate N             record one in N contention events, values scaled\n"
	  "                           by N (default 1: every event)\n",
	  1 },
	{ "threadcreate", CPROF_EVENTS_THREADCREATE, "threadcreate.pb.gz",
	  "Record the stacks that create threads (pthread_create) in process PID\n"
	  "(Go's threadcreate profile). Writes threadcreate/count.\n",
	  "",
	  1 },
};

struct args {
	const struct kind *k;
	struct common_opts common;
	uint64_t duration_ns;
	uint64_t rate;
	int debug; /* -1: not given */
};

static void help(const struct kind *k)
{
	printf("usage: cprof %s -p PID [-d DURATION]%s [--debug N] [-o FILE] [--format FORMAT] "
	       "[--top N] [--json] [-q]\n\n%s"
	       "Loads cprof-agent.so into the running process; its hooks go when the window\n"
	       "ends (and by themselves within 1 s if cprof dies). Ctrl-C stops early and\n"
	       "still writes the profile.\n\n"
	       "  -p, --pid PID            process to profile\n"
	       "  -d, --duration DURATION  how long to record, e.g. 500ms, 30s, 1m30s (default 30s)\n"
	       "%s"
	       "      --debug N            0: gzipped pprof (default with -o); 1: Go's text\n"
	       "                           layout (default without -o, to stdout)\n"
	       "  -o, --output FILE        where to write, - for stdout (default %s with\n"
	       "                           --debug 0, stdout for text and views)\n"
	       OPTIONS_RUNBOOK_HELP
	       "  -q, --quiet              no progress or summary on stderr\n"
	       "  -h, --help               show this help\n",
	       k->cmd,
	       k->events == CPROF_EVENTS_BLOCK ? " [--rate DURATION]"
	       : k->events == CPROF_EVENTS_MUTEX ? " [--rate N]"
						 : "",
	       k->summary, k->rate_help, k->output);
}

static int on_option(int c, const char *arg, void *ctx)
{
	struct args *a = ctx;
	int64_t v;
	int r;

	switch (c) {
	case 'd':
		return option_duration(a->k->cmd, "duration", arg, &a->duration_ns);
	case 'R':
		if (a->k->events == CPROF_EVENTS_BLOCK)
			return option_duration(a->k->cmd, "rate", arg, &a->rate);
		if (a->k->events == CPROF_EVENTS_MUTEX) {
			r = option_int(a->k->cmd, "rate", arg, 1, 1000000000, &v);
			if (r == 0)
				a->rate = (uint64_t)v;
			return r;
		}
		return report_usage(a->k->cmd, "unknown option '--rate'");
	case 'D':
		r = option_int(a->k->cmd, "debug level", arg, 0, 1, &v);
		if (r == 0)
			a->debug = (int)v;
		return r;
	}
	return 0;
}

static int parse_args(int argc, char **argv, const struct kind *k, struct args *a)
{
	static const struct option longopts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "duration", required_argument, NULL, 'd' },
		{ "rate", required_argument, NULL, 'R' },
		{ "debug", required_argument, NULL, 'D' },
		{ "output", required_argument, NULL, 'o' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	int r;

	*a = (struct args){ .k = k, .duration_ns = 30ULL * 1000000000ULL,
			    .rate = k->default_rate, .debug = -1 };
	r = options_parse(k->cmd, argc, argv, ":p:d:o:qh", longopts, &a->common, on_option, a);
	if (r)
		return r;
	if (a->common.help) {
		help(k);
		return -1;
	}
	return option_debug_output(k->cmd, &a->common, &a->debug, k->output);
}

static int on_event(const struct cprof_wire_event *ev, void *arg)
{
	return contention_add(arg, ev);
}

static int render_text(struct contention *c, uint64_t rate, char **ret, size_t *ret_len)
{
	FILE *f = open_memstream(ret, ret_len);
	int r;

	if (!f)
		return -errno;
	r = contention_write_text(c, rate, f);
	if (fclose(f) != 0 && r == 0)
		r = -EIO;
	return r;
}

static void summary(const struct args *a, const struct output *out,
		    const struct window_result *w, const struct contention_stats *st)
{
	char window[32];

	format_duration(w->window_ns, window, sizeof(window));
	if (a->k->events == CPROF_EVENTS_THREADCREATE)
		report_note("wrote %s: %.0f %s created in a %s window", output_name(out),
			    st->events, plural((unsigned long long)llround(st->events), "thread",
					       "threads"), window);
	else
		report_note("wrote %s: %llu %s (%llu %s walked in the target), ~%.0f %s, ~%.3f "
			    "s of delay in a %s window", output_name(out),
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

static int run(int argc, char **argv, const struct kind *k)
{
	struct contention *c = NULL;
	struct channel *ch = NULL;
	struct profile *profile = NULL;
	struct channel_handlers h = { .event = on_event };
	struct window_result w;
	struct agent_load al = { .fd = -1 };
	struct contention_opts copts;
	struct output out;
	struct target t;
	struct args a;
	char why[1024], cmdline[1024], title[256], *text = NULL;
	size_t text_len = 0;
	int r, code;

	code = parse_args(argc, argv, k, &a);
	if (code)
		return code < 0 ? EXIT_OK : code;
	report_set_quiet(a.common.quiet);
	code = preflight_target(a.common.pid, &t);
	if (code)
		return code;
	a.common.pid = t.pid; /* the process, when a thread's id was given */
	code = preflight_not_traced(&t, "load the agent into");
	if (code)
		return code;
	r = output_prepare(&out, a.common.output, a.debug == 0 && a.common.format == VIEW_PPROF,
			   why, sizeof(why));
	if (r < 0) {
		report_error_text(NULL, why);
		return EXIT_OUTPUT;
	}
	interrupt_install();
	code = agent_load(&al, &t, k->events, a.rate);
	if (code)
		goto out_abort;
	ch = al.ch;
	copts = (struct contention_opts){ .events = k->events, .sym = al.sym, .unw = al.unw };
	/* Without rules every record carries its stack copy (cprof(1)). */
	copts.put_rule_arg = agent_rules_channel(&al);
	copts.put_rule = copts.put_rule_arg ? agent_put_rule : NULL;
	r = contention_new(&c, &copts);
	if (r < 0)
		goto out_fail;
	h.arg = c;
	r = agent_window(ch, &t, a.duration_ns, &h, "records", &w);
	if (r < 0)
		goto out_fail;
	agent_window_report(&w, &t);
	/* --top and --json read the profile, also beside the text view. */
	if (a.debug == 0 || a.common.top || a.common.json) {
		command_line_join(argc, argv, cmdline, sizeof(cmdline));
		r = contention_build(c, cmdline, (int64_t)w.start_realtime_ns, (int64_t)w.window_ns,
				     &profile);
		if (r == 0)
			r = agent_note_lost(&w.counters, profile);
		if (r < 0)
			goto out_write;
	}
	if (a.debug == 0) {
		runbook_title(k->cmd, t.pid, profile, title, sizeof(title));
		r = output_commit_view(&out, profile, a.common.format, title);
	} else {
		r = render_text(c, a.rate, &text, &text_len);
		if (r == 0)
			r = output_commit_bytes(&out, text, text_len);
	}
out_write:
	if (r < 0) {
		code = output_report_failure(&out, r);
		goto out_abort;
	}
	summary(&a, &out, &w, contention_stats(c));
	report_unsymbolized_program(al.sym);
	code = runbook_end_agent(k->cmd, &a.common, &w, &al, contention_stats(c)->records,
				 profile);
	goto out_free;
out_fail:
	report_error("profiling pid %d failed: %s", t.pid, strerror(-r));
	code = EXIT_FAIL;
out_abort:
	output_abort(&out);
out_free:
	free(text);
	profile_free(profile);
	contention_free(c);
	agent_load_release(&al);
	return code;
}

int cmd_block(int argc, char **argv)
{
	return run(argc, argv, &kinds[0]);
}

int cmd_mutex(int argc, char **argv)
{
	return run(argc, argv, &kinds[1]);
}

int cmd_threadcreate(int argc, char **argv)
{
	return run(argc, argv, &kinds[2]);
}
