#include "util/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int grow_array(void **ptr, size_t *alloc, size_t need, size_t elem)
{
	size_t n;
	void *p;

	if (need <= *alloc)
		return 0;
	n = *alloc ? *alloc : 8;
	while (n < need) {
		if (n > SIZE_MAX / 2)
			return -ENOMEM;
		n *= 2;
	}
	if (elem && n > SIZE_MAX / elem)
		return -ENOMEM;
	p = realloc(*ptr, n * elem);
	if (!p)
		return -ENOMEM;
	*ptr = p;
	*alloc = n;
	return 0;
}

uint64_t hash_u64(uint64_t x)
{
	/* splitmix64's finalizer: cheap and mixes every bit. */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

uint64_t hash_bytes(const void *data, size_t len, uint64_t seed)
{
	const unsigned char *p = data;
	uint64_t h = 0xcbf29ce484222325ULL ^ seed;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return hash_u64(h);
}

void u64map_init(struct u64map *m)
{
	memset(m, 0, sizeof(*m));
}

void u64map_release(struct u64map *m)
{
	if (!m)
		return;
	free(m->keys);
	free(m->values);
	free(m->used);
	u64map_init(m);
}

static size_t u64map_slot(const struct u64map *m, uint64_t key)
{
	size_t mask = m->size - 1;
	size_t i = hash_u64(key) & mask;

	while (m->used[i] && m->keys[i] != key)
		i = (i + 1) & mask;
	return i;
}

bool u64map_get(const struct u64map *m, uint64_t key, uint64_t *ret_value)
{
	size_t i;

	if (!m->size)
		return false;
	i = u64map_slot(m, key);
	if (!m->used[i])
		return false;
	if (ret_value)
		*ret_value = m->values[i];
	return true;
}

static int u64map_resize(struct u64map *m, size_t size)
{
	struct u64map n = { .size = size };

	n.keys = calloc(size, sizeof(*n.keys));
	n.values = calloc(size, sizeof(*n.values));
	n.used = calloc(size, 1);
	if (!n.keys || !n.values || !n.used) {
		u64map_release(&n);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->size; i++) {
		size_t j;

		if (!m->used[i])
			continue;
		j = u64map_slot(&n, m->keys[i]);
		n.used[j] = 1;
		n.keys[j] = m->keys[i];
		n.values[j] = m->values[i];
		n.count++;
	}
	u64map_release(m);
	*m = n;
	return 0;
}

bool u64map_del(struct u64map *m, uint64_t key)
{
	size_t mask, i, j;

	if (!m->size)
		return false;
	mask = m->size - 1;
	i = u64map_slot(m, key);
	if (!m->used[i])
		return false;
	m->used[i] = 0;
	m->count--;
	/*
	 * No tombstones: each later entry of the probe run moves back into
	 * the hole unless its home slot lies cyclically in (hole, entry],
	 * so that every key stays reachable from its home without a gap.
	 */
	for (j = (i + 1) & mask; m->used[j]; j = (j + 1) & mask) {
		size_t home = hash_u64(m->keys[j]) & mask;

		if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
			continue;
		m->keys[i] = m->keys[j];
		m->values[i] = m->values[j];
		m->used[i] = 1;
		m->used[j] = 0;
		i = j;
	}
	return true;
}

int u64map_put(struct u64map *m, uint64_t key, uint64_t value)
{
	size_t i;

	/* Keep the load under 1/2 so probe chains stay short. */
	if ((m->count + 1) * 2 > m->size) {
		int r = u64map_resize(m, m->size ? m->size * 2 : 64);

		if (r < 0)
			return r;
	}
	i = u64map_slot(m, key);
	if (!m->used[i]) {
		m->used[i] = 1;
		m->keys[i] = key;
		m->count++;
	}
	m->values[i] = value;
	return 0;
}

static uint64_t clock_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t now_monotonic_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

uint64_t now_realtime_ns(void)
{
	return clock_ns(CLOCK_REALTIME);
}

void strpool_init(struct strpool *sp)
{
	memset(sp, 0, sizeof(*sp));
}

void strpool_release(struct strpool *sp)
{
	if (!sp)
		return;
	for (size_t i = 0; i < sp->nr; i++)
		free(sp->strings[i]);
	free(sp->strings);
	u64map_release(&sp->index);
	strpool_init(sp);
}

const char *strpool_intern(struct strpool *sp, const char *s)
{
	uint64_t h, idx;
	size_t len;
	char *copy;

	if (!s)
		s = "";
	len = strlen(s);
	h = hash_bytes(s, len, 0);
	/* Probe h, h+1, ... : a collision of 64-bit hashes just takes the next key. */
	for (;; h++) {
		if (!u64map_get(&sp->index, h, &idx))
			break;
		if (!strcmp(sp->strings[idx], s))
			return sp->strings[idx];
	}
	if (GROW(sp->strings, sp->nr + 1, sp->alloc) < 0)
		return NULL;
	copy = strdup(s);
	if (!copy)
		return NULL;
	if (u64map_put(&sp->index, h, sp->nr) < 0) {
		free(copy);
		return NULL;
	}
	sp->strings[sp->nr++] = copy;
	return copy;
}

int write_full(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		/* write() of a nonzero count returning 0 makes no progress. */
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
