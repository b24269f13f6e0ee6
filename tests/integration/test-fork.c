/*
 * Forking targets (issue 22): a server that forks while cprof's agent
 * hooks it (redis' BGSAVE, a prefork pool). Its children must finish,
 * whatever lock of the agent's another thread held at the fork, and a
 * child profiled later must get in.
 *
 * The target is tests/targets/forker.c: threads contending for 32 mutexes,
 * a main thread forking, handlers of its own (pthread_atfork) that lock and
 * unlock every mutex around each fork, through the hooks. It counts the
 * children that did not end within 2 s and exits 3 if there was any.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testhelp.h"

TestSuite(fork, .init = th_init, .fini = th_cleanup, .timeout = 180);

static void session(const char *kind, pid_t pid, const char *duration, const char *rate)
{
	struct th_run r;

	if (rate)
		TH_CPROF(&r, 60000, kind, "-p", th_pid_str(pid), "-d", duration, th_rate_option(kind), rate,
			 "-q", "-o", th_tmp_path("fork.pb.gz"));
	else
		TH_CPROF(&r, 60000, kind, "-p", th_pid_str(pid), "-d", duration, "-q", "-o",
			 th_tmp_path("fork.pb.gz"));
	cr_assert_eq(r.exit_code, 0, "cprof %s: exit %d: %s", kind, r.exit_code, r.err);
	th_run_release(&r);
}

/* Ends it (SIGTERM: it stops forking), then its last line: "forks N hung
 * H failed F". */
static void assert_children_ended(pid_t pid, int wait_ms)
{
	unsigned long forks = 0, hung = 0, failed = 0;
	char *out = NULL, *line;
	int status;

	th_signal(pid, SIGTERM);
	th_read_until(pid, "never", wait_ms, &out);
	status = th_wait_exit(pid, 5000);
	line = out ? strstr(out, "forks ") : NULL;
	cr_assert_not_null(line, "no count from the target: %s", out ? out : "");
	cr_assert_eq(sscanf(line, "forks %lu hung %lu failed %lu", &forks, &hung, &failed), 3);
	cr_log_info("measured: %lu forks during the sessions, %lu children hung, %lu failed", forks,
		    hung, failed);
	cr_assert_gt(forks, 100, "only %lu forks", forks);
	cr_assert_eq(hung, 0, "%lu of %lu children hung", hung, forks);
	cr_assert_eq(failed, 0, "%lu of %lu children failed", failed, forks);
	cr_assert(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the target's status %#x", status);
	free(out);
}

Test(fork, children_finish_during_sessions)
{
	/* It forks until told to stop, 120 s at most: the sessions take
	 * longer on a loaded machine. */
	pid_t pid = TH_SPAWN("forker", "120");

	/* Every lock event sampled: the stripes are busy at every fork. */
	session("mutex", pid, "3s", "1");
	session("block", pid, "3s", NULL);
	session("heap", pid, "1s", NULL);
	session("threadcreate", pid, "1s", NULL);
	assert_children_ended(pid, 20000);
}

Test(fork, child_profiled_later_gets_in)
{
	pid_t pid = TH_SPAWN("forker", "120", "--keep"), child;
	char *out = NULL, *line;
	struct th_run r;

	/* The kept child is forked 1 s in, during this session. */
	session("mutex", pid, "2s", "1");
	cr_assert_eq(th_read_until(pid, "never", 500, &out), -ETIMEDOUT);
	line = out ? strstr(out, "child ") : NULL;
	cr_assert_not_null(line, "the target named no child: %s", out ? out : "");
	child = atoi(line + 6);
	free(out);
	cr_assert_gt(child, 0);
	TH_CPROF(&r, 30000, "mutex", "-p", th_pid_str(child), "-d", "1s", "--mutex-fraction", "1", "-q",
		 "-o", th_tmp_path("child.pb.gz"));
	cr_assert_eq(r.exit_code, 0, "cprof mutex on the child: exit %d: %s", r.exit_code, r.err);
	th_run_release(&r);
	cr_assert_eq(kill(child, 0), 0, "the child is gone");
	assert_children_ended(pid, 15000);
}
