/*
 * checksum SECONDS --report FILE [--compute N] [--alloc N] [--nice NICE]
 *
 * A target that checks its own work, for the torture suite
 * (tests/integration/test-torture.c): whatever cprof does to it, each of its
 * threads must go on making progress, and every result must be right. The
 * threads, by name:
 *
 *   "compute-K"  (N of them, default 2) hashes one of four 16 KiB buffers
 *                over and over (FNV-1a and a floating-point sum, both held
 *                in registers across the loop) and compares both with the
 *                values main computed before any thread started: a register
 *                or a byte of memory changed behind its back is an error.
 *   "sleeper"    nanosleep(1 ms) in a loop: must return 0 (never EINTR: no
 *                signal is delivered to it) and never before 1 ms passed.
 *   "ping"       passes a token to "pong" through a futex (FUTEX_WAIT with a
 *   "pong"       timeout on ping's side, without on pong's), ping sleeping
 *                0.5 ms between rounds: each must see exactly the value the
 *                other stored, and no wait may fail with EINTR.
 *   "writer"     writes a numbered byte sequence into a pipe in chunks of
 *   "reader"     1-97 bytes every 1 ms; the reader, blocked in read(), checks
 *                every byte, and that no read fails with EINTR.
 *   "alloc-K"    (--alloc N of them, default 0) hammer the allocator: malloc,
 *                calloc, realloc and free of random sizes (16 B - 64 KiB),
 *                each block filled with a pattern of its own and checked
 *                before realloc and free (calloc's must be zero): the
 *                allocator's hooks (cprof heap) must not change a byte.
 *                They share a pthread mutex, taken every 16 operations
 *                (contention for cprof block and mutex), and run at the
 *                compute threads' nice value.
 *   "spawner"    every 2 ms creates a thread ("child") that hashes 1 KiB and
 *                ends; the spawner joins it and checks its result: threads
 *                are born and end during every snapshot.
 *
 * Only the main thread takes signals (every other thread blocks them all,
 * which is why an EINTR anywhere else is an error: ptrace stops must be
 * invisible). It counts SIGRTMIN (real-time, queued: none is merged) and
 * SIGUSR1; on SIGUSR2 it writes FILE, atomically (written beside it, then
 * renamed):
 *
 *   rt R
 *   usr1 U
 *   errors E
 *   first_error WHAT (or "none")
 *   thread NAME ITERATIONS     (one line per thread above)
 *   end
 *
 * "ready" is printed (and flushed) once every thread has done at least one
 * iteration. SECONDS (a decimal number, at most 3600) counts from then;
 * after it the threads are told to stop and joined (for at most 3 s), the
 * report is written one last time, and the process exits with 0 if all went
 * well, 3 if a check failed, 4 if a thread did not end (it was left stopped,
 * say). It also exits (5) if its threads do not all start within 20 s.
 * --nice NICE runs the compute threads at that nice value (default 10), so
 * that on a 2-core machine they leave room for cprof and the test.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone, used))
#define MAX_COMPUTE 16
#define NBUFS 4
#define BUF_SIZE (16 * 1024)
#define CHILD_BUF_SIZE 1024
#define READY_TIMEOUT_NS (20ULL * 1000000000ULL)
#define JOIN_TIMEOUT_NS (3ULL * 1000000000ULL)
#define MAX_SECONDS 3600.0
#define STOP_TOKEN (-1)

enum exit_code { EXIT_GOOD = 0, EXIT_WRONG = 3, EXIT_HUNG = 4, EXIT_NOT_READY = 5 };

struct worker {
	char name[16];
	pthread_t thread;
	void *(*fn)(void *);
	int index;
	bool started;
	atomic_ulong iterations;
};

#define MAX_ALLOC 16
static struct worker workers[MAX_COMPUTE + MAX_ALLOC + 6];
static int nworkers;

static atomic_int stop;
static atomic_ulong errors;
static atomic_int first_error_taken, first_error_written;
static char first_error[256];

static uint8_t bufs[NBUFS][BUF_SIZE];
static uint64_t expect_hash[NBUFS];
static double expect_sum[NBUFS];
static uint8_t child_buf[CHILD_BUF_SIZE];
static uint64_t expect_child;
static int compute_nice = 10;

static atomic_int token; /* the futex of ping and pong */
static int pipe_fds[2];

