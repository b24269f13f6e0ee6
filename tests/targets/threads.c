/*
 * threads N SECONDS [--report FILE] [--spin-nice NICE] [--spinners K] [--dstate] [--gap]
 *
 * The ground truth for `cprof threads`. N threads (a multiple of 4) in four
 * kinds, interleaved by creation order (thread i is kind i % 4, number i / 4):
 *
 *   "cond-K"   wait_on_cond        blocked in pthread_cond_wait (futex wait)
 *   "sleep-K"  sleep_in_nanosleep  sleeping in nanosleep (clock_nanosleep)
 *   "pipe-K"   read_from_pipe      blocked reading an empty pipe (read)
 *   "spin-K"   spin_forever        running, checking a stop flag
 *
 * Each kind's function is noinline and noclone, so that it is a frame of its
 * own under its own name. "ready" is printed (and flushed) once every thread
 * is where it should be: the blocking ones are seen in state S inside their
 * system call (/proc/self/task/TID/syscall), the spinning ones have started.
 *
 * --spinners K: a process whose threads mostly sleep, as servers' do: the
 * first N - K threads are the three blocking kinds in turn (thread i is kind
 * i % 3, number i / 3), the last K spin ("spin-0" ...). N need not be a
 * multiple of 4 then.
 *
 * --spin-nice NICE: the spinning threads run at that nice value (per
 * thread). At N = 256 there are 64 of them on what may be a 2-core machine:
 * at nice 0 they take most of the CPU from everything else (cprof's own
 * unwinding included), so the test suites use 19. They still run, and are
 * still found running, whenever nothing else wants the CPU.
 *
 * Signals: SIGUSR1 and SIGRTMIN (real-time: they queue, none is merged) are
 * counted; on SIGUSR2 the counts are written to FILE (--report) as
 * "rt R usr1 U\n", atomically (written beside it, then renamed). A test can
 * so check that every signal sent was delivered exactly once, and that the
 * process still responds.
 *
 * --dstate: one more thread, "vfork", in wait_in_vfork: it vforks a child
 * that sleeps past SECONDS, so it waits for the child in uninterruptible
 * (killable) sleep, state D, where no ptrace stop can reach it. The child
 * dies with it (PR_SET_PDEATHSIG).
 *
 * --gap: the pause as the target sees it. Two more threads, "gap-first"
 * (created before the workers: the lowest tid after main's) and "gap-last"
 * (created after them), each at SCHED_FIFO priority 1 when allowed (so
 * that scheduling delays do not count, only stops), sleep 20 us at a time
 * and record the largest gap between two of their clock readings. They are
 * stopped by a snapshot like any other thread, so a gap is how long that
 * thread was frozen; a tool that stops threads one after the other, in tid
 * order, freezes the first and the last at different times and for
 * different lengths. "spin-0" also records its largest gap between two
 * clock readings: what a busy thread of the target sees (a stop, plus any
 * time the scheduler gave its cpu to another thread). The main thread then
 * takes commands on stdin, one per line, each answered on stdout:
 *   r   reset the largest gaps (answers "ok" once both threads have seen it)
 *   g   answers "gap MAX_NS first NS last NS spin NS"
 *   i   answers "gap-threads TID TID fifo|other"
 * End of stdin ends the process.
 *
 * Exits by itself after SECONDS in any case.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone, used))
#define READY_TIMEOUT_NS (20ULL * 1000000000ULL)
#define MAX_THREADS 16384

enum kind { KIND_COND, KIND_SLEEP, KIND_PIPE, KIND_SPIN, NKINDS };

static const char *const kind_names[NKINDS] = { "cond", "sleep", "pipe", "spin" };
/* The system call each blocking kind must be seen in before "ready". */
static const long kind_syscall[NKINDS] = { SYS_futex, SYS_clock_nanosleep, SYS_read, -1 };

struct worker {
	pthread_t thread;
	enum kind kind;
	int number;
	atomic_int tid;
};

