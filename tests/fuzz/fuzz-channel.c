/*
 * channel_drain() on an agent ring whose every byte is the fuzzer's: what
 * cprof reads from a target's memfd (lib/channel/). The header is a valid
 * one (magic, version, sizes: a wrong one is refused at open, checked too)
 * except for data_head and data_tail, taken from the input; the ring's
 * bytes follow, zero past the input's end. Handlers read every byte of the
 * records they get (the stack copy included), so AddressSanitizer sees any
 * view reaching past the copy.
 *
 * Input: u64 data_head, u64 data_tail, u8 flags, then the ring.
 *   flags bit 0: use the input's first 384 bytes after the flags as the
 *   whole header instead (exercises the header checks).
 */
#include <errno.h>
#include <string.h>

#include "channel/channel.h"
#include "fuzz.h"

#define RING (64u << 10)

static uint8_t mem[CPROF_WIRE_HEADER_SIZE + RING];

struct seen {
	uint64_t sum;
	unsigned records;
};

static void touch(struct seen *s, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		s->sum += b[i];
}

static int on_alloc(const struct cprof_wire_alloc *r, void *arg)
{
	FUZZ_CHECK(r->stack_size <= CPROF_WIRE_STACK_MAX, "stack_size %u", r->stack_size);
	FUZZ_CHECK(sizeof(*r) + r->stack_size <= r->hdr.size, "stack past the record");
	touch(arg, r, sizeof(*r) + r->stack_size);
	((struct seen *)arg)->records++;
	return 0;
}

static int on_event(const struct cprof_wire_event *r, void *arg)
{
	FUZZ_CHECK(r->stack_size <= CPROF_WIRE_STACK_MAX, "stack_size %u", r->stack_size);
	FUZZ_CHECK(sizeof(*r) + r->stack_size <= r->hdr.size, "stack past the record");
	touch(arg, r, sizeof(*r) + r->stack_size);
	((struct seen *)arg)->records++;
	return 0;
}

static int on_free(const struct cprof_wire_free *r, void *arg)
{
	touch(arg, r, sizeof(*r));
	((struct seen *)arg)->records++;
	return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cprof_wire_header *h = (struct cprof_wire_header *)mem;
	struct seen seen = { 0 };
	struct channel_handlers handlers = {
		.alloc = on_alloc, .free = on_free, .event = on_event, .arg = &seen,
	};
	struct channel *ch;
	uint64_t head = fuzz_u64(data, size), tail = fuzz_u64(data + (size > 8 ? 8 : size),
							     size > 8 ? size - 8 : 0);
	uint8_t flags = size > 16 ? data[16] : 0;
	size_t off = size > 17 ? 17 : size;
	int r;

	memset(mem, 0, sizeof(mem));
	h->magic = CPROF_WIRE_MAGIC;
	h->version = CPROF_WIRE_VERSION;
	h->header_size = CPROF_WIRE_HEADER_SIZE;
	h->ring_size = RING;
	h->stack_max = CPROF_WIRE_STACK_MAX;
	h->state = CPROF_STATE_RUNNING;
	if (flags & 1) {
		size_t n = size - off < sizeof(*h) ? size - off : sizeof(*h);

		memcpy(mem, data + off, n);
		off += n;
	}
	h->data_head = head;
	h->data_tail = tail;
	memcpy(mem + CPROF_WIRE_HEADER_SIZE, data + off,
	       size - off < RING ? size - off : RING);
	r = channel_from_memory(&ch, mem, sizeof(mem));
	if (r < 0) {
		FUZZ_CHECK(r == -EPROTO, "channel_from_memory: %d", r);
		return 0;
	}
	r = channel_drain(ch, &handlers);
	FUZZ_CHECK(r == -EPROTO || r >= 0, "channel_drain: %d", r);
	if (r >= 0)
		FUZZ_CHECK((unsigned)r == seen.records, "%d records said, %u handed over", r,
			   seen.records);
	channel_close(ch);
	return 0;
}
