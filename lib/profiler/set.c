/*
 * One kind over a set of processes, as one profiler: a member profiler a
 * process, one window for all in which a process that ends closes its own
 * window only, and one profile in which each sample says its process.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/profiler-private.h"
#include "target/target.h"
#include "util/util.h"

/* A process's name, as the kernel keeps it (TASK_COMM_LEN). */
#define COMM_LEN 16

struct member {
	pid_t pid;
	char comm[COMM_LEN];
	struct profiler *p; /* NULL: refused at its opening (why) */
	bool started, over, exited, stopped;
	bool born;          /* joined the set during the window */
	int error;          /* -errno: refused, or its window failed */
	char why[256];
};

struct set {
	struct member *m;
	size_t n, alloc;
	profiler_open_fn open;
	profiler_list_fn list; /* NULL: the set is the one it began with */
	void *arg;
	uint64_t next_look;   /* CLOCK_MONOTONIC of the next listing */
};

/* How often a set that grows is listed again: a process born and gone
 * between two looks is not seen. */
#define LOOK_NS (200 * 1000 * 1000ULL)

static void refuse(struct member *m, int error, const char *why)
{
	m->error = error;
	m->over = true;
	snprintf(m->why, sizeof(m->why), "%s", why[0] ? why : strerror(-error));
}

/* A member for @pid, opened: -ENOMEM, else 0 with a refusal kept in it. */
static int add_member(struct set *s, pid_t pid)
{
	struct member *m;
	char why[1024] = "";
	int r;

	if (GROW(s->m, s->n + 1, s->alloc) < 0)
		return -ENOMEM;
	m = &s->m[s->n++];
	*m = (struct member){ .pid = pid };
	if (target_thread_name(pid, pid, m->comm, sizeof(m->comm)) < 0)
		snprintf(m->comm, sizeof(m->comm), "?");
	r = s->open(s->arg, pid, &m->p, why, sizeof(why));
	if (r == -ENOMEM)
		return r;
	if (r < 0) {
		m->p = NULL;
		refuse(m, r, why);
	}
	return 0;
}

static bool known(const struct set *s, pid_t pid)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->m[i].pid == pid)
			return true;
	return false;
}

/*
 * The processes that joined the set since its last listing (born, or
 * moved into its cgroup), each opened and started: their windows begin
 * now. One that cannot be is left out as any other.
 */
static int look_again(struct set *s, uint64_t now)
{
	pid_t *pids = NULL;
	size_t n = 0;
	int r = 0;

	s->next_look = now + LOOK_NS;
	if (!s->list || s->list(s->arg, &pids, &n) < 0)
		return 0;
	for (size_t i = 0; i < n && r == 0; i++) {
		struct member *m;
		char why[1024] = "";
		int k;

		if (known(s, pids[i]))
			continue;
		r = add_member(s, pids[i]);
		if (r < 0)
			break;
		m = &s->m[s->n - 1];
		m->born = true;
		if (!m->p)
			continue;
		k = profiler_start(m->p, why, sizeof(why));
		if (k < 0) {
			refuse(m, k, why);
			m->stopped = true;
			continue;
		}
		m->started = true;
	}
	free(pids);
	return r;
}

static int set_start(struct profiler *p, char *err, size_t errlen)
{
	struct set *s = p->impl;
	char why[1024];
	size_t started = 0;
	int first = 0;

	for (size_t i = 0; i < s->n; i++) {
		struct member *m = &s->m[i];
		int r;

		if (!m->p)
			continue;
		why[0] = '\0';
		r = profiler_start(m->p, why, sizeof(why));
		if (r == -ECANCELED) {
			/* Ctrl-C while an agent looked for a thread: nothing taken. */
			p->ops->stop(p);
			return r;
		}
		if (r < 0) {
			refuse(m, r, why);
			m->stopped = true;
			if (!first) {
				first = r;
				snprintf(err, errlen, "pid %d (%s): %s", (int)m->pid, m->comm, m->why);
			}
			continue;
		}
		m->started = true;
		started++;
	}
	s->next_look = now_monotonic_ns() + LOOK_NS;
	return started ? 0 : first ? first : -ESRCH;
}

static size_t active(const struct set *s)
{
	size_t n = 0;

	for (size_t i = 0; i < s->n; i++)
		n += !s->m[i].over;
	return n;
}

/* Each member still in its window polled once, the time shared. 1 once
 * every one is over, -ESRCH when every one's process is gone. */
