/*
 * locks MODE SECONDS BASE_US REPORT
 *
 * Ground truth for cprof block and cprof mutex. A "holder" thread takes a
 * lock and keeps it for a chosen time while a "waiter" thread, told the
 * lock is held, blocks on it at a known call site (each site its own
 * noinline function). The waiter measures every wait itself, with the
 * clock around the call, and on SIGUSR2 (or at the end) writes per site:
 *   "SITE COUNT TOTAL_NS\n"
 * to REPORT (written beside, then renamed). The truth covers exactly cprof's
 * window: the program reloads its own GOT slot of a function the agent
 * hooks in that mode (pthread_mutex_lock; pthread_rwlock_rdlock for kinds,
 * pthread_create for create) and counts only while it differs from its
 * value at start; once the hook is gone the counts freeze. SIGUSR1 opens a
 * window by hand instead (runs without cprof); SIGUSR2 writes the report.
 *
 * Modes:
 *   ab      site_a waits once for 10*BASE, site_b ten times for BASE:
 *           equal true totals, very different durations (what Go's
 *           saveblockevent() must not tell apart).
 *   three   site_1x, site_2x, site_3x wait BASE, 2*BASE, 3*BASE, with
 *           counts 6:3:2, so equal totals.
 *   holders the mutex profile: holder_long keeps the lock 10*BASE,
 *           holder_short BASE, taking turns; the waiter's delay is charged
 *           (in the truth) to the holder that held it. Sites are the
 *           holders' unlock functions.
 *   kinds   the waiter blocks on a rwlock (wait_rdlock, wait_wrlock), a
 *           condition variable (wait_cond) and a semaphore (wait_sem).
 *   create  create_threads starts short threads, one per BASE us.
 * Prints "ready"; exits by itself after SECONDS.
 */
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };

	while (nanosleep(&ts, &ts) != 0)
		;
}

enum { MAX_SITES = 8 };
static const char *site_names[MAX_SITES];
static uint64_t site_count[MAX_SITES], site_ns[MAX_SITES];
static volatile sig_atomic_t counting, report_now, by_hand;
static int frozen, hook_slot_kind;
static void *slot_at_start;

#define GOT_SLOT(fn)                                                                   \
	({                                                                             \
		void *v_;                                                              \
		__asm__ volatile("movq " #fn "@GOTPCREL(%%rip), %0" : "=r"(v_));       \
		v_;                                                                    \
	})

static void *hook_slot(void)
{
	switch (hook_slot_kind) {
	case 1:
		return GOT_SLOT(pthread_rwlock_rdlock);
	case 2:
		return GOT_SLOT(pthread_create);
	default:
		return GOT_SLOT(pthread_mutex_lock);
	}
}

/* Counting follows the hook (see the top). */
static void follow_hook(void)
{
	bool hooked;

	if (by_hand || frozen)
		return;
	hooked = hook_slot() != slot_at_start;
	if (hooked && !counting)
		counting = 1;
	else if (!hooked && counting) {
		counting = 0;
		frozen = 1;
	}
}
static const char *report_path;
static uint64_t base_ns, end_ns;

static void count(int site, uint64_t ns)
{
	follow_hook();
	if (!counting)
		return;
	__atomic_fetch_add(&site_count[site], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&site_ns[site], ns, __ATOMIC_RELAXED);
}

static void write_report(void)
{
	char tmp[4200];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", report_path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	for (int i = 0; i < MAX_SITES; i++)
		if (site_names[i])
			fprintf(f, "%s %llu %llu\n", site_names[i],
				(unsigned long long)site_count[i], (unsigned long long)site_ns[i]);
	fclose(f);
	rename(tmp, report_path);
}

static void on_signal(int sig)
{
	if (sig == SIGUSR1) {
		by_hand = 1;
		counting = 1;
	}
	else {
		counting = 0;
		report_now = 1;
	}
}

/* ---- a lock held for a while by the holder, while the waiter waits ---- */

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
/*
 * The holder protocol, by generations so that no request is lost: the
 * waiter posts request N (how long, which lock) once hold N-1 is over; the
 * holder takes the lock, says "held N", sleeps, says "done N", unlocks.
 */
static uint64_t req_gen, held_gen, done_gen;
static uint64_t req_ns;
static int req_kind; /* 0 mutex, 1 rwlock (write-held) */
static int held;     /* the holders mode's flag (holders_main) */

static bool running(void)
{
	return now_ns() < end_ns;
}

static void *holder_main(void *arg)
{
	uint64_t seen = 0;

	(void)arg;
	while (running()) {
		uint64_t gen = __atomic_load_n(&req_gen, __ATOMIC_ACQUIRE);

		if (gen == seen) {
			sleep_ns(20000);
			continue;
		}
		seen = gen;
		if (req_kind == 0)
			pthread_mutex_lock(&m);
		else
			pthread_rwlock_wrlock(&rw);
		__atomic_store_n(&held_gen, gen, __ATOMIC_RELEASE);
		sleep_ns(req_ns);
		__atomic_store_n(&done_gen, gen, __ATOMIC_RELEASE);
		if (req_kind == 0)
			pthread_mutex_unlock(&m);
		else
			pthread_rwlock_unlock(&rw);
	}
	return NULL;
}

/* Asks the holder to hold the lock for @ns; returns once it does. */
static void ask_hold(uint64_t ns, int kind)
{
	uint64_t gen = __atomic_load_n(&req_gen, __ATOMIC_RELAXED);

	while (__atomic_load_n(&done_gen, __ATOMIC_ACQUIRE) != gen && running())
		sleep_ns(10000);
	req_ns = ns;
	req_kind = kind;
	__atomic_store_n(&req_gen, gen + 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&held_gen, __ATOMIC_ACQUIRE) != gen + 1 && running())
		sleep_ns(10000);
}