static atomic_ulong rt_count, usr1_count;
static volatile sig_atomic_t report_wanted;
static const char *report_path;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Counts an error; the first one is kept, in words, for the report. */
static void fail(const char *who, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(const char *who, const char *fmt, ...)
{
	atomic_fetch_add(&errors, 1);
	if (atomic_exchange(&first_error_taken, 1) == 0) {
		va_list ap;
		int n = snprintf(first_error, sizeof(first_error), "%s: ", who);

		va_start(ap, fmt);
		vsnprintf(first_error + n, sizeof(first_error) - (size_t)n, fmt, ap);
		va_end(ap);
		atomic_store(&first_error_written, 1);
	}
}

/* ---- the computing threads ---------------------------------------------- */

/* A fixed pseudo-random fill, the same on every run. */
static void fill(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = (uint8_t)(x >> 32);
	}
}

/* FNV-1a, and a floating-point sum in a fixed order (bit-exact each time). */
NOINLINE uint64_t checksum_buffer(const uint8_t *buf, size_t len, double *ret_sum)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	double sum = 0.0;

	for (size_t i = 0; i < len; i++) {
		h ^= buf[i];
		h *= 0x100000001b3ULL;
		sum = sum * 0.999999 + (double)buf[i] * 1.000001;
	}
	*ret_sum = sum;
	return h;
}

static void *compute_main(void *arg)
{
	struct worker *w = arg;

	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), compute_nice);
	for (unsigned long i = 0; !atomic_load_explicit(&stop, memory_order_relaxed); i++) {
		int b = (int)((i + (unsigned long)w->index) % NBUFS);
		double sum;
		uint64_t h = checksum_buffer(bufs[b], BUF_SIZE, &sum);

		if (h != expect_hash[b] || memcmp(&sum, &expect_sum[b], sizeof(sum)))
			fail(w->name, "buffer %d at iteration %lu: hash %#llx sum %a, expected "
				      "%#llx %a", b, i, (unsigned long long)h, sum,
			     (unsigned long long)expect_hash[b], expect_sum[b]);
		atomic_fetch_add_explicit(&w->iterations, 1, memory_order_relaxed);
	}
	return NULL;
}

/* ---- the sleeping threads ----------------------------------------------- */

static void *sleeper_main(void *arg)
{
	struct worker *w = arg;

	while (!atomic_load(&stop)) {
		struct timespec ts = { 0, 1000000 };
		uint64_t t0 = now_ns(), slept;

		if (nanosleep(&ts, NULL) != 0) {
			fail(w->name, "nanosleep: %s", strerror(errno));
			continue;
		}
		slept = now_ns() - t0;
		if (slept < 1000000)
			fail(w->name, "nanosleep(1 ms) returned after %llu ns",
			     (unsigned long long)slept);
		atomic_fetch_add(&w->iterations, 1);
	}
	return NULL;
}

static long futex(atomic_int *addr, int op, int val, const struct timespec *timeout)
{
	return syscall(SYS_futex, (int *)addr, op, val, timeout, NULL, 0);
}

static void *ping_main(void *arg)
{
	struct worker *w = arg;

	for (int k = 0; !atomic_load(&stop); k++) {
		/* At one round per 0.5 ms, k stays far below INT_MAX / 2 in 3600 s. */
		int mine = 2 * k + 1, theirs = mine + 1, now;
		struct timespec pause = { 0, 500000 };

		atomic_store(&token, mine);
		futex(&token, FUTEX_WAKE_PRIVATE, 1, NULL);
		while ((now = atomic_load(&token)) == mine && !atomic_load(&stop)) {
			struct timespec timeout = { 1, 0 };

			if (futex(&token, FUTEX_WAIT_PRIVATE, mine, &timeout) < 0 &&
			    errno != EAGAIN && errno != ETIMEDOUT) {
				fail(w->name, "futex wait: %s", strerror(errno));
				break;
			}
		}
		if (atomic_load(&stop))
			break;
		if (now != theirs)
			fail(w->name, "round %d: token %d, expected %d", k, now, theirs);
		atomic_fetch_add(&w->iterations, 1);
		if (nanosleep(&pause, NULL) != 0)
			fail(w->name, "nanosleep: %s", strerror(errno));
	}
	return NULL;
}

