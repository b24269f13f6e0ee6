/*
 * The set of sampled blocks still live, so that free() of one emits a FREE
 * with its size. Every free() in the process asks the set, so lookups are
 * lock-free: an open-addressing table (linear probing) in its own mapping
 * (not the target's heap) and a sequence counter. Writers hold the event lock,
 * bump the counter to odd, move entries (backward-shift deletion, no
 * tombstones to accumulate), bump it to even. A reader that saw the counter
 * change, or odd, answers "maybe", and the caller takes the lock to be sure.
 *
 * A reader only ever looks up an address it is freeing: if that block was
 * sampled, its insertion happened before malloc returned it, hence before the
 * free. Inserts only fill empty slots and never hide an entry, so they need
 * no counter bump.
 *
 * The table is 4 MiB: a probe of a random slot misses the caches, and every
 * free() made one (15% of a malloc-bound program's time, measured). So a
 * filter comes first: 64 KiB of 8-bit counters indexed by another hash of
 * the address, incremented on insert and decremented on remove (a saturated
 * counter stays: "maybe" forever). A zero counter means "not in the set",
 * by the same ordering argument; it stays in the caches.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "agent.h"

#define LIVESET_BITS 18
#define LIVESET_SLOTS (1u << LIVESET_BITS)
#define LIVESET_MASK (LIVESET_SLOTS - 1)
/* Half full at most: probe sequences stay short. */
#define LIVESET_MAX (LIVESET_SLOTS / 2)

struct live_slot {
	uint64_t addr; /* 0 = empty */
	uint64_t size;
};

static struct live_slot *slots;
uint8_t liveset_filter[1u << LIVESET_FILTER_BITS];
#define filter liveset_filter
#define FILTER_BITS LIVESET_FILTER_BITS
uint64_t liveset_live;
#define live_count liveset_live
static uint32_t live_seq;

static uint32_t slot_of(uint64_t addr)
{
	return (uint32_t)(((addr >> 4) * 0x9e3779b97f4a7c15ull) >> (64 - LIVESET_BITS));
}

static uint32_t filter_of(uint64_t addr)
{
	return liveset_filter_slot(addr);
}

static void filter_add(uint64_t addr)
{
	uint8_t *c = &filter[filter_of(addr)];

	if (*c != 255)
		__atomic_store_n(c, (uint8_t)(*c + 1), __ATOMIC_RELEASE);
}

static void filter_sub(uint64_t addr)
{
	uint8_t *c = &filter[filter_of(addr)];

	if (*c != 255 && *c != 0)
		__atomic_store_n(c, (uint8_t)(*c - 1), __ATOMIC_RELAXED);
}

int liveset_init(void)
{
	void *p;

	if (slots)
		return 0;
	p = mmap(NULL, LIVESET_SLOTS * sizeof(*slots), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	slots = p;
	return 0;
}


void liveset_clear(void)
{
	if (!slots || live_count == 0)
		return;
	__atomic_store_n(&live_seq, live_seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	/* Give the pages back too: a session may have touched many. */
	madvise(slots, LIVESET_SLOTS * sizeof(*slots), MADV_DONTNEED);
	memset(filter, 0, sizeof(filter));
	__atomic_store_n(&live_count, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&live_seq, live_seq + 1, __ATOMIC_RELEASE);
}

bool liveset_insert(uint64_t addr, uint64_t size)
{
	uint32_t i;

	if (!slots || addr == 0 || live_count >= LIVESET_MAX)
		return false;
	for (i = slot_of(addr); slots[i].addr; i = (i + 1) & LIVESET_MASK) {
		if (slots[i].addr == addr) {
			/* Freed behind our back (e.g. by a path we do not hook). */
			slots[i].size = size;
			return true;
		}
	}
	slots[i].size = size;
	filter_add(addr);
	__atomic_store_n(&slots[i].addr, addr, __ATOMIC_RELEASE);
	__atomic_store_n(&live_count, live_count + 1, __ATOMIC_RELAXED);
	return true;
}

bool liveset_maybe_contains(uint64_t addr)
{
	if (__atomic_load_n(&filter[filter_of(addr)], __ATOMIC_ACQUIRE) == 0)
		return false;
	for (int tries = 0; tries < 2; tries++) {
		uint32_t s1 = __atomic_load_n(&live_seq, __ATOMIC_ACQUIRE), i;
		bool found = false;
		uint64_t a;

		if (s1 & 1)
			return true;
		for (i = slot_of(addr); (a = __atomic_load_n(&slots[i].addr, __ATOMIC_RELAXED));
		     i = (i + 1) & LIVESET_MASK) {
			if (a == addr) {
				found = true;
				break;
			}
		}
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&live_seq, __ATOMIC_RELAXED) == s1)
			return found;
	}
	return true;
}

/* Is slot @k's home h outside the cyclic range (i, j]? Then it may move to i. */
static bool may_move(uint32_t i, uint32_t j, uint32_t h)
{
	return i <= j ? (h <= i || h > j) : (h <= i && h > j);
}

bool liveset_remove(uint64_t addr, uint64_t *ret_size)
{
	uint32_t i, j;

	if (!slots || live_count == 0)
		return false;
	for (i = slot_of(addr); slots[i].addr != addr; i = (i + 1) & LIVESET_MASK)
		if (!slots[i].addr)
			return false;
	*ret_size = slots[i].size;
	filter_sub(addr);

	__atomic_store_n(&live_seq, live_seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	for (j = (i + 1) & LIVESET_MASK; slots[j].addr; j = (j + 1) & LIVESET_MASK) {
		if (may_move(i, j, slot_of(slots[j].addr))) {
			slots[i].size = slots[j].size;
			__atomic_store_n(&slots[i].addr, slots[j].addr, __ATOMIC_RELAXED);
			i = j;
		}
	}
	__atomic_store_n(&slots[i].addr, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&live_count, live_count - 1, __ATOMIC_RELAXED);
	__atomic_store_n(&live_seq, live_seq + 1, __ATOMIC_RELEASE);
	return true;
}