static atomic_int stop;
static int spin_nice;
static double run_seconds;
static atomic_int arrived;
static atomic_uint_fast64_t spins;
static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int pipe_fds[2];

static atomic_ulong rt_count, usr1_count;
static const char *report_path;
static char report_tmp[4096];

struct gap {
	const char *name;
	atomic_uint ack;           /* the last reset (gap_gen) it has seen */
	atomic_uint_fast64_t max;  /* largest gap since then, ns */
	atomic_int tid;
};

static atomic_uint gap_gen;
static struct gap gaps[2] = { { .name = "gap-first" }, { .name = "gap-last" } };
/* The gap "spin-0" sees, with --gap and --spinners only. */
static struct gap spin_gap = { .name = "spin-0" };
static int gap_mode;
static int nspinners = -1; /* -1: a quarter of the threads, interleaved */
static int gap_fifo = 1;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* ---- the four kinds ---------------------------------------------------- */

NOINLINE int wait_on_cond(void)
{
	pthread_mutex_lock(&cond_lock);
	atomic_fetch_add(&arrived, 1);
	while (!atomic_load(&stop))
		pthread_cond_wait(&cond, &cond_lock);
	pthread_mutex_unlock(&cond_lock);
	return 1;
}

NOINLINE int sleep_in_nanosleep(void)
{
	atomic_fetch_add(&arrived, 1);
	while (!atomic_load(&stop)) {
		struct timespec ts = { 3600, 0 };

		/* A signal (EINTR) only starts another hour. */
		nanosleep(&ts, NULL);
	}
	return 2;
}

NOINLINE int read_from_pipe(void)
{
	char c;

	atomic_fetch_add(&arrived, 1);
	/* Nobody writes and the write end stays open: this never returns
	 * data, only EINTR. */
	while (!atomic_load(&stop))
		if (read(pipe_fds[0], &c, 1) == 1)
			break;
	return 3;
}

/* Keeps in @gp the largest gap between two clock readings (reset like the
 * gap threads'). */
static void time_gap(struct gap *gp, uint64_t *prev, uint64_t *max, unsigned *seen)
{
	uint64_t t = now_ns();
	unsigned g = atomic_load_explicit(&gap_gen, memory_order_relaxed);

	if (g != *seen) {
		*max = 0;
		*seen = g;
		atomic_store(&gp->max, 0);
		atomic_store(&gp->ack, g);
	} else if (t - *prev > *max) {
		*max = t - *prev;
		atomic_store(&gp->max, *max);
	}
	*prev = t;
}

/* @gp: NULL, or where to keep the largest gap this thread sees. */
NOINLINE int spin_forever(struct gap *gp)
{
	uint64_t n = 0, prev = now_ns(), max = 0;
	unsigned seen = atomic_load(&gap_gen);

	atomic_fetch_add(&arrived, 1);
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		n++;
		__asm__ volatile("" : "+r"(n));
		if (gp)
			time_gap(gp, &prev, &max, &seen);
	}
	atomic_fetch_add(&spins, n);
	return 4;
}

/* The vfork child runs on this thread's stack and memory until it exits:
 * plain system calls only. */
NOINLINE int wait_in_vfork(void)
{
	pid_t child = vfork();

	if (child == 0) {
		struct timespec ts = { (time_t)run_seconds + 1, 0 };

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		nanosleep(&ts, NULL);
		_exit(0);
	}
	return child > 0 ? 5 : -1;
}

static void *vfork_main(void *arg)
{
	atomic_int *tid = arg;

	pthread_setname_np(pthread_self(), "vfork");
	atomic_store(tid, (int)syscall(SYS_gettid));
	return (void *)(intptr_t)wait_in_vfork();
}

