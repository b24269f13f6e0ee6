/* cprof threads: a snapshot of what every thread is doing. Options and the
 * report; the run is run.c's, the work in lib/threads/ (collect.c,
 * write.c). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "options.h"
#include "profiler/profiler.h"
#include "report.h"
#include "run.h"
#include "threads/threads.h"
#include "util/util.h"

#define CMD "threads"

struct threads_run {
	struct common_opts common;
};

static void threads_help(const void *ctx)
{
	(void)ctx;
	printf("usage: cprof threads -p PID[,PID...] [--children] [--cgroup PATH] [--unit NAME] "
	       "[--debug 0|1|2] [-o FILE] [--format FORMAT] [--top N] [--json] [-q]\n"
	       "\n"
	       "Stop every thread of process PID at the same moment, copy its registers and\n"
	       "stack, let it go, then show what each thread was doing: Go's goroutine\n"
	       "profile for native threads. The pause is measured and shown.\n"
	       "\n"
	       OPTIONS_SET_HELP("look at")
	       ", and --debug's text heads\n"
	       "                           each process's threads\n"
	       "      --debug N            1: stacks with counts, Go's debug=1 text; 2: one block\n"
	       "                           per thread, Go's debug=2 (to stdout without -o);\n"
	       "                           0: the pprof profile, threads/count (the default)\n"
	       "  -o, --output FILE        where to write, - for stdout (default threads.pb.gz;\n"
	       "                           a view or text without -o goes to stdout)\n"
	       OPTIONS_OUTPUT_HELP
	       "  -q, --quiet              no summary on stderr\n"
	       "  -h, --help               show this help\n" OPTIONS_EXIT_HELP);
}

static int threads_option(int c, const char *arg, void *ctx)
{
	struct threads_run *a = ctx;

	return c == 'D' ? option_debug(CMD, arg, 2, &a->common) : 0;
}

static int parse_args(int argc, char **argv, struct threads_run *a)
{
	static const struct option longopts[] = {
		{ "debug", required_argument, NULL, 'D' },
		{ "output", required_argument, NULL, 'o' },
		{}
	};
	int r;

	r = options_parse(CMD, argc, argv, ":p:o:qh", longopts, &a->common, threads_option,
			  threads_help, a);
	if (r)
		return r;
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

static int open_profiler(void *ctx, struct run *run)
{
	char why[1024];
	int r;

	(void)ctx;
	r = profiler_new_threads(&run->p, run->target.pid, NULL, run->command_line);
	if (r < 0) {
		report_error("cannot look at pid %d: %s", run->target.pid, strerror(-r));
		return EXIT_FAIL;
	}
	r = profiler_start(run->p, why, sizeof(why));
	return r < 0 ? snapshot_error(r, run->target.pid, why) : 0;
}

static int open_member(void *ctx, const struct run *run, pid_t pid, struct profiler **ret,
		       char *err, size_t errlen)
{
	(void)ctx;
	(void)err;
	(void)errlen;
	return profiler_new_threads(ret, pid, NULL, run->command_line);
}

static void summary(const void *ctx, const struct run *run)
{
	const struct threads_run *a = ctx;
	const struct threads_snapshot *s = profiler_threads_snapshot(run->p);

	if (strcmp(a->common.output, "-"))
		report_note("wrote %s: %zu %s, paused %.3f ms", output_name(&run->out),
			    s->nstopped, plural(s->nstopped, "thread", "threads"),
			    (double)s->pause_ns / 1e6);
}

static const struct run_ops threads_ops = {
	.command = CMD,
	.attach = "stop the threads of",
	.open = open_profiler,
	.open_member = open_member,
	.counts = { "thread", "threads" },
	.summary = summary,
};

int cmd_threads(int argc, char **argv)
{
	struct threads_run a = { 0 };
	int code = parse_args(argc, argv, &a);

	if (code)
		return code < 0 ? EXIT_OK : code;
	return run_command(&threads_ops, &a, &a.common, 0, argc, argv);
}
