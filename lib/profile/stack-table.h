/*
 * Stacks as buckets: each distinct (stack, key) once, in the order first
 * seen, with a value of the caller's beside it. The heap profile's buckets
 * are (allocation stack, block size), the contention profiles' (waiting or
 * unlocking stack, 0); both add one sample per bucket at the end.
 */
#ifndef CPROF_PROFILE_STACK_TABLE_H
#define CPROF_PROFILE_STACK_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "profile/profile.h"
#include "util/util.h"

struct stack_bucket {
	const uint64_t *pcs; /* leaf first */
	size_t npcs;
	uint64_t key;
	void *value; /* value_size bytes, zeroed when the bucket is made */
};

struct stack_table {
	size_t value_size;
	struct stack_bucket *buckets;
	size_t nbuckets, alloc;
	struct u64map index; /* hash(stack, key) -> bucket index + 1, probing hash + 1 */
	uint64_t *locs;	     /* stack_table_add_sample()'s location ids */
	size_t locs_alloc;
};

/* Buckets whose values are @value_size bytes each. */
void stack_table_init(struct stack_table *t, size_t value_size);
/* Frees the buckets and their values; the table may be initialized again. */
void stack_table_release(struct stack_table *t);

/*
 * The index of the bucket of (@pcs[0..@n), @key), made (its value zeroed)
 * when new, in *@ret_index. 0 or -ENOMEM (then the table is as it was).
 */
int stack_table_find(struct stack_table *t, const uint64_t *pcs, size_t n, uint64_t key,
		     size_t *ret_index);

/* Adds bucket @i's stack to @p as one sample of @values and @labels. */
int stack_table_add_sample(struct stack_table *t, struct profile *p, size_t i,
			   const int64_t *values, const struct profile_label *labels,
			   size_t nlabels);

#endif