/* Thread @i of @n: interleaved kinds, or sleepers first and K spinners last. */
static void assign_kind(struct worker *w, int i, int n)
{
	if (nspinners < 0) {
		w->kind = (enum kind)(i % NKINDS);
		w->number = i / NKINDS;
	} else if (i >= n - nspinners) {
		w->kind = KIND_SPIN;
		w->number = i - (n - nspinners);
	} else {
		w->kind = (enum kind)(i % KIND_SPIN);
		w->number = i / KIND_SPIN;
	}
}

static int timed_spinner(const struct worker *w)
{
	return gap_mode && nspinners > 0 && w->kind == KIND_SPIN && w->number == 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char name[16];
	int r = 0;

	snprintf(name, sizeof(name), "%s-%d", kind_names[w->kind], w->number);
	pthread_setname_np(pthread_self(), name);
	atomic_store(&w->tid, (int)syscall(SYS_gettid));
	if (w->kind == KIND_SPIN && spin_nice)
		setpriority(PRIO_PROCESS, (id_t)atomic_load(&w->tid), spin_nice);
	switch (w->kind) {
	case KIND_COND:
		r = wait_on_cond();
		break;
	case KIND_SLEEP:
		r = sleep_in_nanosleep();
		break;
	case KIND_PIPE:
		r = read_from_pipe();
		break;
	case KIND_SPIN:
		r = spin_forever(timed_spinner(w) ? &spin_gap : NULL);
		break;
	default:
		break;
	}
	/* Not a tail call: the kind's function stays a frame of its own. */
	return (void *)(intptr_t)r;
}

/* ---- readiness --------------------------------------------------------- */

static int read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

/* The state letter of our thread @tid, 0 if unknown. */
static char thread_state(int tid)
{
	char path[64], buf[512];
	const char *p;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	if (read_small(path, buf, sizeof(buf)) < 0 || !(p = strrchr(buf, ')')) || p[1] != ' ')
		return 0;
	return p[2];
}

/* True once thread @tid sleeps (state S) inside system call @nr. */
static int blocked_in(int tid, long nr)
{
	char path[64], buf[512];

	if (thread_state(tid) != 'S')
		return 0;
	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
	if (read_small(path, buf, sizeof(buf)) < 0)
		return 0;
	return strtol(buf, NULL, 10) == nr && buf[0] != 'r';
}

/* Starts the "vfork" thread and waits until it is in state D. */
static int start_vfork_thread(void)
{
	static atomic_int tid;
	uint64_t deadline = now_ns() + READY_TIMEOUT_NS;
	const struct timespec tick = { 0, 1000000 };
	pthread_t t;

	if (pthread_create(&t, NULL, vfork_main, &tid) != 0)
		return -1;
	while (!atomic_load(&tid) || thread_state(atomic_load(&tid)) != 'D') {
		if (now_ns() > deadline)
			return -1;
		nanosleep(&tick, NULL);
	}
	return 0;
}

static int wait_ready(struct worker *w, int n)
{
	uint64_t deadline = now_ns() + READY_TIMEOUT_NS;
	const struct timespec tick = { 0, 1000000 };

	while (atomic_load(&arrived) < n) {
		if (now_ns() > deadline)
			return -1;
		nanosleep(&tick, NULL);
	}
	for (int i = 0; i < n; i++) {
		if (kind_syscall[w[i].kind] < 0)
			continue;
		while (!blocked_in(atomic_load(&w[i].tid), kind_syscall[w[i].kind])) {
			if (now_ns() > deadline)
				return -1;
			nanosleep(&tick, NULL);
		}
	}
	return 0;
}

/* ---- signals ----------------------------------------------------------- */

static void on_rt(int sig)
{
	(void)sig;
	atomic_fetch_add(&rt_count, 1);
}

static void on_usr1(int sig)
{
	(void)sig;
	atomic_fetch_add(&usr1_count, 1);
}

static size_t put_ulong(char *p, unsigned long v)
{
	char tmp[24];
	size_t n = 0, k = 0;

	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10));
	while (n)
		p[k++] = tmp[--n];
	return k;
}

