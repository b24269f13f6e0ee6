/* View formats by name and by file extension, and rendering into memory. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pprof/pprof.h"
#include "util/util.h"
#include "view-private.h"

static const char *const names[] = {
	[VIEW_PPROF] = "pprof", [VIEW_TOP] = "top", [VIEW_FOLDED] = "folded",
	[VIEW_TREE] = "tree",   [VIEW_SVG] = "svg",
};

int view_format_from_name(const char *name, enum view_format *ret)
{
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (!strcmp(name, names[i])) {
			*ret = (enum view_format)i;
			return 0;
		}
	return -EINVAL;
}

const char *view_format_name(enum view_format f)
{
	return (size_t)f < ARRAY_SIZE(names) ? names[f] : "?";
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcmp(s + n - m, suffix);
}

enum view_format view_format_from_path(const char *path)
{
	if (ends_with(path, ".svg"))
		return VIEW_SVG;
	if (ends_with(path, ".folded"))
		return VIEW_FOLDED;
	if (ends_with(path, ".txt"))
		return VIEW_TOP;
	return VIEW_PPROF;
}

int view_stream_status(FILE *f)
{
	return ferror(f) ? -EIO : 0;
}

int view_render(const struct profile *p, size_t index, enum view_format format,
		size_t max_rows, const char *title, char **ret, size_t *ret_len)
{
	return view_render_filtered(p, index, format, max_rows, title, NULL, ret, ret_len);
}

/* The profile itself, with only the samples @filter keeps. */
static int encode_filtered(const struct profile *p, const struct view_filter *filter,
			   char **ret, size_t *ret_len)
{
	struct profile_sample *kept;
	struct profile view;
	int r;

	if (!filter)
		return pprof_encode_gzip(p, (uint8_t **)ret, ret_len);
	r = view_filter_apply(p, filter, &view, &kept);
	if (r < 0)
		return r;
	r = pprof_encode_gzip(&view, (uint8_t **)ret, ret_len);
	free(kept);
	return r;
}

struct render_args {
	const struct profile *p;
	size_t index, max_rows;
	enum view_format format;
	const char *title;
	const struct view_filter *filter;
};

static int write_view(const void *arg, FILE *f)
{
	const struct render_args *a = arg;

	switch (a->format) {
	case VIEW_TOP:
		return view_top_write(a->p, a->index, a->max_rows, a->filter, f);
	case VIEW_FOLDED:
		return view_folded_write(a->p, a->index, a->filter, f);
	case VIEW_TREE:
		return view_tree_write(a->p, a->index, a->filter, f);
	case VIEW_SVG:
		return view_svg_write(a->p, a->index, a->title, a->filter, f);
	default:
		return -EINVAL;
	}
}

int view_render_stream(int (*write)(const void *arg, FILE *f), const void *arg, char **ret,
		       size_t *ret_len)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int r;

	if (!f)
		return -errno;
	r = write(arg, f);
	if (fclose(f) != 0 && r == 0)
		r = -ENOMEM;
	if (r < 0) {
		free(buf);
		return r;
	}
	*ret = buf;
	*ret_len = len;
	return 0;
}

int view_render_filtered(const struct profile *p, size_t index, enum view_format format,
			 size_t max_rows, const char *title, const struct view_filter *filter,
			 char **ret, size_t *ret_len)
{
	const struct render_args a = { p, index, max_rows, format, title, filter };

	if (format == VIEW_PPROF)
		return encode_filtered(p, filter, ret, ret_len);
	return view_render_stream(write_view, &a, ret, ret_len);
}
