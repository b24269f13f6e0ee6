/*
 * What a long step asks between its parts: whether its caller wants it
 * stopped. The caller's @arg comes back to it, so that one command over
 * many processes can give up on one of them and go on with the others.
 */
#ifndef CPROF_UTIL_CANCEL_H
#define CPROF_UTIL_CANCEL_H

#include <stdbool.h>
#include <stddef.h>

struct cancel {
	bool (*asked)(void *arg); /* NULL: never */
	void *arg;
};

static inline bool cancel_asked(const struct cancel *c)
{
	return c && c->asked && c->asked(c->arg);
}

#endif
