/*
 * The exported entry points and the session: the memfd, the header's state,
 * and what a fork does to them.
 *
 * One session at a time. The memfd and its mapping outlive a session: a
 * thread that entered a hook before the GOT was restored may still touch
 * them, so they are never unmapped in this process; the next attach reuses
 * them when the ring size is the same.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cprof-agent.h"
#include "agent.h"
#include "raw.h"

/* The session's lock. Not a pthread mutex: the watchdog task takes it too,
 * and it has no thread of glibc's own (watchdog.c). */
static int agent_word;
int agent_sampling;
uint64_t agent_session;

static int memfd = -1;
static void *memfd_map;
static size_t memfd_map_size;
static pid_t peer_pid;
pid_t agent_pid;
static uint32_t last_command;
static uint64_t live_answered; /* the last live_request answered */
static bool atfork_registered;

void agent_lock(void)
{
	agent_lock_take(&agent_word);
}

bool agent_trylock(void)
{
	return agent_lock_try(&agent_word);
}

void agent_unlock(void)
{
	agent_lock_give(&agent_word);
}

static struct cprof_wire_header *header(void)
{
	return agent_ring.hdr;
}

static void set_state(uint32_t state)
{
	__atomic_store_n(&header()->state, state, __ATOMIC_RELEASE);
}

bool agent_session_running(uint64_t session)
{
	/* The watchdog knows the low 32 bits of its session. */
	return header() && (agent_session & 0xffffffffu) == (session & 0xffffffffu);
}

/* Sampling on or off, and when (wire.h: sampling_on_ns, sampling_off_ns). */
static void set_sampling(struct cprof_wire_header *h, int on)
{
	__atomic_store_n(&agent_sampling, on, __ATOMIC_RELAXED);
	__atomic_store_n(on ? &h->sampling_on_ns : &h->sampling_off_ns, agent_now_ns(),
			 __ATOMIC_RELEASE);
}

int agent_detach_locked(uint32_t reason)
{
	struct cprof_wire_header *h = header();

	if (!h)
		return -ENOENT;
	got_restore_all();
	set_sampling(h, 0);
	__atomic_store_n(&agent_events, 0, __ATOMIC_RELAXED);
	event_lock();
	liveset_clear();
	h->hooked = got_nr_patched();
	h->detach_reason = reason;
	__atomic_store_n(&h->state, CPROF_STATE_DETACHED, __ATOMIC_RELEASE);
	agent_ring.hdr = NULL;
	event_unlock();
	return 0;
}

int agent_detach(uint32_t reason)
{
	int ret;

	agent_lock();
	ret = agent_detach_locked(reason);
	agent_unlock();
	return ret;
}

static uint64_t clamp_rate(uint64_t rate)
{
	if (rate == 0)
		return AGENT_DEFAULT_RATE;
	return rate > CPROF_WIRE_RATE_MAX ? CPROF_WIRE_RATE_MAX : rate;
}

/*
 * cprof asked for the live set (wire.h): the watchdog writes it, and a LIVE
 * record where it stands in the stream. A full ring: next tick.
 */
static void live_snapshot(struct cprof_wire_header *h)
{
	uint64_t req = __atomic_load_n(&h->live_request, __ATOMIC_ACQUIRE);
	struct cprof_wire_live_mark *m;

	if (req == live_answered)
		return;
	event_lock();
	m = ring_try_reserve(sizeof(*m));
	if (m) {
		/* Where to: the agent's own pointer, not the header's (cprof's to write). */
		m->count = liveset_snapshot(agent_ring.live, LIVESET_CAPACITY);
		m->request = req;
		m->hdr.type = CPROF_REC_LIVE;
		m->hdr.size = sizeof(*m);
		ring_commit(sizeof(*m));
		live_answered = req;
		__atomic_store_n(&h->live_answered, req, __ATOMIC_RELEASE);
	}
	event_unlock();
}

/* Where kind @k's hooks read their rate; NULL: a kind without one. */
static uint64_t *kind_rate(unsigned k)
{
	switch (k) {
	case CPROF_KIND_HEAP:
		return &agent_rate;
	case CPROF_KIND_BLOCK:
		return &agent_block_rate;
	case CPROF_KIND_MUTEX:
		return &agent_mutex_rate;
	}
	return NULL;
}

static bool one_kind(uint32_t events)
{
	return (events & (events - 1)) == 0;
}

static void set_rate(unsigned k, uint64_t rate)
{
	uint64_t *at = kind_rate(k);

	if (at && rate != 0)
		__atomic_store_n(at, clamp_rate(rate), __ATOMIC_RELAXED);
}

/* header.rate_in_use: the first kind's rate (0: a kind without one). */
static void show_rate(struct cprof_wire_header *h, uint32_t events)
{
	const uint64_t *first = kind_rate(cprof_wire_first_kind(events));

	__atomic_store_n(&h->rate_in_use, first ? *first : 0, __ATOMIC_RELAXED);
}

/* cprof's rates: header.rate is a one-kind session's, kind_rate[] each
 * kind's in a session of several. */
