/*
 * cprof record: every kind of profile of one process in one window, into
 * one directory (cprof-record(1)). cpu and wall sample, the agent's four
 * kinds share one session (one injection, one heartbeat), and the threads
 * are snapshot at the window's start and at its end. A kind that is
 * refused does not stop the others: it is said on stderr and in the
 * manifest, and the exit code is EXIT_PARTIAL.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent-load.h"
#include "agent-window.h"
#include "agent/wire.h"
#include "commands.h"
#include "interrupt.h"
#include "options.h"
#include "preflight.h"
#include "profiler/kinds.h"
#include "record-dir.h"
#include "record.h"
#include "report.h"
#include "run.h"
#include "symbolize/symbolize.h"
#include "util/parse.h"
#include "util/util.h"

#define CMD "record"
#define HZ 100

/* Each kind's file; the threads' second snapshot is record's own kind. */
static const char *const kind_files[RK_N] = {
	[RK_CPU] = "cpu.pb.gz", [RK_WALL] = "wall.pb.gz", [RK_THREADS] = "threads-start.pb.gz",
	[RK_HEAP] = "heap.pb.gz", [RK_BLOCK] = "block.pb.gz", [RK_MUTEX] = "mutex.pb.gz",
	[RK_THREADCREATE] = "threadcreate.pb.gz", [RK_THREADS_END] = "threads-end.pb.gz",
};

static const char *record_kind_name(int k)
{
	return k == RK_THREADS_END ? "threads-end" : kind_name((enum kind)k);
}

struct record_args {
	struct common_opts common;
	uint64_t duration_ns, loop_ns;
	bool duration_given;
	int64_t keep_last;
	bool kinds[RK_N];
};

enum { OPT_LOOP = 256, OPT_KEEP_LAST };

static void record_help(const void *ctx)
{
	(void)ctx;
	printf("usage: cprof record -p PID [-d DURATION] [-o DIR] [--kinds LIST] "
	       "[--loop INTERVAL [--keep-last N]] [--json] [-q]\n"
	       "\n"
	       "Record every kind of profile of process PID in one window: cpu, wall, threads\n"
	       "(a snapshot at the window's start and one at its end), heap, block, mutex and\n"
	       "threadcreate (one agent session for the four). Writes DIR/KIND.pb.gz, the\n"
	       "thread dumps in Go's debug=2 text, summary.txt and manifest.json. A kind that\n"
	       "is refused does not stop the others: stderr and the manifest say why, and\n"
	       "the exit status is 5. Ctrl-C ends the window and still writes everything.\n"
	       "With --loop, window follows window, each in DIR/YYYYmmdd-HHMMSS/, and\n"
	       "-d is the whole run's length (default: until stopped or the process exits).\n"
	       "\n"
	       "  -p, --pid PID            process to profile\n"
	       "  -d, --duration DURATION  the window, e.g. 500ms, 30s, 1m30s (default 30s)\n"
	       "  -o, --output DIR         the directory to make (default\n"
	       "                           ./cprof-PID-YYYYmmdd-HHMMSS); never an existing one\n"
	       "  -k, --kinds LIST         comma-separated kinds (default: all of cpu, wall,\n"
	       "                           threads, heap, block, mutex, threadcreate)\n"
	       "      --loop INTERVAL      record window after window, each INTERVAL long, into\n"
	       "                           DIR/YYYYmmdd-HHMMSS/, until Ctrl-C, SIGTERM, the\n"
	       "                           process's exit or -d TOTAL (at least 1s)\n"
	       "      --keep-last N        with --loop: remove the oldest of this run's windows\n"
	       "                           beyond the last N\n"
	       "      --json               at the end, print the manifest to stdout (with\n"
	       "                           --loop: each window's, one line each)\n"
	       "  -q, --quiet              no progress or summary on stderr\n"
	       "  -h, --help               show this help\n" OPTIONS_EXIT_HELP);
}

static int parse_kinds(const char *arg, bool *kinds)
{
	char buf[256], *save = NULL, *k;

	snprintf(buf, sizeof(buf), "%s", arg);
	memset(kinds, 0, RK_N * sizeof(*kinds));
	for (k = strtok_r(buf, ",", &save); k; k = strtok_r(NULL, ",", &save)) {
		enum kind i = kind_by_name(k);

		if (i == KIND_N)
			return report_usage(CMD, "unknown kind '%s' in --kinds (cpu, wall, threads, "
					    "heap, block, mutex, threadcreate)", k);
		kinds[i] = true;
	}
	kinds[RK_THREADS_END] = kinds[RK_THREADS];
	for (int i = 0; i < RK_N; i++)
		if (kinds[i])
			return 0;
	return report_usage(CMD, "--kinds names no kind");
}

