/*
 * What `cpu` and `wall` share from the window's start to the exit code:
 * sampling until the duration is over, Ctrl-C or the target's exit (with a
 * progress line), then the profile built, written as the options say, the
 * summary and the --top/--json epilogue. Each command gives its profiler
 * as a small table of operations.
 */
#ifndef CPROF_SAMPLER_H
#define CPROF_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "options.h"
#include "output.h"
#include "profile/profile.h"
#include "target/target.h"

struct sampler_facts {
	uint64_t window_ns;
	uint64_t samples;
	uint64_t lost;
	bool target_exited;
};

struct sampler_ops {
	const char *command;
	int (*start)(void *p);
	int (*poll)(void *p, int timeout_ms); /* -ESRCH: the target is gone */
	int (*stop)(void *p);
	int (*finish)(void *p, struct profile **ret);
	void (*facts)(const void *p, struct sampler_facts *ret);
	/* The end of the progress line: "1234 samples". */
	void (*progress)(const void *p, char *buf, size_t size);
	/* The summary after the write, to stderr. */
	void (*summary)(const void *p, const void *args, const struct output *out);
};

/*
 * A profiler's PREFIX_start, _poll, _stop and _finish as sampler_ops calls
 * them (through void *): SAMPLER_DEFINE_CALLS(cpu_profiler) defines them,
 * SAMPLER_CALLS(cpu_profiler) fills the table's four fields.
 */
#define SAMPLER_DEFINE_CALLS(prefix)                                                     \
	static int prefix##_op_start(void *p) { return prefix##_start(p); }             \
	static int prefix##_op_poll(void *p, int ms) { return prefix##_poll(p, ms); }   \
	static int prefix##_op_stop(void *p) { return prefix##_stop(p); }               \
	static int prefix##_op_finish(void *p, struct profile **ret)                     \
	{                                                                                \
		return prefix##_finish(p, ret);                                          \
	}
#define SAMPLER_CALLS(prefix)                                                    \
	.start = prefix##_op_start, .poll = prefix##_op_poll, .stop = prefix##_op_stop, \
	.finish = prefix##_op_finish

/* The exit code of a profiler that could not be set up with -errno @err. */
int sampler_setup_exit_code(int err);

/*
 * Runs the window of @p and writes its profile to @out (prepared, aborted
 * here on failure). Returns the exit code.
 */
int sampler_run(const struct sampler_ops *ops, void *p, const void *args,
		const struct common_opts *o, uint64_t duration_ns, const struct target *t,
		struct output *out);

#endif
