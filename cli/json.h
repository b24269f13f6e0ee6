/* The little JSON cprof prints: --json's object, record's manifest. */
#ifndef CPROF_JSON_H
#define CPROF_JSON_H

#include <stdio.h>

/* @s as a JSON string: quotes, backslashes and control characters escaped;
 * NULL as "". */
void json_string(FILE *f, const char *s);

#endif
