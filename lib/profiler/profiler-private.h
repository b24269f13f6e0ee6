/* What a kind of profiler is made of, for the kinds' own files. */
#ifndef CPROF_PROFILER_PRIVATE_H
#define CPROF_PROFILER_PRIVATE_H

#include "profiler/profiler.h"

struct profiler_ops {
	int (*start)(struct profiler *p, char *err, size_t errlen);
	int (*poll)(struct profiler *p, int timeout_ms);
	int (*stop)(struct profiler *p);
	int (*finish)(struct profiler *p, struct profile **ret);
	int (*write_text)(struct profiler *p, int debug, FILE *f);
	void (*facts)(const struct profiler *p, struct profiler_facts *ret);
	struct symbolizer *(*symbolizer)(const struct profiler *p); /* NULL: none */
	void (*free)(void *impl);
};

struct profiler {
	const struct profiler_ops *ops;
	const char *kind;
	void *impl;
	uint32_t events; /* the agent's kinds: this one's CPROF_EVENTS_* */
	/* threads: what start takes */
	pid_t pid;
	const char *command_line;
	struct symbolizer *sym; /* a reference, or NULL: the snapshot's own */
};

/* A profiler of @kind doing @ops on @impl (freed by ops->free on failure). */
int new_profiler(struct profiler **ret, const struct profiler_ops *ops, const char *kind,
		 void *impl);

#endif
