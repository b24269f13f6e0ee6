#include "profile/stack-table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void stack_table_init(struct stack_table *t, size_t value_size)
{
	memset(t, 0, sizeof(*t));
	/* The stack follows the value in one block: keep it aligned. */
	t->value_size = (value_size + 7) & ~(size_t)7;
	u64map_init(&t->index);
}

void stack_table_release(struct stack_table *t)
{
	for (size_t i = 0; i < t->nbuckets; i++)
		free(t->buckets[i].value);
	free(t->buckets);
	free(t->locs);
	u64map_release(&t->index);
	stack_table_init(t, 0);
}

int stack_table_find(struct stack_table *t, const uint64_t *pcs, size_t n, uint64_t key,
		     size_t *ret_index)
{
	uint64_t hash = hash_bytes(pcs, n * sizeof(*pcs), hash_u64(key)), v, probe;
	struct stack_bucket *b;
	uint64_t *copy;
	char *block;
	int r;

	for (probe = hash; u64map_get(&t->index, probe, &v); probe++) {
		b = &t->buckets[v - 1];
		if (b->key == key && b->npcs == n && !memcmp(b->pcs, pcs, n * sizeof(*pcs))) {
			*ret_index = v - 1;
			return 0;
		}
	}
	r = GROW(t->buckets, t->nbuckets + 1, t->alloc);
	if (r < 0)
		return r;
	block = calloc(1, t->value_size + n * sizeof(*pcs) + 1);
	if (!block)
		return -ENOMEM;
	copy = (uint64_t *)(block + t->value_size);
	memcpy(copy, pcs, n * sizeof(*pcs));
	r = u64map_put(&t->index, probe, t->nbuckets + 1);
	if (r < 0) {
		free(block);
		return r;
	}
	t->buckets[t->nbuckets] = (struct stack_bucket){ .pcs = copy, .npcs = n, .key = key,
							 .value = block };
	*ret_index = t->nbuckets++;
	return 0;
}

int stack_table_add_sample(struct stack_table *t, struct profile *p, size_t i,
			   const int64_t *values, const struct profile_label *labels,
			   size_t nlabels)
{
	const struct stack_bucket *b = &t->buckets[i];
	int r = GROW(t->locs, b->npcs, t->locs_alloc);

	for (size_t j = 0; r == 0 && j < b->npcs; j++)
		r = profile_location_for_address(p, b->pcs[j], &t->locs[j]);
	if (r == 0)
		r = profile_add_sample(p, t->locs, b->npcs, values, labels, nlabels);
	return r;
}
