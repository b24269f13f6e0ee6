/*
 * Torture: cprof must never leave a thread of its target stopped, traced or
 * hurt, whatever happens to either of them, nor leave a bad output. Each
 * test is one command (cpu -d, threads --debug 2 to stdout, threads
 * --debug 0 -o FILE, heap/mutex/block -d -o FILE) and one fault:
 *
 *   sigkill, sigterm, sigint  to cprof at a random moment of its run (cpu:
 *                             0-125 % of -d, so the end and the writing too;
 *                             threads: half 0-30 ms after the start, half
 *                             0-1 ms after cprof was first seen tracing the
 *                             target: in the snapshot). threads runs come in
 *                             bursts of 1-3 back to back, with SIGRTMIN
 *                             queued at the target as fast as it goes;
 *   target-killed             SIGKILL to the target at such a moment;
 *   target-exits              a fresh target whose lifetime ends 1 ms to
 *                             125 % of the window after it is ready (it stops
 *                             and joins its threads, and exits);
 *   sigkill-at-commit         (commands with -o) SIGKILL to cprof the moment
 *                             a ".cprof-*" name appears in the output
 *                             directory (inotify): cprof is putting its
 *                             output in place;
 *   hup-int                   (the agent's commands and threads) SIGHUP to
 *                             cprof, and SIGINT 1 ms later, 0-200 us after
 *                             cprof was first seen tracing the target: a
 *                             dropped ssh session and a second signal while
 *                             a thread is in cprof's stop (cli/interrupt.h).
 *
 * The target is tests/targets/checksum.c: threads that compute, sleep in
 * nanosleep, wait on a futex, read a pipe and create threads, each checking
 * its own results (an EINTR where no signal can arrive is an error too).
 * Half of the runs with -o find an old file in its place. After each run:
 *
 *   - cprof ended within RUN_TIMEOUT_MS (see there), else it hung: its tasks
 *     are logged, it is killed and counted;
 *   - its exit code is 0; or death by the signal we sent it (SIGINT,
 *     SIGTERM and SIGHUP only if it had no handler for them when they were
 *     sent: SigCgt in /proc/PID/status, read just before; a second signal
 *     always); or 1 or 2 when the target may have died before cprof ended;
 *   - its output is new and whole, or unchanged: an -o file is either the
 *     old one, byte for byte (or still absent), or one complete gzip stream
 *     (zlib inflates it to the end) that pprof_decode accepts, with the
 *     right sample types (threads: as many threads as its comment says, all
 *     nine of a living target); stdout is empty or complete (a block for
 *     every thread, all nine for a living target). Exit 0 means a new one,
 *     an error exit an unchanged one; a kill allows either. Nothing else,
 *     no ".cprof-*" file, may be left in the output directory (but see
 *     sweep_dir(): replacing a file has a moment no kernel call closes);
 *   - a target that lives is running (no task in state t or T) and untraced
 *     (TracerPid 0 for every task), answers SIGUSR2 with its counts, each
 *     of its threads makes progress within ~100 ms, it counts no error, and
 *     it handled exactly the SIGRTMIN queued to it (none lost or doubled,
 *     even when cprof died in the middle of a snapshot);
 *   - a target that was to exit by itself exits 0 (its threads joined in
 *     time, no error), one we killed died of our SIGKILL; what is left of
 *     either right after the run is neither stopped nor traced.
 *
 * Counts: CPROF_TORTURE_TRIALS trials per command (default 20: 4 per
 * fault, 2 at commit; scripts/torture runs hundreds by hand);
 * CPROF_TORTURE_FAULTS (e.g. "sigterm,sigint") runs only those faults, the
 * trials split between them (one trial per fault could miss its moment);
 * cpu and agent runs last CPROF_TORTURE_CPU_MS (default 400) ms. Every
 * failure is counted and the first ones logged; the test fails at its end. With CPROF_TORTURE_TABLE set, each test appends its row
 * of counts to that file (scripts/torture prints them as a table for long
 * runs). CPROF_TORTURE_SEED replays the random moments (the seed is logged).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "agent/wire.h"
#include "pprof/pprof.h"
#include "testhelp.h"

/*
 * cprof hangs if it has not ended RUN_TIMEOUT_MS after its start, not
 * counting the time it waited for a cpu (schedstat), the time this test
 * itself was frozen (a watchdog thread's late wake-ups: the whole machine
 * stalls now and then, seen up to 17 s), nor time in uninterruptible
 * sleep, state D (seen: munmap held for seconds). On a shared 2-core
 * machine other tenants do all that. RUN_HARD_TIMEOUT_MS is a hang however
 * busy the machine is.
 */
#define RUN_TIMEOUT_MS 10000
#define RUN_HARD_TIMEOUT_MS 60000
#define NFAULTS 5
/* Per command: cpu and threads run fast; the agent's commands load it. */
#define DEFAULT_TRIALS (NFAULTS * 4)
#define DEFAULT_AGENT_TRIALS (NFAULTS * 4)
#define DEFAULT_CPU_MS 400
/* threads: moments after the start, and after cprof was seen as the tracer. */
#define THREADS_WINDOW_US 30000
#define SNAPSHOT_WINDOW_US 1000
#define MAX_BURST 3
/* A reused target is replaced after this long (it exits by itself after
 * TARGET_SECONDS in any case). */
#define TARGET_SECONDS "120"
#define TARGET_MAX_AGE_NS (60ULL * 1000000000ULL)
/*
 * A thread of the target makes progress within PROGRESS_GIVE_UP_MS, not
 * counting the time it waited for a cpu nor the time this test was frozen
 * (as for cprof's hangs, above); PROGRESS_HARD_MS however busy the machine.
 * A thread stuck on a lock or stopped waits for no cpu: it is not excused.
 */
#define PROGRESS_MS 100
#define PROGRESS_GIVE_UP_MS 3000
#define PROGRESS_HARD_MS 30000
#define REPORT_TIMEOUT_MS 3000
#define SIGNALS_TIMEOUT_MS 2000
#define MAX_LOGGED 8
#define MAX_THREADS 16
/* The threads of checksum that live as long as it does: main, 2 compute,
 * 2 alloc (malloc and a shared mutex, for the agent's commands), 6 more. */
#define COMPUTE "2"
#define ALLOC "2"
#define STABLE_THREADS 11
static const char *const stable_names[STABLE_THREADS] = {
	"checksum", "compute-0", "compute-1", "alloc-0", "alloc-1", "sleeper",
	"ping",	    "pong",	 "writer",    "reader",	 "spawner",
};
/* The agent's commands: it is loaded (once per target) in their first second. */
#define INJECT_MS 300

/* ---- configuration and chance ----------------------------------------- */

static unsigned env_uint(const char *name, unsigned def, unsigned min)
{
	const char *v = getenv(name);
	char *end;
	unsigned long n;

	if (!v || !*v)
		return def;
	n = strtoul(v, &end, 10);
	cr_assert(!*end && n >= min && n <= 1000000, "%s=%s: expected a number >= %u", name, v,
		  min);
	return (unsigned)n;
}

static uint64_t rng_state;

static void rng_seed(const char *test)
{
	const char *v = getenv("CPROF_TORTURE_SEED");
	uint64_t seed = v && *v ? strtoull(v, NULL, 0) : th_now_ns() ^ (uint64_t)getpid() << 32;

	cr_log_info("%s: CPROF_TORTURE_SEED=%llu", test, (unsigned long long)seed);
	rng_state = seed;
	for (const char *p = test; *p; p++)
		rng_state = (rng_state ^ (uint8_t)*p) * 0x100000001b3ULL;
	rng_state |= 1;
}

/* xorshift64*: uniform in [0, n). */
static uint64_t rng(uint64_t n)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return n ? (rng_state * 0x2545f4914f6cdd1dULL) % n : 0;
}

/* ---- processes of our own (the cprof runs) ----------------------------- */

#define MAX_OWN 4
static pid_t own[MAX_OWN];

static void own_add(pid_t pid)
{
	for (int i = 0; i < MAX_OWN; i++)
		if (!own[i]) {
			own[i] = pid;
			return;
		}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	cr_assert_fail("too many processes of our own");
}

/* Reaps @pid (one of ours, exited or killed): returns its wait status. */
static int own_reap(pid_t pid)
{
	int status = -1;

	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	for (int i = 0; i < MAX_OWN; i++)
		if (own[i] == pid)
			own[i] = 0;
	return status;
}

/* Where targets write their counts: one target at a time, one path per test. */
static const char *report_path;

static void fini(void)
{
	for (int i = 0; i < MAX_OWN; i++)
		if (own[i] > 0) {
			kill(own[i], SIGKILL);
			own_reap(own[i]);
		}
	if (report_path) {
		/* The target writes its report beside it first. */
		char tmp[4200];

		snprintf(tmp, sizeof(tmp), "%s.tmp", report_path);
		unlink(tmp);
		report_path = NULL; /* th_cleanup() frees it */
	}
	th_cleanup();
}

