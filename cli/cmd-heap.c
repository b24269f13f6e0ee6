/*
 * cprof heap: Go's heap profile of a running process. Options and the
 * report; the run is collector.c's, --keep's background session
 * heap-keep.c's, and the profile is built in lib/heap/.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector.h"
#include "commands.h"
#include "heap-jemalloc.h"
#include "heap-keep.h"
#include "heap/allocator.h"
#include "heap/heap.h"
#include "options.h"
#include "pprof/pprof.h"
#include "report.h"
#include "util/parse.h"
#include "util/util.h"

#define CMD "heap"
#define DEFAULT_RATE (512u << 10) /* Go's MemProfileRate */
/* op_check()'s word to cmd_heap(): --source auto found jemalloc's profiler on. */
#define USE_JEMALLOC 1000

static const char *const indexes[] = { "inuse_space", "inuse_objects", "alloc_space",
				       "alloc_objects" };

struct heap_run {
	struct common_opts common;
	uint64_t duration_ns;
	uint64_t rate;
	const char *index;
	bool duration_given, rate_given, keep, stop;
	enum heap_source source;
	struct heap *heap;
	struct channel_handlers handlers;
	/* --keep: the child's socket and pipe to the foreground (-1: none),
	 * and what its profiles since sampling began need. */
	int keep_lfd, keep_code_fd;
	struct channel *ch;
	pid_t pid;
	uint64_t start_realtime_ns, start_ns;
	char command_line[1024];
};

