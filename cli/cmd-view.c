/* cprof view: a pprof file (cprof's or Go's, gzipped or not) as a -top
 * table, folded stacks, a call tree or a flame graph; or its difference
 * from another (--diff-base, --base). The views are in lib/view/. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "options.h"
#include "output.h"
#include "pprof/pprof.h"
#include "report.h"
#include "view/view.h"

#define CMD "view"
#define MAX_INPUT (1ULL << 30) /* what pprof_decode() would inflate to at most */

struct view_args {
	const char *file;
	const char *output; /* NULL: stdout, or the --svg file */
	const char *index;
	enum view_format format;
	bool format_given;
	int64_t top; /* --top N: the table's rows; 0: every row, no table on stderr */
	struct view_filter *filter; /* --tagfocus, --tagignore; NULL: none */
	const char *base;           /* --diff-base or --base OLD; NULL: no comparison */
	enum view_diff_mode diff_mode;
	bool normalize;
	bool help;
};

static void view_help(void)
{
	printf("usage: cprof view FILE [--format FORMAT | --folded | --svg OUT.svg | --tree | "
	       "--pprof] [--top N] [--index TYPE] [--tagfocus KEY=REGEX] [--tagignore KEY=REGEX] "
	       "[--diff-base OLD | --base OLD [--normalize]] [-o OUT]\n"
	       "\n"
	       "Show a pprof profile (cprof's or any other, such as Go's runtime/pprof;\n"
	       "gzipped or not) without Go installed: the flat/cum table of\n"
	       "'go tool pprof -top' (the default), folded stacks for flamegraph.pl,\n"
	       "inferno or speedscope, a call tree, or an interactive flame graph.\n"
	       "With --diff-base or --base, what changed from OLD to FILE, as\n"
	       "'go tool pprof -diff_base OLD FILE' shows it.\n"
	       "\n"
	       "      --format FORMAT\n"
	       "                    top (the default without -o), pprof (the profile,\n"
	       "                    filtered), svg, folded or tree; with -o by default from\n"
	       "                    its extension: .svg, .folded, .txt (top), else pprof\n"
	       "      --top N       the top N functions: the table's rows when it is the\n"
	       "                    output, else a table printed to stderr after writing\n"
	       "      --folded      --format folded: one line per stack, root first:\n"
	       "                    'main;work;leaf VALUE'\n"
	       "      --svg OUT.svg\n"
	       "                    --format svg -o OUT.svg: a flame graph (hover, click to\n"
	       "                    zoom, Search or Ctrl-F, Reset Zoom or Escape)\n"
	       "      --tree        --format tree: the call tree from the roots down, by cum\n"
	       "      --pprof       --format pprof: the profile itself (gzipped\n"
	       "                    profile.proto), filtered\n"
	       "      --index TYPE  the sample type to show, e.g. cpu, alloc_space (default:\n"
	       "                    the profile's default, else its last type)\n"
	       "      --tagfocus KEY=REGEX\n"
	       "                    only the samples with a label KEY that REGEX matches;\n"
	       "                    REGEX,REGEX: either; KEY=N, N:, :N, N:M: a numeric label\n"
	       "                    in that range (e.g. state=sleeping, thread_id=4242);\n"
	       "                    repeated: all of them (go tool pprof's -tagfocus)\n"
	       "      --tagignore KEY=REGEX\n"
	       "                    leave out the samples --tagfocus would keep\n"
	       "      --diff-base OLD\n"
	       "                    show FILE less the profile OLD (signed values; a flame\n"
	       "                    graph red where FILE has more, blue where less);\n"
	       "                    percentages are of OLD's total (pprof's -diff_base)\n"
	       "      --base OLD    FILE less OLD as a profile of its own: percentages of\n"
	       "                    the difference (pprof's -base)\n"
	       "      --normalize   scale FILE to OLD's total first (pprof's -normalize)\n"
	       "  -o, --output OUT  where to write (default stdout, the table); - is stdout,\n"
	       "                    the profile as any other name without an extension above\n"
	       "  -h, --help        show this help\n");
}

