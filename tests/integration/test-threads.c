/*
 * `cprof threads` end to end, against tests/targets/threads.c, whose every
 * thread is known: its name ("cond-3"), the function it waits in
 * (wait_on_cond, sleep_in_nanosleep, read_from_pipe, spin_forever) and the
 * system call it is blocked in (futex, clock_nanosleep, read; none for the
 * spinners). At 8, 64 and 256 threads each view is checked against that:
 *
 *  - debug=2: one block per thread, each with the right name, state, and
 *    the right function as its innermost frame from the target binary;
 *  - debug=1: the counts add up, and the stacks through each function count
 *    N/4 threads;
 *  - debug=0: `go tool pprof -top` reads it, and the decoded profile counts
 *    N+1 threads (the main thread too), N/4 through each function.
 *
 * After every run the target must be let go: no thread traced (TracerPid)
 * or in trace stop ('t'), and the process still answers a signal (SIGUSR2
 * makes it write its signal counts to a file). Then the hard cases: signals
 * that arrive during snapshots are delivered exactly once, a process stopped
 * with SIGSTOP stays stopped, a process already traced is refused with the
 * tracer named, a process that creates and ends threads all the time never
 * hangs cprof or is left stopped, and the usual error exits.
 *
 * The spinning threads run at nice 19 (--spin-nice): 64 of them on a 2-core
 * machine would otherwise starve cprof and everything else. Pauses are
 * logged, never asserted: the machines are shared (scripts/bench-threads
 * measures them).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "maps/maps.h"
#include "ptrace/ptrace.h"
#include "testhelp.h"

#define RUN_TIMEOUT_MS 30000
#define TARGET_SECONDS "60"

/* Processes this suite forks itself (tracers): killed by
 * pid and reaped in fini, before th_cleanup() kills the targets. */
#define MAX_OWN 8
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

/* Kills (SIGKILL) and reaps @pid, one of ours. */
static void own_kill(pid_t pid)
{
	for (int i = 0; i < MAX_OWN; i++)
		if (own[i] == pid && pid > 0) {
			kill(pid, SIGKILL);
			while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
				;
			own[i] = 0;
		}
}

static void fini(void)
{
	for (int i = 0; i < MAX_OWN; i++)
		if (own[i])
			own_kill(own[i]);
	th_cleanup();
}

TestSuite(threads, .init = th_init, .fini = fini, .timeout = 180);

/* ---- the target and what it must look like ----------------------------- */

static const struct kind {
	const char *prefix; /* thread names are "prefix-K" */
	const char *func;   /* the function it waits or spins in */
	const char *state;  /* what cprof must say it is doing */
} kinds[] = {
	{ "cond", "wait_on_cond", "sleeping in futex_wait" },
	{ "sleep", "sleep_in_nanosleep", "sleeping in clock_nanosleep" },
	{ "pipe", "read_from_pipe", "sleeping in read" },
	{ "spin", "spin_forever", "running" },
};
#define NKINDS 4

struct target {
	pid_t pid;
	int n;              /* worker threads; the main thread comes on top */
	bool dstate;        /* and a thread "vfork" in uninterruptible sleep */
	const char *report; /* where it writes its signal counts on SIGUSR2 */
};

static void target_settle(const struct target *t);

static void target_start_ex(struct target *t, int n, bool dstate)
{
	char nbuf[16];

	snprintf(nbuf, sizeof(nbuf), "%d", n);
	t->n = n;
	t->dstate = dstate;
	t->report = th_tmp_path("report");
	if (dstate)
		t->pid = TH_SPAWN("threads", nbuf, TARGET_SECONDS, "--report", t->report,
				  "--spin-nice", "19", "--dstate");
	else
		t->pid = TH_SPAWN("threads", nbuf, TARGET_SECONDS, "--report", t->report,
				  "--spin-nice", "19");
	target_settle(t);
}

static void target_start(struct target *t, int n)
{
	target_start_ex(t, n, false);
}

/* All its threads: the workers, main, and the vfork thread if any. */
static int target_threads(const struct target *t)
{
	return t->n + 1 + t->dstate;
}

/* ---- /proc, read from outside ------------------------------------------ */

/* The system call a thread of the target blocks in, or -1 (it spins, or
 * waits for its vfork child, in state D). */
static long blocking_syscall(const char *name, bool is_main)
{
	if (is_main)
		return SYS_clock_nanosleep;
	if (!strncmp(name, "cond-", 5))
		return SYS_futex;
	if (!strncmp(name, "sleep-", 6))
		return SYS_clock_nanosleep;
	if (!strncmp(name, "pipe-", 5))
		return SYS_read;
	return -1;
}

/*
 * True if thread @tid of @pid sleeps in system call @nr. A sleep that was
 * interrupted by a stop (ptrace or SIGSTOP) and resumed shows up as
 * restart_syscall: the kernel goes on with the remaining time.
 */
static bool asleep_in(pid_t pid, pid_t tid, long nr)
{
	char sc[256];
	long now;

	if (th_task_state(pid, tid) != 'S' || th_task_read(pid, tid, "syscall", sc, sizeof(sc)) < 0 ||
	    sc[0] == 'r')
		return false;
	now = strtol(sc, NULL, 10);
	return now == nr || (nr == SYS_clock_nanosleep && now == SYS_restart_syscall);
}

/*
 * Waits (up to 10 s) until every thread of @t that blocks is asleep in its
 * system call: the target says "ready" just before its main thread goes to
 * sleep, and a signal wakes them all for a moment. On a loaded machine that
 * moment lasts, and cprof would rightly report "running" where the test
 * expects the thread's resting state.
 */
static void target_settle(const struct target *t)
{
	uint64_t deadline = th_now_ns() + 10000000000ULL;

	for (;;) {
		pid_t tids[1100];
		int n = th_task_list(t->pid, tids, 1100), settled = 0;

		for (int i = 0; i < n; i++) {
			char comm[64];
			long want;

			if (th_task_read(t->pid, tids[i], "comm", comm, sizeof(comm)) < 0)
				continue;
			want = blocking_syscall(comm, tids[i] == t->pid);
			if (want < 0 || asleep_in(t->pid, tids[i], want))
				settled++;
		}
		if (n == target_threads(t) && settled == n)
			return;
		cr_assert(th_now_ns() < deadline, "the target's threads did not settle: %d of %d",
			  settled, n);
		th_sleep_ms(1);
	}
}

/*
 * Asks the target for its signal counts (SIGUSR2): proves that it still
 * runs and handles signals. Returns 0 and the counts, or -1 if it did not
 * answer within @ms.
 */
static int target_counts(const struct target *t, unsigned long *ret_rt, unsigned long *ret_usr1,
			 int ms)
{
	unlink(t->report);
	if (kill(t->pid, SIGUSR2) < 0)
		return -1;
	for (int waited = 0; waited < ms; waited += 2) {
		unsigned long rt, usr1;
		FILE *f = fopen(t->report, "re");

		if (f) {
			int k = fscanf(f, "rt %lu usr1 %lu", &rt, &usr1);

			fclose(f);
			if (k == 2) {
				*ret_rt = rt;
				*ret_usr1 = usr1;
				return 0;
			}
		}
		th_sleep_ms(2);
	}
	return -1;
}

