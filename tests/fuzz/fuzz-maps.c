/*
 * maps_parse() on arbitrary bytes: /proc/PID/maps text comes from the target's
 * side of the fence. On success the result must keep the promises of
 * maps/maps.h, and maps_find() must agree with a linear scan.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "maps/maps.h"
#include "util/util.h"

static const struct map_entry *linear_find(const struct maps *m, uint64_t addr)
{
	for (size_t i = 0; i < m->n; i++)
		if (addr >= m->entries[i].start && addr < m->entries[i].end)
			return &m->entries[i];
	return NULL;
}

static void check_find(const struct maps *m, uint64_t addr)
{
	const struct map_entry *a = maps_find(m, addr), *b = linear_find(m, addr);

	FUZZ_CHECK(a == b, "maps_find(0x%llx) = %p, linear scan %p", (unsigned long long)addr,
		   (const void *)a, (const void *)b);
}

static void check_maps(const struct maps *m, size_t len)
{
	FUZZ_CHECK(m->n <= m->alloc, "n %zu alloc %zu", m->n, m->alloc);
	FUZZ_CHECK(m->text, "no text copy");
	for (size_t i = 0; i < m->n; i++) {
		const struct map_entry *e = &m->entries[i];

		FUZZ_CHECK(e->start < e->end, "entry %zu: [0x%llx, 0x%llx)", i,
			   (unsigned long long)e->start, (unsigned long long)e->end);
		FUZZ_CHECK(!i || e->start >= m->entries[i - 1].end,
			   "entry %zu overlaps or is out of order", i);
		FUZZ_CHECK((e->prot & ~(unsigned)(MAPS_READ | MAPS_WRITE | MAPS_EXEC)) == 0,
			   "prot %u", e->prot);
		FUZZ_CHECK(e->path && e->path >= m->text && e->path <= m->text + len,
			   "entry %zu: path outside the text copy", i);
		/* The path ends inside the copy (strnlen stops at its NUL). */
		FUZZ_CHECK(strnlen(e->path, (size_t)(m->text + len - e->path) + 1) <=
				   (size_t)(m->text + len - e->path),
			   "entry %zu: path not terminated inside the copy", i);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct maps m, sentinel;
	int r;

	memset(&m, 0xa5, sizeof(m));
	sentinel = m;
	r = maps_parse((const char *)data, size, &m);
	if (r < 0) {
		FUZZ_CHECK(r == -ENOMEM, "maps_parse: %d", r);
		FUZZ_CHECK(!memcmp(&m, &sentinel, sizeof(m)), "output clobbered on failure");
		return 0;
	}
	check_maps(&m, size);

	/* The edges of up to 32 entries spread over the table (every entry would
	 * make each input quadratic), and addresses drawn from the input. */
	for (size_t k = 0; k < MIN(m.n, (size_t)32); k++) {
		const struct map_entry *e = &m.entries[k * m.n / MIN(m.n, (size_t)32)];

		check_find(&m, e->start);
		check_find(&m, e->start - 1);
		check_find(&m, e->end);
		check_find(&m, e->end - 1);
		check_find(&m, e->start + (e->end - e->start) / 2);
	}
	for (uint64_t i = 0, h0 = hash_bytes(data, size, 0); i < 32; i++) {
		uint64_t h = hash_u64(h0 + i);

		check_find(&m, h);
		if (m.n) /* near an entry: random addresses rarely hit one */
			check_find(&m, m.entries[h % m.n].start + (h >> 48) - 0x8000);
	}
	check_find(&m, 0);
	check_find(&m, UINT64_MAX);

	maps_release(&m);
	FUZZ_CHECK(!m.entries && !m.text && !m.n, "maps_release left state behind");
	maps_release(&m); /* twice is harmless */
	return 0;
}