static void *pong_main(void *arg)
{
	struct worker *w = arg;
	int seen = 0;

	for (;;) {
		int now = atomic_load(&token);

		if (now == STOP_TOKEN)
			break;
		if (now == seen || now % 2 == 0) {
			/* Not our turn (or a spurious wake-up): wait for a change. */
			if (futex(&token, FUTEX_WAIT_PRIVATE, now, NULL) < 0 && errno != EAGAIN)
				fail(w->name, "futex wait: %s", strerror(errno));
			continue;
		}
		if (now != (seen ? seen + 2 : 1))
			fail(w->name, "token %d after %d", now, seen);
		seen = now;
		atomic_store(&token, now + 1);
		futex(&token, FUTEX_WAKE_PRIVATE, 1, NULL);
		atomic_fetch_add(&w->iterations, 1);
	}
	return NULL;
}

static void *writer_main(void *arg)
{
	struct worker *w = arg;
	uint8_t chunk[128];
	unsigned long seq = 0;

	for (unsigned long k = 0; !atomic_load(&stop); k++) {
		struct timespec ts = { 0, 1000000 };
		size_t len = 1 + k % 97;

		for (size_t i = 0; i < len; i++)
			chunk[i] = (uint8_t)(seq++ % 251);
		if (write(pipe_fds[1], chunk, len) != (ssize_t)len)
			fail(w->name, "write: %s", strerror(errno));
		atomic_fetch_add(&w->iterations, 1);
		if (nanosleep(&ts, NULL) != 0)
			fail(w->name, "nanosleep: %s", strerror(errno));
	}
	close(pipe_fds[1]); /* the reader sees the end */
	return NULL;
}

static void *reader_main(void *arg)
{
	struct worker *w = arg;
	uint8_t buf[4096];
	unsigned long seq = 0;

	for (;;) {
		ssize_t n = read(pipe_fds[0], buf, sizeof(buf));

		if (n == 0) {
			if (!atomic_load(&stop))
				fail(w->name, "end of pipe before the end");
			break;
		}
		if (n < 0) {
			fail(w->name, "read: %s", strerror(errno));
			if (errno != EINTR)
				break;
			continue;
		}
		for (ssize_t i = 0; i < n; i++, seq++)
			if (buf[i] != (uint8_t)(seq % 251)) {
				fail(w->name, "byte %lu is %u, expected %u", seq, buf[i],
				     (unsigned)(seq % 251));
				seq = buf[i]; /* resynchronise: count one error, not all */
			}
		atomic_fetch_add(&w->iterations, 1);
	}
	return NULL;
}

static void *child_main(void *arg)
{
	double sum;
	uint64_t *ret = arg;

	*ret = checksum_buffer(child_buf, CHILD_BUF_SIZE, &sum);
	return NULL;
}

static void *spawner_main(void *arg)
{
	struct worker *w = arg;

	while (!atomic_load(&stop)) {
		struct timespec ts = { 0, 2000000 };
		uint64_t result = 0;
		pthread_t child;
		int r = pthread_create(&child, NULL, child_main, &result);

		if (r == 0) {
			pthread_setname_np(child, "child");
			pthread_join(child, NULL);
			if (result != expect_child)
				fail(w->name, "child thread hashed %#llx, expected %#llx",
				     (unsigned long long)result, (unsigned long long)expect_child);
			atomic_fetch_add(&w->iterations, 1);
		} else if (r != EAGAIN) {
			fail(w->name, "pthread_create: %s", strerror(r));
		}
		if (nanosleep(&ts, NULL) != 0)
			fail(w->name, "nanosleep: %s", strerror(errno));
	}
	return NULL;
}

#define ALLOC_SLOTS 64

static void fill_block(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 31);
}

static bool block_filled(const uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (uint8_t)(seed + i * 31))
			return false;
	return true;
}

static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t alloc_shared;

