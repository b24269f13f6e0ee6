/*
 * Loading cprof-agent.so into a running process and starting a session of
 * it: a remote dlopen + dlsym + cprof_agent_attach_events() run by ONE thread of
 * the target that cprof has checked cannot hold the allocator's or the
 * loader's locks.
 *
 * The target comes first:
 * - Only the chosen thread is stopped, for about a millisecond; the others
 *   never are, so whatever lock one of them holds gets released.
 * - A thread is chosen only if its unwound stack has no frame in malloc &
 *   co, in the loader (ld.so, dl*), in a signal handler or in the agent, and
 *   it has stack to spare; threads asleep in a harmless call are tried first.
 * - The call runs UNTRACED, in a trampoline (trampoline.h) that puts the
 *   thread back exactly as it was, its interrupted call restarted, by itself.
 *   If cprof dies during the call, nothing is left half done. The only
 *   traced moment that changes the thread is the mmap of the trampoline page
 *   (a few microseconds, done once per target: the page is reused).
 * - Signals that arrive while the thread is stopped are handed back.
 * - A timeout ends cprof's wait, never the call.
 */
#ifndef CPROF_INJECT_H
#define CPROF_INJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "maps/maps.h"
#include "target/claim.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"
#include "util/cancel.h"

struct inject_report;

struct inject_opts {
	const char *agent_path; /* absolute, as the target sees it */
	int32_t cprof_pid;      /* cprof_agent_attach_events()'s arguments */
	uint64_t rate;
	uint32_t ring_size;
	uint32_t events;        /* CPROF_EVENTS_* (agent/wire.h); 0: heap */
	/* Another of the agent's functions to call instead of
	 * cprof_agent_attach_events() (NULL), with @string (shorter than
	 * TD_STR_MAX, copied into the call's data block; NULL passes NULL) as
	 * its only argument: cprof_agent_jemalloc_dump(). Such a function may
	 * allocate: the thread is judged as for a first load even when the
	 * agent is resident. */
	const char *function;
	const char *string;
	unsigned pick_timeout_ms; /* looking for a safe thread (INJECT_MIN_LOOKS) */
	unsigned call_timeout_ms; /* waiting for the call to finish */
	/* Asked between looks while no thread is stopped: true gives up with
	 * -ECANCELED, the target as it was. Once the call is launched it runs
	 * to its end (it is short, and the agent would be half loaded). Its
	 * asked NULL: never. */
	struct cancel cancel;
	/* Told between rounds of looks, from cprof's tracer thread, how the
	 * search goes (tried, refused, why). NULL: nobody is told. */
	void (*looking)(const struct inject_report *rep, uint64_t elapsed_ns);
	/* The target's modules (read beforehand) and an unwinder on them. */
	const struct maps *maps;
	struct symbolizer *sym;
	struct unwinder *unw;
};

/*
 * The search for a safe thread lasts pick_timeout_ms, and goes on while it
 * has made fewer than INJECT_MIN_LOOKS looks, up to INJECT_PICK_CAP times
 * pick_timeout_ms: the odds of a safe moment are per look (a loop inside
 * malloc nearly all the time), and on a saturated host each look waits
 * for its thread to be given a CPU.
 */
#define INJECT_MIN_LOOKS 300
#define INJECT_PICK_CAP 3

/* How long another cprof may hold a target's threads (its claim): the
 * longest search and the call. */
static inline unsigned inject_claim_wait_ms(const struct inject_opts *o)
{
	return o->pick_timeout_ms * INJECT_PICK_CAP + o->call_timeout_ms;
}

struct inject_report {
	pid_t tid;               /* the thread that made the call, 0 if none */
	uint64_t stopped_ns;     /* how long it was stopped by cprof */
	uint64_t call_ns;        /* from its release to the results */
	unsigned tried;          /* threads looked at */
	unsigned refused;        /* of which found unsafe */
	uint64_t looked_ns;      /* how long the search for a thread lasted */
	int left_pages;          /* 1: the first load's pages could not be unmapped (the next session does) */
	int resident;            /* 1: the agent was loaded and warm: attach called alone */
	char why[160];           /* why the last thread was refused (or was late to stop, while none was refused) */
	char dlerror[256];       /* dlopen's complaint, when it failed */
	char agent_path[1024];   /* the path dlopen was given */
	int placed;              /* a copy in the target's root: 1 new, 2 found there */
	int place_error;         /* -errno: why no copy could be put there */
	int called;              /* 1: the agent's function ran: inject_agent() returned its result */
	/* -EUSERS: who kept the target's ptrace claim (target/claim.h). */
	struct target_claim_holder holder;
};

/*
 * Returns the agent's memfd number in the target (>= 0), or:
 *   -ESRCH      the process is gone
 *   -EPERM      not allowed to ptrace it
 *   -EBUSY      already traced by another process
 *   -EUSERS     another cprof kept stopping its threads (its ptrace claim,
 *               @rep->holder) for inject_claim_wait_ms()
 *   -ENOENT     no libc.so with dlopen in it (a static binary)
 *   -EAGAIN     no safe thread within pick_timeout_ms (INJECT_MIN_LOOKS;
 *               @rep->why says why)
 *   -ETIMEDOUT  the call did not finish in call_timeout_ms (it goes on)
 *   -ENOEXEC    dlopen failed (@rep->dlerror)
 *   -EXDEV      the target sees another file at the agent's path and no copy
 *               could be placed in its root (@rep->place_error), or a
 *               resident agent was deleted
 *   -ENOTSUP    a stopped (SIGSTOP) target, or no way to save its state
 *   -EKEYREJECTED  its seccomp filter would refuse or kill one of the calls
 *               a load makes, or cannot be read (@rep->why); nothing made
 *   other -errno from cprof_agent_attach_events() (-EBUSY: another cprof's
 *   session runs) or from the system.
 * With @rep->called set, the agent's function ran and the value returned is
 * its result, whatever its sign (inject_opts.function's own -errno).
 */
int inject_agent(pid_t pid, const struct inject_opts *o, struct inject_report *rep);

/*
 * What inject_agent()'s @err means for @pid (@comm) and what to do, as
 * perf_strerror() says it: a line, then "hint: " lines, into @buf. @o and
 * @rep are the injection's. A process on its way out makes ptrace say
 * EPERM: the caller checks target_alive() and passes -ESRCH for it.
 */
void inject_strerror(int err, pid_t pid, const char *comm, const struct inject_opts *o,
		     const struct inject_report *rep, char *buf, size_t size);

/* The address of exported function (or object) @name of the first module
 * whose file name starts with @lib (e.g. "libc.so."), from its .dynsym. */
int inject_find_function(pid_t pid, const struct maps *m, const char *lib, const char *name,
			 uint64_t *ret);

#endif
