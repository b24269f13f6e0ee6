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

static const char *commands[] = { "cpu",	 "wall",	 "threads", "heap",  "block",
				  "mutex", "threadcreate", "record",  "serve", "view" };

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
		TH_SKIP_MISSING("no /bin/bash");
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
		/* -p $(pidof NAME) unquoted: NAME is several processes, or none. */
		{ { "heap", "-p", "1", "2", NULL }, "pick one, e.g. -p \"$(pidof -s NAME)\"" },
		{ { "cpu", "-p", "-d", "30s", NULL }, "it found no process: is NAME running?" },
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

/* ---- the output rule: cprof(1) OUTPUT, for every command --------------- */

enum written { W_NONE, W_PPROF, W_SVG, W_TOP, W_FOLDED, W_TEXT };

static const char *const written_names[] = { "nothing", "pprof", "svg", "the top table",
					      "folded stacks", "Go's text" };

/* Folded stacks of an empty profile are nothing (threadcreate's, heap's
 * of a window without a sample): that matches folded too. */
static bool kind_matches(enum written got, enum written want)
{
	return got == want || (want == W_FOLDED && got == W_NONE);
}

/* Every line "FRAME;FRAME... COUNT", and no comment or header of Go's
 * text ("goroutine profile: total 3"): a window that sampled little may
 * hold single frames only ("[unsampled: ...] N"), without a ';'. */
static bool is_folded(const uint8_t *buf, size_t len)
{
	const char *p = (const char *)buf, *end = p + len;

	if (memchr(buf, '#', len) || memmem(buf, len, " profile: total ", 16))
		return false;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *e = nl ? nl : end, *d = e;

		while (d > p && d[-1] >= '0' && d[-1] <= '9')
			d--;
		if (d == e || d - p < 2 || d[-1] != ' ')
			return false;
		p = e + 1;
	}
	return true;
}

/* What @buf holds, by its first bytes. */
static enum written written_kind(const uint8_t *buf, size_t len)
{
	if (!len)
		return W_NONE;
	if (th_is_gzip(buf, len))
		return W_PPROF;
	if (memmem(buf, len, "<svg", 4))
		return W_SVG;
	if (memmem(buf, len, "      flat  flat%", 17))
		return W_TOP;
	if (is_folded(buf, len))
		return W_FOLDED;
	return W_TEXT;
}

struct rule_row {
	const char *args[7];
	const char *file;    /* what appears in the working directory, "%s" the command */
	enum written in_file; /* ... holding this */
	enum written on_stdout;
	bool table_on_stderr; /* --top 3's table after writing */
	bool debug;	      /* a row of --debug: only for commands with Go's text */
};

static const struct rule_row rule_rows[] = {
	{ { NULL }, "%s.pb.gz", W_PPROF, W_NONE, false, false },
	{ { "-o", "x.pb.gz", NULL }, "x.pb.gz", W_PPROF, W_NONE, false, false },
	{ { "-o", "x.out", NULL }, "x.out", W_PPROF, W_NONE, false, false },
	{ { "-o", "x.svg", NULL }, "x.svg", W_SVG, W_NONE, false, false },
	{ { "-o", "x.txt", NULL }, "x.txt", W_TOP, W_NONE, false, false },
	{ { "-o", "-", NULL }, NULL, W_NONE, W_PPROF, false, false },
	{ { "--format", "folded", NULL }, NULL, W_NONE, W_FOLDED, false, false },
	{ { "--format", "svg", "-o", "x.pb.gz", NULL }, "x.pb.gz", W_SVG, W_NONE, false, false },
	{ { "--format", "pprof", NULL }, "%s.pb.gz", W_PPROF, W_NONE, false, false },
	{ { "--top", "3", NULL }, "%s.pb.gz", W_PPROF, W_NONE, true, false },
	{ { "--format", "top", "--top", "3", NULL }, NULL, W_NONE, W_TOP, false, false },
	{ { "--top", "3", "-o", "x.folded", NULL }, "x.folded", W_FOLDED, W_NONE, true, false },
	{ { "--debug", "1", NULL }, NULL, W_NONE, W_TEXT, false, true },
	{ { "--debug", "1", "-o", "x.txt", NULL }, "x.txt", W_TEXT, W_NONE, false, true },
	{ { "--debug", "0", NULL }, "%s.pb.gz", W_PPROF, W_NONE, false, true },
};

