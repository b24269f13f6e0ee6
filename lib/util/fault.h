/*
 * Test-only fault switches, as git's GIT_TEST_* and systemd's test
 * variables are: with CPROF_TEST_FAULT=NAME in cprof's environment,
 * fault_injected("NAME") is true where the code asks it, and that step
 * fails as a real failure there would. They stand on the steps between the
 * agent's load and its detach, so that the suite can make each failure
 * path run and read the target's GOT after it
 * (tests/integration/test-faults.c, which lists them all and fails on one
 * it does not know). Without the variable a switch is never on.
 */
#ifndef CPROF_FAULT_H
#define CPROF_FAULT_H

#include <stdbool.h>

/* Whether the switch @name is on (and, if so, notes that it fired). */
bool fault_injected(const char *name);

/* The switch that fired in this process, or NULL. */
const char *fault_fired(void);

#endif
