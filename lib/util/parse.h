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

/*
 * A size in bytes: a decimal integer with an optional unit, case-insensitive:
 * B; K, KB, KiB (1024); M, MB, MiB (1024^2); G, GB, GiB (1024^3). Binary in
 * every spelling, as sampling rates are ("512KiB" is Go's MemProfileRate).
 * Returns 0, -EINVAL (syntax, negative) or -ERANGE (beyond 2^63).
 */
int parse_size(const char *s, uint64_t *ret);

/* A pid: decimal, 1..PID_MAX_LIMIT (4194304). */
int parse_pid(const char *s, pid_t *ret);

#endif