static NOINLINE void *alloc_main(void *arg)
{
	struct worker *w = arg;
	uint8_t *blocks[ALLOC_SLOTS] = { 0 };
	size_t sizes[ALLOC_SLOTS] = { 0 };
	uint64_t seeds[ALLOC_SLOTS] = { 0 }, x = 0x9e3779b97f4a7c15ull * (uint64_t)(w->index + 1);

	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), compute_nice);
	while (!atomic_load(&stop)) {
		for (int k = 0; k < 256; k++) {
			unsigned slot;
			size_t n;

			if (k % 16 == 0) {
				pthread_mutex_lock(&alloc_lock);
				alloc_shared += x;
				pthread_mutex_unlock(&alloc_lock);
			}
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			slot = (unsigned)(x % ALLOC_SLOTS);
			n = 16 + (size_t)((x >> 8) % (64 * 1024));
			if (blocks[slot] && !block_filled(blocks[slot], sizes[slot], seeds[slot]))
				fail(w->name, "a block of %zu bytes changed", sizes[slot]);
			switch ((x >> 40) % 4) {
			case 0:
				free(blocks[slot]);
				blocks[slot] = malloc(n);
				break;
			case 1:
				free(blocks[slot]);
				blocks[slot] = calloc(1, n);
				if (blocks[slot])
					for (size_t i = 0; i < n; i++)
						if (blocks[slot][i])
							fail(w->name, "calloc returned dirty memory");
				break;
			case 2: {
				uint8_t *q = realloc(blocks[slot], n);
				size_t keep = n < sizes[slot] ? n : sizes[slot];

				if (q && blocks[slot] && !block_filled(q, keep, seeds[slot]))
					fail(w->name, "realloc lost the contents");
				if (q || !n)
					blocks[slot] = q;
				break;
			}
			default:
				free(blocks[slot]);
				blocks[slot] = NULL;
				sizes[slot] = 0;
				continue;
			}
			if (!blocks[slot]) {
				sizes[slot] = 0;
				continue;
			}
			sizes[slot] = n;
			seeds[slot] = x;
			fill_block(blocks[slot], n, x);
		}
		atomic_fetch_add(&w->iterations, 1);
	}
	for (int i = 0; i < ALLOC_SLOTS; i++)
		free(blocks[i]);
	return NULL;
}

/* ---- signals and the report ------------------------------------------- */

static void on_signal(int sig)
{
	if (sig == SIGUSR2)
		report_wanted = 1;
	else if (sig == SIGUSR1)
		atomic_fetch_add(&usr1_count, 1);
	else
		atomic_fetch_add(&rt_count, 1);
}

