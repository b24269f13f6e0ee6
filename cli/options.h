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
 * What every collecting command takes: -p, -o, -q, -h, and the runbook
 * options --format, --top N, --json (options_parse() adds their long
 * forms to every command's table).
 */
struct common_opts {
	pid_t pid;
	bool have_pid;
	const char *output; /* NULL when not given */
	bool quiet;
	bool help;
	enum view_format format; /* --format, else by -o's extension; pprof by default */
	bool format_given;
	int64_t top; /* --top N: a table of N rows on stderr after writing; 0: none */
	bool json;   /* --json: one JSON object on stdout at the end */
};

/* getopt values of the runbook options (outside the range of characters). */
enum { OPT_FORMAT = 0x1000, OPT_TOP, OPT_JSON };

/* The help lines of the runbook options, for each command's --help. */
#define OPTIONS_RUNBOOK_HELP                                                                      \
	"      --format FORMAT      pprof (default), svg (flame graph), folded (collapsed\n"       \
	"                           stacks), top (pprof -top table) or tree; by default\n"        \
	"                           from -o's extension: .svg, .folded, .txt (top)\n"             \
	"      --top N              after writing, print the top N functions to stderr\n"         \
	"      --json               at the end, print one JSON object to stdout: command,\n"      \
	"                           pid, output, duration, samples, lost, pause, top 5\n"

#define OPTION_NOT_COMMON 1
/*
 * Handles getopt's result @c if it is one of the common options (or an
 * error getopt reported with ':' and '?'). Returns 0 when handled,
 * OPTION_NOT_COMMON when @c is the command's own, EXIT_USAGE after reporting.
 */
int option_common(const char *cmd, int c, char **argv, struct common_opts *o);
/* After the getopt loop: no stray arguments, -p given. 0 or EXIT_USAGE. */
int option_finish(const char *cmd, int argc, char **argv, const struct common_opts *o);

struct option;
/* A command's own option @c with argument @arg: 0 or EXIT_USAGE. */
typedef int (*option_fn)(int c, const char *arg, void *ctx);

/*
 * The whole getopt_long loop of a command: common options into @common, the
 * others to @fn, then option_finish(). 0 or EXIT_USAGE (reported). When
 * common->help is set, the caller prints its help.
 */
int options_parse(const char *cmd, int argc, char **argv, const char *shortopts,
		  const struct option *longopts, struct common_opts *common, option_fn fn,
		  void *ctx);
/*
 * The --debug N / -o rule of the commands with text views: no --debug means
 * 0 (pprof) with -o, 1 (text) without; no -o means @binary_default for
 * pprof and stdout for text. A view format (--format, -o's extension) is a
 * view of the debug 0 profile: --format with --debug 1 or 2 is a usage
 * error, and -o's extension gives way to --debug 1 or 2.
 * Then option_output_finish(). 0 or EXIT_USAGE.
 */
int option_debug_output(const char *cmd, struct common_opts *o, int *debug,
			const char *binary_default);
/*
 * Without -o: @binary_default for pprof, stdout for a view. --json wants
 * stdout to itself: with -o - it is a usage error. 0 or EXIT_USAGE.
 */
int option_output_finish(const char *cmd, struct common_opts *o, const char *binary_default);

int option_duration(const char *cmd, const char *opt, const char *arg, uint64_t *ret_ns);
int option_int(const char *cmd, const char *opt, const char *arg, int64_t min, int64_t max,
	       int64_t *ret);

#endif
