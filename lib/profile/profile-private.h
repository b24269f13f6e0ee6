/*
 * Internals of lib/profile shared between its files and its unit test (which
 * uses the hashes to plant collisions). Not for other rooms.
 *
 * Both dedup maps go from a 64-bit hash to an index. Hashes are not unique:
 * an entry whose hash slot is taken by a different key goes to hash + 1,
 * hash + 2, ... (the first free one), and every lookup walks the same chain
 * comparing real keys until it meets a free hash. Nothing is ever removed,
 * so a chain is never broken.
 */
#ifndef CPROF_PROFILE_PRIVATE_H
#define CPROF_PROFILE_PRIVATE_H

#include "profile/profile.h"

/* The strings must be interned in the profile: they are hashed by address. */
uint64_t profile_function_hash(const char *name, const char *system_name, const char *file,
			       int64_t start_line);

/*
 * Labels must be in their stored form: interned strings, num 0 and num_unit
 * NULL for a string label, num_unit NULL rather than "" for a numeric one.
 */
uint64_t profile_sample_hash(const uint64_t *location_ids, size_t nlocations,
			     const struct profile_label *labels, size_t nlabels);

#endif
