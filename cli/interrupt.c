#include "interrupt.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t requested;

static void on_signal(int sig)
{
	struct sigaction sa;

	requested = sig;
	/* The next one is not ours to soften: it kills as usual. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	sigaction(sig, &sa, NULL);
}

void interrupt_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	/* No SA_RESTART: poll() must return so the loop sees the flag. */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* A closed stdout (cprof ... -o - | head) must give EPIPE, not kill us. */
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
}

bool interrupt_requested(void)
{
	return requested != 0;
}

void interrupt_reset(void)
{
	requested = 0;
	interrupt_install();
}
