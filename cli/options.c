#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "report.h"
#include "target/set.h"
#include "util/parse.h"
#include "util/util.h"

int option_pid(const char *cmd, const char *arg, pid_t *ret)
{
	int r = parse_pid(arg, ret);

	if (r == -ERANGE)
		return report_usage(cmd, "invalid pid '%s': out of range (1 to 4194304)", arg);
	/* `-p $(pidof NAME) -d 30s` with NAME not running. */
	if (r < 0 && arg[0] == '-')
		return report_usage_hint(cmd, "if the pid came from $(pidof NAME) or $(pgrep NAME), "
					      "it found no process: is NAME running?",
					 "invalid pid '%s': -p is followed by an option, not a pid",
					 arg);
	if (r < 0)
		return report_usage(cmd, "invalid pid '%s': not a number", arg);
	return 0;
}

/* The commands that take a set of processes (-p LIST, --children, --cgroup,
 * --unit). */
static bool takes_set(const char *cmd)
{
	return !strcmp(cmd, "cpu") || !strcmp(cmd, "wall") || !strcmp(cmd, "threads");
}

/* -p's list, for the command's life (one command a process). */
static pid_t *pid_list;

/* -p's one pid, or its list where it has several (`-p "$(pidof nginx)"`). */
static int option_pids(const char *cmd, const char *arg, struct common_opts *o)
{
	char why[256];
	int r;

	if (!arg[strcspn(arg, ", \t\n")])
		return option_pid(cmd, arg, &o->pid);
	free(pid_list);
	o->pids = pid_list = NULL;
	r = target_pids_parse(arg, &pid_list, &o->npids, why, sizeof(why));
	o->pids = pid_list;
	if (r == -ENOMEM)
		return report_usage(cmd, "out of memory");
	if (r < 0)
		return report_usage(cmd, "invalid pid list '%s': %s", arg, why);
	o->pid = o->pids[0];
	return 0;
}

bool options_set_given(const struct common_opts *o)
{
	return o->npids > 1 || o->children || o->cgroup || o->unit;
}

void option_deprecated(const char *cmd, const char *old, const char *now)
{
	report_warning("%s: %s is deprecated, and goes in a later release: it is %s, as serve "
		       "names it", cmd, old, now);
}

int option_duration(const char *cmd, const char *opt, const char *arg, uint64_t *ret_ns)
{
	uint64_t ns;
	int r = parse_duration(arg, &ns);

	if (r == -ERANGE || (r == 0 && ns > OPTION_MAX_DURATION_NS))
		return report_usage(cmd, "invalid %s '%s': longer than the limit of 24h", opt, arg);
	if (r < 0)
		return report_usage(cmd, "invalid %s '%s': expected a duration such as 500ms, 30s "
					 "or 1m30s (units ns, us, ms, s, m, h)", opt, arg);
	if (ns == 0)
		return report_usage(cmd, "invalid %s '%s': must be longer than zero", opt, arg);
	*ret_ns = ns;
	return 0;
}

int option_int(const char *cmd, const char *opt, const char *arg, int64_t min, int64_t max,
	       int64_t *ret)
{
	int r = parse_int64(arg, min, max, ret);

	if (r < 0)
		return report_usage(cmd, "invalid %s '%s': expected a whole number from %lld to "
					 "%lld", opt, arg, (long long)min, (long long)max);
	return 0;
}

int option_debug(const char *cmd, const char *arg, int max, struct common_opts *o)
{
	int64_t v;
	int r = option_int(cmd, "debug level", arg, 0, max, &v);

	if (r == 0)
		o->debug = (int)v;
	return r;
}

