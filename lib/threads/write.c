/* The three views of a threads snapshot, in Go's goroutine-profile layouts. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "symbolize/symbolize.h"
#include "threads/threads.h"
#include "unwind/unwind.h"
#include "util/util.h"

static bool has_stack(const struct thread_record *t)
{
	return t->result == PTRACE_THREAD_STOPPED && t->npcs > 0;
}

/* " 12-14 17": the tids of the threads read without a stop, in runs. */
static void unstopped_tids(const struct threads_snapshot *s, FILE *f)
{
	for (size_t i = 0; i < s->nthreads; i++) {
		size_t j = i;

		if (!s->threads[i].unstopped)
			continue;
		while (j + 1 < s->nthreads && s->threads[j + 1].unstopped &&
		       s->threads[j + 1].tid == s->threads[j].tid + 1)
			j++;
		if (j > i)
			fprintf(f, " %d-%d", s->threads[i].tid, s->threads[j].tid);
		else
			fprintf(f, " %d", s->threads[i].tid);
		i = j;
	}
}

/*
 * ", N read asleep without a stop[: TIDS], N stopped after they woke", or
 * why none could be, or nothing. Each thread's own block keeps Go's header
 * (its state as it is): which were read without a stop, @list_tids says
 * here.
 */
static void unstopped_text(const struct threads_snapshot *s, bool list_tids, FILE *f)
{
	if (s->asleep_refused) {
		fprintf(f, ", sleeping ones too (/proc/%d/task/*/syscall: %s)", s->pid,
			strerror(-s->asleep_refused));
		return;
	}
	if (s->nasleep) {
		fprintf(f, ", %zu read asleep without a stop", s->nasleep);
		if (list_tids) {
			fputc(':', f);
			unstopped_tids(s, f);
		}
	}
	if (s->nwoke)
		fprintf(f, ", %zu stopped after %s woke", s->nwoke, s->nwoke == 1 ? "it" : "they");
}

/* "; the cprof agent's task (tid 12) left out", or nothing. */
static void agent_text(const struct threads_snapshot *s, FILE *f)
{
	if (!s->agent.n)
		return;
	fprintf(f, "; the cprof agent's %s (%s", plural(s->agent.n, "task", "tasks"),
		plural(s->agent.n, "tid", "tids"));
	for (size_t i = 0; i < s->agent.n; i++)
		fprintf(f, "%s%d", i ? ", " : " ", s->agent.tasks[i].tid);
	fputs(") left out", f);
}

/* The first line of both texts, and the walk's note when it has one. */
static void pause_line(const struct threads_snapshot *s, bool list_tids, FILE *f)
{
	char note[256];

	fprintf(f, "# paused %.3f ms for %zu %s of pid %d (%s): %.3f ms until all had "
		   "stopped",
		(double)s->pause_ns / 1e6, s->nstopped, plural(s->nstopped, "thread", "threads"),
		s->pid, s->comm, (double)s->stopping_ns / 1e6);
	unstopped_text(s, list_tids, f);
	agent_text(s, f);
	fputc('\n', f);
	if (s->nframe_pointers) {
		unwind_frame_pointer_note(note, sizeof(note), s->nframe_pointers, s->nstacks);
		fprintf(f, "# %s\n", note);
	}
}

int threads_build_profile(const struct threads_snapshot *s, const char *command_line,
			  struct profile **ret)
{
	static const struct profile_value_type types[] = { { "threads", "count" } };
	struct profile *p;
	uint64_t *locs = NULL;
	size_t locs_alloc = 0;
	char buf[256], tail[160] = "";
	FILE *f;
	int r;

	r = profile_new(&p, types, 1);
	if (r < 0)
		return r;
	p->time_nanos = s->time_nanos;
	r = profile_set_period(p, "threads", "count", 1);
	if (r < 0)
		goto out_free;
	f = fmemopen(tail, sizeof(tail), "w");
	if (!f) {
		r = -errno;
		goto out_free;
	}
	unstopped_text(s, false, f);
	fclose(f);
	snprintf(buf, sizeof(buf), "paused %.3f ms for %zu %s%s", (double)s->pause_ns / 1e6,
		 s->nstopped, plural(s->nstopped, "thread", "threads"), tail);
	r = profile_add_comment(p, buf);
	if (r < 0)
		goto out_free;
	if (command_line && (r = profile_add_comment(p, command_line)) < 0)
		goto out_free;
	r = agent_tasks_note(&s->agent, false, p);
	if (r < 0)
		goto out_free;
	if (s->nframe_pointers) {
		unwind_frame_pointer_note(buf, sizeof(buf), s->nframe_pointers, s->nstacks);
		r = profile_add_comment(p, buf);
		if (r < 0)
			goto out_free;
	}
	for (size_t i = 0; i < s->nthreads; i++) {
		const struct thread_record *t = &s->threads[i];
		struct profile_label label = { .key = "state", .str = buf };
		int64_t one = 1;

		if (!has_stack(t))
			continue;
		r = GROW(locs, t->npcs, locs_alloc);
		if (r < 0)
			goto out_free;
		for (size_t j = 0; j < t->npcs; j++) {
			r = profile_location_for_address(p, t->pcs[j], &locs[j]);
			if (r < 0)
				goto out_free;
		}
		thread_state_text(t, buf, sizeof(buf));
		r = profile_add_sample(p, locs, t->npcs, &one, &label, 1);
		if (r < 0)
			goto out_free;
	}
	r = symbolizer_fill_profile(s->sym, p);
	if (r < 0)
		goto out_free;
	free(locs);
	*ret = p;
	return 0;
out_free:
	free(locs);
	profile_free(p);
	return r;
}

