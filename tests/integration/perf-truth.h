/*
 * The kernel's own count of the samples a lib/perf session should hand
 * over: test-perf's oracle. It opens the same events lib/perf opens for a
 * scope (same clock, period, inherit and exclusions, one per online CPU),
 * asks for nothing but each sample's pid, and counts the samples of the
 * target in small rings of its own. Nothing of lib/perf is used here: a
 * bug in its opening, ring reading or decoding cannot hide in both counts.
 */
#ifndef CPROF_TEST_PERF_TRUTH_H
#define CPROF_TEST_PERF_TRUTH_H

#include <criterion/criterion.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "perf/perf.h"

/* Data pages of a ring: 2048 records of 16 bytes, 2 s of one CPU's samples
 * at 1 ms, so only a reader starved that long loses any. */
#define PERF_TRUTH_PAGES 8

struct perf_truth {
	pid_t pid;
	size_t n;          /* events opened, one per online CPU */
	int *fds;
	void **rings;      /* each: the metadata page, then PERF_TRUTH_PAGES */
	uint64_t samples;  /* PERF_RECORD_SAMPLE records of @pid */
	uint64_t lost;     /* records the kernel dropped, of any pid */
};

/* What decides when lib/perf's perf_attr_init() samples, written again on
 * purpose: an oracle that called it would share its mistakes. */
static inline void perf_truth_attr(struct perf_event_attr *attr, const struct perf_opts *o)
{
	memset(attr, 0, sizeof(*attr));
	attr->size = sizeof(*attr);
	attr->type = PERF_TYPE_SOFTWARE;
	attr->config = o->scope == PERF_SCOPE_SYSTEM ? PERF_COUNT_SW_CPU_CLOCK
						     : PERF_COUNT_SW_TASK_CLOCK;
	attr->sample_period = o->period_ns;
	attr->sample_type = PERF_SAMPLE_TID;
	attr->disabled = 1;
	attr->inherit = o->scope == PERF_SCOPE_THREAD;
	attr->exclude_kernel = !o->kernel;
	attr->exclude_hv = 1;
	attr->exclude_idle = o->scope == PERF_SCOPE_SYSTEM;
}

static inline size_t perf_truth_ring_bytes(void)
{
	return (size_t)(PERF_TRUTH_PAGES + 1) * (size_t)sysconf(_SC_PAGESIZE);
}

/* Opens and maps the event of @pid (-1: all) on @cpu; -ENODEV for a CPU
 * that is offline. */
static inline int perf_truth_open_cpu(struct perf_truth *t, const struct perf_event_attr *attr,
				      pid_t pid, int cpu)
{
	long fd = syscall(SYS_perf_event_open, attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
	void *ring;

	if (fd < 0)
		return -errno;
	ring = mmap(NULL, perf_truth_ring_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
	if (ring == MAP_FAILED) {
		int r = -errno;

		close((int)fd);
		return r;
	}
	t->fds[t->n] = (int)fd;
	t->rings[t->n++] = ring;
	return 0;
}

static inline void perf_truth_release(struct perf_truth *t)
{
	for (size_t i = 0; i < t->n; i++) {
		munmap(t->rings[i], perf_truth_ring_bytes());
		close(t->fds[i]);
	}
	free(t->fds);
	free(t->rings);
	memset(t, 0, sizeof(*t));
}

/*
 * Opens (disabled) the events lib/perf opens for @o. In thread scope that
 * is one per (thread, CPU): the caller's target has one thread when this
 * runs, so one per CPU on @o->pid, and its later threads inherit them. The
 * CPUs are tried up to the configured count; an offline one refuses with
 * ENODEV and is left out, as lib/perf leaves out what is not online.
 * Returns 0 or -errno of perf_event_open or mmap, with nothing left open.
 */
static inline int perf_truth_open(struct perf_truth *t, const struct perf_opts *o)
{
	struct perf_event_attr attr;
	long ncpus = sysconf(_SC_NPROCESSORS_CONF);
	int r = 0;

	memset(t, 0, sizeof(*t));
	t->pid = o->pid;
	t->fds = calloc((size_t)ncpus, sizeof(*t->fds));
	t->rings = calloc((size_t)ncpus, sizeof(*t->rings));
	cr_assert(t->fds && t->rings);
	perf_truth_attr(&attr, o);
	for (int cpu = 0; cpu < ncpus && r >= 0; cpu++) {
		r = perf_truth_open_cpu(t, &attr, o->scope == PERF_SCOPE_SYSTEM ? -1 : o->pid, cpu);
		if (r == -ENODEV)
			r = 0;
	}
	if (r < 0)
		perf_truth_release(t);
	return r;
}

static inline void perf_truth_ioctl(struct perf_truth *t, unsigned long request)
{
	for (size_t i = 0; i < t->n; i++)
		cr_assert_eq(ioctl(t->fds[i], request, 0), 0, "oracle ioctl: %s", strerror(errno));
}

/* The @size bytes at @pos of the data area of @ring, read around its end. */
static inline void perf_truth_read(const void *ring, uint64_t pos, void *dst, size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), data_size = PERF_TRUTH_PAGES * page;

	for (size_t i = 0; i < size; i++)
		((uint8_t *)dst)[i] = ((const uint8_t *)ring)[page + (pos + i) % data_size];
}

/*
 * Counts the records of one ring. A sample is { header, u32 pid, u32 tid },
 * a lost record { header, u64 id, u64 lost } (sample_id_all is off).
 */
static inline void perf_truth_drain_ring(struct perf_truth *t, void *ring)
{
	struct perf_event_mmap_page *meta = ring;
	/* Pairs with the kernel's store of data_head after its records. */
	uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
	uint64_t tail = meta->data_tail;

	while (tail < head) {
		struct perf_event_header hdr;
		uint32_t pid;
		uint64_t lost;

		perf_truth_read(ring, tail, &hdr, sizeof(hdr));
		cr_assert(hdr.size >= sizeof(hdr) && hdr.size <= head - tail,
			  "oracle: record of %u bytes with %llu in the ring", hdr.size,
			  (unsigned long long)(head - tail));
		if (hdr.type == PERF_RECORD_SAMPLE) {
			perf_truth_read(ring, tail + sizeof(hdr), &pid, sizeof(pid));
			t->samples += (pid_t)pid == t->pid;
		} else if (hdr.type == PERF_RECORD_LOST) {
			perf_truth_read(ring, tail + sizeof(hdr) + 8, &lost, sizeof(lost));
			t->lost += lost;
		}
		tail += hdr.size;
	}
	/* The records are read before the kernel may write over them. */
	__atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
}

static inline void perf_truth_drain(struct perf_truth *t)
{
	for (size_t i = 0; i < t->n; i++)
		perf_truth_drain_ring(t, t->rings[i]);
}

#endif
