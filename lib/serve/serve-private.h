/* What serve.c (the loop, the windows, the agent) and routes.c (Go's
 * paths, parameters and texts) share. */
#ifndef CPROF_SERVE_PRIVATE_H
#define CPROF_SERVE_PRIVATE_H

#include "contention/contention.h"
#include "profile/profile.h"
#include "profiler/kinds.h"
#include "profiler/profiler.h"
#include "serve/http.h"
#include "serve/serve.h"
#include "session/agent-task.h"
#include "symbolize/symbolize.h"

/* The named profiles (Go's pprof.Lookup() names, and cprof's wall). */
enum serve_kind {
	SK_HEAP,
	SK_ALLOCS,
	SK_BLOCK,
	SK_MUTEX,
	SK_THREADCREATE,
	SK_GOROUTINE,
	SK_NAMED, /* those above are pprof.Lookup()'s */
	SK_CPU = SK_NAMED,
	SK_WALL,
};

/* A request answered at the end of a window: a cpu or wall profile, or
 * a delta (?seconds=N) between two profiles of a named kind. */
struct serve_job {
	struct http_request *req;
	enum serve_kind kind;
	struct profiler *p;  /* cpu, wall */
	struct profile *p0;  /* a delta's first profile */
	uint64_t deadline_ns;
	struct serve_job *next;
};

struct serve {
	struct serve_opts o;
	struct http_server *http;
	struct symbolizer *sym;
	struct kinds_opened agent_kinds; /* the agent's, on one session */
	struct agent_profiler *ap;     /* their session; NULL: no agent */
	char agent_why[1024];          /* why not, when no agent */
	bool agent_lost;               /* it ended its session by itself (ap NULL) */
	uint64_t start_realtime_ns;
	/* block, mutex without the agent's hooks: Go's empty profiles. */
	struct contention *empty[SK_NAMED];
	struct serve_job *jobs;        /* cpu and wall: one of each at a time */
	struct agent_tasks agent;      /* the agent's task: no goroutine of the target's */
	/* The threads' snapshots: when the last one began, when the next
	 * request's may, and whether one was taken since the loop's last tick
	 * (serve_snapshot_refused()). */
	uint64_t snapshot_ns, snapshot_next_ns;
	bool snapshot_since_tick;
	int replies_cut;               /* at the stop (serve_replies_cut()) */
};

/* routes.c: http_server_opts.handle. */
void serve_route(void *arg, struct http_request *req);

/* Go's serveError(): text/plain, X-Go-Pprof: 1, @text and a newline. */
void serve_error(struct http_request *req, unsigned status, const char *text);
/* A profile as Go sends one: gzipped, attachment named @filename. Takes
 * @p. */
void serve_profile(struct http_request *req, struct profile *p, const char *filename);

/* serve.c: kind @k's profile now (NULL @why on success), or its text at
 * @debug (into *@text). -errno with @why set. */
int serve_build(struct serve *s, enum serve_kind k, struct profile **ret, char *why,
		size_t whylen);
int serve_text(struct serve *s, enum serve_kind k, int debug, char **text, size_t *len,
	       char *why, size_t whylen);
/* The count the index shows beside kind @k: no snapshot is taken. */
long serve_count(struct serve *s, enum serve_kind k);

/*
 * A goroutine request must wait (429): a snapshot now would start within
 * SERVE_SNAPSHOT_INTERVAL_MS of the last one's start, or within
 * SERVE_SNAPSHOT_SHARE times its pause, or before the loop's tick since
 * it, or a delta's end is due and waits for its turn (the windows go
 * first: a client asking without pause would hold them off).
 * serve_build() and serve_text() refuse one too soon with -EAGAIN.
 */
bool serve_snapshot_refused(const struct serve *s);
/* Whole seconds until a snapshot may start, at least 1: Retry-After. */
unsigned serve_snapshot_retry_s(const struct serve *s);

/* A window for @req: cpu or wall for @seconds (-EBUSY: one runs), or a
 * delta of @k over @seconds. 0, or -errno with @why set. */
int serve_window(struct serve *s, struct http_request *req, enum serve_kind k,
		 unsigned seconds, char *why, size_t whylen);

#endif
