/*
 * SIGINT and SIGTERM end a collection early: the first one sets a flag that
 * the collection loop checks (poll returns EINTR), and the profile of what
 * was collected is still written. A second one is handled the default way.
 */
#ifndef CPROF_INTERRUPT_H
#define CPROF_INTERRUPT_H

#include <stdbool.h>

void interrupt_install(void);
bool interrupt_requested(void);
/* Forgets a request and handles the next SIGINT/SIGTERM again. */
void interrupt_reset(void);

#endif