static void heap_help(void)
{
	printf("usage: cprof heap -p PID [-d DURATION] [--rate SIZE] [--index TYPE] [--debug N] "
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
	       "      --rate SIZE          mean bytes between samples: 512KiB, 64k, 4096\n"
	       "                           (default 512KiB, Go's MemProfileRate; 1: every one)\n"
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
	       "                           no -d, --rate or --keep is given, else hooks; jemalloc:\n"
	       "                           its profile since the program started, no hooks, no\n"
	       "                           window; hooks: cprof's sampling hooks\n"
	       "  -o, --output FILE        where to write, - for stdout (default heap.pb.gz;\n"
	       "                           a view or text without -o goes to stdout)\n"
	       OPTIONS_OUTPUT_HELP
	       "  -q, --quiet              no progress or summary on stderr\n"
	       "  -h, --help               show this help\n");
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
	case 'R':
		a->rate_given = true;
		r = parse_size(arg, &a->rate);
		if (r < 0 || a->rate == 0 || a->rate > CPROF_WIRE_RATE_MAX)
			return report_usage(CMD, "invalid rate '%s': expected a size from 1 to 1TiB, "
					    "like 512KiB, 64k or 4096", arg);
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
		{ "pid", required_argument, NULL, 'p' },
		{ "duration", required_argument, NULL, 'd' },
		{ "rate", required_argument, NULL, 'R' },
		{ "index", required_argument, NULL, 'I' },
		{ "debug", required_argument, NULL, 'D' },
		{ "keep", no_argument, NULL, 'K' },
		{ "stop", no_argument, NULL, 'S' },
		{ "source", required_argument, NULL, 's' },
		{ "output", required_argument, NULL, 'o' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	int r;

	r = options_parse(CMD, argc, argv, ":p:d:o:qh", longopts, &a->common, heap_option, a);
	if (r)
		return r;
	if (a->common.help) {
		heap_help();
		return -1;
	}
	if (a->keep && a->stop)
		return report_usage(CMD, "--keep and --stop do not go together");
	if (a->source == HEAP_SOURCE_JEMALLOC &&
	    (a->duration_given || a->rate_given || a->keep || a->stop))
		return report_usage(CMD, "--source jemalloc reads jemalloc's own profile: -d, "
				    "--rate, --keep and --stop are the hooks'");
	return option_output(CMD, &a->common);
}

static int on_alloc(const struct cprof_wire_alloc *r, void *arg)
{
	return heap_add_alloc(arg, r);
}

static int on_free(const struct cprof_wire_free *r, void *arg)
{
	return heap_add_free(arg, r);
}

static int on_live(const struct cprof_wire_live *e, size_t n, void *arg)
{
	return heap_add_live(arg, e, n);
}

static int op_write_text(const void *ctx, int debug, FILE *f)
{
	const struct heap_run *a = ctx;

	(void)debug;
	return heap_write_text(a->heap, f);
}

static void op_summary(const void *ctx, const struct collection *run)
{
	const struct heap_run *a = ctx;
	const struct window_result *w = &run->w;
	const struct heap *h = a->heap;
	const struct heap_stats *st = heap_stats(h);
	char window[32];

	format_duration(w->window_ns, window, sizeof(window));
	report_note("wrote %s: %llu %s (%llu freed) at rate %llu %s in a %s window",
		    output_name(&run->out), (unsigned long long)st->allocs,
		    plural(st->allocs, "sample", "samples"), (unsigned long long)st->frees,
		    (unsigned long long)a->rate, plural(a->rate, "byte", "bytes"), window);
	if (w->counters.lost_allocs)
		report_warning("%llu sampled %s not recorded (the agent's ring was full): "
			       "alloc figures are the recorded %llu scaled by %.3f; a larger --rate "
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

/* What is in use now: one fresh snapshot of the live set. */
static int keep_take_live(struct heap_run *a)
{
	struct window_result w = { 0 };
	struct channel_counters c;
	int r;

	heap_reset_live(a->heap);
	r = agent_window_live(a->ch, &a->handlers, &w, a->pid);
	channel_counters(a->ch, &c);
	heap_set_lost(a->heap, c.lost_allocs, c.lost);
	return r;
}

/* The background session's profile since sampling began, as pprof. */
static int keep_encode(struct heap_run *a, const char *index, char **ret, size_t *ret_len)
{
	struct channel_counters c;
	struct profile *p = NULL;
	uint8_t *buf;
	int r;

	r = heap_build(a->heap, index, a->command_line, (int64_t)a->start_realtime_ns,
		       (int64_t)(now_monotonic_ns() - a->start_ns), &p);
	channel_counters(a->ch, &c);
	if (r == 0)
		r = agent_note_lost(&c, p);
	if (r == 0)
		r = pprof_encode_gzip(p, &buf, ret_len);
	if (r == 0)
		*ret = (char *)buf;
	profile_free(p);
	return r;
}

/* A "profile INDEX DEBUG" request of a later run (heap-keep.h). */
static int keep_render(void *ctx, const char *index, int debug, char **ret, size_t *ret_len)
{
	static const struct collector_ops text = { .write_text = op_write_text };
	struct heap_run *a = ctx;
	int r = keep_take_live(a);

	if (r < 0)
		return r;
	if (debug == 1)
		return collector_render_text(&text, a, 1, ret, ret_len);
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
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/exe", t->pid);
	if (heap_allocator_inspect(path, &a) < 0 || a.hookable)
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

/* A background session answers, or the allocator cannot be hooked. */
static int op_check(void *ctx, struct collection *run)
{
	struct heap_run *a = ctx;
	int code = keep_ask(&run->target, &a->common, a->index, a->stop,
			    a->duration_given || a->keep);

	if (code >= 0)
		return code;
	if (a->source == HEAP_SOURCE_AUTO && !a->duration_given && !a->rate_given && !a->keep &&
	    heap_jemalloc_auto(&run->target))
		return USE_JEMALLOC;
	code = preflight_allocator(&run->target);
	return code ? code : COLLECTOR_GO_ON;
}

/* --keep: the rest happens in a child; the foreground waits for its word. */
static int op_prepare(void *ctx, struct collection *run)
{
	struct heap_run *a = ctx;
	int code;

	if (!a->keep)
		return COLLECTOR_GO_ON;
	code = keep_start(&run->target, &a->keep_lfd, &a->keep_code_fd);
	return code >= 0 ? code : COLLECTOR_GO_ON;
}

static int op_start(void *ctx, struct collection *run, struct channel_handlers *h)
{
	struct heap_run *a = ctx;
	struct heap_opts hopts = {
		.sym = run->al.sym,
		.unw = run->al.unw,
		.rate = a->rate,
		/* Without rules every sample carries its stack copy (cprof(1)). */
		.put_rule_arg = agent_rules_channel(&run->al),
	};
	int r;

	hopts.put_rule = hopts.put_rule_arg ? agent_put_rule : NULL;
	r = heap_new(&a->heap, &hopts);
	if (r < 0)
		return r;
	a->handlers = (struct channel_handlers){ .alloc = on_alloc, .free = on_free,
						 .live = on_live, .arg = a->heap };
	*h = a->handlers;
	return 0;
}

static int op_window(void *ctx, struct collection *run, const struct channel_handlers *h)
{
	struct heap_run *a = ctx;
	int r;

	a->start_ns = now_monotonic_ns();
	if (a->keep)
		r = agent_window_keep(run->al.ch, &run->target, run->duration_ns, h, "samples",
				      &run->w);
	else
		r = agent_window(run->al.ch, &run->target, run->duration_ns, h, "samples",
				 &run->w);
	heap_set_lost(a->heap, run->w.counters.lost_allocs, run->w.counters.lost);
	return r;
}

static int op_build(void *ctx, const struct collection *run, const char *command_line,
		    struct profile **ret)
{
	struct heap_run *a = ctx;

	return heap_build(a->heap, a->index, command_line, (int64_t)run->w.start_realtime_ns,
			  (int64_t)run->w.window_ns, ret);
}

static uint64_t op_count(const void *ctx)
{
	const struct heap_run *a = ctx;

	return heap_stats(a->heap)->allocs;
}

/* --keep's child: serves on once the profile is written, else gives up. */
static int op_finish(void *ctx, struct collection *run, int code, int argc, char **argv)
{
	struct heap_run *a = ctx;

	if (a->keep_code_fd < 0)
		return code;
	/* No channel: interrupted before the agent was loaded, nothing to keep. */
	if (!run->written || !run->al.ch || run->w.target_exited)
		return keep_give_up(a->keep_lfd, a->keep_code_fd, code, run->al.ch);
	command_line_join(argc, argv, a->command_line, sizeof(a->command_line));
	a->ch = run->al.ch;
	a->pid = run->target.pid;
	a->start_realtime_ns = run->w.start_realtime_ns;
	return keep_go_on(a->keep_lfd, a->keep_code_fd, code, run->al.ch, &run->target,
			  &a->handlers, keep_render, a, output_name(&run->out));
}

static const struct collector_ops heap_ops = {
	.command = CMD,
	.attach = "load the agent into",
	.events = CPROF_EVENTS_HEAP,
	.records = "samples",
	.check = op_check,
	.prepare = op_prepare,
	.start = op_start,
	.window = op_window,
	.build = op_build,
	.write_text = op_write_text,
	.summary = op_summary,
	.count = op_count,
	.finish = op_finish,
};

int cmd_heap(int argc, char **argv)
{
	struct heap_run a = { .duration_ns = 30ULL * 1000000000ULL, .rate = DEFAULT_RATE,
			      .index = "inuse_space", .keep_lfd = -1, .keep_code_fd = -1 };
	int code = parse_args(argc, argv, &a);

	if (code)
		return code < 0 ? EXIT_OK : code;
	if (a.source != HEAP_SOURCE_JEMALLOC)
		code = collector_run(&heap_ops, &a, &a.common, a.duration_ns, a.rate, argc, argv);
	heap_free(a.heap);
	if (a.source == HEAP_SOURCE_JEMALLOC || code == USE_JEMALLOC) {
		struct heap_jemalloc_run j = { .index = a.index,
					       .required = a.source == HEAP_SOURCE_JEMALLOC };

		code = collector_run(&heap_jemalloc_ops, &j, &a.common, 0, 0, argc, argv);
	}
	return code;
}