TestSuite(torture, .init = th_init, .fini = fini, .timeout = 7200);

static int pidfd_open(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

static int pidfd_signal(int pidfd, int sig, siginfo_t *info)
{
	return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, info, 0);
}

/* ---- /proc, read from outside ----------------------------------------- */

/* Reads /proc/@pid[/task/@tid]/@what into @buf. Returns 0, or -1 if gone. */
static int proc_file(pid_t pid, pid_t tid, const char *what, char *buf, size_t size)
{
	char path[96];
	ssize_t k;
	int fd;

	if (tid)
		snprintf(path, sizeof(path), "/proc/%d/task/%d/%s", (int)pid, (int)tid, what);
	else
		snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, what);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	k = read(fd, buf, size - 1);
	close(fd);
	if (k < 0)
		return -1;
	buf[k] = '\0';
	return 0;
}

/* The value of "@key:" in a status file's text, or -1. */
static long long status_field(const char *text, const char *key, int base)
{
	size_t n = strlen(key);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, key, n) && p[n] == ':')
			return strtoll(p + n + 1, NULL, base);
	return -1;
}

/* A TracerPid of a thread of @pid, 0 when none is traced, -1 when it is
 * gone. It names the tracing thread (cprof's tracer thread), not its
 * process: nothing but cprof traces our targets, so any tracer is cprof.
 * Every thread: the agent's load stops the one thread it chose, which is
 * seldom the main one. */
static long tracer_of(pid_t pid)
{
	pid_t tids[64];
	int n = th_task_list(pid, tids, 64);

	if (n <= 0)
		return -1;
	for (int i = 0; i < n; i++) {
		long tracer = th_task_tracer(pid, tids[i]);

		if (tracer > 0)
			return tracer;
	}
	return 0;
}

/* True if @pid runs the cprof binary (not our fork before exec) and has a
 * handler for @sig. */
static bool handles(pid_t pid, int sig)
{
	char buf[2048];
	unsigned long long caught;

	if (proc_file(pid, 0, "status", buf, sizeof(buf)) < 0 || strncmp(buf, "Name:\tcprof\n", 12))
		return false;
	caught = (unsigned long long)status_field(buf, "SigCgt", 16);
	return caught != (unsigned long long)-1 && (caught >> (sig - 1) & 1);
}

/*
 * Looks at every task of @pid: counts the ones in a stop (t or T) and the
 * traced ones, and describes the first of each in @what. Tasks that vanish
 * meanwhile are skipped. Returns the number of tasks seen.
 */
static int task_scan(pid_t pid, int *ret_stopped, int *ret_traced, char *what, size_t size)
{
	pid_t tids[256];
	int n = th_task_list(pid, tids, 256), seen = 0;

	*ret_stopped = *ret_traced = 0;
	what[0] = '\0';
	for (int i = 0; i < n; i++) {
		char stat[1024], status[2048], name[32] = "?";
		const char *p;
		long tracer;

		if (proc_file(pid, tids[i], "stat", stat, sizeof(stat)) < 0 ||
		    proc_file(pid, tids[i], "status", status, sizeof(status)) < 0)
			continue;
		seen++;
		sscanf(status, "Name:\t%31s", name);
		p = strrchr(stat, ')');
		if (p && (p[2] == 't' || p[2] == 'T') && ++*ret_stopped == 1 && !what[0])
			snprintf(what, size, "thread %d (%s) is in state %c", (int)tids[i], name,
				 p[2]);
		tracer = (long)status_field(status, "TracerPid", 10);
		if (tracer != 0 && ++*ret_traced == 1 && !what[0])
			snprintf(what, size, "thread %d (%s) is traced by %ld", (int)tids[i], name,
				 tracer);
	}
	return seen;
}

/* ---- the machine's stalls, seen from here ------------------------------- */

#define WATCHDOG_TICK_NS 10000000ULL
#define WATCHDOG_LATE_NS 50000000ULL

static struct {
	pthread_t thread;
	bool running;
	atomic_bool stop;
	atomic_uint_fast64_t stalled_ns; /* sum of late wake-ups, beyond a tick */
} watchdog;

static void *watchdog_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&watchdog.stop)) {
		uint64_t t0 = th_now_ns(), late;
		struct timespec ts = { 0, (long)WATCHDOG_TICK_NS };

		nanosleep(&ts, NULL);
		late = th_now_ns() - t0;
		if (late > WATCHDOG_LATE_NS)
			atomic_fetch_add(&watchdog.stalled_ns, late - WATCHDOG_TICK_NS);
	}
	return NULL;
}

static void watchdog_start(void)
{
	atomic_store(&watchdog.stop, false);
	cr_assert(pthread_create(&watchdog.thread, NULL, watchdog_main, NULL) == 0);
	watchdog.running = true;
}

static void watchdog_stop(void)
{
	if (!watchdog.running)
		return;
	atomic_store(&watchdog.stop, true);
	pthread_join(watchdog.thread, NULL);
	watchdog.running = false;
}

/* The time task @tid of @pid has spent runnable but waiting for a cpu, or 0. */
static uint64_t task_wait_ns(pid_t pid, pid_t tid)
{
	char buf[128];
	unsigned long long run, wait;

	if (proc_file(pid, tid, "schedstat", buf, sizeof(buf)) < 0 ||
	    sscanf(buf, "%llu %llu", &run, &wait) != 2)
		return 0;
	return wait;
}

/* The longest time a live task of @pid spent runnable but waiting for a cpu. */
static uint64_t runqueue_wait_ns(pid_t pid)
{
	pid_t tids[64];
	int n = th_task_list(pid, tids, 64);
	uint64_t longest = 0;

	for (int i = 0; i < n; i++)
		longest = MAX(longest, task_wait_ns(pid, tids[i]));
	return longest;
}

/* The time the thread of @pid named @name has waited for a cpu, or 0. */
static uint64_t thread_wait_ns(pid_t pid, const char *name)
{
	pid_t tids[64];
	int n = th_task_list(pid, tids, 64);

	for (int i = 0; i < n; i++) {
		char comm[32];

		if (proc_file(pid, tids[i], "comm", comm, sizeof(comm)) < 0)
			continue;
		comm[strcspn(comm, "\n")] = '\0';
		if (!strcmp(comm, name))
			return task_wait_ns(pid, tids[i]);
	}
	return 0;
}

/* True if a task of @pid is in uninterruptible sleep. */
static bool task_in_d_state(pid_t pid)
{
	pid_t tids[64];
	int n = th_task_list(pid, tids, 64);

	for (int i = 0; i < n; i++) {
		char stat[1024];
		const char *p;

		if (proc_file(pid, tids[i], "stat", stat, sizeof(stat)) == 0 &&
		    (p = strrchr(stat, ')')) && p[2] == 'D')
			return true;
	}
	return false;
}

/* Logs state, wait channel, system call and kernel stack of every task of
 * @pid: what a hang looks like from outside. The first few hangs only. */
static void log_tasks(const char *who, pid_t pid)
{
	static unsigned logged;
	pid_t tids[64];
	int n = th_task_list(pid, tids, 64);

	if (logged++ >= 4)
		return;
	for (int i = 0; i < n; i++) {
		char stat[1024], wchan[128] = "", sc[256] = "", stack[2048] = "";
		const char *p;

		if (proc_file(pid, tids[i], "stat", stat, sizeof(stat)) < 0)
			continue;
		proc_file(pid, tids[i], "wchan", wchan, sizeof(wchan));
		proc_file(pid, tids[i], "syscall", sc, sizeof(sc));
		proc_file(pid, tids[i], "stack", stack, sizeof(stack));
		p = strrchr(stat, ')');
		cr_log_error("%s: pid %d task %d state %c wchan %s syscall %.60s\n%s", who, (int)pid,
			     (int)tids[i], p ? p[2] : '?', wchan, sc, stack);
	}
}

/* ---- the target -------------------------------------------------------- */

struct target {
	pid_t pid;
	int pidfd;
	char pidstr[16];
	const char *report;
	uint64_t ready_ns;
	uint64_t lifetime_ns;
	unsigned long rt_sent; /* SIGRTMIN queued to it so far */
};

struct report {
	unsigned long rt, usr1, errors;
	char first_error[512];
	int n;
	char names[MAX_THREADS][16];
	unsigned long iters[MAX_THREADS];
};

static void target_start(struct target *t, const char *seconds)
{
	memset(t, 0, sizeof(*t));
	t->report = report_path;
	unlink(t->report);
	t->pid = TH_SPAWN("checksum", seconds, "--report", t->report, "--compute", COMPUTE,
			  "--alloc", ALLOC);
	t->ready_ns = th_now_ns();
	t->lifetime_ns = (uint64_t)(strtod(seconds, NULL) * 1e9);
	snprintf(t->pidstr, sizeof(t->pidstr), "%d", (int)t->pid);
	/* Still not reaped after pidfd_open: the pidfd is our child's. */
	t->pidfd = pidfd_open(t->pid);
	if (t->pidfd >= 0 && !th_alive(t->pid)) {
		close(t->pidfd);
		t->pidfd = -1;
	}
}

