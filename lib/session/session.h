/*
 * An agent session: what heap, block, mutex and threadcreate share, from
 * finding cprof-agent.so to the detach. The agent is loaded into the target
 * (lib/inject/), its channel opened (lib/channel/), the target's claim for a
 * session held (target/claim.h) so that a second cprof is refused with a
 * name; then a window keeps the heartbeat, drains the records into the
 * caller's handlers, takes the live set's snapshots and ends the session.
 *
 *   find.c    where the agent is, and whether root may load it
 *   open.c    modules, claim, injection, channel; a call of the agent
 *   strerror.c  what a failure at each step means, and what to do
 *   profiler.c  the four kinds as profiler objects (profiler.h)
 *   jemalloc.c  jemalloc's own heap profile, dumped by the agent (jemalloc.h)
 *   window.c  the window: heartbeat, drains, snapshots, detach
 *   keep.c    heap --keep's background session: its socket protocol (keep.h)
 *
 * Nothing here prints or reads cprof's signals: a cancel callback where a
 * step can wait, a progress callback in the window, -errno and reports.
 */
#ifndef CPROF_SESSION_H
#define CPROF_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "channel/channel.h"
#include "inject/inject.h"
#include "maps/maps.h"
#include "profile/profile.h"
#include "symbolize/symbolize.h"
#include "target/claim.h"
#include "unwind/unwind.h"
#include "util/cancel.h"

/*
 * The absolute path of the agent to load, in @buf: $CPROF_AGENT, else
 * cprof-agent.so beside the running binary (a build tree), else
 * @installed_rel relative to it (where `cmake --install` puts it). 0,
 * -ENOENT, or -EPERM when cprof runs as root and $CPROF_AGENT is a file
 * that someone else than root could have put or could change (not owned by
 * root, or it or a directory above it writable by others), with the reason
 * in @why (may be NULL).
 */
int agent_find(const char *installed_rel, char *buf, size_t size, char *why, size_t whylen);

/* Where agent_session_open() stopped. */
enum agent_session_step {
	AGENT_SESSION_MODULES = 1, /* reading the target's modules */
	AGENT_SESSION_CLAIM,       /* another cprof holds the session: @holder */
	AGENT_SESSION_INJECT,      /* lib/inject/: @rep, inject_strerror() */
	AGENT_SESSION_CHANNEL,     /* opening the agent's channel */
};

/* What commands ask for: a ring of ~10,000 heap records between two
 * drains; looking for a safe thread, and the call, bounded. */
#define AGENT_SESSION_RING_SIZE (16u << 20)
#define AGENT_SESSION_PICK_TIMEOUT_MS 5000
#define AGENT_SESSION_CALL_TIMEOUT_MS 10000

struct agent_session_opts {
	const char *agent_path;    /* agent_find()'s */
	uint32_t events;           /* CPROF_EVENTS_* (agent/wire.h), one or several */
	uint64_t rates[CPROF_KINDS]; /* by CPROF_KIND_*, each in its kind's unit */
	uint32_t ring_size;
	unsigned pick_timeout_ms;  /* inject_opts' */
	unsigned call_timeout_ms;
	struct cancel cancel;
	void (*looking)(const struct inject_report *rep, uint64_t elapsed_ns);
};

struct agent_session {
	pid_t pid;
	struct maps maps;
	struct symbolizer *sym;  /* the target's modules, the agent included */
	struct unwinder *unw;    /* sym's (symbolizer_unwinder()) */
	int fd;                  /* the agent's memfd, as numbered in the target */
	struct channel *ch;      /* ... opened */
	struct inject_report rep;
	enum agent_session_step failed; /* 0 while nothing failed */
	struct target_claim claim;      /* TARGET_CLAIM_AGENT */
	struct target_claim_holder holder;
	int unclaimed;           /* -errno: no lock file could be made, went on */
};

/*
 * Reads @pid's modules into @s (zeroed first), or shares @sym's
 * (symbolizer_share(); NULL: its own): 0 or -errno. Every other call of
 * @s comes after; agent_session_release() in any case.
 */
int agent_session_prepare(struct agent_session *s, pid_t pid, struct symbolizer *sym);

/*
 * Loads the agent into the target and starts a session recording @o's
 * events at their rates, its channel open in @s->ch. 0, or -errno with
 * @s->failed saying at which step: -EBUSY at AGENT_SESSION_CLAIM is another
 * cprof's session (@s->holder); -ECANCELED means @o->cancel said so
 * before a thread was stopped, the target as it was. A channel that cannot
 * be opened after the load has the agent's session ended by a call of its
 * own (the hooks gone) before this returns.
 */
int agent_session_open(struct agent_session *s, const struct agent_session_opts *o);

