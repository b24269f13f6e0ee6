/*
 * C++ demangling with libstdc++'s __cxa_demangle, looked up at run time: a C
 * program should not link libstdc++ just for this, and a machine without it
 * keeps working, with mangled names.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "symbolize/symbolize-private.h"

typedef char *(*cxa_demangle_fn)(const char *mangled, char *buf, size_t *len, int *status);

static pthread_once_t demangler_once = PTHREAD_ONCE_INIT;
static cxa_demangle_fn cxa_demangle;

static void demangler_load(void)
{
	/* RTLD_NOLOAD first: a C++ target linked into us already has it. */
	void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);

	if (!h)
		h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
	if (!h)
		return;
	/* Kept open for the life of the process: the function lives there. */
	cxa_demangle = (cxa_demangle_fn)dlsym(h, "__cxa_demangle");
}

char *demangle(const char *name)
{
	int status = -1;
	char *out;

	/* Itanium ABI names only; plain C names would waste a dlopen. */
	if (!name || strncmp(name, "_Z", 2) != 0)
		return NULL;
	pthread_once(&demangler_once, demangler_load);
	if (!cxa_demangle)
		return NULL;
	out = cxa_demangle(name, NULL, NULL, &status);
	if (status != 0) {
		free(out);
		return NULL;
	}
	return out;
}

const char *demangle_pooled(struct strpool *sp, const char *name)
{
	char *d = demangle(name);
	const char *pooled;

	if (!d)
		return NULL;
	pooled = strpool_intern(sp, d);
	free(d);
	return pooled;
}
