/*
 * cprof heap: Go's heap profile of a running process. Options and the
 * report; the run is run.c's, --keep's background session heap-keep.c's,
 * and the profile is built in lib/heap/ (jemalloc's in lib/session/).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent-load.h"
#include "agent-window.h"
#include "commands.h"
#include "heap-jemalloc.h"
#include "heap-keep.h"
#include "heap/allocator.h"
#include "heap/heap.h"
#include "options.h"
#include "pprof/pprof.h"
#include "profiler/profiler.h"
#include "report.h"
#include "run.h"
#include "util/parse.h"
#include "util/util.h"

#define CMD "heap"
#define DEFAULT_RATE (512u << 10) /* Go's MemProfileRate */

static const char *const indexes[] = { "inuse_space", "inuse_objects", "alloc_space",
				       "alloc_objects" };

struct heap_run {
	struct common_opts common;
	uint64_t duration_ns;
	uint64_t rate;
	const char *index;
	bool duration_given, rate_given, keep, stop;
	enum heap_source source;
	bool jemalloc;      /* the source taken: jemalloc's own profiler */
	/* --keep: the child's socket and pipe to the foreground (-1: none),
	 * and what its profiles since sampling began need. */
	int keep_lfd, keep_code_fd;
	struct agent_profiler *ap;
};

static void heap_help(const void *ctx)
{
	(void)ctx;
	printf("usage: cprof heap -p PID [-d DURATION] [--heap-rate SIZE] [--index TYPE] [--debug N] "
	       "[--keep | --stop] [--source SOURCE] [-o FILE] [--format FORMAT] [--top N] [--json] "
	       "[-q]\n"
	       "\n"
	       "Sample the allocations of process PID while it runs, as Go's runtime does (one\n"
	       "sample per SIZE bytes allocated on average), and write Go's heap profile:\n"
	       "alloc_objects, alloc_space, inuse_objects, inuse_space, unbiased with Go's\n"
	       "scaleHeapSample. Loads cprof-agent.so into the process; its hooks go when the\n"
	       "window ends (and by themselves within 1 s if cprof dies). Ctrl-C stops early\n"
	       "and still writes the profile.\n"
	       "\n"
	       "  -p, --pid PID            process to profile\n"
	       "  -d, --duration DURATION  how long to sample, e.g. 500ms, 30s, 1m30s (default 30s)\n"
	       "      --heap-rate SIZE     mean bytes between samples: 512KiB, 64k, 4096\n"
	       "                           (default 512KiB, Go's MemProfileRate; 1: every one;\n"
	       "                           --rate is its old name, deprecated)\n"
	       "      --index TYPE         sample type pprof shows first: inuse_space (default),\n"
	       "                           inuse_objects, alloc_space or alloc_objects\n"
	       "      --debug N            1: Go's text heap profile (to stdout without -o); 0:\n"
	       "                           the pprof profile (the default)\n"
	       "      --keep               go on sampling in the background after the profile is\n"
	       "                           written; a later 'cprof heap -p PID' (no -d) returns\n"
	       "                           the profile since sampling began (Go's always-on heap\n"
	       "                           profile)\n"
	       "      --stop               end the background sampling of --keep (hooks removed)\n"
	       "      --source SOURCE      auto (default): jemalloc's own heap profiler when the\n"
	       "                           target's jemalloc runs it (MALLOC_CONF=prof:true) and\n"
	       "                           no -d, --heap-rate or --keep is given, else hooks; jemalloc:\n"
	       "                           its profile since the program started, no hooks, no\n"
	       "                           window; hooks: cprof's sampling hooks\n"
	       "  -o, --output FILE        where to write, - for stdout (default heap.pb.gz;\n"
	       "                           a view or text without -o goes to stdout)\n"
	       OPTIONS_OUTPUT_HELP
	       "  -q, --quiet              no progress or summary on stderr\n"
	       "  -h, --help               show this help\n" OPTIONS_EXIT_HELP);
}

