#include "report.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "profile/profile.h"
#include "symbolize/symbolize.h"

static bool quiet;
static bool progress_shown;
/* --json: whether it was asked for and printed, and the first error and
 * hint said, for the object of a run that printed none. */
static bool json_wanted, json_printed;
static char first_error[512], first_hint[512];

void report_set_quiet(bool q)
{
	quiet = q;
}

/* Keeps the first message of a kind in @buf, for --json. */
static void keep_first(char *buf, size_t size, const char *fmt, va_list ap)
{
	if (!buf[0])
		vsnprintf(buf, size, fmt, ap);
}

static void vreport(const char *prefix, const char *fmt, va_list ap)
{
	va_list copy;

	va_copy(copy, ap);
	if (!strcmp(prefix, "error: "))
		keep_first(first_error, sizeof(first_error), fmt, copy);
	else if (!strcmp(prefix, "hint: "))
		keep_first(first_hint, sizeof(first_hint), fmt, copy);
	va_end(copy);
	report_progress_done();
	fprintf(stderr, "cprof: %s", prefix);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

#define DEFINE_REPORT(name, prefix, gate)       \
	void name(const char *fmt, ...)         \
	{                                       \
		va_list ap;                     \
		if (gate)                       \
			return;                 \
		va_start(ap, fmt);              \
		vreport(prefix, fmt, ap);       \
		va_end(ap);                     \
	}

DEFINE_REPORT(report_error, "error: ", false)
DEFINE_REPORT(report_hint, "hint: ", false)
DEFINE_REPORT(report_warning, "warning: ", false)
DEFINE_REPORT(report_note, "", quiet)

/* @file (absolute) has neither symbols nor debug information. */
static void unsymbolized(const char *file, const char *build_id)
{
	const char *base = strrchr(file, '/') + 1, *urls = getenv("DEBUGINFOD_URLS");

	report_note("%s has no symbols or debug information%s%s%s: its frames read %s+0xOFFSET",
		    file, build_id[0] ? " (build id " : "", build_id, build_id[0] ? ")" : "", base);
	if (urls && *urls)
		report_note("the debuginfod servers in DEBUGINFOD_URLS do not have its debug file");
	else
		report_note("set DEBUGINFOD_URLS to fetch its debug file from a debuginfod server, "
			    "or install it under /usr/lib/debug");
}

void report_unsymbolized(const struct profile *p)
{
	const struct profile_mapping *m = p->nmappings ? &p->mappings[0] : NULL;

	if (m && !m->has_functions && m->file && m->file[0] == '/')
		unsymbolized(m->file, m->build_id ? m->build_id : "");
}

void report_unsymbolized_program(struct symbolizer *s)
{
	const struct symbol_module *m = symbolizer_program(s);

	if (m && !m->has_symbols && !m->has_lines && m->path && m->path[0] == '/')
		unsymbolized(m->path, m->build_id ? m->build_id : "");
}

/* report_error_text() and report_warning_text(), said by @say. */
static void report_text(void (*say)(const char *fmt, ...), const char *prefix, const char *text)
{
	const char *line = text;
	bool first = true;

	while (line && *line) {
		const char *nl = strchr(line, '\n');
		int len = nl ? (int)(nl - line) : (int)strlen(line);

		if (!strncmp(line, "hint: ", 6))
			report_hint("%.*s", len - 6, line + 6);
		else if (first)
			say("%s%s%.*s", prefix ? prefix : "", prefix ? ": " : "", len, line);
		else
			say("%.*s", len, line);
		first = false;
		line = nl ? nl + 1 : NULL;
	}
}

void report_error_text(const char *prefix, const char *text)
{
	report_text(report_error, prefix, text);
}

void report_warning_text(const char *prefix, const char *text)
{
	report_text(report_warning, prefix, text);
}

void report_log(const char *fmt, ...)
{
	va_list ap;

	if (quiet || isatty(STDERR_FILENO))
		return;
	va_start(ap, fmt);
	vreport("", fmt, ap);
	va_end(ap);
}

void report_progress(const char *fmt, ...)
{
	va_list ap;

	if (quiet || !isatty(STDERR_FILENO))
		return;
	va_start(ap, fmt);
	fputs("\r\033[Kcprof: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fflush(stderr);
	progress_shown = true;
}

void report_progress_done(void)
{
	if (!progress_shown)
		return;
	fputs("\r\033[K", stderr);
	progress_shown = false;
}

int report_usage_hint(const char *cmd, const char *hint, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("error: ", fmt, ap);
	va_end(ap);
	if (hint)
		report_hint("%s", hint);
	report_hint("see 'cprof %s%s--help'", cmd ? cmd : "", cmd ? " " : "");
	return EXIT_USAGE;
}

void report_json_wanted(void)
{
	json_wanted = true;
}

void report_json_printed(void)
{
	json_printed = true;
}

int report_json_fallback(const char *command, int code)
{
	if (!json_wanted || json_printed)
		return code;
	printf("{\"command\":");
	json_string(stdout, command);
	printf(",\"exit\":%d,\"error\":", code);
	if (code == EXIT_OK)
		printf("null");
	else
		json_string(stdout, first_error[0] ? first_error : "failed: see stderr");
	printf(",\"hint\":");
	if (code != EXIT_OK && first_hint[0])
		json_string(stdout, first_hint);
	else
		printf("null");
	printf("}\n");
	json_printed = true;
	if (fflush(stdout) != 0 && code == EXIT_OK)
		return EXIT_OUTPUT;
	return code;
}