/* Async-signal-safe: open, write, close and rename only. */
static void on_usr2(int sig)
{
	int saved = errno, fd;
	char buf[64];
	size_t n = 0;

	(void)sig;
	if (!report_path)
		return;
	memcpy(buf + n, "rt ", 3);
	n += 3;
	n += put_ulong(buf + n, atomic_load(&rt_count));
	memcpy(buf + n, " usr1 ", 6);
	n += 6;
	n += put_ulong(buf + n, atomic_load(&usr1_count));
	buf[n++] = '\n';
	fd = open(report_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0) {
		if (write(fd, buf, n) == (ssize_t)n) {
			close(fd);
			rename(report_tmp, report_path);
		} else {
			close(fd);
		}
	}
	errno = saved;
}

static void install(int sig, void (*fn)(int))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

/* ---- the gap threads --------------------------------------------------- */

static void *gap_main(void *arg)
{
	const struct timespec nap = { 0, 20000 };
	struct gap *gp = arg;
	uint64_t prev = now_ns(), max = 0;
	unsigned seen = atomic_load(&gap_gen);

	pthread_setname_np(pthread_self(), gp->name);
	atomic_store(&gp->tid, (int)syscall(SYS_gettid));
	while (!atomic_load(&stop)) {
		time_gap(gp, &prev, &max, &seen);
		nanosleep(&nap, NULL);
	}
	return NULL;
}

static int start_gap_thread(struct gap *gp)
{
	struct sched_param sp = { .sched_priority = 1 };
	pthread_attr_t attr;
	pthread_t t;
	int r = -1;

	pthread_attr_init(&attr);
	pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
	pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
	pthread_attr_setschedparam(&attr, &sp);
	if (gap_fifo && pthread_create(&t, &attr, gap_main, gp) == 0) {
		r = 0;
	} else {
		/* Not allowed to use SCHED_FIFO: measure anyway, and say so. */
		gap_fifo = 0;
		if (pthread_create(&t, NULL, gap_main, gp) == 0)
			r = 0;
	}
	pthread_attr_destroy(&attr);
	while (r == 0 && !atomic_load(&gp->tid))
		sched_yield();
	return r;
}

static void gap_reset(void)
{
	unsigned g = atomic_fetch_add(&gap_gen, 1) + 1;
	uint64_t deadline = now_ns() + 1000000000ULL;
	const struct timespec tick = { 0, 50000 };

	while ((atomic_load(&gaps[0].ack) != g || atomic_load(&gaps[1].ack) != g ||
		(gap_mode && nspinners > 0 && atomic_load(&spin_gap.ack) != g)) &&
	       now_ns() < deadline)
		nanosleep(&tick, NULL);
}

