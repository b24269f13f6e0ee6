/* The agent's own task in a target, which no profile shows (agent-task.h). */
#include "session/agent-task.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "agent/wire.h"
#include "inject/inject.h"
#include "target/target.h"
#include "util/util.h"

void agent_tasks_init(struct agent_tasks *a, pid_t pid)
{
	memset(a, 0, sizeof(*a));
	a->pid = pid;
}

void agent_tasks_release(struct agent_tasks *a)
{
	free(a->tasks);
	a->tasks = NULL;
	a->n = a->alloc = 0;
}

int agent_tasks_search(struct agent_tasks *a, const struct maps *maps, unsigned wait_ms)
{
	struct maps own = { 0 };
	uint64_t word;
	int r;

	if (!maps) {
		r = maps_read(a->pid, &own);
		if (r == -ENOMEM)
			return r;
		if (r < 0)
			return 0; /* gone, or its maps refused: nothing to know */
		maps = &own;
	}
	/* The agent's own code, whichever copy (cprof-agent-*.so in a container). */
	r = inject_find_function(a->pid, maps, "cprof-agent", CPROF_WIRE_TASK_SYMBOL, &word);
	maps_release(&own);
	if (r < 0)
		return 0; /* no agent, or one older than the word */
	a->word = word;
	return agent_tasks_refresh(a, wait_ms);
}

bool agent_tasks_has(const struct agent_tasks *a, pid_t tid)
{
	for (size_t i = 0; i < a->n; i++)
		if (a->tasks[i].tid == tid)
			return true;
	return false;
}

/* The word as the target holds it now; false when it cannot be read. */
static bool read_word(const struct agent_tasks *a, int32_t *ret)
{
	struct iovec local = { .iov_base = ret, .iov_len = sizeof(*ret) };
	struct iovec remote = { .iov_base = (void *)(uintptr_t)a->word, .iov_len = sizeof(*ret) };

	return process_vm_readv(a->pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof(*ret);
}

/* Bytes of the target's memory are not to be believed: the tid must be a
 * thread of the target that bears the task's name. */
static bool verified(const struct agent_tasks *a, pid_t tid)
{
	char name[64];

	return tid > 0 && target_thread_name(a->pid, tid, name, sizeof(name)) == 0 &&
	       strcmp(name, CPROF_WIRE_TASK_COMM) == 0;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)ms * 1000000L };

	nanosleep(&ts, NULL);
}

static int add_task(struct agent_tasks *a, pid_t tid)
{
	struct agent_task *t;
	uint64_t run = 0;

	if (GROW(a->tasks, a->n + 1, a->alloc) < 0)
		return -ENOMEM;
	t = &a->tasks[a->n++];
	target_thread_run_ns(a->pid, tid, &run);
	t->tid = tid;
	t->run_ns = run;
	/* Known at the first look: it ran before, and only what follows counts. */
	t->run_from_ns = a->looked ? 0 : run;
	return 0;
}

int agent_tasks_refresh(struct agent_tasks *a, unsigned wait_ms)
{
	int32_t tid = 0;
	unsigned waited = 0;
	int r = 0;

	if (a->word) {
		/* -1: being started; it publishes its tid as its first act. */
		while (read_word(a, &tid) && tid == -1 && waited < wait_ms) {
			sleep_ms(1);
			waited++;
		}
		if (tid == -1 && !a->starting)
			a->starting_since_ns = now_monotonic_ns();
		a->starting = tid == -1;
		if (tid > 0 && !agent_tasks_has(a, tid) && verified(a, tid))
			r = add_task(a, tid);
	}
	/* The known ones' clocks; a task gone keeps its last reading. */
	for (size_t i = 0; i < a->n; i++)
		target_thread_run_ns(a->pid, a->tasks[i].tid, &a->tasks[i].run_ns);
	a->looked = true;
	if (r < 0)
		return r;
	return a->starting && now_monotonic_ns() - a->starting_since_ns <
				      AGENT_TASK_START_MAX_MS * 1000000ULL;
}

int agent_tasks_saw_name(struct agent_tasks *a, const char *name)
{
	int r;

	if (strcmp(name, CPROF_WIRE_TASK_COMM) != 0)
		return 0;
	r = a->word ? agent_tasks_refresh(a, 0) : agent_tasks_search(a, NULL, 0);
	return r < 0 ? r : 0;
}

void agent_tasks_filter(const struct agent_tasks *a, pid_t *tids, size_t *n)
{
	size_t kept = 0;

	for (size_t i = 0; i < *n; i++)
		if (!agent_tasks_has(a, tids[i]))
			tids[kept++] = tids[i];
	*n = kept;
}

uint64_t agent_tasks_cpu_ns(const struct agent_tasks *a)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < a->n; i++)
		sum += a->tasks[i].run_ns - MIN(a->tasks[i].run_ns, a->tasks[i].run_from_ns);
	return sum;
}

int agent_tasks_note(const struct agent_tasks *a, bool cpu, struct profile *p)
{
	char text[256];
	size_t len;

	if (!a->n)
		return 0;
	len = (size_t)snprintf(text, sizeof(text), "the cprof agent's %s (%s",
			       plural(a->n, "task", "tasks"), plural(a->n, "tid", "tids"));
	for (size_t i = 0; i < a->n && len < sizeof(text); i++)
		len += (size_t)snprintf(text + len, sizeof(text) - len, "%s%d", i ? ", " : " ",
					a->tasks[i].tid);
	if (len < sizeof(text) && cpu)
		snprintf(text + len, sizeof(text) - len,
			 ") is cprof's, not the program's: left out, with the %.3f ms of CPU it "
			 "used in the window",
			 (double)agent_tasks_cpu_ns(a) / 1e6);
	else if (len < sizeof(text))
		snprintf(text + len, sizeof(text) - len,
			 ") is cprof's, not the program's: left out");
	return profile_add_comment(p, text);
}