static void assert_responds(const struct target *t, const char *after)
{
	unsigned long rt, usr1;

	cr_assert(th_alive(t->pid), "%s: the target died", after);
	cr_assert(target_counts(t, &rt, &usr1, 5000) == 0,
		  "%s: the target does not answer SIGUSR2 any more", after);
}

static void assert_run(const struct th_run *r, int code, const char *what)
{
	if (r->exit_code != code)
		th_run_log(r, what);
	cr_assert(!r->timed_out, "%s: cprof did not finish within %d ms", what, RUN_TIMEOUT_MS);
	cr_assert_eq(r->exit_code, code, "%s: exit %d, expected %d; stderr:\n%s", what, r->exit_code,
		     code, r->err);
}

/* ---- parsing the text views -------------------------------------------- */

/* Splits @text (modified) into lines; returns how many. */
static size_t split_lines(char *text, char ***ret)
{
	size_t n = 0, alloc = 64;
	char **lines = malloc(alloc * sizeof(*lines));
	char *p = text;

	cr_assert(lines);
	while (*p) {
		char *nl = strchr(p, '\n');

		if (n == alloc) {
			alloc *= 2;
			lines = realloc(lines, alloc * sizeof(*lines));
			cr_assert(lines);
		}
		lines[n++] = p;
		if (!nl)
			break;
		*nl = '\0';
		p = nl + 1;
	}
	*ret = lines;
	return n;
}

struct frame {
	const char *func;
	const char *file; /* "file:line" */
};

struct tblock {
	int tid;
	char name[64];
	char state[256];
	struct frame *frames;
	size_t nframes;
};

struct debug2 {
	char *text; /* owns the strings */
	char **lines;
	double pause_ms;
	size_t nthreads;
	int pid;
	char comm[64];
	struct tblock *t;
	size_t n;
	pid_t *unstopped; /* the pause line's tids read without a stop, sorted */
	size_t nunstopped;
};

/* The pause line's "N read asleep without a stop: 12-14 17" into @d. */
static void parse_unstopped(const char *line, struct debug2 *d)
{
	const char *p = strstr(line, " read asleep without a stop:");
	size_t said = 0, alloc = 0;

	if (!p)
		return;
	while (p > line && p[-1] != ' ')
		p--;
	said = strtoul(p, NULL, 10);
	p = strchr(p, ':') + 1;
	while (*p == ' ') {
		char *end;
		long lo = strtol(p + 1, &end, 10), hi = lo;

		if (*end == '-')
			hi = strtol(end + 1, &end, 10);
		cr_assert(end > p + 1 && hi >= lo, "bad tid list in the pause line: '%s'", line);
		for (long tid = lo; tid <= hi; tid++) {
			if (d->nunstopped == alloc) {
				alloc = alloc ? alloc * 2 : 64;
				d->unstopped = realloc(d->unstopped, alloc * sizeof(*d->unstopped));
				cr_assert(d->unstopped);
			}
			cr_assert(!d->nunstopped || tid > d->unstopped[d->nunstopped - 1],
				  "the tids read without a stop are not sorted: '%s'", line);
			d->unstopped[d->nunstopped++] = (pid_t)tid;
		}
		p = end;
	}
	cr_assert_eq(d->nunstopped, said, "the pause line says %zu read without a stop, lists %zu",
		     said, d->nunstopped);
}

static bool read_unstopped(const struct debug2 *d, pid_t tid)
{
	for (size_t i = 0; i < d->nunstopped; i++)
		if (d->unstopped[i] == tid)
			return true;
	return false;
}

/* Parses Go's debug=2 layout: a pause line, a blank line, then blocks. */
static void parse_debug2(const char *out, struct debug2 *d)
{
	size_t nlines, i = 0, alloc = 0;

	memset(d, 0, sizeof(*d));
	d->text = strdup(out);
	cr_assert(d->text);
	nlines = split_lines(d->text, &d->lines);
	cr_assert(nlines >= 2, "debug=2 output too short:\n%s", out);
	cr_assert_eq(sscanf(d->lines[0], "# paused %lf ms for %zu %*[a-z] of pid %d (%63[^)])",
			    &d->pause_ms, &d->nthreads, &d->pid, d->comm),
		     4, "bad pause line: '%s'", d->lines[0]);
	parse_unstopped(d->lines[0], d);
	cr_assert_str_empty(d->lines[1], "no blank line after the pause line");
	for (i = 2; i < nlines;) {
		struct tblock *b;
		size_t falloc = 0;

		if (d->lines[i][0] == '\0') {
			i++;
			continue;
		}
		if (d->n == alloc) {
			alloc = alloc ? alloc * 2 : 64;
			d->t = realloc(d->t, alloc * sizeof(*d->t));
			cr_assert(d->t);
		}
		b = &d->t[d->n++];
		memset(b, 0, sizeof(*b));
		cr_assert_eq(sscanf(d->lines[i], "thread %d \"%63[^\"]\" [%255[^]]]:", &b->tid,
				    b->name, b->state),
			     3, "bad thread header: '%s'", d->lines[i]);
		cr_assert(d->lines[i][strlen(d->lines[i]) - 1] == ':', "bad thread header: '%s'",
			  d->lines[i]);
		for (i++; i < nlines && d->lines[i][0] != '\0'; i += 2) {
			const char *fn = d->lines[i];
			size_t len = strlen(fn);

			cr_assert(len > 5 && strcmp(fn + len - 5, "(...)") == 0,
				  "thread %d: bad frame line '%s'", b->tid, fn);
			cr_assert(i + 1 < nlines && d->lines[i + 1][0] == '\t',
				  "thread %d: frame '%s' has no file line", b->tid, fn);
			d->lines[i][len - 5] = '\0';
			if (b->nframes == falloc) {
				falloc = falloc ? falloc * 2 : 16;
				b->frames = realloc(b->frames, falloc * sizeof(*b->frames));
				cr_assert(b->frames);
			}
			b->frames[b->nframes++] = (struct frame){ d->lines[i], d->lines[i + 1] + 1 };
		}
	}
}

static void debug2_release(struct debug2 *d)
{
	free(d->unstopped);
	for (size_t i = 0; i < d->n; i++)
		free(d->t[i].frames);
	free(d->t);
	free(d->lines);
	free(d->text);
}

/* A frame of the target program itself (its source, or its binary without
 * debug information), as opposed to libc's. */
static bool target_frame(const struct frame *f)
{
	static const char src[] = "tests/targets/threads.c:";
	char exe[4200];

	snprintf(exe, sizeof(exe), "%s/threads:", TARGETS_DIR);
	return strstr(f->file, src) || strncmp(f->file, exe, strlen(exe)) == 0;
}

static const struct frame *first_target_frame(const struct tblock *b, size_t *ret_index)
{
	for (size_t i = 0; i < b->nframes; i++)
		if (target_frame(&b->frames[i])) {
			if (ret_index)
				*ret_index = i;
			return &b->frames[i];
		}
	return NULL;
}

