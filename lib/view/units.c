/* Values and percentages written the way pprof writes them (its
 * internal/measurement package), so that a cprof view and pprof agree
 * character for character. */
#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"
#include "view-private.h"

struct unit {
	const char *name;
	const char *aliases[4];
	double factor;
};

struct unit_type {
	const struct unit *units;
	size_t n;
	const struct unit *fallback; /* default unit */
};

static const struct unit byte_units[] = {
	{ "B", { "b", "byte" }, 1 },
	{ "kB", { "kb", "kbyte", "kilobyte" }, 1024.0 },
	{ "MB", { "mb", "mbyte", "megabyte" }, 1048576.0 },
	{ "GB", { "gb", "gbyte", "gigabyte" }, 1073741824.0 },
	{ "TB", { "tb", "tbyte", "terabyte" }, 1099511627776.0 },
	{ "PB", { "pb", "pbyte", "petabyte" }, 1125899906842624.0 },
};

static const struct unit time_units[] = {
	{ "ns", { "ns", "nanosecond" }, 1 },
	{ "us", { "μs", "us", "microsecond" }, 1e3 },
	{ "ms", { "ms", "millisecond" }, 1e6 },
	{ "s", { "s", "sec", "second" }, 1e9 },
	{ "hrs", { "hour", "hr" }, 3600e9 },
};

static const struct unit_type unit_types[] = {
	{ byte_units, ARRAY_SIZE(byte_units), &byte_units[0] },
	{ time_units, ARRAY_SIZE(time_units), &time_units[3] },
};

/* pprof's sniffUnit: lower case, a plural "s" dropped from long names. */
static const struct unit *sniff(const struct unit_type *ut, const char *name)
{
	char lower[64];
	size_t len = 0;

	for (; name[len] && len < sizeof(lower) - 1; len++)
		lower[len] = (char)tolower((unsigned char)name[len]);
	lower[len] = '\0';
	if (len > 2 && lower[len - 1] == 's')
		lower[len - 1] = '\0';
	for (size_t i = 0; i < ut->n; i++)
		for (size_t a = 0; a < ARRAY_SIZE(ut->units[i].aliases) && ut->units[i].aliases[a]; a++)
			if (!strcmp(lower, ut->units[i].aliases[a]))
				return &ut->units[i];
	return NULL;
}

/* The largest unit that @v (in base units) reaches, else the default. */
static const struct unit *auto_unit(const struct unit_type *ut, double v)
{
	const struct unit *best = NULL;

	for (size_t i = 0; i < ut->n; i++)
		if ((!best || ut->units[i].factor >= best->factor) && v / ut->units[i].factor >= 1.0)
			best = &ut->units[i];
	return best ? best : ut->fallback;
}

/* pprof's Scale: @v of @from in @to ("auto"/"minimum": the best unit). */
static double scale(int64_t v, const char *from, const char *to, const char **ret_unit)
{
	if (v < 0 && v != INT64_MIN)
		return -scale(-v, from, to, ret_unit);
	for (size_t i = 0; i < ARRAY_SIZE(unit_types); i++) {
		const struct unit_type *ut = &unit_types[i];
		const struct unit *f = sniff(ut, from), *t;
		double base;

		if (!f)
			continue;
		base = (double)v * f->factor;
		if (!strcmp(to, "auto") || !strcmp(to, "minimum"))
			t = auto_unit(ut, base);
		else
			t = sniff(ut, to) ? sniff(ut, to) : ut->fallback;
		*ret_unit = t->name;
		return base / t->factor;
	}
	if (!strcmp(to, "count") || !strcmp(to, "sample") || !strcmp(to, "unit") ||
	    !strcmp(to, "minimum") || !strcmp(to, "auto"))
		*ret_unit = "";
	else
		*ret_unit = to;
	return (double)v;
}

void view_format_value(int64_t v, const char *unit, const char *out_unit, char *buf,
		       size_t size)
{
	const char *u;
	double x = scale(v, unit ? unit : "", out_unit ? out_unit : "auto", &u);
	size_t len;

	snprintf(buf, size, "%.2f", x);
	len = strlen(buf);
	if (len > 3 && !strcmp(buf + len - 3, ".00"))
		buf[len - 3] = '\0';
	if (!strcmp(buf, "0") || !strcmp(buf, "-0")) {
		snprintf(buf, size, "0");
		return;
	}
	len = strlen(buf);
	snprintf(buf + len, size - len, "%s", u);
}

void view_format_percent(int64_t v, int64_t total, char *buf, size_t size)
{
	double ratio = total ? fabs((double)v / (double)total) * 100 : 0;

	if (ratio >= 99.95 && ratio <= 100.05)
		snprintf(buf, size, "  100%%");
	else if (ratio >= 1.0)
		snprintf(buf, size, "%5.2f%%", ratio);
	else
		snprintf(buf, size, "%5.2g%%", ratio);
}

const char *view_output_unit(const char *unit, const int64_t *values, size_t n, int64_t total,
			     char *buf, size_t size)
{
	int64_t min = 0, max = total;
	const char *min_unit, *max_unit, *u;

	/* No row (a filter kept nothing): pprof keeps "minimum", each value in
	 * its own best unit. */
	if (n == 0)
		return "auto";
	for (size_t i = 0; i < n; i++) {
		int64_t v = abs_saturated(values[i]);

		if (v > 0 && (min == 0 || v < min))
			min = v;
	}
	if (min == 0)
		min = max;
	scale(min, unit, "minimum", &min_unit);
	scale(max, unit, "minimum", &max_unit);
	u = min_unit;
	if (strcmp(min_unit, max_unit) && (double)min * 100 < (double)max)
		scale(min > INT64_MAX / 100 ? INT64_MAX : 100 * min, unit, "minimum", &u);
	if (!*u)
		return unit;
	snprintf(buf, size, "%s", u);
	return buf;
}
