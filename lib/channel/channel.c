#include "channel/channel.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "target/target.h"
#include "util/util.h"

#define RECORD_MAX (sizeof(struct cprof_wire_alloc) + CPROF_WIRE_STACK_MAX)

struct channel {
	pid_t pid;
	uint8_t *map;
	size_t map_size;
	struct cprof_wire_header *hdr;
	const uint8_t *ring;
	uint32_t ring_size;
	uint64_t tail; /* our copy: the target could rewrite data_tail */
	uint8_t *copy; /* one record, copied out */
	bool mapped;   /* map is ours to unmap */
	struct cprof_wire_rule *rules; /* NULL: the agent has no table */
	unsigned rules_bits;
	const struct cprof_wire_live *live; /* NULL: no snapshot room */
	uint32_t live_max;
	uint64_t live_request; /* ours: the target could rewrite the header's */
	uint64_t live_seen;    /* the last request a LIVE record answered */
	unsigned live_taken;   /* snapshots handed over */
	uint32_t sent;         /* the last command we sent */
};

static uint64_t load(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* The header's promises, checked once: the sizes used from then on. */
static bool header_ok(const struct cprof_wire_header *h, uint64_t file_size)
{
	return h->magic == CPROF_WIRE_MAGIC && h->version == CPROF_WIRE_VERSION &&
	       h->header_size == CPROF_WIRE_HEADER_SIZE && h->ring_size >= CPROF_WIRE_RING_MIN &&
	       h->ring_size <= CPROF_WIRE_RING_MAX && !(h->ring_size & (h->ring_size - 1)) &&
	       h->stack_max <= CPROF_WIRE_STACK_MAX &&
	       file_size >= (uint64_t)h->header_size + h->ring_size;
}

/* The rules table's bytes if the header places one right after the ring
 * and @file_size holds it, else 0 (an agent without one: no walks). */
static size_t rules_size(const struct cprof_wire_header *h, uint64_t file_size)
{
	uint64_t end = (uint64_t)h->header_size + h->ring_size;

	if (h->rules_bits == 0 || h->rules_bits > CPROF_RULES_BITS_MAX || h->rules_offset != end ||
	    file_size < end + (sizeof(struct cprof_wire_rule) << h->rules_bits))
		return 0;
	return sizeof(struct cprof_wire_rule) << h->rules_bits;
}

/* Room for live_max snapshot entries right after the rules, inside
 * @file_size, or 0. */
static size_t live_size(const struct cprof_wire_header *h, uint64_t rules_end, uint64_t file_size)
{
	uint64_t bytes = (uint64_t)h->live_max * sizeof(struct cprof_wire_live);

	if (h->live_max == 0 || h->live_max > CPROF_WIRE_LIVE_MAX || h->live_offset != rules_end ||
	    file_size < rules_end + bytes)
		return 0;
	return (size_t)bytes;
}

int channel_from_memory(struct channel **ret, void *map, size_t size)
{
	struct cprof_wire_header h;
	struct channel *ch;
	size_t rules, live;

	if (size < CPROF_WIRE_HEADER_SIZE)
		return -EPROTO;
	memcpy(&h, map, sizeof(h));
	if (!header_ok(&h, size))
		return -EPROTO;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return -ENOMEM;
	ch->copy = malloc(RECORD_MAX);
	if (!ch->copy) {
		free(ch);
		return -ENOMEM;
	}
	ch->map = map;
	ch->map_size = (size_t)h.header_size + h.ring_size;
	ch->hdr = (struct cprof_wire_header *)ch->map;
	ch->ring = ch->map + h.header_size;
	ch->ring_size = h.ring_size;
	rules = rules_size(&h, size);
	if (rules) {
		ch->rules = (struct cprof_wire_rule *)(ch->map + ch->map_size);
		ch->rules_bits = h.rules_bits;
		ch->map_size += rules;
		live = live_size(&h, ch->map_size, size);
		if (live) {
			ch->live = (const struct cprof_wire_live *)(ch->map + ch->map_size);
			ch->live_max = h.live_max;
			ch->map_size += live;
		}
	}
	ch->live_request = ch->live_seen = h.live_request;
	ch->tail = load(&ch->hdr->data_tail);
	*ret = ch;
	return 0;
}

int channel_open(struct channel **ret, pid_t pid, int fd)
{
	struct cprof_wire_header h;
	struct channel *ch;
	char path[64];
	struct stat st;
	size_t size;
	void *map;
	int mfd, r;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
	mfd = open(path, O_RDWR | O_CLOEXEC);
	if (mfd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	/* Only a file that can never shrink is mapped: one cut short under
	 * the mapping would be SIGBUS at our next read. */
	if ((fcntl(mfd, F_GET_SEALS) & F_SEAL_SHRINK) == 0 ||
	    fstat(mfd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < CPROF_WIRE_HEADER_SIZE ||
	    pread(mfd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    !header_ok(&h, (uint64_t)st.st_size)) {
		r = -EPROTO;
		goto out_close;
	}
	/* The sizes we checked are the ones we map, whatever the agent writes later. */
	size = (size_t)h.header_size + h.ring_size + rules_size(&h, (uint64_t)st.st_size);
	if (size > (size_t)h.header_size + h.ring_size)
		size += live_size(&h, size, (uint64_t)st.st_size);
	map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (map == MAP_FAILED) {
		r = -errno;
		goto out_close;
	}
	r = channel_from_memory(&ch, map, size);
	if (r < 0) {
		/* The target changed the header between our read and the map. */
		munmap(map, size);
		goto out_close;
	}
	ch->pid = pid;
	ch->mapped = true;
	*ret = ch;
out_close:
	close(mfd);
	return r;
}

void channel_give_back(struct channel *ch)
{
	size_t header = CPROF_WIRE_HEADER_SIZE;

	/* Shared memory of the target: MADV_REMOVE frees the file's pages. */
	if (ch->mapped && ch->map_size > header)
		madvise(ch->map + header, ch->map_size - header, MADV_REMOVE);
}

void channel_close(struct channel *ch)
{
	if (!ch)
		return;
	if (ch->mapped)
		munmap(ch->map, ch->map_size);
	free(ch->copy);
	free(ch);
}

void channel_heartbeat(struct channel *ch)
{
	__atomic_fetch_add(&ch->hdr->heartbeat, 1, __ATOMIC_RELEASE);
}

int channel_command(struct channel *ch, uint32_t cmd, uint32_t state, unsigned timeout_ms)
{
	const struct timespec nap = { 0, 5 * 1000 * 1000 };

	ch->sent = cmd;
	__atomic_store_n(&ch->hdr->command, cmd, __ATOMIC_RELEASE);
	for (unsigned waited = 0; waited <= timeout_ms; waited += 5) {
		if (__atomic_load_n(&ch->hdr->state, __ATOMIC_ACQUIRE) == state)
			return 0;
		if (ch->pid && !target_alive(ch->pid))
			return -ESRCH;
		channel_heartbeat(ch);
		nanosleep(&nap, NULL);
	}
	return -ETIMEDOUT;
}

uint32_t channel_sent(const struct channel *ch)
{
	return ch->sent;
}

void channel_set_rates(struct channel *ch, const uint64_t rates[CPROF_KINDS])
{
	for (unsigned k = 0; k < CPROF_KINDS; k++)
		__atomic_store_n(&ch->hdr->kind_rate[k], rates[k], __ATOMIC_RELAXED);
}

int channel_live_ask(struct channel *ch)
{
	if (!ch->live)
		return -ENOTSUP;
	__atomic_store_n(&ch->hdr->live_request, ++ch->live_request, __ATOMIC_RELEASE);
	return 0;
}

bool channel_live_pending(const struct channel *ch)
{
	return ch->live_seen != ch->live_request;
}

bool channel_live_written(const struct channel *ch)
{
	return !channel_live_pending(ch) ||
	       __atomic_load_n(&ch->hdr->live_answered, __ATOMIC_ACQUIRE) == ch->live_request;
}

unsigned channel_live_taken(const struct channel *ch)
{
	return ch->live_taken;
}

/* A LIVE record: the snapshot it answers, copied out, to the handler. An
 * answer to an older request (the room holds a newer one now) is skipped. */
static int take_live(struct channel *ch, const struct cprof_wire_live_mark *m,
		     const struct channel_handlers *h)
{
	struct cprof_wire_live *copy;
	int r;

	if (!ch->live || m->request != ch->live_request || m->request == ch->live_seen)
		return 0;
	if (m->count > ch->live_max)
		return -EPROTO;
	ch->live_seen = m->request;
	if (!h->live)
		return 0;
	copy = malloc((size_t)(m->count ? m->count : 1) * sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	memcpy(copy, ch->live, (size_t)m->count * sizeof(*copy));
	r = h->live(copy, (size_t)m->count, h->arg);
	free(copy);
	ch->live_taken++;
	return r < 0 ? r : 1;
}

void channel_counters(const struct channel *ch, struct channel_counters *ret)
{
	const struct cprof_wire_header *h = ch->hdr;

	ret->state = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
	ret->detach_reason = __atomic_load_n(&h->detach_reason, __ATOMIC_RELAXED);
	ret->events = __atomic_load_n(&h->events, __ATOMIC_RELAXED);
	ret->samples = __atomic_load_n(&h->samples, __ATOMIC_RELAXED);
	ret->sampled_bytes = __atomic_load_n(&h->sampled_bytes, __ATOMIC_RELAXED);
	ret->frees = __atomic_load_n(&h->frees, __ATOMIC_RELAXED);
	ret->lost = __atomic_load_n(&h->lost, __ATOMIC_RELAXED);
	ret->untracked = __atomic_load_n(&h->untracked, __ATOMIC_RELAXED);
	ret->lost_allocs = __atomic_load_n(&h->lost_allocs, __ATOMIC_RELAXED);
	ret->lost_alloc_bytes = __atomic_load_n(&h->lost_alloc_bytes, __ATOMIC_RELAXED);
	ret->hooked = __atomic_load_n(&h->hooked, __ATOMIC_RELAXED);
	ret->errors = __atomic_load_n(&h->errors, __ATOMIC_RELAXED);
	ret->rate_in_use = __atomic_load_n(&h->rate_in_use, __ATOMIC_RELAXED);
	ret->sampling_on_ns = __atomic_load_n(&h->sampling_on_ns, __ATOMIC_ACQUIRE);
	ret->sampling_off_ns = __atomic_load_n(&h->sampling_off_ns, __ATOMIC_ACQUIRE);
}

int channel_put_rule(struct channel *ch, uint64_t key, uint64_t rule)
{
	uint32_t mask, i;

	if (!ch->rules)
		return -ENOTSUP;
	if (key == 0 || rule == 0)
		return -EINVAL;
	mask = (1u << ch->rules_bits) - 1;
	i = cprof_rule_slot(key, ch->rules_bits);
	/* The target may write here too: only its keys are read, and only to
	 * find an empty slot or this key. */
	for (int n = 0; n < CPROF_RULES_PROBES; n++, i = (i + 1) & mask) {
		uint64_t k = __atomic_load_n(&ch->rules[i].key, __ATOMIC_ACQUIRE);

		if (k == key)
			return -EEXIST;
		if (k != 0)
			continue;
		__atomic_store_n(&ch->rules[i].rule, rule, __ATOMIC_RELAXED);
		__atomic_store_n(&ch->rules[i].key, key, __ATOMIC_RELEASE);
		return 0;
	}
	return -ENOSPC;
}

/* An ALLOC or EVENT whose stack[] the agent walked (wire.h). */
static bool walked(const struct cprof_wire_record *rec)
{
	if (rec->type == CPROF_REC_ALLOC)
		return ((const struct cprof_wire_alloc *)rec)->flags & CPROF_ALLOC_WALKED;
	return ((const struct cprof_wire_event *)rec)->flags & CPROF_EVENT_WALKED;
}

/* The record at @off (ring offset) of @size bytes, copied, checked by type,
 * to its handler: 1 when one took it, 0 when none (no handler, a stale
 * LIVE), or the handler's -errno. */
static int take(struct channel *ch, uint32_t off, uint32_t size, const struct channel_handlers *h)
{
	const struct cprof_wire_record *rec = (const void *)ch->copy;
	uint32_t stack_size;
	int r;

	memcpy(ch->copy, ch->ring + off, size);
	switch (rec->type) {
	case CPROF_REC_ALLOC:
	case CPROF_REC_EVENT:
		/* Same tail (wire.h): stack_size at the same offset. */
		if (size < sizeof(struct cprof_wire_alloc))
			return -EPROTO;
		stack_size = ((const struct cprof_wire_alloc *)rec)->stack_size;
		if (stack_size > CPROF_WIRE_STACK_MAX ||
		    stack_size > size - sizeof(struct cprof_wire_alloc))
			return -EPROTO;
		/* Walked: whole addresses, no more than a walk makes. */
		if (walked(rec) && (stack_size % 8 || stack_size == 0 ||
				 stack_size > CPROF_RULES_MAX_FRAMES * sizeof(uint64_t)))
			return -EPROTO;
		if (rec->type == CPROF_REC_ALLOC) {
			r = h->alloc ? h->alloc((const void *)rec, h->arg) : 0;
			return r < 0 ? r : h->alloc != NULL;
		}
		r = h->event ? h->event((const void *)rec, h->arg) : 0;
		return r < 0 ? r : h->event != NULL;
	case CPROF_REC_FREE:
		if (size < sizeof(struct cprof_wire_free))
			return -EPROTO;
		r = h->free ? h->free((const void *)rec, h->arg) : 0;
		return r < 0 ? r : h->free != NULL;
	case CPROF_REC_LIVE:
		if (size < sizeof(struct cprof_wire_live_mark))
			return -EPROTO;
		return take_live(ch, (const void *)rec, h);
	}
	return -EPROTO;
}

int channel_drain(struct channel *ch, const struct channel_handlers *h)
{
	return channel_drain_until(ch, h, UINT64_MAX);
}

int channel_drain_until(struct channel *ch, const struct channel_handlers *h,
			uint64_t deadline_ns)
{
	uint64_t head = load(&ch->hdr->data_head);
	int n = 0, r;

	/* The agent only ever moves them by whole records, multiples of 8:
	 * anything else would put a record header across the ring's end. */
	if (head < ch->tail || head - ch->tail > ch->ring_size || head % 8 || ch->tail % 8)
		return -EPROTO;
	while (ch->tail < head) {
		uint32_t off = (uint32_t)(ch->tail & (ch->ring_size - 1));
		struct cprof_wire_record rec;

		if (head - ch->tail < sizeof(rec))
			return -EPROTO;
		memcpy(&rec, ch->ring + off, sizeof(rec));
		if (rec.size < sizeof(rec) || rec.size % 8 || rec.size > head - ch->tail ||
		    rec.size > ch->ring_size - off)
			return -EPROTO;
		if (rec.type == CPROF_REC_PAD) {
			/* Fills the ring's end, nothing else. */
			if (off + rec.size != ch->ring_size)
				return -EPROTO;
		} else {
			if (rec.size > RECORD_MAX)
				return -EPROTO;
			r = take(ch, off, rec.size, h);
			if (r < 0)
				return r;
			n += r;
		}
		ch->tail += rec.size;
		__atomic_store_n(&ch->hdr->data_tail, ch->tail, __ATOMIC_RELEASE);
		/* A long drain (a slow unwind, a loaded machine) must not
		 * look like cprof gone to the agent. */
		if (rec.type != CPROF_REC_PAD && n % 256 == 0) {
			channel_heartbeat(ch);
			if (deadline_ns != UINT64_MAX && now_monotonic_ns() >= deadline_ns)
				break;
		}
	}
	return n;
}
