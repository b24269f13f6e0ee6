/*
 * cprof --version: the version and what this binary was built with and will
 * use, so that a bug report says it all in one paste.
 */
#include <dlfcn.h>
#include <errno.h>
#include <elfutils/libdwfl.h>
#include <limits.h>
#include <protobuf-c/protobuf-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

#include "agent-load.h"
#include "commands.h"

#ifndef CPROF_VERSION
#define CPROF_VERSION "unknown"
#endif

/*
 * libdw (elfutils >= 0.178) loads libdebuginfod.so.1 by itself, on first use,
 * when DEBUGINFOD_URLS is set: whether that can work here is whether the
 * library loads.
 */
static const char *debuginfod_state(void)
{
	void *h = dlopen("libdebuginfod.so.1", RTLD_LAZY | RTLD_LOCAL);

	if (!h)
		return "no (libdebuginfod.so.1 is not installed)";
	dlclose(h);
	if (!getenv("DEBUGINFOD_URLS") || !*getenv("DEBUGINFOD_URLS"))
		return "yes (libdebuginfod.so.1; DEBUGINFOD_URLS is not set)";
	return "yes (libdebuginfod.so.1; DEBUGINFOD_URLS is set)";
}

void print_version(void)
{
	char agent[PATH_MAX], why[PATH_MAX + 128];
	int r;

	printf("cprof %s\n", CPROF_VERSION);
	printf("libdw: %s\n", dwfl_version(NULL));
	printf("debuginfod: %s\n", debuginfod_state());
	printf("protobuf-c: %s\n", protobuf_c_version());
	printf("zlib: %s\n", zlibVersion());
	r = agent_path(agent, sizeof(agent), why, sizeof(why));
	if (r == 0)
		printf("agent: %s\n", agent);
	else if (r == -EPERM)
		printf("agent: refused (CPROF_AGENT, as root: %s)\n", why);
	else
		printf("agent: not found (set CPROF_AGENT; heap, block, mutex and threadcreate "
		       "need it)\n");
}