static int set_poll(struct profiler *p, int timeout_ms)
{
	struct set *s = p->impl;
	size_t gone = 0, slice, n = active(s);
	uint64_t now = now_monotonic_ns();

	if (n && now >= s->next_look && look_again(s, now) < 0)
		return -ENOMEM;
	n = active(s);
	slice = n ? MAX((size_t)timeout_ms / n, 1) : 0;
	for (size_t i = 0; i < s->n; i++) {
		struct member *m = &s->m[i];
		int r;

		if (m->over)
			continue;
		r = profiler_poll(m->p, (int)slice);
		if (r == -ESRCH)
			m->exited = true;
		else if (r < 0)
			refuse(m, r, "");
		m->over = r != 0;
	}
	if (active(s))
		return 0;
	for (size_t i = 0; i < s->n; i++)
		gone += s->m[i].exited || !s->m[i].started;
	return gone == s->n ? -ESRCH : 1;
}

static int set_stop(struct profiler *p)
{
	struct set *s = p->impl;
	int r = 0;

	for (size_t i = 0; i < s->n; i++) {
		struct member *m = &s->m[i];
		int k;

		if (!m->started || m->stopped)
			continue;
		m->stopped = true;
		k = profiler_stop(m->p);
		if (k < 0 && !m->error)
			refuse(m, k, "");
		if (k < 0 && r == 0)
			r = k;
	}
	return r;
}

/* The comments that say which processes the profile holds, and which
 * not and why. */
static int set_comments(const struct set *s, struct profile *all)
{
	char line[512];
	size_t len = 0;
	int r = 0;

	len = (size_t)snprintf(line, sizeof(line), "processes:");
	for (size_t i = 0; i < s->n && len < sizeof(line); i++)
		if (s->m[i].started && !s->m[i].error)
			len += (size_t)snprintf(line + len, sizeof(line) - len, " %d (%s)%s%s",
						(int)s->m[i].pid, s->m[i].comm,
						s->m[i].born ? " born in the window" : "",
						s->m[i].exited ? " exited in the window" : "");
	r = profile_add_comment(all, line);
	for (size_t i = 0; i < s->n && r == 0; i++) {
		if (!s->m[i].error)
			continue;
		snprintf(line, sizeof(line), "pid %d (%s) left out: %s", (int)s->m[i].pid,
			 s->m[i].comm, s->m[i].why);
		r = profile_add_comment(all, line);
	}
	return r;
}

/* A process's comments but its first (the command line, the same for
 * all) say which process they are about. */
static int name_comments(struct profile *part, const struct member *m)
{
	char buf[1024];

	for (size_t i = 1; i < part->ncomments; i++) {
		const char *c;

		snprintf(buf, sizeof(buf), "pid %d (%s): %s", (int)m->pid, m->comm,
			 part->comments[i]);
		c = profile_intern(part, buf);
		if (!c)
			return -ENOMEM;
		part->comments[i] = c;
	}
	return 0;
}

/* The profile that heads the merge: the members' sample types, their
 * earliest time, every comment once, the longest of their windows. */
static int merged_headers(struct profile **parts, size_t n, struct profile **ret)
{
	const struct profile **kept = calloc(n ? n : 1, sizeof(*kept));
	int64_t duration = 0;
	size_t k = 0;
	int r;

	*ret = NULL;
	if (!kept)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (parts[i]) {
			kept[k++] = parts[i];
			duration = MAX(duration, parts[i]->duration_nanos);
		}
	r = k ? profile_new(ret, kept[0]->sample_types, kept[0]->nsample_types) : -ESRCH;
	if (r == 0)
		r = profile_merge_headers(*ret, kept, k);
	if (r == 0)
		(*ret)->duration_nanos = duration;
	free(kept);
	return r;
}

/*
 * The members' profiles merged as pprof merges other processes' (by
 * mapping-relative address: one binary's functions once), each sample
 * labelled with its process.
 */