/* Threads grouped by identical stacks, for debug=1. */
struct stack_group {
	const struct thread_record *first;
	size_t count;
};

static bool same_stack(const struct thread_record *a, const struct thread_record *b)
{
	return a->npcs == b->npcs && !memcmp(a->pcs, b->pcs, a->npcs * sizeof(*a->pcs));
}

static int compare_groups(const void *a, const void *b)
{
	const struct stack_group *x = a, *y = b;

	if (x->count != y->count)
		return x->count < y->count ? 1 : -1;
	return (x->first->tid > y->first->tid) - (x->first->tid < y->first->tid);
}

static int group_stacks(const struct threads_snapshot *s, struct stack_group **ret,
			size_t *ret_n)
{
	struct stack_group *groups = NULL;
	size_t n = 0, alloc = 0;
	struct u64map index; /* stack hash -> group index + 1 of the first candidate */
	int r = 0;

	u64map_init(&index);
	for (size_t i = 0; i < s->nthreads; i++) {
		const struct thread_record *t = &s->threads[i];
		uint64_t h, g;
		bool found = false;

		if (!has_stack(t))
			continue;
		h = hash_bytes(t->pcs, t->npcs * sizeof(*t->pcs), 0);
		/* Probe h, h+1, ...: equal hashes of different stacks move on. */
		for (; u64map_get(&index, h, &g); h++) {
			if (same_stack(groups[g].first, t)) {
				groups[g].count++;
				found = true;
				break;
			}
		}
		if (found)
			continue;
		r = GROW(groups, n + 1, alloc);
		if (r < 0)
			goto out;
		groups[n] = (struct stack_group){ .first = t, .count = 1 };
		r = u64map_put(&index, h, n);
		if (r < 0)
			goto out;
		n++;
	}
	qsort(groups, n, sizeof(*groups), compare_groups);
out:
	u64map_release(&index);
	if (r < 0) {
		free(groups);
		return r;
	}
	*ret = groups;
	*ret_n = n;
	return 0;
}

int threads_write_debug1(const struct threads_snapshot *s, FILE *f)
{
	struct stack_group *groups;
	size_t ngroups, total = 0;
	int r;

	r = group_stacks(s, &groups, &ngroups);
	if (r < 0)
		return r;
	for (size_t g = 0; g < ngroups; g++)
		total += groups[g].count;
	fprintf(f, "threads profile: total %zu\n", total);
	pause_line(s, false, f);
	for (size_t g = 0; g < ngroups; g++) {
		const struct thread_record *t = groups[g].first;

		fprintf(f, "%zu @", groups[g].count);
		for (size_t j = 0; j < t->npcs; j++)
			fprintf(f, " %#llx", (unsigned long long)t->pcs[j]);
		fputc('\n', f);
		symbolizer_write_frames(s->sym, t->pcs, t->npcs, f);
		fputc('\n', f);
	}
	free(groups);
	return ferror(f) ? -EIO : 0;
}

static void thread_header(const struct thread_record *t, FILE *f)
{
	char state[128];
	double minutes = (double)t->cpu_ns / 60e9;

	thread_state_text(t, state, sizeof(state));
	fprintf(f, "thread %d", t->tid);
	/* In a container: also the tid the target's own logs and tools show. */
	if (t->ns_tid)
		fprintf(f, " (ns tid %d)", t->ns_tid);
	fprintf(f, " \"%s\" [%s", t->name, state);
	/* Go names the wait in minutes once it passes one; we have CPU time. */
	if (minutes >= 1.0)
		fprintf(f, ", %.0f minutes on cpu", minutes);
	switch (t->result) {
	case PTRACE_THREAD_EXITED:
		fputs(", exited during the snapshot", f);
		break;
	case PTRACE_THREAD_NOT_STOPPED:
		fputs(", did not stop in time", f);
		break;
	case PTRACE_THREAD_REFUSED:
		if (t->tracer)
			fprintf(f, ", already traced by pid %d", t->tracer);
		else
			fprintf(f, ", cannot be traced: %s", strerror(-t->error));
		break;
	case PTRACE_THREAD_STOPPED:
		break;
	}
	fputs("]:\n", f);
}

int threads_write_debug2(const struct threads_snapshot *s, FILE *f)
{
	pause_line(s, true, f);
	fputc('\n', f);
	for (size_t i = 0; i < s->nthreads; i++) {
		const struct thread_record *t = &s->threads[i];

		thread_header(t, f);
		for (size_t j = 0; has_stack(t) && j < t->npcs; j++) {
			struct symbol_info info;

			if (symbolizer_lookup(s->sym, t->pcs[j], &info) < 0)
				continue;
			for (size_t k = 0; k < info.nframes; k++) {
				const struct symbol_frame *fr = &info.frames[k];

				/* Go writes "main.f(...)"; a C++ name has its own
				 * parameter list: "mysqld_main(int, char**)". */
				fprintf(f, "%s%s\n\t%s:%d", fr->function,
					symbol_name_has_params(fr->function) ? "" : "(...)",
					symbol_file_or_module(fr, &info), fr->line);
				/* The offset belongs to the real (outermost) frame
				 * only; as in symbolizer_write_frames(). */
				if (k + 1 == info.nframes &&
				    (!symbol_name_has_offset(fr->function) || info.offset_in_function))
					fprintf(f, " +%#llx", (unsigned long long)info.offset_in_function);
				fputc('\n', f);
			}
		}
		fputc('\n', f);
	}
	return ferror(f) ? -EIO : 0;
}
