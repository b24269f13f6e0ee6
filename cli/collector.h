/*
 * What threads, heap, block, mutex and threadcreate share from the options
 * to the exit code: the target's checks, the output decided writable before
 * anything is touched, the collection (the agent loaded and its window, or
 * the threads' snapshot), the profile built and written as the options say
 * (pprof, a view of it, or Go's text layout), the summary and the --top /
 * --json epilogue. Each command gives what is its own as a small table of
 * operations, as sampler.h does for cpu and wall.
 */
#ifndef CPROF_COLLECTOR_H
#define CPROF_COLLECTOR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "agent-load.h"
#include "agent-window.h"
#include "session/profiler.h"
#include "options.h"
#include "output.h"
#include "profile/profile.h"
#include "target/target.h"

/* check() and prepare(): go on (any other value is the exit code). */
#define COLLECTOR_GO_ON (-1)

/* One run, as the operations see it. */
struct collection {
	const struct common_opts *opts;
	uint64_t duration_ns;	/* the agent's window */
	uint64_t rate;		/* the agent's rate, in its events' unit */
	struct target target;
	struct output out;
	char command_line[1024];	/* for the profile's comments */
	struct agent_profiler *ap;	/* with the agent: its kind's profiler */
	struct window_progress progress; /* with the agent: the progress line */
	struct window_result w; /* with the agent: how its window went */
	int64_t pause_ns;	/* how long a target thread was stopped; -1: none */
	bool written;		/* the output was written */
};

struct collector_ops {
	const char *command;
	/* Completes "cannot ... pid N" when the target is traced already. */
	const char *attach;
	/* The agent's events (CPROF_EVENTS_*): one kind, run by an
	 * agent_profiler (lib/session/profiler.h); 0: no agent. */
	uint32_t events;
	/* What the window's progress line counts ("samples", "records"). */
	const char *records;

	/* Optional, before the tracer check: COLLECTOR_GO_ON or an exit code. */
	int (*check)(void *c, struct collection *run);
	/* Optional, once the output is prepared and before the target is
	 * touched: COLLECTOR_GO_ON or an exit code (the output is aborted). */
	int (*prepare)(void *c, struct collection *run);
	/* Optional, with the agent: what the command adds to its profiler's
	 * options (heap: --index, --keep). */
	void (*configure)(void *c, struct agent_profiler_opts *ao);
	/* Without the agent: take what the command shows; 0 or an exit code
	 * after reporting. */
	int (*take)(void *c, struct collection *run);
	/* Without the agent: the profile, and Go's text layout @debug. */
	int (*build)(void *c, const struct collection *run, const char *command_line,
		     struct profile **ret);
	int (*write_text)(const void *c, int debug, FILE *f);
	/* After the write, to stderr. */
	void (*summary)(const void *c, const struct collection *run);
	/* Without the agent: what was collected, for --json (samples,
	 * threads); the agent's is its profiler's count. */
	uint64_t (*count)(const void *c);
	/* Optional, last, whatever happened since prepare(): the exit code. */
	int (*finish)(void *c, struct collection *run, int code, int argc, char **argv);
};

/* Go's text layout (--debug @debug) of what @run collected, into memory:
 * all of the text or nothing. */
int collector_render_text(const struct collector_ops *ops, const void *c,
			  const struct collection *run, int debug, char **ret, size_t *ret_len);

/*
 * Runs the command whose options @o were parsed from @argc/@argv; with the
 * agent, a window of @duration_ns at @rate. @o->pid becomes the process
 * when a thread's id was given. The exit code.
 */
int collector_run(const struct collector_ops *ops, void *c, struct common_opts *o,
		  uint64_t duration_ns, uint64_t rate, int argc, char **argv);

#endif