static int heap_option(int c, const char *arg, void *ctx)
{
	struct heap_run *a = ctx;
	int r;

	switch (c) {
	case 'd':
		a->duration_given = true;
		return option_duration(CMD, "duration", arg, &a->duration_ns);
	case 'K':
		a->keep = true;
		return 0;
	case 'S':
		a->stop = true;
		return 0;
	case 's':
		if (!strcmp(arg, "auto") || !strcmp(arg, "jemalloc") || !strcmp(arg, "hooks")) {
			a->source = arg[0] == 'a' ? HEAP_SOURCE_AUTO
				    : arg[0] == 'j' ? HEAP_SOURCE_JEMALLOC : HEAP_SOURCE_HOOKS;
			return 0;
		}
		return report_usage(CMD, "invalid source '%s': expected auto, jemalloc or hooks",
				    arg);
	case 'r':
		option_deprecated(CMD, "--rate", "--heap-rate");
		/* fall through */
	case 'R':
		a->rate_given = true;
		r = parse_size(arg, &a->rate);
		if (r < 0 || a->rate == 0 || a->rate > CPROF_WIRE_RATE_MAX)
			return report_usage(CMD, "invalid --heap-rate '%s': expected a size from 1 "
					    "to 1TiB, like 512KiB, 64k or 4096", arg);
		return 0;
	case 'I':
		for (size_t i = 0; i < ARRAY_SIZE(indexes); i++)
			if (!strcmp(arg, indexes[i])) {
				a->index = indexes[i];
				return 0;
			}
		return report_usage(CMD, "invalid index '%s': expected inuse_space, inuse_objects, "
				    "alloc_space or alloc_objects", arg);
	case 'D':
		return option_debug(CMD, arg, 1, &a->common);
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct heap_run *a)
{
	static const struct option longopts[] = {
		{ "duration", required_argument, NULL, 'd' },
		{ "heap-rate", required_argument, NULL, 'R' },
		{ "rate", required_argument, NULL, 'r' }, /* its old name */
		{ "index", required_argument, NULL, 'I' },
		{ "debug", required_argument, NULL, 'D' },
		{ "keep", no_argument, NULL, 'K' },
		{ "stop", no_argument, NULL, 'S' },
		{ "source", required_argument, NULL, 's' },
		{ "output", required_argument, NULL, 'o' },
		{}
	};
	int r;

	r = options_parse(CMD, argc, argv, ":p:d:o:qh", longopts, &a->common, heap_option, heap_help, a);
	if (r)
		return r;
	if (a->keep && a->stop)
		return report_usage(CMD, "--keep and --stop do not go together");
	if (a->source == HEAP_SOURCE_JEMALLOC &&
	    (a->duration_given || a->rate_given || a->keep || a->stop))
		return report_usage(CMD, "--source jemalloc reads jemalloc's own profile: -d, "
				    "--heap-rate, --keep and --stop are the hooks'");
	return option_output(CMD, &a->common);
}

static void hooks_summary(const struct heap_run *a, const struct run *run)
{
	const struct agent_profiler *ap = profiler_agent(run->p);
	const struct window_result *w = agent_profiler_window(ap);
	const struct heap *h = agent_profiler_heap(ap);
	const struct heap_stats *st = heap_stats(h);
	char window[32];

	format_duration(w->window_ns, window, sizeof(window));
	report_note("wrote %s: %llu %s (%llu freed) at rate %llu %s in a %s window",
		    output_name(&run->out), (unsigned long long)st->allocs,
		    plural(st->allocs, "sample", "samples"), (unsigned long long)st->frees,
		    (unsigned long long)a->rate, plural(a->rate, "byte", "bytes"), window);
	if (w->counters.lost_allocs)
		report_warning("%llu sampled %s not recorded (the agent's ring was full): "
			       "alloc figures are the recorded %llu scaled by %.3f; a larger --heap-rate "
			       "records them all", (unsigned long long)w->counters.lost_allocs,
			       plural(w->counters.lost_allocs, "allocation", "allocations"),
			       (unsigned long long)st->allocs, heap_alloc_factor(h));
	if (w->live_error && heap_inuse_factor(h) == 0.0)
		report_warning("inuse not measured: the agent's live set could not be read (%s) and "
			       "%llu %s lost", strerror(-w->live_error),
			       (unsigned long long)w->counters.lost,
			       plural(w->counters.lost, "record was", "records were"));
	else if (w->live_error)
		report_note("inuse from the records, the agent's live set could not be read (%s)",
			    strerror(-w->live_error));
	if (st->untracked)
		report_warning("%llu sampled %s could not be followed to their free (the "
			       "agent's table was full): %s as in use",
			       (unsigned long long)st->untracked,
			       plural(st->untracked, "block", "blocks"),
			       plural(st->untracked, "it counts", "they count"));
	if (st->allocs && st->unwound * 100 < st->allocs * 90)
		report_warning("only %llu of %llu allocation %s unwound into the program",
			       (unsigned long long)st->unwound, (unsigned long long)st->allocs,
			       plural(st->allocs, "stack", "stacks"));
}

/* The background session's profile since sampling began, as pprof. */
static int keep_encode(struct heap_run *a, const char *index, char **ret, size_t *ret_len)
{
	struct profile *p = NULL;
	uint8_t *buf;
	int r;

	r = agent_profiler_build_now(a->ap, CPROF_EVENTS_HEAP, index, &p);
	if (r == 0)
		r = pprof_encode_gzip(p, &buf, ret_len);
	if (r == 0)
		*ret = (char *)buf;
	profile_free(p);
	return r;
}

/* A "profile INDEX DEBUG" request of a later run (heap-keep.h). */
/* Go's debug=1 text of the background session, into memory. */
static int keep_render_text(struct heap_run *a, char **ret, size_t *ret_len)
{
	FILE *f = open_memstream(ret, ret_len);
	int r;

	if (!f)
		return -errno;
	r = heap_write_text(agent_profiler_heap(a->ap), f);
	if (fclose(f) != 0 && r == 0)
		r = -EIO;
	return r;
}

static int keep_render(void *ctx, const char *index, int debug, char **ret, size_t *ret_len)
{
	struct heap_run *a = ctx;

	if (debug == 1) {
		int r = agent_profiler_take_live(a->ap);

		return r < 0 ? r : keep_render_text(a, ret, ret_len);
	}
	for (size_t i = 0; i < ARRAY_SIZE(indexes); i++)
		if (!strcmp(index, indexes[i]))
			return keep_encode(a, indexes[i], ret, ret_len);
	return -EINVAL;
}

/*
 * An allocator inside the executable (linked statically, or under a prefix
 * of its own) is called directly, through no GOT slot the agent could
 * patch: say so and which, rather than write an empty profile.
 */
static int preflight_allocator(const struct target *t)
{
	struct heap_allocator a;

	if (!heap_allocator_unhookable(t->pid, &a))
		return 0;
	if (!strcmp(a.symbol, "malloc") && !strcmp(a.name, "its own malloc"))
		report_error("cannot profile the heap of pid %d (%s): its executable defines malloc "
			     "itself", t->pid, t->comm);
	else
		report_error("cannot profile the heap of pid %d (%s): %s is linked into its "
			     "executable (it defines %s)", t->pid, t->comm, a.name, a.symbol);
	report_hint("cprof heap hooks allocator calls through GOT slots, and the executable's own "
		    "calls to %s go through none; profile a build that uses %s as a shared library "
		    "(or LD_PRELOADs it)", a.symbol,
		    strcmp(a.name, "its own malloc") ? a.name : "the C library's malloc or an allocator");
	return EXIT_TARGET;
}

/* A background session answers, jemalloc's own profiler is the source, or
 * the allocator cannot be hooked. */
static int check(void *ctx, struct run *run)
{
	struct heap_run *a = ctx;
	int code;

	if (a->source == HEAP_SOURCE_JEMALLOC) {
		a->jemalloc = true;
		code = heap_jemalloc_check(&run->target);
		return code ? code : RUN_GO_ON;
	}
	code = keep_ask(&run->target, &a->common, a->index, a->stop, a->duration_given || a->keep);
	if (code >= 0)
		return code;
	if (a->source == HEAP_SOURCE_AUTO && !a->duration_given && !a->rate_given && !a->keep &&
	    heap_jemalloc_auto(&run->target)) {
		a->jemalloc = true;
		return RUN_GO_ON;
	}
	code = preflight_allocator(&run->target);
	return code ? code : RUN_GO_ON;
}

static int open_profiler(void *ctx, struct run *run)
{
	struct heap_run *a = ctx;
	struct agent_profiler_opts ao = {
		.pid = run->target.pid,
		.events = CPROF_EVENTS_HEAP,
		.rates[CPROF_KIND_HEAP] = a->rate,
		.duration_ns = a->duration_ns,
		.heap_index = a->index,
		.keep = a->keep,
		.command_line = run->command_line,
	};

	if (!a->jemalloc)
		return agent_open(run, &ao);
	report_note("reading jemalloc's own heap profile of pid %d (%s): no hooks, no window; "
		    "what it sampled since the program started", run->target.pid,
		    a->source == HEAP_SOURCE_JEMALLOC
			    ? "--source jemalloc"
			    : "its MALLOC_CONF turns the profiler on; --source hooks samples "
			      "with cprof's hooks instead");
	return agent_open_jemalloc(run, a->index);
}

static void ended(const void *ctx, const struct run *run)
{
	const struct heap_run *a = ctx;

	if (!a->jemalloc)
		agent_window_report(agent_profiler_window(profiler_agent(run->p)), &run->target);
}

static void summary(const void *ctx, const struct run *run)
{
	const struct heap_run *a = ctx;

	if (a->jemalloc)
		heap_jemalloc_summary(run);
	else
		hooks_summary(a, run);
}

/* --keep's child: serves on once the profile is written, else gives up. */
static int keep_after(struct heap_run *a, struct run *run, int code)
{
	struct agent_profiler *ap = run->p ? profiler_agent(run->p) : NULL;

	/* No session: interrupted before the agent was loaded, nothing to keep. */
	if (!ap || !agent_profiler_kept(ap))
		return keep_give_up(a->keep_lfd, a->keep_code_fd, code, NULL);
	if (!run->written || agent_profiler_window(ap)->target_exited)
		return keep_give_up(a->keep_lfd, a->keep_code_fd, code, ap);
	a->ap = ap;
	return keep_go_on(a->keep_lfd, a->keep_code_fd, code, ap, &run->target, keep_render, a,
			  output_name(&run->out));
}

static const struct run_ops heap_ops = {
	.command = CMD,
	.attach = "load the agent into",
	.verb = "profiling",
	.check = check,
	.open = open_profiler,
	.counts = { "sample", "samples" },
	.ended = ended,
	.summary = summary,
};

int cmd_heap(int argc, char **argv)
{
	struct heap_run a = { .duration_ns = 30ULL * 1000000000ULL, .rate = DEFAULT_RATE,
			      .index = "inuse_space", .keep_lfd = -1, .keep_code_fd = -1 };
	struct run run;
	int code = parse_args(argc, argv, &a);

	if (code)
		return code < 0 ? EXIT_OK : code;
	code = run_prepare(&heap_ops, &a, &run, &a.common, a.duration_ns, argc, argv);
	if (code != RUN_GO_ON)
		return code;
	/*
	 * --keep: the session goes on in a child, a daemon once the first
	 * profile is written; this process waits for its word and leaves the
	 * output to it.
	 */
	if (a.keep) {
		code = keep_start(&run.target, &a.keep_lfd, &a.keep_code_fd);
		if (code >= 0) {
			output_forget(&run.out);
			return code;
		}
	}
	if (a.jemalloc)
		run.duration_ns = 0; /* a dump: no window */
	code = run_profile(&heap_ops, &a, &run);
	if (a.keep)
		code = keep_after(&a, &run, code);
	run_release(&run);
	return code;
}