static int kind_of_name(const char *name, int *ret_number)
{
	for (int k = 0; k < NKINDS; k++) {
		size_t len = strlen(kinds[k].prefix);
		char *end;

		if (strncmp(name, kinds[k].prefix, len) || name[len] != '-')
			continue;
		*ret_number = (int)strtol(name + len + 1, &end, 10);
		if (*end || end == name + len + 1)
			return -1;
		return k;
	}
	return -1;
}

/*
 * The threads asleep for good in their calls (main and three kinds in
 * four) are read without a stop, all but those a wake-up caught: at least
 * half of them; none when the process is stopped (SIGSTOP), and never one
 * that spins (checked per thread).
 */
static void expect_read_asleep(const struct target *t, const struct debug2 *d, bool stopped)
{
	size_t asleep = 1 + (size_t)(t->n / NKINDS) * (NKINDS - 1);

	cr_log_info("%zu of %zu threads asleep in their calls read without a stop",
		    d->nunstopped, asleep);
	if (stopped)
		cr_assert_eq(d->nunstopped, 0, "threads of a stopped process read without a stop");
	else
		cr_assert_geq(d->nunstopped * 2, asleep, "only %zu of %zu threads asleep in "
			      "their calls were read without a stop", d->nunstopped, asleep);
}

/*
 * Checks a debug=2 output of target @t against the truth: one block per
 * thread, sorted by tid, every thread named right and found where it must
 * be. With @stopped the process was stopped by SIGSTOP: every state must say
 * "stopped".
 */
static void check_debug2(const struct target *t, const char *out, bool stopped)
{
	int seen[NKINDS][1024] = { { 0 } };
	int per_kind[NKINDS] = { 0 };
	struct debug2 d;
	bool main_seen = false, vfork_seen = false;

	cr_assert(t->n / NKINDS <= 1024);
	parse_debug2(out, &d);
	cr_log_info("debug=2 at %d threads: paused %.3f ms", t->n, d.pause_ms);
	cr_assert_eq(d.pid, t->pid);
	cr_assert_str_eq(d.comm, "threads");
	cr_assert_eq(d.nthreads, (size_t)t->n + 1, "the pause line counts %zu threads, not %d",
		     d.nthreads, t->n + 1);
	cr_assert_eq(d.n, (size_t)target_threads(t), "%zu thread blocks, expected %d", d.n,
		     target_threads(t));
	cr_assert(d.pause_ms > 0.0, "paused %.3f ms", d.pause_ms);
	for (size_t i = 0; i < d.n; i++) {
		const struct tblock *b = &d.t[i];
		const struct frame *f;
		size_t fi = 0;
		int k, number;

		if (i > 0)
			cr_assert(b->tid > d.t[i - 1].tid, "blocks are not sorted by tid: %d after %d",
				  b->tid, d.t[i - 1].tid);
		if (t->dstate && !strcmp(b->name, "vfork")) {
			/* Uninterruptible: no stop reaches it, and cprof must say so. */
			cr_assert(strstr(b->state, "did not stop in time"),
				  "the thread in state D is [%s]", b->state);
			cr_assert_eq(b->nframes, 0);
			vfork_seen = true;
			continue;
		}
		cr_assert(b->nframes > 0, "thread %d \"%s\" [%s] has no stack", b->tid, b->name,
			  b->state);
		for (size_t j = 0; j < b->nframes; j++)
			cr_assert(b->frames[j].func[0], "thread %d: frame %zu has no name", b->tid, j);
		if (stopped)
			cr_assert(strncmp(b->state, "stopped", 7) == 0,
				  "thread %d \"%s\" of a stopped process is [%s]", b->tid, b->name,
				  b->state);
		f = first_target_frame(b, &fi);
		cr_assert(f, "thread %d \"%s\": no frame from the target program", b->tid, b->name);
		if (b->tid == t->pid) {
			main_seen = true;
			cr_assert_str_eq(b->name, "threads");
			cr_assert_str_eq(f->func, "main", "main thread: first own frame is %s",
					 f->func);
			if (!stopped)
				cr_assert_str_eq(b->state, "sleeping in clock_nanosleep",
						 "main thread is [%s]", b->state);
			continue;
		}
		k = kind_of_name(b->name, &number);
		cr_assert(k >= 0, "thread %d has an unexpected name \"%s\"", b->tid, b->name);
		cr_assert(number >= 0 && number < t->n / NKINDS, "thread \"%s\": no such number",
			  b->name);
		cr_assert(!seen[k][number], "thread \"%s\" appears twice", b->name);
		seen[k][number] = 1;
		per_kind[k]++;
		cr_assert_str_eq(f->func, kinds[k].func,
				 "thread %d \"%s\": innermost own frame is %s, expected %s", b->tid,
				 b->name, f->func, kinds[k].func);
		/* The unwinding went on through the kind's function to its caller. */
		cr_assert(fi + 1 < b->nframes && strcmp(b->frames[fi + 1].func, "worker_main") == 0,
			  "thread %d \"%s\": %s is not called from worker_main", b->tid, b->name,
			  f->func);
		if (!strcmp(kinds[k].prefix, "spin")) {
			cr_assert_eq(fi, 0, "spinning thread \"%s\": innermost frame is %s", b->name,
				     b->frames[0].func);
			cr_assert(!read_unstopped(&d, b->tid),
				  "spinning thread \"%s\" was read without a stop", b->name);
		}
		if (!stopped)
			cr_assert_str_eq(b->state, kinds[k].state, "thread %d \"%s\" is [%s], expected [%s]",
					 b->tid, b->name, b->state, kinds[k].state);
	}
	cr_assert(main_seen, "no block for the main thread %d", (int)t->pid);
	expect_read_asleep(t, &d, stopped);
	cr_assert_eq(vfork_seen, t->dstate, "the thread in state D is %s",
		     vfork_seen ? "shown, but the target has none" : "missing");
	for (int k = 0; k < NKINDS; k++)
		cr_assert_eq(per_kind[k], t->n / NKINDS, "%d \"%s\" threads, expected %d", per_kind[k],
			     kinds[k].prefix, t->n / NKINDS);
	debug2_release(&d);
}

struct stack1 {
	long count;
	size_t npcs;
	char **funcs; /* every function of its '#' lines */
	size_t nfuncs;
};

static bool stack_has(const struct stack1 *s, const char *func)
{
	for (size_t i = 0; i < s->nfuncs; i++)
		if (strcmp(s->funcs[i], func) == 0)
			return true;
	return false;
}

/*
 * Checks a debug=1 output of @t: the total, the counts adding up (most
 * frequent first), every PC symbolized, and N/4 threads through each kind's
 * function, one through main.
 */
