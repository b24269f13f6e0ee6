/*
 * The parsers of what users type (util/parse.h), each against a reference
 * written here from the header's contract, with exact 128-bit arithmetic:
 *
 * - parse_duration(): the grammar "<decimal><unit>"+ (or a bare "0"). For a
 *   string of that grammar the value must be exact for integers and within
 *   1 ns per term when there are fractions (the parser computes fractions in
 *   long double, as Go does in float64). Values up to INT64_MAX ns ("~292
 *   years", as the header says) must be accepted; beyond UINT64_MAX must be
 *   -ERANGE; in between either is fine (the code accepts up to UINT64_MAX).
 *   A string outside the grammar must fail.
 * - format_duration() of what parsed, and of any u64 from the input: it must
 *   fit any buffer, and print what parse_duration() reads back to about the
 *   same value.
 * - parse_int64() for a few [min, max] ranges, and parse_pid().
 * Failures must leave the output untouched.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "util/parse.h"

typedef unsigned __int128 u128;

#define SENTINEL 0x5a5a5a5a5a5a5a5aULL
#define CAP ((u128)1 << 100) /* saturate: anything this big is out of range anyway */

static const struct {
	const char *name;
	uint64_t ns;
} ref_units[] = {
	{ "ns", 1ULL },
	{ "us", 1000ULL },
	{ "\xc2\xb5s", 1000ULL },
	{ "\xce\xbcs", 1000ULL },
	{ "ms", 1000000ULL },
	{ "s", 1000000000ULL },
	{ "m", 60000000000ULL },
	{ "h", 3600000000000ULL },
};

/* Go's way of reading a unit: the longest run of characters that are neither
 * digits nor '.', which must then be one of the names. */
static bool ref_unit(const char **s, uint64_t *ret)
{
	const char *p = *s;
	size_t len;

	while (*p && !(*p >= '0' && *p <= '9') && *p != '.')
		p++;
	len = (size_t)(p - *s);
	for (size_t i = 0; i < sizeof(ref_units) / sizeof(ref_units[0]); i++) {
		if (strlen(ref_units[i].name) == len && !memcmp(*s, ref_units[i].name, len)) {
			*ret = ref_units[i].ns;
			*s = p;
			return true;
		}
	}
	return false;
}

/*
 * Returns false when @s is outside the grammar. Otherwise *ret_exact is the
 * exact value (saturated at CAP) with fractions truncated per term, and
 * *ret_terms the number of terms with a fraction.
 */
static bool ref_duration(const char *s, u128 *ret_exact, unsigned *ret_fracs)
{
	u128 total = 0;
	unsigned fracs = 0;

	if (!*s)
		return false;
	if (!strcmp(s, "0")) {
		*ret_exact = 0;
		*ret_fracs = 0;
		return true;
	}
	while (*s) {
		u128 whole = 0, frac = 0, scale = 1, term;
		bool digits = false, has_frac = false;
		uint64_t unit;

		for (; *s >= '0' && *s <= '9'; s++, digits = true)
			whole = whole > CAP ? CAP + 1 : whole * 10 + (u128)(*s - '0');
		if (*s == '.') {
			for (s++; *s >= '0' && *s <= '9'; s++, digits = true) {
				if (scale <= (u128)1000000000000000000ULL * 1000) {
					frac = frac * 10 + (u128)(*s - '0');
					scale *= 10;
				}
				has_frac = true;
			}
		}
		if (!digits || !ref_unit(&s, &unit))
			return false;
		if (has_frac && frac)
			fracs++;
		term = whole > CAP / unit ? CAP : whole * unit + frac * unit / scale;
		total = total + term > CAP ? CAP : total + term;
	}
	*ret_exact = total;
	*ret_fracs = fracs;
	return true;
}

/* What format_duration() prints must read back (it rounds to 3 or 4 digits),
 * and fit any buffer: truncated, terminated, never overrun (ASan watches). */
static void check_format(uint64_t ns)
{
	char buf[64];
	uint64_t back = SENTINEL;
	long double a = (long double)ns, b, diff;
	int r;

	for (size_t size = 1; size <= 8; size++) {
		char *small = malloc(size);

		if (!small)
			return;
		format_duration(ns, small, size);
		FUZZ_CHECK(strnlen(small, size) < size, "format_duration(%llu) in %zu bytes",
			   (unsigned long long)ns, size);
		free(small);
	}
	format_duration(ns, buf, sizeof(buf));
	/* Past ~292 years, rounding up can leave uint64_t: not worth a rule. */
	if (ns > (uint64_t)INT64_MAX)
		return;
	r = parse_duration(buf, &back);
	FUZZ_CHECK(r == 0, "format_duration(%llu) = \"%s\" does not parse back (%d)",
		   (unsigned long long)ns, buf, r);
	b = (long double)back;
	diff = a > b ? a - b : b - a;
	FUZZ_CHECK(diff <= a * 0.006L + 1, "format_duration(%llu) = \"%s\" reads as %llu",
		   (unsigned long long)ns, buf, (unsigned long long)back);
}