/* The only entry of @dir, "" when it is empty; fails on more. */
static void only_entry(const char *dir, char *name, size_t size)
{
	int n = th_dir_entries(dir);

	name[0] = '\0';
	cr_assert_leq(n, 1, "%d files written in %s", n, dir);
	if (n == 1) {
		char cmd[4300];
		FILE *f;

		snprintf(cmd, sizeof(cmd), "ls -A '%s'", dir);
		f = popen(cmd, "r");
		cr_assert_not_null(f);
		if (!fgets(name, (int)size, f))
			name[0] = '\0';
		pclose(f);
		name[strcspn(name, "\n")] = '\0';
	}
}

static void check_rule_row(const char *cmd, const struct rule_row *row, pid_t target, bool debug)
{
	const char *argv[24];
	char line[256] = "", want_file[64] = "", got[256], path[4400];
	const char *dir = th_tmp_dir("rule");
	size_t n = 0;
	struct th_run r;

	argv[n++] = cmd;
	argv[n++] = "-p";
	argv[n++] = th_pid_str(target);
	if (strcmp(cmd, "threads")) {
		argv[n++] = "-d";
		argv[n++] = "200ms";
	}
	for (size_t i = 0; row->args[i]; i++) {
		argv[n++] = row->args[i];
		snprintf(line + strlen(line), sizeof(line) - strlen(line), " %s", row->args[i]);
	}
	argv[n] = NULL;
	cr_assert_eq(chdir(dir), 0);
	th_run_cprof_ex(&r, 60000, 0, 0, argv);
	if (row->debug && !debug) {
		/* cpu and wall have no text of Go's. */
		cr_expect_eq(r.exit_code, 64, "cprof %s%s: exit %d", cmd, line, r.exit_code);
		th_run_release(&r);
		return;
	}
	cr_assert_eq(r.exit_code, 0, "cprof %s%s: exit %d\n%s", cmd, line, r.exit_code, r.err);
	if (row->file)
		snprintf(want_file, sizeof(want_file), row->file, cmd);
	only_entry(dir, got, sizeof(got));
	cr_expect_str_eq(got, want_file, "cprof %s%s wrote '%s', not '%s'", cmd, line, got,
			 want_file);
	if (got[0] && !strcmp(got, want_file)) {
		uint8_t *buf;
		size_t len;
		enum written k;

		snprintf(path, sizeof(path), "%s/%s", dir, got);
		cr_assert_eq(th_read_file(path, &buf, &len), 0);
		k = written_kind(buf, len);
		cr_expect(kind_matches(k, row->in_file), "cprof %s%s: %s holds %s, not %s", cmd, line, got,
			     written_names[k], written_names[row->in_file]);
		free(buf);
	}
	cr_expect(kind_matches(written_kind((const uint8_t *)r.out, r.out_len), row->on_stdout),
		  "cprof %s%s: stdout holds %s, not %s", cmd, line,
		  written_names[written_kind((const uint8_t *)r.out, r.out_len)],
		  written_names[row->on_stdout]);
	cr_expect_eq(strstr(r.err, "      flat  flat%") != NULL, row->table_on_stderr,
		     "cprof %s%s: the table on stderr %s:\n%s", cmd, line,
		     row->table_on_stderr ? "missing" : "too", r.err);
	th_run_release(&r);
}

/* cprof(1)'s OUTPUT table, row by row, for every collecting command: what
 * is written where. */
Test(cli, output_rule_of_every_command, .timeout = 600)
{
	/*
	 * Every row for one command of each run_ops (cpu, threads, heap, and
	 * block for the contention commands); a command that shares its
	 * sibling's ops takes the rows of each kind of outcome: the default
	 * file, a view by extension, stdout, --top's table, Go's text.
	 */
	static const struct {
		const char *name;
		bool debug; /* has Go's text layouts */
		bool all_rows;
	} cmds[] = { { "cpu", false, true },   { "wall", false, false },
		     { "threads", true, true }, { "heap", true, true },
		     { "block", true, true },   { "mutex", true, false },
		     { "threadcreate", true, false } };
	static const size_t some_rows[] = { 0, 3, 5, 9, 12 };
	pid_t target;

	if (geteuid() != 0)
		TH_SKIP_MISSING("threads and the agent's commands need ptrace: run as root");
	th_require_perf(false);
	/* demo's workers contend for its queue and allocate requests; paced
	 * to half a CPU, which gives every kind its events in 200 ms and
	 * leaves the CPUs to the 75 runs of cprof. */
	target = TH_SPAWN("demo", "600", "2", "2000");
	for (size_t c = 0; c < sizeof(cmds) / sizeof(cmds[0]); c++) {
		size_t n = cmds[c].all_rows ? sizeof(rule_rows) / sizeof(rule_rows[0])
					    : sizeof(some_rows) / sizeof(some_rows[0]);

		for (size_t i = 0; i < n; i++)
			check_rule_row(cmds[c].name, &rule_rows[cmds[c].all_rows ? i : some_rows[i]],
				       target, cmds[c].debug);
	}
	th_kill(target);
}

