/*
 * The wire format between cprof and cprof-agent.so (lib/agent/), version 2.
 *
 * The agent creates a memfd ("cprof-agent", MFD_CLOEXEC) when cprof calls
 * cprof_agent_attach_events() in the target, and returns its fd number; cprof opens
 * it as /proc/PID/fd/N and maps it MAP_SHARED. Layout of the file:
 *
 *   [0, header_size)                       struct cprof_wire_header
 *   [header_size, header_size + ring_size) the ring of records
 *   [rules_offset, ...)                    unwinding rules (struct cprof_wire_rule)
 *   [live_offset, ...)                     the live set's snapshot (struct cprof_wire_live)
 *
 * Ownership: every field says who writes it ("agent" or "cprof"); the other
 * side only reads it. For cprof, every byte of this file is UNTRUSTED input
 * (the target may be buggy or hostile): check magic, version, header_size,
 * ring_size, data_head - data_tail <= ring_size, and every record's size
 * before using it. The agent, in turn, never trusts cprof's fields beyond
 * clamping them (a bogus data_tail only makes records get lost).
 *
 * All integers are native-endian (x86-64: little). All 64-bit fields are
 * naturally aligned and accessed atomically by both sides.
 *
 * The ring (a single-consumer queue, like perf's):
 *   - data_head and data_tail are byte counts that only grow; a record lives
 *     at ring offset (position & (ring_size - 1)).
 *   - The agent serializes its producers (many threads allocate) with a lock
 *     of its own, writes a complete record at data_head, then publishes it by
 *     storing data_head + record size with RELEASE semantics.
 *   - cprof loads data_head with ACQUIRE, reads records from data_tail up to
 *     it, then stores the new data_tail with RELEASE. The agent loads
 *     data_tail with ACQUIRE before reusing space.
 *   - Records never wrap around the end of the ring: when a record does not
 *     fit before the end, the agent writes a CPROF_REC_PAD record that fills
 *     the rest of the ring and starts the record at offset 0. So a reader can
 *     use each record in place.
 *   - When there is no room, the record is dropped and `lost` is incremented.
 *     A dropped ALLOC is still tracked as live, marked unrecorded (its FREE
 *     is not written either), and counted in lost_allocs: what is in use is
 *     read from the live set's snapshot, never summed from a stream that
 *     may have dropped FREEs.
 */
#ifndef CPROF_AGENT_WIRE_H
#define CPROF_AGENT_WIRE_H

#include <stdint.h>

#define CPROF_WIRE_MAGIC 0x3146524f52504343ull /* "CCPROFR1", little-endian */
#define CPROF_WIRE_VERSION 2u
#define CPROF_WIRE_HEADER_SIZE 4096u

/* ring_size limits; attach with ring_size 0 picks the default. */
#define CPROF_WIRE_RING_MIN (64u << 10)
#define CPROF_WIRE_RING_MAX (1u << 30)
#define CPROF_WIRE_RING_DEFAULT (4u << 20)

/* Bytes of stack copied per ALLOC at most. */
#define CPROF_WIRE_STACK_MAX 8192u

/* Largest sampling rate the agent accepts (bytes); larger is clamped. */
#define CPROF_WIRE_RATE_MAX (1ull << 40)

/*
 * cprof increments `heartbeat` every 100-250 ms. When the agent sees it
 * unchanged for this long (by its own clock), it detaches by itself: cprof
 * is stopped (Ctrl-Z) or hung. Where the agent watches cprof's pidfd, that
 * is the authority on cprof's death, and a silence only as long as a busy
 * host may starve a process (an incident host) is not taken for one: the
 * longer bound. Without a pidfd (cprof in a PID namespace the target cannot
 * see), the heartbeat is all there is: the shorter.
 */
#define CPROF_WIRE_HEARTBEAT_TIMEOUT_MS 60000u
#define CPROF_WIRE_HEARTBEAT_ALONE_TIMEOUT_MS 10000u

