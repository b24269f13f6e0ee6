/*
 * One process's perf sampling window, as cpu and wall run it: the profile
 * begun for the process, the symbolizer's unwinding shared, the perf
 * session, cprof's own task known so that it is left out, the window's
 * edges; at the end the profile symbolized and handed out. Each profiler
 * keeps its own flow (what a sample becomes, when the edges are taken).
 */
#ifndef CPROF_SAMPLING_H
#define CPROF_SAMPLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "perf/perf.h"
#include "profile/profile.h"
#include "session/agent-task.h"
#include "target/target.h"

struct kallsyms;
struct symbolizer;
struct unwinder;

struct sampling {
	pid_t pid;
	struct symbolizer *sym;
	struct unwinder *unw;      /* sym's */
	struct perf_opts popts;
	struct perf_session *perf; /* NULL: not opened */
	struct profile *profile;   /* the caller's once handed out */
	const char *process_name;  /* interned in profile */
	struct agent_tasks agent;  /* the cprof agent's task: in no sample */
	struct target_window win;
	uint64_t rng;              /* the caller's jitter */
};

struct sampling_opts {
	pid_t pid;
	const struct profile_value_type *types;
	size_t ntypes;
	const char *type, *unit; /* what a period is, pprof's period_type */
	uint64_t period_ns;
	const char *command_line;
	struct symbolizer *sym; /* to share, or NULL */
};

/*
 * Begins @s's profile of the process and shares the symbolizer's unwinding
 * (its modules read while the target surely lives). On failure @err says
 * why; sampling_release() then frees what was made.
 */
int sampling_init(struct sampling *s, const struct sampling_opts *o, char *err, size_t errlen);

/*
 * The user stack of @ps into @pcs, leaf first, at most @max: its PC alone
 * where it cannot be unwound. 0 for a sample without a user context.
 * @ret_by_fp: whether a frame was stepped over by its frame pointer
 * (unwinder_by_frame_pointers()).
 */
int sampling_user_stack(struct sampling *s, const struct perf_sample *ps, uint64_t *pcs, int max,
			bool *ret_by_fp);

/*
 * Names, files and lines for every location of the profile, libraries
 * loaded during the window included; with @kernel, its frames too (named
 * before, their mapping after the program's). Harmless once the target is
 * gone.
 */
int sampling_symbolize(struct sampling *s, const struct kallsyms *kernel);

/* The profile to @ret, no longer @s's. */
void sampling_hand_out(struct sampling *s, struct profile **ret);

/* Events first: closing them is what stops sampling the target. */
void sampling_release(struct sampling *s);

#endif
