/*
 * The flame graph: an SVG in the manner of Brendan Gregg's flamegraph.pl,
 * drawn from the call tree (tree.c), roots at the bottom, children in name
 * order left to right. Every frame carries its name and its place in values
 * (data-n, data-x, data-w, data-d), which the embedded script (svg-script.h)
 * uses to zoom and search; the boxes and labels are also drawn here, so the
 * picture shows without the script.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"
#include "svg-script.h"
#include "view-private.h"

#define WIDTH 1200
#define PAD 10
#define FRAME_H 16
#define FONT 12
#define TOP_PAD 50    /* title, buttons */
#define BOTTOM_PAD 34 /* the details line */
#define MIN_WIDTH 0.1 /* px: narrower frames are left out, as flamegraph.pl does */

struct svg_writer {
	const struct view_tree *t;
	const char *type, *unit;
	int64_t total;
	const int64_t *delta; /* per node; NULL: not a comparison */
	int64_t max_delta;
	unsigned height;
	FILE *f;
};

/* Writes @s as XML text or attribute content; at most @max bytes of it,
 * never cutting a UTF-8 sequence, control characters as '?'. */
static void xml_text(FILE *f, const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n > max) {
		n = max;
		while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
			n--;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		switch (c) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\'': fputs("&apos;", f); break;
		default: fputc(c < 0x20 || c == 0x7f ? '?' : c, f);
		}
	}
}

/* flamegraph.pl's "hot" palette, from a hash of the name so a function
 * keeps its colour from one graph to the next. */
static void frame_colour(const char *name, char *buf, size_t size)
{
	uint64_t h = hash_bytes(name, strlen(name), 0x636f6c6f7572ULL);
	double v1 = (double)(h & 0xffff) / 65535.0, v2 = (double)((h >> 16) & 0xffff) / 65535.0,
	       v3 = (double)((h >> 32) & 0xffff) / 65535.0;

	snprintf(buf, size, "rgb(%d,%d,%d)", 205 + (int)(50 * v3), (int)(230 * v1),
		 (int)(55 * v2));
}

/* flamegraph.pl's color_scale for a differential flame graph: white for
 * no change, towards red (grew) or blue (shrank) as |@delta| nears @max. */
static void delta_colour(int64_t delta, int64_t max, char *buf, size_t size)
{
	double x = max > 0 ? (double)abs_saturated(delta) / (double)max : 0;
	int fade = (int)(210 * (1 - (x > 1 ? 1 : x)));

	if (delta > 0)
		snprintf(buf, size, "rgb(255,%d,%d)", fade, fade);
	else if (delta < 0)
		snprintf(buf, size, "rgb(%d,%d,255)", fade, fade);
	else
		snprintf(buf, size, "rgb(255,255,255)");
}

/* The label that fits in @w px (what the script's fit() computes). */
static size_t label_chars(const char *name, double w, bool *dots)
{
	long n = (long)((w - 6) / (FONT * 0.59));

	*dots = false;
	if (n < 3)
		return 0;
	if (strlen(name) <= (size_t)n)
		return strlen(name);
	*dots = true;
	return (size_t)n - 2;
}

static void write_frame(const struct svg_writer *w, const struct view_node *n, int64_t x)
{
	double span = WIDTH - 2 * PAD, px = PAD + (double)x / (double)w->total * span,
	       pw = (double)n->total / (double)w->total * span;
	double y = (double)w->height - BOTTOM_PAD - (n->depth + 1) * FRAME_H;
	char value[64], pct[32], fill[32], change[80] = "";
	size_t chars;
	bool dots;

	view_format_value(n->total, w->unit, "auto", value, sizeof(value));
	view_format_percent(n->total, w->total, pct, sizeof(pct));
	if (w->delta) {
		int64_t d = w->delta[n - w->t->nodes];

		change[0] = d > 0 ? '+' : '\0';
		view_format_value(d, w->unit, "auto", change + (d > 0), sizeof(change) - 1);
		delta_colour(d, w->max_delta, fill, sizeof(fill));
	} else {
		frame_colour(n->name, fill, sizeof(fill));
	}
	fprintf(w->f, "<g class=\"f\" data-n=\"");
	xml_text(w->f, n->name, SIZE_MAX);
	fprintf(w->f, "\" data-x=\"%" PRId64 "\" data-w=\"%" PRId64 "\" data-d=\"%u\">\n<title>",
		x, n->total, n->depth);
	xml_text(w->f, n->name, SIZE_MAX);
	fprintf(w->f, " (%s%s%s, %s%s%s)</title>", value,
		!strcmp(w->unit, "count") ? " " : "", !strcmp(w->unit, "count") ? w->type : "",
		pct + strspn(pct, " "), w->delta ? "; change " : "", change);
	fprintf(w->f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
		      "data-fill=\"%s\" rx=\"2\" ry=\"2\"/>", px, y, pw, FRAME_H - 1, fill, fill);
	fprintf(w->f, "<text x=\"%.2f\" y=\"%.1f\">", px + 3, y + FRAME_H - 4.5);
	chars = label_chars(n->name, pw, &dots);
	xml_text(w->f, n->name, chars);
	fprintf(w->f, "%s</text>\n</g>\n", dots ? ".." : "");
}