#define WAIT_SITE(name, idx)                                        \
	static NOINLINE void name(void)                             \
	{                                                           \
		uint64_t t0 = now_ns();                             \
		pthread_mutex_lock(&m);                             \
		count(idx, now_ns() - t0);                          \
		pthread_mutex_unlock(&m);                           \
	}

WAIT_SITE(site_a, 0)
WAIT_SITE(site_b, 1)
WAIT_SITE(site_1x, 2)
WAIT_SITE(site_2x, 3)
WAIT_SITE(site_3x, 4)

static void wait_after_hold(void (*site)(void), uint64_t ns)
{
	ask_hold(ns, 0);
	if (running())
		site();
}

static void mode_ab(void)
{
	while (running() && !report_now) {
		wait_after_hold(site_a, 10 * base_ns);
		for (int i = 0; i < 10 && running(); i++)
			wait_after_hold(site_b, base_ns);
	}
}

static void mode_three(void)
{
	while (running() && !report_now) {
		for (int i = 0; i < 6; i++)
			wait_after_hold(site_1x, base_ns);
		for (int i = 0; i < 3; i++)
			wait_after_hold(site_2x, 2 * base_ns);
		for (int i = 0; i < 2; i++)
			wait_after_hold(site_3x, 3 * base_ns);
	}
}

/* ---- holders: the mutex profile's truth ---- */

static int turn; /* which holder holds next: 0 long, 1 short */
static uint64_t hold_started;

/* Keeps the unlock a real call, not a tail jump: the unlocking frame must
 * be the holder's own function, as in the truth. */
static volatile int after_unlock;

static NOINLINE void holder_long(void)
{
	pthread_mutex_lock(&m);
	hold_started = now_ns();
	__atomic_store_n(&held, 1, __ATOMIC_RELEASE);
	sleep_ns(10 * base_ns);
	__atomic_store_n(&held, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&m);
	after_unlock++;
}

static NOINLINE void holder_short(void)
{
	pthread_mutex_lock(&m);
	hold_started = now_ns();
	__atomic_store_n(&held, 1, __ATOMIC_RELEASE);
	sleep_ns(base_ns);
	__atomic_store_n(&held, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&m);
	after_unlock++;
}

static void *holders_main(void *arg)
{
	(void)arg;
	while (running()) {
		if (__atomic_load_n(&turn, __ATOMIC_ACQUIRE) == 0)
			holder_long();
		else
			holder_short();
		__atomic_store_n(&turn, 2, __ATOMIC_RELEASE); /* done: waiter picks next */
		while (__atomic_load_n(&turn, __ATOMIC_ACQUIRE) == 2 && running())
			sleep_ns(10000);
	}
	return NULL;
}

static NOINLINE void contend(int holder)
{
	uint64_t t0 = now_ns();

	pthread_mutex_lock(&m);
	count(holder == 0 ? 5 : 6, now_ns() - t0);
	pthread_mutex_unlock(&m);
}

static void mode_holders(void)
{
	static pthread_t th;
	static int next;

	/* Started once; mode functions return on SIGUSR2 and are called again. */
	if (!th) {
		__atomic_store_n(&turn, 0, __ATOMIC_RELEASE);
		pthread_create(&th, NULL, holders_main, NULL);
	}
	while (running() && !report_now) {
		/* The hold may be over already (we were late): then skip it. */
		while (!__atomic_load_n(&held, __ATOMIC_ACQUIRE) &&
		       __atomic_load_n(&turn, __ATOMIC_ACQUIRE) != 2 && running())
			sleep_ns(1000);
		if (__atomic_load_n(&held, __ATOMIC_ACQUIRE))
			contend(next);
		while (__atomic_load_n(&turn, __ATOMIC_ACQUIRE) != 2 && running())
			sleep_ns(1000);
		next = !next;
		__atomic_store_n(&turn, next, __ATOMIC_RELEASE);
	}
}

/* ---- kinds ---- */

static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t cv_m = PTHREAD_MUTEX_INITIALIZER;
static int cv_flag;
static sem_t sem;
/* The waiter says what it is about to wait for; the signaller wakes it a
 * base time later, so that every wait really blocks. */