/* header.state, written by the agent. */
enum cprof_wire_state {
	CPROF_STATE_INIT = 0,     /* header being set up: do not read the ring yet */
	CPROF_STATE_RUNNING = 1,  /* hooks installed, sampling */
	CPROF_STATE_PAUSED = 2,   /* hooks installed, not sampling (frees still tracked) */
	CPROF_STATE_DETACHED = 3, /* every GOT entry restored; no more records */
};

/* header.command, written by cprof; the agent polls it every 100 ms. */
enum cprof_wire_command {
	CPROF_CMD_NONE = 0,
	CPROF_CMD_START = 1,  /* sample (again) at header.rate */
	CPROF_CMD_STOP = 2,   /* pause sampling, keep hooks */
	CPROF_CMD_DETACH = 3, /* restore the GOT; the session is over */
};

/* header.detach_reason, written by the agent before state becomes DETACHED. */
enum cprof_wire_detach_reason {
	CPROF_DETACH_NONE = 0,
	CPROF_DETACH_API = 1,       /* cprof_agent_detach() was called */
	CPROF_DETACH_COMMAND = 2,   /* cprof wrote CPROF_CMD_DETACH */
	CPROF_DETACH_PEER_EXIT = 3, /* cprof's process exited (even SIGKILL) */
	CPROF_DETACH_HEARTBEAT = 4, /* cprof stopped incrementing heartbeat */
	CPROF_DETACH_FORK = 5,      /* (child side of a fork; never seen by cprof) */
};

struct cprof_wire_header {
	/* Written once by the agent before state leaves INIT. */
	uint64_t magic;        /* CPROF_WIRE_MAGIC */
	uint32_t version;      /* CPROF_WIRE_VERSION */
	uint32_t header_size;  /* offset of the ring in the file */
	uint32_t ring_size;    /* bytes, a power of two */
	uint32_t stack_max;    /* most stack bytes an ALLOC carries */
	int32_t agent_pid;     /* the target's pid as the agent sees it */
	int32_t cprof_pid;     /* the pid cprof_agent_attach_events() was given; 0: unseen */
	uint64_t session;      /* attach count of this agent, from 1 */

	/* Written by the agent at any time. */
	uint32_t state;         /* enum cprof_wire_state */
	uint32_t detach_reason; /* enum cprof_wire_detach_reason */
	uint64_t rate_in_use;   /* the first kind's rate the hooks use now */

	/* Written by cprof. */
	uint64_t heartbeat; /* incremented by cprof; any change counts */
	uint32_t command;   /* enum cprof_wire_command; the agent acts on changes */
	uint32_t pad0;
	uint64_t rate;      /* requested sampling rate in bytes (1 = every allocation) */

	/* Counters, written by the agent (monotonic within a session). */
	uint64_t samples;       /* ALLOC records published */
	uint64_t sampled_bytes; /* sum of their sizes */
	uint64_t frees;         /* FREE records published */
	uint64_t lost;          /* records dropped because the ring was full */
	uint64_t untracked;     /* sampled blocks the live set had no room for */
	uint64_t hooked;        /* GOT entries currently patched */
	uint64_t errors;        /* GOT patches that failed, stack copies that failed */

	/* Written once by the agent before state leaves INIT. */
	uint32_t events;        /* CPROF_EVENTS_*: what this session hooks and records */
	uint32_t pad_events;

	/* Counter, written by the agent: frees that the live set's filter let
	 * through to a lookup and that were not of a sampled block. */
	uint64_t filter_false_hits;

	/* Written once by the agent before state leaves INIT: where the
	 * unwinding rules are (see struct cprof_wire_rule); bits 0: none. */
	uint32_t rules_offset; /* in the file, after the ring */
	uint32_t rules_bits;   /* the table has 2^rules_bits slots */

	/* Counters, written by the agent: ALLOCs the ring had no room for
	 * (their blocks are in the live set, marked unrecorded), and bytes. */
	uint64_t lost_allocs;
	uint64_t lost_alloc_bytes;

	/* The live set's snapshot: cprof increments live_request; the agent,
	 * within a watchdog tick, writes every sampled block live at that
	 * moment at live_offset (struct cprof_wire_live, at most live_max),
	 * then a LIVE record (struct cprof_wire_live_mark) into the ring: every
	 * ALLOC of those blocks lies before it, every later FREE after it. */
	uint32_t live_offset; /* agent, once: in the file, after the rules */
	uint32_t live_max;    /* agent, once */
	uint64_t live_request; /* cprof */

