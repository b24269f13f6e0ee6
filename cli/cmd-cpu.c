/* cprof cpu: options, preflight, the sampling loop, the report. The work is
 * in lib/cpu/cpu-profiler.c. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "cpu/cpu-profiler.h"
#include "interrupt.h"
#include "options.h"
#include "output.h"
#include "preflight.h"
#include "report.h"
#include "sampler.h"
#include "target/target.h"
#include "util/parse.h"
#include "util/util.h"

#define CMD "cpu"

struct cpu_args {
	struct common_opts common;
	uint64_t duration_ns;
	unsigned hz;
	const char *mode;
	bool kernel;
};

static void cpu_help(void)
{
	printf("usage: cprof cpu -p PID [-d DURATION] [-F HZ] [-o FILE] [--mode MODE] [--kernel] "
	       "[--format FORMAT] [--top N] [--json] [-q]\n"
	       "\n"
	       "Sample the CPU use of every thread of process PID, threads started later\n"
	       "included, and write a gzipped pprof profile (samples/count, cpu/nanoseconds).\n"
	       "Ctrl-C stops early and still writes the profile.\n"
	       "\n"
	       "  -p, --pid PID            process to profile\n"
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
	       "  -h, --help               show this help\n");
}

static int cpu_option(int c, const char *arg, void *ctx)
{
	struct cpu_args *a = ctx;
	int64_t v;
	int r;

	switch (c) {
	case 'd':
		return option_duration(CMD, "duration", arg, &a->duration_ns);
	case 'F':
		r = option_int(CMD, "frequency", arg, 1, 10000, &v);
		if (r == 0)
			a->hz = (unsigned)v;
		return r;
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
		{ "pid", required_argument, NULL, 'p' },
		{ "duration", required_argument, NULL, 'd' },
		{ "frequency", required_argument, NULL, 'F' },
		{ "output", required_argument, NULL, 'o' },
		{ "mode", required_argument, NULL, 'M' },
		{ "kernel", no_argument, NULL, 'K' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	int r;

	*a = (struct cpu_args){ .duration_ns = 30ULL * 1000000000ULL, .hz = 100, .mode = "auto" };
	r = options_parse(CMD, argc, argv, ":p:d:F:o:qh", longopts, &a->common, cpu_option, a);
	if (r)
		return r;
	if (a->common.help) {
		cpu_help();
		return -1;
	}
	return option_output(CMD, &a->common);
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

static void summary(const void *profiler, const void *args, const struct output *out)
{
	const struct cpu_profiler_stats *st = cpu_profiler_stats(profiler);
	const struct cpu_args *a = args;
	char window[32];

	format_duration(st->window_ns, window, sizeof(window));
	report_note("wrote %s: %llu %s, %.2fs of CPU in a %s window (%d Hz); "
		    "symbolized in %.0f ms",
		    output_name(out), (unsigned long long)st->samples,
		    plural(st->samples, "sample", "samples"), (double)st->sampled_ns / 1e9,
		    window, a->hz, (double)st->symbolize_ns / 1e6);
	if (st->lost)
		report_warning("%llu %s lost: the sample buffers overflowed; try a lower -F",
			       (unsigned long long)st->lost, plural(st->lost, "sample", "samples"));
	if (st->samples && st->unwound * 100 < st->samples * 90)
		report_warning("only %llu of %llu %s unwound past their first frame: "
			       "missing CFI (.eh_frame) or unmapped code",
			       (unsigned long long)st->unwound, (unsigned long long)st->samples,
			       plural(st->samples, "stack", "stacks"));
}

SAMPLER_DEFINE_CALLS(cpu_profiler)

static void op_facts(const void *p, struct sampler_facts *ret)
{
	const struct cpu_profiler_stats *st = cpu_profiler_stats(p);

	*ret = (struct sampler_facts){ .window_ns = st->window_ns, .samples = st->samples,
				       .lost = st->lost, .target_exited = st->target_exited };
}

static void op_progress(const void *p, char *buf, size_t size)
{
	unsigned long long n = cpu_profiler_stats(p)->samples;

	snprintf(buf, size, "%llu %s", n, plural(n, "sample", "samples"));
}

static const struct sampler_ops cpu_ops = {
	.command = CMD,
	SAMPLER_CALLS(cpu_profiler),
	.facts = op_facts,
	.progress = op_progress,
	.summary = summary,
};

int cmd_cpu(int argc, char **argv)
{
	struct cpu_profiler_opts popts;
	struct cpu_profiler *p = NULL;
	struct cpu_args a;
	struct output out;
	struct target t;
	char why[1024], cmdline[1024];
	int r, code;

	code = parse_args(argc, argv, &a);
	if (code)
		return code < 0 ? EXIT_OK : code;
	code = preflight_command(&a.common, a.common.format == VIEW_PPROF, &t, &out);
	if (code)
		return code;
	if (a.kernel && !perf_kernel_samples_allowed()) {
		report_kernel_refused();
		code = EXIT_PERMISSION;
		goto out_abort;
	}
	preflight_raise_nofile();
	interrupt_install();

	command_line_join(argc, argv, cmdline, sizeof(cmdline));
	popts = (struct cpu_profiler_opts){
		.pid = a.common.pid,
		.hz = a.hz,
		.scope = choose_scope(a.mode),
		.kernel = perf_kernel_samples_allowed(),
		.kernel_stacks = a.kernel,
		.command_line = cmdline,
	};
	r = cpu_profiler_new(&p, &popts, why, sizeof(why));
	if (r < 0) {
		report_error_text(NULL, why);
		code = sampler_setup_exit_code(r);
		goto out_abort;
	}
	code = sampler_run(&cpu_ops, p, &a, &a.common, a.duration_ns, &t, &out);
	cpu_profiler_free(p);
	return code;

out_abort:
	output_abort(&out);
	cpu_profiler_free(p);
	return code;
}
