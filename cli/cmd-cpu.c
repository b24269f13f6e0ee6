/* cprof cpu: options, its profiler opened, the report (cli/run.c runs it).
 * The work is in lib/cpu/cpu-profiler.c. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "cpu/cpu-profiler.h"
#include "profiler/profiler.h"
#include "interrupt.h"
#include "options.h"
#include "output.h"
#include "preflight.h"
#include "report.h"
#include "run.h"
#include "target/target.h"
#include "util/parse.h"
#include "util/util.h"

#define CMD "cpu"

struct cpu_args {
	struct common_opts common;
	struct sampling_args s;
	const char *mode;
	bool kernel;
};

static void cpu_help(const void *ctx)
{
	(void)ctx;
	printf("usage: cprof cpu -p PID[,PID...] [--children] [--cgroup PATH] [--unit NAME] [-d DURATION] "
	       "[-F HZ] [-o FILE] [--mode MODE] [--kernel] [--format FORMAT] [--top N] [--json] "
	       "[-q]\n"
	       "\n"
	       "Sample the CPU use of every thread of process PID, threads started later\n"
	       "included, and write a gzipped pprof profile (samples/count, cpu/nanoseconds).\n"
	       "Ctrl-C stops early and still writes the profile.\n"
	       "\n"
	       OPTIONS_SET_HELP("profile")
", sampled per thread; one\n"
	       "                           that joins the set in the window is taken then\n"
	       "  -d, --duration DURATION  how long to sample, e.g. 500ms, 30s, 1m30s (default 30s)\n"
	       "  -F, --frequency HZ       samples per second of CPU time, 1-10000 (default 100)\n"
	       "  -o, --output FILE        where to write, - for stdout (default cpu.pb.gz;\n"
	       "                           a view without -o goes to stdout)\n"
	       "      --mode MODE          auto, system or thread (default auto: system when\n"
	       "                           privileged, else thread)\n"
	       "      --kernel             add kernel frames (named from /proc/kallsyms) on top\n"
	       "                           of the user stacks; needs root or\n"
	       "                           kernel.perf_event_paranoid <= 1\n"
	       OPTIONS_OUTPUT_HELP
	       "  -q, --quiet              no progress or summary on stderr\n"
	       "  -h, --help               show this help\n" OPTIONS_EXIT_HELP);
}

static int cpu_option(int c, const char *arg, void *ctx)
{
	struct cpu_args *a = ctx;

	switch (c) {
	case 'M':
		if (strcmp(arg, "auto") && strcmp(arg, "system") && strcmp(arg, "thread"))
			return report_usage(CMD, "invalid mode '%s': expected auto, system or "
						 "thread", arg);
		a->mode = arg;
		return 0;
	case 'K':
		a->kernel = true;
		return 0;
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct cpu_args *a)
{
	static const struct option longopts[] = {
		{ "mode", required_argument, NULL, 'M' },
		{ "kernel", no_argument, NULL, 'K' },
		{}
	};

	*a = (struct cpu_args){ .mode = "auto" };
	return options_parse_sampling(CMD, argc, argv, longopts, &a->common, &a->s, cpu_option,
				      cpu_help, a);
}

static enum perf_scope choose_scope(const char *mode)
{
	if (!strcmp(mode, "system"))
		return PERF_SCOPE_SYSTEM;
	if (!strcmp(mode, "thread"))
		return PERF_SCOPE_THREAD;
	return perf_system_scope_allowed() ? PERF_SCOPE_SYSTEM : PERF_SCOPE_THREAD;
}

static void report_kernel_refused(void)
{
	int paranoid = -100;

	if (proc_sysctl_int("kernel/perf_event_paranoid", &paranoid) == 0)
		report_error("--kernel needs kernel samples, which kernel.perf_event_paranoid = %d "
			     "forbids to this user", paranoid);
	else
		report_error("--kernel needs kernel samples, which this user may not take");
	report_hint("run as root or with CAP_PERFMON, or `sysctl kernel.perf_event_paranoid=1`");
}

static void summary(const void *ctx, const struct run *run)
{
	const struct cpu_profiler_stats *st = profiler_cpu_stats(run->p);
	const struct cpu_args *a = ctx;
	char window[32];

	format_duration(st->window_ns, window, sizeof(window));
	report_note("wrote %s: %llu %s, %.2fs of CPU in a %s window (%d Hz); "
		    "symbolized in %.0f ms",
		    output_name(&run->out), (unsigned long long)st->samples,
		    plural(st->samples, "sample", "samples"), (double)st->cpu_ns / 1e9,
		    window, a->s.hz, (double)st->symbolize_ns / 1e6);
	/* A count of samples is not a clock: say when the two differ. */
	if (st->weighed && st->sampled_ns &&
	    fabs((double)st->clocks_ns / (double)st->sampled_ns - 1) > 0.01)
		report_note("the samples stood for %.2fs of CPU, the sampled threads' own clocks "
			    "say %.2fs (%+.1f%%): each thread's samples are weighed by its clock "
			    "(a sampling timer that fires late takes one sample for the periods "
			    "it missed)",
			    (double)st->sampled_ns / 1e9, (double)st->clocks_ns / 1e9,
			    100 * ((double)st->clocks_ns / (double)st->sampled_ns - 1));
	if (!st->weighed)
		report_note("CPU not weighed by the threads' own clocks (schedstat unreadable): "
			    "the samples' periods as they are");
	if (st->unsampled_ns)
		report_note("%.2fs of CPU in threads that ended between two samples: "
			    "[unsampled: short-lived threads]", (double)st->unsampled_ns / 1e9);
	if (st->lost)
		report_warning("%llu %s lost: the sample buffers overflowed; try a lower -F",
			       (unsigned long long)st->lost, plural(st->lost, "sample", "samples"));
	if (st->samples && st->unwound * 100 < st->samples * 90)
		report_warning("only %llu of %llu %s unwound past their first frame: "
			       "missing CFI (.eh_frame) or unmapped code",
			       (unsigned long long)st->unwound, (unsigned long long)st->samples,
			       plural(st->samples, "stack", "stacks"));
}

