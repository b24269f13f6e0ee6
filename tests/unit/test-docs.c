/*
 * docs/measured.md is the one place for cprof's measured figures (issue 17);
 * these checks keep it, README and the tests from drifting apart. They
 * compare text only, never a timing:
 *
 *  - a row of docs/measured.md measured by a test (its last column names
 *    `tests/...c`, or says "same" after such a row) states in its "asserted"
 *    column what the test asserts, each bound as `NAME = VALUE`, where the
 *    test's source (or a header it includes) has `#define NAME VALUE`: the
 *    two values must be the same text, and no number may stand in that
 *    column outside such a span (a bound the check could not read);
 *  - every number in a figure of README's Measured table is in the figure
 *    column of one row of docs/measured.md measured by the same test,
 *    script or command (the first `code span` of README's last column,
 *    named in docs/measured.md's): README quotes docs/measured.md.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROWS 128
#define MAX_CELLS 8

struct row {
	char *cell[MAX_CELLS];
	size_t ncells;
	const char *source; /* the last cell, or the last one not "same..." above */
	int line;
};

struct table {
	char *text;
	struct row rows[MAX_ROWS];
	size_t nrows;
};

/* The file at @rel under the source tree, NUL-terminated; NULL if absent. */
static char *slurp(const char *rel)
{
	char path[4096];
	char *buf;
	long len;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", SOURCE_DIR, rel);
	f = fopen(path, "r");
	if (!f)
		return NULL;
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	len = ftell(f);
	cr_assert_geq(len, 0);
	rewind(f);
	buf = malloc((size_t)len + 1);
	cr_assert_not_null(buf);
	cr_assert_eq(fread(buf, 1, (size_t)len, f), (size_t)len, "%s: short read", path);
	buf[len] = '\0';
	fclose(f);
	return buf;
}

