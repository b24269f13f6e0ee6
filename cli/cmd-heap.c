/*
 * cprof heap: Go's heap profile of a running process. Options, the agent's
 * window (agent-load.c, agent-window.c) and the report; the profile is
 * built in lib/heap/.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent-load.h"
#include "agent-window.h"
#include "commands.h"
#include "heap-keep.h"
#include "heap/allocator.h"
#include "heap/heap.h"
#include "pprof/pprof.h"
#include "interrupt.h"
#include "options.h"
#include "output.h"
#include "preflight.h"
#include "report.h"
#include "runbook.h"
#include "util/parse.h"
#include "util/util.h"

#define CMD "heap"
#define DEFAULT_RATE (512u << 10) /* Go's MemProfileRate */

static const char *const indexes[] = { "inuse_space", "inuse_objects", "alloc_space",
				       "alloc_objects" };

struct heap_args {
	struct common_opts common;
	uint64_t duration_ns;
	uint64_t rate;
	const char *index;
	int debug; /* -1: not given */
	bool duration_given, keep, stop;
};

static void heap_help(void)
{
	printf("usage: cprof heap -p PID [-d DURATION] [--rate SIZE] [--index TYPE] [--debug N] "
	       "[--keep | --stop] [-o FILE] [--format FORMAT] [--top N] [--json] [-q]\n"
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
	       "      --debug N            0: gzipped pprof (default with -o); 1: Go's text heap\n"
	       "                           profile (default without -o, to stdout)\n"
	       "      --keep               go on sampling in the background after the profile is\n"
	       "                           written; a later 'cprof heap -p PID' (no -d) returns\n"
	       "                           the profile since sampling began (Go's always-on heap\n"
	       "                           profile)\n"
	       "      --stop               end the background sampling of --keep (hooks removed)\n"
	       "  -o, --output FILE        where to write, - for stdout (default heap.pb.gz with\n"
	       "                           --debug 0, stdout for text and views)\n"
	       OPTIONS_RUNBOOK_HELP
	       "  -q, --quiet              no progress or summary on stderr\n"
	       "  -h, --help               show this help\n");
}