static void check_debug1(const struct target *t, const char *out)
{
	char *text = strdup(out), **lines;
	size_t nlines, total = 0, nstacks = 0;
	struct stack1 stacks[1100];
	long sum = 0, per_kind[NKINDS] = { 0 }, main_count = 0;
	double pause_ms;
	int pid;

	cr_assert(text);
	nlines = split_lines(text, &lines);
	cr_assert(nlines >= 3, "debug=1 output too short:\n%s", out);
	cr_assert_eq(sscanf(lines[0], "threads profile: total %zu", &total), 1, "bad first line '%s'",
		     lines[0]);
	cr_assert_eq(sscanf(lines[1], "# paused %lf ms for %*u %*[a-z] of pid %d", &pause_ms, &pid), 2,
		     "bad pause line '%s'", lines[1]);
	cr_log_info("debug=1 at %d threads: paused %.3f ms", t->n, pause_ms);
	cr_assert_eq(pid, t->pid);
	cr_assert_eq(total, (size_t)t->n + 1, "total %zu, expected %d", total, t->n + 1);
	for (size_t i = 2; i < nlines;) {
		struct stack1 *s;
		char *p, *save = NULL, *tok;
		uint64_t pcs[512];
		size_t hit[512] = { 0 }, falloc = 0;

		if (lines[i][0] == '\0') {
			i++;
			continue;
		}
		cr_assert(nstacks < 1100);
		s = &stacks[nstacks++];
		memset(s, 0, sizeof(*s));
		p = lines[i];
		s->count = strtol(p, &p, 10);
		cr_assert(s->count > 0 && strncmp(p, " @ 0x", 5) == 0, "bad stack line '%s'", lines[i]);
		for (tok = strtok_r(p + 3, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
			cr_assert(s->npcs < 512);
			pcs[s->npcs++] = strtoull(tok, NULL, 16);
		}
		for (i++; i < nlines && lines[i][0] == '#'; i++) {
			char *f[4] = { 0 }, *q = lines[i];
			uint64_t pc;
			size_t nf = 0;

			while (nf < 4 && (f[nf++] = strsep(&q, "\t")))
				;
			cr_assert(f[3] && !strcmp(f[0], "#"), "bad frame line in stack %zu", nstacks);
			pc = strtoull(f[1], NULL, 16);
			for (size_t j = 0; j < s->npcs; j++)
				if (pcs[j] == pc)
					hit[j]++;
			/* "function+0xOFF": the name is all before the last '+'. */
			if (strrchr(f[2], '+'))
				*strrchr(f[2], '+') = '\0';
			if (s->nfuncs == falloc) {
				falloc = falloc ? falloc * 2 : 16;
				s->funcs = realloc(s->funcs, falloc * sizeof(*s->funcs));
				cr_assert(s->funcs);
			}
			s->funcs[s->nfuncs++] = f[2];
		}
		for (size_t j = 0; j < s->npcs; j++)
			cr_assert(hit[j] > 0, "stack %zu: pc %#llx has no '#' line", nstacks,
				  (unsigned long long)pcs[j]);
		if (nstacks > 1)
			cr_assert(s->count <= stacks[nstacks - 2].count,
				  "stacks are not sorted by count: %ld after %ld", s->count,
				  stacks[nstacks - 2].count);
		sum += s->count;
		for (int k = 0; k < NKINDS; k++)
			if (stack_has(s, kinds[k].func)) {
				per_kind[k] += s->count;
				cr_assert(stack_has(s, "worker_main"), "a stack through %s lacks worker_main",
					  kinds[k].func);
			}
		if (stack_has(s, "main"))
			main_count += s->count;
	}
	cr_assert_eq(sum, (long)total, "the counts add up to %ld, total says %zu", sum, total);
	for (int k = 0; k < NKINDS; k++)
		cr_assert_eq(per_kind[k], t->n / NKINDS, "%ld threads through %s, expected %d",
			     per_kind[k], kinds[k].func, t->n / NKINDS);
	cr_assert_eq(main_count, 1, "%ld threads through main, expected 1", main_count);
	for (size_t i = 0; i < nstacks; i++)
		free(stacks[i].funcs);
	free(lines);
	free(text);
}

/* ---- the three views at 8, 64 and 256 threads -------------------------- */

static void debug2_at(int n)
{
	struct target t;
	struct th_run r;
	char pid[16];

	target_start(&t, n);
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", pid, "--debug", "2");
	assert_run(&r, 0, "cprof threads --debug 2");
	th_assert_let_go(t.pid, false, "after --debug 2");
	check_debug2(&t, r.out, false);
	assert_responds(&t, "after --debug 2");
	th_run_release(&r);
	th_kill(t.pid);
}

static void debug1_at(int n)
{
	struct target t;
	struct th_run r;
	char pid[16];

	target_start(&t, n);
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	/* --debug 1 and no -o: the text on stdout. */
	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", pid, "--debug", "1");
	assert_run(&r, 0, "cprof threads --debug 1");
	th_assert_let_go(t.pid, false, "after --debug 1");
	check_debug1(&t, r.out);
	assert_responds(&t, "after --debug 1");
	th_run_release(&r);
	th_kill(t.pid);
}

static void debug0_at(int n)
{
	const char *path = th_tmp_path("threads.pb.gz");
	struct th_func_sum *sums;
	struct profile *p;
	struct target t;
	struct th_run r;
	uint8_t *buf;
	size_t nsums, len;
	char pid[16];
	int vi;

	target_start(&t, n);
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	/* -o and no --debug: debug=0, a gzipped pprof. */
	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", pid, "-o", path);
	assert_run(&r, 0, "cprof threads -o");
	th_assert_let_go(t.pid, false, "after --debug 0");
	assert_responds(&t, "after --debug 0");
	th_run_release(&r);
	th_kill(t.pid);

	cr_assert(th_read_file(path, &buf, &len) == 0, "no profile at %s", path);
	cr_assert(th_is_gzip(buf, len), "%s is not gzipped", path);
	free(buf);
	th_assert_pprof_ok(path);
	p = th_load_profile(path);
	vi = th_sample_type(p, "threads", "count");
	cr_assert(vi >= 0, "no sample type threads/count");
	cr_assert_eq(profile_total(p, (size_t)vi), n + 1, "the profile counts %lld threads, not %d",
		     (long long)profile_total(p, (size_t)vi), n + 1);
	th_func_sums(p, (size_t)vi, &sums, &nsums);
	for (int k = 0; k < NKINDS; k++)
		cr_assert_eq(th_func_get(sums, nsums, kinds[k].func).cum, n / NKINDS,
			     "%lld threads through %s, expected %d",
			     (long long)th_func_get(sums, nsums, kinds[k].func).cum, kinds[k].func,
			     n / NKINDS);
	cr_assert_eq(th_func_get(sums, nsums, "main").cum, 1);
	/* Each sample's state label agrees with the function it is in. */
	for (size_t s = 0; s < p->nsamples; s++) {
		const struct profile_sample *sm = &p->samples[s];
		const struct profile_label *l = th_label(sm, "state");

		cr_assert(l && l->str, "sample %zu has no state label", s);
		for (int k = 0; k < NKINDS; k++)
			for (size_t j = 0; j < sm->nlocations; j++)
				if (th_location_has(p, sm->location_ids[j], kinds[k].func))
					cr_assert_str_eq(l->str, kinds[k].state,
							 "a sample in %s has state \"%s\"",
							 kinds[k].func, l->str);
	}
	free(sums);
	profile_free(p);
}

Test(threads, debug2_8) { debug2_at(8); }
Test(threads, debug2_64) { debug2_at(64); }
Test(threads, debug2_256) { debug2_at(256); }
Test(threads, debug1_8) { debug1_at(8); }
Test(threads, debug1_64) { debug1_at(64); }
Test(threads, debug1_256) { debug1_at(256); }
Test(threads, debug0_8) { debug0_at(8); }
Test(threads, debug0_64) { debug0_at(64); }
Test(threads, debug0_256) { debug0_at(256); }

/* -o FILE with --debug 2 writes the text to FILE, nothing to stdout. */
Test(threads, debug2_to_file)
{
	const char *path = th_tmp_path("threads.txt");
	struct target t;
	struct th_run r;
	char pid[16], *text;

	target_start(&t, 8);
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", pid, "--debug", "2", "-o", path);
	assert_run(&r, 0, "cprof threads --debug 2 -o");
	th_assert_let_go(t.pid, false, "after --debug 2 -o");
	cr_assert_eq(r.out_len, 0, "stdout is not empty: %s", r.out);
	text = th_read_text(path, NULL);
	cr_assert_not_null(text, "nothing written to %s", path);
	check_debug2(&t, text, false);
	free(text);
	th_run_release(&r);
	th_kill(t.pid);
}

/*
 * Go writes "main.f(...)"; a C++ name has its own parameter list, and keeps
 * it without "(...)" after it (tests/targets/cxxnames.c: C functions with
 * C++ linkage names, named by demangling as a C++ program's are).
 */
Test(threads, debug2_cxx_names_keep_their_parameter_list)
{
	pid_t pid = TH_SPAWN("cxxnames", "20");
	struct th_run r;

	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", th_pid_str(pid), "--debug", "2");
	assert_run(&r, 0, "cprof threads --debug 2 on cxxnames");
	cr_expect(strstr(r.out, "\nserver::Loop<int>::wait() const\n\t"), "%s", r.out);
	cr_expect(strstr(r.out, "\nserver::main(int, char**)\n\t"), "%s", r.out);
	cr_expect(strstr(r.out, "\nmain(...)\n\t"), "%s", r.out);
	cr_expect(!strstr(r.out, ")(...)"), "a doubled parameter list:\n%s", r.out);
	th_run_release(&r);
	th_kill(pid);
}

/*
 * A snapshot interrupts every sleep; the kernel resumes an interrupted
 * nanosleep as restart_syscall (it keeps the remaining time). The next
 * snapshot must still say what the threads are doing.
 */
Test(threads, second_snapshot)
{
	struct target t;
	char pid[16];

	target_start(&t, 8);
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	for (int i = 0; i < 2; i++) {
		struct th_run r;

		target_settle(&t);
		TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", pid, "--debug", "2");
		assert_run(&r, 0, i ? "the second snapshot" : "the first snapshot");
		th_assert_let_go(t.pid, false, "after a snapshot");
		cr_log_info("snapshot %d of the same target", i + 1);
		check_debug2(&t, r.out, false);
		th_run_release(&r);
	}
	assert_responds(&t, "after two snapshots");
	th_kill(t.pid);
}

/*
 * The agent's task (lib/agent/watchdog.c) is cprof's, a member of the
 * target's thread group that glibc never sees: a single-threaded target
 * with a session of the agent running shows its one thread, in the text
 * (issue 34: PostgreSQL's postmaster read "2 threads", half its wall in
 * peer_gone) and in the pprof, which both say what was left out.
 */
Test(threads, agent_task_left_out)
{
	const char *path = th_tmp_path("threads.pb.gz");
	pid_t pid = TH_SPAWN("ring", "60", th_tmp_path("ring.report"), "1", "64", "4096", "2000");
	pid_t agent = th_agent_session_keep(pid);
	struct profile *p;
	struct debug2 d;
	struct th_run r;
	char said[96];
	bool noted = false;

	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", th_pid_str(pid), "--debug", "2");
	assert_run(&r, 0, "threads --debug 2");
	parse_debug2(r.out, &d);
	cr_expect_eq(d.nthreads, 1, "the pause line counts %zu threads: '%s'", d.nthreads,
		     d.lines[0]);
	cr_expect_eq(d.n, 1, "%zu thread blocks for a single-threaded target:\n%s", d.n, r.out);
	for (size_t i = 0; i < d.n; i++)
		cr_expect_eq(d.t[i].tid, pid, "a block for thread %d \"%s\" (the agent's is %d)",
			     d.t[i].tid, d.t[i].name, agent);
	cr_expect_null(strstr(r.out, "peer_gone"), "the agent's frames are shown:\n%s", r.out);
	snprintf(said, sizeof(said), "; the cprof agent's task (tid %d) left out", agent);
	cr_expect(strstr(d.lines[0], said), "the pause line does not say '%s': '%s'", said,
		  d.lines[0]);
	debug2_release(&d);
	th_run_release(&r);

	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", th_pid_str(pid), "-o", path);
	assert_run(&r, 0, "threads -o");
	th_run_release(&r);
	p = th_load_profile(path);
	cr_expect_eq(th_sample_sum(p, "threads", "count"), 1.0, "%.0f threads in the pprof",
		     th_sample_sum(p, "threads", "count"));
	snprintf(said, sizeof(said), "the cprof agent's task (tid %d) is cprof's", agent);
	for (size_t i = 0; i < p->ncomments; i++)
		noted |= strstr(p->comments[i], said) != NULL;
	cr_expect(noted, "no comment says '%s'", said);
	profile_free(p);

	th_agent_session_stop(pid);
	th_assert_let_go(pid, false, "after the snapshots");
	th_kill(pid);
}

/*
 * A thread in uninterruptible sleep (waiting for its vfork child) cannot
 * be stopped: cprof must show the others, mark that one, and leave it be.
 */
Test(threads, uninterruptible_thread)
{
	struct target t;
	struct th_run r;
	double pause_ms = -1;
	char pid[16];
	const char *p;

	target_start_ex(&t, 8, true);
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", pid, "--debug", "2");
	assert_run(&r, 0, "cprof threads with a thread in state D");
	th_assert_let_go(t.pid, false, "after a snapshot with a thread in state D");
	check_debug2(&t, r.out, false);
	p = strstr(r.out, "# paused ");
	if (p)
		sscanf(p, "# paused %lf", &pause_ms);
	/* Logged, not asserted: the others wait for it until cprof gives up. */
	cr_log_info("with a thread in state D the others were paused %.1f ms", pause_ms);
	th_run_release(&r);
	assert_responds(&t, "after a snapshot with a thread in state D");
	th_kill(t.pid);
}

/* ---- signals during snapshots ------------------------------------------ */

/* Queued signals of the target's user (SigQ in /proc/PID/status), or -1. */
static long signals_queued(pid_t pid)
{
	char path[64], line[256];
	long q = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "SigQ:", 5) == 0)
			q = strtol(line + 5, NULL, 10);
	fclose(f);
	return q;
}

