/* The command line itself: help and man pages agree, global options, usage
 * errors and their exit codes. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <elfutils/libdwfl.h>
#include <limits.h>
#include <protobuf-c/protobuf-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "testhelp.h"

#ifndef SOURCE_DIR
#error "SOURCE_DIR must point at the source tree (for man/)"
#endif

static const char *commands[] = { "cpu",   "wall",         "threads", "heap", "block",
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

/*
 * The commands `cprof --help` lists ("  NAME  summary" lines under
 * "commands:"), so that a command added to the table is checked too.
 */
static size_t listed_commands(char names[][32], size_t max)
{
	struct th_run r;
	char *line, *save = NULL;
	bool in = false;
	size_t n = 0;

	TH_CPROF(&r, 10000, "--help");
	cr_assert_eq(r.exit_code, 0);
	for (line = strtok_r(r.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!strcmp(line, "commands:")) {
			in = true;
			continue;
		}
		if (!in)
			continue;
		if (strncmp(line, "  ", 2) || !isalpha((unsigned char)line[2]))
			break;
		cr_assert_lt(n, max);
		sscanf(line, "%31s", names[n++]);
	}
	th_run_release(&r);
	cr_assert_gt(n, 0, "'cprof --help' lists no commands");
	return n;
}

Test(cli, help_matches_man_synopsis)
{
	char listed[64][32];
	size_t nlisted = listed_commands(listed, 64);

	/* Every command of the table in this test is listed... */
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		bool found = false;

		for (size_t j = 0; j < nlisted; j++)
			found |= !strcmp(listed[j], commands[i]);
		cr_expect(found, "'cprof --help' does not list %s", commands[i]);
	}
	/* ... and every listed command has a man page whose SYNOPSIS is its usage. */
	for (size_t i = 0; i < nlisted; i++) {
		char page[64];
		char *man, *help;

		snprintf(page, sizeof(page), "cprof-%s", listed[i]);
		man = man_synopsis(page);
		help = help_usage(listed[i]);
		squeeze(man);
		squeeze(help);
		cr_expect_str_eq(man, help, "man/%s.1 SYNOPSIS and 'cprof %s --help' differ",
				 page, listed[i]);
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

static void expect_line(const char *out, const char *line)
{
	cr_expect(strstr(out, line), "--version lacks '%s':\n%s", line, out);
}

/* The libraries' own answers, asked here: what cprof says must be them. */
Test(cli, version)
{
	char line[PATH_MAX + 64], agent[PATH_MAX], real[PATH_MAX];
	struct th_run r;

	unsetenv("CPROF_AGENT");
	TH_CPROF(&r, 10000, "--version");
	cr_assert_eq(r.exit_code, 0);
	expect_line(r.out, "cprof " PROJECT_VERSION "\n");
	snprintf(line, sizeof(line), "libdw: %s\n", dwfl_version(NULL));
	expect_line(r.out, line);
	snprintf(line, sizeof(line), "protobuf-c: %s\n", protobuf_c_version());
	expect_line(r.out, line);
	snprintf(line, sizeof(line), "zlib: %s\n", zlibVersion());
	expect_line(r.out, line);
	cr_expect(strstr(r.out, "debuginfod: yes") || strstr(r.out, "debuginfod: no"), "%s",
		  r.out);
	/* In a build tree the agent is the one beside cprof. */
	snprintf(agent, sizeof(agent), "%s", CPROF_BIN);
	snprintf(strrchr(agent, '/') + 1, sizeof(agent) - (size_t)(strrchr(agent, '/') + 1 - agent),
		 "cprof-agent.so");
	cr_assert_not_null(realpath(agent, real));
	snprintf(line, sizeof(line), "agent: %s\n", real);
	expect_line(r.out, line);
	th_run_release(&r);

	setenv("CPROF_AGENT", "/nonexistent/cprof-agent.so", 1);
	TH_CPROF(&r, 10000, "--version");
	unsetenv("CPROF_AGENT");
	cr_expect(strstr(r.out, "agent: not found"), "%s", r.out);
	th_run_release(&r);
}

/*
 * The bash completion offers every command of `cprof --help` and every
 * option of each command's --help (it reads them from there: this checks
 * that its reading works).
 */
Test(cli, bash_completion_offers_commands_and_options)
{
	char listed[64][32], script[8192];
	size_t nlisted = listed_commands(listed, 64);
	struct th_run r;

	if (access("/bin/bash", X_OK) < 0)
		cr_skip_test("no /bin/bash");
	snprintf(script, sizeof(script),
		 "source '%s/completions/cprof' || exit 1\n"
		 "t() { COMP_WORDS=(\"$@\"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _cprof;"
		 " echo \"${COMP_WORDS[1]}: ${COMPREPLY[*]} \"; }\n"
		 "t '%s' ''\n",
		 SOURCE_DIR, CPROF_BIN);
	for (size_t i = 0; i < nlisted; i++)
		snprintf(script + strlen(script), sizeof(script) - strlen(script),
			 "t '%s' %s -\n", CPROF_BIN, listed[i]);
	th_run_cmd_ex(&r, 30000, 0, 0, (const char *const[]){ "/bin/bash", "-c", script, NULL });
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	for (size_t i = 0; i < nlisted; i++) {
		struct th_run h;
		char word[64], *save = NULL, *line, first[128], *reply;

		snprintf(word, sizeof(word), " %s ", listed[i]);
		cr_expect(strstr(r.out, word), "no completion of command %s: %s", listed[i], r.out);
		snprintf(first, sizeof(first), "\n%s: ", listed[i]);
		reply = strstr(r.out, first);
		cr_assert_not_null(reply, "no options completed for %s: %s", listed[i], r.out);
		TH_CPROF(&h, 10000, listed[i], "--help");
		for (line = strtok_r(h.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			char *opt = strstr(line, "--");

			/* Option lines: "  -p, --pid PID  ..." or "      --mode MODE  ..."
			 * (continuation lines of descriptions are indented further). */
			if (!opt || line[strspn(line, " ")] != '-' || opt - line > 8)
				continue;
			opt[strcspn(opt, " =[")] = '\0';
			snprintf(word, sizeof(word), " %s ", opt);
			cr_expect(strstr(reply, word) && strstr(reply, word) < strchr(reply + 1, '\n'),
				  "completion of '%s -' lacks %s", listed[i], opt);
		}
		th_run_release(&h);
	}
	th_run_release(&r);
}

/*
 * Each row: the arguments (NULL-ended: the last slot must stay NULL, or the
 * run would read on into the next row and pass on its flags) and what the
 * error must name, so that a row fails when the flag it is about is taken.
 */
Test(cli, usage_errors)
{
	static const struct {
		const char *args[6];
		const char *error;
	} cases[] = {
		{ { "frobnicate", NULL }, "unknown command 'frobnicate'" },
		{ { "--frobnicate", NULL }, "unknown option '--frobnicate'" },
		{ { "cpu", NULL }, "missing -p PID" },
		{ { "cpu", "-p", NULL }, "option '-p' needs a value" },
		{ { "cpu", "-p", "abc", NULL }, "invalid pid 'abc'" },
		{ { "cpu", "-p", "0", NULL }, "invalid pid '0'" },
		{ { "cpu", "-p", "1", "--bogus", NULL }, "unknown option '--bogus'" },
		{ { "threads", "-p", "1", "--debug=7", NULL }, "invalid debug level '7'" },
		{ { "threads", NULL }, "missing -p PID" },
	};
	struct th_run r;

	TH_CPROF(&r, 10000, NULL);
	cr_expect_eq(r.exit_code, 64, "no arguments: exit %d", r.exit_code);
	th_run_release(&r);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *const *args = cases[i].args;
		char line[256] = "cprof";

		cr_assert_null(args[sizeof(cases[i].args) / sizeof(args[0]) - 1],
			       "row %zu of the table fills every slot: it has no NULL end", i);
		for (size_t j = 0; args[j]; j++)
			snprintf(line + strlen(line), sizeof(line) - strlen(line), " %s", args[j]);
		th_run_cprof_ex(&r, 10000, 0, 0, args);
		cr_expect_eq(r.exit_code, 64, "%s: exit %d", line, r.exit_code);
		cr_expect(strstr(r.err, "cprof: error: ") && strstr(r.err, cases[i].error),
			  "%s: the error does not say '%s': %s", line, cases[i].error, r.err);
		th_run_release(&r);
	}
}

/*
 * One option as both name it: "--pid PID", "--json", "-q" (the long name
 * when there is one), from "-p, --pid PID" or "--format FORMAT".
 */
static void option_key(const char *spec, char *key, size_t size)
{
	char buf[256], *tok, *save = NULL, *name = NULL, *arg = NULL;

	snprintf(buf, sizeof(buf), "%s", spec);
	for (tok = strtok_r(buf, " ,=", &save); tok; tok = strtok_r(NULL, " ,=", &save)) {
		if (!strncmp(tok, "--", 2) || (tok[0] == '-' && !name))
			name = tok;
		else if (tok[0] != '-' && !arg)
			arg = tok;
	}
	snprintf(key, size, "%s%s%s", name ? name : "?", arg ? " " : "", arg ? arg : "");
}

struct option_doc {
	char key[96];
	char value[32]; /* --help's "(default VALUE", when VALUE is a figure */
	char text[2048]; /* the man page's paragraph */
};

/* "(default 30s)" in @text: 30s; only figures (a default like "stdout" is
 * prose, said in other words by the man page). */
static void default_value(const char *text, char *value, size_t size)
{
	const char *d = strstr(text, "(default ");

	value[0] = '\0';
	if (!d || !isdigit((unsigned char)d[9]))
		return;
	snprintf(value, size, "%.*s", (int)strcspn(d + 9, " ,;:)"), d + 9);
}

/* The options of `cprof CMD --help`: the lines that start with a dash at
 * the indent of 2 or 6, the name up to the first run of two spaces, the
 * text with its continuation lines. */
static size_t help_options(const char *cmd, struct option_doc *opts, size_t max)
{
	struct th_run r;
	char *line, *save = NULL, text[2048] = "";
	size_t n = 0;

	TH_CPROF(&r, 10000, cmd, "--help");
	cr_assert_eq(r.exit_code, 0);
	for (line = strtok_r(r.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char spec[256], *end;
		const char *p = line;

		while (*p == ' ')
			p++;
		if (p - line > 6 && n) {
			strncat(text, p, sizeof(text) - strlen(text) - 2);
			strcat(text, " ");
			default_value(text, opts[n - 1].value, sizeof(opts[0].value));
			continue;
		}
		if (p - line < 2 || *p != '-')
			continue;
		snprintf(spec, sizeof(spec), "%s", p);
		end = strstr(spec, "  ");
		snprintf(text, sizeof(text), "%s ", end ? end : "");
		if (end)
			*end = '\0';
		cr_assert_lt(n, max);
		option_key(spec, opts[n].key, sizeof(opts[0].key));
		default_value(text, opts[n].value, sizeof(opts[0].value));
		n++;
	}
	th_run_release(&r);
	return n;
}

/* Appends a man line to @text without its font escapes, quotes and \-. */
static void man_text(const char *line, char *text, size_t size)
{
	size_t k = strlen(text);
	const char *p = line[0] == '.' && strchr(line, ' ') ? strchr(line, ' ') + 1 : line;

	if (line[0] == '.' && !strchr(line, ' '))
		return;
	for (; *p && k < size - 2; p++) {
		if (*p == '"')
			continue;
		if (*p == '\\' && (p[1] == '-' || p[1] == '(')) {
			text[k++] = '-';
			p++;
		} else if (*p == '\\' && p[1] == 'f') {
			p += 2;
		} else {
			text[k++] = *p;
		}
	}
	text[k++] = ' ';
	text[k] = '\0';
}

/* The options of a man page: the line after each .TP in OPTIONS, and the
 * paragraph under it. */
static size_t man_options(const char *page, struct option_doc *opts, size_t max)
{
	char path[512], line[1024];
	bool in = false, tp = false;
	size_t n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/man/%s.1", SOURCE_DIR, page);
	f = fopen(path, "r");
	cr_assert_not_null(f, "no man page %s", path);
	while (fgets(line, sizeof(line), f)) {
		char spec[1024] = "";

		line[strcspn(line, "\n")] = '\0';
		if (!strncmp(line, ".SH", 3)) {
			in = strstr(line, "OPTIONS") != NULL;
			continue;
		}
		if (!in)
			continue;
		if (!strcmp(line, ".TP")) {
			tp = true;
			continue;
		}
		if (!tp) {
			if (n)
				man_text(line, opts[n - 1].text, sizeof(opts[0].text));
			continue;
		}
		tp = false;
		man_text(line, spec, sizeof(spec));
		if (spec[0] != '-')
			continue;
		cr_assert_lt(n, max);
		option_key(spec, opts[n].key, sizeof(opts[0].key));
		opts[n].text[0] = '\0';
		n++;
	}
	fclose(f);
	return n;
}

static const struct option_doc *find_option(const struct option_doc *opts, size_t n,
					    const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(opts[i].key, key))
			return &opts[i];
	return NULL;
}

/* Every option of every command: the same names and arguments in --help
 * and in the man page's OPTIONS, both ways, and the page says each default
 * figure --help gives. */
Test(cli, help_and_man_list_the_same_options)
{
	static struct option_doc help[64], man[64];

	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		size_t nh = help_options(commands[i], help, 64), nm;
		char page[64];

		snprintf(page, sizeof(page), "cprof-%s", commands[i]);
		nm = man_options(page, man, 64);
		cr_expect_gt(nh, 2, "cprof %s --help lists %zu options", commands[i], nh);
		for (size_t j = 0; j < nh; j++) {
			const struct option_doc *m = find_option(man, nm, help[j].key);

			cr_expect(m, "cprof %s: '%s' of --help is not in %s(1)", commands[i],
				  help[j].key, page);
			if (m && help[j].value[0])
				cr_expect(strstr(m->text, help[j].value),
					  "cprof %s: %s's default %s (--help) is not in %s(1):\n%s",
					  commands[i], help[j].key, help[j].value, page, m->text);
		}
		for (size_t j = 0; j < nm; j++)
			cr_expect(find_option(help, nh, man[j].key),
				  "cprof %s: '%s' of %s(1) is not in --help", commands[i],
				  man[j].key, page);
	}
}
