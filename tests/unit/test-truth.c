/*
 * The truth a target reports about its own clocks (tests/targets/truth.h)
 * and the helpers that read it (th_truth_*): test-cpu judges cprof's totals
 * against them, so they are checked apart from cprof.
 *
 *  - the reader, on files built here: a wrapped ring, the slot the writer
 *    may be filling, interpolation, a window not covered, a final record,
 *    and headers it must refuse;
 *  - the reporter, in busy: it names its thread "truth", reports each
 *    busy-N thread by its kernel id, its clocks only go forward, and the
 *    threads' CPU adds up to no more than the process's; without the
 *    argument busy is as it was (no reporter).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../targets/truth.h"
#include "testhelp.h"

TestSuite(truth, .init = th_init, .fini = th_cleanup);

#define RING 8

/*
 * A truth file of one thread with a ring of RING records, @written of them
 * written: record i at realtime 1000 i, process clock 10 i, thread clock
 * 5 i. The slot of record @written holds garbage: the writer is filling it.
 */
static const char *make_ring(uint64_t written, bool final)
{
	const char *path = th_tmp_path("truth");
	size_t rs = sizeof(struct truth_record) + 8;
	size_t size = TRUTH_HEADER_SIZE + RING * rs;
	uint8_t *buf = calloc(1, size);
	struct truth_header *h = (struct truth_header *)buf;
	FILE *f;

	cr_assert(buf);
	h->magic = TRUTH_MAGIC;
	h->version = TRUTH_VERSION;
	h->header_size = TRUTH_HEADER_SIZE;
	h->record_size = (uint32_t)rs;
	h->capacity = RING;
	h->nthreads = 1;
	h->pid = 1;
	h->tids[0] = 42;
	h->written = written;
	h->final = final;
	for (uint64_t i = written > RING ? written - RING : 0; i <= written; i++) {
		struct truth_record *r =
			(struct truth_record *)(buf + TRUTH_HEADER_SIZE + (i % RING) * rs);
		bool filling = i == written;

		r->rt_before = r->rt_after = filling ? 999999999 : (int64_t)(1000 * i);
		r->process = filling ? -3 : (int64_t)(10 * i);
		r->thread[0] = filling ? -7 : (int64_t)(5 * i);
	}
	f = fopen(path, "we");
	cr_assert(f);
	cr_assert_eq(fwrite(buf, 1, size, f), size);
	cr_assert_eq(fclose(f), 0);
	free(buf);
	return path;
}

Test(truth, reads_a_wrapped_ring)
{
	/* Records 13..19 are whole; 12's slot is being refilled with 20. */
	struct th_truth *t = th_truth_read(make_ring(20, false));

	cr_assert_eq(th_truth_nthreads(t), 1);
	cr_assert_eq(th_truth_tid(t, 0), 42);
	cr_assert_eq(th_truth_tid(t, 1), -1);
	cr_expect_eq(th_truth_between(t, 0, 14000, 18500), 22);
	cr_expect_eq(th_truth_between(t, TH_TRUTH_PROCESS, 14000, 18500), 45);
	cr_expect_eq(th_truth_between(t, 0, 13000, 19000), 30);
	cr_expect_eq(th_truth_between(t, 0, 12500, 14000), -1, "record 12 was being overwritten");
	cr_expect_eq(th_truth_between(t, 0, 14000, 19500), -1, "after the last record");
	cr_expect_eq(th_truth_between(t, 0, 15000, 14000), -1, "a window that ends first");
	cr_expect_eq(th_truth_between(t, 1, 14000, 15000), -1, "no such thread");
	/* Each end lay in an interval of 1000 ns in which the thread's clock
	 * went 5 ns. */
	cr_expect_eq(th_truth_gap(t, 14500, 18500), 1000);
	cr_expect_eq(th_truth_slack(t, 0, 14500, 18500), 10);
	th_truth_free(t);
}

