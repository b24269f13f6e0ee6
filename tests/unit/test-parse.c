/* Durations and numbers as users type them (lib/util/parse.c). */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "util/parse.h"

static uint64_t dur(const char *s)
{
	uint64_t ns = 12345;
	int r = parse_duration(s, &ns);

	cr_assert_eq(r, 0, "parse_duration(\"%s\") = %d", s, r);
	return ns;
}

static int dur_err(const char *s)
{
	uint64_t ns = 777;
	int r = parse_duration(s, &ns);

	cr_assert_eq(ns, 777, "output clobbered on failure for \"%s\"", s);
	return r;
}

Test(parse_duration, go_syntax)
{
	cr_assert_eq(dur("500ms"), 500000000ULL);
	cr_assert_eq(dur("30s"), 30000000000ULL);
	cr_assert_eq(dur("1m30s"), 90000000000ULL);
	cr_assert_eq(dur("1.5h"), 5400000000000ULL);
	cr_assert_eq(dur("2h45m"), 9900000000000ULL);
	cr_assert_eq(dur("10us"), 10000ULL);
	cr_assert_eq(dur("10\xc2\xb5s"), 10000ULL);
	cr_assert_eq(dur("7ns"), 7ULL);
	cr_assert_eq(dur(".5s"), 500000000ULL);
	cr_assert_eq(dur("0"), 0ULL);
	cr_assert_eq(dur("1h0m0.001s"), 3600001000000ULL);
}

Test(parse_duration, rejects)
{
	cr_assert_eq(dur_err(""), -EINVAL);
	cr_assert_eq(dur_err("abc"), -EINVAL);
	cr_assert_eq(dur_err("-1s"), -EINVAL);
	cr_assert_eq(dur_err("10y"), -EINVAL);
	cr_assert_eq(dur_err("10"), -EINVAL); /* Go wants a unit except for "0" */
	cr_assert_eq(dur_err("5s "), -EINVAL);
	cr_assert_eq(dur_err("s"), -EINVAL);
	cr_assert_eq(dur_err("1.s.5"), -EINVAL);
	cr_assert_eq(dur_err("99999999999999999999s"), -ERANGE);
	cr_assert_eq(dur_err("9999999999h"), -ERANGE);
}

Test(format_duration, round_trip_readable)
{
	char buf[32];

	format_duration(90000000000ULL, buf, sizeof(buf));
	cr_assert_str_eq(buf, "1m30s");
	format_duration(500000000ULL, buf, sizeof(buf));
	cr_assert_str_eq(buf, "500ms");
	format_duration(0, buf, sizeof(buf));
	cr_assert_str_eq(buf, "0s");
	format_duration(3600ULL * 1000000000ULL * 2 + 1000000000ULL, buf, sizeof(buf));
	cr_assert_str_eq(buf, "2h0m1s");
}

Test(parse_int64, bounds)
{
	int64_t v = 0;

	cr_assert_eq(parse_int64("100", 1, 10000, &v), 0);
	cr_assert_eq(v, 100);
	cr_assert_eq(parse_int64("0", 1, 10000, &v), -ERANGE);
	cr_assert_eq(parse_int64("10001", 1, 10000, &v), -ERANGE);
	cr_assert_eq(parse_int64("12a", 1, 10000, &v), -EINVAL);
	cr_assert_eq(parse_int64("", 1, 10000, &v), -EINVAL);
	cr_assert_eq(parse_int64("-", 1, 10000, &v), -EINVAL);
	cr_assert_eq(parse_int64("-9223372036854775808", INT64_MIN, 0, &v), 0);
	cr_assert_eq(v, INT64_MIN);
	cr_assert_eq(parse_int64("9223372036854775808", 0, INT64_MAX, &v), -ERANGE);
	cr_assert_eq(parse_int64("99999999999999999999999", 0, INT64_MAX, &v), -ERANGE);
}

Test(parse_pid, range)
{
	pid_t pid = 0;

	cr_assert_eq(parse_pid("1", &pid), 0);
	cr_assert_eq(pid, 1);
	cr_assert_eq(parse_pid("0", &pid), -ERANGE);
	cr_assert_eq(parse_pid("-5", &pid), -ERANGE);
	cr_assert_eq(parse_pid("4194305", &pid), -ERANGE);
	cr_assert_eq(parse_pid("12x", &pid), -EINVAL);
}

Test(parse_size, units)
{
	static const struct {
		const char *s;
		uint64_t v;
	} ok[] = {
		{ "0", 0 },		 { "1", 1 },	       { "4096", 4096 },
		{ "512KiB", 512 << 10 }, { "512kib", 512 << 10 }, { "64k", 64 << 10 },
		{ "64KB", 64 << 10 },	 { "1MiB", 1 << 20 },  { "2m", 2 << 20 },
		{ "1GiB", 1ull << 30 },	 { "10B", 10 },
	};
	uint64_t v;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		cr_assert_eq(parse_size(ok[i].s, &v), 0, "%s", ok[i].s);
		cr_assert_eq(v, ok[i].v, "%s: %llu", ok[i].s, (unsigned long long)v);
	}
}

Test(parse_size, rejects)
{
	static const char *const bad[] = { "", "-1", "KiB", "1 KiB", "1.5MiB", "1TiB", "1Ki", "x1" };
	uint64_t v;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(parse_size(bad[i], &v), -EINVAL, "%s", bad[i]);
	cr_assert_eq(parse_size("9223372036854775808", &v), -ERANGE);
	cr_assert_eq(parse_size("8589934592GiB", &v), -ERANGE);
	cr_assert_eq(parse_size("99999999999999999999999", &v), -ERANGE);
}