static void write_report(void)
{
	char tmp[4200], text[8192];
	struct stat st;
	size_t len;
	int fd, n;

	n = snprintf(text, sizeof(text), "rt %lu\nusr1 %lu\nerrors %lu\nfirst_error %s\n",
		     atomic_load(&rt_count), atomic_load(&usr1_count), atomic_load(&errors),
		     atomic_load(&first_error_written) ? first_error : "none");
	len = (size_t)n;
	for (int i = 0; i < nworkers && len < sizeof(text); i++)
		len += (size_t)snprintf(text + len, sizeof(text) - len, "thread %s %lu\n",
					workers[i].name, atomic_load(&workers[i].iterations));
	if (len < sizeof(text))
		len += (size_t)snprintf(text + len, sizeof(text) - len, "end\n");
	if (len >= sizeof(text))
		len = sizeof(text) - 1;
	/* Beside, then renamed over a file; never over a device (/dev/null). */
	if (stat(report_path, &st) == 0 && !S_ISREG(st.st_mode)) {
		fd = open(report_path, O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			ssize_t w = write(fd, text, len);

			(void)w; /* a report nobody reads */
			close(fd);
		}
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", report_path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, text, len) == (ssize_t)len && close(fd) == 0)
		rename(tmp, report_path);
	else
		close(fd);
}

/* ---- main -------------------------------------------------------------- */

static void add_worker(const char *name, void *(*fn)(void *), int index)
{
	struct worker *w = &workers[nworkers++];

	snprintf(w->name, sizeof(w->name), "%s", name);
	w->fn = fn;
	w->index = index;
}

static int usage(void)
{
	fprintf(stderr, "usage: checksum SECONDS --report FILE [--compute N] [--alloc N] "
			"[--nice NICE]\n");
	return 64;
}

/* Waits until every thread did one iteration. Returns 0, or -1 after 20 s. */
static int wait_ready(void)
{
	uint64_t deadline = now_ns() + READY_TIMEOUT_NS;

	for (;;) {
		int done = 0;
		struct timespec ts = { 0, 200000 };

		for (int i = 0; i < nworkers; i++)
			done += atomic_load(&workers[i].iterations) > 0;
		if (done == nworkers)
			return 0;
		if (now_ns() > deadline)
			return -1;
		nanosleep(&ts, NULL);
	}
}

/* Stops and joins every thread, for at most 3 s. Returns how many did not end. */
static int stop_all(void)
{
	struct timespec deadline;
	uint64_t end = now_ns() + JOIN_TIMEOUT_NS;
	int hung = 0;

	atomic_store(&stop, 1);
	atomic_store(&token, STOP_TOKEN);
	futex(&token, FUTEX_WAKE_PRIVATE, 2, NULL);
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += (time_t)(JOIN_TIMEOUT_NS / 1000000000ULL);
	for (int i = 0; i < nworkers; i++) {
		if (!workers[i].started)
			continue;
		if (pthread_timedjoin_np(workers[i].thread, NULL, &deadline) != 0) {
			hung++;
			fail(workers[i].name, "did not end within 3 s of the stop");
		}
		if (now_ns() > end)
			break;
	}
	return hung;
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	sigset_t all, wanted;
	double seconds;
	int ncompute = 2, nalloc = 0, hung;
	uint64_t end;
	char *e;

	if (argc < 2)
		return usage();
	seconds = strtod(argv[1], &e);
	if (*e || !(seconds > 0) || seconds > MAX_SECONDS)
		return usage();
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--report") && i + 1 < argc)
			report_path = argv[++i];
		else if (!strcmp(argv[i], "--compute") && i + 1 < argc)
			ncompute = (int)strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--alloc") && i + 1 < argc)
			nalloc = (int)strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--nice") && i + 1 < argc)
			compute_nice = (int)strtol(argv[++i], NULL, 10);
		else
			return usage();
	}
	if (!report_path || ncompute < 0 || ncompute > MAX_COMPUTE || nalloc < 0 ||
	    nalloc > MAX_ALLOC)
		return usage();

	for (int b = 0; b < NBUFS; b++) {
		fill(bufs[b], BUF_SIZE, (uint64_t)b + 1);
		expect_hash[b] = checksum_buffer(bufs[b], BUF_SIZE, &expect_sum[b]);
	}
	fill(child_buf, CHILD_BUF_SIZE, 99);
	{
		double unused;

		expect_child = checksum_buffer(child_buf, CHILD_BUF_SIZE, &unused);
	}
	if (pipe2(pipe_fds, O_CLOEXEC) != 0)
		return 1;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigfillset(&sa.sa_mask);
	sigaction(SIGRTMIN, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR2, &sa, NULL);

	/* Every thread inherits a mask that blocks all: only main takes signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, NULL);
	for (int i = 0; i < ncompute; i++) {
		char name[16];

		snprintf(name, sizeof(name), "compute-%d", i);
		add_worker(name, compute_main, i);
	}
	for (int i = 0; i < nalloc; i++) {
		char name[16];

		snprintf(name, sizeof(name), "alloc-%d", i);
		add_worker(name, alloc_main, i);
	}
	add_worker("sleeper", sleeper_main, 0);
	add_worker("ping", ping_main, 0);
	add_worker("pong", pong_main, 0);
	add_worker("writer", writer_main, 0);
	add_worker("reader", reader_main, 0);
	add_worker("spawner", spawner_main, 0);
	for (int i = 0; i < nworkers; i++) {
		if (pthread_create(&workers[i].thread, NULL, workers[i].fn, &workers[i]) != 0)
			return 1;
		workers[i].started = true;
		pthread_setname_np(workers[i].thread, workers[i].name);
	}
	sigemptyset(&wanted);
	sigaddset(&wanted, SIGRTMIN);
	sigaddset(&wanted, SIGUSR1);
	sigaddset(&wanted, SIGUSR2);
	sigaddset(&wanted, SIGINT);
	sigaddset(&wanted, SIGTERM);
	sigaddset(&wanted, SIGHUP);
	pthread_sigmask(SIG_UNBLOCK, &wanted, NULL);

	if (wait_ready() < 0) {
		stop_all();
		return EXIT_NOT_READY;
	}
	printf("ready\n");
	fflush(stdout);

	end = now_ns() + (uint64_t)(seconds * 1e9);
	for (;;) {
		uint64_t now = now_ns(), left;
		struct timespec ts;

		if (report_wanted) {
			report_wanted = 0;
			write_report();
		}
		if (now >= end)
			break;
		/* Sleep in slices: a signal ends one early, which is all we need. */
		left = end - now < 100000000ULL ? end - now : 100000000ULL;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)left;
		nanosleep(&ts, NULL);
	}
	hung = stop_all();
	write_report();
	if (hung)
		return EXIT_HUNG;
	return atomic_load(&errors) ? EXIT_WRONG : EXIT_GOOD;
}
