/* The command line itself: help and man pages agree, global options, usage
 * errors and their exit codes. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testhelp.h"

#ifndef SOURCE_DIR
#error "SOURCE_DIR must point at the source tree (for man/)"
#endif

static const char *commands[] = { "cpu",   "threads",      "heap", "block",
				  "mutex", "threadcreate", "view" };

TestSuite(cli, .init = th_init, .fini = th_cleanup);

/* Collapses runs of white space to one space and trims both ends. */
static void squeeze(char *s)
{
	char *w = s;
	bool space = true;

	for (char *r = s; *r; r++) {
		if (isspace((unsigned char)*r)) {
			if (!space)
				*w++ = ' ';
			space = true;
		} else {
			*w++ = *r;
			space = false;
		}
	}
	if (w > s && w[-1] == ' ')
		w--;
	*w = '\0';
}

/*
 * The SYNOPSIS of a man page as text: font macros dropped (.B, .RB, ...),
 * their alternating arguments joined as troff does, "\-" as "-".
 */
static char *man_synopsis(const char *page)
{
	char path[512], line[1024];
	char *out = calloc(1, 8192);
	bool in = false;
	FILE *f;

	snprintf(path, sizeof(path), "%s/man/%s.1", SOURCE_DIR, page);
	f = fopen(path, "r");
	cr_assert_not_null(f, "no man page %s", path);
	while (fgets(line, sizeof(line), f)) {
		char *p = line, text[1024];
		size_t n = 0;
		bool alternate;

		line[strcspn(line, "\n")] = '\0';
		if (!strncmp(line, ".SH", 3)) {
			if (in)
				break;
			in = strstr(line, "SYNOPSIS") != NULL;
			continue;
		}
		if (!in)
			continue;
		if (!strcmp(line, ".br")) {
			strcat(out, "\n");
			continue;
		}
		/* .RB/.BR/.IR/.RI join their arguments without spaces. */
		alternate = line[0] == '.' && strlen(line) > 3 && line[3] == ' ' &&
			    strchr("BIR", line[1]) && strchr("BIR", line[2]);
		if (line[0] == '.')
			p = strchr(line, ' ') ? strchr(line, ' ') + 1 : line + strlen(line);
		for (bool quoted = false; *p; p++) {
			if (*p == '"') {
				quoted = !quoted;
				continue;
			}
			if (*p == '\\' && p[1] == '-') {
				text[n++] = '-';
				p++;
				continue;
			}
			if (*p == '\\' && p[1] == 'f') { /* \fB \fI \fR */
				p += 2;
				continue;
			}
			if (*p == ' ' && alternate && !quoted)
				continue;
			text[n++] = *p;
		}
		text[n] = '\0';
		strcat(out, text);
		strcat(out, " ");
	}
	fclose(f);
	return out;
}

/* "usage: cprof cpu -p PID ..." -> "cprof cpu -p PID ..." (first line). */
static char *help_usage(const char *cmd)
{
	struct th_run r;
	char *nl, *u;

	TH_CPROF(&r, 10000, cmd, "--help");
	cr_assert_eq(r.exit_code, 0, "cprof %s --help exited %d", cmd, r.exit_code);
	cr_assert(!strncmp(r.out, "usage: ", 7), "help starts with: %.40s", r.out);
	nl = strchr(r.out, '\n');
	if (nl)
		*nl = '\0';
	u = strdup(r.out + 7);
	th_run_release(&r);
	return u;
}

Test(cli, help_matches_man_synopsis)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		char page[64];
		char *man, *help;

		snprintf(page, sizeof(page), "cprof-%s", commands[i]);
		man = man_synopsis(page);
		help = help_usage(commands[i]);
		squeeze(man);
		squeeze(help);
		cr_expect_str_eq(man, help, "man/%s.1 SYNOPSIS and 'cprof %s --help' differ",
				 page, commands[i]);
		free(man);
		free(help);
	}
}

Test(cli, every_command_has_a_man_page_and_is_listed)
{
	struct th_run r;

	TH_CPROF(&r, 10000, "--help");
	cr_assert_eq(r.exit_code, 0);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		char *man, needle[64];

		snprintf(needle, sizeof(needle), "  %s ", commands[i]);
		cr_expect(strstr(r.out, needle), "'cprof --help' does not list %s", commands[i]);
		snprintf(needle, sizeof(needle), "cprof-%s", commands[i]);
		man = man_synopsis(needle);
		free(man);
	}
	th_run_release(&r);
}

Test(cli, version)
{
	struct th_run r;

	TH_CPROF(&r, 10000, "--version");
	cr_assert_eq(r.exit_code, 0);
	cr_assert(!strncmp(r.out, "cprof ", 6), "%s", r.out);
	th_run_release(&r);
}

Test(cli, usage_errors)
{
	static const char *const cases[][4] = {
		{ "frobnicate", NULL },
		{ "--frobnicate", NULL },
		{ "cpu", NULL },
		{ "cpu", "-p", NULL },
		{ "cpu", "-p", "abc", NULL },
		{ "cpu", "-p", "0", NULL },
		{ "cpu", "-p", "1", "--bogus" },
		{ "threads", "-p", "1", "--debug=7" },
		{ "threads", NULL },
	};
	struct th_run r;

	TH_CPROF(&r, 10000, NULL);
	cr_expect_eq(r.exit_code, 64, "no arguments: exit %d", r.exit_code);
	th_run_release(&r);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		th_run_cprof_ex(&r, 10000, 0, 0, cases[i]);
		cr_expect_eq(r.exit_code, 64, "cprof %s %s %s %s: exit %d", cases[i][0],
			     cases[i][1] ? cases[i][1] : "", cases[i][2] ? cases[i][2] : "",
			     cases[i][3] ? cases[i][3] : "", r.exit_code);
		cr_expect(strstr(r.err, "cprof: error: "), "no error message: %s", r.err);
		th_run_release(&r);
	}
}
