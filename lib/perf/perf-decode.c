/*
 * Decoding perf records. Every field is bounds-checked against the record's
 * own size: the layout depends on sample_type, which we set, but a wrong
 * length must cost a dropped record, never a read past the buffer.
 */
#include <errno.h>
#include <string.h>

#include "perf/perf-private.h"
#include "util/util.h"

struct cursor {
	const uint8_t *p, *end;
};

static bool take(struct cursor *c, void *dst, size_t len)
{
	if ((size_t)(c->end - c->p) < len)
		return false;
	if (dst)
		memcpy(dst, c->p, len);
	c->p += len;
	return true;
}

static bool take_u64(struct cursor *c, uint64_t *v)
{
	return take(c, v, sizeof(*v));
}

/* perf's register order (bit order of the mask) -> DWARF order. */
static void regs_to_dwarf(const uint64_t *perf, uint64_t *dwarf)
{
	static const int8_t map[PERF_REGS_COUNT] = {
		/* AX BX CX DX SI DI BP SP IP, then R8..R15 */
		UNWIND_REG_RAX, UNWIND_REG_RBX, UNWIND_REG_RCX, UNWIND_REG_RDX,
		UNWIND_REG_RSI, UNWIND_REG_RDI, UNWIND_REG_RBP, UNWIND_REG_RSP,
		UNWIND_REG_RIP, UNWIND_REG_R8,  UNWIND_REG_R9,  UNWIND_REG_R10,
		UNWIND_REG_R11, UNWIND_REG_R12, UNWIND_REG_R13, UNWIND_REG_R14,
		UNWIND_REG_R15,
	};

	for (int i = 0; i < PERF_REGS_COUNT; i++)
		dwarf[map[i]] = perf[i];
}

/*
 * The call chain: nr, then nr addresses with PERF_CONTEXT_* markers mixed
 * in (values >= PERF_CONTEXT_MAX, never code addresses). Only the kernel's
 * part is kept; the user part was not asked for.
 */
static int take_callchain(struct cursor *c, struct perf_sample *ret)
{
	uint64_t nr, ip = 0;
	bool kernel = true;

	if (!take_u64(c, &nr) || nr > (uint64_t)(c->end - c->p) / sizeof(uint64_t))
		return -EBADMSG;
	for (uint64_t i = 0; i < nr; i++) {
		take_u64(c, &ip);
		if (ip >= (uint64_t)PERF_CONTEXT_MAX) {
			kernel = ip == (uint64_t)PERF_CONTEXT_KERNEL;
			continue;
		}
		if (kernel && ret->nkernel < PERF_KERNEL_FRAMES)
			ret->kernel_ips[ret->nkernel++] = ip;
	}
	return 0;
}

static int decode_sample(struct perf_session *s, struct cursor *c, struct perf_sample *ret)
{
	uint32_t pid_tid[2], cpu_res[2];
	uint64_t ip, abi, size, dyn_size = 0;
	uint64_t regs[PERF_REGS_COUNT];
	const uint8_t *stack;

	memset(ret, 0, sizeof(*ret));
	if (!take_u64(c, &ip) || !take(c, pid_tid, sizeof(pid_tid)) ||
	    !take_u64(c, &ret->time) || !take(c, cpu_res, sizeof(cpu_res)) ||
	    !take_u64(c, &ret->period))
		return -EBADMSG;
	if (s->opts.kernel_stacks && s->opts.kernel && take_callchain(c, ret) < 0)
		return -EBADMSG;
	if (!take_u64(c, &abi))
		return -EBADMSG;
	ret->pid = (pid_t)pid_tid[0];
	ret->tid = (pid_t)pid_tid[1];
	ret->cpu = (int)cpu_res[0];
	if (abi != PERF_SAMPLE_REGS_ABI_NONE && !take(c, regs, sizeof(regs)))
		return -EBADMSG;
	if (!take_u64(c, &size))
		return -EBADMSG;
	stack = c->p;
	if (size && (!take(c, NULL, size) || !take_u64(c, &dyn_size)))
		return -EBADMSG;
	/* Only 64-bit user contexts are unwound; a kernel thread has none. */
	if (abi != PERF_SAMPLE_REGS_ABI_64)
		return 0;
	ret->has_user = true;
	regs_to_dwarf(regs, ret->user.regs);
	ret->user.stack = stack;
	ret->user.stack_size = MIN(dyn_size, size);
	ret->user.stack_start = ret->user.regs[UNWIND_REG_RSP];
	return 0;
}