static char *trim(char *s)
{
	char *end;

	while (isspace((unsigned char)*s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	return s;
}

/* Splits the table line @s (NUL-terminated, modified) into cells at the
 * pipes outside `code spans`. */
static void split_row(char *s, struct row *r)
{
	bool code = false;
	char *start;

	if (*s == '|')
		s++;
	start = s;
	r->ncells = 0;
	for (; *s; s++) {
		if (*s == '`')
			code = !code;
		else if (*s == '|' && !code) {
			*s = '\0';
			cr_assert_lt(r->ncells, MAX_CELLS, "line %d: too many cells", r->line);
			r->cell[r->ncells++] = trim(start);
			start = s + 1;
		}
	}
	if (*trim(start)) {
		cr_assert_lt(r->ncells, MAX_CELLS, "line %d: too many cells", r->line);
		r->cell[r->ncells++] = trim(start);
	}
}

/*
 * The first table of @rel after the line @heading (NULL: from the top),
 * header and separator skipped. Each row's source is its last cell, or
 * the previous row's where that cell begins with "same".
 */
static void read_table(const char *rel, const char *heading, struct table *t)
{
	char *p, *nl;
	int line = 1;
	bool in_table = false, seen_heading = heading == NULL;

	t->text = slurp(rel);
	cr_assert_not_null(t->text, "cannot read %s", rel);
	t->nrows = 0;
	for (p = t->text; *p; p = nl + 1, line++) {
		nl = strchr(p, '\n');
		if (!nl)
			nl = p + strlen(p);
		bool last = *nl == '\0';

		*nl = '\0';
		if (!seen_heading) {
			seen_heading = !strcmp(p, heading);
		} else if (*p == '|') {
			struct row *r = &t->rows[t->nrows];

			if (!in_table) { /* the header */
				in_table = true;
			} else if (strncmp(p, "|---", 4)) {
				cr_assert_lt(t->nrows, MAX_ROWS, "%s: more than %d rows", rel,
					     MAX_ROWS);
				r->line = line;
				split_row(p, r);
				cr_assert_geq(r->ncells, 2, "%s:%d: not a table row", rel, line);
				r->source = r->cell[r->ncells - 1];
				if (!strncmp(r->source, "same", 4)) {
					cr_assert_gt(t->nrows, 0, "%s:%d: \"same\" as nothing", rel,
						     line);
					r->source = t->rows[t->nrows - 1].source;
				}
				t->nrows++;
			}
		} else if (in_table) {
			break;
		}
		if (last)
			break;
	}
	cr_assert_gt(t->nrows, 0, "%s: no table found after \"%s\"", rel,
		     heading ? heading : "the top");
}

static bool path_char(char c)
{
	return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.' || c == '/';
}

/* Whether @cell names the file @path as a whole word (scripts/bench-heap is
 * not named by scripts/bench-heap-truth). */
static bool names_path(const char *cell, const char *path)
{
	size_t n = strlen(path);

	for (const char *p = strstr(cell, path); p; p = strstr(p + 1, path))
		if ((p == cell || !path_char(p[-1])) && !path_char(p[n]))
			return true;
	return false;
}

/* The @i-th (from 0) path under tests/ or scripts/ that @cell names, in
 * @buf; false past the last. */
static bool nth_path(const char *cell, size_t i, char *buf, size_t size)
{
	for (const char *p = cell; *p; p++) {
		size_t n = 0;

		if ((p != cell && path_char(p[-1])) ||
		    (strncmp(p, "tests/", 6) && strncmp(p, "scripts/", 8)))
			continue;
		while (path_char(p[n]))
			n++;
		while (n && p[n - 1] == '.') /* a full stop ending a sentence */
			n--;
		if (i--)
			continue;
		cr_assert_lt(n, size);
		memcpy(buf, p, n);
		buf[n] = '\0';
		return true;
	}
	return false;
}

/* The first `code span` of @cell, in @buf; false if none. */
static bool first_span(const char *cell, char *buf, size_t size)
{
	const char *a = strchr(cell, '`'), *b = a ? strchr(a + 1, '`') : NULL;

	if (!b)
		return false;
	snprintf(buf, size, "%.*s", (int)(b - a - 1), a + 1);
	return true;
}

/* ---- bounds: `NAME = VALUE` against #define NAME VALUE ---------------- */

/* The value of `#define @name` in @src, in @buf; false if not defined there. */
static bool define_in(const char *src, const char *name, char *buf, size_t size)
{
	size_t n = strlen(name);

	for (const char *p = strstr(src, "#define "); p; p = strstr(p + 1, "#define ")) {
		const char *v = p + 8, *end;

		if ((p != src && p[-1] != '\n') || strncmp(v, name, n) ||
		    !isblank((unsigned char)v[n]))
			continue;
		v += n;
		end = strchr(v, '\n');
		if (!end)
			end = v + strlen(v);
		cr_assert_lt((size_t)(end - v), size);
		memcpy(buf, v, (size_t)(end - v));
		buf[end - v] = '\0';
		if (strstr(buf, "/*"))
			*strstr(buf, "/*") = '\0';
		memmove(buf, trim(buf), strlen(trim(buf)) + 1);
		return true;
	}
	return false;
}

/*
 * The value of @name in the test @path or a header it includes with
 * quotes (from its own folder or tests/helpers/), in @buf.
 */
static bool define_of(const char *path, const char *name, char *buf, size_t size)
{
	char *src = slurp(path);
	bool found;

	cr_assert_not_null(src, "docs/measured.md cites %s, which does not exist", path);
	found = define_in(src, name, buf, size);
	for (const char *p = strstr(src, "#include \""); p && !found;
	     p = strstr(p + 1, "#include \"")) {
		const char *h = p + 10, *q = strchr(h, '"'), *slash = strrchr(path, '/');
		char rel[512];
		char *hsrc;

		if (!q)
			break;
		snprintf(rel, sizeof(rel), "%.*s/%.*s", (int)(slash - path), path, (int)(q - h), h);
		hsrc = slurp(rel);
		if (!hsrc) {
			snprintf(rel, sizeof(rel), "tests/helpers/%.*s", (int)(q - h), h);
			hsrc = slurp(rel);
		}
		if (hsrc)
			found = define_in(hsrc, name, buf, size);
		free(hsrc);
	}
	free(src);
	return found;
}

/* Checks the `NAME = VALUE` spans of @asserted against the tests row @r
 * names; returns how many there were. Fails on a number outside them. */
static int check_bounds(const struct row *r, const char *asserted)
{
	int nbounds = 0;

	for (const char *p = asserted; *p; p++) {
		const char *end;
		char span[256], name[128], value[128], want[128], path[512];
		const char *eq;
		bool found = false;

		if (*p != '`') {
			cr_expect(!isdigit((unsigned char)*p),
				  "docs/measured.md:%d: a number outside `NAME = VALUE` in the "
				  "asserted column (\"%s\"): name the bound in the test with a "
				  "#define and quote it here",
				  r->line, asserted);
			if (isdigit((unsigned char)*p))
				return nbounds;
			continue;
		}
		end = strchr(p + 1, '`');
		cr_assert_not_null(end, "docs/measured.md:%d: unclosed ` in \"%s\"", r->line,
				   asserted);
		snprintf(span, sizeof(span), "%.*s", (int)(end - p - 1), p + 1);
		p = end;
		eq = strstr(span, " = ");
		if (!eq) {
			cr_expect(!strpbrk(span, "0123456789"),
				  "docs/measured.md:%d: `%s` has a number but is not "
				  "`NAME = VALUE`",
				  r->line, span);
			continue;
		}
		snprintf(name, sizeof(name), "%.*s", (int)(eq - span), span);
		snprintf(value, sizeof(value), "%s", eq + 3);
		nbounds++;
		for (size_t i = 0; nth_path(r->source, i, path, sizeof(path)) && !found; i++)
			if (!strncmp(path, "tests/", 6))
				found = define_of(path, name, want, sizeof(want));
		cr_expect(found,
			  "docs/measured.md:%d: %s is #defined in none of the tests of \"%s\"",
			  r->line, name, r->source);
		cr_expect(!found || !strcmp(value, want),
			  "docs/measured.md:%d: says %s = %s, the test has %s: update the row "
			  "(and the figure, if the test changed)",
			  r->line, name, value, want);
	}
	return nbounds;
}

Test(docs, measured_rows_state_the_bounds_their_tests_assert)
{
	struct table *t = calloc(1, sizeof(*t));
	size_t checked = 0;
	int bounds = 0;

	cr_assert_not_null(t);
	read_table("docs/measured.md", NULL, t);
	for (size_t i = 0; i < t->nrows; i++) {
		const struct row *r = &t->rows[i];
		char path[512];
		bool by_test = false;

		cr_expect_eq(r->ncells, 4, "docs/measured.md:%d: %zu cells, want 4 (what, figure, "
			     "asserted, measured by)", r->line, r->ncells);
		if (r->ncells != 4)
			continue;
		for (size_t k = 0; nth_path(r->source, k, path, sizeof(path)); k++)
			by_test |= !strncmp(path, "tests/", 6);
		if (!by_test)
			continue;
		cr_expect(strcmp(r->cell[2], "") && strcmp(r->cell[2], "-"),
			  "docs/measured.md:%d: measured by a test, but says nothing of what the "
			  "test asserts", r->line);
		bounds += check_bounds(r, r->cell[2]);
		checked++;
	}
	cr_log_info("%zu rows of docs/measured.md measured by tests, %d bounds checked", checked,
		    bounds);
	cr_expect_gt(checked, 10);
	free(t->text);
	free(t);
}

/* ---- README's figures come from docs/measured.md ------------------------ */

/* Whether the digit at @s[@i] is a man page's section, as in cprof-wall(1). */
static bool man_section(const char *s, size_t i)
{
	return i >= 2 && s[i - 1] == '(' && s[i + 1] == ')' &&
	       (isalnum((unsigned char)s[i - 2]) || s[i - 2] == '-');
}

/* The next number of @s from *@pos (digits with inner . or ,, not part of
 * a word such as x86 or p90, nor a man page's section) in @buf; false at
 * the end. */
static bool next_number(const char *s, size_t *pos, char *buf, size_t size)
{
	for (size_t i = *pos; s[i]; i++) {
		size_t n = 0;

		if (!isdigit((unsigned char)s[i]) ||
		    (i && (isalnum((unsigned char)s[i - 1]) || s[i - 1] == '_')) ||
		    man_section(s, i))
			continue;
		while (isdigit((unsigned char)s[i + n]) ||
		       ((s[i + n] == '.' || s[i + n] == ',') &&
			isdigit((unsigned char)s[i + n + 1])))
			n++;
		cr_assert_lt(n, size);
		memcpy(buf, s + i, n);
		buf[n] = '\0';
		*pos = i + n;
		return true;
	}
	return false;
}

static bool has_number(const char *s, const char *number)
{
	char buf[64];
	size_t pos = 0;

	while (next_number(s, &pos, buf, sizeof(buf)))
		if (!strcmp(buf, number))
			return true;
	return false;
}

/* How many numbers of @figure are missing from @cell. */
static int missing_numbers(const char *figure, const char *cell)
{
	char buf[64];
	size_t pos = 0;
	int missing = 0;

	while (next_number(figure, &pos, buf, sizeof(buf)))
		missing += !has_number(cell, buf);
	return missing;
}

Test(docs, readme_figures_are_those_of_docs_measured)
{
	struct table *readme = calloc(1, sizeof(*readme)), *docs = calloc(1, sizeof(*docs));

	cr_assert(readme && docs);
	read_table("README.md", "## Measured", readme);
	read_table("docs/measured.md", NULL, docs);
	for (size_t i = 0; i < readme->nrows; i++) {
		const struct row *r = &readme->rows[i];
		const struct row *best = NULL;
		int best_missing = 1 << 30;
		char key[512];

		cr_expect_eq(r->ncells, 3, "README.md:%d: %zu cells, want 3 (what, figure, "
			     "measured by)", r->line, r->ncells);
		if (r->ncells != 3)
			continue;
		if (!first_span(r->source, key, sizeof(key))) {
			cr_expect(false, "README.md:%d: names no test, script or command in `code`",
				  r->line);
			continue;
		}
		for (size_t k = 0; k < docs->nrows; k++) {
			const struct row *d = &docs->rows[k];
			int m;

			if (d->ncells < 2 || !names_path(d->source, key))
				continue;
			m = missing_numbers(r->cell[1], d->cell[1]);
			if (m < best_missing) {
				best_missing = m;
				best = d;
			}
		}
		cr_expect_not_null(best,
				   "README.md:%d: no row of docs/measured.md is measured by %s",
				   r->line, key);
		cr_expect(!best || best_missing == 0,
			  "README.md:%d: \"%s\" is not what docs/measured.md says (nearest: line "
			  "%d, \"%s\"): copy the figure from there",
			  r->line, r->cell[1], best ? best->line : 0, best ? best->cell[1] : "");
	}
	free(readme->text);
	free(docs->text);
	free(readme);
	free(docs);
}