static void check_duration(const char *s)
{
	uint64_t ns = SENTINEL;
	u128 exact;
	unsigned fracs;
	bool valid = ref_duration(s, &exact, &fracs);
	int r = parse_duration(s, &ns);

	FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ERANGE, "parse_duration(\"%s\") = %d", s, r);
	if (r < 0)
		FUZZ_CHECK(ns == SENTINEL, "parse_duration(\"%s\") = %d clobbered the output", s,
			   r);
	if (!valid) {
		FUZZ_CHECK(r < 0, "parse_duration(\"%s\") accepted a string outside the grammar",
			   s);
		return;
	}
	if (exact + fracs <= (u128)INT64_MAX)
		FUZZ_CHECK(r == 0, "parse_duration(\"%s\") = %d, expected ~%llu ns", s, r,
			   (unsigned long long)exact);
	if (exact > (u128)UINT64_MAX + fracs)
		FUZZ_CHECK(r == -ERANGE, "parse_duration(\"%s\") = %d (%llu ns), expected -ERANGE",
			   s, r, (unsigned long long)ns);
	FUZZ_CHECK(r != -EINVAL, "parse_duration(\"%s\") = -EINVAL for a valid duration", s);
	if (r < 0)
		return;
	FUZZ_CHECK((u128)ns + fracs >= exact && (u128)ns <= exact + fracs,
		   "parse_duration(\"%s\") = %llu ns, expected %llu (+-%u)", s,
		   (unsigned long long)ns, (unsigned long long)exact, fracs);

	check_format(ns);
}

/*
 * Decimal with an optional sign, nothing else; exact value saturated at CAP.
 * The digits read before anything else are in *ret_mag even when the string
 * is invalid: parse_int64() says -ERANGE as soon as they exceed 2^63, before
 * it sees what follows.
 */
static bool ref_int(const char *s, bool *ret_neg, u128 *ret_mag)
{
	bool neg = false;
	u128 v = 0;

	if (*s == '-' || *s == '+')
		neg = *s++ == '-';
	*ret_neg = neg;
	*ret_mag = 0;
	if (!*s)
		return false;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		v = v > CAP ? CAP + 1 : v * 10 + (u128)(*s - '0');
		*ret_mag = v;
	}
	return true;
}

static void check_int(const char *s, int64_t min, int64_t max)
{
	int64_t v = (int64_t)SENTINEL;
	bool neg, valid, in_range = false;
	u128 mag;
	__int128 exact = 0;
	int r = parse_int64(s, min, max, &v);

	FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ERANGE, "parse_int64(\"%s\") = %d", s, r);
	valid = ref_int(s, &neg, &mag);
	if (valid && mag <= CAP) {
		exact = neg ? -(__int128)mag : (__int128)mag;
		in_range = exact >= min && exact <= max;
	}
	if (!valid)
		FUZZ_CHECK(r == -EINVAL || (r == -ERANGE && mag > (u128)INT64_MAX + 1),
			   "parse_int64(\"%s\") = %d, expected -EINVAL", s, r);
	else if (!in_range)
		FUZZ_CHECK(r == -ERANGE, "parse_int64(\"%s\", %lld, %lld) = %d, expected -ERANGE",
			   s, (long long)min, (long long)max, r);
	else
		FUZZ_CHECK(r == 0 && v == exact, "parse_int64(\"%s\", %lld, %lld) = %d (%lld)", s,
			   (long long)min, (long long)max, r, (long long)v);
	if (r < 0)
		FUZZ_CHECK(v == (int64_t)SENTINEL, "parse_int64(\"%s\") clobbered the output", s);
}

static void check_pid(const char *s)
{
	pid_t pid = -12345;
	int64_t v = 0;
	int r = parse_pid(s, &pid);
	int want = parse_int64(s, 1, 4194304, &v);

	FUZZ_CHECK(r == want, "parse_pid(\"%s\") = %d, parse_int64 %d", s, r, want);
	if (r == 0)
		FUZZ_CHECK(pid == v && pid >= 1 && pid <= 4194304, "parse_pid(\"%s\") = %d", s,
			   (int)pid);
	else
		FUZZ_CHECK(pid == -12345, "parse_pid(\"%s\") clobbered the output", s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int64_t ranges[][2] = {
		{ INT64_MIN, INT64_MAX }, { 0, INT64_MAX }, { 1, 10000 }, { -5, 5 }, { 7, 3 },
	};
	char *s;

	if (size > 4096) /* what a user types */
		return 0;
	s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0'; /* an embedded NUL ends the string, as in argv */

	check_duration(s);
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
		check_int(s, ranges[i][0], ranges[i][1]);
	check_pid(s);
	check_format(fuzz_u64(data, size)); /* any value, not only those that parse */
	FUZZ_CHECK(parse_duration(NULL, &(uint64_t){ 0 }) == -EINVAL, "NULL duration");
	free(s);
	return 0;
}