static void take_rates(struct cprof_wire_header *h)
{
	uint32_t events = __atomic_load_n(&agent_events, __ATOMIC_RELAXED);

	if (one_kind(events)) {
		set_rate(cprof_wire_first_kind(events), __atomic_load_n(&h->rate, __ATOMIC_RELAXED));
	} else {
		for (unsigned k = 0; k < CPROF_KINDS; k++)
			if (events & (1u << k))
				set_rate(k, __atomic_load_n(&h->kind_rate[k], __ATOMIC_RELAXED));
	}
	show_rate(h, events);
}

void agent_poll_commands_locked(void)
{
	struct cprof_wire_header *h = header();
	uint32_t cmd;

	if (!h)
		return;
	take_rates(h);
	live_snapshot(h);
	cmd = __atomic_load_n(&h->command, __ATOMIC_ACQUIRE);
	if (cmd == last_command)
		return;
	last_command = cmd;
	switch (cmd) {
	case CPROF_CMD_START:
		set_sampling(h, 1);
		set_state(CPROF_STATE_RUNNING);
		break;
	case CPROF_CMD_STOP:
		set_sampling(h, 0);
		set_state(CPROF_STATE_PAUSED);
		break;
	case CPROF_CMD_DETACH:
		agent_detach_locked(CPROF_DETACH_COMMAND);
		break;
	default:
		break; /* unknown: ignored */
	}
}

/* Objects loaded while the lock stayed taken: patched by the next hook
 * that gets it (agent_patch_if_pending()). */
static int patch_pending;
#define PATCH_WAIT_NS (20ull * 1000 * 1000)

static void patch_locked(void)
{
	__atomic_store_n(&patch_pending, 0, __ATOMIC_RELAXED);
	if (header()) {
		got_patch_all();
		header()->hooked = got_nr_patched();
	}
}

void agent_patch_new_objects(void)
{
	uint64_t until = agent_now_ns() + PATCH_WAIT_NS;

	/* A bounded wait in dlopen's hook (the holder may be the watchdog
	 * writing a live-set snapshot); after it, never given up: pending.
	 * Naps, not yields: a real-time caller yields to no normal holder. */
	while (!agent_trylock()) {
		struct timespec nap = { 0, 100 * 1000 };

		if (agent_now_ns() > until) {
			__atomic_store_n(&patch_pending, 1, __ATOMIC_RELEASE);
			return;
		}
		RAW2(SYS_nanosleep, &nap, NULL);
	}
	patch_locked();
	agent_unlock();
}

void agent_patch_if_pending(void)
{
	if (likely(!__atomic_load_n(&patch_pending, __ATOMIC_RELAXED)) || !agent_trylock())
		return;
	patch_locked();
	agent_unlock();
}

/*
 * Around fork(), the forking thread goes straight to the real functions,
 * from our prepare handler (registered after the program's, it runs first)
 * to our child handler (it runs last): the program's own handlers may lock
 * and unlock, and in the child a stripe or lock that another thread of the
 * parent held at the fork is held by nobody, for good, until we reset it.
 */
static void atfork_prepare(void)
{
	agent_in_hook = 1;
}

static void atfork_parent(void)
{
	agent_in_hook = 0;
}

/*
 * The child of a fork has our hooks but not the watchdog, and shares the
 * memfd's pages with its parent: it must not write a record. It is the only
 * thread now, so it unhooks without locks and forgets the session.
 */
static void atfork_child(void)
{
	agent_unlock();
	event_unlock();
	locks_reset_after_fork();
	agent_in_hook = 0;
	watchdog_forget();
	agent_pid = getpid();
	capture_forget_thread();
	if (!agent_ring.hdr)
		return;
	__atomic_store_n(&agent_sampling, 0, __ATOMIC_RELAXED);
	agent_ring.hdr = NULL;
	agent_ring.rules = NULL;
	got_restore_all();
	liveset_clear();
	if (memfd >= 0)
		close(memfd);
	memfd = -1;
	if (memfd_map)
		munmap(memfd_map, memfd_map_size);
	memfd_map = NULL;
}

#define RULES_SIZE (sizeof(struct cprof_wire_rule) << CPROF_RULES_BITS_DEFAULT)
#define LIVE_SIZE (sizeof(struct cprof_wire_live) * LIVESET_CAPACITY)

/* A memfd of @ring_size bytes of ring, the rules and the snapshot's room,
 * mapped; reuses the last one if it is large enough (cprof asks every kind
 * for the same size: one memfd per process). */
static int memfd_setup(uint32_t ring_size)
{
	size_t size = CPROF_WIRE_HEADER_SIZE + (size_t)ring_size + RULES_SIZE + LIVE_SIZE;
	void *map;
	int fd, ret;

	if (memfd >= 0 && memfd_map && memfd_map_size >= size) {
		/* Fresh contents for the new reader (pages back to zero). */
		if (fallocate(memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)size) != 0)
			memset(memfd_map, 0, CPROF_WIRE_HEADER_SIZE);
		return 0;
	}
	fd = memfd_create("cprof-agent", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	/* Sealed against shrinking: cprof maps it too, and a file cut short
	 * under a mapping is SIGBUS on the next touch, in cprof and here. */
	if (ftruncate(fd, (off_t)size) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
		ret = -errno;
		goto out_close;
	}
	map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		ret = -errno;
		goto out_close;
	}
	/* The old mapping stays: a straggler may still hold a pointer into it. */
	if (memfd >= 0)
		close(memfd);
	memfd = fd;
	memfd_map = map;
	memfd_map_size = size;
	return 0;