/* Answers commands on stdin until it ends or @end (CLOCK_MONOTONIC ns). */
static void serve_commands(uint64_t end)
{
	char line[64];
	size_t len = 0;

	for (;;) {
		struct pollfd pfd = { STDIN_FILENO, POLLIN, 0 };
		uint64_t now = now_ns();
		ssize_t n;

		if (now >= end)
			return;
		if (poll(&pfd, 1, (int)((end - now) / 1000000) + 1) <= 0)
			continue;
		n = read(STDIN_FILENO, line + len, sizeof(line) - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		len += (size_t)n;
		for (char *nl; (nl = memchr(line, '\n', len));) {
			switch (line[0]) {
			case 'r':
				gap_reset();
				printf("ok\n");
				break;
			case 'g': {
				uint64_t a = atomic_load(&gaps[0].max), b = atomic_load(&gaps[1].max);

				printf("gap %llu first %llu last %llu spin %llu\n",
				       (unsigned long long)(a > b ? a : b), (unsigned long long)a,
				       (unsigned long long)b,
				       (unsigned long long)atomic_load(&spin_gap.max));
				break;
			}
			case 'i':
				printf("gap-threads %d %d %s\n", atomic_load(&gaps[0].tid),
				       atomic_load(&gaps[1].tid), gap_fifo ? "fifo" : "other");
				break;
			default:
				printf("error: unknown command\n");
				break;
			}
			fflush(stdout);
			len -= (size_t)(nl + 1 - line);
			memmove(line, nl + 1, len);
		}
		if (len == sizeof(line) - 1)
			len = 0; /* a line too long: drop it */
	}
}

/* ---- main -------------------------------------------------------------- */

static void usage(void)
{
	fprintf(stderr, "usage: threads N SECONDS [--report FILE] [--spin-nice NICE] "
			"[--spinners K] [--dstate] [--gap]\n"
			"  N: number of threads, a multiple of 4 unless K is given (at most "
			"%d)\n", MAX_THREADS);
	exit(64);
}

int main(int argc, char **argv)
{
	struct worker *w;
	pthread_attr_t attr;
	double seconds;
	uint64_t end;
	int n, dstate = 0;
	char *e;

	if (argc < 3)
		usage();
	n = (int)strtol(argv[1], &e, 10);
	if (*e || n < 4 || n > MAX_THREADS)
		usage();
	seconds = strtod(argv[2], &e);
	if (*e || seconds <= 0)
		usage();
	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--gap")) {
			gap_mode = 1;
		} else if (!strcmp(argv[i], "--dstate")) {
			dstate = 1;
		} else if (!strcmp(argv[i], "--spinners") && i + 1 < argc) {
			nspinners = (int)strtol(argv[++i], &e, 10);
			if (*e || nspinners < 0 || nspinners > n)
				usage();
		} else if (!strcmp(argv[i], "--spin-nice") && i + 1 < argc) {
			spin_nice = (int)strtol(argv[++i], &e, 10);
			if (*e || spin_nice < -20 || spin_nice > 19)
				usage();
		} else if (!strcmp(argv[i], "--report") && i + 1 < argc) {
			report_path = argv[++i];
			snprintf(report_tmp, sizeof(report_tmp), "%s.tmp", report_path);
		} else {
			usage();
		}
	}
	if (nspinners < 0 && n % 4)
		usage();
	run_seconds = seconds;
	end = now_ns() + (uint64_t)(seconds * 1e9);

	install(SIGUSR1, on_usr1);
	install(SIGUSR2, on_usr2);
	install(SIGRTMIN, on_rt);
	if (pipe2(pipe_fds, O_CLOEXEC) < 0) {
		perror("pipe2");
		return 1;
	}
	w = calloc((size_t)n, sizeof(*w));
	if (!w)
		return 1;
	if (gap_mode && start_gap_thread(&gaps[0]) < 0) {
		fprintf(stderr, "threads: cannot start the gap threads\n");
		return 1;
	}
	/* Small stacks: 256 threads must not cost 2 GiB of address space. */
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	for (int i = 0; i < n; i++) {
		assign_kind(&w[i], i, n);
		if (pthread_create(&w[i].thread, &attr, worker_main, &w[i]) != 0) {
			fprintf(stderr, "threads: pthread_create failed at thread %d\n", i);
			return 1;
		}
	}
	pthread_attr_destroy(&attr);
	if (wait_ready(w, n) < 0) {
		fprintf(stderr, "threads: not every thread reached its blocking call\n");
		return 1;
	}
	if (dstate && start_vfork_thread() < 0) {
		fprintf(stderr, "threads: the vfork thread did not reach state D\n");
		return 1;
	}
	if (gap_mode && start_gap_thread(&gaps[1]) < 0) {
		fprintf(stderr, "threads: cannot start the gap threads\n");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);

	if (gap_mode) {
		serve_commands(end);
	} else {
		struct timespec ts = { (time_t)(end / 1000000000ULL), (long)(end % 1000000000ULL) };

		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
	}
	atomic_store(&stop, 1);
	/* The blocked threads need not be woken: exit ends them all. */
	exit(0);
}
