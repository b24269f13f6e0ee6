/*
 * The truth a target reports about itself: the layout of the file in which
 * a target's "truth" thread (truth-reporter.h) records its own CPU clocks,
 * and which the tests read (th_truth_* in tests/helpers/testhelp.h).
 *
 * A profiler's CPU total is judged against these clocks. They are read by
 * the target, in the target, at known times: not from /proc, not by perf,
 * not by anything cprof reads for its weights, so that a profile scaled to
 * cprof's own clock cannot pass by construction.
 *
 * The file is a fixed-size ring, written through a shared mapping:
 *
 *   struct truth_header                        (TRUTH_HEADER_SIZE bytes)
 *   capacity records of record_size bytes:     struct truth_record
 *
 * Record number i (0, 1, ...) is at slot i % capacity. The writer fills
 * the slot of record `written`, then stores written + 1 (release). A reader
 * loads written (acquire) as w0, copies the ring, loads it again as w1: the
 * records [max(0, w1 + 1 - capacity), w0) are whole (the writer may be
 * filling the slot of record w1 meanwhile). At one record every ~1 ms the
 * ring holds the last TRUTH_CAPACITY ms.
 *
 * The file appears under its name complete (written as NAME.tmp, then
 * renamed) with its first record in it, before the target says "ready".
 * When the target exits by itself, its last record is taken just before
 * and `final` is set: nothing of the process runs after it but the exit.
 */
#ifndef CPROF_TESTS_TRUTH_H
#define CPROF_TESTS_TRUTH_H

#include <stdint.h>

#define TRUTH_MAGIC 0x3168747572747063ULL /* "cptruth1", little-endian */
#define TRUTH_VERSION 1
#define TRUTH_HEADER_SIZE 4096
#define TRUTH_MAX_THREADS 64
#define TRUTH_CAPACITY 32768 /* records: ~35 s at the reporter's pace */
#define TRUTH_PERIOD_NS 1000000 /* between two records, as asked of nanosleep */

struct truth_header {
	uint64_t magic;
	uint32_t version;
	uint32_t header_size;
	uint32_t record_size; /* sizeof(struct truth_record) + 8 * nthreads */
	uint32_t capacity;    /* records in the ring */
	uint32_t nthreads;    /* thread clocks in each record */
	int32_t pid;
	int32_t tids[TRUTH_MAX_THREADS]; /* kernel thread id (gettid) of each clock */
	int32_t fifo;	/* 1: the reporter runs at SCHED_FIFO (its readings are on time) */
	uint32_t final; /* 1: the last record is the process's last */
	uint64_t written; /* records written so far (atomic: release / acquire) */
};

struct truth_record {
	int64_t rt_before; /* CLOCK_REALTIME, ns, before the clocks were read */
	int64_t rt_after;  /* ... and after */
	int64_t process;   /* CLOCK_PROCESS_CPUTIME_ID, ns */
	int64_t thread[];  /* each thread's CLOCK_THREAD_CPUTIME_ID, ns; -1: gone */
};

_Static_assert(sizeof(struct truth_header) <= TRUTH_HEADER_SIZE, "truth header too big");

#endif
