/* cprof threads: a snapshot of what every thread is doing. Options and the
 * report; the run is collector.c's, the work in lib/threads/ (collect.c,
 * write.c). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector.h"
#include "commands.h"
#include "options.h"
#include "report.h"
#include "threads/threads.h"
#include "util/util.h"

#define CMD "threads"

struct threads_run {
	struct common_opts common;
	struct threads_snapshot *s;
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
	       "      --debug N            1: stacks with counts, Go's debug=1 text; 2: one block\n"
	       "                           per thread, Go's debug=2 (to stdout without -o);\n"
	       "                           0: the pprof profile, threads/count (the default)\n"
	       "  -o, --output FILE        where to write, - for stdout (default threads.pb.gz;\n"
	       "                           a view or text without -o goes to stdout)\n"
	       OPTIONS_OUTPUT_HELP
	       "  -q, --quiet              no summary on stderr\n"
	       "  -h, --help               show this help\n");
}

static int threads_option(int c, const char *arg, void *ctx)
{
	struct threads_run *a = ctx;

	return c == 'D' ? option_debug(CMD, arg, 2, &a->common) : 0;
}

static int parse_args(int argc, char **argv, struct threads_run *a)
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

	r = options_parse(CMD, argc, argv, ":p:o:qh", longopts, &a->common, threads_option, a);
	if (r)
		return r;
	if (a->common.help) {
		threads_help();
		return -1;
	}
	return option_output(CMD, &a->common);
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

static int op_take(void *ctx, struct collection *run)
{
	struct threads_run *a = ctx;
	char why[1024];
	int r = threads_snapshot_take(&a->s, run->target.pid, why, sizeof(why));

	if (r < 0)
		return snapshot_error(r, run->target.pid, why);
	run->pause_ns = (int64_t)a->s->pause_ns;
	return 0;
}

static int op_build(void *ctx, const struct collection *run, const char *command_line,
		    struct profile **ret)
{
	struct threads_run *a = ctx;

	(void)run;
	return threads_build_profile(a->s, command_line, ret);
}

static int op_write_text(const void *ctx, int debug, FILE *f)
{
	const struct threads_run *a = ctx;

	return debug == 1 ? threads_write_debug1(a->s, f) : threads_write_debug2(a->s, f);
}

static void op_summary(const void *ctx, const struct collection *run)
{
	const struct threads_run *a = ctx;

	if (strcmp(a->common.output, "-"))
		report_note("wrote %s: %zu %s, paused %.3f ms", output_name(&run->out),
			    a->s->nstopped, plural(a->s->nstopped, "thread", "threads"),
			    (double)a->s->pause_ns / 1e6);
	/* Go's text has no profile for collector_run() to look at. */
	if (a->common.debug)
		report_unsymbolized_program(a->s->sym);
}

static uint64_t op_count(const void *ctx)
{
	const struct threads_run *a = ctx;

	return a->s->nstopped;
}

static const struct collector_ops threads_ops = {
	.command = CMD,
	.attach = "stop the threads of",
	.take = op_take,
	.build = op_build,
	.write_text = op_write_text,
	.summary = op_summary,
	.count = op_count,
};

int cmd_threads(int argc, char **argv)
{
	struct threads_run a = { 0 };
	int code = parse_args(argc, argv, &a);

	if (code)
		return code < 0 ? EXIT_OK : code;
	code = collector_run(&threads_ops, &a, &a.common, 0, 0, argc, argv);
	threads_snapshot_free(a.s);
	return code;
}