/*
 * Loads the agent (as agent_session_open() does, without a session or a
 * claim) and calls its exported @function(@string) (inject_opts.function):
 * 0 with the function's result in *@ret, or -errno of the injection
 * (-ECANCELED: before it ran, the target as it was).
 */
int agent_session_call(struct agent_session *s, const struct agent_session_opts *o,
		       const char *function, const char *string, int *ret);

/*
 * What @err of agent_session_prepare(), _open() or _call() means for the
 * target (@comm), at the step @s->failed says, and what to do: a line, then
 * "hint: " lines (inject_strerror() for the injection's). A process on its
 * way out makes ptrace say EPERM: the caller checks target_alive() and
 * passes -ESRCH for it.
 */
void agent_session_strerror(const struct agent_session *s, const struct agent_session_opts *o,
			    int err, const char *comm, char *buf, size_t size);

/* Ends the agent's session if it still runs (agent_channel_end()), closes
 * the channel, drops the claim, frees the modules: whatever failed after
 * the load, the hooks go before cprof goes on or exits, not at the agent's
 * watchdog. A zeroed @s is released as well. */
void agent_session_release(struct agent_session *s);

/*
 * Ends the session on @ch unless the agent ended it already: the detach
 * asked for and waited on, then the ring's pages given back in the target
 * (channel_give_back()). 0, or channel_command()'s -errno (-ESRCH: the
 * target is gone); -ETIMEDOUT at once when a detach was asked on @ch
 * before and never answered.
 */
int agent_channel_end(struct channel *ch);

struct window_result {
	uint64_t start_realtime_ns; /* for the profile's time_nanos */
	uint64_t window_ns; /* a detached session's: the span its hooks sampled */
	uint64_t asked_ns;  /* cprof's own window, where it was replaced by that */
	uint64_t records;
	bool target_exited;
	bool interrupted;
	bool detached;     /* the agent confirmed its hooks are gone */
	bool malformed;    /* the ring held garbage: reading stopped there */
	int live_error;    /* -errno: the live set's snapshot was asked for, not had */
	struct channel_counters counters; /* at the end */
};

struct window_opts {
	uint64_t duration_ns;
	/* The session goes on after the window (cprof heap --keep): no
	 * detach, and the result says detached. */
	bool keep;
	struct cancel cancel;      /* asked every tick */
	/* Told about once a second how far the window is. */
	void (*progress)(void *arg, uint64_t elapsed_ns, uint64_t records);
	void *arg;
};

/* A window in steps, for a caller that drives several profilers in one
 * loop: begin, poll until it says the window is over, end. */
struct agent_window {
	struct channel *ch;
	pid_t pid;
	struct window_opts o;
	const struct channel_handlers *h;
	uint64_t start, next_progress, next_live;
	bool over;
	struct window_result res;
};

/* The window starts now (@ch NULL: an empty window, over at once). */
void agent_window_begin(struct agent_window *w, struct channel *ch, pid_t pid,
			const struct window_opts *o, const struct channel_handlers *h);

/*
 * Keeps the heartbeat and drains for up to @timeout_ms (0: one tick): 0
 * while the window goes on, 1 once it is over (its duration, a cancel, the
 * target's exit: see @w->res), or a handler's -errno.
 */
int agent_window_poll(struct agent_window *w, int timeout_ms);

/*
 * Ends the window (over, or cut short by the caller): the last live
 * snapshot, the detach unless @w->o.keep, the last drain; @w->res says how
 * it went. 0 or a handler's -errno.
 */
int agent_window_end(struct agent_window *w);

/*
 * Runs the window on @ch (NULL: a session never opened, an empty window)
 * for @o->duration_ns: heartbeat, drains into @h, the live set's snapshots
 * when @h->live is set (each 100 ms of the last second, and the last one
 * waited for), then the detach unless @o->keep. Returns 0 (also when the
 * target exited or @o->cancel said so: see @res), or a handler's -errno.
 */
int agent_window_run(struct channel *ch, pid_t pid, const struct window_opts *o,
		     const struct channel_handlers *h, struct window_result *res);

/*
 * Asks for the live set's snapshot (unless one is pending) and drains until
 * it was handed to @h->live. A snapshot the agent did not give goes to
 * @res->live_error; a handler's error is returned.
 */
int agent_window_live(struct channel *ch, const struct channel_handlers *h,
		      struct window_result *res, pid_t pid);

/* Notes the records the agent lost (ring full), as @c counts them, in @p's
 * comments. */
int agent_note_lost(const struct channel_counters *c, struct profile *p);

/* Whether the span the agent sampled differs from the window asked for by
 * more than a tenth of it. */
bool agent_window_stretched(const struct window_result *w);

/* Notes in @p's comments what makes @w's figures short: records lost, a
 * malformed ring, a session the agent ended before the window; and a span
 * sampled that is not the window asked for. */
int agent_note_window(const struct window_result *w, struct profile *p);

#endif
