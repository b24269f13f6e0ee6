/* What a perf_event_open failure means, and what to do: perf's
 * evsel__open_strerror() is the model. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "perf/perf-private.h"
#include "target/target.h"

void perf_strerror(int err, const struct perf_opts *o, char *buf, size_t size)
{
	int paranoid = -100;
	bool have = proc_sysctl_int("kernel/perf_event_paranoid", &paranoid) == 0;

	if (err < 0)
		err = -err;
	switch (err) {
	case EACCES:
	case EPERM:
		if (have)
			snprintf(buf, size,
				 "perf_event_open refused %s sampling: kernel.perf_event_paranoid is %d\n"
				 "hint: run as root or with CAP_PERFMON; or allow it for everyone with "
				 "`sysctl kernel.perf_event_paranoid=%d`",
				 o->scope == PERF_SCOPE_SYSTEM ? "system-wide" : "per-thread",
				 paranoid, o->scope == PERF_SCOPE_SYSTEM ? 0 : 1);
		else
			snprintf(buf, size,
				 "perf_event_open refused: permission denied\n"
				 "hint: run as root or with CAP_PERFMON");
		break;
	case ENOENT:
	case EOPNOTSUPP:
	case ENODEV:
		snprintf(buf, size,
			 "this kernel does not offer the %s software event (%s)\n"
			 "hint: cprof needs a kernel built with CONFIG_PERF_EVENTS",
			 o->scope == PERF_SCOPE_SYSTEM ? "cpu-clock" : "task-clock", strerror(err));
		break;
	case EMFILE:
	case ENFILE:
		snprintf(buf, size,
			 "too many open files: one event per thread and cpu is needed\n"
			 "hint: raise the limit with `ulimit -n`, or run as root for one event per cpu");
		break;
	case ENOMEM:
		snprintf(buf, size,
			 "cannot map the sample buffers: the locked-memory limit is reached\n"
			 "hint: raise kernel.perf_event_mlock_kb or `ulimit -l`, or lower -F");
		break;
	case ESRCH:
		snprintf(buf, size, "the process exited while cprof attached");
		break;
	case EINVAL:
		snprintf(buf, size,
			 "the kernel rejected the event attributes (%s)\n"
			 "hint: a kernel older than 4.1 lacks what cprof uses; check -F "
			 "(kernel.perf_event_max_sample_rate)",
			 strerror(err));
		break;
	default:
		snprintf(buf, size, "perf_event_open failed: %s", strerror(err));
		break;
	}
}
