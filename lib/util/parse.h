/* Parsers for what users type: Go-style durations, rates, pids. They reject
 * rather than guess: trailing garbage, overflow and negatives are -EINVAL or
 * -ERANGE. Fuzzed (issue 6): keep them free of side effects. */
#ifndef CPROF_PARSE_H
#define CPROF_PARSE_H

#include <stdint.h>
#include <sys/types.h>

/*
 * Go's time.ParseDuration grammar without the sign: one or more
 * "<decimal number><unit>" with units ns, us (or µs), ms, s, m, h, e.g.
 * "500ms", "30s", "1m30s", "1.5h". Returns 0, -EINVAL (syntax, missing unit,
 * negative) or -ERANGE (beyond ~292 years of nanoseconds).
 */
int parse_duration(const char *s, uint64_t *ret_ns);

/* Formats @ns the way Go prints durations ("1m30s", "500ms", "0s"). */
void format_duration(uint64_t ns, char *buf, size_t size);

/* A decimal integer in [min, max], nothing else. -EINVAL or -ERANGE. */
int parse_int64(const char *s, int64_t min, int64_t max, int64_t *ret);

/* A pid: decimal, 1..PID_MAX_LIMIT (4194304). */
int parse_pid(const char *s, pid_t *ret);

#endif