int option_common(const char *cmd, int c, char **argv, struct common_opts *o)
{
	int r;

	switch (c) {
	case 'p':
		r = option_pids(cmd, optarg, o);
		if (r)
			return r;
		o->have_pid = true;
		return 0;
	case OPT_CHILDREN:
		o->children = true;
		return 0;
	case OPT_CGROUP:
		o->cgroup = optarg;
		return 0;
	case OPT_UNIT:
		o->unit = optarg;
		return 0;
	case 'o':
		o->output = optarg;
		return 0;
	case 'q':
		o->quiet = true;
		return 0;
	case 'h':
		o->help = true;
		return 0;
	case OPT_FORMAT:
		if (view_format_from_name(optarg, &o->format) < 0)
			return report_usage(cmd, "invalid format '%s': expected pprof, svg, folded, "
					    "top or tree", optarg);
		o->format_given = true;
		return 0;
	case OPT_TOP:
		return option_int(cmd, "--top", optarg, 1, 1000000, &o->top);
	case OPT_JSON:
		o->json = true;
		return 0;
	case ':':
		return report_usage(cmd, "option '%s' needs a value", argv[optind - 1]);
	case '?':
		return report_usage(cmd, "unknown option '%s'", argv[optind - 1]);
	default:
		return OPTION_NOT_COMMON;
	}
}

int option_finish(const char *cmd, int argc, char **argv, const struct common_opts *o)
{
	if (o->help)
		return 0;
	/* `-p $(pidof NAME)` unquoted, NAME being several processes. */
	if (optind < argc && o->have_pid && parse_pid(argv[optind], &(pid_t){ 0 }) == 0 &&
	    takes_set(cmd))
		return report_usage_hint(cmd, "$(pidof NAME) gives one pid per process: quote it, "
					      "-p \"$(pidof NAME)\", to take them all",
					 "unexpected argument '%s': a second pid?", argv[optind]);
	if (optind < argc && o->have_pid && parse_pid(argv[optind], &(pid_t){ 0 }) == 0)
		return report_usage_hint(cmd, "cprof looks at one process; $(pidof NAME) gives one "
					      "pid per process: pick one, e.g. -p \"$(pidof -s NAME)\"",
					 "unexpected argument '%s': a second pid?", argv[optind]);
	if (optind < argc)
		return report_usage(cmd, "unexpected argument '%s'", argv[optind]);
	if (options_set_given(o) && !takes_set(cmd))
		return report_usage_hint(cmd, "a list of pids, --children, --cgroup and --unit are "
					      "cpu's, wall's and threads' so far",
					 "%s looks at one process", cmd);
	if (o->cgroup && o->unit)
		return report_usage(cmd, "--cgroup and --unit are each a set: give one");
	if ((o->cgroup || o->unit) && o->have_pid)
		return report_usage(cmd, "%s is a set of its own: give it or -p, not both",
				    o->cgroup ? "--cgroup" : "--unit");
	if (o->children && !o->have_pid)
		return report_usage(cmd, "--children needs -p: whose children");
	if (!o->have_pid && !o->cgroup && !o->unit)
		return report_usage(cmd, "missing -p PID: which process to look at");
	return 0;
}

/* The command's long options and those of every command, in one table. */
static const struct option *with_common_options(const struct option *longopts)
{
	static const struct option common[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "children", no_argument, NULL, OPT_CHILDREN },
		{ "cgroup", required_argument, NULL, OPT_CGROUP },
		{ "unit", required_argument, NULL, OPT_UNIT },
		{ "format", required_argument, NULL, OPT_FORMAT },
		{ "top", required_argument, NULL, OPT_TOP },
		{ "json", no_argument, NULL, OPT_JSON },
	};
	static struct option all[64];
	size_t n = 0;

	for (; longopts[n].name && n < ARRAY_SIZE(all) - ARRAY_SIZE(common) - 1; n++)
		all[n] = longopts[n];
	for (size_t i = 0; i < ARRAY_SIZE(common); i++)
		all[n++] = common[i];
	all[n] = (struct option){ 0 };
	return all;
}

