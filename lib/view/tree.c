/* The call tree of a profile's stacks, and its indented text view. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"
#include "view-private.h"

static int add_node(struct view_tree *t, size_t parent, const char *name, size_t *ret)
{
	struct view_node *pn;
	size_t id = t->n;
	int r = GROW(t->nodes, t->n + 1, t->alloc);

	if (r < 0)
		return r;
	t->nodes[id] = (struct view_node){ .name = name };
	t->n++;
	if (id == 0) {
		*ret = 0;
		return 0;
	}
	pn = &t->nodes[parent];
	t->nodes[id].depth = pn->depth + 1;
	if (t->nodes[id].depth > t->max_depth)
		t->max_depth = t->nodes[id].depth;
	if (pn->last_child)
		t->nodes[pn->last_child].next_sibling = id;
	else
		pn->first_child = id;
	pn->last_child = id;
	*ret = id;
	return 0;
}

int view_tree_build(const struct profile *p, size_t index, const struct view_filter *filter,
		    struct view_tree *ret)
{
	struct view_tree t = { 0 };
	const struct view_stacks *s = &t.stacks;
	size_t root;
	int r;

	r = view_stacks_collect(p, index, filter, &t.stacks);
	if (r < 0)
		return r;
	r = add_node(&t, 0, "all", &root);
	if (r < 0)
		goto out_fail;
	/* Stacks are sorted root first: a frame equal to an existing child can
	 * only be the parent's last child. */
	for (size_t i = 0; i < s->n; i++) {
		const struct view_stack *st = &s->stacks[i];
		size_t at = 0;

		t.nodes[0].total = add_saturated(t.nodes[0].total, st->value);
		for (size_t k = 0; k < st->n; k++) {
			size_t last = t.nodes[at].last_child;

			if (last && (t.nodes[last].name == st->frames[k] ||
				     !strcmp(t.nodes[last].name, st->frames[k]))) {
				at = last;
			} else {
				r = add_node(&t, at, st->frames[k], &at);
				if (r < 0)
					goto out_fail;
			}
			t.nodes[at].total = add_saturated(t.nodes[at].total, st->value);
		}
		t.nodes[at].self = add_saturated(t.nodes[at].self, st->value);
	}
	*ret = t;
	return 0;
out_fail:
	view_tree_release(&t);
	return r;
}

void view_tree_release(struct view_tree *t)
{
	if (!t)
		return;
	free(t->nodes);
	view_stacks_release(&t->stacks);
	memset(t, 0, sizeof(*t));
}

#define TREE_MAX_DEPTH 1000

struct tree_writer {
	const struct view_tree *t;
	const char *unit, *out_unit;
	int64_t total, cutoff;
	FILE *f;
};

static int compare_total(const void *a, const void *b, void *arg)
{
	const struct view_node *n = arg;
	const struct view_node *x = &n[*(const size_t *)a], *y = &n[*(const size_t *)b];

	int64_t sx = abs_saturated(x->total), sy = abs_saturated(y->total);

	/* By size: in a comparison, a loss counts as much as a gain. */
	if (sx != sy)
		return sx > sy ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int write_node(const struct tree_writer *w, size_t id, unsigned indent)
{
	const struct view_node *n = &w->t->nodes[id];
	size_t *kids = NULL, nkids = 0, alloc = 0, small = 0;
	int64_t small_total = 0;
	char cum[64], self[64], pct[32];
	int r = 0;

	view_format_value(n->total, w->unit, w->out_unit, cum, sizeof(cum));
	view_format_value(n->self, w->unit, w->out_unit, self, sizeof(self));
	view_format_percent(n->total, w->total, pct, sizeof(pct));
	fprintf(w->f, "%10s %s %10s  %*s%s\n", cum, pct, self, (int)indent * 2, "", n->name);
	/* A profile from elsewhere may hold any depth: the recursion stops. */
	if (indent >= TREE_MAX_DEPTH) {
		if (n->first_child)
			fprintf(w->f, "%10s %6s %10s  %*s... (deeper frames not shown)\n", "", "",
				"", (int)(indent + 1) * 2, "");
		return 0;
	}
	for (size_t c = n->first_child; c; c = w->t->nodes[c].next_sibling) {
		if (abs_saturated(w->t->nodes[c].total) < w->cutoff) {
			small++;
			small_total = add_saturated(small_total, w->t->nodes[c].total);
			continue;
		}
		r = GROW(kids, nkids + 1, alloc);
		if (r < 0)
			goto out;
		kids[nkids++] = c;
	}
	if (nkids > 1)
		qsort_r(kids, nkids, sizeof(*kids), compare_total, w->t->nodes);
	for (size_t i = 0; i < nkids && r == 0; i++)
		r = write_node(w, kids[i], indent + 1);
	if (r == 0 && small) {
		view_format_value(small_total, w->unit, w->out_unit, cum, sizeof(cum));
		view_format_percent(small_total, w->total, pct, sizeof(pct));
		fprintf(w->f, "%10s %s %10s  %*s... (%zu more below 0.5%%)\n", cum, pct, "",
			(int)(indent + 1) * 2, "", small);
	}
out:
	free(kids);
	return r;
}

int view_write_tree(const struct profile *p, size_t index, FILE *f)
{
	return view_tree_write(p, index, NULL, f);
}

int view_tree_write(const struct profile *p, size_t index, const struct view_filter *filter,
		    FILE *f)
{
	const struct view_stacks *vs;
	struct view_tree t = { 0 };
	struct tree_writer w;
	int64_t *values = NULL;
	char unit_buf[16], total[64];
	int r;

	r = view_tree_build(p, index, filter, &t);
	if (r < 0)
		return r;
	vs = &t.stacks;
	values = calloc(t.n, sizeof(*values));
	if (!values) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < t.n; i++)
		values[i] = t.nodes[i].self ? t.nodes[i].self : t.nodes[i].total;
	w = (struct tree_writer){ .t = &t, .unit = vs->unit, .total = vs->total, .f = f,
				  .cutoff = abs_saturated((int64_t)((double)vs->kept * VIEW_NODE_FRACTION)) };
	w.out_unit = view_output_unit(vs->unit, values, t.n, vs->total, unit_buf,
				      sizeof(unit_buf));
	view_format_value(vs->total, vs->unit, w.out_unit, total, sizeof(total));
	fprintf(f, "Type: %s\nTotal: %s\n", p->sample_types[index].type, total);
	fprintf(f, "%10s %6s %10s  %s\n", "cum", "cum%", "flat", "call tree (callers above callees)");
	r = write_node(&w, 0, 0);
	if (r == 0)
		r = view_stream_status(f);
out:
	free(values);
	view_tree_release(&t);
	return r;
}
