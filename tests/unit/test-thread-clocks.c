/*
 * lib/cpu/thread-clocks.c on this very process's threads: their clocks read
 * from /proc, samples fed by hand that stand for too little or too much
 * time (as a late sampling timer leaves them), and what each thread is
 * then given, against the thread's own CLOCK_THREAD_CPUTIME_ID.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "cpu/thread-clocks.h"
#include "testhelp.h"

/* A spinning thread's CPU runs on after it is measured by at most this. */
#define SLACK_NS (2ULL * 1000 * 1000)

struct spinner {
	pthread_t th;
	atomic_int go, stop, done, quit;
	pid_t tid;
	uint64_t spun_ns; /* its own clock between go and stop */
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void *spin(void *arg)
{
	struct spinner *s = arg;
	uint64_t t0;

	s->tid = gettid();
	while (!atomic_load(&s->go))
		usleep(1000);
	t0 = thread_cpu_ns();
	while (!atomic_load(&s->stop))
		;
	s->spun_ns = thread_cpu_ns() - t0;
	atomic_store(&s->done, 1);
	while (!atomic_load(&s->quit)) /* alive until told, asleep */
		usleep(1000);
	return NULL;
}

static void spinner_start(struct spinner *s)
{
	cr_assert_eq(pthread_create(&s->th, NULL, spin, s), 0);
	while (!s->tid)
		usleep(1000);
}

static void spinner_end(struct spinner *s)
{
	atomic_store(&s->quit, 1);
	pthread_join(s->th, NULL);
}

static void spin_for(struct spinner *s, unsigned ms)
{
	atomic_store(&s->go, 1);
	th_sleep_ms(ms);
	atomic_store(&s->stop, 1);
	while (!atomic_load(&s->done))
		usleep(1000);
}

/* @n samples of @tid, each of @period, at times now (after any read). */
static void feed(struct cpu_clocks *c, pid_t tid, unsigned n, uint64_t period)
{
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(cpu_clocks_sample(c, tid, now_monotonic_ns(), period), 0);
}

/* The thread's samples weighed in uneven parts: they add up to its clock. */
static uint64_t weigh_all(struct cpu_clocks *c, pid_t tid, uint64_t sampled)
{
	uint64_t given = 0, part = 1;

	while (sampled) {
		part = MIN(part * 3, sampled);
		given += cpu_clocks_weigh(c, tid, part);
		sampled -= part;
	}
	return given;
}

Test(thread_clocks, samples_short_of_a_thread_are_weighed_to_its_clock)
{
	struct spinner s = { 0 };
	struct cpu_clocks c;
	struct cpu_clocks_totals t;
	const struct cpu_thread *ct;

	spinner_start(&s);
	cpu_clocks_init(&c, getpid());
	cr_assert_eq(cpu_clocks_start(&c), 0, "schedstat unreadable");
	cpu_clocks_edge(&c);
	spin_for(&s, 200);
	/* Half the time it ran, as a timer that fired late would leave it. */
	feed(&c, s.tid, 10, 10000000);
	cr_assert_eq(cpu_clocks_stop(&c), 0);
	cpu_clocks_edge(&c);
	spinner_end(&s);
	cpu_clocks_settle(&c, 0, &t);

	ct = NULL;
	for (size_t i = 0; i < c.n; i++)
		if (c.v[i].tid == s.tid)
			ct = &c.v[i];
	cr_assert(ct && ct->alive, "the spinner was not read at the end");
	cr_log_info("spun %.3f ms, its clock %.3f ms", s.spun_ns / 1e6, ct->own_ns / 1e6);
	cr_expect_geq(ct->own_ns, s.spun_ns, "its clock %llu < its own reading %llu",
		      (unsigned long long)ct->own_ns, (unsigned long long)s.spun_ns);
	cr_expect_leq(ct->own_ns, s.spun_ns + SLACK_NS);
	cr_expect_eq(t.sampled_ns, 100000000ULL);
	cr_expect_eq(t.weighed_ns, ct->own_ns);
	cr_expect_eq(weigh_all(&c, s.tid, 100000000ULL), ct->own_ns,
		     "the weighed parts do not add up to the clock");
	cpu_clocks_release(&c);
}

Test(thread_clocks, a_thread_that_ends_gets_what_the_process_clock_says)
{
	struct spinner s = { 0 };
	struct cpu_clocks c;
	struct cpu_clocks_totals t;
	struct timespec p0, p1;
	uint64_t process_ns, others = 0;
	const struct cpu_thread *ct = NULL;

	spinner_start(&s);
	cpu_clocks_init(&c, getpid());
	cr_assert_eq(cpu_clocks_start(&c), 0, "schedstat unreadable");
	cpu_clocks_edge(&c);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &p0);
	/* Sampled before it ends: its clock is never read again. */
	spin_for(&s, 150);
	feed(&c, s.tid, 3, 10000000);
	spinner_end(&s);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &p1);
	cr_assert_eq(cpu_clocks_stop(&c), 0);
	cpu_clocks_edge(&c);
	process_ns = (uint64_t)(p1.tv_sec - p0.tv_sec) * 1000000000ULL +
		     (uint64_t)(p1.tv_nsec - p0.tv_nsec);
	cpu_clocks_settle(&c, process_ns, &t);
	for (size_t i = 0; i < c.n; i++) {
		if (c.v[i].tid == s.tid)
			ct = &c.v[i];
		else
			others += c.v[i].own_ns;
	}
	cr_assert(ct && !ct->alive, "the spinner was read after it ended");
	cr_log_info("spun %.3f ms, given %.3f ms, the others %.3f ms", s.spun_ns / 1e6,
		    ct->own_ns / 1e6, others / 1e6);
	/* The process less the threads still alive: this test's main thread
	 * ran between the reads too, so the slack covers its share. */
	cr_expect_geq(ct->own_ns + SLACK_NS, s.spun_ns);
	cr_expect_leq(ct->own_ns, s.spun_ns + SLACK_NS);
	cr_expect_eq(t.ended_threads, 1);
	cr_expect_eq(t.ended_ns, 0, "a sampled thread's time left unattributed");
	cr_expect_eq(weigh_all(&c, s.tid, 30000000ULL), ct->own_ns);
	cpu_clocks_release(&c);
}

Test(thread_clocks, a_thread_never_sampled_is_said_apart)
{
	struct spinner s = { 0 };
	struct cpu_clocks c;
	struct cpu_clocks_totals t;

	spinner_start(&s);
	cpu_clocks_init(&c, getpid());
	cr_assert_eq(cpu_clocks_start(&c), 0, "schedstat unreadable");
	cpu_clocks_edge(&c);
	spin_for(&s, 50);
	cr_assert_eq(cpu_clocks_stop(&c), 0);
	cpu_clocks_edge(&c);
	cpu_clocks_settle(&c, 0, &t);
	spinner_end(&s);
	cr_expect_geq(t.quiet_threads, 1);
	cr_expect_geq(t.quiet_ns, s.spun_ns);
	cr_expect_eq(t.weighed_ns, 0);
	/* Nothing to weigh: a sample of a thread unknown is left as it is. */
	cr_expect_eq(cpu_clocks_weigh(&c, s.tid, 1234), 1234);
	cpu_clocks_release(&c);
}
