/*
 * perf_record_dispatch() on one arbitrary record, as perf-ring.c hands it
 * over: unwrapped from the ring into a buffer of exactly the record's size.
 * The handlers read every byte of the views they are given (the stack copy,
 * the comm name), so AddressSanitizer sees any view that reaches past the
 * record.
 *
 * Input: one flags byte, then the record.
 *   bit 0: overwrite hdr.size with the record's real length (what the ring
 *          reader guarantees); otherwise hdr.size is whatever the input says,
 *          which the decoder must not trust either.
 *   bit 1: set the pid field of a SAMPLE or COMM record to the target's pid,
 *          so that records reach the handlers without the fuzzer guessing it.
 * Records shorter than their header are dispatched too, although ring_drain()
 * drops them: the decoder must not depend on that.
 */
#include <linux/perf_event.h>
#include <string.h>

#include "fuzz.h"
#include "perf/perf-private.h"

#define TARGET_PID 4242

struct seen {
	const uint8_t *rec;
	size_t size;
	unsigned samples, comms;
	uint64_t sum; /* keeps the reads from being optimized away */
};

static int on_sample(const struct perf_sample *s, void *arg)
{
	struct seen *seen = arg;

	seen->samples++;
	FUZZ_CHECK(s->pid == TARGET_PID, "sample of pid %d dispatched", (int)s->pid);
	FUZZ_CHECK(s->nkernel <= PERF_KERNEL_FRAMES, "%u kernel frames", s->nkernel);
	for (unsigned i = 0; i < s->nkernel; i++)
		FUZZ_CHECK(s->kernel_ips[i] < (uint64_t)PERF_CONTEXT_MAX, "a context marker kept");
	if (!s->has_user) {
		FUZZ_CHECK(!s->user.stack && !s->user.stack_size, "stack without a user context");
		return 0;
	}
	if (s->user.stack_size) {
		FUZZ_CHECK(s->user.stack >= seen->rec &&
				   s->user.stack_size <= (size_t)(seen->rec + seen->size - s->user.stack),
			   "stack view [%p, +%zu) outside the record [%p, +%zu)",
			   (const void *)s->user.stack, s->user.stack_size,
			   (const void *)seen->rec, seen->size);
	}
	for (size_t i = 0; i < s->user.stack_size; i++)
		seen->sum += s->user.stack[i];
	FUZZ_CHECK(s->user.stack_start == s->user.regs[UNWIND_REG_RSP], "stack_start is not rsp");
	return 0;
}

static void on_comm(pid_t tid, const char *name, void *arg)
{
	struct seen *seen = arg;
	size_t len = strlen(name);

	(void)tid;
	seen->comms++;
	FUZZ_CHECK(len < 64, "comm of %zu bytes", len);
	for (size_t i = 0; i < len; i++)
		seen->sum += (uint8_t)name[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct perf_session s = { .opts = { .pid = TARGET_PID } };
	struct seen seen = { 0 };
	struct perf_handlers h = { .sample = on_sample, .comm = on_comm, .arg = &seen };
	struct perf_event_header *hdr;
	struct perf_stats before;
	uint8_t flags, *rec;
	size_t len;
	int r;

	if (size < 1)
		return 0;
	flags = data[0];
	len = size - 1;
	/* Bit 2: the layout of `cprof cpu --kernel` (a call chain after PERIOD). */
	s.opts.kernel = s.opts.kernel_stacks = (flags & 4) != 0;
	/* malloc'd to the byte: the fuzzer's own buffer may have slack after it. */
	rec = malloc(len ? len : 1);
	if (!rec)
		return 0;
	memcpy(rec, data + 1, len);
	hdr = (struct perf_event_header *)rec;
	if ((flags & 1) && len >= sizeof(*hdr))
		hdr->size = (uint16_t)len;
	if ((flags & 2) && len >= sizeof(*hdr)) {
		/* SAMPLE: ip, then pid; COMM: pid first. */
		size_t off = hdr->type == PERF_RECORD_SAMPLE ? 16 : sizeof(*hdr);
		uint32_t pid = TARGET_PID;

		if (hdr->type == PERF_RECORD_COMM || hdr->type == PERF_RECORD_SAMPLE)
			if (len >= off + sizeof(pid))
				memcpy(rec + off, &pid, sizeof(pid));
	}
	seen.rec = rec;
	seen.size = len;

	before = s.stats;
	r = perf_record_dispatch(&s, rec, len, &h);
	FUZZ_CHECK(r == 0, "perf_record_dispatch: %d with handlers that return 0", r);
	FUZZ_CHECK(seen.samples + seen.comms <= 1, "one record, %u samples and %u comms",
		   seen.samples, seen.comms);
	FUZZ_CHECK(s.stats.samples - before.samples == seen.samples,
		   "stats.samples %llu, handler saw %u",
		   (unsigned long long)s.stats.samples, seen.samples);
	FUZZ_CHECK(s.stats.bad + s.stats.foreign + s.stats.samples <= 1,
		   "one record counted %llu times",
		   (unsigned long long)(s.stats.bad + s.stats.foreign + s.stats.samples));

	/* The same bytes once more, with no handlers: nothing to call. */
	h.sample = NULL;
	h.comm = NULL;
	r = perf_record_dispatch(&s, rec, len, &h);
	FUZZ_CHECK(r == 0, "perf_record_dispatch without handlers: %d", r);

	free(rec);
	return 0;
}