static int heap_option(int c, const char *arg, void *ctx)
{
	struct heap_args *a = ctx;
	int64_t v;
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
	case 'R':
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
		r = option_int(CMD, "debug level", arg, 0, 1, &v);
		if (r == 0)
			a->debug = (int)v;
		return r;
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct heap_args *a)
{
	static const struct option longopts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "duration", required_argument, NULL, 'd' },
		{ "rate", required_argument, NULL, 'R' },
		{ "index", required_argument, NULL, 'I' },
		{ "debug", required_argument, NULL, 'D' },
		{ "keep", no_argument, NULL, 'K' },
		{ "stop", no_argument, NULL, 'S' },
		{ "output", required_argument, NULL, 'o' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	int r;

	*a = (struct heap_args){ .duration_ns = 30ULL * 1000000000ULL, .rate = DEFAULT_RATE,
				 .index = "inuse_space", .debug = -1 };
	r = options_parse(CMD, argc, argv, ":p:d:o:qh", longopts, &a->common, heap_option, a);
	if (r)
		return r;
	if (a->common.help) {
		heap_help();
		return -1;
	}
	if (a->keep && a->stop)
		return report_usage(CMD, "--keep and --stop do not go together");
	return option_debug_output(CMD, &a->common, &a->debug, "heap.pb.gz");
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

static int render_text(struct heap *h, char **ret, size_t *ret_len)
{
	FILE *f = open_memstream(ret, ret_len);
	int r;

	if (!f)
		return -errno;
	r = heap_write_text(h, f);
	if (fclose(f) != 0 && r == 0)
		r = -EIO;
	return r;
}

static void summary(const struct heap_args *a, const struct output *out,
		    const struct window_result *w, const struct heap *h)
{
	const struct heap_stats *st = heap_stats(h);
	char window[32];

	format_duration(w->window_ns, window, sizeof(window));
	report_note("wrote %s: %llu %s (%llu freed) at rate %llu %s in a %s window",
		    output_name(out), (unsigned long long)st->allocs,
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

/* The background session's view of its profile (heap-keep.h). */
struct keep_ctx {
	struct heap *heap;
	struct channel *ch; /* its counters say what the ring lost since sampling began */
	const struct channel_handlers *handlers;
	pid_t pid;
	uint64_t start_realtime_ns, start_ns;
	const char *command_line;
};

/* What is in use now: one fresh snapshot of the live set. */
static int keep_take_live(struct keep_ctx *k)
{
	struct window_result w = { 0 };
	struct channel_counters c;
	int r;

	heap_reset_live(k->heap);
	r = agent_window_live(k->ch, k->handlers, &w, k->pid);
	channel_counters(k->ch, &c);
	heap_set_lost(k->heap, c.lost_allocs, c.lost);
	return r;
}

static int keep_render(void *arg, const char *index, int debug, char **ret, size_t *ret_len)
{
	struct keep_ctx *k = arg;
	struct profile *p = NULL;
	uint8_t *buf;
	int r;

	r = keep_take_live(k);
	if (r < 0)
		return r;
	if (debug == 1)
		return render_text(k->heap, ret, ret_len);
	for (size_t i = 0; i < ARRAY_SIZE(indexes); i++)
		if (!strcmp(index, indexes[i])) {
			struct channel_counters c;

			r = heap_build(k->heap, indexes[i], k->command_line,
				       (int64_t)k->start_realtime_ns,
				       (int64_t)(now_monotonic_ns() - k->start_ns), &p);
			channel_counters(k->ch, &c);
			if (r == 0)
				r = agent_note_lost(&c, p);
			if (r == 0)
				r = pprof_encode_gzip(p, &buf, ret_len);
			if (r == 0)
				*ret = (char *)buf;
			profile_free(p);
			return r;
		}
	return -EINVAL;
}

/* A view of the pprof bytes the background session sent. */
static int commit_view_of(struct output *out, const char *body, size_t len,
			  const struct heap_args *a, const struct target *t)
{
	struct profile *p = NULL;
	char title[256];
	int r = pprof_decode((const uint8_t *)body, len, &p);

	if (r == 0) {
		runbook_title(CMD, t->pid, p, title, sizeof(title));
		r = output_commit_view(out, p, a->common.format, title);
	}
	profile_free(p);
	return r;
}

/* --stop, or a profile from the background session of --keep. -1: none runs. */
static int from_background(const struct heap_args *a, const struct target *t)
{
	struct output out;
	char req[64], why[1024], *body = NULL;
	size_t len = 0;
	int fd = keep_connect(t), r, code;

	if (fd < 0) {
		if (!a->stop)
			return -1;
		report_error("no background heap sampling runs for pid %d (%s)", t->pid, t->comm);
		report_hint("'cprof heap -p %d --keep' starts one", t->pid);
		return EXIT_FAIL;
	}
	if (a->stop) {
		r = keep_request(fd, "stop\n", &body, &len);
		close(fd);
		free(body);
		if (r < 0) {
			report_error("the background sampling of pid %d did not answer", t->pid);
			return EXIT_FAIL;
		}
		report_note("stopped the background heap sampling of pid %d: its hooks are gone",
			    t->pid);
		return EXIT_OK;
	}
	if (a->duration_given || a->keep) {
		close(fd);
		report_error("background heap sampling (--keep) already runs for pid %d (%s)",
			     t->pid, t->comm);
		report_hint("'cprof heap -p %d' (no -d) returns its profile; --stop ends it",
			    t->pid);
		return EXIT_TARGET;
	}
	r = output_prepare(&out, a->common.output, a->debug == 0 && a->common.format == VIEW_PPROF,
			   why, sizeof(why));
	if (r < 0) {
		close(fd);
		report_error_text(NULL, why);
		return EXIT_OUTPUT;
	}
	snprintf(req, sizeof(req), "profile %s %d\n", a->index, a->debug);
	r = keep_request(fd, req, &body, &len);
	close(fd);
	if (r == 0 && a->debug == 0 && a->common.format != VIEW_PPROF)
		r = commit_view_of(&out, body, len, a, t);
	else if (r == 0)
		r = output_commit_bytes(&out, body, len);
	if (r < 0 && out.write_failed) {
		code = output_report_failure(&out, r);
	} else if (r < 0) {
		report_error("cannot get the profile of pid %d from its background sampling: %s",
			     t->pid, r == -EPROTO && body ? body : strerror(-r));
		output_abort(&out);
		code = EXIT_FAIL;
	} else {
		report_note("wrote %s: the heap profile of pid %d since background sampling began",
			    output_name(&out), t->pid);
		code = EXIT_OK;
	}
	free(body);
	return code;
}

/* keep_bind() failed with @r: nothing was touched yet. An exit code. */
static int keep_bind_error(const struct target *t, int r)
{
	char name[128];

	keep_socket_label(t, name, sizeof(name));
	if (r == -EADDRINUSE) {
		report_error("cannot start background heap sampling of pid %d (%s): its socket "
			     "name '%s' is taken", t->pid, t->comm, name);
		report_hint("another 'cprof heap -p %d --keep' may be writing its first profile: "
			    "try again once it has; else another process holds that abstract unix "
			    "socket ('ss -xa' lists it)", t->pid);
		return EXIT_TARGET;
	}
	report_error("cannot start background heap sampling of pid %d (%s): socket '%s': %s",
		     t->pid, t->comm, name, strerror(-r));
	return EXIT_FAIL;
}

static volatile sig_atomic_t keep_child;

static void forward_signal(int sig)
{
	if (keep_child > 0)
		kill(keep_child, sig);
}

/*
 * --keep: the work goes on in a child that stays as the agent's peer; it
 * inherits @lfd (keep_bind()), closed here. This process waits for the
 * child's word that the first profile is written and the socket listens
 * (a byte: its exit code) and exits with it; Ctrl-C is passed on. Returns
 * -1 in the child (go on, tell *@ret_fd when done), an exit code here.
 */
static int keep_fork(int lfd, int *ret_fd)
{
	struct sigaction sa;
	unsigned char code;
	int fds[2];
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC) < 0) {
		report_error("cannot start the background sampler: %s", strerror(errno));
		close(lfd);
		return EXIT_FAIL;
	}
	pid = fork();
	if (pid < 0) {
		report_error("cannot fork the background sampler: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		close(lfd);
		return EXIT_FAIL;
	}
	if (pid == 0) {
		close(fds[0]);
		setsid(); /* the terminal's Ctrl-C reaches it through the parent only */
		*ret_fd = fds[1];
		return -1;
	}
	close(fds[1]);
	close(lfd);
	keep_child = pid;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = forward_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	for (;;) {
		ssize_t n = read(fds[0], &code, 1);

		if (n == 1)
			return code;
		if (n == 0 || errno != EINTR)
			return EXIT_FAIL; /* it died: it said why on stderr */
	}
}

/*
 * In the child, once the first profile is written and @lfd listens: say
 * so, go quiet, serve. 0 when the session ran; -EPIPE when the foreground
 * was gone before it could be told (nobody knows we run: the caller ends
 * the session instead).
 */
static int keep_serve_on(int lfd, struct channel *ch, const struct target *t,
			 const struct channel_handlers *h, struct keep_ctx *k, int code_fd,
			 int code)
{
	unsigned char c = (unsigned char)code;
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	report_note("sampling goes on in the background (pid %d): 'cprof heap -p %d' returns the "
		    "profile since it began, 'cprof heap -p %d --stop' ends it", getpid(), t->pid,
		    t->pid);
	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		close(null);
	}
	if (write(code_fd, &c, 1) != 1) {
		close(code_fd);
		close(lfd);
		return -EPIPE;
	}
	close(code_fd);
	interrupt_reset();
	keep_serve(lfd, ch, t, h, keep_render, k);
	return 0;
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

int cmd_heap(int argc, char **argv)
{
	struct channel_handlers handlers = { .alloc = on_alloc, .free = on_free, .live = on_live };
	struct agent_load al = { .fd = -1 };
	struct profile *profile = NULL;
	struct channel *ch = NULL;
	struct heap *h = NULL;
	struct window_result w;
	struct heap_opts hopts;
	struct heap_args a;
	struct output out;
	struct target t;
	char why[1024], cmdline[1024], title[256], *text = NULL;
	size_t text_len = 0;
	int r, code, keep_fd = -1, keep_lfd = -1;
	struct keep_ctx keep = { 0 };

	code = parse_args(argc, argv, &a);
	if (code)
		return code < 0 ? EXIT_OK : code;
	report_set_quiet(a.common.quiet);
	code = preflight_target(a.common.pid, &t);
	if (code)
		return code;
	a.common.pid = t.pid; /* the process, when a thread's id was given */
	code = from_background(&a, &t);
	if (code >= 0)
		return code;
	code = preflight_not_traced(&t, "load the agent into");
	if (code)
		return code;
	code = preflight_allocator(&t);
	if (code)
		return code;
	r = output_prepare(&out, a.common.output, a.debug == 0 && a.common.format == VIEW_PPROF,
			   why, sizeof(why));
	if (r < 0) {
		report_error_text(NULL, why);
		return EXIT_OUTPUT;
	}
	if (a.keep) {
		/* The name is taken now, or never: not after the hooks went in
		 * and the foreground said all is well. */
		keep_lfd = keep_bind(&t);
		if (keep_lfd < 0) {
			output_abort(&out);
			return keep_bind_error(&t, keep_lfd);
		}
		code = keep_fork(keep_lfd, &keep_fd);
		if (code >= 0) {
			/* The foreground: the child wrote the profile, or failed
			 * or died (then a named temporary may be left). */
			output_abort(&out);
			return code;
		}
	}
	interrupt_install();
	code = agent_load(&al, &t, CPROF_EVENTS_HEAP, a.rate);
	if (code)
		goto out_abort;
	ch = al.ch;
	hopts = (struct heap_opts){ .sym = al.sym, .unw = al.unw, .rate = a.rate };
	/* Without rules every sample carries its stack copy (cprof-heap(1)). */
	hopts.put_rule_arg = agent_rules_channel(&al);
	hopts.put_rule = hopts.put_rule_arg ? agent_put_rule : NULL;
	r = heap_new(&h, &hopts);
	if (r < 0)
		goto out_fail;
	handlers.arg = h;
	keep.start_ns = now_monotonic_ns();
	r = a.keep ? agent_window_keep(ch, &t, a.duration_ns, &handlers, "samples", &w)
		   : agent_window(ch, &t, a.duration_ns, &handlers, "samples", &w);
	if (r < 0)
		goto out_fail;
	agent_window_report(&w, &t);
	heap_set_lost(h, w.counters.lost_allocs, w.counters.lost);
	/* --top and --json read the profile, also beside the text view. */
	if (a.debug == 0 || a.common.top || a.common.json) {
		command_line_join(argc, argv, cmdline, sizeof(cmdline));
		r = heap_build(h, a.index, cmdline, (int64_t)w.start_realtime_ns,
			       (int64_t)w.window_ns, &profile);
		if (r == 0)
			r = agent_note_lost(&w.counters, profile);
		if (r < 0)
			goto out_write;
	}
	if (a.debug == 0) {
		runbook_title(CMD, t.pid, profile, title, sizeof(title));
		r = output_commit_view(&out, profile, a.common.format, title);
	} else {
		r = render_text(h, &text, &text_len);
		if (r == 0)
			r = output_commit_bytes(&out, text, text_len);
	}
out_write:
	if (r < 0) {
		code = output_report_failure(&out, r);
		goto out_abort;
	}
	summary(&a, &out, &w, h);
	report_unsymbolized_program(al.sym);
	code = runbook_end_agent(CMD, &a.common, &w, &al, heap_stats(h)->allocs, profile);
	/* No channel: interrupted before the agent was loaded, nothing to keep. */
	if (a.keep && ch && !w.target_exited) {
		r = keep_listen(keep_lfd);
		if (r < 0) {
			char name[128];

			keep_socket_label(&t, name, sizeof(name));
			report_error("cannot start background heap sampling of pid %d (%s): listen "
				     "on '%s': %s", t.pid, t.comm, name, strerror(-r));
			report_hint("%s was written; the hooks are removed", output_name(&out));
			code = EXIT_FAIL;
			goto out_free;
		}
		command_line_join(argc, argv, cmdline, sizeof(cmdline));
		keep.heap = h;
		keep.ch = ch;
		keep.handlers = &handlers;
		keep.pid = t.pid;
		keep.start_realtime_ns = w.start_realtime_ns;
		keep.command_line = cmdline;
		if (keep_serve_on(keep_lfd, ch, &t, &handlers, &keep, keep_fd, code) < 0)
			keep_end(ch);
		keep_fd = -1;
		keep_lfd = -1;
	}
	goto out_free;
out_fail:
	report_error("profiling pid %d failed: %s", t.pid, strerror(-r));
	code = EXIT_FAIL;
out_abort:
	output_abort(&out);
out_free:
	if (keep_fd >= 0) {
		unsigned char c = (unsigned char)code;

		/* A --keep child that will not serve: on a failure the hooks go
		 * before the foreground exits with it (not a second later, when
		 * the agent's watchdog sees us gone). */
		if (code != EXIT_OK && ch)
			keep_end(ch);
		if (write(keep_fd, &c, 1) != 1) {
			/* The foreground is gone; nothing to tell. */
		}
		close(keep_fd);
	}
	if (keep_lfd >= 0)
		close(keep_lfd);
	free(text);
	profile_free(profile);
	heap_free(h);
	agent_load_release(&al);
	return code;
}
