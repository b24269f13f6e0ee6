/* Folded stacks: Brendan Gregg's collapsed format, one line per stack;
 * of a comparison, the values are signed (NEW less OLD). */
#include <errno.h>

#include "view-private.h"

int view_write_folded(const struct profile *p, size_t index, FILE *f)
{
	return view_folded_write(p, index, NULL, f);
}

int view_folded_write(const struct profile *p, size_t index, const struct view_filter *filter,
		      FILE *f)
{
	struct view_stacks vs;
	int r = view_stacks_collect(p, index, filter, &vs);

	if (r < 0)
		return r;
	for (size_t i = 0; i < vs.n; i++) {
		const struct view_stack *s = &vs.stacks[i];

		/* Samples of one stack that cancel out (NEW less OLD) say nothing. */
		if (s->value == 0)
			continue;
		/* A sample without a frame still counts: the sum is the total. */
		if (s->n == 0)
			fputs("[no stack]", f);
		for (size_t k = 0; k < s->n; k++) {
			/* ';' separates frames and the last ' ' the value: names keep
			 * their spaces (C++), but a ';' in a name would split it. */
			for (const char *c = s->frames[k]; *c; c++)
				fputc(*c == ';' ? ':' : *c == '\n' ? ' ' : *c, f);
			if (k + 1 < s->n)
				fputc(';', f);
		}
		fprintf(f, " %lld\n", (long long)s->value);
	}
	r = view_stream_status(f);
	view_stacks_release(&vs);
	return r;
}