struct sender {
	pid_t pid;
	atomic_bool stop;
	unsigned long sent;
	int error; /* errno of a failed sigqueue, other than EAGAIN */
};

/*
 * Sends SIGRTMIN to the target as fast as it can, keeping at most 256 of
 * them queued: a full queue makes the target's threads handle signals all
 * the time (which is when a snapshot catches one in a signal-delivery
 * stop), and the bound keeps the user's queue (shared with every other
 * process of root) from filling.
 */
static void *sender_main(void *arg)
{
	struct sender *s = arg;
	union sigval v = { 0 };

	while (!atomic_load(&s->stop)) {
		if (s->sent % 64 == 0)
			while (signals_queued(s->pid) > 256 && !atomic_load(&s->stop))
				th_sleep_ms(1);
		if (sigqueue(s->pid, SIGRTMIN, v) == 0)
			s->sent++;
		else if (errno != EAGAIN) {
			s->error = errno;
			break;
		}
	}
	return NULL;
}

struct loop_result {
	unsigned snapshots, failures, caught; /* caught: signal-delivery stops */
};

struct loop_args {
	pid_t pid;
	int ms;
	unsigned enough;
	struct loop_result res;
};

/*
 * In a thread of ours: snapshots of the target with lib/ptrace, the code
 * under `cprof threads`, back to back for @ms or until @enough
 * signal-delivery stops were caught. (Not in a forked child: a fork of this
 * multi-threaded process can inherit a sanitizer's allocator lock held by
 * another thread, and hang. The helpers' reaper leaves a tracer's ptrace
 * stops alone, so the target's parent may trace it.)
 */
