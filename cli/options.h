/* Option values every command shares (-p, -d, numbers), with the usage
 * errors they produce. Each returns 0 or EXIT_USAGE after reporting. */
#ifndef CPROF_OPTIONS_H
#define CPROF_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "view/view.h"

/* Longest window cprof accepts: an incident tool, not a daemon. */
#define OPTION_MAX_DURATION_NS (24ULL * 3600 * 1000000000ULL)

int option_pid(const char *cmd, const char *arg, pid_t *ret);

/*
 * What every collecting command takes: -p, -o, -q, -h, and the options of
 * its output, --format, --top N, --json (options_parse() adds the long forms
 * of all but --output to every command's table).
 */
struct common_opts {
	pid_t pid;   /* -p's first */
	bool have_pid;
	/* A set of processes (cpu, wall, threads): -p's list, --children,
	 * --cgroup, --unit; see options_set_given(). */
	pid_t *pids; /* -p's, in its order (for the command's life) */
	size_t npids;
	bool children;
	const char *cgroup;
	const char *unit;   /* --unit: a systemd unit's cgroup */
	const char *output; /* -o; after option_output(): where to write, "-" is stdout */
	bool quiet;
	bool help;
	enum view_format format; /* --format, else by -o's extension; pprof by default */
	bool format_given;
	int debug;   /* --debug N, Go's text layout N (1, 2); 0: none, a pprof profile or view */
	int64_t top; /* --top N: the -top table's rows (see option_output()); 0: none */
	bool json;   /* --json: one JSON object on stdout at the end */
	char default_output[48]; /* ./COMMAND.pb.gz */
};

/* getopt values of the output options (outside the range of characters). */
enum { OPT_FORMAT = 0x1000, OPT_TOP, OPT_JSON, OPT_CHILDREN, OPT_CGROUP, OPT_UNIT };

/* The help lines of the output options, for each command's --help. */
#define OPTIONS_OUTPUT_HELP                                                                       \
	"      --format FORMAT      pprof (default), svg (flame graph), folded (collapsed\n"       \
	"                           stacks), top (pprof -top table) or tree; by default\n"        \
	"                           from -o's extension: .svg, .folded, .txt (top)\n"             \
	"      --top N              the top N functions: the table's rows with --format\n"      \
	"                           top, else a table printed to stderr after writing\n"        \
	"      --json               at the end, print one JSON object to stdout: command,\n"      \
	"                           pid, output, exit, duration_ns, samples, lost,\n"            \
	"                           pause_ns, top 5, ...; on failure command, exit, error\n"    \
	"                           and hint\n"

/* The help lines of -p's list, --children, --cgroup and --unit: a set of
 * processes for the commands to @verb. */
#define OPTIONS_SET_HELP(verb)                                                                    \
	"  -p, --pid PID[,PID...]   process(es) to " verb ": one, or a list separated by\n"       \
	"                           commas or spaces (-p \"$(pidof nginx)\")\n"                 \
	"      --children           the processes given and their descendants\n"               \
	"      --cgroup PATH        every process of a cgroup and those below it (its\n"       \
	"                           directory, or the path /proc/PID/cgroup shows),\n"        \
	"                           instead of -p\n"                                           \
	"      --unit NAME          every process of a systemd unit (its cgroup), instead\n"  \
	"                           of -p; a set's samples are labelled process_id and\n"     \
	"                           process_name"

/* The exit codes, the last lines of each command's --help (cprof(1)). */
#define OPTIONS_EXIT_HELP                                                                         \
	"\nexit status: 0 written (also when cut short by a signal or the target's exit),\n"    \
	"1 failed, 2 target cannot be profiled, 3 not permitted, 4 output cannot be\n"          \
	"written, 5 written in part (record's kinds, a set's processes), 64 usage\n"    \
	"(cprof(1) EXIT STATUS)\n"

#define OPTION_NOT_COMMON 1
/*
 * Handles getopt's result @c if it is one of the common options (or an
 * error getopt reported with ':' and '?'). Returns 0 when handled,
 * OPTION_NOT_COMMON when @c is the command's own, EXIT_USAGE after reporting.
 */
int option_common(const char *cmd, int c, char **argv, struct common_opts *o);
/* Whether the command was given a set of processes rather than one. */
bool options_set_given(const struct common_opts *o);
/* After the getopt loop: no stray arguments, -p given. 0 or EXIT_USAGE. */
int option_finish(const char *cmd, int argc, char **argv, const struct common_opts *o);

struct option;
/* A command's own option @c with argument @arg: 0 or EXIT_USAGE. */
typedef int (*option_fn)(int c, const char *arg, void *ctx);

/*
 * The whole getopt_long loop of a command: common options into @common, the
 * others to @fn, then option_finish(). 0 or EXIT_USAGE (reported); -1 once
 * --help was asked and @help printed it (both @fn and @help get @ctx).
 */
int options_parse(const char *cmd, int argc, char **argv, const char *shortopts,
		  const struct option *longopts, struct common_opts *common, option_fn fn,
		  void (*help)(const void *ctx), void *ctx);
/*
 * The output rule of every collecting command (cprof(1), OUTPUT). The
 * format is --format's, else -o's extension's (.svg, .folded, .txt), else
 * pprof; --debug 1 or 2 is Go's text layout instead (a usage error with
 * --format other than pprof; -o's extension gives way to it). Without -o,
 * a pprof profile goes to ./@cmd.pb.gz, a view or a text to stdout.
 * --json wants stdout to itself. 0 or EXIT_USAGE.
 */
int option_output(const char *cmd, struct common_opts *o);

/* The output is pprof's -top table itself (--top N gives its rows). */
bool option_output_is_top(const struct common_opts *o);

/* --debug N of a command with Go's text layouts 1 to @max. 0 or EXIT_USAGE. */
int option_debug(const char *cmd, const char *arg, int max, struct common_opts *o);
/* Warns that @cmd's option @old is deprecated, named @now. */
void option_deprecated(const char *cmd, const char *old, const char *now);
int option_duration(const char *cmd, const char *opt, const char *arg, uint64_t *ret_ns);
int option_int(const char *cmd, const char *opt, const char *arg, int64_t min, int64_t max,
	       int64_t *ret);

/* The sampling of cpu and wall: the window and the rate (-d, -F). */
struct sampling_args {
	uint64_t duration_ns;
	unsigned hz;
};
#define SAMPLING_ARGS_DEFAULT { .duration_ns = 30ULL * 1000000000ULL, .hz = 100 }
/*
 * options_parse() of a sampling command: -p, -d, -F, -o, -q and -h into
 * @common and @s (its defaults first), the long options of @extra (NULL,
 * or at most SAMPLING_EXTRA_MAX ended by an empty one) to @fn (NULL: none),
 * then option_output(). @help and @fn get @ctx. 0, EXIT_USAGE or -1 as
 * options_parse().
 */
#define SAMPLING_EXTRA_MAX 8
int options_parse_sampling(const char *cmd, int argc, char **argv, const struct option *extra,
			   struct common_opts *common, struct sampling_args *s, option_fn fn,
			   void (*help)(const void *ctx), void *ctx);

#endif
