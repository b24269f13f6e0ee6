/*
 * cprof serve: Go's /debug/pprof endpoints for one process, for go tool
 * pprof and the fleet profilers that scrape Go programs. Options, the
 * checks before anything is touched, and the messages; the server and its
 * windows are lib/serve/'s.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent-load.h"
#include "agent/wire.h"
#include "commands.h"
#include "heap/allocator.h"
#include "interrupt.h"
#include "options.h"
#include "preflight.h"
#include "report.h"
#include "serve/serve.h"
#include "util/util.h"

#define CMD "serve"
#define DEFAULT_LISTEN "127.0.0.1:6060"
/* Go's runtime.MemProfileRate. */
#define DEFAULT_HEAP_RATE (512u << 10)
#define DEFAULT_MAX_SECONDS 600
#define TOKEN_MAX 4096

struct serve_args {
	struct common_opts common;
	const char *listen, *token_file;
	int64_t heap_rate, mutex_fraction, max_seconds;
	uint64_t block_rate_ns;
	bool no_agent;
};

enum { OPT_LISTEN = 256, OPT_TOKEN_FILE, OPT_HEAP_RATE, OPT_BLOCK_RATE, OPT_MUTEX_FRACTION,
       OPT_MAX_SECONDS, OPT_NO_AGENT };

static void serve_help(const void *ctx)
{
	(void)ctx;
	printf("usage: cprof serve -p PID [--listen ADDR] [--token-file FILE] "
	       "[--heap-rate BYTES] [--block-rate DURATION] [--mutex-fraction N] "
	       "[--max-seconds N] [--no-agent] [-q]\n"
	       "\n"
	       "Serve Go's /debug/pprof endpoints for process PID, for go tool pprof and the\n"
	       "profilers that scrape Go programs (Parca, Grafana Alloy): profile (cpu) and\n"
	       "wall for ?seconds=N, heap and allocs since serve began, block and mutex when\n"
	       "their rates are set, threadcreate, goroutine (the threads, ?debug=1 and 2 as\n"
	       "Go's text) and cmdline; ?seconds=N of heap, allocs, block, mutex, goroutine or\n"
	       "threadcreate is the delta over N seconds. The agent stays loaded until serve\n"
	       "ends (Ctrl-C, SIGTERM, the process's exit).\n"
	       "\n"
	       "  -p, --pid PID            process to serve the profiles of\n"
	       "      --listen ADDR        HOST:PORT or unix:/PATH (default 127.0.0.1:6060;\n"
	       "                           port 0: any free one, said on stderr); an address\n"
	       "                           off loopback needs --token-file\n"
	       "      --token-file FILE    only answer requests with 'Authorization: Bearer\n"
	       "                           TOKEN', TOKEN the first line of FILE\n"
	       "      --heap-rate BYTES    mean bytes between sampled allocations, Go's\n"
	       "                           MemProfileRate (default 524288)\n"
	       "      --block-rate DURATION  record waits this long, shorter ones in proportion,\n"
	       "                           Go's SetBlockProfileRate (default: off, as in Go)\n"
	       "      --mutex-fraction N   record one in N contentions, Go's\n"
	       "                           SetMutexProfileFraction (default: off, as in Go)\n"
	       "      --max-seconds N      the longest window a request may ask, Go's server\n"
	       "                           WriteTimeout (default 600)\n"
	       "      --no-agent           load no agent: profile, wall, goroutine and cmdline\n"
	       "                           only\n"
	       "  -q, --quiet              no messages on stderr but errors\n"
	       "  -h, --help               show this help\n"
	       "\nexit status: 0 stopped by SIGINT or SIGTERM, 1 the server could not start or\n"
	       "failed, 2 the process exited or cannot be profiled, 3 not permitted, 64 usage\n"
	       "(cprof-serve(1) EXIT STATUS)\n");
}