int options_parse(const char *cmd, int argc, char **argv, const char *shortopts,
		  const struct option *longopts, struct common_opts *common, option_fn fn,
		  void (*help)(const void *ctx), void *ctx)
{
	int c, r;

	opterr = 0;
	optind = 1;
	longopts = with_common_options(longopts);
	while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		r = option_common(cmd, c, argv, common);
		if (r == OPTION_NOT_COMMON)
			r = fn(c, optarg, ctx);
		if (r)
			return r;
	}
	r = option_finish(cmd, argc, argv, common);
	if (r == 0 && common->help) {
		help(ctx);
		return -1;
	}
	return r;
}

int option_output(const char *cmd, struct common_opts *o)
{
	if (!o->format_given && o->output && !o->debug)
		o->format = view_format_from_path(o->output);
	if (o->debug && o->format != VIEW_PPROF)
		return report_usage(cmd, "--debug %d is a text of its own: it has no %s view "
				    "(use --debug 0)", o->debug, view_format_name(o->format));
	snprintf(o->default_output, sizeof(o->default_output), "%s.pb.gz", cmd);
	if (!o->output)
		o->output = o->format == VIEW_PPROF && !o->debug ? o->default_output : "-";
	if (o->json && !strcmp(o->output, "-"))
		return report_usage(cmd, "--json writes to stdout: give the %s a file with -o",
				    o->debug ? "text" : "profile");
	return 0;
}

bool option_output_is_top(const struct common_opts *o)
{
	return !o->debug && o->format == VIEW_TOP;
}

/* -d or -F into @s: 0 or an exit code; OPTION_NOT_COMMON for another option. */
static int option_sampling(const char *cmd, int c, const char *arg, struct sampling_args *s)
{
	int64_t v;
	int r;

	switch (c) {
	case 'd':
		return option_duration(cmd, "duration", arg, &s->duration_ns);
	case 'F':
		r = option_int(cmd, "frequency", arg, 1, 10000, &v);
		if (r == 0)
			s->hz = (unsigned)v;
		return r;
	}
	return OPTION_NOT_COMMON;
}

/* What options_parse_sampling() hands to options_parse() as its context. */
struct sampling_parse {
	const char *cmd;
	struct sampling_args *s;
	option_fn fn;
	void (*help)(const void *ctx);
	void *ctx;
};

static int sampling_option(int c, const char *arg, void *ctx)
{
	struct sampling_parse *sp = ctx;
	int r = option_sampling(sp->cmd, c, arg, sp->s);

	if (r != OPTION_NOT_COMMON)
		return r;
	return sp->fn ? sp->fn(c, arg, sp->ctx) : 0;
}

static void sampling_help(const void *ctx)
{
	const struct sampling_parse *sp = ctx;

	sp->help(sp->ctx);
}

int options_parse_sampling(const char *cmd, int argc, char **argv, const struct option *extra,
			   struct common_opts *common, struct sampling_args *s, option_fn fn,
			   void (*help)(const void *ctx), void *ctx)
{
	static const struct option sampling[] = {
		{ "duration", required_argument, NULL, 'd' },
		{ "frequency", required_argument, NULL, 'F' },
		{ "output", required_argument, NULL, 'o' },
	};
	struct option longopts[ARRAY_SIZE(sampling) + SAMPLING_EXTRA_MAX + 1];
	struct sampling_parse sp = { cmd, s, fn, help, ctx };
	size_t n = 0;
	int r;

	for (size_t i = 0; i < ARRAY_SIZE(sampling); i++)
		longopts[n++] = sampling[i];
	for (size_t i = 0; extra && extra[i].name && i < SAMPLING_EXTRA_MAX; i++)
		longopts[n++] = extra[i];
	longopts[n] = (struct option){ 0 };
	*s = (struct sampling_args)SAMPLING_ARGS_DEFAULT;
	r = options_parse(cmd, argc, argv, ":p:d:F:o:qh", longopts, common, sampling_option,
			  sampling_help, &sp);
	if (r)
		return r;
	return option_output(cmd, common);
}
