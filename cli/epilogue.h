/*
 * The end of a collecting command, after its output is written: --top N
 * prints a pprof -top table of the profile to stderr (unless the output is
 * that table), --json one JSON object to stdout (the only thing cprof ever
 * prints there with --json).
 */
#ifndef CPROF_EPILOGUE_H
#define CPROF_EPILOGUE_H

#include <stdint.h>
#include <sys/types.h>

#include "options.h"
#include "profile/profile.h"

struct epilogue_facts {
	const char *command;
	pid_t pid;
	const char *output;   /* as given; "-" is stdout */
	uint64_t duration_ns; /* the window; 0 for a snapshot */
	uint64_t samples;     /* what was collected: samples, records, threads */
	uint64_t lost;
	int64_t pause_ns;     /* how long a target thread was stopped; -1: none */
	int exit_code;        /* what cprof leaves with: EXIT_OK, or EXIT_PARTIAL */
	const pid_t *pids;    /* a set's processes (NULL: the one, pid) */
	size_t npids;
	const struct profile *profile; /* may be NULL: no top functions */
};

/* --top and --json, as @o asks. Returns 0, or -errno when stdout failed. */
int epilogue_report(const struct common_opts *o, const struct epilogue_facts *f);

#endif