	/* A session of several kinds (events has more than one bit): each
	 * kind's rate, in its unit, by CPROF_KIND_*, written by cprof at any
	 * time (0 leaves a rate as it is) and taken within a watchdog tick;
	 * until then the first kind samples at the attach's rate and the others
	 * at CPROF_WIRE_*_RATE_DEFAULT. A one-kind session's is `rate`. */
	uint64_t kind_rate[4];

	/* Written by the agent: CLOCK_MONOTONIC when sampling last went on
	 * (attach, START) and off (STOP, detach); 0: not yet. What a session
	 * recorded and lost is of that span, not of cprof's own window, which
	 * begins after the attach returns and ends before the detach is
	 * taken: on a saturated host the two differ by seconds. */
	uint64_t sampling_on_ns;
	uint64_t sampling_off_ns;
	/* Written by the agent: the live_request its last LIVE mark answers
	 * (0: none, or an agent of an older build). Once it is cprof's last
	 * request, the snapshot is taken and the hooks may go before cprof has
	 * drained up to the mark. */
	uint64_t live_answered;

	uint8_t pad1[256 - 248];

	/* Ring positions, one cache line each (see the comment on top). */
	uint64_t data_head; /* agent */
	uint8_t pad2[56];
	uint64_t data_tail; /* cprof */
	uint8_t pad3[56];
};

_Static_assert(sizeof(struct cprof_wire_header) == 384, "wire header layout");
_Static_assert(__builtin_offsetof(struct cprof_wire_header, data_head) == 256, "wire header");
_Static_assert(sizeof(struct cprof_wire_header) <= CPROF_WIRE_HEADER_SIZE, "wire header");

/*
 * What a session records (header.events; cprof_agent_attach_events()).
 * HEAP hooks the malloc family (ALLOC/FREE records); the others hook
 * pthread and semaphore functions (EVENT records). Each kind has a rate of
 * its own, in its own unit, and every record carries the rate it was drawn
 * at; a session may record several kinds (header.kind_rate).
 */
enum cprof_wire_kind {
	CPROF_KIND_HEAP,         /* rate: mean bytes between samples */
	CPROF_KIND_BLOCK,        /* rate: nanoseconds (see EVENT) */
	CPROF_KIND_MUTEX,        /* rate: one in `rate` contentions */
	CPROF_KIND_THREADCREATE, /* rate: unused (every creation) */
	CPROF_KINDS
};
#define CPROF_EVENTS_HEAP (1u << CPROF_KIND_HEAP)
#define CPROF_EVENTS_BLOCK (1u << CPROF_KIND_BLOCK)
#define CPROF_EVENTS_MUTEX (1u << CPROF_KIND_MUTEX)
#define CPROF_EVENTS_THREADCREATE (1u << CPROF_KIND_THREADCREATE)
#define CPROF_EVENTS_ALL ((1u << CPROF_KINDS) - 1)
/* The kind (CPROF_KIND_*) of a one-kind @events, else its first; @events
 * not 0. */
static inline unsigned cprof_wire_first_kind(uint32_t events)
{
	return (unsigned)__builtin_ctz(events);
}

/* The rates of block and mutex until cprof says otherwise (Go's mutex
 * profile: every event; block: waits of 10 us and more always). */
#define CPROF_WIRE_BLOCK_RATE_DEFAULT 10000u
#define CPROF_WIRE_MUTEX_RATE_DEFAULT 1u

/*
 * The agent's own task (watchdog.c) is a member of the target's thread
 * group, and cprof's, not the program's: no profile shows it as one of the
 * program's threads, and no snapshot stops it. The agent exports the int32_t
 * CPROF_WIRE_TASK_SYMBOL (.dynsym) in its data, which cprof reads from
 * outside:
 *   > 0  the task's tid, stored by the task itself once it has named itself
 *        CPROF_WIRE_TASK_COMM;
 *   -1   a task is being started: /proc lists it already, under the name of
 *        the thread that made it, and its tid comes within moments;
 *   0    none (the kernel clears the word as the task exits:
 *        CLONE_CHILD_CLEARTID).
 * A tid is cprof's to leave out only when that thread of the target bears
 * the name too: a stray value never hides a thread of the program.
 */