static int serve_option(int c, const char *arg, void *ctx)
{
	struct serve_args *a = ctx;

	switch (c) {
	case OPT_LISTEN:
		a->listen = arg;
		return 0;
	case OPT_TOKEN_FILE:
		a->token_file = arg;
		return 0;
	case OPT_HEAP_RATE:
		return option_int(CMD, "--heap-rate", arg, 1, INT32_MAX, &a->heap_rate);
	case OPT_BLOCK_RATE:
		return option_duration(CMD, "--block-rate", arg, &a->block_rate_ns);
	case OPT_MUTEX_FRACTION:
		return option_int(CMD, "--mutex-fraction", arg, 1, 1000000000, &a->mutex_fraction);
	case OPT_MAX_SECONDS:
		return option_int(CMD, "--max-seconds", arg, 2, 86400, &a->max_seconds);
	case OPT_NO_AGENT:
		a->no_agent = true;
		return 0;
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct serve_args *a)
{
	static const struct option longopts[] = {
		{ "listen", required_argument, NULL, OPT_LISTEN },
		{ "token-file", required_argument, NULL, OPT_TOKEN_FILE },
		{ "heap-rate", required_argument, NULL, OPT_HEAP_RATE },
		{ "block-rate", required_argument, NULL, OPT_BLOCK_RATE },
		{ "mutex-fraction", required_argument, NULL, OPT_MUTEX_FRACTION },
		{ "max-seconds", required_argument, NULL, OPT_MAX_SECONDS },
		{ "no-agent", no_argument, NULL, OPT_NO_AGENT },
		{}
	};
	int r;

	*a = (struct serve_args){ .listen = DEFAULT_LISTEN, .heap_rate = DEFAULT_HEAP_RATE,
				  .max_seconds = DEFAULT_MAX_SECONDS };
	r = options_parse(CMD, argc, argv, ":p:qh", longopts, &a->common, serve_option, serve_help, a);
	if (r)
		return r;
	if (a->common.output || a->common.format_given || a->common.top || a->common.debug ||
	    a->common.json)
		return report_usage(CMD, "serve answers HTTP requests: no -o, --format, --top, "
				    "--debug or --json (a request's ?debug=N is Go's text)");
	if (a->no_agent && (a->block_rate_ns || a->mutex_fraction))
		return report_usage(CMD, "--block-rate and --mutex-fraction need the agent: not "
				    "with --no-agent");
	return 0;
}

/* Loopback only, unless a token guards it: what is served is read from the
 * target's memory. */
static bool listen_is_local(const char *listen)
{
	static const char *const local[] = { "127.", "[::1]:", "localhost:", "unix:" };

	for (size_t i = 0; i < ARRAY_SIZE(local); i++)
		if (!strncmp(listen, local[i], strlen(local[i])))
			return true;
	return false;
}

/* The token: FILE's first line, without its spaces. */
static int read_token(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f) {
		report_error("cannot read the token file %s: %s", path, strerror(errno));
		return EXIT_USAGE;
	}
	if (!fgets(buf, (int)size, f))
		buf[0] = '\0';
	fclose(f);
	n = strcspn(buf, "\r\n");
	while (n && isspace((unsigned char)buf[n - 1]))
		n--;
	buf[n] = '\0';
	if (!buf[0] || strchr(buf, ' ')) {
		report_error("the token file %s holds no token on its first line (one word, no "
			     "spaces)", path);
		return EXIT_USAGE;
	}
	return 0;
}

/* The agent loaded, or why not: serve goes on without it. Whether its
 * session began. */
static bool load_agent(struct serve *s, struct agent_profiler_opts *ao)
{
	char agent[PATH_MAX], why[2048] = "";

	if (agent_path(agent, sizeof(agent), why, sizeof(why)) < 0) {
		report_warning("heap, allocs, threadcreate, block and mutex are not served: %s",
			       why[0] ? why : "cannot find cprof-agent.so (set CPROF_AGENT)");
		return false;
	}
	agent_opts_fill(ao, agent);
	if (serve_load_agent(s, ao, why, sizeof(why)) < 0) {
		report_warning("heap, allocs, threadcreate, block and mutex are not served: %s",
			       why);
		return false;
	}
	return true;
}