Test(truth, a_final_record_stands_for_the_rest)
{
	struct th_truth *t = th_truth_read(make_ring(5, true));

	cr_expect_eq(th_truth_between(t, 0, 1000, 4000), 15);
	cr_expect_eq(th_truth_between(t, 0, 1000, 60000), 15, "the clocks stood still after 4");
	cr_expect_eq(th_truth_between(t, 0, 0, 60000), 20);
	cr_expect_eq(th_truth_between(t, 0, -1, 60000), -1, "before the first record");
	th_truth_free(t);
}

/* busy's reporter: its own thread, every busy-N by its kernel id, clocks
 * that only go forward and add up. */
Test(truth, busy_reports_its_threads)
{
	const char *path = th_tmp_path("truth");
	pid_t pid = TH_SPAWN("busy", "3", "60", path);
	pid_t tids[16];
	int ntids;
	char comm[64];
	bool has_truth = false;

	th_sleep_ms(400);
	ntids = th_task_list(pid, tids, 16);
	cr_assert_eq(ntids, 5, "busy 3 with a reporter: %d threads, want main, 3 and truth", ntids);
	for (int i = 0; i < ntids; i++)
		if (th_task_read(pid, tids[i], "comm", comm, sizeof(comm)) == 0 &&
		    strncmp(comm, "truth", 5) == 0)
			has_truth = true;
	cr_expect(has_truth, "no thread named truth");

	/* A window that ended before the snapshot was taken. */
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct th_truth *t = th_truth_read(path);

	cr_assert_eq(th_truth_nthreads(t), 3);
	for (int i = 0; i < 3; i++) {
		cr_expect_eq(th_task_read(pid, th_truth_tid(t, i), "comm", comm, sizeof(comm)), 0,
			     "clock %d: thread %d is not busy's", i, (int)th_truth_tid(t, i));
		cr_expect(strncmp(comm, "busy-", 5) == 0, "clock %d is thread \"%s\"", i, comm);
	}
	/* Over 200 ms up to 50 ms ago (a reporter at normal priority on a
	 * loaded machine may be late): every clock went forward, and the
	 * three threads used no more than the process. */
	int64_t t1 = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec - 50000000;
	int64_t t0 = t1 - 200000000, threads = 0;
	int64_t process = th_truth_between(t, TH_TRUTH_PROCESS, t0, t1);

	for (int i = 0; i < 3; i++) {
		int64_t c = th_truth_between(t, i, t0, t1);

		cr_expect_geq(c, 0, "clock %d over 200 ms: %lld", i, (long long)c);
		threads += c;
	}
	cr_log_info("busy 3: process %.1f ms, its threads %.1f ms over 200 ms, records <= %.2f ms "
		    "apart%s",
		    (double)process / 1e6, (double)threads / 1e6,
		    (double)th_truth_gap(t, t0, t1) / 1e6,
		    th_truth_fifo(t) ? " (SCHED_FIFO)" : "");
	cr_expect_gt(process, 0);
	/* Interpolated at both ends: allow each clock its slack. */
	int64_t slack = th_truth_slack(t, TH_TRUTH_PROCESS, t0, t1);
	for (int i = 0; i < 3; i++)
		slack += th_truth_slack(t, i, t0, t1);
	cr_expect_leq(threads, process + slack, "threads %lld ns, process %lld ns",
		      (long long)threads, (long long)process);
	cr_expect_leq(th_truth_gap(t, t0, t1), 50000000, "records %.1f ms apart",
		      (double)th_truth_gap(t, t0, t1) / 1e6);
	th_truth_free(t);
}

/* Without TRUTHFILE busy has no reporter: the other suites see it as before. */
Test(truth, busy_without_a_file_has_no_reporter)
{
	pid_t pid = TH_SPAWN("busy", "2", "60");
	pid_t tids[16];
	int ntids = th_task_list(pid, tids, 16);

	cr_expect_eq(ntids, 3, "busy 2: %d threads, want main and 2", ntids);
}