/* Depth first, children left to right in name order; x in values. */
static int write_frames(const struct svg_writer *w)
{
	struct item {
		size_t id;
		int64_t x;
	} *stack = NULL;
	size_t n = 0, alloc = 0;
	double min_value = MIN_WIDTH / (WIDTH - 2 * PAD) * (double)w->total;
	int r = GROW(stack, 1, alloc);

	if (r < 0)
		return r;
	stack[n++] = (struct item){ 0, 0 };
	while (n) {
		struct item it = stack[--n];
		const struct view_node *node = &w->t->nodes[it.id];
		int64_t x = it.x;

		if ((double)node->total < min_value)
			continue;
		write_frame(w, node, it.x);
		for (size_t c = node->first_child; c; c = w->t->nodes[c].next_sibling) {
			r = GROW(stack, n + 1, alloc);
			if (r < 0)
				goto out;
			stack[n++] = (struct item){ c, x };
			x = add_saturated(x, w->t->nodes[c].total);
		}
	}
out:
	free(stack);
	return r;
}

static void write_head(const struct svg_writer *w, const char *title)
{
	fprintf(w->f,
		"<?xml version=\"1.0\" standalone=\"no\"?>\n"
		"<svg version=\"1.1\" width=\"%d\" height=\"%u\" viewBox=\"0 0 %d %u\" "
		"xmlns=\"http://www.w3.org/2000/svg\">\n"
		"<style type=\"text/css\">\n"
		"text { font-family: Verdana, sans-serif; font-size: %dpx; fill: rgb(0,0,0); }\n"
		"g.f { cursor: pointer; }\n"
		"g.f:hover rect { stroke: black; stroke-width: 0.5; }\n"
		"#title { text-anchor: middle; font-size: 17px; }\n"
		"#search, #unzoom { cursor: pointer; }\n"
		"</style>\n"
		"<script type=\"text/ecmascript\"><![CDATA[\n"
		"var TOTAL = %" PRId64 ", WIDTH = %d, PAD = %d, FONT = %d;\n%s]]></script>\n",
		WIDTH, w->height, WIDTH, w->height, FONT, w->total > 0 ? w->total : 1, WIDTH, PAD,
		FONT, svg_script);
	fprintf(w->f,
		"<defs><linearGradient id=\"bg\" y1=\"0\" y2=\"1\" x1=\"0\" x2=\"0\">"
		"<stop stop-color=\"#eeeeee\" offset=\"5%%\"/><stop stop-color=\"#eeeeb0\" "
		"offset=\"95%%\"/></linearGradient></defs>\n"
		"<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%u\" fill=\"url(#bg)\"/>\n"
		"<text id=\"title\" x=\"%d\" y=\"24\">",
		WIDTH, w->height, WIDTH / 2);
	xml_text(w->f, title ? title : "Flame Graph", 200);
	fprintf(w->f, "</text>\n"
		      "<text id=\"unzoom\" x=\"%d\" y=\"24\" style=\"opacity:0\">Reset Zoom</text>\n"
		      "<text id=\"search\" x=\"%d\" y=\"24\" text-anchor=\"end\" "
		      "style=\"opacity:0.6\">Search</text>\n"
		      "<text id=\"matched\" x=\"%d\" y=\"%u\" text-anchor=\"end\"> </text>\n"
		      "<text id=\"details\" x=\"%d\" y=\"%u\"> </text>\n",
		PAD, WIDTH - PAD, WIDTH - PAD, w->height - 12, PAD, w->height - 12);
}

int view_write_svg(const struct profile *p, size_t index, const char *title, FILE *f)
{
	return view_svg_write(p, index, title, NULL, f);
}

int view_svg_write_tree(const struct view_tree *t, const char *type, const char *title,
			const int64_t *delta, int64_t max_delta, FILE *f)
{
	struct svg_writer w = { .t = t, .type = type, .unit = t->stacks.unit,
				.total = t->nodes[0].total, .delta = delta, .max_delta = max_delta,
				.f = f, .height = (t->max_depth + 1) * FRAME_H + TOP_PAD + BOTTOM_PAD };
	int r = 0;

	write_head(&w, title);
	if (w.total > 0)
		r = write_frames(&w);
	else
		fprintf(f, "<text x=\"%d\" y=\"%d\">no samples of type %s</text>\n", PAD,
			TOP_PAD + FRAME_H, w.type);
	fprintf(f, "</svg>\n");
	if (r == 0)
		r = view_stream_status(f);
	return r;
}

int view_svg_write(const struct profile *p, size_t index, const char *title,
		   const struct view_filter *filter, FILE *f)
{
	struct view_tree t = { 0 };
	int r;

	r = view_tree_build(p, index, filter, &t);
	if (r < 0)
		return r;
	r = view_svg_write_tree(&t, p->sample_types[index].type, title, NULL, 0, f);
	view_tree_release(&t);
	return r;
}
