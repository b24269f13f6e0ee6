/*
 * Several cprofs on one target at the same moment: two engineers running
 * the runbook at once (issue 22). Each cprof either runs, or waits (threads
 * for another's stops), or is refused with a message that names the other
 * cprof; the target is never harmed.
 *
 * The target is tests/targets/checksum.c, which checks its own work (its
 * threads' registers and memory, sleeps, futexes, pipes, allocations) and
 * writes its count of failed checks when sent SIGUSR2. The agent is resident from
 * a first session, so every round races for its trampoline and session.
 * After each round: the target lives, and no two of its threads stand on
 * one stack pointer (a thread that came back with another's registers).
 *
 * CPROF_TOGETHER_ROUNDS sets the rounds (200 by hand; fewer on CI).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testhelp.h"

#define ROUNDS_DEFAULT 24
#define MAX_TOGETHER 3
#define MAX_TASKS 256
/* A round's cprofs each end within this (a 300 ms window, an injection
 * that waited for another's). */
#define ROUND_TIMEOUT_MS 60000

TestSuite(together, .init = th_init, .fini = th_cleanup, .timeout = 900);

/* The kinds started together in a round, in turn. */
static const char *const rounds_of[][MAX_TOGETHER] = {
	{ "heap", "heap", NULL },
	{ "heap", "block", NULL },
	{ "block", "mutex", NULL },
	{ "mutex", "threadcreate", NULL },
	{ "heap", "threads", "block" },
	{ "heap", "block", "mutex" },
	{ "threadcreate", "threads", "heap" },
	{ "mutex", "mutex", "threads" },
	{ "threads", "threads", NULL },
};

/* The target's count of failed checks and the first, from its report
 * (SIGUSR2: written beside, then renamed into place). */
static unsigned long target_errors(pid_t pid, const char *report, char *first, size_t size)
{
	unsigned long errors = 0;
	char line[512];
	bool end = false;
	FILE *f = th_report_open(pid, report);

	snprintf(first, size, "?");
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (!strncmp(line, "errors ", 7))
			errors = strtoul(line + 7, NULL, 10);
		else if (!strncmp(line, "first_error ", 12))
			snprintf(first, size, "%.200s", line + 12);
		end |= !strcmp(line, "end");
	}
	fclose(f);
	cr_assert(end, "the target's report is cut short");
	return errors;
}

static bool is_agent_kind(const char *kind)
{
	return strcmp(kind, "threads") != 0;
}

/* Stack pointers of the threads asleep in the kernel (the syscall file's
 * next to last field); fills @sp, returns how many. */
static int sleeping_sps(pid_t pid, unsigned long long *sp, int max)
{
	pid_t tids[MAX_TASKS];
	int n = th_task_list(pid, tids, MAX_TASKS), k = 0;

	for (int i = 0; i < n && k < max; i++) {
		char buf[512], *last, *prev;

		if (th_task_read(pid, tids[i], "syscall", buf, sizeof(buf)) < 0 ||
		    !strncmp(buf, "running", 7))
			continue;
		buf[strcspn(buf, "\n")] = '\0';
		last = strrchr(buf, ' ');
		if (!last)
			continue;
		*last = '\0';
		prev = strrchr(buf, ' ');
		if (prev)
			sp[k++] = strtoull(prev + 1, NULL, 16);
	}
	return k;
}

static void assert_no_shared_sp(pid_t pid, int round)
{
	unsigned long long sp[MAX_TASKS];
	int n = sleeping_sps(pid, sp, MAX_TASKS);

	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			cr_assert_neq(sp[i], sp[j], "round %d: two threads share stack pointer %#llx",
				      round, sp[i]);
}

struct one {
	const char *kind;
	pid_t pid;
	const char *log, *out; /* the slot's */
};

/* Each slot's files, made once: th_tmp_path() counts what it hands out. */
static char slot_log[MAX_TOGETHER][256], slot_out[MAX_TOGETHER][256];