static int about_to; /* 0 nothing, 1 cond, 2 sem */

static NOINLINE void wait_rdlock(void)
{
	uint64_t t0 = now_ns();

	pthread_rwlock_rdlock(&rw);
	count(0, now_ns() - t0);
	pthread_rwlock_unlock(&rw);
}

static NOINLINE void wait_wrlock(void)
{
	uint64_t t0 = now_ns();

	pthread_rwlock_wrlock(&rw);
	count(1, now_ns() - t0);
	pthread_rwlock_unlock(&rw);
}

static NOINLINE void wait_cond(void)
{
	uint64_t t0 = now_ns();

	pthread_mutex_lock(&cv_m);
	__atomic_store_n(&about_to, 1, __ATOMIC_RELEASE);
	while (!cv_flag && running())
		pthread_cond_wait(&cv, &cv_m);
	cv_flag = 0;
	pthread_mutex_unlock(&cv_m);
	count(2, now_ns() - t0);
}

static NOINLINE void wait_sem(void)
{
	uint64_t t0 = now_ns();

	__atomic_store_n(&about_to, 2, __ATOMIC_RELEASE);
	while (sem_wait(&sem) != 0)
		;
	count(3, now_ns() - t0);
}

static void *signaller_main(void *arg)
{
	(void)arg;
	while (running()) {
		int what = __atomic_exchange_n(&about_to, 0, __ATOMIC_ACQ_REL);

		if (!what) {
			sleep_ns(20000);
			continue;
		}
		sleep_ns(base_ns);
		if (what == 1) {
			pthread_mutex_lock(&cv_m);
			cv_flag = 1;
			pthread_cond_signal(&cv);
			pthread_mutex_unlock(&cv_m);
		} else {
			sem_post(&sem);
		}
	}
	/* Release a last waiter. */
	pthread_mutex_lock(&cv_m);
	cv_flag = 1;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&cv_m);
	sem_post(&sem);
	return NULL;
}

static void mode_kinds(void)
{
	static pthread_t th;

	if (!th) {
		sem_init(&sem, 0, 0);
		pthread_create(&th, NULL, signaller_main, NULL);
	}
	while (running() && !report_now) {
		ask_hold(base_ns, 1);
		wait_rdlock();
		ask_hold(base_ns, 1);
		wait_wrlock();
		wait_cond();
		wait_sem();
	}
}

/* ---- create ---- */

static void *short_thread(void *arg)
{
	return arg;
}

static NOINLINE void create_threads(void)
{
	pthread_t th;

	if (pthread_create(&th, NULL, short_thread, NULL) == 0) {
		count(0, 0);
		pthread_join(th, NULL);
	}
}

static void mode_create(void)
{
	while (running() && !report_now) {
		create_threads();
		sleep_ns(base_ns);
	}
}

int main(int argc, char **argv)
{
	static const struct {
		const char *mode;
		void (*fn)(void);
		const char *sites[MAX_SITES];
	} modes[] = {
		{ "ab", mode_ab, { "site_a", "site_b" } },
		{ "three", mode_three, { NULL, NULL, "site_1x", "site_2x", "site_3x" } },
		{ "holders", mode_holders, { [5] = "holder_long", [6] = "holder_short" } },
		{ "kinds", mode_kinds, { "wait_rdlock", "wait_wrlock", "wait_cond", "wait_sem" } },
		{ "create", mode_create, { "create_threads" } },
	};
	unsigned seconds;
	pthread_t holder;
	int which = -1;

	if (argc != 5) {
		fprintf(stderr, "usage: locks ab|three|holders|kinds|create SECONDS BASE_US REPORT\n");
		return 2;
	}
	for (int i = 0; i < (int)(sizeof(modes) / sizeof(modes[0])); i++)
		if (!strcmp(argv[1], modes[i].mode))
			which = i;
	if (which < 0)
		return 2;
	seconds = (unsigned)atoi(argv[2]);
	base_ns = (uint64_t)atoi(argv[3]) * 1000;
	report_path = argv[4];
	memcpy(site_names, modes[which].sites, sizeof(site_names));
	hook_slot_kind = !strcmp(argv[1], "kinds") ? 1 : !strcmp(argv[1], "create") ? 2 : 0;
	slot_at_start = hook_slot();
	alarm(seconds + 10);
	end_ns = now_ns() + (uint64_t)seconds * 1000000000ull;
	signal(SIGUSR1, on_signal);
	signal(SIGUSR2, on_signal);
	pthread_create(&holder, NULL, holder_main, NULL);
	printf("ready\n");
	fflush(stdout);
	while (running()) {
		if (!report_now)
			modes[which].fn();
		if (report_now) {
			write_report();
			report_now = 0;
			/* Keep running (without counting) until the end. */
			while (running() && !report_now)
				sleep_ns(10000000);
		}
	}
	pthread_join(holder, NULL);
	write_report();
	return 0;
}
