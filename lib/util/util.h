/* Small helpers shared by every room of lib/: array growth, a u64 hash map,
 * time. Nothing here prints or aborts: allocation failures return -ENOMEM. */
#ifndef CPROF_UTIL_H
#define CPROF_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* The noun for a count in a message: "1 sample", "0 samples", "2 samples". */
static inline const char *plural(unsigned long long n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

/* a + b held at INT64_MAX or INT64_MIN instead of overflowing: sums of the
 * values of a profile made elsewhere may reach any int64. */
static inline int64_t add_saturated(int64_t a, int64_t b)
{
	int64_t r;

	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

/* |v|, with INT64_MIN (whose negation overflows) held at INT64_MAX. */
static inline int64_t abs_saturated(int64_t v)
{
	return v == INT64_MIN ? INT64_MAX : v < 0 ? -v : v;
}

/*
 * Make room for at least @need elements of @elem bytes in *@ptr, which has
 * room for *@alloc now. Grows geometrically. On failure *@ptr and *@alloc are
 * untouched and -ENOMEM is returned.
 */
int grow_array(void **ptr, size_t *alloc, size_t need, size_t elem);

/* GROW(v, nr + 1, alloc): the typed form of grow_array(). */
#define GROW(ptr, need, alloc) grow_array((void **)&(ptr), &(alloc), (need), sizeof(*(ptr)))

/*
 * An open-addressing hash map from u64 keys to u64 values. Key 0 is allowed.
 * Used for PC caches and deduplication; not for untrusted sizes.
 */
struct u64map {
	uint64_t *keys;
	uint64_t *values;
	uint8_t *used;
	size_t size; /* slots, a power of two */
	size_t count;
};

void u64map_init(struct u64map *m);
void u64map_release(struct u64map *m);
/* Returns true and sets *ret_value when @key is present. */
bool u64map_get(const struct u64map *m, uint64_t key, uint64_t *ret_value);
/* Inserts or replaces. Returns 0 or -ENOMEM. */
int u64map_put(struct u64map *m, uint64_t key, uint64_t value);
/* Removes @key; false when it was not there. */
bool u64map_del(struct u64map *m, uint64_t key);

/* 64-bit hash of a byte string (FNV-1a then a final mix). */
uint64_t hash_bytes(const void *data, size_t len, uint64_t seed);
uint64_t hash_u64(uint64_t x);

/* Writes all @len bytes to @fd, retrying after EINTR and short writes.
 * Returns 0 or -errno of the failed write (-EIO if it made no progress). */
int write_full(int fd, const void *buf, size_t len);

/* CLOCK_MONOTONIC and CLOCK_REALTIME in nanoseconds. */
uint64_t now_monotonic_ns(void);
uint64_t now_realtime_ns(void);

/* Interned strings: one copy of each distinct string, pointers stable until
 * strpool_release(). */
struct strpool {
	char **strings;
	size_t nr, alloc;
	struct u64map index; /* hash -> index in strings; collisions probe hash+1 */
};
void strpool_init(struct strpool *sp);
void strpool_release(struct strpool *sp);
/* Returns the pooled copy of @s (NULL on -ENOMEM). @s may be NULL: returns "". */
const char *strpool_intern(struct strpool *sp, const char *s);

#endif
