#include "interrupt.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "report.h"
#include "util/util.h"

static const int handled[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };

static volatile sig_atomic_t requested;
/* A second signal that came while the target was guarded. */
static volatile sig_atomic_t hurried;
static volatile sig_atomic_t guarded;

/* Ends the process as @sig's default action would; SIGQUIT's core dump
 * aside, which would keep a tired operator waiting for nothing. */
static void die_by(int sig)
{
	struct sigaction sa;
	sigset_t set;

	if (sig == SIGQUIT)
		_exit(128 + sig);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	sigaction(sig, &sa, NULL);
	/* In the handler, @sig is held until it returns. */
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	_exit(128 + sig);
}

static void on_signal(int sig)
{
	if (!requested)
		requested = sig;
	else if (guarded)
		hurried = sig;
	else
		die_by(sig);
}

void interrupt_install(void)
{
	struct sigaction sa, old;

	guarded = 1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	/* No SA_RESTART: poll() must return so the loop sees the flag. Every
	 * handled signal is held while one runs. */
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < ARRAY_SIZE(handled); i++)
		sigaddset(&sa.sa_mask, handled[i]);
	for (size_t i = 0; i < ARRAY_SIZE(handled); i++) {
		if (handled[i] == SIGHUP && sigaction(SIGHUP, NULL, &old) == 0 &&
		    old.sa_handler == SIG_IGN)
			continue;
		sigaction(handled[i], &sa, NULL);
	}
	/* A closed stdout (cprof ... -o - | head) must give EPIPE, not kill us. */
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
}

bool interrupt_requested(void)
{
	return requested != 0;
}

static bool interrupt_asked(void *arg)
{
	(void)arg;
	return interrupt_requested();
}

const struct cancel interrupt_cancel = { .asked = interrupt_asked };

void interrupt_reset(void)
{
	requested = 0;
	hurried = 0;
	interrupt_install();
}

void interrupt_guard(void)
{
	guarded = 1;
}

void interrupt_target_released(pid_t pid)
{
	int sig;

	guarded = 0;
	sig = hurried;
	if (!sig)
		return;
	report_note("SIG%s again: pid %d is as cprof found it; stopping without writing",
		    sigabbrev_np(sig), (int)pid);
	die_by(sig);
}
