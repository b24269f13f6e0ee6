/*
 * lib/profiler/kinds: the table of kinds, and a set of them opened on one
 * target as far as it allows, each refusal with its reason. Opening
 * touches nothing: a stopped target stays stopped, a live one is never
 * stopped.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "agent/wire.h"
#include "profiler/kinds.h"
#include "target/target.h"
#include "testhelp.h"

TestSuite(kinds, .init = th_init, .fini = th_cleanup, .timeout = 60);

static const enum kind agents[] = { KIND_HEAP, KIND_BLOCK, KIND_MUTEX, KIND_THREADCREATE };

static struct kinds_opts all_of(pid_t pid, const char *agent_path)
{
	struct kinds_opts o = { .pid = pid, .comm = "demo", .hz = 100,
				.agent = { .agent_path = agent_path } };

	for (int k = 0; k < KIND_N; k++)
		o.asked[k] = true;
	return o;
}

static bool is_agents(enum kind k)
{
	for (size_t i = 0; i < sizeof(agents) / sizeof(*agents); i++)
		if (agents[i] == k)
			return true;
	return false;
}

Test(kinds, each_name_is_one_kind_and_the_agents_have_their_bit)
{
	uint32_t seen = 0;

	for (int k = 0; k < KIND_N; k++) {
		const char *name = kind_name((enum kind)k);

		cr_assert_not_null(name, "kind %d has no name", k);
		cr_assert_eq(kind_by_name(name), (enum kind)k, "%s is not kind %d", name, k);
		if (!is_agents((enum kind)k)) {
			cr_assert_eq(kind_events((enum kind)k), 0, "%s has the agent's events", name);
			continue;
		}
		cr_assert_eq(__builtin_popcount(kind_events((enum kind)k)), 1, "%s", name);
		cr_assert_eq(seen & kind_events((enum kind)k), 0, "%s shares a bit", name);
		seen |= kind_events((enum kind)k);
	}
	cr_assert_eq(seen, CPROF_EVENTS_HEAP | CPROF_EVENTS_BLOCK | CPROF_EVENTS_MUTEX |
				   CPROF_EVENTS_THREADCREATE);
	cr_assert_eq(kind_by_name("goroutine"), KIND_N);
	cr_assert_eq(kind_by_name(""), KIND_N);
	cr_assert_null(kind_name(KIND_N));
}

/* Stopped, it cannot load the agent: its four kinds are refused with that
 * reason, the others opened, and the process is left stopped. */
Test(kinds, a_stopped_target_refuses_the_agents_kinds_only)
{
	struct kinds_opts o;
	struct kinds_opened k;
	pid_t pid = TH_SPAWN("demo", "30", "1", "1000");
	char state = 0;

	cr_assert(th_signal(pid, SIGSTOP));
	for (int i = 0; i < 500 && (target_thread_state(pid, pid, &state) < 0 || state != 'T'); i++)
		usleep(10000);
	cr_assert_eq(state, 'T', "the target did not stop");
	o = all_of(pid, CPROF_AGENT_PATH);
	kinds_open(&o, &k);
	for (int i = 0; i < KIND_N; i++) {
		if (is_agents((enum kind)i)) {
			cr_expect_null(k.p[i], "%s opened on a stopped target", kind_name(i));
			cr_expect_eq(k.error[i], -EAGAIN, "%s: %d", kind_name(i), k.error[i]);
			cr_expect(strstr(k.refused[i], "is stopped (SIGSTOP or a debugger)"),
				  "%s refused: '%s'", kind_name(i), k.refused[i]);
		} else {
			cr_expect_not_null(k.p[i], "%s refused: %s", kind_name(i), k.refused[i]);
			cr_expect_eq(k.error[i], 0);
			cr_expect_str_empty(k.refused[i]);
		}
	}
	kinds_close(&k);
	for (int i = 0; i < KIND_N; i++)
		cr_assert_null(k.p[i]);
	cr_assert_eq(target_thread_state(pid, pid, &state), 0);
	cr_expect_eq(state, 'T', "opening let the stopped target go on");
	th_signal(pid, SIGCONT);
	th_kill(pid);
}

/* No agent found: its kinds carry the caller's reason; only those asked
 * are opened or refused. */
Test(kinds, without_the_agent_its_kinds_say_why)
{
	struct kinds_opts o;
	struct kinds_opened k;
	pid_t pid = TH_SPAWN("demo", "30", "1", "1000");

	o = all_of(pid, NULL);
	o.agent_why = "no agent here";
	o.asked[KIND_WALL] = o.asked[KIND_BLOCK] = false;
	kinds_open(&o, &k);
	for (int i = 0; i < KIND_N; i++) {
		if (!o.asked[i]) {
			cr_expect(!k.p[i] && !k.error[i] && !k.refused[i][0], "%s not asked",
				  kind_name(i));
		} else if (is_agents((enum kind)i)) {
			cr_expect_null(k.p[i]);
			cr_expect_str_eq(k.refused[i], "no agent here", "%s", kind_name(i));
			cr_expect_lt(k.error[i], 0);
		} else {
			cr_expect_not_null(k.p[i], "%s refused: %s", kind_name(i), k.refused[i]);
		}
	}
	kinds_close(&k);
	cr_expect(target_alive(pid));
	th_kill(pid);
}

/* A process that is gone: every kind refused, each with a reason. */
Test(kinds, a_gone_target_refuses_every_kind)
{
	pid_t pid = TH_SPAWN("demo", "30", "1", "1000");
	struct kinds_opts o = all_of(pid, CPROF_AGENT_PATH);
	struct kinds_opened k;

	th_kill(pid);
	kinds_open(&o, &k);
	for (int i = 0; i < KIND_N; i++) {
		if (i == KIND_THREADS)
			continue; /* opened: its snapshot says at start */
		cr_expect_null(k.p[i], "%s opened on a gone pid", kind_name(i));
		cr_expect_lt(k.error[i], 0, "%s", kind_name(i));
		cr_expect(k.refused[i][0], "%s refused without a reason", kind_name(i));
	}
	kinds_close(&k);
}
