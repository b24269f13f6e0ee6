/*
 * The set of sampled blocks still live, so that free() of one emits a FREE
 * with its size. Every free() in the process asks it: a lookup takes no lock
 * and mostly touches one cache line.
 *
 * Why reads need no lock: a reader only looks up an address it is freeing,
 * so if that block was sampled its insertion happened before malloc returned
 * it, hence before the free. Inserts only fill empty slots and hide no entry.
 * Every other move (removal by backward shift, so no tombstones; growth;
 * clearing) holds the event lock and keeps a sequence counter odd while it
 * runs; a reader that saw the counter odd or changed answers "maybe", and the
 * caller takes the lock to be sure.
 *
 * What a free() pays, by how full the set is: empty, one load; up to
 * LIVESET_FEW entries, compares on the line it loaded anyway (agent.h); more,
 * a filter first (two bits per address, both in one 64-bit word; a clear bit
 * means "not in the set", by the same ordering; writers keep an 8-bit count
 * per bit, and a saturated count stays "maybe"), then an open-addressing
 * table (linear probing) in a mapping of its own, not the target's heap. The
 * table starts at 16 KiB, to stay in the caches, and grows fourfold while it
 * is more than half full, up to 4 MiB. Levels are never unmapped (a reader
 * may still be in one), only emptied and their pages given back; a grow
 * leaves the old level's filter as it was, since it covers every entry a
 * reader of that level can be freeing. Filters are wiped only with the whole
 * set (liveset_clear), when no answer matters any more.
 *
 * What these choices cost is measured by test-agent
 * (liveset_filter_lets_few_frees_through) and scripts/bench-heap.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "agent.h"
#include "raw.h"

#define LEVEL_BITS(k) (10 + 2 * (k)) /* 2^10 .. 2^18 slots */
#define LEVELS 5
#define FILTER_EXTRA_BITS 2          /* four filter bits per slot */
/* Half full at most: probe sequences stay short. */
#define LIVESET_MAX ((1u << LEVEL_BITS(LEVELS - 1)) / 2)
_Static_assert(LIVESET_MAX == LIVESET_CAPACITY, "agent.h's LIVESET_CAPACITY");

struct live_slot {
	uint64_t addr; /* 0 = empty */
	uint64_t size;
};

/* One mapping: slots, then filter words (page-aligned), then counts. */
struct level {
	unsigned bits, filter_bits;
	struct live_slot *slot;
	uint64_t *filter;
	uint8_t *count;
	void *map;
	size_t map_size;
};

static struct level levels[LEVELS];
static struct level *table; /* the current level */
struct liveset_ref liveset_ref;
static uint64_t live_count;
static uint32_t live_seq;

static uint32_t slot_of(const struct level *t, uint64_t addr)
{
	return (uint32_t)(((addr >> 4) * 0x9e3779b97f4a7c15ull) >> (64 - t->bits));
}

static uint32_t next_slot(const struct level *t, uint32_t i)
{
	return (i + 1) & ((1u << t->bits) - 1);
}

static void filter_add(struct level *t, uint64_t addr)
{
	uint64_t hash = liveset_filter_hash(addr), word = liveset_filter_word(hash, t->filter_bits);
	uint64_t *w = &t->filter[word], set = 0;

	for (int k = 0; k < 2; k++) {
		unsigned bit = liveset_filter_bit(hash, t->filter_bits, k);
		uint8_t *count = &t->count[word * 64 + bit];

		if (*count == 0)
			set |= 1ull << bit;
		if (*count != 255)
			++*count;
	}
	if (set)
		__atomic_store_n(w, *w | set, __ATOMIC_RELEASE);
}

static void filter_sub(struct level *t, uint64_t addr)
{
	uint64_t hash = liveset_filter_hash(addr), word = liveset_filter_word(hash, t->filter_bits);
	uint64_t *w = &t->filter[word], clear = 0;

	for (int k = 0; k < 2; k++) {
		unsigned bit = liveset_filter_bit(hash, t->filter_bits, k);
		uint8_t *count = &t->count[word * 64 + bit];

		if (*count == 255 || *count == 0)
			continue;
		if (--*count == 0)
			clear |= 1ull << bit;
	}
	if (clear)
		__atomic_store_n(w, *w & ~clear, __ATOMIC_RELAXED);
}

static size_t page_up(size_t n)
{
	return (n + 4095) & ~(size_t)4095;
}