#define CPROF_WIRE_TASK_SYMBOL "cprof_agent_task_tid"
#define CPROF_WIRE_TASK_COMM "cprof-agent"

/* Record types. */
enum cprof_wire_record_type {
	CPROF_REC_PAD = 0,   /* skip `size` bytes (to the end of the ring) */
	CPROF_REC_ALLOC = 1, /* struct cprof_wire_alloc */
	CPROF_REC_FREE = 2,  /* struct cprof_wire_free */
	CPROF_REC_EVENT = 3, /* struct cprof_wire_event */
	CPROF_REC_LIVE = 4,  /* struct cprof_wire_live_mark */
};

/* Every record starts with this; size is a multiple of 8, >= 8. */
struct cprof_wire_record {
	uint32_t type; /* enum cprof_wire_record_type */
	uint32_t size; /* total bytes of the record, this header included */
};

/* DWARF register numbers of x86-64, the index into regs[]. */
enum cprof_wire_reg {
	CPROF_REG_RAX, CPROF_REG_RDX, CPROF_REG_RCX, CPROF_REG_RBX,
	CPROF_REG_RSI, CPROF_REG_RDI, CPROF_REG_RBP, CPROF_REG_RSP,
	CPROF_REG_R8, CPROF_REG_R9, CPROF_REG_R10, CPROF_REG_R11,
	CPROF_REG_R12, CPROF_REG_R13, CPROF_REG_R14, CPROF_REG_R15,
	CPROF_REG_RIP,
	CPROF_REG_COUNT
};

/* alloc.flags */
#define CPROF_ALLOC_UNTRACKED 0x1u /* the live set was full: no FREE will follow */
#define CPROF_ALLOC_WALKED 0x2u    /* stack[] holds addresses, not stack bytes (below) */

/*
 * Unwinding rules, so that the agent walks the frames itself and an ALLOC
 * carries a few return addresses instead of kilobytes of stack (bytes that
 * cost the allocating thread, and that may hold the program's secrets).
 *
 * cprof unwinds the first samples from their stack copies (DWARF CFI,
 * lib/unwind), and for each frame's address writes what x86-64 code almost
 * always needs: where the CFA is (rsp or rbp + an offset), that the return
 * address is at CFA - 8, and where rbp was saved, if it was. The agent looks
 * up every frame of a sample; one address without a rule, and the sample
 * falls back to the stack copy (which teaches cprof that address).
 *
 * The table: 2^rules_bits slots of struct cprof_wire_rule at rules_offset,
 * open addressing, an address in one of CPROF_RULES_PROBES slots from
 * cprof_rule_slot(). Only cprof writes it, only into empty slots: rule
 * first, then key with RELEASE; the agent loads key with ACQUIRE, then rule.
 * A slot once written never changes within a session. The agent trusts no
 * rule: every read a rule leads to must fall inside the thread's stack, the
 * CFA must rise, the walk has at most CPROF_RULES_MAX_FRAMES frames; else it
 * falls back to the copy.
 *
 * An ALLOC with CPROF_ALLOC_WALKED, or an EVENT with CPROF_EVENT_WALKED:
 * stack_size / 8 addresses, [0] the
 * sampling function's PC (regs[CPROF_REG_RIP]), then each caller's return
 * address, the outermost frame's last.
 */
struct cprof_wire_rule {
	uint64_t key;  /* a return address (or [0] above); 0 = empty slot */
	uint64_t rule; /* CPROF_RULE_*: kind | flags | CFA offset | rbp's slot */
};

#define CPROF_RULES_BITS_DEFAULT 14 /* 16384 slots, 256 KiB */
#define CPROF_RULES_BITS_MAX 20
#define CPROF_RULES_PROBES 8
#define CPROF_RULES_MAX_FRAMES 128

