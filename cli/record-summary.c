/* What cprof record says of its window: summary.txt, manifest.json, and the
 * kinds it did not write, on stderr (record.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json.h"
#include "record.h"
#include "report.h"
#include "threads/threads.h"
#include "util/util.h"
#include "view/view.h"

#ifndef CPROF_VERSION
#define CPROF_VERSION "unknown"
#endif

#define SUMMARY_TOP 10

static void utc_time(int64_t ns, char *buf, size_t size)
{
	time_t s = (time_t)(ns / 1000000000LL);
	struct tm tm;

	gmtime_r(&s, &tm);
	strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static const char *state_word(char state)
{
	switch (state) {
	case 'R':
		return "running";
	case 'S':
		return "sleeping";
	case 'D':
		return "disk";
	case 'T':
	case 't':
		return "stopped";
	case 'Z':
		return "zombie";
	}
	return "other";
}

/* "12 threads: 10 sleeping, 2 running", from a threads entry's snapshot. */
static void threads_by_state(FILE *f, const struct record_entry *e)
{
	static const char states[] = "RSDTZ?";
	const struct threads_snapshot *s = profiler_threads_snapshot(e->p);
	size_t count[sizeof(states)] = { 0 };
	const char *sep = ": ";

	for (size_t i = 0; i < s->nthreads; i++) {
		const char *at = strchr(states, s->threads[i].state == 't' ? 'T'
								    : s->threads[i].state);

		count[at && *at ? (size_t)(at - states) : sizeof(states) - 2]++;
	}
	fprintf(f, "%zu %s", s->nthreads, s->nthreads == 1 ? "thread" : "threads");
	for (size_t i = 0; i + 1 < sizeof(states); i++) {
		if (!count[i])
			continue;
		fprintf(f, "%s%zu %s", sep, count[i], state_word(states[i]));
		sep = ", ";
	}
	fputc('\n', f);
}

/* pprof -top's first SUMMARY_TOP rows of sample type @index; from its
 * "Type:" line on only with @bare (the file's header said already). */
static int top_rows(FILE *f, const struct record_entry *e, size_t index, bool bare)
{
	char *text = NULL;
	const char *from, *type;
	size_t len = 0, n;
	int r;

	r = view_render(e->profile, index, VIEW_TOP, SUMMARY_TOP, NULL, &text, &len);
	if (r < 0)
		return r;
	type = bare ? strstr(text, "\nType: ") : NULL;
	from = type ? type + 1 : text;
	n = len - (size_t)(from - text);
	if (fwrite(from, 1, n, f) != n)
		r = -EIO;
	free(text);
	return r;
}

/*
 * The table of the entry's default sample type; for the heap, alloc_space's
 * too: a target that churns holds little at the end, and what it allocated
 * in the window is the story then (go tool pprof -sample_index=alloc_space).
 */
static int top_table(FILE *f, const struct record_entry *e)
{
	size_t index, alloc;
	int r;

	if (view_sample_index(e->profile, NULL, &index) < 0)
		return 0;
	r = top_rows(f, e, index, false);
	if (r == 0 && view_sample_index(e->profile, "alloc_space", &alloc) == 0 &&
	    alloc != index) {
		fputc('\n', f);
		r = top_rows(f, e, alloc, true);
	}
	return r;
}

const char *record_refusal(const struct record_entry *e, size_t *ret_len,
			   const char **ret_hint)
{
	const char *why = e->refused[0] ? e->refused : "no profile was taken";
	const char *hint = strstr(why, "\nhint: ");

	if (ret_len)
		*ret_len = hint ? (size_t)(hint - why) : strlen(why);
	if (ret_hint)
		*ret_hint = hint ? hint + 1 : NULL;
	return why;
}

/* Whether a kind before @k was refused for the same reason (said then). */
static bool said_before(const struct record *r, int k)
{
	for (int j = 0; j < k; j++)
		if (r->e[j].asked && !r->e[j].written && !strcmp(r->e[j].refused, r->e[k].refused))
			return true;
	return false;
}

/* The kinds refused for @k's reason, "heap, block, mutex", into @buf. */
static void kinds_refused_alike(const struct record *r, int k, char *buf, size_t size)
{
	size_t n = 0;

	buf[0] = '\0';
	for (int j = k; j < RK_N && n < size; j++)
		if (r->e[j].asked && !r->e[j].written && !strcmp(r->e[j].refused, r->e[k].refused))
			n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? ", " : "",
					      r->e[j].name);
}

/* "not recorded: heap, block: WHY", then its hint lines, once per reason. */
static void refusal_line(FILE *f, const struct record *r, int k)
{
	char kinds[256];
	const char *hint;
	size_t len;
	const char *why = record_refusal(&r->e[k], &len, &hint);

	if (said_before(r, k))
		return;
	kinds_refused_alike(r, k, kinds, sizeof(kinds));
	fprintf(f, "not recorded: %s: %.*s\n", kinds, (int)len, why);
	if (hint)
		fprintf(f, "%s\n", hint);
}

