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
	struct agent_session al; /* with the agent: loaded, its channel open */
	struct window_result w; /* with the agent: how its window went */
	int64_t pause_ns;	/* how long a target thread was stopped; -1: none */
	bool written;		/* the output was written */
};

struct collector_ops {
	const char *command;
	/* Completes "cannot ... pid N" when the target is traced already. */
	const char *attach;
	/* The agent's events (CPROF_EVENTS_*); 0: no agent. */
	uint32_t events;
	/* What the window's progress line counts ("samples", "records"). */
	const char *records;

	/* Optional, before the tracer check: COLLECTOR_GO_ON or an exit code. */
	int (*check)(void *c, struct collection *run);
	/* Optional, once the output is prepared and before the target is
	 * touched: COLLECTOR_GO_ON or an exit code (the output is aborted). */
	int (*prepare)(void *c, struct collection *run);
	/* With the agent: set up what takes its records in @h (h->arg too). */
	int (*start)(void *c, struct collection *run, struct channel_handlers *h);
	/* Optional, with the agent: the window (default agent_window()). */
	int (*window)(void *c, struct collection *run, const struct channel_handlers *h);
	/* Without the agent: take what the command shows; 0 or an exit code
	 * after reporting. */
	int (*take)(void *c, struct collection *run);
	int (*build)(void *c, const struct collection *run, const char *command_line,
		     struct profile **ret);
	/* Go's text layout @debug (--debug 1 or 2). */
	int (*write_text)(const void *c, int debug, FILE *f);
	/* After the write, to stderr. */
	void (*summary)(const void *c, const struct collection *run);
	/* What was collected, for --json: samples, records, threads. */
	uint64_t (*count)(const void *c);
	/* Optional, last, whatever happened since prepare(): the exit code. */
	int (*finish)(void *c, struct collection *run, int code, int argc, char **argv);
};

/* @ops->write_text() of @c into memory: all of the text or nothing. */
int collector_render_text(const struct collector_ops *ops, const void *c, int debug, char **ret,
			  size_t *ret_len);

/*
 * Runs the command whose options @o were parsed from @argc/@argv; with the
 * agent, a window of @duration_ns at @rate. @o->pid becomes the process
 * when a thread's id was given. The exit code.
 */
int collector_run(const struct collector_ops *ops, void *c, struct common_opts *o,
		  uint64_t duration_ns, uint64_t rate, int argc, char **argv);

#endif