#define CPROF_RULE_CFA_RSP 1u   /* CFA = rsp + offset */
#define CPROF_RULE_CFA_RBP 2u   /* CFA = rbp + offset */
#define CPROF_RULE_OUTERMOST 3u /* no caller (clone, _start): the walk is whole */
#define CPROF_RULE_KIND(r) ((unsigned)((r) & 3))
/* The caller's rbp cannot be known (CFI says "undefined"). */
#define CPROF_RULE_RBP_LOST 0x4u
/* Bits 8-31: the CFA's offset from its register (0 .. 2^24 - 1). */
#define CPROF_RULE_CFA_OFFSET(r) ((uint64_t)((r) >> 8) & 0xffffff)
/* Bits 32-47: rbp was saved at CFA - this (0: rbp is the caller's). */
#define CPROF_RULE_RBP_SLOT(r) ((uint64_t)((r) >> 32) & 0xffff)
#define CPROF_RULE(kind, flags, cfa_offset, rbp_slot)                                   \
	((uint64_t)(kind) | (uint64_t)(flags) | (uint64_t)(cfa_offset) << 8 |           \
	 (uint64_t)(rbp_slot) << 32)

static inline uint32_t cprof_rule_slot(uint64_t key, unsigned bits)
{
	return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - bits));
}

/*
 * A sampled allocation. Written by the agent in the allocating thread.
 *
 * regs[] is the register state inside the agent's own sampling function (rip
 * points into cprof-agent.so, which has .eh_frame CFI), so cprof unwinds from
 * there: agent frames, then the hook, then the caller of malloc. Caller-saved
 * registers hold whatever the agent had in them; callee-saved registers and
 * rsp/rip are exact for that PC, which is all CFI unwinding needs.
 *
 * stack[] is a copy of the thread's memory from regs[CPROF_REG_RSP] upward,
 * stack_size bytes (at most header.stack_max), cut short at the first page
 * that is not mapped. Stack bytes may contain anything the program had there.
 * With CPROF_ALLOC_WALKED it holds return addresses instead (above, struct
 * cprof_wire_rule).
 */
struct cprof_wire_alloc {
	struct cprof_wire_record hdr; /* type CPROF_REC_ALLOC; size = 8-aligned
	                                 (sizeof(struct cprof_wire_alloc) + stack_size) */
	uint64_t time_ns;   /* 0: not recorded (no profile needs it; a clock read per sample is a cost) */
	uint32_t tid;       /* kernel thread id of the allocating thread */
	uint32_t flags;     /* CPROF_ALLOC_* */
	uint64_t address;   /* returned block (0 if the allocation failed: never recorded) */
	uint64_t size;      /* requested size in bytes (calloc: nmemb * size) */
	uint64_t rate;      /* sampling rate in effect when this was drawn */
	uint64_t regs[CPROF_REG_COUNT];
	uint32_t stack_size; /* bytes in stack[] */
	uint32_t pad;
	uint8_t stack[];
};

_Static_assert(sizeof(struct cprof_wire_alloc) == 192, "wire alloc layout");

/*
 * free() (or realloc() moving/freeing) of a block an ALLOC of this session
 * reported. Frees of unsampled blocks and of blocks allocated before attach
 * emit nothing. Written by the agent in the freeing thread.
 */
struct cprof_wire_free {
	struct cprof_wire_record hdr; /* type CPROF_REC_FREE, size 40 */
	uint64_t time_ns;  /* 0: not recorded, as in ALLOC */
	uint64_t address;  /* as in the ALLOC */
	uint64_t size;     /* as in the ALLOC */
	uint32_t tid;      /* the freeing thread */
	uint32_t pad;
};

_Static_assert(sizeof(struct cprof_wire_free) == 40, "wire free layout");

/*
 * One sampled block live when the snapshot was taken. An unrecorded one is a
 * sample whose ALLOC the ring had no room for: its stack is unknown, but it
 * is live and counts towards what is in use (cprof spreads it over the
 * recorded ones).
 */
struct cprof_wire_live {
	uint64_t address;
	uint64_t size; /* bytes; CPROF_LIVE_UNRECORDED set: no ALLOC record */
};

#define CPROF_LIVE_UNRECORDED (1ull << 63)