static int set_format(struct view_args *a, enum view_format f)
{
	if (a->format_given && a->format != f)
		return report_usage(CMD, "--format, --folded, --svg, --tree and --pprof do not go "
					 "together");
	a->format = f;
	a->format_given = true;
	return 0;
}

static int add_filter(struct view_args *a, bool ignore, const char *spec)
{
	char why[256] = "";
	int r = view_filter_add(&a->filter, ignore, spec, why, sizeof(why));

	if (r == -ENOMEM) {
		report_error("out of memory");
		return EXIT_FAIL;
	}
	if (r < 0)
		return report_usage(CMD, "invalid %s '%s': %s", ignore ? "--tagignore" : "--tagfocus",
				    spec, why);
	return 0;
}

static int parse_args(int argc, char **argv, struct view_args *a)
{
	static const struct option longopts[] = {
		{ "format", required_argument, NULL, 'M' },
		{ "top", required_argument, NULL, 'T' },
		{ "folded", no_argument, NULL, 'F' },
		{ "svg", required_argument, NULL, 'S' },
		{ "tree", no_argument, NULL, 'R' },
		{ "pprof", no_argument, NULL, 'P' },
		{ "index", required_argument, NULL, 'I' },
		{ "tagfocus", required_argument, NULL, 'f' },
		{ "tagignore", required_argument, NULL, 'i' },
		{ "diff-base", required_argument, NULL, 'D' },
		{ "base", required_argument, NULL, 'B' },
		{ "normalize", no_argument, NULL, 'N' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	enum view_format f;
	int c, r = 0;

	*a = (struct view_args){ .format = VIEW_TOP };
	opterr = 0;
	optind = 1;
	while (r == 0 && (c = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'M':
			if (view_format_from_name(optarg, &f) < 0)
				r = report_usage(CMD, "invalid format '%s': expected pprof, svg, folded, "
						 "top or tree", optarg);
			else
				r = set_format(a, f);
			break;
		case 'T':
			r = option_int(CMD, "--top", optarg, 1, 1000000, &a->top);
			break;
		case 'F':
			r = set_format(a, VIEW_FOLDED);
			break;
		case 'R':
			r = set_format(a, VIEW_TREE);
			break;
		case 'P':
			r = set_format(a, VIEW_PPROF);
			break;
		case 'f':
		case 'i':
			r = add_filter(a, c == 'i', optarg);
			break;
		case 'S':
			r = set_format(a, VIEW_SVG);
			if (r == 0 && a->output && strcmp(a->output, optarg))
				r = report_usage(CMD, "--svg and -o name two different files");
			a->output = optarg;
			break;
		case 'I':
			a->index = optarg;
			break;
		case 'D':
		case 'B':
			if (a->base)
				r = report_usage(CMD, "--diff-base and --base take one OLD profile, "
						 "once");
			a->base = optarg;
			a->diff_mode = c == 'D' ? VIEW_DIFF_BASE : VIEW_DIFF_SUBTRACT;
			break;
		case 'N':
			a->normalize = true;
			break;
		case 'o':
			if (a->format == VIEW_SVG && a->output && strcmp(a->output, optarg))
				r = report_usage(CMD, "--svg and -o name two different files");
			a->output = optarg;
			break;
		case 'h':
			a->help = true;
			break;
		case ':':
			r = report_usage(CMD, "option '%s' needs a value", argv[optind - 1]);
			break;
		default:
			r = report_usage(CMD, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (r || a->help)
		return r;
	if (optind >= argc)
		return report_usage(CMD, "missing FILE: which pprof profile to show");
	if (optind + 1 < argc)
		return report_usage(CMD, "unexpected argument '%s'", argv[optind + 1]);
	a->file = argv[optind];
	if (a->normalize && !a->base)
		return report_usage(CMD, "--normalize needs --diff-base or --base: the profile "
				    "to scale FILE to");
	if (a->base && !strcmp(a->base, "-") && !strcmp(a->file, "-"))
		return report_usage(CMD, "FILE and OLD cannot both be standard input");
	/* The output rule of every command (cprof(1)): -o's extension, else
	 * pprof; without -o, the table on stdout. */
	if (!a->format_given && a->output)
		a->format = view_format_from_path(a->output);
	return 0;
}

static int read_input(const char *path, uint8_t **ret, size_t *ret_len)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	uint8_t *buf = NULL;
	size_t len = 0, alloc = 0;
	int r = 0;

	if (!f)
		return -errno;
	for (;;) {
		size_t n;

		if (len == alloc) {
			uint8_t *nb;

			alloc = alloc ? alloc * 2 : 1 << 16;
			if (alloc > MAX_INPUT) {
				r = -EFBIG;
				break;
			}
			nb = realloc(buf, alloc);
			if (!nb) {
				r = -ENOMEM;
				break;
			}
			buf = nb;
		}
		n = fread(buf + len, 1, alloc - len, f);
		len += n;
		if (n == 0) {
			if (ferror(f))
				r = -EIO;
			break;
		}
	}
	if (f != stdin)
		fclose(f);
	if (r < 0) {
		free(buf);
		return r;
	}
	*ret = buf;
	*ret_len = len;
	return 0;
}

/* Reads and decodes FILE; an exit code after reporting. */
static int load(const char *path, struct profile **ret)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int r = read_input(path, &buf, &len);

	if (r < 0) {
		report_error("cannot read '%s': %s", path, strerror(-r));
		return EXIT_TARGET;
	}
	r = pprof_decode(buf, len, ret);
	free(buf);
	if (r == -EBADMSG || (r == 0 && (*ret)->nsample_types == 0)) {
		if (r == 0) {
			profile_free(*ret);
			*ret = NULL;
		}
		report_error("cannot read '%s': not a pprof profile (profile.proto, gzipped or "
			     "not)", path);
		report_hint("cprof view reads what 'cprof COMMAND -o FILE' and Go's "
			    "runtime/pprof write");
		return EXIT_TARGET;
	}
	if (r < 0) {
		report_error("cannot read '%s': %s", path, strerror(-r));
		return EXIT_TARGET;
	}
	return 0;
}

static int unknown_index(const struct profile *p, const char *index)
{
	char types[512];
	size_t n = 0;

	types[0] = '\0';
	for (size_t i = 0; i < p->nsample_types && n < sizeof(types); i++)
		n += (size_t)snprintf(types + n, sizeof(types) - n, "%s%s", i ? ", " : "",
				      p->sample_types[i].type);
	report_error("invalid --index '%s': the profile has no such sample type", index);
	report_hint("its sample types are: %s", types);
	return EXIT_USAGE;
}

/* The keys of @p's labels, ", "-separated, into @buf (the first 16). */
static void label_keys(const struct profile *p, char *buf, size_t size)
{
	const char *keys[16];
	size_t nkeys = 0, n = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < p->nsamples; i++)
		for (size_t l = 0; l < p->samples[i].nlabels && nkeys < 16; l++) {
			const char *k = p->samples[i].labels[l].key;
			size_t j = 0;

			while (j < nkeys && strcmp(keys[j], k))
				j++;
			if (j < nkeys)
				continue;
			keys[nkeys++] = k;
			if (n < size)
				n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? ", " : "", k);
		}
}

/* pprof says so when a filter matched nothing; a view of nothing is
 * written all the same (it is the true answer). */
static void warn_if_nothing_kept(const struct profile *p, const struct view_filter *f)
{
	char keys[256];

	for (size_t i = 0; i < p->nsamples; i++)
		if (view_filter_keeps(f, &p->samples[i]))
			return;
	report_warning("no sample passes --tagfocus and --tagignore");
	label_keys(p, keys, sizeof(keys));
	if (keys[0])
		report_hint("the profile's labels are: %s", keys);
	else
		report_hint("the profile's samples have no labels");
}

/* A view of the profile, or of the comparison @d when there is one. */
static int render(const struct profile *p, const struct view_diff *d, size_t index,
		  enum view_format format, size_t max_rows, const char *title,
		  const struct view_args *a, char **ret, size_t *ret_len)
{
	if (d)
		return view_diff_render(d, index, format, max_rows, title, a->filter, ret, ret_len);
	return view_render_filtered(p, index, format, max_rows, title, a->filter, ret, ret_len);
}

/* --top N beside another output: the table, as the collecting commands
 * print it after writing. */
static int top_to_stderr(const struct profile *p, const struct view_diff *d, size_t index,
			 const struct view_args *a, const char *title)
{
	char *buf = NULL;
	size_t len;
	int r = render(p, d, index, VIEW_TOP, (size_t)a->top, title, a, &buf, &len);

	if (r == 0) {
		fflush(stderr);
		fwrite(buf, 1, len, stderr);
	}
	free(buf);
	if (r < 0) {
		report_error("cannot show the top table: %s", strerror(-r));
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

static const char *base_name(const char *path)
{
	const char *base = strrchr(path, '/');

	return base ? base + 1 : path;
}

/* --diff-base, --base: OLD read and merged with FILE's @p into *ret. */
static int compare(const struct view_args *a, const struct profile *p, struct view_diff **ret)
{
	struct profile *old = NULL;
	char why[512];
	int r, code = load(a->base, &old);

	if (code)
		return code;
	r = view_diff_new(p, old, a->diff_mode, a->normalize, ret, why, sizeof(why));
	profile_free(old);
	if (r == -EINVAL || r == -EOVERFLOW) {
		report_error("cannot compare '%s' with '%s': %s", a->file, a->base, why);
		if (r == -EINVAL)
			report_hint("compare profiles of one kind: cpu with cpu, heap with heap, "
				    "as go tool pprof does");
		return EXIT_TARGET;
	}
	if (r < 0) {
		report_error("cannot compare '%s' with '%s': %s", a->file, a->base, strerror(-r));
		return EXIT_FAIL;
	}
	return 0;
}

int cmd_view(int argc, char **argv)
{
	struct profile *p = NULL;
	const struct profile *shown;
	struct view_diff *diff = NULL;
	struct view_args a;
	struct output out;
	char why[1024], title[512], *buf = NULL;
	size_t index, len;
	int r, code;

	code = parse_args(argc, argv, &a);
	if (code || a.help) {
		if (a.help)
			view_help();
		view_filter_free(a.filter);
		return code;
	}
	code = load(a.file, &p);
	if (code == 0 && a.base)
		code = compare(&a, p, &diff);
	if (code)
		goto out_free;
	shown = diff ? view_diff_profile(diff) : p;
	if (a.filter)
		warn_if_nothing_kept(shown, a.filter);
	if (view_sample_index(shown, a.index, &index) < 0) {
		code = unknown_index(shown, a.index);
		goto out_free;
	}
	r = output_prepare(&out, a.output ? a.output : "-", a.format == VIEW_PPROF, why,
			   sizeof(why));
	if (r < 0) {
		report_error_text(NULL, why);
		code = EXIT_OUTPUT;
		goto out_free;
	}
	if (diff)
		snprintf(title, sizeof(title), "%s less %s: %s (red: more, blue: less)",
			 base_name(a.file), base_name(a.base), shown->sample_types[index].type);
	else
		snprintf(title, sizeof(title), "%s: %s", base_name(a.file),
			 shown->sample_types[index].type);
	r = render(p, diff, index, a.format, a.format == VIEW_TOP ? (size_t)a.top : 0, title, &a,
		   &buf, &len);
	if (r == 0)
		r = output_commit_bytes(&out, buf, len);
	if (r < 0) {
		report_error("cannot write the %s view to '%s': %s", view_format_name(a.format),
			     output_name(&out), strerror(-r));
		output_abort(&out);
		code = EXIT_FAIL;
		goto out_free;
	}
	code = a.top && a.format != VIEW_TOP ? top_to_stderr(p, diff, index, &a, title) : EXIT_OK;
out_free:
	free(buf);
	view_diff_free(diff);
	profile_free(p);
	view_filter_free(a.filter);
	return code;
}