static struct cpu_profiler_opts profiler_opts(const struct cpu_args *a, const struct run *run,
					      pid_t pid)
{
	return (struct cpu_profiler_opts){
		.pid = pid,
		.hz = a->s.hz,
		/* A CPU's events of each process of a set would each take
		 * every process's samples: the set's are each thread's. */
		.scope = run->set ? PERF_SCOPE_THREAD : choose_scope(a->mode),
		.kernel = perf_kernel_samples_allowed(),
		.kernel_stacks = a->kernel,
		.command_line = run->command_line,
	};
}

static int open_profiler(void *ctx, struct run *run)
{
	struct cpu_args *a = ctx;
	struct cpu_profiler_opts po;
	char why[1024];
	int r;

	if (a->kernel && !perf_kernel_samples_allowed()) {
		report_kernel_refused();
		return EXIT_PERMISSION;
	}
	preflight_raise_nofile();
	po = profiler_opts(a, run, run->target.pid);
	r = profiler_new_cpu(&run->p, &po, why, sizeof(why));
	return run_start_sampler(run, r, why);
}

static int open_member(void *ctx, const struct run *run, pid_t pid, struct profiler **ret,
		       char *err, size_t errlen)
{
	struct cpu_profiler_opts po = profiler_opts(ctx, run, pid);

	return profiler_new_cpu(ret, &po, err, errlen);
}

static const struct run_ops cpu_ops = {
	.command = CMD,
	.verb = "sampling",
	.open = open_profiler,
	.open_member = open_member,
	.whole_host = true,
	.counts = { "sample", "samples" },
	.summary = summary,
};

int cmd_cpu(int argc, char **argv)
{
	struct cpu_args a;
	int code = parse_args(argc, argv, &a);

	if (code)
		return code < 0 ? EXIT_OK : code;
	return run_command(&cpu_ops, &a, &a.common, a.s.duration_ns, argc, argv);
}
