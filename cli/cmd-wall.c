/* cprof wall: options, its profiler opened, the report (cli/run.c runs it).
 * The work is in lib/wall/wall-profiler.c. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "interrupt.h"
#include "options.h"
#include "output.h"
#include "preflight.h"
#include "report.h"
#include "profiler/profiler.h"
#include "run.h"
#include "target/target.h"
#include "util/parse.h"
#include "util/util.h"
#include "wall/wall-profiler.h"

#define CMD "wall"

struct wall_args {
	struct common_opts common;
	struct sampling_args s;
};

static void wall_help(const void *ctx)
{
	(void)ctx;
	printf("usage: cprof wall -p PID[,PID...] [--children] [--cgroup PATH] [--unit NAME] [-d DURATION] "
	       "[-F HZ] [-o FILE] [--format FORMAT] [--top N] [--json] [-q]\n"
	       "\n"
	       "Account for every nanosecond of every thread of process PID, on the CPU\n"
	       "and off it (running, runnable, sleeping in a call, disk, stopped), and\n"
	       "write a gzipped pprof profile (samples/count, wall/nanoseconds) labelled\n"
	       "with thread_id, thread_name, state and syscall. No signal is sent and no\n"
	       "thread is stopped. Ctrl-C stops early and still writes the profile.\n"
	       "\n"
	       OPTIONS_SET_HELP("profile")
", sampled per thread; one\n"
	       "                           that joins the set in the window is taken then\n"
	       "  -d, --duration DURATION  how long to sample, e.g. 500ms, 30s, 1m30s (default 30s)\n"
	       "  -F, --frequency HZ       looks at every thread per second, and CPU samples per\n"
	       "                           second of CPU time, 1-10000, as cpu's (default 100)\n"
	       "  -o, --output FILE        where to write, - for stdout (default wall.pb.gz;\n"
	       "                           a view without -o goes to stdout)\n"
	       OPTIONS_OUTPUT_HELP
	       "  -q, --quiet              no progress or summary on stderr\n"
	       "  -h, --help               show this help\n" OPTIONS_EXIT_HELP);
}

static int parse_args(int argc, char **argv, struct wall_args *a)
{
	*a = (struct wall_args){ 0 };
	return options_parse_sampling(CMD, argc, argv, NULL, &a->common, &a->s, NULL, wall_help,
				      a);
}

static void summary(const void *ctx, const struct run *run)
{
	const struct wall_profiler_stats *st = profiler_wall_stats(run->p);
	const struct output *out = &run->out;
	const struct wall_args *a = ctx;
	char window[32];
	uint64_t looked = st->off_stacks + st->off_reused + st->off_unknown;

	format_duration(st->window_ns, window, sizeof(window));
	report_note("wrote %s: %llu %s over %.2fs of thread time in a %s window (%d Hz): "
		    "%.2fs running, %.2fs runnable, %.2fs off the CPU; symbolized in %.0f ms",
		    output_name(out), (unsigned long long)st->threads,
		    plural(st->threads, "thread", "threads"), (double)st->accounted_ns / 1e9,
		    window, a->s.hz, (double)st->running_ns / 1e9, (double)st->runnable_ns / 1e9,
		    (double)st->off_ns / 1e9, (double)st->symbolize_ns / 1e6);
	report_note("read %.1f kB of stacks and samples from pid %d (%.0f kB/s): %llu sleeping "
		    "%s taken, %llu %s on a stack taken before",
		    (double)st->bytes_read / 1e3, a->common.pid,
		    st->window_ns ? (double)st->bytes_read / 1e3 / ((double)st->window_ns / 1e9) : 0,
		    (unsigned long long)st->off_stacks, plural(st->off_stacks, "stack", "stacks"),
		    (unsigned long long)st->off_reused,
		    plural(st->off_reused, "interval", "intervals"));
	if (st->stacks_refused)
		report_warning("no stacks for the time off the CPU: reading the threads' system "
			       "calls and stacks was refused (%s); run as root, or as the target's "
			       "user with kernel.yama.ptrace_scope = 0", strerror(-st->stacks_refused));
	if (st->perf_refused)
		report_warning("no stacks for the running time: %s", st->perf_error);
	else if (st->perf_per_thread)
		report_note("the CPU samples came from events on the target's threads, which make "
			    "each of its context switches dearer while attached; events on the "
			    "CPUs, which do not, need root or CAP_PERFMON (or "
			    "kernel.perf_event_paranoid <= 0)");
	if (st->split == WALL_SPLIT_TOO_MANY_SWITCHES)
		report_note("the target switched %llu times a second: too often for the kernel's "
			    "switch records to be cheap, so its waits for a CPU are shared between the "
			    "stack a thread ran on and the one it slept on by estimate "
			    "(cprof-wall(1))", (unsigned long long)st->switch_rate);
	else if (st->split != WALL_SPLIT_EXACT && !st->perf_refused)
		report_note("waits for a CPU are shared between the stack a thread ran on and the "
			    "one it slept on by estimate: %s", wall_split_reason(st->split));
	if (st->lost)
		report_warning("%llu perf %s lost (the buffers overflowed): some running stacks "
			       "are missing, the times are still the kernel's; try "
			       "a lower -F", (unsigned long long)st->lost,
			       plural(st->lost, "record", "records"));
	if (looked && st->off_unknown * 20 > looked)
		report_warning("%llu of %llu off-CPU %s have no stack (the thread woke "
			       "before its stack was read): they show as [off-CPU: stack not seen]",
			       (unsigned long long)st->off_unknown, (unsigned long long)looked,
			       plural(looked, "interval", "intervals"));
}

static void progress(const void *ctx, const struct run *run, char *buf, size_t size)
{
	unsigned long long n = profiler_wall_stats(run->p)->threads;

	(void)ctx;
	snprintf(buf, size, "%llu %s", n, plural(n, "thread", "threads"));
}

static int open_profiler(void *ctx, struct run *run)
{
	const struct wall_args *a = ctx;
	struct wall_profiler_opts po = {
		.pid = run->target.pid,
		.hz = a->s.hz,
		.command_line = run->command_line,
	};
	char why[1024];
	int r;

	preflight_raise_nofile();
	r = profiler_new_wall(&run->p, &po, why, sizeof(why));
	return run_start_sampler(run, r, why);
}

static int open_member(void *ctx, const struct run *run, pid_t pid, struct profiler **ret,
		       char *err, size_t errlen)
{
	const struct wall_args *a = ctx;
	struct wall_profiler_opts po = {
		.pid = pid,
		.hz = a->s.hz,
		.command_line = run->command_line,
		.per_thread = true,
	};

	return profiler_new_wall(ret, &po, err, errlen);
}

static const struct run_ops wall_ops = {
	.command = CMD,
	.verb = "sampling",
	.open = open_profiler,
	.open_member = open_member,
	.whole_host = true,
	.counts = { "tick", "ticks" },
	.progress = progress,
	.summary = summary,
};

int cmd_wall(int argc, char **argv)
{
	struct wall_args a;
	int code = parse_args(argc, argv, &a);

	if (code)
		return code < 0 ? EXIT_OK : code;
	return run_command(&wall_ops, &a, &a.common, a.s.duration_ns, argc, argv);
}
