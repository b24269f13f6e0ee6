#include "report.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "profile/profile.h"
#include "symbolize/symbolize.h"

static bool quiet;
static bool progress_shown;

void report_set_quiet(bool q)
{
	quiet = q;
}

static void vreport(const char *prefix, const char *fmt, va_list ap)
{
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

void report_error_text(const char *prefix, const char *text)
{
	const char *line = text;
	bool first = true;

	while (line && *line) {
		const char *nl = strchr(line, '\n');
		int len = nl ? (int)(nl - line) : (int)strlen(line);

		if (!strncmp(line, "hint: ", 6))
			report_hint("%.*s", len - 6, line + 6);
		else if (first)
			report_error("%s%s%.*s", prefix ? prefix : "", prefix ? ": " : "", len, line);
		else
			report_error("%.*s", len, line);
		first = false;
		line = nl ? nl + 1 : NULL;
	}
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

int report_usage(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("error: ", fmt, ap);
	va_end(ap);
	if (cmd)
		fprintf(stderr, "cprof: hint: see 'cprof %s --help'\n", cmd);
	else
		fprintf(stderr, "cprof: hint: see 'cprof --help'\n");
	return EXIT_USAGE;
}
