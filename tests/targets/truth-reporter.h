/*
 * A target's own report of its CPU clocks (the format is truth.h): a thread
 * named "truth" reads, about every TRUTH_PERIOD_NS, CLOCK_PROCESS_CPUTIME_ID
 * and the CLOCK_THREAD_CPUTIME_ID of each thread it was given
 * (pthread_getcpuclockid), between two CLOCK_REALTIME stamps, into a ring
 * in a shared mapping of a file. One reporter per program (static state):
 * include this in the target's one source file.
 *
 * Its cost to the target: one wake-up and K + 1 reads of CPU clocks a
 * millisecond. On the project's VMs (a paravirtualized guest, where
 * enabling interrupts is half of the reporter's profile) a wake-up from
 * nanosleep costs ~20 us of CPU and a read of a CPU clock ~1.4 us, and a
 * record 25-50 us in all on a loaded machine: 2-5% of one CPU for K = 1..8,
 * its own, counted in the process clock as it should be (it is a thread of
 * the process), never in a busy thread's. Reading every 2 ms would halve
 * that and double what a record interval holds of a thread's CPU, which
 * bounds how well the truth is known at a window's ends (th_truth_slack):
 * up to 1.1% of a thread's time at K = 8 beside other load, against 0.5%
 * at 1 ms.
 *
 * As root it runs at SCHED_FIFO so that a loaded machine does not leave
 * holes in its readings where a window starts or ends; otherwise at normal
 * priority (the header says which).
 */
#ifndef CPROF_TESTS_TRUTH_REPORTER_H
#define CPROF_TESTS_TRUTH_REPORTER_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "truth.h"

static struct {
	struct truth_header *h;
	uint8_t *ring;
	size_t map_size;
	clockid_t clocks[TRUTH_MAX_THREADS];
	pthread_t thread;
	int stop; /* atomic */
} truth_state;

static int64_t truth_clock_ns(clockid_t clock)
{
	struct timespec ts;

	if (clock_gettime(clock, &ts) != 0)
		return -1;
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Reads every clock into the slot of the next record and publishes it. */
static void truth_record(void)
{
	struct truth_header *h = truth_state.h;
	uint64_t w = __atomic_load_n(&h->written, __ATOMIC_RELAXED);
	struct truth_record *r =
		(struct truth_record *)(truth_state.ring + (w % h->capacity) * h->record_size);

	/* A record is stamped with the middle of [rt_before, rt_after]: retry
	 * the ones that were preempted in between (> 100 us). */
	for (int tries = 0;; tries++) {
		r->rt_before = truth_clock_ns(CLOCK_REALTIME);
		r->process = truth_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
		for (uint32_t i = 0; i < h->nthreads; i++)
			r->thread[i] = truth_clock_ns(truth_state.clocks[i]);
		r->rt_after = truth_clock_ns(CLOCK_REALTIME);
		if (r->rt_after - r->rt_before < 100000 || tries == 10)
			break;
	}
	__atomic_store_n(&h->written, w + 1, __ATOMIC_RELEASE);
}

static void *truth_main(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&truth_state.stop, __ATOMIC_ACQUIRE)) {
		struct timespec d = {0, TRUTH_PERIOD_NS};

		nanosleep(&d, NULL);
		truth_record();
	}
	return NULL;
}

/*
 * Starts the reporter: @n threads (@threads, their kernel ids @tids) and
 * the process, recorded into a new file @path (replaced if it exists).
 * Returns 0, or -errno with nothing started.
 */
static int truth_start(const char *path, const pthread_t *threads, const pid_t *tids, int n)
{
	char tmp[4096];
	size_t record_size = sizeof(struct truth_record) + 8 * (size_t)n;
	size_t size = TRUTH_HEADER_SIZE + (size_t)TRUTH_CAPACITY * record_size;
	struct sched_param sp = {.sched_priority = 10};
	struct truth_header *h;
	int fd, err;

	if (n < 0 || n > TRUTH_MAX_THREADS)
		return -E2BIG;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	for (int i = 0; i < n; i++) {
		err = pthread_getcpuclockid(threads[i], &truth_state.clocks[i]);
		if (err)
			return -err;
	}
	fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) != 0) {
		err = -errno;
		goto out_unlink;
	}
	h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED) {
		err = -errno;
		goto out_unlink;
	}
	h->magic = TRUTH_MAGIC;
	h->version = TRUTH_VERSION;
	h->header_size = TRUTH_HEADER_SIZE;
	h->record_size = (uint32_t)record_size;
	h->capacity = TRUTH_CAPACITY;
	h->nthreads = (uint32_t)n;
	h->pid = (int32_t)getpid();
	for (int i = 0; i < n; i++)
		h->tids[i] = (int32_t)tids[i];
	truth_state.h = h;
	truth_state.ring = (uint8_t *)h + TRUTH_HEADER_SIZE;
	truth_state.map_size = size;
	truth_record();
	if (rename(tmp, path) != 0) {
		err = -errno;
		goto out_unmap;
	}
	close(fd);
	err = pthread_create(&truth_state.thread, NULL, truth_main, NULL);
	if (err) {
		unlink(path);
		munmap(h, size);
		truth_state.h = NULL;
		return -err;
	}
	pthread_setname_np(truth_state.thread, "truth");
	h->fifo = pthread_setschedparam(truth_state.thread, SCHED_FIFO, &sp) == 0;
	return 0;

out_unmap:
	munmap(h, size);
	truth_state.h = NULL;
out_unlink:
	unlink(tmp);
	close(fd);
	return err;
}

/*
 * Stops the reporter with a last record, marked final: for a target about
 * to exit, so that a reader knows its clocks stand still from there on.
 * Does nothing when no reporter runs.
 */
static void truth_finish(void)
{
	if (!truth_state.h)
		return;
	__atomic_store_n(&truth_state.stop, 1, __ATOMIC_RELEASE);
	pthread_join(truth_state.thread, NULL);
	truth_record();
	__atomic_store_n(&truth_state.h->final, 1, __ATOMIC_RELEASE);
}

#endif
