/*
 * lib/channel on hand-made rings (channel_from_memory): records handed over
 * as they are, PAD skipped, and every malformed case refused with -EPROTO
 * (never a crash, never a read outside the ring).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "channel/channel.h"

#define RING (64u << 10)

static uint8_t mem[CPROF_WIRE_HEADER_SIZE + RING];
static struct cprof_wire_header *hdr = (struct cprof_wire_header *)mem;
static uint8_t *ring = mem + CPROF_WIRE_HEADER_SIZE;

struct counts {
	unsigned allocs, frees, events;
	uint64_t last_size;
};

static int on_alloc(const struct cprof_wire_alloc *r, void *arg)
{
	struct counts *c = arg;

	c->allocs++;
	c->last_size = r->size;
	return 0;
}

static int on_free(const struct cprof_wire_free *r, void *arg)
{
	(void)r;
	((struct counts *)arg)->frees++;
	return 0;
}

static int on_event(const struct cprof_wire_event *r, void *arg)
{
	(void)r;
	((struct counts *)arg)->events++;
	return 0;
}

static void fresh(void)
{
	memset(mem, 0, sizeof(mem));
	hdr->magic = CPROF_WIRE_MAGIC;
	hdr->version = CPROF_WIRE_VERSION;
	hdr->header_size = CPROF_WIRE_HEADER_SIZE;
	hdr->ring_size = RING;
	hdr->stack_max = CPROF_WIRE_STACK_MAX;
}

/* Writes an ALLOC with @stack bytes of stack at ring offset @at; its size. */
static uint32_t put_alloc(uint32_t at, uint32_t stack, uint64_t size)
{
	struct cprof_wire_alloc *a = (void *)(ring + at);
	uint32_t bytes = (uint32_t)((sizeof(*a) + stack + 7) & ~7u);

	a->hdr.type = CPROF_REC_ALLOC;
	a->hdr.size = bytes;
	a->size = size;
	a->stack_size = stack;
	return bytes;
}

static uint32_t put_free(uint32_t at)
{
	struct cprof_wire_free *f = (void *)(ring + at);

	f->hdr.type = CPROF_REC_FREE;
	f->hdr.size = sizeof(*f);
	return sizeof(*f);
}

static int drain(struct counts *c)
{
	struct channel_handlers h = { .alloc = on_alloc, .free = on_free, .event = on_event, .arg = c };
	struct channel *ch;
	int r;

	memset(c, 0, sizeof(*c));
	cr_assert_eq(channel_from_memory(&ch, mem, sizeof(mem)), 0);
	r = channel_drain(ch, &h);
	channel_close(ch);
	return r;
}

Test(channel, good_records_and_pad)
{
	struct counts c;
	uint32_t at = 0, n;

	fresh();
	at += put_alloc(at, 100, 4096);
	at += put_free(at);
	/* A record that would not fit before the end: PAD, then it at 0. */
	n = RING - at;
	((struct cprof_wire_record *)(ring + at))->type = CPROF_REC_PAD;
	((struct cprof_wire_record *)(ring + at))->size = n;
	hdr->data_tail = 0;
	hdr->data_head = at + n;
	cr_assert_eq(drain(&c), 2);
	cr_assert_eq(c.allocs, 1);
	cr_assert_eq(c.frees, 1);
	cr_assert_eq(c.last_size, 4096);
	cr_assert_eq(hdr->data_tail, hdr->data_head, "the space was not given back");
}

Test(channel, refuses_bad_headers)
{
	struct channel *ch;

	fresh();
	hdr->magic ^= 1;
	cr_assert_eq(channel_from_memory(&ch, mem, sizeof(mem)), -EPROTO);
	fresh();
	hdr->version = 99;
	cr_assert_eq(channel_from_memory(&ch, mem, sizeof(mem)), -EPROTO);
	fresh();
	hdr->ring_size = RING + 8; /* not a power of two */
	cr_assert_eq(channel_from_memory(&ch, mem, sizeof(mem)), -EPROTO);
	fresh();
	hdr->ring_size = RING * 2; /* larger than the memory */
	cr_assert_eq(channel_from_memory(&ch, mem, sizeof(mem)), -EPROTO);
	fresh();
	hdr->stack_max = CPROF_WIRE_STACK_MAX + 1;
	cr_assert_eq(channel_from_memory(&ch, mem, sizeof(mem)), -EPROTO);
	fresh();
	cr_assert_eq(channel_from_memory(&ch, mem, 100), -EPROTO);
}

