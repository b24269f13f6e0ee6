/* Internals of lib/pprof shared between its files. */
#ifndef CPROF_PPROF_PRIVATE_H
#define CPROF_PPROF_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The most a gzipped profile may inflate to. The bytes are untrusted and
 * a gzip bomb expands about 1000 times; real profiles are a few MiB.
 */
#define PPROF_MAX_INFLATED ((size_t)1 << 30)

/*
 * Inflates gzip data (one or more members, as `cat a.gz b.gz` makes) into a
 * malloc'd buffer. Returns -EBADMSG on corrupt or truncated data or trailing
 * garbage, -EFBIG past @max bytes of output, -ENOMEM.
 */
int pprof_gunzip(const uint8_t *in, size_t len, size_t max, uint8_t **ret_buf,
		 size_t *ret_len);

#endif
