/*
 * The views of lib/view/ on whatever pprof_decode() accepts (cprof view
 * reads any file it is pointed at). Every view of every sample type renders
 * without a sanitizer report, folded values add up to the total (unless a
 * sum overflows), and the flame graph is a whole SVG document. The profile
 * compared with itself renders too, and less itself it is nothing.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "pprof/pprof.h"
#include "view/view.h"

static void check_folded(const struct profile *p, size_t index, const char *text)
{
	long long sum = 0, total = 0;
	bool overflow = false;

	for (const char *nl = strchr(text, '\n'); nl; nl = strchr(nl + 1, '\n')) {
		const char *sp = nl;

		while (sp > text && sp[-1] != ' ')
			sp--;
		overflow |= __builtin_add_overflow(sum, strtoll(sp, NULL, 10), &sum);
	}
	/* Sums that saturated (in the view or in profile_total) are not judged. */
	for (size_t i = 0; i < p->nsamples && !overflow; i++)
		overflow |= __builtin_add_overflow(total, p->samples[i].values[index], &total);
	if (!overflow)
		FUZZ_CHECK(sum == total, "folded sum %lld, total %lld", sum, total);
}

/* Whether every value survives pprof's Scale(-1) (a float64) exactly. */
static bool exact_values(const struct profile *p)
{
	for (size_t i = 0; i < p->nsamples; i++)
		for (size_t t = 0; t < p->nsample_types; t++)
			if (p->samples[i].values[t] > (1LL << 53) ||
			    p->samples[i].values[t] < -(1LL << 53))
				return false;
	return true;
}

static void check_diff(const struct profile *p, enum view_diff_mode mode, bool normalize)
{
	static const enum view_format formats[] = { VIEW_TOP, VIEW_FOLDED, VIEW_TREE, VIEW_SVG,
						    VIEW_PPROF };
	struct view_diff *d = NULL;
	char why[256];
	int r = view_diff_new(p, p, mode, normalize, &d, why, sizeof(why));

	FUZZ_CHECK(r == 0 || r == -ENOMEM || r == -EOVERFLOW, "diff with itself: %d %s", r, why);
	if (r < 0)
		return;
	if (mode == VIEW_DIFF_SUBTRACT && exact_values(p))
		FUZZ_CHECK(view_diff_profile(d)->nsamples == 0, "itself less itself: %zu samples",
			   view_diff_profile(d)->nsamples);
	for (size_t t = 0; t < p->nsample_types && t < 2; t++)
		for (size_t f = 0; f < sizeof(formats) / sizeof(formats[0]); f++) {
			char *buf = NULL;
			size_t len = 0;

			r = view_diff_render(d, t, formats[f], 3, "fuzz", NULL, &buf, &len);
			FUZZ_CHECK(r == 0 || r == -ENOMEM, "diff view %s of type %zu: %d",
				   view_format_name(formats[f]), t, r);
			if (r == 0 && formats[f] == VIEW_SVG)
				FUZZ_CHECK(len > 7 && !strcmp(buf + len - 7, "</svg>\n"),
					   "the diff SVG does not end");
			free(buf);
		}
	view_diff_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum view_format formats[] = { VIEW_TOP, VIEW_FOLDED, VIEW_TREE, VIEW_SVG };
	struct profile *p = NULL;
	size_t index;

	if (pprof_decode(data, size, &p) < 0)
		return 0;
	FUZZ_CHECK(p->nsample_types == 0 || view_sample_index(p, NULL, &index) == 0,
		   "no default sample type of %zu", p->nsample_types);
	for (size_t t = 0; t < p->nsample_types && t < 4; t++) {
		for (size_t f = 0; f < sizeof(formats) / sizeof(formats[0]); f++) {
			char *buf = NULL;
			size_t len = 0;
			int r = view_render(p, t, formats[f], f == 0 ? 3 : 0, "fuzz", &buf, &len);

			FUZZ_CHECK(r == 0 || r == -ENOMEM, "view %s of type %zu: %d",
				   view_format_name(formats[f]), t, r);
			if (r < 0)
				continue;
			FUZZ_CHECK(strlen(buf) == len, "a NUL inside the %s view",
				   view_format_name(formats[f]));
			if (formats[f] == VIEW_FOLDED)
				check_folded(p, t, buf);
			if (formats[f] == VIEW_SVG)
				FUZZ_CHECK(len > 7 && !strcmp(buf + len - 7, "</svg>\n"),
					   "the SVG does not end");
			free(buf);
		}
	}
	check_diff(p, VIEW_DIFF_BASE, true);
	check_diff(p, VIEW_DIFF_SUBTRACT, false);
	profile_free(p);
	return 0;
}