out_close:
	close(fd);
	return ret;
}

static void header_init(struct cprof_wire_header *h, int cprof_pid, uint64_t rate, uint32_t ring_size)
{
	memset(h, 0, sizeof(*h));
	h->magic = CPROF_WIRE_MAGIC;
	h->version = CPROF_WIRE_VERSION;
	h->header_size = CPROF_WIRE_HEADER_SIZE;
	h->ring_size = ring_size;
	h->stack_max = CPROF_WIRE_STACK_MAX;
	h->agent_pid = getpid();
	h->cprof_pid = cprof_pid;
	h->session = agent_session;
	h->rate = rate;
	h->rate_in_use = rate;
	h->state = CPROF_STATE_INIT;
}

/* Pid 0, a cprof we cannot see: its session lives until the watchdog
 * misses the heartbeat, and then it is over (header() is gone). */
static bool peer_alive(pid_t pid)
{
	return pid == 0 || kill(pid, 0) == 0 || errno == EPERM;
}

CPROF_AGENT_API int cprof_agent_attach_events(int cprof_pid, uint64_t rate, uint32_t ring_size,
					      uint32_t events)
{
	struct cprof_wire_header *h;
	int ret;

	if (ring_size == 0)
		ring_size = CPROF_WIRE_RING_DEFAULT;
	if (cprof_pid < 0 || ring_size < CPROF_WIRE_RING_MIN || ring_size > CPROF_WIRE_RING_MAX ||
	    (ring_size & (ring_size - 1)) || !events || (events & ~CPROF_EVENTS_ALL))
		return -EINVAL;
	rate = clamp_rate(rate);

	agent_lock();
	if (header()) {
		if (peer_alive(peer_pid)) {
			ret = -EBUSY;
			goto out_unlock;
		}
		agent_detach_locked(CPROF_DETACH_PEER_EXIT);
	}
	ret = hooks_resolve();
	if (ret < 0)
		goto out_unlock;
	ret = liveset_init();
	if (ret < 0)
		goto out_unlock;
	if (!atfork_registered) {
		ret = -pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
		if (ret < 0)
			goto out_unlock;
		atfork_registered = true;
	}
	agent_pid = getpid();
	capture_init();
	ret = memfd_setup(ring_size);
	if (ret < 0)
		goto out_unlock;

	__atomic_store_n(&agent_session, agent_session + 1, __ATOMIC_RELAXED);
	h = memfd_map;
	event_lock();
	header_init(h, cprof_pid, rate, ring_size);
	h->events = events;
	h->rules_offset = CPROF_WIRE_HEADER_SIZE + ring_size;
	h->rules_bits = CPROF_RULES_BITS_DEFAULT;
	h->live_offset = (uint32_t)(h->rules_offset + RULES_SIZE);
	h->live_max = LIVESET_CAPACITY;
	agent_ring.data = (uint8_t *)memfd_map + CPROF_WIRE_HEADER_SIZE;
	agent_ring.size = ring_size;
	agent_ring.rules = (const struct cprof_wire_rule *)((uint8_t *)memfd_map + h->rules_offset);
	agent_ring.rules_bits = CPROF_RULES_BITS_DEFAULT;
	agent_ring.live = (struct cprof_wire_live *)((uint8_t *)memfd_map + h->live_offset);
	event_unlock();

	ret = watchdog_start(cprof_pid, agent_session);
	if (ret < 0)
		goto out_unlock;
	peer_pid = cprof_pid;
	last_command = CPROF_CMD_NONE;
	live_answered = 0;
	__atomic_store_n(&agent_rate, AGENT_DEFAULT_RATE, __ATOMIC_RELAXED);
	__atomic_store_n(&agent_block_rate, CPROF_WIRE_BLOCK_RATE_DEFAULT, __ATOMIC_RELAXED);
	__atomic_store_n(&agent_mutex_rate, CPROF_WIRE_MUTEX_RATE_DEFAULT, __ATOMIC_RELAXED);
	set_rate(cprof_wire_first_kind(events), rate);
	show_rate(h, events);
	locks_reset();
	__atomic_store_n(&agent_events, events, __ATOMIC_RELAXED);
	set_sampling(h, 1);
	event_lock();
	agent_ring.hdr = h;
	event_unlock();
	got_patch_all();
	h->hooked = got_nr_patched();
	set_state(CPROF_STATE_RUNNING);
	ret = memfd;

out_unlock:
	agent_unlock();
	return ret;
}

CPROF_AGENT_API int cprof_agent_detach(void)
{
	return agent_detach(CPROF_DETACH_API);
}

CPROF_AGENT_API uint32_t cprof_agent_version(void)
{
	return CPROF_WIRE_VERSION;
}