static void *snapshot_loop(void *arg)
{
	struct loop_args *a = arg;
	struct ptrace_snapshot_opts o = { .max_stack = 64 * 1024, .stop_timeout_ms = 1000 };
	uint64_t end = th_now_ns() + (uint64_t)a->ms * 1000000ULL;
	struct maps maps = { 0 };

	if (maps_read(a->pid, &maps) == 0)
		o.maps = &maps;
	while (th_now_ns() < end && a->res.caught < a->enough) {
		struct ptrace_snapshot s;

		a->res.snapshots++;
		if (ptrace_snapshot_take(&s, a->pid, &o) < 0) {
			a->res.failures++;
			continue;
		}
		for (size_t i = 0; i < s.nthreads; i++)
			if (s.threads[i].pending_signal)
				a->res.caught++;
		ptrace_snapshot_release(&s);
		th_sleep_ms(2);
	}
	maps_release(&maps);
	return NULL;
}

/*
 * A signal that arrives while the threads are seized can be taken by one of
 * them as a signal-delivery stop: it is then cprof's to hand back at
 * detach, or it is lost. Real-time signals queue (none is merged), so the
 * count the target handled must equal the count sent, exactly.
 */
Test(threads, signals_delivered_once)
{
	struct sender s = { 0 };
	struct loop_args la = { 0 };
	struct loop_result res;
	unsigned long rt = 0, usr1;
	struct target t;
	pthread_t th, loop;
	char pid[16];

	target_start(&t, 8);
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	s.pid = t.pid;
	cr_assert(pthread_create(&th, NULL, sender_main, &s) == 0);

	/* Library snapshots back to back: many of them, quickly. */
	la.pid = t.pid;
	la.ms = 4000;
	la.enough = 5;
	cr_assert(pthread_create(&loop, NULL, snapshot_loop, &la) == 0);
	pthread_join(loop, NULL);
	res = la.res;
	/* And the command itself, while the signals keep coming. */
	for (int i = 0; i < 5; i++) {
		struct th_run r;

		TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", pid, "--debug", "1", "-q");
		assert_run(&r, 0, "cprof threads during signals");
		th_run_release(&r);
	}
	atomic_store(&s.stop, true);
	pthread_join(th, NULL);
	cr_assert_eq(s.error, 0, "sigqueue: %s", strerror(s.error));
	th_assert_let_go(t.pid, false, "after the snapshots");

	/* Every signal sent is handled by now or soon; a lost one never is. */
	for (int i = 0; i < 250; i++) {
		cr_assert(target_counts(&t, &rt, &usr1, 5000) == 0, "the target does not answer");
		if (rt >= s.sent)
			break;
		th_sleep_ms(20);
	}
	cr_log_info("signals: %lu sent, %lu handled; %u library snapshots (%u failed), %u "
		    "signal-delivery stops caught",
		    s.sent, rt, res.snapshots, res.failures, res.caught);
	cr_assert_eq(res.failures, 0, "%u of %u snapshots failed", res.failures, res.snapshots);
	cr_assert_eq(rt, s.sent, "%lu real-time signals sent, %lu handled", s.sent, rt);
	th_kill(t.pid);
	if (res.caught == 0)
		cr_skip_test("no snapshot caught a signal-delivery stop in %u tries: the counts "
			     "matched, but the hand-back at detach was not exercised",
			     res.snapshots);
}

/* ---- a stopped process stays stopped ----------------------------------- */

static bool all_in_state(pid_t pid, char want, bool all)
{
	pid_t tids[1024];
	int n = th_task_list(pid, tids, 1024), k = 0;

	for (int i = 0; i < n; i++)
		k += th_task_state(pid, tids[i]) == want;
	return all ? n > 0 && k == n : k > 0;
}

Test(threads, sigstop_stays_stopped)
{
	struct target t;
	struct th_run r;
	char pid[16];
	int i;

	target_start(&t, 8);
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	cr_assert(kill(t.pid, SIGSTOP) == 0);
	for (i = 0; i < 5000 && !all_in_state(t.pid, 'T', true); i++)
		th_sleep_ms(1);
	cr_assert(all_in_state(t.pid, 'T', true), "SIGSTOP did not stop every thread");

	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", pid, "--debug", "2");
	if (r.exit_code != 0)
		kill(t.pid, SIGCONT);
	assert_run(&r, 0, "cprof threads on a stopped process");
	check_debug2(&t, r.out, true);
	th_run_release(&r);
	/*
	 * Stopped, and still so a while later: nothing resumed it. The kernel
	 * wakes a group-stopped thread at its detach so that it stops again
	 * (__ptrace_unlink sets JOBCTL_STOP_PENDING): it is 'R' in the kernel,
	 * with no user code run, until a cpu takes it, which on a loaded
	 * machine can be after cprof has exited. A process really resumed
	 * (continued, or its stop forgotten) does not go back to 'T'.
	 */
	for (i = 0; i < 1000 && !all_in_state(t.pid, 'T', true); i++)
		th_sleep_ms(1);
	th_assert_let_go(t.pid, true, "after a snapshot of a stopped process");
	th_sleep_ms(200);
	th_assert_let_go(t.pid, true, "200 ms after a snapshot of a stopped process");

	cr_assert(kill(t.pid, SIGCONT) == 0);
	for (i = 0; i < 5000 && all_in_state(t.pid, 'T', false); i++)
		th_sleep_ms(1);
	th_assert_let_go(t.pid, false, "after SIGCONT");
	assert_responds(&t, "after SIGCONT");
	th_kill(t.pid);
}

/* ---- already traced ---------------------------------------------------- */

/* th_start_tracer(), killed with the test's own processes. */
static pid_t start_tracer(pid_t tid)
{
	pid_t child = th_start_tracer(tid);

	own_add(child);
	return child;
}