/*
 * Waits up to @wait_ms for the target to exit, then kills it; reaps it and
 * returns its wait status (-1 if it had to be killed). Its last report
 * stays until the next target_start().
 */
static int target_end(struct target *t, int wait_ms)
{
	int status = th_wait_exit(t->pid, wait_ms);

	if (status == -1) {
		/* One that should have ended (seen once in CI: mutex,
		 * target-exits, two suites at a time): where each thread waits
		 * tells a hook's deadlock from a slow exit. */
		if (wait_ms > 0)
			th_log_where(t->pid, "did not exit: target");
		th_kill(t->pid); /* kills only if not reaped yet; forgets it in any case */
	}
	if (t->pidfd >= 0)
		close(t->pidfd);
	t->pidfd = -1;
	return status;
}

static int parse_report(const char *path, struct report *rep)
{
	char line[512];
	bool end = false;
	FILE *f = fopen(path, "re");

	if (!f)
		return -1;
	memset(rep, 0, sizeof(*rep));
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (!strncmp(line, "rt ", 3))
			rep->rt = strtoul(line + 3, NULL, 10);
		else if (!strncmp(line, "usr1 ", 5))
			rep->usr1 = strtoul(line + 5, NULL, 10);
		else if (!strncmp(line, "errors ", 7))
			rep->errors = strtoul(line + 7, NULL, 10);
		else if (!strncmp(line, "first_error ", 12))
			snprintf(rep->first_error, sizeof(rep->first_error), "%s", line + 12);
		else if (!strncmp(line, "thread ", 7) && rep->n < MAX_THREADS &&
			 sscanf(line + 7, "%15s %lu", rep->names[rep->n], &rep->iters[rep->n]) == 2)
			rep->n++;
		else if (!strcmp(line, "end"))
			end = true;
	}
	fclose(f);
	return end && rep->n > 0 ? 0 : -1;
}

/* Asks the target for its counts (SIGUSR2). Returns 0, or -1 if no answer. */
static int target_report(struct target *t, struct report *rep)
{
	unlink(t->report);
	if (t->pidfd < 0 || pidfd_signal(t->pidfd, SIGUSR2, NULL) < 0)
		return -1;
	for (int waited = 0; waited < REPORT_TIMEOUT_MS; waited++) {
		if (parse_report(t->report, rep) == 0)
			return 0;
		th_sleep_ms(1);
	}
	return -1;
}

/* ---- SIGRTMIN, queued all the while ------------------------------------ */

struct sender {
	int pidfd;
	pid_t pid;
	atomic_bool stop;
	unsigned long sent;
	int error;
	pthread_t thread;
	bool running;
};

/* Signals queued for the target's user (SigQ), or -1. */
static long signals_queued(pid_t pid)
{
	char buf[2048];

	if (proc_file(pid, 0, "status", buf, sizeof(buf)) < 0)
		return -1;
	return (long)status_field(buf, "SigQ", 10);
}

/*
 * Queues SIGRTMIN (si_code SI_QUEUE: a full queue fails with EAGAIN, the
 * signal is never silently merged) as fast as it can, so that the target's
 * main thread is always taking one: that is when a snapshot catches it in
 * a signal-delivery stop, whose signal cprof must hand back at detach (or
 * the kernel, when cprof dies). Measured: a cprof that detaches with 0
 * loses one in about 15 runs. At most 256 are kept queued: the user's
 * queue is shared with every process of root.
 */
static void *sender_main(void *arg)
{
	struct sender *s = arg;
	siginfo_t info;

	memset(&info, 0, sizeof(info));
	info.si_signo = SIGRTMIN;
	info.si_code = SI_QUEUE;
	info.si_pid = getpid();
	info.si_uid = getuid();
	while (!atomic_load(&s->stop)) {
		if (pidfd_signal(s->pidfd, SIGRTMIN, &info) == 0)
			s->sent++;
		else if (errno != EAGAIN) {
			s->error = errno;
			return NULL;
		}
		if (s->sent % 64 == 0)
			while (signals_queued(s->pid) > 256 && !atomic_load(&s->stop))
				th_sleep_ms(1);
	}
	return NULL;
}

static void sender_start(struct sender *s, const struct target *t)
{
	memset(s, 0, sizeof(*s));
	s->pidfd = t->pidfd;
	s->pid = t->pid;
	cr_assert(pthread_create(&s->thread, NULL, sender_main, s) == 0);
	s->running = true;
}

static void sender_stop(struct sender *s, struct target *t)
{
	if (!s->running)
		return;
	atomic_store(&s->stop, true);
	pthread_join(s->thread, NULL);
	s->running = false;
	t->rt_sent += s->sent;
}

/* ---- what a row of the table counts ------------------------------------ */

enum command { CMD_CPU, CMD_THREADS_TEXT, CMD_THREADS_PPROF, CMD_HEAP, CMD_MUTEX, CMD_BLOCK };
enum fault {
	F_SIGKILL,
	F_SIGTERM,
	F_SIGINT,
	F_TARGET_KILLED,
	F_TARGET_EXITS,
	F_SIGKILL_COMMIT,
	F_HUP_INT,
};

static const char *const command_names[] = { "cpu",  "threads-debug2", "threads-debug0-o",
					      "heap", "mutex",		"block" };

/* Commands that load the agent into the target and run for -d. */
static bool agent_command(enum command c)
{
	return c == CMD_HEAP || c == CMD_MUTEX || c == CMD_BLOCK;
}

/* Commands whose run is a window of -d (not a snapshot). */
static bool windowed(enum command c)
{
	return c == CMD_CPU || agent_command(c);
}
static const char *const fault_names[] = { "sigkill",	    "sigterm",	    "sigint",
					   "target-killed", "target-exits", "sigkill-at-commit",
					   "hup-int" };

static bool target_fault(enum fault f)
{
	return f == F_TARGET_KILLED || f == F_TARGET_EXITS;
}

struct stats {
	enum command cmd;
	enum fault fault;
	unsigned trials, runs;
	unsigned landed;      /* faults delivered while cprof ran */
	unsigned in_snapshot; /* of which while cprof was tracing the target */
	unsigned checks;      /* targets examined after a trial */
	unsigned survived, untraced, unstopped, correct;
	unsigned hangs, bad_exit, bad_output, stray;
	unsigned litter; /* see sweep_dir() */
	unsigned empty;  /* exit 0 with a snapshot of no thread (the target died in it) */
	unsigned long sig_sent, sig_lost, sig_extra;
	unsigned codes[4]; /* exit 0, 1, 2, killed by a signal */
	uint64_t max_after_ns; /* from the fault to cprof's exit */
	uint64_t run_ns;       /* all runs of cprof, start to exit */
	unsigned failures, logged;
	char context[512]; /* the runs a target check follows, for the log */
};

static void failed(struct stats *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failed(struct stats *st, const char *fmt, ...)
{
	char msg[4096];
	va_list ap;

	st->failures++;
	if (st->logged >= MAX_LOGGED)
		return;
	st->logged++;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cr_log_error("%s %s, trial %u%s%s: %s", command_names[st->cmd], fault_names[st->fault],
		     st->trials, st->context[0] ? ", after " : "", st->context, msg);
}

/* ---- one run of cprof, and its fault ----------------------------------- */

enum who { AT_CPROF, AT_TARGET };
/*
 * When the fault is sent: @delay_ns after the start; after cprof was first
 * seen tracing the target (in the snapshot); or at once when a named file
 * ".cprof-*" appears in the output directory (inotify): cprof is putting
 * its output in place, the one moment a kill could leave litter behind.
 */
enum when { WHEN_TIME, WHEN_TRACED, WHEN_COMMIT };

struct plan {
	int sig;  /* 0: no fault */
	int sig2; /* to cprof 1 ms after @sig, 0: none */
	enum who who;
	enum when when;
	uint64_t delay_ns;
};

struct run {
	pid_t pid;
	int status;
	bool hung;
	bool sent;           /* the fault was delivered before cprof ended */
	bool sent2;          /* so was the plan's second signal */
	bool traced_at_send; /* cprof traced the target at that moment */
	bool handler_set;    /* cprof had a handler for the signal then */
	uint64_t start_ns, sent_ns, end_ns;
	uint64_t waited_ns; /* for a cpu, or frozen (only looked at past RUN_TIMEOUT_MS) */
	bool dstate;        /* past RUN_TIMEOUT_MS, it was seen in state D */
	char out_path[4200], err_path[4200];
};

/* True if an inotify event read from @fd names a ".cprof-*" file. */
static bool temp_file_created(int fd)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	bool seen = false;
	ssize_t k;

	while ((k = read(fd, buf, sizeof(buf))) > 0)
		for (char *q = buf; q < buf + k;) {
			const struct inotify_event *e = (const void *)q;

			if (e->len && !strncmp(e->name, ".cprof-", 7))
				seen = true;
			q += sizeof(*e) + e->len;
		}
	return seen;
}