static int record_option(int c, const char *arg, void *ctx)
{
	struct record_args *a = ctx;

	switch (c) {
	case 'd':
		a->duration_given = true;
		return option_duration(CMD, "duration", arg, &a->duration_ns);
	case OPT_LOOP:
		return option_duration(CMD, "--loop interval", arg, &a->loop_ns);
	case OPT_KEEP_LAST:
		return option_int(CMD, "--keep-last", arg, 1, 1000000, &a->keep_last);
	case 'k':
		return parse_kinds(arg, a->kinds);
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct record_args *a)
{
	static const struct option longopts[] = {
		{ "duration", required_argument, NULL, 'd' },
		{ "output", required_argument, NULL, 'o' },
		{ "kinds", required_argument, NULL, 'k' },
		{ "loop", required_argument, NULL, OPT_LOOP },
		{ "keep-last", required_argument, NULL, OPT_KEEP_LAST },
		{}
	};
	int r;

	*a = (struct record_args){ .duration_ns = 30ULL * 1000000000ULL };
	for (int i = 0; i < RK_N; i++)
		a->kinds[i] = true;
	r = options_parse(CMD, argc, argv, ":p:d:o:k:qh", longopts, &a->common, record_option,
			  record_help, a);
	if (r)
		return r;
	if (a->common.output && !strcmp(a->common.output, "-"))
		return report_usage(CMD, "record writes a directory: -o - is not one");
	if (a->common.format_given || a->common.top || a->common.debug)
		return report_usage(CMD, "record writes a directory of pprof profiles: no --format, "
				    "--top or --debug (cprof view reads its files)");
	if (a->keep_last && !a->loop_ns)
		return report_usage(CMD, "--keep-last counts --loop's windows: give --loop INTERVAL");
	if (a->loop_ns && a->loop_ns < 1000000000ULL)
		return report_usage(CMD, "--loop's interval must be at least 1s (each window's "
				    "directory is named by the second it starts)");
	return 0;
}

static void refuse(struct record_entry *e, const char *fmt, const char *why)
{
	snprintf(e->refused, sizeof(e->refused), fmt, why);
	profiler_free(e->p);
	e->p = NULL;
}

/* Every kind asked for opened (lib/profiler/kinds.h): each entry its
 * profiler, or why it was refused. */
static void open_kinds(struct record *rec, const struct target *t)
{
	char agent[PATH_MAX], agent_why[1024] = "";
	struct kinds_opts ko = {
		.pid = t->pid, .comm = t->comm, .hz = HZ,
		.agent = { .rates = { [CPROF_KIND_HEAP] = 512u << 10,
				      [CPROF_KIND_BLOCK] = CPROF_WIRE_BLOCK_RATE_DEFAULT,
				      [CPROF_KIND_MUTEX] = CPROF_WIRE_MUTEX_RATE_DEFAULT },
			   .duration_ns = rec->duration_ns },
		.agent_why = agent_why, .command_line = rec->command_line, .sym = rec->sym,
	};
	struct kinds_opened k;
	int r;

	for (int i = 0; i < KIND_N; i++)
		ko.asked[i] = rec->e[i].asked;
	r = agent_path(agent, sizeof(agent), agent_why, sizeof(agent_why));
	agent_opts_fill(&ko.agent, r == 0 ? agent : NULL);
	preflight_raise_nofile();
	kinds_open(&ko, &k);
	for (int i = 0; i < KIND_N; i++) {
		rec->e[i].p = k.p[i];
		if (k.error[i])
			snprintf(rec->e[i].refused, sizeof(rec->e[i].refused), "%s", k.refused[i]);
	}
}

/* Each started in turn, the agent's first (its injection may take a
 * while): one that fails is said and dropped, the others go on. */
static void start_all(struct record *rec)
{
	static const int order[] = { RK_HEAP,	RK_BLOCK, RK_MUTEX, RK_THREADCREATE,
				     RK_CPU,	RK_WALL,  RK_THREADS };
	char why[2048], agent_why[2048] = "";

	for (size_t i = 0; i < ARRAY_SIZE(order); i++) {
		struct record_entry *e = &rec->e[order[i]];
		int r;

		if (!e->p)
			continue;
		/* Nothing new after a Ctrl-C. */
		if (interrupt_requested()) {
			refuse(e, "%s", "interrupted before it started");
			continue;
		}
		why[0] = '\0';
		r = profiler_start(e->p, why, sizeof(why));
		/* The agent's kinds share a session: the first says why. */
		if (r < 0 && kind_events((enum kind)order[i]) && agent_why[0])
			refuse(e, "%s", agent_why);
		else if (r == -ECANCELED)
			refuse(e, "%s", "interrupted before the agent was loaded");
		else if (r < 0)
			refuse(e, "%s", why[0] ? why : strerror(-r));
		if (r < 0 && kind_events((enum kind)order[i]) && !agent_why[0])
			snprintf(agent_why, sizeof(agent_why), "%s", e->refused);
		/* Gone before this kind began (an injection under load may
		 * outlast a short life): the run is as whole as the process
		 * let it be, as a window it ends early is. */
		if (r < 0 && r != -ECANCELED && !target_alive(rec->pid)) {
			snprintf(why, sizeof(why), "pid %d exited before it started", rec->pid);
			refuse(e, "%s", why);
			e->gone = true;
		}
	}
}

/* "7 kinds", and the loop's window. */
static void what(const void *arg, char *buf, size_t size)
{
	const struct record *rec = arg;
	int kinds = 0;

	for (int i = 0; i < RK_THREADS_END; i++)
		kinds += rec->e[i].p != NULL;
	if (rec->interval)
		snprintf(buf, size, "%d %s (window %u)", kinds,
			 plural((uint64_t)kinds, "kind", "kinds"), rec->interval);
	else
		snprintf(buf, size, "%d %s", kinds, plural((uint64_t)kinds, "kind", "kinds"));
}

/* The window for every profiler started, one that fails dropped (said
 * and refused) and the others kept; 0 or -errno (said here). */
static int window(struct record *rec, const struct target *t)
{
	int errors[RK_N] = { 0 }, kind[RK_N];
	struct run_window_opts o = { .target = t, .duration_ns = rec->duration_ns,
				     .verb = "recording", .what = what, .arg = rec,
				     .errors = errors };
	struct profiler *ps[RK_N];
	char err[1024] = "";
	uint64_t t0 = now_monotonic_ns();
	bool exited = false;
	size_t n = 0;
	int r;

	for (int i = 0; i < RK_THREADS_END; i++)
		if (rec->e[i].p) {
			kind[n] = i;
			ps[n++] = rec->e[i].p;
		}
	rec->start_realtime_ns = (int64_t)now_realtime_ns();
	r = n ? run_window(ps, n, &o, &exited, err, sizeof(err)) : 0;
	rec->window_ns = now_monotonic_ns() - t0;
	rec->target_exited = exited;
	rec->interrupted = interrupt_requested();
	for (size_t i = 0; i < n; i++)
		if (errors[i]) {
			report_warning("%s of pid %d failed during the window: %s; the other "
				       "kinds are written", rec->e[kind[i]].name, rec->pid,
				       strerror(-errors[i]));
			refuse(&rec->e[kind[i]], "failed during the window: %s",
			       strerror(-errors[i]));
		}
	if (r < 0)
		report_error("recording pid %d failed: %s", rec->pid, err[0] ? err : strerror(-r));
	return r;
}

/* The threads' second snapshot, once the window is over. */
static void threads_at_end(struct record *rec)
{
	struct record_entry *e = &rec->e[RK_THREADS_END];
	char why[1024] = "";
	int r;

	if (!e->asked)
		return;
	/* No process, no snapshot: nothing was refused (the window's line
	 * says the process exited), and the run is as whole as it could be. */
	if (rec->target_exited) {
		e->asked = false;
		return;
	}
	r = profiler_new_threads(&e->p, rec->pid, rec->sym, rec->command_line);
	if (r == 0)
		r = profiler_start(e->p, why, sizeof(why));
	if (r == 0)
		r = profiler_stop(e->p);
	if (r < 0)
		refuse(e, "%s", why[0] ? why : strerror(-r));
}

/* What the agent's session said of its window, once for its kinds. */
static void agent_window_said(const struct record *rec, const struct target *t)
{
	for (int k = 0; k < RK_N; k++)
		if (kind_events((enum kind)k) && rec->e[k].p) {
			agent_window_report_agent(agent_profiler_window(profiler_agent(rec->e[k].p)),
						  t);
			return;
		}
}

/* Go's debug=2 dump of a threads entry, beside its profile. */
static int write_dump(const struct record_dir *d, struct record_entry *e, int k)
{
	FILE *f = record_dir_open(d, k == RK_THREADS ? "threads-start.txt" : "threads-end.txt");
	int r;

	if (!f)
		return -errno;
	r = profiler_write_text(e->p, 2, f);
	if (fclose(f) != 0 && r == 0)
		r = -errno;
	return r;
}

/* Every kind taken: built and written into @d. */
static int write_all(struct record *rec, const struct record_dir *d)
{
	for (int k = 0; k < RK_N; k++) {
		struct record_entry *e = &rec->e[k];
		int r;

		if (!e->p)
			continue;
		profiler_facts(e->p, &e->facts);
		r = profiler_finish(e->p, &e->profile);
		if (r < 0) {
			refuse(e, "cannot build the profile: %s", strerror(-r));
			continue;
		}
		r = record_dir_write_profile(d, e->file, e->profile);
		if (r == 0 && (k == RK_THREADS || k == RK_THREADS_END))
			r = write_dump(d, e, k);
		if (r < 0)
			return r;
		e->written = true;
	}
	return 0;
}

static int write_text_file(const struct record_dir *d, const char *name,
			   int (*fn)(const struct record *, FILE *), const struct record *rec)
{
	FILE *f = record_dir_open(d, name);
	int r;

	if (!f)
		return -errno;
	r = fn(rec, f);
	if (fclose(f) != 0 && r == 0)
		r = -errno;
	return r;
}

/* What the exit code says: every kind asked written, some, or none. */
static int outcome(const struct record *rec)
{
	int asked = 0, written = 0;

	for (int k = 0; k < RK_N; k++) {
		asked += rec->e[k].asked && !rec->e[k].gone;
		written += rec->e[k].written;
	}
	record_report_refusals(rec);
	if (written == 0)
		return rec->target_exited ? EXIT_TARGET : EXIT_FAIL;
	return written == asked ? EXIT_OK : EXIT_PARTIAL;
}

int record_once(const struct record_opts *o, const struct target *t)
{
	struct record rec = { .pid = t->pid, .comm = t->comm, .exe = t->exe,
			      .command_line = o->command_line, .duration_ns = o->duration_ns,
			      .interval = o->interval };
	struct record_dir d;
	char why[PATH_MAX + 128];
	int r, code;

	interrupt_guard();
	for (int k = 0; k < RK_N; k++)
		rec.e[k] = (struct record_entry){ .name = record_kind_name(k), .file = kind_files[k],
						  .asked = o->kinds[k] };
	/* Decided writable before anything is touched. */
	r = record_dir_make(&d, o->dir, t->pid, why, sizeof(why));
	if (r < 0) {
		report_error("%s", why);
		return EXIT_OUTPUT;
	}
	rec.dir = d.final;
	/* One symbolizer for all: each file opened and each address looked
	 * up once, not once a kind, after the window. On failure each kind
	 * tries its own and says why. */
	if (symbolizer_new(&rec.sym, t->pid) < 0)
		rec.sym = NULL;
	open_kinds(&rec, t);
	start_all(&rec);
	r = window(&rec, t);
	threads_at_end(&rec);
	interrupt_target_released(rec.pid);
	run_say_ended(rec.pid, rec.target_exited);
	agent_window_said(&rec, t);
	if (r < 0) {
		/* Said by window(): nothing to write. */
		record_dir_abort(&d);
		code = EXIT_FAIL;
		goto out_free;
	}
	r = write_all(&rec, &d);
	code = outcome(&rec);
	rec.exit = code;
	if (r == 0)
		r = write_text_file(&d, "summary.txt", record_write_summary, &rec);
	if (r == 0)
		r = write_text_file(&d, "manifest.json", record_write_manifest, &rec);
	if (r == 0)
		r = record_dir_commit(&d);
	if (r < 0) {
		report_error("cannot write %s: %s", d.final, strerror(-r));
		record_dir_abort(&d);
		code = EXIT_OUTPUT;
	} else {
		report_note("wrote %s: read summary.txt first", d.final);
		if (o->json && record_write_manifest(&rec, stdout) < 0)
			code = EXIT_FAIL;
		if (o->json)
			report_json_printed();
	}
out_free:
	for (int k = 0; k < RK_N; k++) {
		profile_free(rec.e[k].profile);
		profiler_free(rec.e[k].p);
	}
	symbolizer_unref(rec.sym);
	return code;
}

int cmd_record(int argc, char **argv)
{
	struct record_args a;
	struct record_opts ro;
	struct target t;
	char command_line[1024];
	int code = parse_args(argc, argv, &a);

	if (code)
		return code < 0 ? EXIT_OK : code;
	report_set_quiet(a.common.quiet);
	command_line_join(argc, argv, command_line, sizeof(command_line));
	code = preflight_target(a.common.pid, &t);
	if (code)
		return code;
	if (a.kinds[RK_THREADS] || a.kinds[RK_HEAP] || a.kinds[RK_BLOCK] || a.kinds[RK_MUTEX] ||
	    a.kinds[RK_THREADCREATE]) {
		code = preflight_not_traced(&t, "snapshot or load the agent into");
		if (code)
			return code;
	}
	interrupt_install();
	ro = (struct record_opts){ .dir = a.common.output, .duration_ns = a.duration_ns,
				   .kinds = a.kinds, .command_line = command_line,
				   .json = a.common.json };
	if (!a.loop_ns)
		return record_once(&ro, &t);
	return record_loop(&ro, a.loop_ns, a.duration_given ? a.duration_ns : 0,
			   (unsigned)a.keep_last, &t);
}
