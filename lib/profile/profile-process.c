/* The head of a profile of one process's time, shared by cpu and wall. */
#include <errno.h>
#include <stdio.h>

#include "profile/profile.h"
#include "target/target.h"

int profile_begin_process(struct profile *p, pid_t pid, const char *type, const char *unit,
			  int64_t period, const char *command_line, const char **ret_process_name)
{
	char buf[64];
	int r;

	r = profile_set_period(p, type, unit, period);
	if (r < 0)
		return r;
	/* The name a thread that is gone by symbolization time is given. */
	if (target_process_name(pid, buf, sizeof(buf)) < 0)
		snprintf(buf, sizeof(buf), "%d", pid);
	*ret_process_name = profile_intern(p, buf);
	if (!*ret_process_name)
		return -ENOMEM;
	return command_line ? profile_add_comment(p, command_line) : 0;
}