Test(channel, refuses_malformed_rings)
{
	struct counts c;
	uint32_t n;

	/* size 0 */
	fresh();
	hdr->data_head = 64;
	cr_assert_eq(drain(&c), -EPROTO);
	/* size not a multiple of 8 */
	fresh();
	n = put_alloc(0, 0, 1);
	((struct cprof_wire_record *)ring)->size = n + 3;
	hdr->data_head = n + 8;
	cr_assert_eq(drain(&c), -EPROTO);
	/* size past the published head */
	fresh();
	n = put_alloc(0, 0, 1);
	hdr->data_head = n - 8;
	cr_assert_eq(drain(&c), -EPROTO);
	/* stack_size larger than the record */
	fresh();
	n = put_alloc(0, 64, 1);
	((struct cprof_wire_alloc *)ring)->stack_size = 4096;
	hdr->data_head = n;
	cr_assert_eq(drain(&c), -EPROTO);
	/* stack_size over the maximum */
	fresh();
	n = put_alloc(0, 64, 1);
	((struct cprof_wire_alloc *)ring)->stack_size = CPROF_WIRE_STACK_MAX + 8;
	hdr->data_head = n;
	cr_assert_eq(drain(&c), -EPROTO);
	/* a record running past the ring's end (only its header is written) */
	fresh();
	((struct cprof_wire_record *)(ring + RING - 64))->type = CPROF_REC_ALLOC;
	((struct cprof_wire_record *)(ring + RING - 64))->size = sizeof(struct cprof_wire_alloc);
	hdr->data_tail = RING - 64;
	hdr->data_head = RING - 64 + sizeof(struct cprof_wire_alloc);
	cr_assert_eq(drain(&c), -EPROTO);
	/* a PAD that does not end at the ring's end */
	fresh();
	((struct cprof_wire_record *)ring)->type = CPROF_REC_PAD;
	((struct cprof_wire_record *)ring)->size = 64;
	hdr->data_head = 64;
	cr_assert_eq(drain(&c), -EPROTO);
	/* an unknown type */
	fresh();
	((struct cprof_wire_record *)ring)->type = 77;
	((struct cprof_wire_record *)ring)->size = 64;
	hdr->data_head = 64;
	cr_assert_eq(drain(&c), -EPROTO);
	/* head - tail over the ring, tail past head */
	fresh();
	hdr->data_head = RING + 8;
	cr_assert_eq(drain(&c), -EPROTO);
	fresh();
	hdr->data_tail = 64;
	hdr->data_head = 8;
	cr_assert_eq(drain(&c), -EPROTO);
	/* a tail that is not a record boundary (8-aligned): found by fuzzing,
	 * it put a record header across the ring's end */
	fresh();
	hdr->data_tail = RING - 2;
	hdr->data_head = RING + 6;
	cr_assert_eq(drain(&c), -EPROTO);
	/* a FREE shorter than its struct */
	fresh();
	((struct cprof_wire_record *)ring)->type = CPROF_REC_FREE;
	((struct cprof_wire_record *)ring)->size = 16;
	hdr->data_head = 16;
	cr_assert_eq(drain(&c), -EPROTO);
}

/* A walked record's stack[] is addresses: whole ones, at least one, at most
 * a walk's. The same rule for an ALLOC (its flags) and an EVENT (its own). */
static void walked_case(uint32_t type, uint32_t stack, int want)
{
	struct counts c;
	uint32_t n;

	fresh();
	n = put_alloc(0, stack, 1);
	((struct cprof_wire_record *)ring)->type = type;
	if (type == CPROF_REC_ALLOC)
		((struct cprof_wire_alloc *)ring)->flags = CPROF_ALLOC_WALKED;
	else
		((struct cprof_wire_event *)ring)->flags = CPROF_EVENT_WALKED;
	hdr->data_head = n;
	cr_assert_eq(drain(&c), want, "type %u, %u bytes of addresses", type, stack);
	if (want == 1)
		cr_assert_eq(c.allocs + c.events, 1);
}

Test(channel, walked_stacks_are_whole_addresses)
{
	static const uint32_t types[] = { CPROF_REC_ALLOC, CPROF_REC_EVENT };

	for (int i = 0; i < 2; i++) {
		walked_case(types[i], 6 * 8, 1);
		walked_case(types[i], CPROF_RULES_MAX_FRAMES * 8, 1);
		walked_case(types[i], 0, -EPROTO);
		walked_case(types[i], 6 * 8 + 4, -EPROTO);
		walked_case(types[i], (CPROF_RULES_MAX_FRAMES + 1) * 8, -EPROTO);
	}
}

/* A memfd as the agent makes it, with @seals added (0: none). */
static int agent_memfd(unsigned seals)
{
	int fd = memfd_create("cprof-agent", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	cr_assert_geq(fd, 0);
	fresh();
	cr_assert_eq(write(fd, mem, sizeof(mem)), (ssize_t)sizeof(mem));
	if (seals)
		cr_assert_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

/* Only a file that can never shrink is mapped: one cut short under
 * cprof's mapping would be SIGBUS at its next read. */
Test(channel, maps_only_a_memfd_sealed_against_shrinking)
{
	struct channel *ch = NULL;
	int open_fd = agent_memfd(0), sealed_fd = agent_memfd(F_SEAL_SHRINK | F_SEAL_SEAL);

	cr_assert_eq(channel_open(&ch, getpid(), open_fd), -EPROTO);
	cr_assert_eq(channel_open(&ch, getpid(), sealed_fd), 0);
	cr_assert_not_null(ch);
	cr_assert_eq(ftruncate(sealed_fd, 0), -1, "a sealed memfd was cut short");
	channel_close(ch);
	close(open_fd);
	close(sealed_fd);
}

/* A drain past its deadline stops at the next 256th record, the space of
 * what it took given back; the next drain takes the rest. */
Test(channel, drain_until_stops_at_its_deadline)
{
	struct channel_handlers h;
	struct channel *ch;
	struct counts c = { 0 };
	uint32_t at = 0;

	fresh();
	while (at + sizeof(struct cprof_wire_free) <= RING && c.frees < 600) {
		at += put_free(at);
		c.frees++;
	}
	cr_assert_geq(c.frees, 600, "the test ring holds too few records");
	hdr->data_tail = 0;
	hdr->data_head = at;
	memset(&c, 0, sizeof(c));
	h = (struct channel_handlers){ .alloc = on_alloc, .free = on_free, .event = on_event,
				       .arg = &c };
	cr_assert_eq(channel_from_memory(&ch, mem, sizeof(mem)), 0);
	cr_assert_eq(channel_drain_until(ch, &h, 0), 256);
	cr_assert_eq(hdr->data_tail, 256 * sizeof(struct cprof_wire_free));
	cr_assert_eq(channel_drain(ch, &h), 600 - 256);
	cr_assert_eq(c.frees, 600);
	cr_assert_eq(hdr->data_tail, hdr->data_head);
	channel_close(ch);
}
