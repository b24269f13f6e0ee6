/*
 * lib/session/window.c's notes: what makes an agent window's figures short
 * is said in the profile (records lost, a malformed ring, a session the
 * agent ended early), and nothing is said of a whole window.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "session/session.h"
#include "testhelp.h"

static struct profile *empty(void)
{
	static const struct profile_value_type t[] = { { "count", "count" } };
	struct profile *p;

	cr_assert_eq(profile_new(&p, t, 1), 0);
	return p;
}

Test(window_notes, a_whole_window_says_nothing)
{
	struct window_result w = { .detached = true };
	struct profile *p = empty();

	cr_assert_eq(agent_note_window(&w, p), 0);
	cr_expect_eq(p->ncomments, 0);
	profile_free(p);
}

Test(window_notes, each_shortfall_is_said)
{
	struct window_result w = {
		.malformed = true,
		.counters = { .lost = 3, .detach_reason = CPROF_DETACH_HEARTBEAT },
	};
	struct profile *p = empty();

	cr_assert_eq(agent_note_window(&w, p), 0);
	cr_expect(th_has_comment(p, "lost 3 records"));
	cr_expect(th_has_comment(p, "malformed"));
	cr_expect(th_has_comment(p, "only part of the window"));
	profile_free(p);
	w = (struct window_result){ .counters = { .detach_reason = CPROF_DETACH_PEER_EXIT } };
	p = empty();
	cr_assert_eq(agent_note_window(&w, p), 0);
	cr_expect_eq(p->ncomments, 1);
	cr_expect(th_has_comment(p, "only part of the window"));
	profile_free(p);
}
