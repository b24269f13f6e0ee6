/*
 * Reading the per-cpu rings. The kernel writes records at data_head; we read
 * from data_tail and hand space back by storing data_tail. Records wrap
 * around the end of the data area, so each is copied out whole first, and
 * its space is handed back before it is handled: a handler that is slow
 * (a sample's first unwind through a library loads its CFI) never keeps
 * the kernel from writing the next ones.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "perf/perf-private.h"
#include "util/util.h"

static void ring_copy(const uint8_t *data, size_t data_size, uint64_t pos, void *dst,
		      size_t len)
{
	size_t off = pos & (data_size - 1);
	size_t first = MIN(len, data_size - off);

	memcpy(dst, data + off, first);
	if (first < len)
		memcpy((uint8_t *)dst + first, data, len - first);
}

static int ring_drain(struct perf_session *s, struct perf_ring *ring,
		      const struct perf_handlers *h)
{
	struct perf_event_mmap_page *meta = ring->base;
	const uint8_t *data = (const uint8_t *)ring->base + meta->data_offset;
	uint64_t head, tail;
	int r = 0;

	if (!meta->data_offset) /* kernels before 4.1 */
		data = (const uint8_t *)ring->base + sysconf(_SC_PAGESIZE);
	/* Pairs with the kernel's store of data_head after writing records. */
	head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
	tail = meta->data_tail;
	while (tail < head) {
		struct perf_event_header hdr;

		ring_copy(data, ring->data_size, tail, &hdr, sizeof(hdr));
		if (hdr.size < sizeof(hdr) || hdr.size > head - tail) {
			/* Should not happen; resynchronise by dropping the rest. */
			s->stats.bad++;
			tail = head;
			break;
		}
		if (hdr.size > s->record_size) {
			s->stats.bad++;
			tail += hdr.size;
			continue;
		}
		ring_copy(data, ring->data_size, tail, s->record, hdr.size);
		tail += hdr.size;
		/* Our reads are done before the kernel may overwrite that space. */
		__atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
		r = perf_record_dispatch(s, s->record, hdr.size, h);
		if (r < 0)
			return r;
	}
	__atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
	return 0;
}

int perf_session_drain(struct perf_session *s, const struct perf_handlers *h)
{
	for (size_t c = 0; c < s->nrings; c++) {
		int r;

		if (!s->rings[c].base)
			continue;
		r = ring_drain(s, &s->rings[c], h);
		if (r < 0)
			return r;
	}
	return 0;
}