static int map_level(int k)
{
	struct level *t = &levels[k];
	size_t slots_size, filter_size;
	uint8_t *p;

	if (t->map)
		return 0;
	t->bits = LEVEL_BITS(k);
	t->filter_bits = t->bits + FILTER_EXTRA_BITS;
	slots_size = page_up(((size_t)1 << t->bits) * sizeof(struct live_slot));
	filter_size = page_up(((size_t)1 << t->filter_bits) / 8);
	t->map_size = slots_size + filter_size + ((size_t)1 << t->filter_bits);
	p = mmap(NULL, t->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		 -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	t->slot = (struct live_slot *)p;
	t->filter = (uint64_t *)(p + slots_size);
	t->count = p + slots_size + filter_size;
	t->map = p;
	return 0;
}

/*
 * Why the blocks in liveset_ref.few are all a free() needs, without the
 * sequence counter: a thread that frees a sampled block X runs after X's
 * insertion, which stored X in a slot, then the state (release); it reads the
 * state (acquire) and then the slots. While X is live its slot stays X, and
 * the state cannot go back to empty, nor through MANY back to FEW_HELD. For
 * any other address a wrong answer is only a trip to the slow path (which
 * asks the table under the lock) or a correct "no".
 */
static void few_add(uint64_t addr)
{
	uint64_t state = liveset_ref.state;

	if (state == LIVESET_MANY)
		return;
	for (int i = 0; i < LIVESET_FEW; i++) {
		if (liveset_ref.few[i] == LIVESET_NO_BLOCK) {
			__atomic_store_n(&liveset_ref.few[i], addr, __ATOMIC_RELAXED);
			if (state == 0)
				__atomic_store_n(&liveset_ref.state, LIVESET_FEW_HELD, __ATOMIC_RELEASE);
			return;
		}
	}
	/* The filter already has every live block's bits (put()). */
	__atomic_store_n(&liveset_ref.state, LIVESET_MANY, __ATOMIC_RELEASE);
}

static void few_sub(uint64_t addr)
{
	if (live_count == 0) {
		/* Empty: slots left from before MANY go, and FEW_HELD may come back. */
		__atomic_store_n(&liveset_ref.state, 0, __ATOMIC_RELEASE);
		for (int i = 0; i < LIVESET_FEW; i++)
			__atomic_store_n(&liveset_ref.few[i], LIVESET_NO_BLOCK, __ATOMIC_RELAXED);
		return;
	}
	if (liveset_ref.state != LIVESET_FEW_HELD)
		return;
	for (int i = 0; i < LIVESET_FEW; i++)
		if (liveset_ref.few[i] == addr)
			__atomic_store_n(&liveset_ref.few[i], LIVESET_NO_BLOCK, __ATOMIC_RELAXED);
}

/* Make @t the current level, for writers and for readers. */
static void switch_to(struct level *t)
{
	__atomic_store_n(&table, t, __ATOMIC_RELEASE); /* liveset_maybe_contains() reads it */
	__atomic_store_n(&liveset_ref.filter, (uintptr_t)t->filter | t->filter_bits,
			 __ATOMIC_RELEASE);
}

int liveset_init(void)
{
	int r;

	if (table)
		return 0;
	for (int i = 0; i < LIVESET_FEW; i++)
		liveset_ref.few[i] = LIVESET_NO_BLOCK;
	r = map_level(0);
	if (r < 0)
		return r;
	switch_to(&levels[0]);
	return 0;
}

/* Writers only: open the window in which readers answer "maybe". */
static void seq_begin(void)
{
	__atomic_store_n(&live_seq, live_seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void seq_end(void)
{
	__atomic_store_n(&live_seq, live_seq + 1, __ATOMIC_RELEASE);
}

void liveset_clear(void)
{
	/* Back to the smallest level even when empty: its filter is hotter. */
	if (!table || (live_count == 0 && table == levels))
		return;
	seq_begin();
	live_count = 0;
	few_sub(0);
	switch_to(&levels[0]);
	/* Every level: grows left their filters and counts behind. */
	for (int k = 0; k < LEVELS; k++)
		if (levels[k].map)
			RAW3(SYS_madvise, levels[k].map, levels[k].map_size, MADV_DONTNEED);
	seq_end();
}

static void put(struct level *t, uint64_t addr, uint64_t size)
{
	uint32_t i;

	for (i = slot_of(t, addr); t->slot[i].addr; i = next_slot(t, i))
		;
	t->slot[i].size = size;
	filter_add(t, addr);
	__atomic_store_n(&t->slot[i].addr, addr, __ATOMIC_RELEASE);
}

/* Move every entry into the next level. False if there is none. */
static bool grow(void)
{
	struct level *old = table, *new = old + 1;

	if (new == levels + LEVELS || map_level((int)(new - levels)) < 0)
		return false;
	seq_begin();
	for (uint32_t i = 0; i < 1u << old->bits; i++)
		if (old->slot[i].addr)
			put(new, old->slot[i].addr, old->slot[i].size);
	switch_to(new);
	/* The old slots only; its filter stays for readers (see the top). */
	madvise(old->slot, ((size_t)1 << old->bits) * sizeof(struct live_slot), MADV_DONTNEED);
	seq_end();
	return true;
}

void liveset_prefetch(uint64_t addr)
{
	const struct level *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
	uint64_t hash = liveset_filter_hash(addr), word;

	if (!t)
		return;
	word = liveset_filter_word(hash, t->filter_bits);
	__builtin_prefetch(&t->slot[slot_of(t, addr)], 1);
	__builtin_prefetch(&t->filter[word], 1);
	__builtin_prefetch(&t->count[word * 64 + liveset_filter_bit(hash, t->filter_bits, 0)], 1);
	__builtin_prefetch(&t->count[word * 64 + liveset_filter_bit(hash, t->filter_bits, 1)], 1);
}

bool liveset_insert(uint64_t addr, uint64_t size)
{
	struct level *t = table;
	uint32_t i;

	if (!t || addr == 0 || live_count >= LIVESET_MAX)
		return false;
	for (i = slot_of(t, addr); t->slot[i].addr; i = next_slot(t, i)) {
		if (t->slot[i].addr == addr) {
			/* Freed behind our back (e.g. by a path we do not hook). */
			t->slot[i].size = size;
			return true;
		}
	}
	if (live_count + 1 > (1u << t->bits) / 2 && !grow())
		return false;
	put(table, addr, size);
	/* After put()'s filter bits: a reader that sees the state sees them. */
	few_add(addr);
	live_count++;
	return true;
}

bool liveset_maybe_contains(uint64_t addr)
{
	if (!__atomic_load_n(&table, __ATOMIC_ACQUIRE) || !liveset_filter_hit(addr))
		return false;
	for (int tries = 0; tries < 2; tries++) {
		uint32_t s1 = __atomic_load_n(&live_seq, __ATOMIC_ACQUIRE), i;
		const struct level *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
		bool found = false;
		uint64_t a;

		if (s1 & 1)
			return true;
		for (i = slot_of(t, addr); (a = __atomic_load_n(&t->slot[i].addr, __ATOMIC_RELAXED));
		     i = next_slot(t, i)) {
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
	struct level *t = table;
	uint32_t i, j;

	/* 0 marks an empty slot: free(NULL) may come this far, never further. */
	if (!t || live_count == 0 || addr == 0)
		return false;
	for (i = slot_of(t, addr); t->slot[i].addr != addr; i = next_slot(t, i))
		if (!t->slot[i].addr)
			return false;
	*ret_size = t->slot[i].size;
	filter_sub(t, addr);

	seq_begin();
	for (j = next_slot(t, i); t->slot[j].addr; j = next_slot(t, j)) {
		if (may_move(i, j, slot_of(t, t->slot[j].addr))) {
			t->slot[i].size = t->slot[j].size;
			__atomic_store_n(&t->slot[i].addr, t->slot[j].addr, __ATOMIC_RELAXED);
			i = j;
		}
	}
	__atomic_store_n(&t->slot[i].addr, 0, __ATOMIC_RELAXED);
	live_count--;
	few_sub(addr);
	seq_end();
	return true;
}

size_t liveset_snapshot(struct cprof_wire_live *dst, size_t max)
{
	const struct level *t = table;
	size_t n = 0;

	if (!t)
		return 0;
	for (uint32_t i = 0; i < 1u << t->bits && n < max; i++) {
		if (!t->slot[i].addr)
			continue;
		dst[n].address = t->slot[i].addr;
		dst[n].size = t->slot[i].size;
		n++;
	}
	return n;
}
