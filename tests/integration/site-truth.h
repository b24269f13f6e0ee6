/*
 * A target's own count of its allocation sites, one "NAME OBJECTS BYTES"
 * line each (tests/targets/heapsites, jeprofsites), and the relative error
 * of a figure against it.
 */
#ifndef CPROF_TEST_SITE_TRUTH_H
#define CPROF_TEST_SITE_TRUTH_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "testhelp.h"

struct site_truth {
	char name[32];
	uint64_t objects, bytes;
};

static inline size_t read_truth(const char *path, struct site_truth *t, size_t max)
{
	char line[256];
	size_t n = 0;
	FILE *f = NULL;

	for (int i = 0; i < 100 && !(f = fopen(path, "re")); i++)
		th_sleep_ms(50);
	cr_assert_not_null(f, "heapsites wrote no report %s", path);
	while (n < max && fgets(line, sizeof(line), f)) {
		unsigned long long o, b;

		if (sscanf(line, "%31s %llu %llu", t[n].name, &o, &b) == 3) {
			t[n].objects = o;
			t[n].bytes = b;
			n++;
		}
	}
	fclose(f);
	return n;
}

static inline const struct site_truth *truth_of(const struct site_truth *t, size_t n,
						const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(t[i].name, name))
			return &t[i];
	cr_assert_fail("no truth for %s", name);
	return NULL;
}

static inline double rel_err(double got, double want)
{
	return want ? fabs(got - want) / want : (got ? 1.0 : 0.0);
}

#endif