static void start_one(struct one *o, const char *kind, pid_t target, int i)
{
	if (!slot_log[i][0]) {
		snprintf(slot_log[i], sizeof(slot_log[i]), "%s", th_tmp_path("one.log"));
		snprintf(slot_out[i], sizeof(slot_out[i]), "%s", th_tmp_path("one.pb.gz"));
	}
	o->kind = kind;
	o->log = slot_log[i];
	o->out = slot_out[i];
	/* threads is a snapshot: no window. */
	o->pid = th_spawn_daemon(is_agent_kind(kind)
					 ? (const char *const[]){ CPROF_BIN, kind, "-p", th_pid_str(target),
								  "-d", "300ms", "-q", "-o", o->out, NULL }
					 : (const char *const[]){ CPROF_BIN, kind, "-p", th_pid_str(target),
								  "-q", "-o", o->out, NULL },
				 o->log);
}

/* 0: it ran; 1: refused as it should be (another's session, named). */
static int judge_one(const struct one *o, int round)
{
	int status = th_wait_exit(o->pid, ROUND_TIMEOUT_MS);
	uint8_t *log = NULL;
	size_t len = 0;
	int code, refused = 0;

	if (status == -1)
		th_kill(o->pid);
	cr_assert_neq(status, -1, "round %d: cprof %s did not end in %d s", round, o->kind,
		      ROUND_TIMEOUT_MS / 1000);
	th_read_file(o->log, &log, &len);
	cr_assert(WIFEXITED(status), "round %d: cprof %s died (status %#x): %s", round, o->kind,
		  status, log ? (char *)log : "");
	code = WEXITSTATUS(status);
	if (code == 2 && log && strstr((char *)log, "is being profiled by cprof pid ") &&
	    is_agent_kind(o->kind))
		refused = 1;
	cr_assert(code == 0 || refused, "round %d: cprof %s exited %d: %s", round, o->kind, code,
		  log ? (char *)log : "");
	free(log);
	unlink(o->log);
	unlink(o->out);
	return refused;
}

Test(together, any_kinds_at_one_moment)
{
	const char *env = getenv("CPROF_TOGETHER_ROUNDS");
	int rounds = env ? atoi(env) : ROUNDS_DEFAULT, refused = 0, ran = 0, done = 0;
	const char *report = th_tmp_path("together.report");
	char seconds[16], first[256];
	unsigned long errors;
	uint64_t end_ns;
	struct th_run r;
	pid_t pid;

	/* About a second a round, counted from the end of the first session
	 * (beside eight CPU hogs it took 46 s once); the target outlives them
	 * all, which stop 10 s before its end if the machine is slower. */
	snprintf(seconds, sizeof(seconds), "%d", rounds * 3 / 2 + 80);
	pid = TH_SPAWN("checksum", seconds, "--report", report, "--alloc", "2");
	/* The agent resident before the races begin. */
	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(pid), "-d", "300ms", "-q", "-o",
		 th_tmp_path("first.pb.gz"));
	cr_assert_eq(r.exit_code, 0, "the first session failed: %s", r.err);
	cr_log_info("measured: the first session took %.1f s",
		    (double)(r.end_ns - r.start_ns) / 1e9);
	th_run_release(&r);
	end_ns = th_now_ns() + (uint64_t)(rounds * 3 / 2 + 10) * 1000000000ull;

	for (int round = 0; round < rounds && th_now_ns() < end_ns; round++, done++) {
		const char *const *kinds = rounds_of[round % (sizeof(rounds_of) / sizeof(rounds_of[0]))];
		struct one ones[MAX_TOGETHER];
		int n = 0, agents = 0, agents_refused = 0;

		for (; n < MAX_TOGETHER && kinds[n]; n++)
			start_one(&ones[n], kinds[n], pid, n);
		for (int i = 0; i < n; i++) {
			int k = judge_one(&ones[i], round);

			agents += is_agent_kind(ones[i].kind);
			agents_refused += k;
			refused += k;
			ran += !k;
		}
		cr_assert(agents == 0 || agents_refused < agents,
			  "round %d: every agent command was refused", round);
		cr_assert(th_alive(pid), "round %d: the target died", round);
		assert_no_shared_sp(pid, round);
	}
	cr_log_info("measured: %d rounds, %d cprof runs, %d refused with the other's pid", done,
		    ran, refused);
	cr_assert_geq(done, rounds / 2, "only %d rounds of %d in the target's time", done, rounds);
	/* Its own verdict on every check it made meanwhile. */
	errors = target_errors(pid, report, first, sizeof(first));
	cr_assert_eq(errors, 0, "the target counted %lu failed checks, the first: %s", errors,
		     first);
	th_kill(pid);
}
