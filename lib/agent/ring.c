/*
 * The producer side of the ring in the memfd (protocol in wire.h).
 *
 * Many threads allocate, but sampled events are rare (one per `rate` bytes),
 * so producers take a lock of the agent's own (lock.c) rather than reserving space
 * with atomics: it keeps records contiguous and in order. The lock lives in
 * the agent's memory, not in the memfd, so cprof cannot wedge it. The lock is
 * only ever taken with the recursion guard set, so a signal handler that
 * allocates on a thread holding it passes through instead of deadlocking.
 */
#include <string.h>

#include "agent.h"
#include "raw.h"

struct ring agent_ring;

static int event_word;

void event_lock(void)
{
	agent_lock_take(&event_word);
}

void event_unlock(void)
{
	agent_lock_give(&event_word);
}

void *ring_reserve(uint32_t bytes)
{
	void *r = ring_try_reserve(bytes);

	if (!r && agent_ring.hdr)
		__atomic_fetch_add(&agent_ring.hdr->lost, 1, __ATOMIC_RELAXED);
	return r;
}

void *ring_try_reserve(uint32_t bytes)
{
	struct cprof_wire_header *h = agent_ring.hdr;
	uint64_t head, tail, off, pad;

	if (!h)
		return NULL;
	head = h->data_head; /* only producers write it, under the lock */
	tail = __atomic_load_n(&h->data_tail, __ATOMIC_ACQUIRE);
	off = head & (agent_ring.size - 1);
	pad = off + bytes > agent_ring.size ? agent_ring.size - off : 0;
	/* A data_tail ahead of data_head or too far behind is cprof's bug; it
	 * only means "full" here. */
	if (tail > head || head - tail + pad + bytes > agent_ring.size)
		return NULL;
	if (pad) {
		struct cprof_wire_record *r = (void *)(agent_ring.data + off);

		r->type = CPROF_REC_PAD;
		r->size = (uint32_t)pad;
		head += pad;
		__atomic_store_n(&h->data_head, head, __ATOMIC_RELEASE);
		off = 0;
	}
	return agent_ring.data + off;
}

void ring_commit(uint32_t bytes)
{
	struct cprof_wire_header *h = agent_ring.hdr;

	__atomic_store_n(&h->data_head, h->data_head + bytes, __ATOMIC_RELEASE);
}