/* The live set's snapshot at live_offset answers this request; it holds
 * `count` entries (at most live_max) until cprof asks again. */
struct cprof_wire_live_mark {
	struct cprof_wire_record hdr; /* type CPROF_REC_LIVE, size 24 */
	uint64_t request; /* the live_request answered */
	uint64_t count;
};

_Static_assert(sizeof(struct cprof_wire_live_mark) == 24, "wire live mark layout");
/* The most entries a snapshot room may have (cprof's bound). */
#define CPROF_WIRE_LIVE_MAX (1u << 20)

/* event.kind */
enum cprof_wire_event_kind {
	CPROF_EV_MUTEX_WAIT = 1,   /* BLOCK: pthread_mutex_lock/timedlock waited */
	CPROF_EV_RWLOCK_RD_WAIT = 2, /* BLOCK: pthread_rwlock_(timed)rdlock waited */
	CPROF_EV_RWLOCK_WR_WAIT = 3, /* BLOCK: pthread_rwlock_(timed)wrlock waited */
	CPROF_EV_COND_WAIT = 4,    /* BLOCK: pthread_cond_(timed)wait */
	CPROF_EV_SEM_WAIT = 5,     /* BLOCK: sem_(timed)wait waited */
	CPROF_EV_MUTEX_UNLOCK = 6, /* MUTEX: an unlock that ended others' wait */
	CPROF_EV_RWLOCK_UNLOCK = 7, /* MUTEX: the same for a rwlock */
	CPROF_EV_THREAD_CREATE = 8, /* THREADCREATE: pthread_create succeeded */
};

/* The kind (CPROF_EVENTS_*) whose profile an event of @ev_kind belongs to;
 * 0 for a kind this header does not know. */
static inline uint32_t cprof_wire_event_events(uint32_t ev_kind)
{
	if (ev_kind >= CPROF_EV_MUTEX_WAIT && ev_kind <= CPROF_EV_SEM_WAIT)
		return CPROF_EVENTS_BLOCK;
	if (ev_kind == CPROF_EV_MUTEX_UNLOCK || ev_kind == CPROF_EV_RWLOCK_UNLOCK)
		return CPROF_EVENTS_MUTEX;
	return ev_kind == CPROF_EV_THREAD_CREATE ? CPROF_EVENTS_THREADCREATE : 0;
}

/*
 * A blocking, contention or thread-creation event, with the stack that
 * caused it (regs and stack as in ALLOC, same offsets). Values:
 *   BLOCK: `value` = the wait d in nanoseconds. A wait of d >= rate is
 *     always recorded; a shorter one with probability d / rate, and cprof
 *     counts it as rate nanoseconds and rate / d events (Go's
 *     saveblockevent(): expected sums equal the true totals, whatever the
 *     mix of durations);
 *   MUTEX: `value` = the nanoseconds other threads had been waiting for
 *     this lock while the unlocking thread held it (since it took it, or
 *     the previous charge); one in `rate` such unlocks is recorded: cprof
 *     multiplies count and value by rate;
 *   THREADCREATE: value 1.
 */
struct cprof_wire_event {
	struct cprof_wire_record hdr; /* type CPROF_REC_EVENT; size as for ALLOC */
	uint64_t time_ns;   /* CLOCK_MONOTONIC of the target */
	uint32_t tid;
	uint32_t kind;      /* enum cprof_wire_event_kind */
	uint64_t object;    /* the lock's address (the new thread's id for create) */
	uint64_t value;
	uint64_t rate;      /* the session's rate when this was recorded */
	uint64_t regs[CPROF_REG_COUNT];
	uint32_t stack_size;
	uint32_t flags;     /* CPROF_EVENT_*; 0 from agents before the walk */
	uint8_t stack[];
};

#define CPROF_EVENT_WALKED 0x1u /* stack[] holds addresses, as an ALLOC's may */

_Static_assert(sizeof(struct cprof_wire_event) == 192, "wire event layout");
_Static_assert(__builtin_offsetof(struct cprof_wire_event, regs) ==
		       __builtin_offsetof(struct cprof_wire_alloc, regs),
	       "ALLOC and EVENT share their stack tail");

#endif