/*
 * Runs cprof with @args (stdout and stderr to files in @io_dir), delivers the
 * fault of @p at its moment if cprof still runs then (WHEN_COMMIT watches
 * @out_dir), and waits for it: a hang after RUN_TIMEOUT_MS (see there) is
 * killed and recorded.
 */
static void run_cprof(struct run *r, const char *io_dir, const char *out_dir,
		      const char *const *args, const struct plan *p, struct target *t)
{
	const char *argv[32];
	pid_t parent = getpid(), pid;
	uint64_t deadline, hard_deadline, traced_ns = 0, stalled0;
	int out, err, pidfd, watch = -1, argc = 0;
	bool commit_seen = false;

	memset(r, 0, sizeof(*r));
	argv[argc++] = CPROF_BIN;
	for (; *args && argc < 31; args++)
		argv[argc++] = *args;
	argv[argc] = NULL;
	snprintf(r->out_path, sizeof(r->out_path), "%s/stdout", io_dir);
	snprintf(r->err_path, sizeof(r->err_path), "%s/stderr", io_dir);
	out = open(r->out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	err = open(r->err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	cr_assert(out >= 0 && err >= 0, "cannot create %s: %s", r->out_path, strerror(errno));
	if (p->sig && p->when == WHEN_COMMIT) {
		watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
		cr_assert(watch >= 0 && inotify_add_watch(watch, out_dir, IN_CREATE | IN_MOVED_TO) >= 0,
			  "inotify on %s: %s", out_dir, strerror(errno));
	}

	r->start_ns = th_now_ns();
	pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		sigset_t none;
		int null = open("/dev/null", O_RDONLY);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		for (int sig = 1; sig < NSIG; sig++)
			if (sig != SIGKILL && sig != SIGSTOP)
				signal(sig, SIG_DFL);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(null, STDIN_FILENO);
		dup2(out, STDOUT_FILENO);
		dup2(err, STDERR_FILENO);
		close(null);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(out);
	close(err);
	own_add(pid);
	r->pid = pid;
	pidfd = pidfd_open(pid); /* not reaped before own_reap: it is ours */
	cr_assert(pidfd >= 0, "pidfd_open: %s", strerror(errno));
	deadline = r->start_ns + RUN_TIMEOUT_MS * 1000000ULL;
	hard_deadline = r->start_ns + RUN_HARD_TIMEOUT_MS * 1000000ULL;
	stalled0 = atomic_load(&watchdog.stalled_ns);

	for (;;) {
		struct pollfd pfd[2] = { { pidfd, POLLIN, 0 }, { watch, POLLIN, 0 } };
		uint64_t now = th_now_ns(), at = UINT64_MAX, until = deadline;
		struct timespec ts;

		if (p->sig && !r->sent) {
			if (p->when == WHEN_TRACED && !traced_ns && tracer_of(t->pid) > 0)
				traced_ns = now;
			if (p->when == WHEN_COMMIT && !commit_seen)
				commit_seen = temp_file_created(watch);
			if (p->when == WHEN_TIME)
				at = r->start_ns + p->delay_ns;
			else if (traced_ns)
				at = traced_ns + p->delay_ns;
			else if (commit_seen)
				at = now;
			if (now >= at) {
				r->traced_at_send = tracer_of(t->pid) > 0;
				if (p->who == AT_CPROF) {
					r->handler_set = handles(pid, p->sig);
					kill(pid, p->sig);
				} else {
					pidfd_signal(t->pidfd, p->sig, NULL);
				}
				r->sent = true;
				r->sent_ns = now;
				continue;
			}
			if (p->when == WHEN_TRACED)
				until = now; /* watch for the snapshot: spin */
			else if (at < until)
				until = at;
		} else if (p->sig2 && r->sent && !r->sent2) {
			at = r->sent_ns + 1000000ULL;
			if (now >= at) {
				kill(pid, p->sig2);
				r->sent2 = true;
				continue;
			}
			until = at;
		}
		if (now >= deadline && now < hard_deadline) {
			/* Time cprof could not run does not count. */
			r->waited_ns = runqueue_wait_ns(pid) +
				       (atomic_load(&watchdog.stalled_ns) - stalled0);
			deadline = r->start_ns + RUN_TIMEOUT_MS * 1000000ULL + r->waited_ns;
			/* Nor is it a hang while the kernel holds it: look again soon. */
			if (deadline < now + 100000000ULL && task_in_d_state(pid)) {
				deadline = now + 100000000ULL;
				r->dstate = true;
			}
		}
		if (now >= deadline || now >= hard_deadline) {
			r->hung = true;
			log_tasks("cprof, hung", pid);
			log_tasks("its target", t->pid);
			kill(pid, SIGKILL);
			break;
		}
		if (until > hard_deadline)
			until = hard_deadline;
		if (until < now)
			until = now;
		ts.tv_sec = (time_t)((until - now) / 1000000000ULL);
		ts.tv_nsec = (long)((until - now) % 1000000000ULL);
		if (ppoll(pfd, watch >= 0 ? 2 : 1, &ts, NULL) > 0 && pfd[0].revents)
			break;
	}
	r->status = own_reap(pid);
	r->end_ns = th_now_ns();
	close(pidfd);
	if (watch >= 0)
		close(watch);
}

static int run_code(const struct run *r)
{
	if (r->hung)
		return -1;
	if (WIFEXITED(r->status))
		return WEXITSTATUS(r->status);
	return WIFSIGNALED(r->status) ? 128 + WTERMSIG(r->status) : -1;
}


/* The first lines of cprof's stderr, for a log. */
static const char *err_text(const struct run *r, char *buf, size_t size)
{
	char *e = th_read_text(r->err_path, NULL);

	snprintf(buf, size, "%s", e ? e : "(none)");
	free(e);
	return buf;
}

/* Did cprof say a Ctrl-C came before the agent was loaded (cli/agent-load.c)? */
static bool unloaded(const struct run *r)
{
	char *e = th_read_text(r->err_path, NULL);
	bool yes = e && strstr(e, "interrupted before the agent was loaded");

	free(e);
	return yes;
}

/* "SIGKILL at 12.3 ms (traced)", "no fault", "SIGTERM not sent (ended first)". */
static const char *fault_text(const struct run *r, const struct plan *p, char *buf, size_t size)
{
	if (!p->sig)
		snprintf(buf, size, "no fault");
	else if (!r->sent)
		snprintf(buf, size, "%s to %s not sent: cprof ended first", sigabbrev_np(p->sig),
			 p->who == AT_CPROF ? "cprof" : "the target");
	else
		snprintf(buf, size, "%s to %s at %.2f ms%s%s%s%s", sigabbrev_np(p->sig),
			 p->who == AT_CPROF ? "cprof" : "the target",
			 (double)(r->sent_ns - r->start_ns) / 1e6,
			 r->traced_at_send ? ", in the snapshot" : "",
			 p->who == AT_CPROF && p->sig != SIGKILL
				 ? (r->handler_set ? ", handler installed" : ", no handler yet")
				 : "",
			 r->sent2 ? ", then SIG" : "", r->sent2 ? sigabbrev_np(p->sig2) : "");
	return buf;
}

/* ---- what cprof wrote --------------------------------------------------- */

/* True if @buf is one whole gzip member, trailer included, and nothing else. */
static bool gzip_complete(const uint8_t *buf, size_t len)
{
	uint8_t out[65536];
	z_stream z;
	int r;

	memset(&z, 0, sizeof(z));
	if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
		return false;
	z.next_in = (uint8_t *)buf;
	z.avail_in = (uInt)len;
	do {
		z.next_out = out;
		z.avail_out = sizeof(out);
		r = inflate(&z, Z_NO_FLUSH);
	} while (r == Z_OK);
	inflateEnd(&z);
	return r == Z_STREAM_END && z.avail_in == 0;
}

/* The thread count the last threads output checked said it stopped. */
static size_t said_threads;

/*
 * Validates a profile file. Returns NULL if good, or what is wrong. @unloaded:
 * cprof said it was interrupted before the agent was loaded, so the profile
 * must be empty, of a window of 0 ns.
 */
static const char *check_profile(enum command cmd, const char *path, bool alive, bool gone,
				 bool unloaded, char *why, size_t size)
{
	struct profile *p = NULL;
	uint8_t *buf;
	size_t len;
	int r = th_read_file(path, &buf, &len);

	if (r < 0)
		return snprintf(why, size, "cannot read it: %s", strerror(-r)), why;
	if (!gzip_complete(buf, len)) {
		free(buf);
		return snprintf(why, size, "not one complete gzip stream (%zu bytes)", len), why;
	}
	r = pprof_decode(buf, len, &p);
	free(buf);
	if (r < 0)
		return snprintf(why, size, "pprof_decode: %s", strerror(-r)), why;
	why[0] = '\0';
	if (cmd == CMD_CPU) {
		if (th_sample_type(p, "samples", "count") != 0 ||
		    th_sample_type(p, "cpu", "nanoseconds") != 1)
			snprintf(why, size, "no samples/count and cpu/nanoseconds sample types");
		else if (p->duration_nanos <= 0)
			snprintf(why, size, "a window of %lld ns", (long long)p->duration_nanos);
	} else if (cmd == CMD_HEAP || agent_command(cmd)) {
		if (cmd == CMD_HEAP && (th_sample_type(p, "alloc_objects", "count") != 0 ||
					th_sample_type(p, "inuse_space", "bytes") != 3))
			snprintf(why, size, "not Go's heap sample types");
		else if (cmd != CMD_HEAP && (th_sample_type(p, "contentions", "count") != 0 ||
					     th_sample_type(p, "delay", "nanoseconds") != 1))
			snprintf(why, size, "no contentions/count and delay/nanoseconds");
		else if (unloaded && (p->duration_nanos != 0 || p->nsamples != 0))
			snprintf(why, size, "the agent was never loaded, yet a window of %lld ns and "
				 "%zu samples", (long long)p->duration_nanos, p->nsamples);
		else if (!unloaded && p->duration_nanos <= 0)
			snprintf(why, size, "a window of %lld ns", (long long)p->duration_nanos);
	} else {
		int64_t total = 0;
		size_t said = 0;

		for (size_t i = 0; i < p->nsamples; i++)
			total += p->samples[i].values[0];
		for (size_t i = 0; i < p->ncomments; i++)
			if (sscanf(p->comments[i], "paused %*f ms for %zu thread", &said) == 1)
				break;
		said_threads = said;
		if (th_sample_type(p, "threads", "count") != 0)
			snprintf(why, size, "no threads/count sample type");
		else if ((said == 0 && !gone) || total != (int64_t)said)
			snprintf(why, size, "%lld threads in samples, the comment says %zu",
				 (long long)total, said);
		else if (alive && said < STABLE_THREADS)
			snprintf(why, size, "%zu threads of a living target with %d", said,
				 STABLE_THREADS);
	}
	profile_free(p);
	return why[0] ? why : NULL;
}

/*
 * Validates debug=2 text: "# paused ... for N threads" line, one block per
 * thread, each ending in a blank line; a living target's threads all there.
 */
static const char *check_text(const char *text, size_t len, bool alive, bool gone, char *why,
			      size_t size)
{
	size_t said = 0, headers = 0;

	if (sscanf(text, "# paused %*f ms for %zu thread", &said) != 1)
		return snprintf(why, size, "no '# paused' line first"), why;
	said_threads = said;
	if (len < 2 || text[len - 1] != '\n' || text[len - 2] != '\n')
		return snprintf(why, size, "it does not end with a blank line (%zu bytes)", len), why;
	for (const char *p = text; (p = strstr(p, "\nthread ")); p++)
		headers++;
	if (headers < said || (said == 0 && !gone))
		return snprintf(why, size, "%zu thread blocks for %zu threads", headers, said), why;
	for (int i = 0; alive && i < STABLE_THREADS; i++) {
		char needle[48];

		snprintf(needle, sizeof(needle), "\"%s\" [", stable_names[i]);
		if (!strstr(text, needle))
			return snprintf(why, size, "no block for thread %s", stable_names[i]), why;
	}
	return NULL;
}

/*
 * What a trial leaves in the -o path before the run, half of the time: an
 * "old profile" that a run must replace whole (exit 0) or leave exactly as
 * it was (an error, or killed before the end).
 */
#define OLD_OUTPUT "an old profile, to be replaced whole or not at all\n"
#define OUT_NAME "out.pb.gz"

/*
 * Removes everything from @dir (the output is gone already) and counts
 * what should not have been there, naming it in @names. One thing may be:
 * when an old output had to be replaced and cprof was SIGKILLed, its
 * ".cprof-PID-N" name, linked and not yet renamed over the old output. No
 * system call replaces a file by an unnamed one (linkat fails on an
 * existing name), so that moment cannot be closed; the file must at least
 * be complete. It is counted in @ret_litter. The old output itself is kept
 * as OUT_NAME.old (cli/output.c), and may be so whatever the run's end;
 * SIGKILLed between its link and its rename, its "OUT_NAME.old.cprof-PID"
 * name stays: both must hold the old output whole.
 */
static bool is_kept_old(const char *dir, const char *name, bool sigkilled, pid_t pid)
{
	char path[4400], want[256];
	size_t len = 0;
	char *text;
	bool ok;

	snprintf(want, sizeof(want), "%s.old", OUT_NAME);
	if (strcmp(name, want) != 0) {
		snprintf(want, sizeof(want), "%s.old.cprof-%d", OUT_NAME, (int)pid);
		if (!sigkilled || strcmp(name, want) != 0)
			return false;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	text = th_read_text(path, &len);
	ok = text && len == strlen(OLD_OUTPUT) && !memcmp(text, OLD_OUTPUT, len);
	free(text);
	return ok;
}

static int sweep_dir(const char *dir, const struct run *r, enum command cmd, bool had_old,
		     unsigned *ret_litter, char *names, size_t size)
{
	bool sigkilled = !r->hung && WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGKILL;
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	names[0] = '\0';
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char path[4400], why[256];
		int pid, k, end = 0;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (had_old && is_kept_old(dir, e->d_name, sigkilled, r->pid)) {
			unlink(path);
			continue;
		}
		if (sigkilled && had_old && sscanf(e->d_name, ".cprof-%d-%d%n", &pid, &k, &end) == 2 &&
		    !e->d_name[end] && pid == r->pid &&
		    !check_profile(cmd, path, false, true, false, why, sizeof(why))) {
			(*ret_litter)++;
		} else {
			n++;
			snprintf(names + strlen(names), size - strlen(names), "%s ", e->d_name);
		}
		unlink(path);
	}
	closedir(d);
	return n;
}

static void out_path_of(const char *dir, char *path, size_t size)
{
	snprintf(path, size, "%s/%s", dir, OUT_NAME);
}

/* Puts an old output in place, or none. Returns whether it did. */
static bool prepare_output(enum command cmd, const char *dir)
{
	char path[4400];
	bool old = cmd != CMD_THREADS_TEXT && rng(2);
	int fd;

	out_path_of(dir, path, sizeof(path));
	unlink(path);
	if (!old)
		return false;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	cr_assert(fd >= 0 && write(fd, OLD_OUTPUT, strlen(OLD_OUTPUT)) == (ssize_t)strlen(OLD_OUTPUT),
		  "cannot write %s", path);
	close(fd);
	return true;
}

/*
 * Judges one run: its exit code, what it wrote, and leaves @dir empty.
 * @gone: the target may have died before cprof ended; @alive: it lived all
 * along (a complete output shows all its threads); @had_old: the -o path
 * held OLD_OUTPUT before the run.
 */
static void judge_run(struct stats *st, const struct run *r, const struct plan *p,
		      const char *dir, bool gone, bool alive, bool had_old)
{
	char why[512], err[1024], stray[512], path[4400];
	int code = run_code(r);
	bool killed = !r->hung && WIFSIGNALED(r->status), ok;
	bool ended_well = !r->hung && !killed && code == 0;
	bool ended_badly = !r->hung && !killed && code != 0;
	size_t text_len = 0;
	char *text = th_read_text(r->out_path, &text_len);
	const char *bad = NULL;

	said_threads = (size_t)-1;
	st->runs++;
	st->run_ns += r->end_ns - r->start_ns;
	if (r->sent && p->sig) {
		st->landed++;
		st->in_snapshot += r->traced_at_send;
		if (r->end_ns - r->sent_ns > st->max_after_ns)
			st->max_after_ns = r->end_ns - r->sent_ns;
	}
	if (r->hung) {
		st->hangs++;
		failed(st, "cprof did not end within %d ms (and %.0f ms it could not run%s; %s); "
			   "stderr:\n%s",
		       RUN_TIMEOUT_MS, (double)r->waited_ns / 1e6,
		       r->dstate ? ", and time in state D" : "", fault_text(r, p, err, 256),
		       err_text(r, err + 256, sizeof(err) - 256));
	} else {
		st->codes[killed ? 3 : code == 0 ? 0 : code == 1 ? 1 : 2]++;
	}

	/* The exit code. */
	if (r->hung)
		ok = true; /* counted as a hang */
	else if (killed)
		ok = p->who == AT_CPROF && r->sent &&
		     ((WTERMSIG(r->status) == p->sig && (p->sig == SIGKILL || !r->handler_set)) ||
		      (r->sent2 && WTERMSIG(r->status) == p->sig2));
	else
		ok = code == 0 || ((code == 1 || code == 2) && gone);
	if (!ok) {
		st->bad_exit++;
		failed(st, "exit %d (%s%s; %s; target %s); stderr:\n%s", code,
		       killed ? "killed by " : "exited", killed ? strsignal(WTERMSIG(r->status)) : "",
		       fault_text(r, p, err, 256), gone ? "gone" : "alive",
		       err_text(r, err + 256, sizeof(err) - 256));
	}

	/* What it wrote: something new and whole, or nothing changed. */
	if (st->cmd == CMD_THREADS_TEXT) {
		if (text_len > 0)
			bad = check_text(text, text_len, alive, gone, why, sizeof(why));
		else if (ended_well)
			bad = "exit 0 and nothing on stdout";
		if (!bad && text_len > 0 && ended_badly)
			bad = "an error exit with an output on stdout";
	} else {
		size_t len = 0;
		char *now;
		bool exists, old, unchanged;

		out_path_of(dir, path, sizeof(path));
		now = th_read_text(path, &len);
		exists = now != NULL;
		old = exists && len == strlen(OLD_OUTPUT) && !memcmp(now, OLD_OUTPUT, len);
		unchanged = had_old ? old : !exists;
		free(now);
		if (text_len > 0)
			bad = "something on stdout with -o FILE";
		else if (exists && !old)
			bad = check_profile(st->cmd, path, alive, gone, unloaded(r), why, sizeof(why));
		else if (!unchanged)
			bad = "the old output is gone, and no new one";
		else if (ended_well)
			bad = "exit 0 and no new output file";
		if (!bad && ended_badly && !unchanged)
			bad = "an error exit, and the output changed";
		unlink(path);
	}
	if (!bad && ended_well && !windowed(st->cmd) && said_threads == 0)
		st->empty++;
	if (bad) {
		st->bad_output++;
		failed(st, "bad output after exit %d (%s): %s; stderr:\n%s", code,
		       fault_text(r, p, err, 256), bad,
		       err_text(r, err + 256, sizeof(err) - 256));
	}
	if (sweep_dir(dir, r, st->cmd, had_old, &st->litter, stray, sizeof(stray))) {
		st->stray++;
		failed(st, "left in the output directory after exit %d (%s; %s): %s", code,
		       fault_text(r, p, err, 256), had_old ? "replacing a file" : "no file before",
		       stray);
	}
	free(text);
}

/* ---- the target after a trial ------------------------------------------ */

static bool same_threads(const struct report *a, const struct report *b)
{
	if (a->n != b->n)
		return false;
	for (int i = 0; i < a->n; i++)
		if (strcmp(a->names[i], b->names[i]))
			return false;
	return true;
}

/*
 * A target that must be alive: running, untraced, answering, every thread
 * progressing, no error, every queued signal handled once. Returns true if
 * it is in good health.
 */
static bool check_alive(struct stats *st, struct target *t)
{
	struct report a, b;
	char what[256];
	int stopped, traced;
	bool progress = false, healthy = true;
	uint64_t give_up, start, stalled0, waited0[MAX_THREADS];

	st->checks++;
	if (!th_alive(t->pid)) {
		failed(st, "the target died");
		return false;
	}
	st->survived++;
	task_scan(t->pid, &stopped, &traced, what, sizeof(what));
	if (stopped) {
		/* A stop left behind stays: look again to tell it from a transient. */
		th_sleep_ms(50);
		task_scan(t->pid, &stopped, &traced, what, sizeof(what));
		failed(st, "%s (%d stopped tasks 50 ms later)", what, stopped);
		healthy = false;
	} else {
		st->unstopped++;
	}
	if (traced) {
		failed(st, "%s", what);
		healthy = false;
	} else {
		st->untraced++;
	}

	if (target_report(t, &a) < 0) {
		failed(st, "the target does not answer SIGUSR2 (%s, %.1f s after ready)",
		       th_alive(t->pid) ? "alive" : "gone", (double)(th_now_ns() - t->ready_ns) / 1e9);
		return false;
	}
	start = th_now_ns();
	stalled0 = atomic_load(&watchdog.stalled_ns);
	for (int i = 0; i < a.n; i++)
		waited0[i] = thread_wait_ns(t->pid, a.names[i]);
	th_sleep_ms(PROGRESS_MS);
	while (!progress) {
		uint64_t now, waited, excused;
		int i;

		if (target_report(t, &b) < 0) {
			failed(st, "the target stopped answering SIGUSR2 (%s, %.1f s after ready)",
			       th_alive(t->pid) ? "alive" : "gone",
			       (double)(th_now_ns() - t->ready_ns) / 1e9);
			return false;
		}
		if (!same_threads(&a, &b)) {
			failed(st, "the target's report changed its threads");
			return false;
		}
		for (i = 0; i < b.n && b.iters[i] > a.iters[i]; i++)
			;
		progress = i == b.n;
		if (progress)
			break;
		now = th_now_ns();
		waited = thread_wait_ns(t->pid, b.names[i]);
		excused = atomic_load(&watchdog.stalled_ns) - stalled0 +
			  (waited > waited0[i] ? waited - waited0[i] : 0);
		if (now >= start + PROGRESS_GIVE_UP_MS * 1000000ULL + excused ||
		    now >= start + PROGRESS_HARD_MS * 1000000ULL) {
			failed(st, "thread %s made no progress in %.1f s (%lu iterations; %.1f s "
				   "of it waiting for a cpu or frozen)",
			       b.names[i], (double)(now - start) / 1e9, b.iters[i],
			       (double)excused / 1e9);
			log_tasks("a target making no progress", t->pid);
			healthy = false;
			break;
		}
		th_sleep_ms(PROGRESS_MS);
	}
	if (b.errors) {
		failed(st, "the target counts %lu errors, the first: %s", b.errors, b.first_error);
		healthy = false;
	}
	/* Every signal queued is handled by now or soon; a lost one never is. */
	give_up = th_now_ns() + SIGNALS_TIMEOUT_MS * 1000000ULL;
	while (b.rt < t->rt_sent && th_now_ns() < give_up) {
		th_sleep_ms(10);
		if (target_report(t, &b) < 0)
			break;
	}
	if (b.rt != t->rt_sent) {
		if (b.rt < t->rt_sent)
			st->sig_lost += t->rt_sent - b.rt;
		else
			st->sig_extra += b.rt - t->rt_sent;
		failed(st, "%lu SIGRTMIN queued, %lu handled", t->rt_sent, b.rt);
		healthy = false;
		t->rt_sent = b.rt; /* count each loss once */
	}
	if (progress && !b.errors && healthy)
		st->correct++;
	return healthy;
}

/* ---- trials ------------------------------------------------------------ */

struct trial_ctx {
	struct stats st;
	const char *dir;    /* where -o writes: nothing else may appear in it */
	const char *io_dir; /* cprof's stdout and stderr */
	unsigned cpu_ms;
	char dur[32];
};

static void command_args(const struct trial_ctx *c, const struct target *t, const char **args)
{
	static char out[4200];
	int n = 0;

	out_path_of(c->dir, out, sizeof(out));
	switch (c->st.cmd) {
	case CMD_CPU:
		args[n++] = "cpu";
		args[n++] = "-p";
		args[n++] = t->pidstr;
		args[n++] = "-d";
		args[n++] = c->dur;
		args[n++] = "-F";
		args[n++] = "500";
		args[n++] = "-o";
		args[n++] = out;
		break;
	case CMD_THREADS_TEXT:
		args[n++] = "threads";
		args[n++] = "-p";
		args[n++] = t->pidstr;
		args[n++] = "--debug";
		args[n++] = "2";
		break;
	case CMD_THREADS_PPROF:
		args[n++] = "threads";
		args[n++] = "-p";
		args[n++] = t->pidstr;
		args[n++] = "--debug";
		args[n++] = "0";
		args[n++] = "-o";
		args[n++] = out;
		break;
	case CMD_HEAP:
	case CMD_MUTEX:
	case CMD_BLOCK:
		args[n++] = command_names[c->st.cmd];
		args[n++] = "-p";
		args[n++] = t->pidstr;
		args[n++] = "-d";
		args[n++] = c->dur;
		if (c->st.cmd != CMD_MUTEX) {
			args[n++] = c->st.cmd == CMD_HEAP ? "--heap-rate" : "--block-rate";
			args[n++] = c->st.cmd == CMD_HEAP ? "64KiB" : "10us";
		}
		args[n++] = "-o";
		args[n++] = out;
		break;
	}
	args[n] = NULL;
}

/* A random moment of the run for the fault. */
static void plan_moment(const struct trial_ctx *c, struct plan *p)
{
	if (c->st.fault == F_SIGKILL_COMMIT) {
		p->when = WHEN_COMMIT;
	} else if (c->st.fault == F_HUP_INT && agent_command(c->st.cmd)) {
		/* The thread that loads the agent, in cprof's stop. */
		p->when = WHEN_TRACED;
		p->delay_ns = rng(200) * 1000;
	} else if (c->st.cmd == CMD_CPU) {
		p->when = WHEN_TIME;
		p->delay_ns = rng((uint64_t)c->cpu_ms * 1250) * 1000; /* 0-125 % of -d */
	} else if (agent_command(c->st.cmd)) {
		/* Loading the agent (tracing), the window, the detach, the writing. */
		p->when = WHEN_TIME;
		p->delay_ns = rng(((uint64_t)c->cpu_ms + INJECT_MS) * 1250) * 1000;
	} else if (rng(2)) {
		p->when = WHEN_TIME;
		p->delay_ns = rng(THREADS_WINDOW_US) * 1000;
	} else {
		p->when = WHEN_TRACED;
		p->delay_ns = rng(SNAPSHOT_WINDOW_US) * 1000;
	}
}

static int cprof_signal(enum fault f)
{
	if (f == F_HUP_INT)
		return SIGHUP;
	return f == F_SIGTERM ? SIGTERM : f == F_SIGINT ? SIGINT : SIGKILL;
}

/*
 * The agent's commands: whatever happened to cprof, the agent's hooks are
 * gone within a second of its end (by the command, or by the agent itself
 * when cprof died).
 */
static void check_unhooked(struct stats *st, struct target *t, uint64_t cprof_end_ns)
{
	struct cprof_wire_header *h = th_agent_header(t->pid);
	uint32_t state = CPROF_STATE_DETACHED;

	if (!h)
		return; /* never loaded (killed before), or the target is gone */
	while (th_now_ns() - cprof_end_ns < 1000000000ULL) {
		state = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
		if (state == CPROF_STATE_DETACHED)
			break;
		th_sleep_ms(5);
	}
	if (state != CPROF_STATE_DETACHED)
		failed(st, "the agent's hooks are still in 1 s after cprof ended (state %u, %llu "
			   "hooked)", state, (unsigned long long)h->hooked);
	munmap(h, CPROF_WIRE_HEADER_SIZE);
}

/*
 * A fault on cprof: a burst of runs (threads: 1-3 back to back, SIGRTMIN
 * queued at the target meanwhile) against a target that lives on, each
 * signalled at its own moment, then the target is examined.
 */
static void trial_cprof_fault(struct trial_ctx *c, struct target *t)
{
	const char *args[16];
	struct sender s = { 0 };
	int burst = windowed(c->st.cmd) ? 1 : 1 + (int)rng(MAX_BURST);
	char context[sizeof(c->st.context)] = "";
	bool healthy;

	if (!th_alive(t->pid) || th_now_ns() - t->ready_ns > TARGET_MAX_AGE_NS) {
		target_end(t, 0);
		target_start(t, TARGET_SECONDS);
	}
	command_args(c, t, args);
	if (c->st.cmd != CMD_CPU)
		sender_start(&s, t);
	for (int i = 0; i < burst; i++) {
		struct plan p = { .sig = cprof_signal(c->st.fault), .who = AT_CPROF,
				  .sig2 = c->st.fault == F_HUP_INT ? SIGINT : 0 };
		struct run r;
		bool had_old = prepare_output(c->st.cmd, c->dir);
		char what[256];
		size_t len = strlen(context);

		plan_moment(c, &p);
		run_cprof(&r, c->io_dir, c->dir, args, &p, t);
		judge_run(&c->st, &r, &p, c->dir, false, true, had_old);
		if (agent_command(c->st.cmd))
			check_unhooked(&c->st, t, r.end_ns);
		snprintf(context + len, sizeof(context) - len, "%srun %d (%s, exit %d)",
			 i ? ", " : "", i + 1, fault_text(&r, &p, what, sizeof(what)), run_code(&r));
	}
	sender_stop(&s, t);
	if (s.error)
		failed(&c->st, "sigqueue: %s", strerror(s.error));
	c->st.sig_sent += s.sent;
	snprintf(c->st.context, sizeof(c->st.context), "%s", context);
	healthy = check_alive(&c->st, t);
	c->st.context[0] = '\0';
	if (!healthy) {
		/* Start afresh: one failure must not cascade into every later trial. */
		target_end(t, 0);
		target_start(t, TARGET_SECONDS);
	}
}

/* A fault on the target: a fresh one, killed or ending during the run. */
static void trial_target_fault(struct trial_ctx *c)
{
	const char *args[16];
	struct target t;
	struct plan p = { .who = AT_TARGET };
	struct run r;
	char seconds[32], what[256];
	uint64_t window_us = c->st.cmd == CMD_CPU	 ? (uint64_t)c->cpu_ms * 1250
			     : agent_command(c->st.cmd) ? ((uint64_t)c->cpu_ms + INJECT_MS) * 1250
							: THREADS_WINDOW_US;
	bool gone, had_old, killed = c->st.fault == F_TARGET_KILLED;
	int status, stopped, traced;

	if (killed) {
		snprintf(seconds, sizeof(seconds), "%s", TARGET_SECONDS);
		p.sig = SIGKILL;
		plan_moment(c, &p);
	} else {
		/* It ends 1 ms to 125 % of the window after "ready". */
		snprintf(seconds, sizeof(seconds), "%.6f", (double)(1000 + rng(window_us)) / 1e6);
	}
	target_start(&t, seconds);
	command_args(c, &t, args);
	had_old = prepare_output(c->st.cmd, c->dir);
	run_cprof(&r, c->io_dir, c->dir, args, &p, &t);
	if (!killed && r.end_ns >= t.ready_ns + t.lifetime_ns && !r.hung)
		c->st.landed++;
	/* "ready" was printed a little before t.ready_ns: 20 ms of margin. */
	gone = killed ? r.sent
		      : r.end_ns + 20000000ULL >= t.ready_ns + t.lifetime_ns || !th_alive(t.pid);
	judge_run(&c->st, &r, &p, c->dir, gone, false, had_old);

	/* Whatever is left of it: never stopped, never traced. */
	c->st.checks++;
	task_scan(t.pid, &stopped, &traced, what, sizeof(what));
	if (stopped)
		failed(&c->st, "%s", what);
	else
		c->st.unstopped++;
	if (traced)
		failed(&c->st, "%s", what);
	else
		c->st.untraced++;

	if (killed) {
		if (!r.sent)
			pidfd_signal(t.pidfd, SIGKILL, NULL); /* cprof ended first */
		status = target_end(&t, 5000);
		if (status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
			c->st.survived++; /* it met the fate we chose for it */
			c->st.correct++;
		} else {
			failed(&c->st, "the target we killed ended with status %#x", status);
		}
	} else {
		struct report rep;

		status = target_end(&t, 5000 + (int)(t.lifetime_ns / 1000000));
		if (status == -1) {
			failed(&c->st, "the target did not exit by itself");
			return;
		}
		c->st.survived++;
		if (parse_report(t.report, &rep) == 0 && rep.errors)
			failed(&c->st, "the target counted %lu errors, the first: %s", rep.errors,
			       rep.first_error);
		else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed(&c->st, "the target ended with %s %d (3: a check failed, 4: a "
				       "thread did not end)",
			       WIFEXITED(status) ? "exit" : "signal",
			       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		else
			c->st.correct++;
	}
}

/* ---- a test: one command, one fault ------------------------------------ */

static void table_row(const struct stats *st)
{
	const char *path = getenv("CPROF_TORTURE_TABLE");
	char line[1024];
	FILE *f;

	snprintf(line, sizeof(line),
		 "%s %s trials=%u runs=%u landed=%u in_snapshot=%u checks=%u survived=%u "
		 "untraced=%u unstopped=%u correct=%u hangs=%u bad_exit=%u bad_output=%u "
		 "stray=%u litter=%u empty=%u sig_sent=%lu sig_lost=%lu sig_extra=%lu "
		 "exit0=%u exit1=%u exit2=%u killed=%u max_after_ms=%.0f mean_run_ms=%.0f "
		 "failures=%u",
		 command_names[st->cmd], fault_names[st->fault], st->trials, st->runs, st->landed,
		 st->in_snapshot, st->checks, st->survived, st->untraced, st->unstopped,
		 st->correct, st->hangs, st->bad_exit, st->bad_output, st->stray, st->litter,
		 st->empty, st->sig_sent, st->sig_lost, st->sig_extra, st->codes[0], st->codes[1],
		 st->codes[2], st->codes[3], (double)st->max_after_ns / 1e6,
		 st->runs ? (double)st->run_ns / 1e6 / st->runs : 0.0, st->failures);
	cr_log_info("%s", line);
	if (path && *path && (f = fopen(path, "ae"))) {
		fprintf(f, "%s\n", line);
		fclose(f);
	}
}

/* One run without a fault: skips the test when the kernel refuses. */
static void preflight(struct trial_ctx *c, struct target *t)
{
	const char *args[16];
	struct plan p = { 0 };
	struct run r;
	char err[1024], stray[512];
	int code;

	if (c->st.cmd == CMD_CPU)
		th_require_perf(false);
	if (agent_command(c->st.cmd) && geteuid() != 0)
		TH_SKIP_MISSING("cprof %s loads its agent with ptrace: run as root",
			     command_names[c->st.cmd]);
	command_args(c, t, args);
	prepare_output(c->st.cmd, c->dir);
	run_cprof(&r, c->io_dir, c->dir, args, &p, t);
	code = run_code(&r);
	err_text(&r, err, sizeof(err));
	remove(r.out_path);
	sweep_dir(c->dir, &r, c->st.cmd, false, &c->st.litter, stray, sizeof(stray));
	if (code == 3) {
		target_end(t, 0);
		TH_SKIP_MISSING("cprof %s is not permitted here (exit 3): %s", command_names[c->st.cmd],
			     err);
	}
	cr_assert_eq(code, 0, "cprof %s without a fault: exit %d; stderr:\n%s",
		     command_names[c->st.cmd], code, err);
}

/* Is @word one of the comma-separated words of @list? */
static bool list_has(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, word, n) && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

/* How many faults the trials of a command are split between: all, or
 * those named in CPROF_TORTURE_FAULTS. */
static unsigned faults_run(void)
{
	const char *only = getenv("CPROF_TORTURE_FAULTS");
	unsigned n = 1;

	if (!only || !*only)
		return NFAULTS;
	for (; *only; only++)
		n += *only == ',';
	return n < NFAULTS ? n : NFAULTS;
}

static void torture(enum command cmd, enum fault fault)
{
	unsigned nfaults = faults_run();
	unsigned per_fault = (env_uint("CPROF_TORTURE_TRIALS",
				       agent_command(cmd) ? DEFAULT_AGENT_TRIALS : DEFAULT_TRIALS, 1) +
			      nfaults - 1) /
			     nfaults;
	/* The extra faults: half as many, they land (nearly) every time. */
	if (fault == F_SIGKILL_COMMIT || fault == F_HUP_INT)
		per_fault = (per_fault + 1) / 2;
	struct trial_ctx c = { .st = { .cmd = cmd, .fault = fault } };
	struct target t;
	const char *only;
	char name[64];

	snprintf(name, sizeof(name), "%s %s", command_names[cmd], fault_names[fault]);
	only = getenv("CPROF_TORTURE_FAULTS");
	if (only && !list_has(only, fault_names[fault]))
		cr_skip_test("fault %s is not in CPROF_TORTURE_FAULTS=%s (the plain build of the "
			     "test command runs every fault)", fault_names[fault], only);
	rng_seed(name);
	c.cpu_ms = env_uint("CPROF_TORTURE_CPU_MS", DEFAULT_CPU_MS, 10);
	snprintf(c.dur, sizeof(c.dur), "%ums", c.cpu_ms);
	report_path = th_tmp_path("report");
	c.dir = th_tmp_dir("torture");
	watchdog_start();
	c.io_dir = th_tmp_dir("torture-io");
	target_start(&t, TARGET_SECONDS);
	cr_assert(t.pidfd >= 0, "pidfd_open: %s", strerror(errno));
	preflight(&c, &t);
	if (target_fault(fault))
		target_end(&t, 0);

	/*
	 * A fault that never lands tortures nothing (judged below), and a few
	 * random moments can all miss the run (4 trials, each landing about
	 * half the time on a busy CI machine, failed CI once): while none has
	 * landed, up to three times as many trials more.
	 */
	for (unsigned i = 0; i < per_fault || (i < 4 * per_fault && c.st.landed == 0 &&
						fault != F_SIGKILL_COMMIT);
	     i++) {
		c.st.trials++;
		if (target_fault(fault))
			trial_target_fault(&c);
		else
			trial_cprof_fault(&c, &t);
	}
	if (!target_fault(fault))
		target_end(&t, 0);
	watchdog_stop();
	table_row(&c.st);

	cr_expect_eq(c.st.hangs, 0, "%u runs of cprof hung", c.st.hangs);
	cr_expect_eq(c.st.bad_exit, 0, "%u runs ended with an exit code they may not", c.st.bad_exit);
	cr_expect_eq(c.st.bad_output, 0, "%u runs left a bad output", c.st.bad_output);
	cr_expect_eq(c.st.stray, 0, "%u runs left stray files", c.st.stray);
	cr_expect_eq(c.st.survived, c.st.checks, "targets: %u of %u met the fate chosen for them",
		     c.st.survived, c.st.checks);
	cr_expect_eq(c.st.untraced, c.st.checks, "targets: %u of %u untraced", c.st.untraced,
		     c.st.checks);
	cr_expect_eq(c.st.unstopped, c.st.checks, "targets: %u of %u running", c.st.unstopped,
		     c.st.checks);
	cr_expect_eq(c.st.correct, c.st.checks, "targets: %u of %u correct and progressing",
		     c.st.correct, c.st.checks);
	cr_expect_eq(c.st.sig_lost + c.st.sig_extra, 0, "SIGRTMIN: %lu lost, %lu extra",
		     c.st.sig_lost, c.st.sig_extra);
	cr_expect_eq(c.st.failures, 0, "%u failures (the first %u logged)", c.st.failures,
		     c.st.logged);
	/* A fault that never lands tortures nothing. (Output put in place
	 * without a named temporary gives no moment to kill at: fine.) */
	if (fault != F_SIGKILL_COMMIT)
		cr_expect_gt(c.st.landed, 0, "no fault landed during a run in %u trials",
			     c.st.trials);
}

#define TORTURE(cmd, fault, name) \
	Test(torture, name) { torture(cmd, fault); }

TORTURE(CMD_CPU, F_SIGKILL, cpu_sigkill)
TORTURE(CMD_CPU, F_SIGTERM, cpu_sigterm)
TORTURE(CMD_CPU, F_SIGINT, cpu_sigint)
TORTURE(CMD_CPU, F_TARGET_KILLED, cpu_target_killed)
TORTURE(CMD_CPU, F_TARGET_EXITS, cpu_target_exits)
TORTURE(CMD_THREADS_TEXT, F_SIGKILL, threads2_sigkill)
TORTURE(CMD_THREADS_TEXT, F_SIGTERM, threads2_sigterm)
TORTURE(CMD_THREADS_TEXT, F_SIGINT, threads2_sigint)
TORTURE(CMD_THREADS_TEXT, F_TARGET_KILLED, threads2_target_killed)
TORTURE(CMD_THREADS_TEXT, F_TARGET_EXITS, threads2_target_exits)
TORTURE(CMD_THREADS_PPROF, F_SIGKILL, threads0_sigkill)
TORTURE(CMD_THREADS_PPROF, F_SIGTERM, threads0_sigterm)
TORTURE(CMD_THREADS_PPROF, F_SIGINT, threads0_sigint)
TORTURE(CMD_THREADS_PPROF, F_TARGET_KILLED, threads0_target_killed)
TORTURE(CMD_THREADS_PPROF, F_TARGET_EXITS, threads0_target_exits)
TORTURE(CMD_CPU, F_SIGKILL_COMMIT, cpu_sigkill_at_commit)
TORTURE(CMD_HEAP, F_SIGKILL, heap_sigkill)
TORTURE(CMD_HEAP, F_SIGTERM, heap_sigterm)
TORTURE(CMD_HEAP, F_SIGINT, heap_sigint)
TORTURE(CMD_HEAP, F_TARGET_KILLED, heap_target_killed)
TORTURE(CMD_HEAP, F_TARGET_EXITS, heap_target_exits)
TORTURE(CMD_MUTEX, F_SIGKILL, mutex_sigkill)
TORTURE(CMD_MUTEX, F_SIGTERM, mutex_sigterm)
TORTURE(CMD_MUTEX, F_SIGINT, mutex_sigint)
TORTURE(CMD_MUTEX, F_TARGET_KILLED, mutex_target_killed)
TORTURE(CMD_MUTEX, F_TARGET_EXITS, mutex_target_exits)
TORTURE(CMD_BLOCK, F_SIGKILL, block_sigkill)
TORTURE(CMD_BLOCK, F_SIGTERM, block_sigterm)
TORTURE(CMD_BLOCK, F_SIGINT, block_sigint)
TORTURE(CMD_BLOCK, F_TARGET_KILLED, block_target_killed)
TORTURE(CMD_BLOCK, F_TARGET_EXITS, block_target_exits)
TORTURE(CMD_THREADS_PPROF, F_SIGKILL_COMMIT, threads0_sigkill_at_commit)
TORTURE(CMD_THREADS_PPROF, F_HUP_INT, threads0_hup_int)
TORTURE(CMD_HEAP, F_HUP_INT, heap_hup_int)
TORTURE(CMD_MUTEX, F_HUP_INT, mutex_hup_int)
TORTURE(CMD_BLOCK, F_HUP_INT, block_hup_int)
