/* cprof: the command table, global options and exit codes. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "report.h"
#include "util/fault.h"

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{ "cpu", cmd_cpu, "sample the CPU use of every thread (perf_event_open)" },
	{ "wall", cmd_wall, "where every thread's time goes, on and off the CPU (no stops)" },
	{ "threads", cmd_threads, "what every thread is doing now: one consistent snapshot" },
	{ "heap", cmd_heap, "Go's heap profile: sampled allocations, in use and total (agent)" },
	{ "block", cmd_block, "where threads wait on locks, conditions, semaphores (agent)" },
	{ "mutex", cmd_mutex, "which lock holders make others wait (agent)" },
	{ "threadcreate", cmd_threadcreate, "the stacks that create threads (agent)" },
	{ "record", cmd_record, "every kind above of one process in one window, into a directory" },
	{ "serve", cmd_serve, "Go's /debug/pprof endpoints of one process, for pprof and scrapers" },
	{ "view", cmd_view, "show a pprof file: top table, folded stacks, tree, flame graph" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: cprof <command> [options]\n"
		   "       cprof <command> --help\n"
		   "\n"
		   "Profile a running native process (C, C++, Rust) without restarting it, and\n"
		   "write pprof profiles that 'go tool pprof' reads.\n"
		   "\n"
		   "commands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n"
		   "options:\n"
		   "  -h, --help     show this help\n"
		   "      --version  print the version, the libraries, the agent's path\n"
		   "\n"
		   "exit codes: 0 ok, 1 failure while profiling, 2 target cannot be profiled,\n"
		   "3 permission denied, 4 output cannot be written, 5 written in part\n"
		   "(record's kinds, a set's processes), 64 usage error.\n"
		   "See cprof(1).\n");
}

void command_line_join(int argc, char **argv, char *buf, size_t size)
{
	size_t n = 0;

	n += (size_t)snprintf(buf, size, "cprof");
	for (int i = 0; i < argc && n < size; i++)
		n += (size_t)snprintf(buf + n, size - n, " %s", argv[i]);
}

/* Whether --json is among the options (before a "--"), wherever the
 * parsing of the others stops. */
static bool json_asked(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--json"))
			return true;
	return false;
}

int main(int argc, char **argv)
{
	const char *name;

	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	name = argv[1];
	if (!strcmp(name, "-h") || !strcmp(name, "--help") || !strcmp(name, "help")) {
		if (!strcmp(name, "help") && argc > 2) {
			char *help_argv[] = { argv[2], "--help", NULL };

			for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
				if (!strcmp(commands[i].name, argv[2]))
					return commands[i].fn(2, help_argv);
			return report_usage(NULL, "unknown command '%s'", argv[2]);
		}
		usage(stdout);
		return EXIT_OK;
	}
	if (!strcmp(name, "--version") || !strcmp(name, "version")) {
		print_version();
		return EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(commands[i].name, name)) {
			int code;

			if (json_asked(argc - 1, argv + 1))
				report_json_wanted();
			code = commands[i].fn(argc - 1, argv + 1);
			/* What the suite's fault test looks for (util/fault.h). */
			if (fault_fired())
				fprintf(stderr, "cprof: test fault '%s' injected\n", fault_fired());
			return report_json_fallback(name, code);
		}
	if (name[0] == '-')
		return report_usage(NULL, "unknown option '%s'", name);
	return report_usage(NULL, "unknown command '%s'", name);
}
