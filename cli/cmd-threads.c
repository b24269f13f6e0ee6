/* cprof threads: a snapshot of what every thread is doing. The work is in
 * lib/threads/ (collect.c, write.c). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "interrupt.h"
#include "options.h"
#include "output.h"
#include "preflight.h"
#include "report.h"
#include "runbook.h"
#include "threads/threads.h"
#include "util/util.h"

#define CMD "threads"

struct threads_args {
	struct common_opts common;
	int debug; /* -1: not given */
};

static void threads_help(void)
{
	printf("usage: cprof threads -p PID [--debug 0|1|2] [-o FILE] [--format FORMAT] "
	       "[--top N] [--json] [-q]\n"
	       "\n"
	       "Stop every thread of process PID at the same moment, copy its registers and\n"
	       "stack, let it go, then show what each thread was doing: Go's goroutine\n"
	       "profile for native threads. The pause is measured and shown.\n"
	       "\n"
	       "  -p, --pid PID            process to look at\n"
	       "      --debug N            0: gzipped pprof (threads/count); 1: stacks with\n"
	       "                           counts, Go's debug=1 text; 2: one block per thread,\n"
	       "                           Go's debug=2 (default 1 on stdout; 0 when -o is\n"
	       "                           given)\n"
	       "  -o, --output FILE        where to write, - for stdout (default threads.pb.gz\n"
	       "                           for --debug 0, stdout for text and views)\n"
	       OPTIONS_RUNBOOK_HELP
	       "  -q, --quiet              no summary on stderr\n"
	       "  -h, --help               show this help\n");
}

static int threads_option(int c, const char *arg, void *ctx)
{
	struct threads_args *a = ctx;
	int64_t v;
	int r = 0;

	if (c == 'D') {
		r = option_int(CMD, "debug level", arg, 0, 2, &v);
		if (r == 0)
			a->debug = (int)v;
	}
	return r;
}

static int parse_args(int argc, char **argv, struct threads_args *a)
{
	static const struct option longopts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "debug", required_argument, NULL, 'D' },
		{ "output", required_argument, NULL, 'o' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	int r;

	*a = (struct threads_args){ .debug = -1 };
	r = options_parse(CMD, argc, argv, ":p:o:qh", longopts, &a->common, threads_option, a);
	if (r)
		return r;
	if (a->common.help) {
		threads_help();
		return -1;
	}
	return option_debug_output(CMD, &a->common, &a->debug, "threads.pb.gz");
}

static int snapshot_error(int r, pid_t pid, const char *why)
{
	/* ptrace refuses a process on its way out with EPERM, not ESRCH. */
	if ((r == -EPERM || r == -EACCES) && !target_alive(pid)) {
		report_error("pid %d exited during the snapshot", pid);
		return EXIT_TARGET;
	}
	report_error_text(NULL, why);
	if (r == -ESRCH)
		return EXIT_TARGET;
	if (r == -EPERM || r == -EACCES) {
		report_hint("ptrace needs root or CAP_SYS_PTRACE, or the same user with "
			    "kernel.yama.ptrace_scope 0; is pid %d traced already?", pid);
		return EXIT_PERMISSION;
	}
	return EXIT_FAIL;
}

/* Renders the text views into memory, so that the output is all or nothing. */
static int render_text(const struct threads_snapshot *s, int debug, char **ret, size_t *ret_len)
{
	FILE *f = open_memstream(ret, ret_len);
	int r;

	if (!f)
		return -errno;
	r = debug == 1 ? threads_write_debug1(s, f) : threads_write_debug2(s, f);
	if (fclose(f) != 0 && r == 0)
		r = -EIO;
	return r;
}

static int runbook_end(const struct threads_args *a, const struct threads_snapshot *s,
		       const struct profile *profile)
{
	struct runbook_facts f = {
		.command = CMD,
		.pid = a->common.pid,
		.output = a->common.output,
		.samples = s->nstopped,
		.pause_ns = (int64_t)s->pause_ns,
		.profile = profile,
	};

	return runbook_report(&a->common, &f) < 0 ? EXIT_FAIL : EXIT_OK;
}

int cmd_threads(int argc, char **argv)
{
	struct threads_snapshot *s = NULL;
	struct profile *profile = NULL;
	struct threads_args a;
	struct output out;
	struct target t;
	char why[1024], cmdline[1024], title[256];
	char *text = NULL;
	size_t text_len = 0;
	int r, code;

	code = parse_args(argc, argv, &a);
	if (code)
		return code < 0 ? EXIT_OK : code;
	report_set_quiet(a.common.quiet);
	code = preflight_target(a.common.pid, &t);
	if (code)
		return code;
	a.common.pid = t.pid; /* the process, when a thread's id was given */
	code = preflight_not_traced(&t, "stop the threads of");
	if (code)
		return code;
	r = output_prepare(&out, a.common.output, a.debug == 0 && a.common.format == VIEW_PPROF,
			   why, sizeof(why));
	if (r < 0) {
		report_error_text(NULL, why);
		return EXIT_OUTPUT;
	}
	/* SIGINT/SIGTERM must not kill us while threads are stopped. */
	interrupt_install();
	r = threads_snapshot_take(&s, a.common.pid, why, sizeof(why));
	if (r < 0) {
		code = snapshot_error(r, a.common.pid, why);
		goto out_abort;
	}
	/* --top and --json read the profile, also beside a text view. */
	if (a.debug == 0 || a.common.top || a.common.json) {
		command_line_join(argc, argv, cmdline, sizeof(cmdline));
		r = threads_build_profile(s, cmdline, &profile);
		if (r < 0)
			goto out_write;
	}
	if (a.debug == 0) {
		runbook_title(CMD, a.common.pid, profile, title, sizeof(title));
		r = output_commit_view(&out, profile, a.common.format, title);
	} else {
		r = render_text(s, a.debug, &text, &text_len);
		if (r == 0)
			r = output_commit_bytes(&out, text, text_len);
	}
out_write:
	if (r < 0) {
		code = output_report_failure(&out, r);
		goto out_abort;
	}
	if (strcmp(a.common.output, "-"))
		report_note("wrote %s: %zu %s, paused %.3f ms", output_name(&out), s->nstopped,
			    plural(s->nstopped, "thread", "threads"), (double)s->pause_ns / 1e6);
	if (profile)
		report_unsymbolized(profile);
	code = runbook_end(&a, s, profile);
out_abort:
	output_abort(&out);
	free(text);
	profile_free(profile);
	threads_snapshot_free(s);
	return code;
}
