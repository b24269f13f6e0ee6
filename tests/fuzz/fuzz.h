/*
 * Shared by the libFuzzer targets of tests/fuzz/. A broken invariant is a
 * finding like a crash: say which one, then abort() so that libFuzzer saves
 * the input as crash-<sha1>.
 */
#ifndef CPROF_FUZZ_H
#define CPROF_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                            \
	do {                                                                             \
		if (!(cond)) {                                                           \
			fprintf(stderr, "%s:%d: invariant broken: %s: ", __FILE__,       \
				__LINE__, #cond);                                        \
			fprintf(stderr, __VA_ARGS__);                                    \
			fputc('\n', stderr);                                             \
			abort();                                                         \
		}                                                                        \
	} while (0)

/* Little-endian reads of whatever bytes are left; missing bytes read as 0. */
static inline uint64_t fuzz_u64(const uint8_t *p, size_t avail)
{
	uint64_t v = 0;

	for (size_t i = 0; i < 8 && i < avail; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

#endif
