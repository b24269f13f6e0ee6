/* Test-only fault switches (fault.h). */
#include "util/fault.h"

#include <stdlib.h>
#include <string.h>

static const char *fired;

bool fault_injected(const char *name)
{
	const char *want = getenv("CPROF_TEST_FAULT");

	if (!want || strcmp(want, name))
		return false;
	fired = name;
	return true;
}

const char *fault_fired(void)
{
	return fired;
}