static void dispatch_comm(struct perf_session *s, struct cursor *c, const struct perf_handlers *h)
{
	uint32_t pid_tid[2];
	char name[64];
	size_t len;

	if (!take(c, pid_tid, sizeof(pid_tid)))
		goto out_bad;
	/* comm is NUL-terminated and padded to 8 bytes, then the sample id. */
	len = strnlen((const char *)c->p, MIN((size_t)(c->end - c->p), sizeof(name) - 1));
	if (len == (size_t)(c->end - c->p))
		goto out_bad;
	memcpy(name, c->p, len);
	name[len] = '\0';
	if ((pid_t)pid_tid[0] == s->opts.pid && h->comm)
		h->comm((pid_t)pid_tid[1], name, h->arg);
	return;
out_bad:
	s->stats.bad++;
}

/* A switch record is its sample id alone: pid, tid, time, cpu. */
static void dispatch_switch(struct perf_session *s, struct cursor *c, uint16_t misc,
			    const struct perf_handlers *h)
{
	uint32_t pid_tid[2];
	uint64_t time;

	if (!take(c, pid_tid, sizeof(pid_tid)) || !take_u64(c, &time)) {
		s->stats.bad++;
		return;
	}
	if ((pid_t)pid_tid[0] == s->opts.pid && h->cpu_switch)
		h->cpu_switch((pid_t)pid_tid[1], time, misc & PERF_RECORD_MISC_SWITCH_OUT,
			      misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT, h->arg);
}

/* PERF_RECORD_FORK and _EXIT: pid, ppid, tid, ptid, time, then the id. */
static void dispatch_task(struct perf_session *s, struct cursor *c, bool exited,
			  const struct perf_handlers *h)
{
	uint32_t ids[4];
	uint64_t time;

	if (!take(c, ids, sizeof(ids)) || !take_u64(c, &time)) {
		s->stats.bad++;
		return;
	}
	if ((pid_t)ids[0] == s->opts.pid && h->task)
		h->task((pid_t)ids[2], time, exited, h->arg);
}

int perf_record_dispatch(struct perf_session *s, const uint8_t *rec, size_t size,
			 const struct perf_handlers *h)
{
	const struct perf_event_header *hdr = (const void *)rec;
	struct cursor c;
	struct perf_sample sample;
	uint64_t v[2];

	/* ring_drain() never passes one, but the cursor would start past its end. */
	if (size < sizeof(*hdr)) {
		s->stats.bad++;
		return 0;
	}
	c = (struct cursor){ rec + sizeof(*hdr), rec + size };
	switch (hdr->type) {
	case PERF_RECORD_SAMPLE:
		if (decode_sample(s, &c, &sample) < 0) {
			s->stats.bad++;
			return 0;
		}
		if (sample.pid != s->opts.pid) {
			s->stats.foreign++;
			return 0;
		}
		s->stats.samples++;
		if (!sample.has_user)
			s->stats.no_user++;
		return h->sample ? h->sample(&sample, h->arg) : 0;
	case PERF_RECORD_COMM:
		dispatch_comm(s, &c, h);
		return 0;
	case PERF_RECORD_FORK:
	case PERF_RECORD_EXIT:
		dispatch_task(s, &c, hdr->type == PERF_RECORD_EXIT, h);
		return 0;
	case PERF_RECORD_SWITCH:
		dispatch_switch(s, &c, hdr->misc, h);
		return 0;
	case PERF_RECORD_LOST:
		if (take(&c, v, sizeof(v)))
			s->stats.lost += v[1];
		return 0;
	case PERF_RECORD_LOST_SAMPLES:
		if (take_u64(&c, &v[0]))
			s->stats.lost += v[0];
		return 0;
	default:
		return 0;
	}
}