/* The same table for cprof view, whose input is a file. */
Test(cli, output_rule_of_view, .timeout = 120)
{
	static const struct {
		const char *args[6];
		const char *file;
		enum written in_file, on_stdout;
		bool table_on_stderr;
	} rows[] = {
		{ { NULL }, NULL, W_NONE, W_TOP, false },
		{ { "--top", "3", NULL }, NULL, W_NONE, W_TOP, false },
		{ { "-o", "x.pb.gz", NULL }, "x.pb.gz", W_PPROF, W_NONE, false },
		{ { "-o", "x.out", NULL }, "x.out", W_PPROF, W_NONE, false },
		{ { "-o", "x.svg", NULL }, "x.svg", W_SVG, W_NONE, false },
		{ { "-o", "x.txt", "--top", "3", NULL }, "x.txt", W_TOP, W_NONE, false },
		{ { "-o", "-", NULL }, NULL, W_NONE, W_PPROF, false },
		{ { "--format", "folded", NULL }, NULL, W_NONE, W_FOLDED, false },
		{ { "--folded", "--top", "3", NULL }, NULL, W_NONE, W_FOLDED, true },
		{ { "--format", "svg", "-o", "x.pb.gz", NULL }, "x.pb.gz", W_SVG, W_NONE, false },
		{ { "--svg", "x.svg", NULL }, "x.svg", W_SVG, W_NONE, false },
	};
	const char *profile = th_tmp_path("threads.pb.gz");
	pid_t target = TH_SPAWN("busy", "2", "60");
	struct th_run r;

	if (geteuid() != 0)
		TH_SKIP_MISSING("threads needs ptrace: run as root");
	TH_CPROF(&r, 30000, "threads", "-p", th_pid_str(target), "-o", profile, "-q");
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	th_run_release(&r);
	th_kill(target);
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const char *argv[12], *dir = th_tmp_dir("view-rule");
		char line[256] = "", got[256], path[4400];
		size_t n = 0;

		argv[n++] = "view";
		argv[n++] = profile;
		for (size_t j = 0; rows[i].args[j]; j++) {
			argv[n++] = rows[i].args[j];
			snprintf(line + strlen(line), sizeof(line) - strlen(line), " %s",
				 rows[i].args[j]);
		}
		argv[n] = NULL;
		cr_assert_eq(chdir(dir), 0);
		th_run_cprof_ex(&r, 30000, 0, 0, argv);
		cr_assert_eq(r.exit_code, 0, "cprof view%s: %s", line, r.err);
		only_entry(dir, got, sizeof(got));
		cr_expect_str_eq(got, rows[i].file ? rows[i].file : "", "cprof view%s wrote '%s'",
				 line, got);
		if (got[0]) {
			uint8_t *buf;
			size_t len;

			snprintf(path, sizeof(path), "%s/%s", dir, got);
			cr_assert_eq(th_read_file(path, &buf, &len), 0);
			cr_expect(kind_matches(written_kind(buf, len), rows[i].in_file),
				     "cprof view%s: %s holds %s", line, got,
				     written_names[written_kind(buf, len)]);
			if (rows[i].in_file == W_TOP)
				cr_expect(memmem(buf, len, "Showing top 3 nodes", 19),
					  "cprof view%s: not 3 rows", line);
			free(buf);
		}
		cr_expect(kind_matches(written_kind((const uint8_t *)r.out, r.out_len),
				       rows[i].on_stdout),
			  "cprof view%s: stdout holds %s", line,
			  written_names[written_kind((const uint8_t *)r.out, r.out_len)]);
		if (rows[i].on_stdout == W_TOP && !strcmp(line, " --top 3"))
			cr_expect(strstr(r.out, "Showing top 3 nodes"), "%s", r.out);
		cr_expect_eq(strstr(r.err, "Showing top 3 nodes") != NULL,
			     rows[i].table_on_stderr, "cprof view%s: stderr:\n%s", line, r.err);
		if (rows[i].table_on_stderr)
			cr_expect(!strstr(r.out, "flat%"), "cprof view%s: the table on stdout", line);
		th_run_release(&r);
	}
}