Test(threads, already_traced)
{
	struct target t;
	struct th_run r;
	char pid[16], tracer_pid[16];
	pid_t tracer;

	target_start(&t, 8);
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	tracer = start_tracer(t.pid);
	snprintf(tracer_pid, sizeof(tracer_pid), "%d", (int)tracer);
	cr_assert_eq(th_task_tracer(t.pid, t.pid), tracer);

	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", pid, "--debug", "2");
	assert_run(&r, 2, "cprof threads on a traced process");
	cr_assert(strstr(r.err, tracer_pid), "the message does not name the tracer %s:\n%s",
		  tracer_pid, r.err);
	cr_assert_eq(r.out_len, 0, "output on a refused run: %s", r.out);
	th_run_release(&r);
	/* The other tracer still holds it: cprof took nothing from it. */
	cr_assert_eq(th_task_tracer(t.pid, t.pid), tracer);

	/* Once the tracer is gone, the snapshot works. */
	own_kill(tracer);
	cr_assert_eq(th_task_tracer(t.pid, t.pid), 0);
	target_settle(&t);
	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", pid, "--debug", "2");
	assert_run(&r, 0, "cprof threads after the tracer left");
	check_debug2(&t, r.out, false);
	th_assert_let_go(t.pid, false, "after the tracer left");
	assert_responds(&t, "after the tracer left");
	th_run_release(&r);
	th_kill(t.pid);
}

Test(threads, already_traced_by_strace)
{
	const char *strace = "/usr/bin/strace";
	const char *argv[] = { strace, "-p", NULL, "-o", "/dev/null", NULL };
	struct target t;
	struct th_run r;
	char pid[16], tracer_pid[16];
	pid_t tracer;
	long held = 0;

	if (access(strace, X_OK) != 0)
		TH_SKIP_MISSING("strace is not installed");
	target_start(&t, 8);
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	argv[2] = pid;
	tracer = fork();
	cr_assert(tracer >= 0);
	if (tracer == 0) {
		int devnull = open("/dev/null", O_RDWR);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(devnull, STDIN_FILENO);
		dup2(devnull, STDOUT_FILENO);
		dup2(devnull, STDERR_FILENO);
		execv(strace, (char *const *)argv);
		_exit(127);
	}
	own_add(tracer);
	for (int i = 0; i < 5000 && held != tracer; i++) {
		held = th_task_tracer(t.pid, t.pid);
		th_sleep_ms(1);
	}
	cr_assert_eq(held, tracer, "strace did not attach");
	snprintf(tracer_pid, sizeof(tracer_pid), "%d", (int)tracer);

	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", pid);
	assert_run(&r, 2, "cprof threads on a process under strace");
	cr_assert(strstr(r.err, tracer_pid) && strstr(r.err, "strace"),
		  "the message does not name strace (%s):\n%s", tracer_pid, r.err);
	th_run_release(&r);
	own_kill(tracer);
	th_assert_let_go(t.pid, false, "after strace was killed");
	assert_responds(&t, "after strace was killed");
	th_kill(t.pid);
}

/*
 * One thread held by another tracer (as `strace -p TID` does): the others
 * are still shown, that one is marked, and it stays with its tracer.
 */
Test(threads, one_thread_traced)
{
	struct debug2 d;
	struct target t;
	struct th_run r;
	pid_t tids[64], victim = 0, tracer;
	char pid[16];
	int n;

	target_start(&t, 8);
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	n = th_task_list(t.pid, tids, 64);
	for (int i = 0; i < n; i++)
		if (tids[i] != t.pid && (!victim || tids[i] > victim))
			victim = tids[i];
	cr_assert(victim);
	tracer = start_tracer(victim);

	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", pid, "--debug", "2");
	assert_run(&r, 0, "cprof threads with one thread traced");
	parse_debug2(r.out, &d);
	cr_assert_eq(d.n, 9);
	for (size_t i = 0; i < d.n; i++) {
		if (d.t[i].tid == victim) {
			char want[64];

			snprintf(want, sizeof(want), "already traced by pid %d", (int)tracer);
			cr_assert(strstr(d.t[i].state, want), "the traced thread is [%s], want [%s]",
				  d.t[i].state, want);
			cr_assert_eq(d.t[i].nframes, 0);
		} else {
			cr_assert(d.t[i].nframes > 0, "thread %d has no stack", d.t[i].tid);
		}
	}
	debug2_release(&d);
	th_run_release(&r);
	cr_assert_eq(th_task_tracer(t.pid, victim), tracer, "the other tracer lost its thread");
	for (int i = 0; i < n; i++)
		if (tids[i] != victim) {
			cr_assert_eq(th_task_tracer(t.pid, tids[i]), 0);
			cr_assert_neq(th_task_state(t.pid, tids[i]), 't');
		}
	own_kill(tracer);
	th_assert_let_go(t.pid, false, "after the tracer of one thread left");
	assert_responds(&t, "with one thread traced");
	th_kill(t.pid);
}

/* ---- ten thousand threads --------------------------------------------- */

#define MANY_THREADS 10000

/* A number from /proc/sys/kernel/@name, or @fallback. */
static long sysctl_long(const char *name, long fallback)
{
	char path[128];
	long v = fallback;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/sys/kernel/%s", name);
	f = fopen(path, "re");
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = fallback;
		fclose(f);
	}
	return v;
}

/* Why this machine cannot start @n more threads, or NULL if it can. */
static const char *cannot_start_threads(long n, char *why, size_t size)
{
	long tasks = th_dir_entries("/proc"); /* processes: a floor on tasks */
	long threads_max = sysctl_long("threads-max", 0), pid_max = sysctl_long("pid_max", 0);

	if (threads_max && threads_max - tasks < n * 2)
		return snprintf(why, size, "kernel.threads-max is %ld", threads_max), why;
	if (pid_max && pid_max - tasks < n * 2)
		return snprintf(why, size, "kernel.pid_max is %ld", pid_max), why;
	return NULL;
}

/*
 * Checks the debug=2 output of the mostly sleeping target (threads N
 * --spinners 1): N - 1 threads in the three blocking kinds in turn, one
 * spinner, the main thread. Each is listed once, under its name, with its
 * kind's function as its innermost own frame and its kind's state.
 */