void record_report_refusals(const struct record *r)
{
	for (int k = 0; k < RK_N; k++) {
		char kinds[256];

		if (!r->e[k].asked || r->e[k].written || said_before(r, k))
			continue;
		kinds_refused_alike(r, k, kinds, sizeof(kinds));
		strncat(kinds, ": not recorded", sizeof(kinds) - strlen(kinds) - 1);
		/* Its first line a warning, its "hint: " lines hints. */
		report_warning_text(kinds, record_refusal(&r->e[k], NULL, NULL));
	}
}

int record_write_summary(const struct record *r, FILE *f)
{
	char start[32];
	int ret = 0;

	utc_time(r->start_realtime_ns, start, sizeof(start));
	fprintf(f, "cprof record of pid %d (%s), %s\n", r->pid, r->comm, r->exe);
	fprintf(f, "window: %s, %.1f s%s%s\n", start, (double)r->window_ns / 1e9,
		r->interrupted ? ", cut short by an interrupt" : "",
		r->target_exited ? ", the process exited during it" : "");
	fprintf(f, "written:");
	for (int k = 0; k < RK_N; k++)
		if (r->e[k].written)
			fprintf(f, " %s", r->e[k].name);
	fputc('\n', f);
	for (int k = 0; k < RK_N; k++)
		if (r->e[k].asked && !r->e[k].written)
			refusal_line(f, r, k);
	for (int k = 0; k < RK_N && ret == 0; k++) {
		const struct record_entry *e = &r->e[k];

		if (!e->written)
			continue;
		fprintf(f, "\n== %s (%s)", e->name, e->file);
		if (e->facts.lost)
			fprintf(f, ": %llu records lost, its figures are short of them",
				(unsigned long long)e->facts.lost);
		fputc('\n', f);
		if (k == RK_THREADS || k == RK_THREADS_END)
			threads_by_state(f, e);
		ret = top_table(f, e);
	}
	if (ret == 0 && ferror(f))
		ret = -EIO;
	return ret;
}

/* The main executable's build id, from the first profile that maps it. */
static const char *build_id(const struct record *r)
{
	for (int k = 0; k < RK_N; k++) {
		const struct profile *p = r->e[k].profile;

		for (size_t i = 0; p && i < p->nmappings; i++)
			if (p->mappings[i].file && !strcmp(p->mappings[i].file, r->exe) &&
			    p->mappings[i].build_id && p->mappings[i].build_id[0])
				return p->mappings[i].build_id;
	}
	return "";
}

int record_write_manifest(const struct record *r, FILE *f)
{
	const char *sep = "", *why, *hint;
	char start[32], text[sizeof(r->e[0].refused)];
	size_t len;

	utc_time(r->start_realtime_ns, start, sizeof(start));
	fprintf(f, "{\"cprof_version\":");
	json_string(f, CPROF_VERSION);
	/* As every command's --json object begins. */
	fprintf(f, ",\"command\":\"record\",\"exit\":%d,\"pid\":%d,\"comm\":", r->exit, r->pid);
	json_string(f, r->comm);
	fprintf(f, ",\"executable\":");
	json_string(f, r->exe);
	fprintf(f, ",\"build_id\":");
	json_string(f, build_id(r));
	fprintf(f, ",\"command_line\":");
	json_string(f, r->command_line);
	fprintf(f, ",\"directory\":");
	json_string(f, r->dir);
	if (r->interval)
		fprintf(f, ",\"loop_window\":%u", r->interval);
	fprintf(f, ",\"window\":{\"start\":\"%s\",\"start_unix_ns\":%lld,\"duration_ns\":%llu,"
		   "\"interrupted\":%s,\"target_exited\":%s},\"files\":[",
		start, (long long)r->start_realtime_ns, (unsigned long long)r->window_ns,
		r->interrupted ? "true" : "false", r->target_exited ? "true" : "false");
	for (int k = 0; k < RK_N; k++) {
		const struct record_entry *e = &r->e[k];

		if (!e->written)
			continue;
		fprintf(f, "%s{\"kind\":", sep);
		json_string(f, e->name);
		fprintf(f, ",\"file\":");
		json_string(f, e->file);
		fprintf(f, ",\"samples\":%llu,\"lost\":%llu,\"pause_ns\":",
			(unsigned long long)e->facts.count, (unsigned long long)e->facts.lost);
		/* null where no thread was stopped, as --json says it. */
		if (e->facts.pause_ns >= 0)
			fprintf(f, "%lld}", (long long)e->facts.pause_ns);
		else
			fprintf(f, "null}");
		sep = ",";
	}
	fprintf(f, "],\"refused\":[");
	sep = "";
	for (int k = 0; k < RK_N; k++) {
		const struct record_entry *e = &r->e[k];

		if (!e->asked || e->written)
			continue;
		fprintf(f, "%s{\"kind\":", sep);
		json_string(f, e->name);
		why = record_refusal(e, &len, &hint);
		snprintf(text, sizeof(text), "%.*s", (int)len, why);
		fprintf(f, ",\"why\":");
		json_string(f, text);
		fprintf(f, ",\"hint\":");
		if (hint)
			json_string(f, hint + strlen("hint: "));
		else
			fputs("null", f);
		fputc('}', f);
		sep = ",";
	}
	fprintf(f, "]}\n");
	return ferror(f) ? -EIO : 0;
}
