/*
 * cprof serve: Go's net/http/pprof endpoints for one native process, so
 * that what scrapes Go programs (go tool pprof, Parca, Alloy) scrapes it.
 *
 *   /debug/pprof/                 the index (HTML)
 *   /debug/pprof/profile?seconds  cpu, a window of N s (default 30), one at a time
 *   /debug/pprof/wall?seconds     cprof's wall, the same way
 *   /debug/pprof/heap, allocs     since serve began (the agent stays loaded)
 *   /debug/pprof/block, mutex     when their rates are set (off by default, as Go's)
 *   /debug/pprof/threadcreate     since serve began
 *   /debug/pprof/goroutine        the threads' snapshot (?debug=1, 2: Go's text)
 *   /debug/pprof/cmdline          the target's command line
 *
 * with Go's parameters (seconds, debug, gc), content types, status codes
 * and error texts. Every window runs in serve's one loop (serve_run()),
 * which is also the agent's heartbeat. Nothing here prints.
 *
 * A goroutine profile (any ?debug=, a delta's ends) stops every thread of
 * the target: one is taken at a time, their starts at least
 * SERVE_SNAPSHOT_INTERVAL_MS apart and a request's far enough after the
 * last that the stops take at most 1/SERVE_SNAPSHOT_SHARE of the threads'
 * time (twice that with deltas' ends); a request that comes sooner gets
 * 429 with Retry-After. At the stop, the replies under way are written to
 * their end; a client that reads nothing for SERVE_REPLY_STALL_S is given
 * up on.
 */
#ifndef CPROF_SERVE_SERVE_H
#define CPROF_SERVE_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "session/profiler.h"
#include "util/cancel.h"

/* Ten snapshots a second at most: were each to hold the threads for 10 ms,
 * a client asking without pause still leaves them 90% of their time. */
#define SERVE_SNAPSHOT_INTERVAL_MS 100
/* A loaded host stretches a stop (serve waits for a CPU while it holds
 * the threads): the next request's start is then SERVE_SNAPSHOT_SHARE
 * times the last one's longest pause after it, whatever the interval
 * allows. A delta's end waits for the interval only. */
#define SERVE_SNAPSHOT_SHARE 20
/* At the stop: a scraper reads its reply at once, so a client silent
 * this long is not reading; the stop waits SERVE_STOP_MAX_MS in all. */
#define SERVE_REPLY_STALL_S 2
#define SERVE_STOP_MAX_MS 5000

struct serve;

struct serve_opts {
	pid_t pid;
	const char *command_line; /* for the profiles' comments */
	const char *listen;       /* http_server_opts' */
	const char *token;        /* NULL: no Authorization asked */
	/* The longest window a request may ask (Go's server WriteTimeout). */
	unsigned max_seconds;
	/* The agent's (serve_load_agent()); until then its endpoints answer
	 * that it is not loaded. */
	struct agent_profiler_opts agent;
	const char *comm;         /* for the agent's messages */
	/* Why heap and allocs cannot be had (an allocator no hook reaches),
	 * or NULL: those endpoints answer it. */
	const char *heap_refused;
	struct cancel cancel;     /* asked every tick */
};

/* Listening, the target's modules read; nothing touched yet. */
int serve_new(struct serve **ret, const struct serve_opts *o, char *err, size_t errlen);
void serve_free(struct serve *s);

/* Where it listens (http_server_address()). */
const char *serve_address(const struct serve *s);

/* Loads the agent with @ao's path and rates: heap and threadcreate always,
 * block and mutex when their rates are set (the rest of @ao is serve's).
 * On failure @err says why, and those endpoints answer it; serve goes on
 * without. */
int serve_load_agent(struct serve *s, const struct agent_profiler_opts *ao, char *err,
		     size_t errlen);

enum serve_end {
	SERVE_CANCELLED,     /* o->cancel said so */
	SERVE_TARGET_EXITED,
	SERVE_FAILED,        /* the server failed: -errno returned */
};

/* Serves until the cancel, the target's exit, or a failure. The agent's
 * session ends with serve_free(). */
int serve_run(struct serve *s, enum serve_end *ret);

/* The agent's session ended by itself during serve_run() (it took cprof
 * for gone): why, or NULL. */
const char *serve_agent_lost(const struct serve *s);

/* Replies serve_run() gave up on at its end: their clients read nothing
 * for SERVE_REPLY_STALL_S, or were not done in SERVE_STOP_MAX_MS. */
int serve_replies_cut(const struct serve *s);

#endif
