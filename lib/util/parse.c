#include "util/parse.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

struct duration_unit {
	const char *name;
	uint64_t ns;
};

/* Longest names first: "ms" must not be read as "m" followed by garbage. */
static const struct duration_unit units[] = {
	{ "ns", 1ULL },
	{ "us", 1000ULL },
	{ "\xc2\xb5s", 1000ULL }, /* U+00B5 micro sign, as Go accepts */
	{ "\xce\xbcs", 1000ULL }, /* U+03BC greek mu */
	{ "ms", 1000000ULL },
	{ "s", 1000000000ULL },
	{ "m", 60ULL * 1000000000ULL },
	{ "h", 3600ULL * 1000000000ULL },
};

static const struct duration_unit *match_unit(const char *s, size_t *ret_len)
{
	const struct duration_unit *best = NULL;
	size_t best_len = 0;

	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		size_t len = strlen(units[i].name);

		if (len > best_len && !strncmp(s, units[i].name, len)) {
			best = &units[i];
			best_len = len;
		}
	}
	*ret_len = best_len;
	return best;
}

/* Adds @whole.@frac (frac given as digits/scale) times @unit to *acc, checking overflow. */
static int add_term(uint64_t *acc, uint64_t whole, uint64_t frac, uint64_t scale, uint64_t unit)
{
	uint64_t v;

	if (whole && unit > UINT64_MAX / whole)
		return -ERANGE;
	v = whole * unit;
	if (frac) {
		/* frac < scale <= 1e18 and unit <= 3.6e12: do it in long double. */
		long double f = (long double)frac * (long double)unit / (long double)scale;

		if ((long double)UINT64_MAX - (long double)v < f)
			return -ERANGE;
		v += (uint64_t)f;
	}
	if (UINT64_MAX - *acc < v)
		return -ERANGE;
	*acc += v;
	return 0;
}

int parse_duration(const char *s, uint64_t *ret_ns)
{
	uint64_t total = 0;
	bool any = false;

	if (!s || !*s)
		return -EINVAL;
	if (!strcmp(s, "0")) /* Go accepts a bare 0; it is 0 nanoseconds. */
		return *ret_ns = 0, 0;
	while (*s) {
		uint64_t whole = 0, frac = 0, scale = 1;
		bool digits = false;
		const struct duration_unit *u;
		size_t ulen;
		int r;

		while (isdigit((unsigned char)*s)) {
			if (whole > (UINT64_MAX - 9) / 10)
				return -ERANGE;
			whole = whole * 10 + (uint64_t)(*s++ - '0');
			digits = true;
		}
		if (*s == '.') {
			s++;
			while (isdigit((unsigned char)*s)) {
				/* Beyond 18 fractional digits nothing changes at ns resolution. */
				if (scale < 1000000000000000000ULL) {
					frac = frac * 10 + (uint64_t)(*s - '0');
					scale *= 10;
				}
				s++;
				digits = true;
			}
		}
		if (!digits)
			return -EINVAL;
		u = match_unit(s, &ulen);
		if (!u)
			return -EINVAL;
		s += ulen;
		r = add_term(&total, whole, frac, scale, u->ns);
		if (r < 0)
			return r;
		any = true;
	}
	if (!any)
		return -EINVAL;
	*ret_ns = total;
	return 0;
}

void format_duration(uint64_t ns, char *buf, size_t size)
{
	uint64_t h, m, s;
	int n = 0;

	if (ns == 0) {
		snprintf(buf, size, "0s");
		return;
	}
	if (ns < 1000ULL) {
		snprintf(buf, size, "%lluns", (unsigned long long)ns);
		return;
	}
	/* Below 999.5us: %.3g would round 999.5us up to "1e+03us". */
	if (ns < 999500ULL) {
		snprintf(buf, size, "%.3gus", (double)ns / 1e3);
		return;
	}
	if (ns < 1000000000ULL) {
		snprintf(buf, size, "%.4gms", (double)ns / 1e6);
		return;
	}
	s = ns / 1000000000ULL;
	h = s / 3600;
	m = (s / 60) % 60;
	if (h)
		n = snprintf(buf, size, "%lluh", (unsigned long long)h);
	if ((h || m) && n >= 0 && (size_t)n < size)
		n += snprintf(buf + n, size - n, "%llum", (unsigned long long)m);
	/* Less than a millisecond past the minute would be "1m1e-09s": 0s. */
	if (n >= 0 && (size_t)n < size)
		snprintf(buf + n, size - n, "%.4gs",
			 ns % 60000000000ULL < 1000000ULL
				 ? 0.0
				 : (double)(ns % 60000000000ULL) / 1e9);
}

int parse_int64(const char *s, int64_t min, int64_t max, int64_t *ret)
{
	bool neg = false;
	uint64_t v = 0;
	int64_t r;

	if (!s || !*s)
		return -EINVAL;
	if (*s == '-' || *s == '+')
		neg = *s++ == '-';
	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		if (!isdigit((unsigned char)*s))
			return -EINVAL;
		if (v > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*s - '0');
		if (v > (uint64_t)INT64_MAX + 1)
			return -ERANGE;
	}
	if (!neg && v > (uint64_t)INT64_MAX)
		return -ERANGE;
	r = neg ? (int64_t)(0 - v) : (int64_t)v;
	if (r < min || r > max)
		return -ERANGE;
	*ret = r;
	return 0;
}

static int size_unit(const char *u, unsigned *ret_shift)
{
	static const struct {
		const char *name;
		unsigned shift;
	} size_units[] = {
		{ "", 0 },   { "b", 0 },  { "k", 10 },  { "kb", 10 }, { "kib", 10 }, { "m", 20 },
		{ "mb", 20 }, { "mib", 20 }, { "g", 30 }, { "gb", 30 }, { "gib", 30 },
	};

	for (size_t i = 0; i < sizeof(size_units) / sizeof(size_units[0]); i++)
		if (strcasecmp(u, size_units[i].name) == 0) {
			*ret_shift = size_units[i].shift;
			return 0;
		}
	return -EINVAL;
}

int parse_size(const char *s, uint64_t *ret)
{
	uint64_t v = 0;
	unsigned shift;
	const char *p = s;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		if (v > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (size_unit(p, &shift) < 0)
		return -EINVAL;
	if (v > ((uint64_t)INT64_MAX >> shift))
		return -ERANGE;
	*ret = v << shift;
	return 0;
}

int parse_pid(const char *s, pid_t *ret)
{
	int64_t v;
	int r = parse_int64(s, 1, 4194304, &v);

	if (r < 0)
		return r;
	*ret = (pid_t)v;
	return 0;
}