static int set_finish(struct profiler *p, struct profile **ret)
{
	struct set *s = p->impl;
	struct profile **parts = calloc(s->n ? s->n : 1, sizeof(*parts));
	struct profile *all = NULL;
	int r = parts ? 0 : -ENOMEM;

	*ret = NULL;
	for (size_t i = 0; i < s->n && r == 0; i++) {
		if (s->m[i].started && !s->m[i].error)
			r = profiler_finish(s->m[i].p, &parts[i]);
		if (r == 0 && parts[i])
			r = name_comments(parts[i], &s->m[i]);
	}
	if (r == 0)
		r = merged_headers(parts, s->n, &all);
	for (size_t i = 0; i < s->n && r == 0; i++) {
		const struct member *m = &s->m[i];
		struct profile_label who[] = {
			{ .key = "process_id", .num = m->pid },
			{ .key = "process_name", .str = m->comm },
		};
		struct profile_merge how = { .match = PROFILE_MATCH_KEY, .labels = who,
					     .nlabels = ARRAY_SIZE(who) };

		if (parts[i])
			r = profile_merge(all, parts[i], &how);
	}
	if (r == 0)
		r = set_comments(s, all);
	if (r == 0) {
		*ret = all;
		all = NULL;
	}
	for (size_t i = 0; parts && i < s->n; i++)
		profile_free(parts[i]);
	free(parts);
	profile_free(all);
	return r;
}

/* Each process's text headed by its pid and name, in the members' order. */
static int set_text(struct profiler *p, int debug, FILE *f)
{
	struct set *s = p->impl;
	int r = 0;

	for (size_t i = 0; i < s->n && r >= 0; i++) {
		const struct member *m = &s->m[i];

		fprintf(f, "%spid %d (%s)", i ? "\n" : "", (int)m->pid, m->comm);
		if (!m->started || m->error) {
			fprintf(f, ": left out: %s\n", m->why);
			continue;
		}
		fprintf(f, "%s\n\n", m->exited ? ": exited in the window" : "");
		r = profiler_write_text(m->p, debug, f);
	}
	return r < 0 ? r : 0;
}

static void set_facts(const struct profiler *p, struct profiler_facts *ret)
{
	const struct set *s = p->impl;
	size_t gone = 0;

	*ret = (struct profiler_facts){ .pause_ns = -1 };
	for (size_t i = 0; i < s->n; i++) {
		struct profiler_facts f;

		gone += s->m[i].exited || !s->m[i].started;
		if (!s->m[i].started)
			continue;
		profiler_facts(s->m[i].p, &f);
		ret->window_ns = MAX(ret->window_ns, f.window_ns);
		ret->count += f.count;
		ret->lost += f.lost;
		ret->pause_ns = MAX(ret->pause_ns, f.pause_ns);
	}
	ret->target_exited = s->n && gone == s->n;
}

static void set_free(void *impl)
{
	struct set *s = impl;

	for (size_t i = 0; s && i < s->n; i++)
		profiler_free(s->m[i].p);
	if (s)
		free(s->m);
	free(s);
}

static const struct profiler_ops set_ops = {
	.start = set_start, .poll = set_poll, .stop = set_stop, .finish = set_finish,
	.write_text = set_text, .facts = set_facts, .free = set_free,
};

int profiler_new_set(struct profiler **ret, const char *kind, const pid_t *pids, size_t n,
		     profiler_open_fn open, profiler_list_fn list, void *arg, char *err,
		     size_t errlen)
{
	struct set *s = calloc(1, sizeof(*s));
	size_t opened = 0, len = 0;
	int first = 0;

	*ret = NULL;
	if (!s)
		return -ENOMEM;
	*s = (struct set){ .open = open, .list = list, .arg = arg };
	err[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		const struct member *m;

		if (add_member(s, pids[i]) < 0) {
			set_free(s);
			return -ENOMEM;
		}
		m = &s->m[s->n - 1];
		if (m->p) {
			opened++;
			continue;
		}
		if (!first)
			first = m->error;
		if (len < errlen)
			len += (size_t)snprintf(err + len, errlen - len, "%spid %d (%s): %s",
						len ? "; " : "", (int)m->pid, m->comm, m->why);
	}
	if (!opened) {
		set_free(s);
		return first ? first : -ESRCH;
	}
	return new_profiler(ret, &set_ops, kind, s);
}

size_t profiler_set_members(const struct profiler *p, struct profiler_member *ret, size_t max)
{
	const struct set *s;

	if (p->ops != &set_ops)
		return 0;
	s = p->impl;
	for (size_t n = 0; n < s->n && n < max; n++)
		ret[n] = (struct profiler_member){ .pid = s->m[n].pid,
						   .comm = s->m[n].comm,
						   .p = s->m[n].started ? s->m[n].p : NULL,
						   .error = s->m[n].error,
						   .why = s->m[n].why,
						   .exited = s->m[n].exited,
						   .born = s->m[n].born };
	return s->n;
}