static void check_sleepers(pid_t pid, int n, const char *out)
{
	static char seen[NKINDS][MANY_THREADS];
	int per_kind[NKINDS] = { 0 }, sleepers = n - 1;
	struct debug2 d;

	memset(seen, 0, sizeof(seen));
	parse_debug2(out, &d);
	cr_assert_eq(d.pid, pid);
	cr_assert_eq(d.nthreads, (size_t)n + 1, "the pause line counts %zu threads, not %d",
		     d.nthreads, n + 1);
	cr_assert_eq(d.n, (size_t)n + 1, "%zu thread blocks, expected %d", d.n, n + 1);
	for (size_t i = 0; i < d.n; i++) {
		const struct tblock *b = &d.t[i];
		const struct frame *f = first_target_frame(b, NULL);
		int k, number;

		if (i > 0)
			cr_assert(b->tid > d.t[i - 1].tid, "blocks are not sorted by tid");
		cr_assert(f, "thread %d \"%s\" [%s]: no frame from the target program", b->tid,
			  b->name, b->state);
		if (b->tid == pid) {
			cr_assert_str_eq(f->func, "main");
			continue;
		}
		k = kind_of_name(b->name, &number);
		cr_assert(k >= 0 && number >= 0 && number < MANY_THREADS,
			  "thread %d has an unexpected name \"%s\"", b->tid, b->name);
		cr_assert(!seen[k][number], "thread \"%s\" appears twice", b->name);
		seen[k][number] = 1;
		per_kind[k]++;
		cr_assert_str_eq(f->func, kinds[k].func, "thread %d \"%s\": innermost own frame is %s",
				 b->tid, b->name, f->func);
		cr_assert_str_eq(b->state, kinds[k].state, "thread %d \"%s\" is [%s], expected [%s]",
				 b->tid, b->name, b->state, kinds[k].state);
		if (k == NKINDS - 1)
			cr_assert(!read_unstopped(&d, b->tid),
				  "spinning thread \"%s\" was read without a stop", b->name);
	}
	/* Asleep for good: all but those a wake-up caught read without a stop. */
	cr_log_info("%d threads: %zu read without a stop", n, d.nunstopped);
	cr_assert_geq(d.nunstopped * 2, (size_t)n, "only %zu of %d threads asleep in their calls "
		      "were read without a stop", d.nunstopped, n);
	for (int k = 0; k < NKINDS - 1; k++)
		cr_assert_eq(per_kind[k], (sleepers - k + 2) / 3, "%d \"%s\" threads of %d",
			     per_kind[k], kinds[k].prefix, n);
	cr_assert_eq(per_kind[NKINDS - 1], 1, "%d spinning threads", per_kind[NKINDS - 1]);
	cr_log_info("%d threads: paused %.3f ms, %.1f us per thread", n, d.pause_ms,
		    d.pause_ms * 1000.0 / (double)(n + 1));
	debug2_release(&d);
}

/*
 * A server's worth of threads, nearly all asleep: every one of 10,000 is
 * read (the sleeping ones without a stop), listed under its name and in
 * its state, and let go. Skipped
 * where the kernel's limits do not leave room for them.
 */
Test(threads, ten_thousand_threads, .timeout = 120)
{
	char nbuf[16], pid[16], why[128];
	const char *report = th_tmp_path("report");
	struct th_run r;
	pid_t target;

	if (cannot_start_threads(MANY_THREADS, why, sizeof(why)))
		cr_skip_test("%d threads do not fit here: %s", MANY_THREADS, why);
	snprintf(nbuf, sizeof(nbuf), "%d", MANY_THREADS);
	target = TH_SPAWN("threads", nbuf, TARGET_SECONDS, "--spinners", "1", "--spin-nice", "19",
			  "--report", report);
	snprintf(pid, sizeof(pid), "%d", (int)target);
	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", pid, "--debug", "2");
	assert_run(&r, 0, "cprof threads at 10,000 threads");
	th_assert_let_go(target, false, "after a snapshot of 10,000 threads");
	check_sleepers(target, MANY_THREADS, r.out);
	th_run_release(&r);
	th_kill(target);
}

/* ---- threads born and ending during snapshots -------------------------- */

Test(threads, churn)
{
	char pid[16], path[64];
	unsigned ok = 0, gone = 0;
	uint64_t t0 = th_now_ns();
	pid_t target;

	/* 2000 threads/s, each burning 200 us and ending: about 0.4 core. */
	target = TH_SPAWN("churn", "30", "500", "200");
	snprintf(pid, sizeof(pid), "%d", (int)target);
	snprintf(path, sizeof(path), "/proc/%d", (int)target);
	/* Up to 20 s of its 30: on a loaded machine (CI's ASan run) fifty
	 * snapshots outlived the target. */
	for (int i = 0; i < 50 && th_now_ns() - t0 < 20000000000ULL; i++) {
		struct th_run r;
		size_t total;

		TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", pid, "--debug", "1");
		cr_assert(!r.timed_out, "snapshot %d of a churning process hung", i);
		cr_assert(r.exit_code == 0 || (r.exit_code == 2 && !th_alive(target)),
			  "snapshot %d: exit %d; stderr:\n%s", i, r.exit_code, r.err);
		if (r.exit_code == 2) {
			gone++;
			th_run_release(&r);
			break;
		}
		ok++;
		cr_assert_eq(sscanf(r.out, "threads profile: total %zu", &total), 1,
			     "snapshot %d: bad output:\n%s", i, r.out);
		/* The main thread and at most 64 workers not yet joined
		 * (tests/targets/churn.c), and room for as many again joined
		 * a moment before and not yet gone from /proc. */
		cr_assert(total >= 1 && total <= 129, "snapshot %d: %zu threads", i, total);
		th_run_release(&r);
		th_assert_let_go(target, false, "after a snapshot of a churning process");
	}
	cr_log_info("churn: %u snapshots, target gone after %u", ok, gone);
	cr_assert(th_alive(target), "the churning target died");
	th_kill(target);
}

/* ---- what cannot be profiled ------------------------------------------- */

static void expect_exit(int code, const char *what, const char *const *args)
{
	struct th_run r;

	th_run_cprof_ex(&r, RUN_TIMEOUT_MS, 0, 0, args);
	assert_run(&r, code, what);
	cr_assert(r.err_len > 0, "%s: no message on stderr", what);
	th_run_release(&r);
}
#define EXPECT_EXIT(code, what, ...) \
	expect_exit((code), (what), (const char *const[]){ __VA_ARGS__, NULL })

/* No such pid, pid 2, a zombie and the rest of the bad-input table, for
 * every command: test-badinput.c. */
Test(threads, usage)
{
	EXPECT_EXIT(64, "--debug 3", "threads", "-p", "1", "--debug", "3");
	EXPECT_EXIT(64, "no -p", "threads", "--debug", "1");
	EXPECT_EXIT(64, "-p without a number", "threads", "-p", "x");
}

Test(threads, output_not_writable)
{
	const char *file = th_tmp_path("a-file");
	const char *dir = th_tmp_dir("a-dir");
	char inside[4200], pid[16];
	struct target t;
	FILE *f = fopen(file, "we");

	cr_assert(f);
	fclose(f);
	snprintf(inside, sizeof(inside), "%s/threads.pb.gz", file);
	target_start(&t, 8);
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	/* A path under a regular file (ENOTDIR: root ignores permissions). */
	EXPECT_EXIT(4, "-o under a file", "threads", "-p", pid, "-o", inside);
	EXPECT_EXIT(4, "-o under a file, text", "threads", "-p", pid, "--debug", "1", "-o", inside);
	EXPECT_EXIT(4, "-o a directory", "threads", "-p", pid, "-o", dir);
	/* Checked before anything was stopped, and nothing was written. */
	th_assert_let_go(t.pid, false, "after refused outputs");
	cr_assert_eq(th_dir_entries(dir), 0);
	th_kill(t.pid);
}
