/*
 * wallmix SECONDS REPORT
 *
 * Threads whose time goes to known places, for cprof wall:
 *   sleeper    nanosleep() 50 ms at a time, in sleeper_nap()
 *   condwait   pthread_cond_wait(), woken every 5 ms by signaler
 *   signaler   nanosleep() 5 ms, then signals condwait
 *   piperead   read() of a pipe the main thread feeds every 20 ms
 *   epoller    epoll_wait() on a descriptor that never fires
 *   spinner    spins 3 ms in spin_part(), then sleeps 7 ms in rest_part()
 *   ephemeral  one at a time, each living 1 s asleep in ephemeral_nap(),
 *              a new one every 1.5 s
 * The main thread feeds the pipe. Each thread measures where its own time
 * went (CLOCK_MONOTONIC around each phase). On SIGUSR2 the process writes
 * to REPORT (beside, then renamed) one line per thread:
 *   NAME TID BORN_NS DIED_NS PHASE1_NS PHASE2_NS
 * with times on CLOCK_MONOTONIC, DIED_NS 0 while it lives; PHASE1 is the
 * spinner's spinning, PHASE2 its resting (0 for the others).
 * Prints "ready"; exits after SECONDS.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 256

struct record {
	char name[16];
	pid_t tid;
	_Atomic uint64_t born, died, phase1, phase2;
};

static struct record records[MAX_THREADS];
static atomic_uint nrecords;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static unsigned long signals_sent;
static int pipefd[2];
static volatile sig_atomic_t report_now;
static const char *report_path;
static uint64_t end_ns;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void nap_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };

	while (nanosleep(&ts, &ts) < 0)
		;
}

static struct record *enter(const char *name)
{
	unsigned i = atomic_fetch_add(&nrecords, 1);
	struct record *r = &records[i % MAX_THREADS];

	snprintf(r->name, sizeof(r->name), "%s", name);
	r->tid = gettid();
	r->born = now_ns();
	pthread_setname_np(pthread_self(), name);
	return r;
}

static void leave(struct record *r)
{
	r->died = now_ns();
}

static __attribute__((noinline)) void sleeper_nap(void)
{
	nap_ns(50 * 1000000ull);
	__asm__ volatile("");
}

static void *sleeper(void *arg)
{
	(void)arg;
	enter("sleeper");
	while (now_ns() < end_ns)
		sleeper_nap();
	return NULL;
}

static void *condwait(void *arg)
{
	unsigned long seen = 0;

	(void)arg;
	enter("condwait");
	pthread_mutex_lock(&lock);
	while (now_ns() < end_ns) {
		while (signals_sent == seen && now_ns() < end_ns)
			pthread_cond_wait(&cond, &lock);
		seen = signals_sent;
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

static void *signaler(void *arg)
{
	(void)arg;
	enter("signaler");
	while (now_ns() < end_ns + 10 * 1000000ull) {
		nap_ns(5 * 1000000ull);
		pthread_mutex_lock(&lock);
		signals_sent++;
		pthread_cond_signal(&cond);
		pthread_mutex_unlock(&lock);
	}
	return NULL;
}

static void *piperead(void *arg)
{
	char buf[64];

	(void)arg;
	enter("piperead");
	while (read(pipefd[0], buf, sizeof(buf)) > 0)
		;
	return NULL;
}

static void *epoller(void *arg)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int ep = epoll_create1(EPOLL_CLOEXEC), efd = eventfd(0, EFD_CLOEXEC);

	(void)arg;
	enter("epoller");
	epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev);
	while (now_ns() < end_ns)
		epoll_wait(ep, &ev, 1, 100);
	return NULL;
}

static __attribute__((noinline)) void spin_part(struct record *r)
{
	uint64_t t0 = now_ns(), t;

	do
		t = now_ns();
	while (t - t0 < 3 * 1000000ull);
	r->phase1 += t - t0;
}

static __attribute__((noinline)) void rest_part(struct record *r)
{
	uint64_t t0 = now_ns();

	nap_ns(7 * 1000000ull);
	r->phase2 += now_ns() - t0;
}

static void *spinner(void *arg)
{
	struct record *r;

	(void)arg;
	r = enter("spinner");
	while (now_ns() < end_ns) {
		spin_part(r);
		rest_part(r);
	}
	return NULL;
}

static __attribute__((noinline)) void ephemeral_nap(void)
{
	nap_ns(1000 * 1000000ull);
	__asm__ volatile("");
}

static void *ephemeral(void *arg)
{
	struct record *r;

	(void)arg;
	r = enter("ephemeral");
	ephemeral_nap();
	leave(r);
	return NULL;
}

static void on_usr2(int sig)
{
	(void)sig;
	report_now = 1;
}

static void write_report(void)
{
	char tmp[4096];
	unsigned n = atomic_load(&nrecords);
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", report_path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	for (unsigned i = 0; i < n && i < MAX_THREADS; i++)
		fprintf(f, "%s %d %llu %llu %llu %llu\n", records[i].name, records[i].tid,
			(unsigned long long)records[i].born, (unsigned long long)records[i].died,
			(unsigned long long)records[i].phase1,
			(unsigned long long)records[i].phase2);
	fclose(f);
	rename(tmp, report_path);
}

int main(int argc, char **argv)
{
	void *(*const fns[])(void *) = { sleeper, condwait, signaler, piperead, epoller, spinner };
	pthread_t th;
	uint64_t next_ephemeral;

	if (argc < 3) {
		fprintf(stderr, "usage: wallmix SECONDS REPORT\n");
		return 2;
	}
	end_ns = now_ns() + (uint64_t)(atof(argv[1]) * 1e9);
	report_path = argv[2];
	signal(SIGUSR2, on_usr2);
	if (pipe(pipefd) < 0)
		return 1;
	enter("wallmix");
	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
		if (pthread_create(&th, NULL, fns[i], NULL) == 0)
			pthread_detach(th);
	next_ephemeral = now_ns();
	printf("ready\n");
	fflush(stdout);
	while (now_ns() < end_ns) {
		nap_ns(20 * 1000000ull);
		if (write(pipefd[1], "x", 1) < 0)
			break;
		if (now_ns() >= next_ephemeral && atomic_load(&nrecords) < MAX_THREADS - 1) {
			if (pthread_create(&th, NULL, ephemeral, NULL) == 0)
				pthread_detach(th);
			next_ephemeral += 1500 * 1000000ull;
		}
		if (report_now) {
			report_now = 0;
			write_report();
		}
	}
	return 0;
}