int cmd_serve(int argc, char **argv)
{
	struct serve_args a;
	struct serve_opts so;
	struct agent_profiler_opts ao = { 0 };
	bool agent = false;
	struct serve *s = NULL;
	struct target t;
	enum serve_end end = SERVE_FAILED;
	char command_line[1024], token[TOKEN_MAX], err[1024] = "", heap_why[256];
	struct heap_allocator alloc;
	int code = parse_args(argc, argv, &a), r;

	if (code)
		return code < 0 ? EXIT_OK : code;
	report_set_quiet(a.common.quiet);
	if (!listen_is_local(a.listen) && !a.token_file)
		return report_usage(CMD, "--listen %s is not loopback: give --token-file (what is "
				    "served is read from the process's memory)", a.listen);
	if (a.token_file && (code = read_token(a.token_file, token, sizeof(token))))
		return code;
	command_line_join(argc, argv, command_line, sizeof(command_line));
	code = preflight_target(a.common.pid, &t);
	if (code)
		return code;
	code = preflight_not_traced(&t, "snapshot or load the agent into");
	if (code)
		return code;
	preflight_raise_nofile();
	interrupt_install();
	so = (struct serve_opts){
		.pid = t.pid, .command_line = command_line, .listen = a.listen,
		.token = a.token_file ? token : NULL, .max_seconds = (unsigned)a.max_seconds,
		.comm = t.comm, .cancel = interrupt_cancel,
	};
	if (heap_allocator_unhookable(t.pid, &alloc)) {
		heap_allocator_why(&alloc, heap_why, sizeof(heap_why));
		so.heap_refused = heap_why;
		report_warning("heap and allocs are not served: %s", heap_why);
	}
	ao.rates[CPROF_KIND_HEAP] = (uint64_t)a.heap_rate;
	ao.rates[CPROF_KIND_BLOCK] = a.block_rate_ns;
	ao.rates[CPROF_KIND_MUTEX] = (uint64_t)a.mutex_fraction;
	r = serve_new(&s, &so, err, sizeof(err));
	if (r < 0) {
		report_error("cannot serve pid %d on %s: %s", t.pid, a.listen, err);
		if (r == -EADDRINUSE)
			report_hint("another server holds it; --listen 127.0.0.1:0 takes a free port");
		if (r == -EADDRNOTAVAIL) {
			if (!a.token_file)
				report_hint("give a loopback address (127.0.0.1:6060, [::1]:6060), "
					    "or --token-file to serve others");
			return EXIT_USAGE;
		}
		return r == -ESRCH ? EXIT_TARGET : EXIT_FAIL;
	}
	if (!a.no_agent)
		agent = load_agent(s, &ao);
	if (!interrupt_requested() && !strncmp(serve_address(s), "unix:", 5))
		report_note("serving /debug/pprof/ on %s for pid %d (%s); Ctrl-C stops",
			    serve_address(s), t.pid, t.comm);
	else if (!interrupt_requested())
		report_note("serving http://%s/debug/pprof/ for pid %d (%s); Ctrl-C stops",
			    serve_address(s), t.pid, t.comm);
	r = serve_run(s, &end);
	if (serve_agent_lost(s))
		report_warning("heap, allocs, threadcreate, block and mutex stopped: %s",
			       serve_agent_lost(s));
	if (serve_replies_cut(s) == 1)
		report_warning("a reply was cut short at the stop: its client did not read it "
			       "in time");
	else if (serve_replies_cut(s) > 1)
		report_warning("%d replies were cut short at the stop: their clients did not read "
			       "them in time", serve_replies_cut(s));
	serve_free(s);
	interrupt_target_released(t.pid);
	switch (end) {
	case SERVE_CANCELLED:
		if (agent)
			report_note("stopped serving pid %d: its allocator and locks are unhooked; the "
				    "agent stays loaded in it, idle, for later sessions "
				    "(cprof-heap(1))", t.pid);
		else
			report_note("stopped serving pid %d", t.pid);
		return EXIT_OK;
	case SERVE_TARGET_EXITED:
		report_error("pid %d (%s) exited: nothing left to serve", t.pid, t.comm);
		return EXIT_TARGET;
	default:
		report_error("serving pid %d failed: %s", t.pid, strerror(-r));
		return EXIT_FAIL;
	}
}
