/*
 * cprof view and the view outputs of the collecting commands (-o x.svg,
 * .folded, .txt, --top, --json, -q), judged against an independent reader:
 * `go tool pprof -top` on profiles written by Go's own runtime/pprof (built
 * here with Debian's golang-go) and by cprof; the flame graph is opened in
 * headless Chromium and its screenshot checked for the frames' colours.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pprof/pprof.h"
#include "testhelp.h"
#include "view/view.h"

TestSuite(view, .init = th_init, .fini = th_cleanup);

/* A frame's height in the flame graph (lib/view/svg.c), in pixels. */
#define FRAME_ROWS_PX 16

/* Where screenshots stay after the run (not removed by th_cleanup). */
#define SHOT_DIR TEST_TMPDIR "/../view-screenshots"

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	fputs(text, f);
	cr_assert_eq(fclose(f), 0);
}

/* A path NAME in a fresh directory: the extension must end the name, as
 * cprof chooses a view by it. Removed by th_cleanup() with the directory. */
static char *tmp_file(const char *name)
{
	char *path;

	cr_assert(asprintf(&path, "%s/%s", th_tmp_dir("view"), name) > 0);
	return path;
}

static char *read_text(const char *path)
{
	char *text = th_read_text(path, NULL);

	cr_assert_not_null(text, "cannot read %s", path);
	return text;
}

static void write_profile(const char *path, const struct profile *p)
{
	uint8_t *buf;
	size_t len;
	FILE *f = fopen(path, "wb");

	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	cr_assert_eq(pprof_encode_gzip(p, &buf, &len), 0);
	cr_assert_eq(fwrite(buf, 1, len, f), len);
	cr_assert_eq(fclose(f), 0);
	free(buf);
}

/* ---- folded stacks -------------------------------------------------------- */

/* Sum of the values of folded text; asserts every line's form. */
static long long folded_sum(const char *text)
{
	long long sum = 0;

	for (const char *p = text; *p;) {
		const char *end = strchr(p, '\n'), *sp;

		cr_assert_not_null(end, "folded output does not end its last line");
		for (sp = end; sp > p && sp[-1] != ' '; sp--)
			;
		cr_assert(sp > p + 1, "no value on line: %.*s", (int)(end - p), p);
		sum += atoll(sp);
		p = end + 1;
	}
	return sum;
}

static void expect_folded_total(const char *profile_path, const char *index)
{
	struct profile *p = th_load_profile(profile_path);
	struct th_run r;
	size_t i;

	cr_assert_eq(view_sample_index(p, index, &i), 0);
	if (index)
		TH_CPROF(&r, 60000, "view", profile_path, "--folded", "--index", index);
	else
		TH_CPROF(&r, 60000, "view", profile_path, "--folded");
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	cr_expect_eq(folded_sum(r.out), profile_total(p, i), "%s: folded sum vs the total",
		     profile_path);
	th_run_release(&r);
	profile_free(p);
}

/* ---- Go's own profiles ----------------------------------------------------- */

static const char go_program[] =
	"package main\n\n"
	"import (\n\t\"os\"\n\t\"runtime\"\n\t\"runtime/pprof\"\n)\n\n"
	"var sink [][]byte\n\n"
	"//go:noinline\n"
	"func burn(n int) uint64 {\n\tx := uint64(1)\n\tfor i := 0; i < n; i++ {\n"
	"\t\tx = x*6364136223846793005 + 1442695040888963407\n\t}\n\treturn x\n}\n\n"
	"//go:noinline\n"
	"func spin(calls int) uint64 {\n\tvar s uint64\n"
	"\tfor i := 0; i < calls; i++ {\n\t\ts += burn(200000)\n\t}\n"
	"\treturn s\n}\n\n"
	"//go:noinline\n"
	"func churn(calls int) uint64 {\n\tvar s uint64\n"
	"\tfor i := 0; i < calls; i++ {\n\t\ts += burn(100000)\n\t}\n"
	"\treturn s\n}\n\n"
	"//go:noinline\n"
	"func allocate(n, size int) {\n\tfor i := 0; i < n; i++ {\n"
	"\t\tsink = append(sink, make([]byte, size))\n\t}\n}\n\n"
	"func main() {\n\truntime.MemProfileRate = 4096\n"
	"\tcpu, err := os.Create(os.Args[1])\n\tif err != nil {\n\t\tpanic(err)\n\t}\n"
	"\tif err := pprof.StartCPUProfile(cpu); err != nil {\n\t\tpanic(err)\n\t}\n"
	"\tvar s uint64\n"
	"\tif len(os.Args) > 3 {\n" /* the other side of a comparison */
	"\t\ts = spin(1500) + churn(5000)\n"
	"\t\tallocate(1000, 4096)\n\t\tallocate(3000, 64)\n"
	"\t} else {\n"
	"\t\ts = spin(4000)\n\t\tallocate(3000, 4096)\n\t\tallocate(500, 64)\n"
	"\t}\n"
	"\tpprof.StopCPUProfile()\n\tcpu.Close()\n\truntime.GC()\n"
	"\theap, err := os.Create(os.Args[2])\n\tif err != nil {\n\t\tpanic(err)\n\t}\n"
	"\tif err := pprof.WriteHeapProfile(heap); err != nil {\n\t\tpanic(err)\n\t}\n"
	"\theap.Close()\n\tprintln(s, len(sink))\n}\n";

/* Builds and runs the Go program: *ret_cpu, *ret_heap are its profiles;
 * with @other, of its other workload (less spin, some churn, other
 * allocations), to compare with. The work is counted in calls, not in
 * time: what a loaded host gives either run must not turn less into more. */
static void go_profiles_of(bool other, char **ret_cpu, char **ret_heap)
{
	const char *dir = th_tmp_dir("goprog");
	char *src, *bin, *cpu, *heap, *gohome, *gocache, *gopath;
	struct th_run r;

	/* A cache kept in the build tree: later runs skip the compile. */
	cr_assert(asprintf(&gohome, "%s/gohome", TEST_TMPDIR) > 0);
	cr_assert(asprintf(&gocache, "%s/gohome/cache", TEST_TMPDIR) > 0);
	cr_assert(asprintf(&gopath, "%s/gohome/go", TEST_TMPDIR) > 0);
	mkdir(gohome, 0755);
	setenv("HOME", gohome, 1);
	setenv("GOCACHE", gocache, 1);
	setenv("GOPATH", gopath, 1);
	setenv("GOFLAGS", "-mod=mod", 1);
	setenv("GOTOOLCHAIN", "local", 1);
	setenv("GO111MODULE", "off", 1); /* one file, the standard library only */
	cr_assert(asprintf(&src, "%s/main.go", dir) > 0);
	cr_assert(asprintf(&bin, "%s/prog", dir) > 0);
	cr_assert(asprintf(&cpu, "%s/go-cpu%s.pprof", dir, other ? "-other" : "") > 0);
	cr_assert(asprintf(&heap, "%s/go-heap%s.pprof", dir, other ? "-other" : "") > 0);
	write_text(src, go_program);
	/* The first build compiles Go's runtime on both CPUs for a minute:
	 * niced, so that the suites beside it keep theirs. */
	th_run_cmd_ex(&r, 300000, 0, 0,
		      (const char *const[]){ "/usr/bin/nice", "-n", "15", "go", "build", "-o", bin,
					     src, NULL });
	if (r.exit_code == 127)
		TH_SKIP_MISSING("go is not installed (Debian's golang-go): no Go-written profiles");
	cr_assert_eq(r.exit_code, 0, "go build: %s%s", r.out, r.err);
	th_run_release(&r);
	th_run_cmd_ex(&r, 60000, 0, 0,
		      (const char *const[]){ bin, cpu, heap, other ? "other" : NULL, NULL });
	cr_assert_eq(r.exit_code, 0, "the Go program: %s", r.err);
	th_run_release(&r);
	free(src);
	free(bin);
	free(gohome);
	free(gocache);
	free(gopath);
	*ret_cpu = cpu;
	*ret_heap = heap;
}

static void go_profiles(char **ret_cpu, char **ret_heap)
{
	go_profiles_of(false, ret_cpu, ret_heap);
}

/* The fill of the first frame of function @name in the flame graph @svg. */
static void frame_rgb(const char *svg, const char *name, int rgb[3])
{
	char *t = read_text(svg), want[256];
	const char *at;

	snprintf(want, sizeof(want), "data-n=\"%s\"", name);
	at = strstr(t, want);
	cr_assert_not_null(at, "%s: no frame %s", svg, name);
	at = strstr(at, " fill=\"rgb(");
	cr_assert_not_null(at);
	cr_assert_eq(sscanf(at + 11, "%d,%d,%d", &rgb[0], &rgb[1], &rgb[2]), 3, "%.40s", at);
	free(t);
}

/* Every way of comparing @path with @base, as go tool pprof does them. */
static void diff_agrees_with_pprof(const char *path, const char *base, const char *index)
{
	th_view_diff_agrees_with_pprof(path, base, false, false, index);
	th_view_diff_agrees_with_pprof(path, base, true, false, index);
	th_view_diff_agrees_with_pprof(path, base, false, true, index);
	th_view_diff_agrees_with_pprof(path, base, true, true, index);
}

/* Signed folded stacks of a comparison add up to NEW's total less OLD's. */
static void expect_folded_difference(const char *path, const char *base, const char *index)
{
	struct profile *n = th_load_profile(path), *o = th_load_profile(base);
	struct th_run r;
	size_t i;

	cr_assert_eq(view_sample_index(n, index, &i), 0);
	TH_CPROF(&r, 60000, "view", path, "--base", base, "--folded", "--index",
		 n->sample_types[i].type);
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	cr_expect_eq(folded_sum(r.out), profile_total(n, i) - profile_total(o, i),
		     "%s less %s: folded sum vs the totals' difference", path, base);
	th_run_release(&r);
	profile_free(n);
	profile_free(o);
}

/* Two of Go's own CPU profiles and two heap profiles: what changed, as go
 * tool pprof -diff_base, -base and -normalize show it. */
Test(view, go_written_profiles_compared_as_pprof, .timeout = 300)
{
	static const char *const heap_indexes[] = { "alloc_objects", "alloc_space",
						    "inuse_objects", "inuse_space" };
	char *cpu, *heap, *cpu2, *heap2, *svg = tmp_file("go-diff.svg");
	char *merged = tmp_file("go-diff.pb.gz");
	struct th_run r, again;
	int rgb[3];

	go_profiles_of(false, &cpu, &heap);
	go_profiles_of(true, &cpu2, &heap2);
	diff_agrees_with_pprof(cpu2, cpu, NULL);
	for (size_t i = 0; i < sizeof(heap_indexes) / sizeof(heap_indexes[0]); i++)
		diff_agrees_with_pprof(heap2, heap, heap_indexes[i]);
	expect_folded_difference(cpu2, cpu, NULL);
	expect_folded_difference(heap2, heap, "alloc_space");

	/* churn is new, spin lost most of its time: red and blue. */
	TH_CPROF(&r, 60000, "view", cpu2, "--diff-base", cpu, "--svg", svg);
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	th_run_release(&r);
	/* --pprof writes the merged profile (pprof's -proto): pprof::base labels
	 * and all, its table is the comparison's. */
	TH_CPROF(&r, 60000, "view", cpu2, "--diff-base", cpu, "--pprof", "-o", merged);
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	th_run_release(&r);
	th_view_agrees_with_pprof(merged, NULL, 0);
	TH_CPROF(&r, 60000, "view", merged);
	TH_CPROF(&again, 60000, "view", cpu2, "--diff-base", cpu);
	cr_expect_str_eq(r.out, again.out, "the merged profile's table is the comparison's");
	th_run_release(&r);
	th_run_release(&again);

	frame_rgb(svg, "main.churn", rgb);
	cr_expect(rgb[0] == 255 && rgb[1] == rgb[2] && rgb[1] < 255, "churn grew: red");
	frame_rgb(svg, "main.spin", rgb);
	cr_expect(rgb[2] == 255 && rgb[0] == rgb[1] && rgb[0] < 255, "spin shrank: blue");
	free(svg);
	free(merged);
	free(cpu);
	free(heap);
	free(cpu2);
	free(heap2);
}

Test(view, go_written_profiles_agree_with_pprof, .timeout = 300)
{
	static const char *const heap_indexes[] = { "alloc_objects", "alloc_space",
						    "inuse_objects" };
	char *cpu, *heap;
	struct th_run r;

	go_profiles(&cpu, &heap);
	th_view_agrees_with_pprof(cpu, NULL, 0);
	th_view_agrees_with_pprof(heap, NULL, 0); /* inuse_space: pprof's default, the last */
	for (size_t i = 0; i < sizeof(heap_indexes) / sizeof(heap_indexes[0]); i++)
		th_view_agrees_with_pprof(heap, heap_indexes[i], 0);
	expect_folded_total(cpu, NULL);
	expect_folded_total(heap, "alloc_space");

	TH_CPROF(&r, 60000, "view", cpu, "--folded");
	cr_expect(strstr(r.out, "runtime.main;main.main;main.spin;main.burn "),
		  "Go's stack root first:\n%s", r.out);
	th_run_release(&r);
	TH_CPROF(&r, 60000, "view", heap, "--folded", "--index", "alloc_space");
	cr_expect(strstr(r.out, "runtime.main;main.main;main.allocate "), "%s", r.out);
	th_run_release(&r);
	free(cpu);
	free(heap);
}

/* ---- cprof's own profiles ---------------------------------------------- */

Test(view, cprof_written_profile_agrees_with_pprof, .timeout = 300)
{
	const char *out = th_tmp_path("demo.pb.gz");
	pid_t pid;
	struct th_run r;

	th_require_perf(false);
	pid = TH_SPAWN("demo", "20", "2");
	TH_CPROF(&r, 60000, "cpu", "-p", th_pid_str(pid), "-d", "2s", "-o", out, "-q");
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	th_run_release(&r);
	th_kill(pid);

	th_view_agrees_with_pprof(out, NULL, 0);
	th_view_agrees_with_pprof(out, "samples", 0);
	th_view_agrees_with_pprof(out, NULL, 5);
	expect_folded_total(out, NULL);
	TH_CPROF(&r, 60000, "view", out, "--folded");
	cr_expect(strstr(r.out, "start_thread;worker;handle_request;compress_block "),
		  "the demo's hot stack, root first:\n%s", r.out);
	th_run_release(&r);

	TH_CPROF(&r, 60000, "view", out, "--tree");
	cr_assert_eq(r.exit_code, 0);
	cr_expect(strstr(r.out, "  worker\n") && strstr(r.out, "  compress_block\n"), "%s", r.out);
	th_run_release(&r);
}

/* Two cprof CPU profiles of two runs of the demo (their own address
 * layouts: the merge must match code by mapping and offset). */
Test(view, cprof_profiles_compared_as_pprof, .timeout = 300)
{
	const char *out[2] = { th_tmp_path("demo-a.pb.gz"), th_tmp_path("demo-b.pb.gz") };
	struct th_run r;

	th_require_perf(false);
	for (size_t i = 0; i < 2; i++) {
		pid_t pid = TH_SPAWN("demo", "20", i ? "3" : "1");

		TH_CPROF(&r, 60000, "cpu", "-p", th_pid_str(pid), "-d", "2s", "-o", out[i], "-q");
		cr_assert_eq(r.exit_code, 0, "%s", r.err);
		th_run_release(&r);
		th_kill(pid);
	}
	diff_agrees_with_pprof(out[1], out[0], NULL);
	diff_agrees_with_pprof(out[1], out[0], "samples");
	expect_folded_difference(out[1], out[0], NULL);
}

/*
 * One side of a comparison by hand: main calls wait, into which inner is
 * inlined; OLD samples inner itself, NEW what inner calls (leafy). main and
 * wait cancel out and are not shown, so no shown frame calls inner. pprof
 * keeps its first graph when nothing is cut (here the cut-off is 0): there
 * the caller of inner is wait, shown or not, along an inline edge, so inner
 * is "(inline)". Seen in a comparison of two demo profiles (main's own
 * condition wait sampled once in each).
 */
static void write_cancelling_side(const char *path, bool new_side)
{
	static const struct profile_value_type types[] = { { "samples", "count" } };
	static const char *const names[] = { "main", "wait", "inner", "leafy" };
	struct profile_line lines[4] = { 0 }, waited[2];
	const struct profile_mapping m = { .start = 0x1000, .limit = 0x4000, .file = "/bin/c",
					   .build_id = "", .has_functions = true,
					   .has_inline_frames = true };
	struct profile *p = NULL;
	uint64_t map, loc_main, loc_wait, loc_leafy, stack[3];
	int64_t one = 1;

	cr_assert_eq(profile_new(&p, types, 1), 0);
	cr_assert_eq(profile_add_mapping(p, &m, &map), 0);
	for (size_t i = 0; i < 4; i++)
		cr_assert_eq(profile_intern_function(p, names[i], names[i], "c.c", 1,
						     &lines[i].function_id), 0);
	waited[0] = lines[2]; /* innermost first: inner inlined into wait */
	waited[1] = lines[1];
	cr_assert_eq(profile_add_location(p, 0x1000, map, &lines[0], 1, &loc_main), 0);
	cr_assert_eq(profile_add_location(p, 0x2000, map, waited, 2, &loc_wait), 0);
	cr_assert_eq(profile_add_location(p, 0x3000, map, &lines[3], 1, &loc_leafy), 0);
	if (new_side) {
		stack[0] = loc_leafy, stack[1] = loc_wait, stack[2] = loc_main;
		cr_assert_eq(profile_add_sample(p, stack, 3, &one, NULL, 0), 0);
	} else {
		stack[0] = loc_wait, stack[1] = loc_main;
		cr_assert_eq(profile_add_sample(p, stack, 2, &one, NULL, 0), 0);
	}
	write_profile(path, p);
	profile_free(p);
}

Test(view, inline_marks_through_callers_that_cancel_out, .timeout = 120)
{
	char *old = tmp_file("cancel-old.pb.gz"), *new = tmp_file("cancel-new.pb.gz");
	struct th_run r;

	write_cancelling_side(old, false);
	write_cancelling_side(new, true);
	TH_CPROF(&r, 60000, "view", new, "--diff-base", old);
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	cr_expect_not_null(strstr(r.out, " inner (inline)\n"), "inner is not marked inline:\n%s",
			   r.out);
	th_run_release(&r);
	diff_agrees_with_pprof(new, old, NULL);
	free(old);
	free(new);
}

/* ---- the flame graph ---------------------------------------------------- */

/* Well-formed XML: xmllint when installed, else its first and last tags. */
static void expect_well_formed(const char *svg)
{
	struct th_run r;
	char *text;

	if (access("/usr/bin/xmllint", X_OK) == 0) {
		th_run_cmd_ex(&r, 60000, 0, 0,
			      (const char *const[]){ "/usr/bin/xmllint", "--noout", svg, NULL });
		cr_expect_eq(r.exit_code, 0, "xmllint %s: %s", svg, r.err);
		th_run_release(&r);
		return;
	}
	text = read_text(svg);
	cr_expect(!strncmp(text, "<?xml", 5) && strstr(text, "</svg>\n"));
	free(text);
}

/* Counts, in a PNG, pixels of the flame palette (red >= 200, blue <= 60)
 * and of the search highlight (magenta). Python's zlib: no image library. */
static const char png_stats[] =
	"import sys, zlib, struct\n"
	"d = open(sys.argv[1], 'rb').read()\n"
	"assert d[:8] == b'\\x89PNG\\r\\n\\x1a\\n'\n"
	"pos, idat = 8, b''\n"
	"while pos < len(d):\n"
	"    n, t = struct.unpack('>I4s', d[pos:pos + 8]); c = d[pos + 8:pos + 8 + n]\n"
	"    if t == b'IHDR': w, h, depth, ctype = struct.unpack('>IIBB', c[:10])\n"
	"    elif t == b'IDAT': idat += c\n"
	"    pos += 12 + n\n"
	"bpp = {2: 3, 6: 4}[ctype]; raw = zlib.decompress(idat); stride = w * bpp\n"
	"prev = bytearray(stride); flame = magenta = 0; colours = set()\n"
	"for y in range(h):\n"
	"    f = raw[y * (stride + 1)]\n"
	"    line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])\n"
	"    for i in range(stride):\n"
	"        a = line[i - bpp] if i >= bpp else 0; b = prev[i]\n"
	"        c = prev[i - bpp] if i >= bpp else 0\n"
	"        if f == 1: line[i] = (line[i] + a) & 255\n"
	"        elif f == 2: line[i] = (line[i] + b) & 255\n"
	"        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255\n"
	"        elif f == 4:\n"
	"            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)\n"
	"            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255\n"
	"    for x in range(0, stride, bpp):\n"
	"        r, g, b = line[x], line[x + 1], line[x + 2]; colours.add((r, g, b))\n"
	"        if r >= 200 and b <= 60 and g <= 235: flame += 1\n"
	"        if r >= 220 and g <= 20 and b >= 220: magenta += 1\n"
	"    prev = line\n"
	"print('%d %d %d %d %d' % (w, h, len(colours), flame, magenta))\n";

struct png_stat {
	int w, h, colours, flame, magenta;
};

static struct png_stat png_stat(const char *png)
{
	struct png_stat s = { 0 };
	struct th_run r;

	th_run_cmd_ex(&r, 120000, 0, 0,
		      (const char *const[]){ "/usr/bin/env", "python3", "-c", png_stats, png, NULL });
	if (r.exit_code == 127)
		TH_SKIP_MISSING("python3 is not installed: cannot decode the screenshot");
	cr_assert_eq(r.exit_code, 0, "decoding %s: %s", png, r.err);
	cr_assert_eq(sscanf(r.out, "%d %d %d %d %d", &s.w, &s.h, &s.colours, &s.flame,
			    &s.magenta), 5, "%s", r.out);
	th_run_release(&r);
	return s;
}

static const char *chromium_path(void)
{
	static const char *const paths[] = { "/usr/bin/chromium", "/usr/bin/chromium-browser",
					     "/usr/bin/google-chrome" };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (access(paths[i], X_OK) == 0)
			return paths[i];
	return NULL;
}

/*
 * Headless Chromium's --screenshot may capture a frame composited before the
 * page's load handler ran, whatever its virtual time budget: beside
 * stress-ng a zoomed and searched graph was once shot with nothing of the
 * search on it. A shot with no trace of the script is taken again; a
 * script that does not run fails every one of them.
 */
#define SHOTS_MAX 3

/* Opens @url in headless Chromium and writes a 1200x800 screenshot to @png. */
static void screenshot(const char *url, const char *png)
{
	const char *chromium = chromium_path();
	char *shot, *profile_dir;
	struct th_run r;

	if (!chromium)
		TH_SKIP_MISSING("chromium is not installed (scripts/setup installs it): the flame "
			     "graph is not opened in a browser");
	cr_assert(asprintf(&shot, "--screenshot=%s", png) > 0);
	cr_assert(asprintf(&profile_dir, "--user-data-dir=%s", th_tmp_dir("chromium")) > 0);
	unlink(png);
	/*
	 * The graph's script zooms and searches on the page's load event. A
	 * plain --screenshot may capture the first paint before that: beside
	 * stress-ng it once showed no search at all. A virtual time budget has
	 * headless run the page's tasks first, and every compositor stage is
	 * run before the frame is drawn.
	 */
	th_run_cmd_ex(&r, 120000, 0, 0,
		      (const char *const[]){ chromium, "--headless", "--no-sandbox", "--disable-gpu",
					     "--disable-quic", "--no-first-run",
					     "--disable-background-networking",
					     "--disable-component-update", "--disable-sync",
					     "--virtual-time-budget=2000",
					     "--run-all-compositor-stages-before-draw", profile_dir,
					     shot, "--window-size=1200,800", url, NULL });
	cr_assert_eq(r.exit_code, 0, "chromium: exit %d: %s", r.exit_code, r.err);
	cr_assert_eq(access(png, R_OK), 0, "chromium wrote no %s: %s", png, r.err);
	th_run_release(&r);
	free(shot);
	free(profile_dir);
}

Test(view, demo_flame_graph_in_chromium, .timeout = 300)
{
	char *dir, *svg, *png, *png_zoom, *url, *text;
	struct png_stat s, z;
	struct th_run r;
	pid_t pid;

	th_require_perf(false);
	if (!chromium_path())
		TH_SKIP_MISSING("chromium is not installed (scripts/setup installs it): the flame "
			     "graph is not opened in a browser");
	mkdir(SHOT_DIR, 0755);
	dir = realpath(SHOT_DIR, NULL);
	cr_assert_not_null(dir, "%s: %s", SHOT_DIR, strerror(errno));
	cr_assert(asprintf(&svg, "%s/demo-flamegraph.svg", dir) > 0);
	cr_assert(asprintf(&png, "%s/demo-flamegraph.png", dir) > 0);
	cr_assert(asprintf(&png_zoom, "%s/demo-flamegraph-zoom.png", dir) > 0);
	free(dir);

	/* The collecting command writes the flame graph itself. */
	pid = TH_SPAWN("demo", "20", "2");
	TH_CPROF(&r, 60000, "cpu", "-p", th_pid_str(pid), "-d", "2s", "-o", svg, "-q");
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	th_run_release(&r);
	th_kill(pid);
	expect_well_formed(svg);
	text = read_text(svg);
	cr_expect(strstr(text, "data-n=\"compress_block\""), "no compress_block frame");
	cr_expect(strstr(text, "data-n=\"worker\""), "no worker frame");
	free(text);
#ifdef __SANITIZE_ADDRESS__
	/* What chromium runs is the graph's own script, not cprof's code: the
	 * sanitizers have nothing to find there, the plain build opens it. */
	free(png_zoom);
	free(svg);
	free(png);
	return;
#endif

	cr_assert(asprintf(&url, "file://%s", svg) > 0);
	screenshot(url, png);
	s = png_stat(png);
	fprintf(stderr, "view: demo flame graph screenshot: %s (%dx%d, %d colours, %d flame "
			"pixels)\n", png, s.w, s.h, s.colours, s.flame);
	cr_expect_eq(s.w, 1200);
	cr_expect_gt(s.colours, 50, "a blank page has a handful of colours");
	cr_expect_gt(s.flame, s.w * 16 * 3, "fewer flame-coloured pixels than three full rows");
	cr_expect_eq(s.magenta, 0, "nothing searched, nothing highlighted");
	free(url);

	/* The script runs: ?z= zooms into hash_payload as a click does, ?s=
	 * searches as the Search button does and paints the matches. Zoomed,
	 * mix64 (inlined into hash_payload, ~90% of it) spans more than half
	 * the width; unzoomed it has about a quarter. */
	cr_assert(asprintf(&url, "file://%s?z=hash_payload&s=%%5Emix64%%24", svg) > 0);
	for (int shot = 1; shot <= SHOTS_MAX; shot++) {
		screenshot(url, png_zoom);
		z = png_stat(png_zoom);
		fprintf(stderr, "view: zoomed into hash_payload, searched mix64: %s (%d highlighted "
				"pixels, shot %d)\n", png_zoom, z.magenta, shot);
		if (z.magenta > 0)
			break;
	}
	cr_expect_gt(z.magenta, (FRAME_ROWS_PX - 2) * (1200 - 20) / 2,
		     "mix64 is not highlighted across half the zoomed graph");
	free(url);
	free(png_zoom);
	free(svg);
	free(png);
}

/* ---- bad input ------------------------------------------------------------ */

Test(view, bad_input_says_why)
{
	const char *junk = th_tmp_path("junk.pb.gz"), *good = th_tmp_path("good.pb.gz"),
		   *heap_path = th_tmp_path("heap.pb.gz");
	struct profile *p = NULL;
	struct profile_value_type t = { "cpu", "nanoseconds" }, heap = { "alloc_space", "bytes" };
	struct th_run r;

	write_text(junk, "this is not a profile\n");
	TH_CPROF(&r, 10000, "view", junk);
	cr_expect_eq(r.exit_code, 2, "not pprof: exit %d", r.exit_code);
	cr_expect(strstr(r.err, "not a pprof profile"), "%s", r.err);
	th_run_release(&r);

	TH_CPROF(&r, 10000, "view", TEST_TMPDIR "/no-such-file.pb.gz");
	cr_expect_eq(r.exit_code, 2, "missing: exit %d", r.exit_code);
	cr_expect(strstr(r.err, "cannot read") && strstr(r.err, "No such file"), "%s", r.err);
	th_run_release(&r);

	cr_assert_eq(profile_new(&p, &t, 1), 0);
	write_profile(good, p);
	profile_free(p);
	TH_CPROF(&r, 10000, "view", good, "--index", "alloc_space");
	cr_expect_eq(r.exit_code, 64, "unknown --index: exit %d", r.exit_code);
	cr_expect(strstr(r.err, "invalid --index 'alloc_space'"), "%s", r.err);
	cr_expect(strstr(r.err, "hint: its sample types are: cpu"), "%s", r.err);
	th_run_release(&r);

	/* A comparison of profiles of other kinds, as pprof refuses it. */
	cr_assert_eq(profile_new(&p, &heap, 1), 0);
	write_profile(heap_path, p);
	profile_free(p);
	TH_CPROF(&r, 10000, "view", good, "--diff-base", heap_path);
	cr_expect_eq(r.exit_code, 2, "incompatible: exit %d", r.exit_code);
	cr_expect(strstr(r.err, "cannot compare") &&
		  strstr(r.err, "incompatible sample types [cpu/nanoseconds] and "
				"[alloc_space/bytes]"), "%s", r.err);
	th_run_release(&r);
	TH_CPROF(&r, 10000, "view", good, "--base", junk);
	cr_expect_eq(r.exit_code, 2, "OLD not pprof: exit %d", r.exit_code);
	cr_expect(strstr(r.err, "not a pprof profile"), "%s", r.err);
	th_run_release(&r);
	TH_CPROF(&r, 10000, "view", good, "--normalize");
	cr_expect_eq(r.exit_code, 64);
	cr_expect(strstr(r.err, "--normalize needs --diff-base or --base"), "%s", r.err);
	th_run_release(&r);
	TH_CPROF(&r, 10000, "view", good, "--base", good, "--diff-base", good);
	cr_expect_eq(r.exit_code, 64);
	th_run_release(&r);

	TH_CPROF(&r, 10000, "view", good, "--svg", TEST_TMPDIR "/no-such-dir/x.svg");
	cr_expect_eq(r.exit_code, 4, "unwritable output: exit %d", r.exit_code);
	th_run_release(&r);
	TH_CPROF(&r, 10000, "view", good, "--folded", "--tree");
	cr_expect_eq(r.exit_code, 64);
	th_run_release(&r);
	TH_CPROF(&r, 10000, "view");
	cr_expect_eq(r.exit_code, 64);
	cr_expect(strstr(r.err, "missing FILE"), "%s", r.err);
	th_run_release(&r);
}

/* ---- views, --top, --json and -q from the collecting commands ------------- */

/* The value of "key": in one line of JSON, as text (numbers, null). */
static long long json_number(const char *json, const char *key)
{
	char needle[64];
	const char *p;

	snprintf(needle, sizeof(needle), "\"%s\":", key);
	p = strstr(json, needle);
	cr_assert_not_null(p, "no %s in %s", key, json);
	return atoll(p + strlen(needle));
}

/*
 * It judges what 1 s of busy's CPU gives (its samples, its hot spots, none
 * lost), so the plain build runs it with the suites that measure, alone
 * (TIMING_TESTS_OF; the sanitized build judges the output's form only):
 * beside the torture suite cprof's drains waited for a cpu longer than its
 * rings hold, and busy got little of one.
 */
Test(view, cpu_folded_json_quiet, .timeout = 120)
{
	char *folded = tmp_file("cpu.folded");
	struct th_run r;
	char *text;
	pid_t pid;

	th_require_perf(false);
	pid = TH_SPAWN("busy", "2", "20");
	TH_CPROF(&r, 60000, "cpu", "-p", th_pid_str(pid), "-d", "1s", "-o", folded, "--json",
		 "-q");
	th_kill(pid);
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	cr_expect_eq(r.err_len, 0, "-q: nothing on stderr, got: %s", r.err);
	cr_expect(!strncmp(r.out, "{\"command\":\"cpu\",", 16), "%s", r.out);
	cr_expect_eq(strchr(r.out, '\n') - r.out + 1, (long)r.out_len, "one line: %s", r.out);
	cr_expect_eq(json_number(r.out, "pid"), pid);
	cr_expect(strstr(r.out, "\"output\":\""), "%s", r.out);
#ifndef __SANITIZE_ADDRESS__
	/* Where it runs alone: the sanitized build runs it beside the other
	 * suites, where busy may get a tenth of a CPU. */
	cr_expect_gt(json_number(r.out, "samples"), 10, "%s", r.out);
	cr_expect_eq(json_number(r.out, "lost"), 0);
#else
	cr_expect_gt(json_number(r.out, "samples"), 0, "%s", r.out);
#endif
	cr_expect(strstr(r.out, "\"pause_ms\":null"), "%s", r.out);
	cr_expect(strstr(r.out, "\"top\":[{\"function\":\"work_"), "busy's hot spots: %s", r.out);
	text = read_text(folded);
	cr_expect_eq(folded_sum(text), json_number(r.out, "total"), "folded sum vs total");
	cr_expect(strstr(text, "start_thread;"), "%s", text);
	free(text);
	free(folded);
	th_run_release(&r);
}

Test(view, threads_and_heap_views, .timeout = 120)
{
	char *txt = tmp_file("threads.txt"), *svg = tmp_file("heap.svg");
	char *heap = tmp_file("heap.pb.gz");
	struct th_run r;
	char *text;
	pid_t pid;

	pid = TH_SPAWN("heapsites", "20", th_tmp_path("report"));
	TH_CPROF(&r, 60000, "threads", "-p", th_pid_str(pid), "-o", txt, "--json", "-q");
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	cr_expect_eq(r.err_len, 0, "-q: %s", r.err);
	cr_expect(strstr(r.out, "\"command\":\"threads\""), "%s", r.out);
	cr_expect(!strstr(r.out, "\"pause_ms\":null"), "a snapshot has a pause: %s", r.out);
	cr_expect_gt(json_number(r.out, "samples"), 0);
	th_run_release(&r);
	text = read_text(txt);
	cr_expect(strstr(text, "Type: threads\n") && strstr(text, "      flat  flat%"), "%s",
		  text);
	free(text);
	/* With --debug 2 the text asked for goes to x.txt, not the table. */
	TH_CPROF(&r, 60000, "threads", "-p", th_pid_str(pid), "--debug", "2", "-o", txt, "-q");
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	th_run_release(&r);
	text = read_text(txt);
	cr_expect(!strncmp(text, "# paused ", 9) && !strstr(text, "flat%"), "%s", text);
	free(text);

	/* alloc_space: what was allocated in the window is there even when a
	 * slow (sanitized) cprof loses records of frees. */
	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(pid), "-d", "1s", "--heap-rate", "64KiB",
		 "--index", "alloc_space", "-o", svg, "--top", "3");
	if (r.exit_code == 3)
		TH_SKIP_MISSING("no permission to load the agent: %s", r.err);
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	cr_expect(strstr(r.err, "Type: alloc_space") && strstr(r.err, "Showing top 3 nodes"),
		  "--top 3 on stderr: %s", r.err);
	th_run_release(&r);
	/* cprof's heap profiles carry drop_frames (the agent's hooks): pprof
	 * prunes them, and so must cprof view. */
	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(pid), "-d", "1s", "--heap-rate", "64KiB", "-o",
		 heap, "-q");
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	th_run_release(&r);
	th_kill(pid);
	th_view_agrees_with_pprof(heap, "alloc_space", 0);
	th_view_agrees_with_pprof(heap, "alloc_objects", 0);
	expect_well_formed(svg);
	text = read_text(svg);
	cr_expect(strstr(text, "data-n=\"retain_4k\""), "the retaining site is a frame");
	free(text);
	free(txt);
	free(svg);
	free(heap);

	TH_CPROF(&r, 10000, "cpu", "-p", "1", "-o", "-", "--json");
	cr_expect_eq(r.exit_code, 64, "--json with -o -: exit %d", r.exit_code);
	th_run_release(&r);
	TH_CPROF(&r, 10000, "threads", "-p", "1", "--debug", "2", "--format", "svg");
	cr_expect_eq(r.exit_code, 64, "--debug 2 has no svg: exit %d", r.exit_code);
	th_run_release(&r);
	TH_CPROF(&r, 10000, "cpu", "-p", "1", "--format", "png");
	cr_expect_eq(r.exit_code, 64);
	th_run_release(&r);
}

/* ---- label filters: --tagfocus and --tagignore --------------------------- */

/* A wall profile by hand: threads in known functions, each sample with the
 * labels cprof wall writes (state, syscall off the CPU, thread_id). */
static struct profile *labelled_profile(void)
{
	static const struct profile_value_type types[] = { { "samples", "count" },
							   { "wall", "nanoseconds" } };
	static const char *const names[] = { "main", "worker", "nap", "clock_nanosleep",
					      "wait_job", "futex_wait", "crunch" };
	struct profile *p = NULL;
	uint64_t loc[7];

	cr_assert_eq(profile_new(&p, types, 2), 0);
	cr_assert_eq(profile_set_period(p, "wall", "nanoseconds", 10000000), 0);
	p->duration_nanos = 2000000000;
	for (size_t i = 0; i < 7; i++) {
		struct profile_line line = { 0 };

		cr_assert_eq(profile_intern_function(p, names[i], names[i], "w.c", 1,
						     &line.function_id), 0);
		cr_assert_eq(profile_add_location(p, 0x1000 + i * 0x10, 0, &line, 1, &loc[i]), 0);
	}
	for (int tid = 100; tid < 104; tid++) {
		const struct {
			uint64_t stack[4];
			size_t n;
			const char *state, *syscall;
			int64_t ms;
		} parts[] = {
			{ { loc[3], loc[2], loc[1], loc[0] }, 4, "sleeping", "clock_nanosleep",
			  900 + tid },
			{ { loc[5], loc[4], loc[1], loc[0] }, 4, "sleeping", "futex", 500 - tid },
			{ { loc[6], loc[1], loc[0] }, 3, "running", NULL, 300 + 10 * tid },
			{ { loc[6], loc[1], loc[0] }, 3, "runnable", NULL, 40 },
			{ { loc[2], loc[1], loc[0] }, 3, "running", NULL, 7 },
		};

		for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
			struct profile_label labels[3] = {
				{ .key = "thread_id", .num = tid },
				{ .key = "state", .str = parts[i].state },
				{ .key = "syscall", .str = parts[i].syscall },
			};
			int64_t v[2] = { parts[i].ms / 10, parts[i].ms * 1000000 };

			cr_assert_eq(profile_add_sample(p, parts[i].stack, parts[i].n, v, labels,
							parts[i].syscall ? 3 : 2), 0);
		}
	}
	return p;
}

/*
 * `cprof view PATH --tagfocus/--tagignore SPEC [--top N]` against `go tool
 * pprof -top -tagfocus/-tagignore=SPEC [-nodecount=N]`: the same lines from
 * "Active filters:" on (the totals, what is dropped, the table). Skips when go
 * is not installed.
 */
static void expect_filtered_like_pprof(const char *path, bool ignore, const char *spec, int top)
{
	const char *opt = ignore ? "--tagignore" : "--tagfocus";
	char go_filter[256], nodecount[32], top_arg[32];
	const char *go_opts[3] = { go_filter, NULL, NULL };
	char *go_out = NULL;
	const char *mine, *theirs;
	struct th_run r;

	snprintf(go_filter, sizeof(go_filter), "-%s=%s", opt + 2, spec);
	snprintf(nodecount, sizeof(nodecount), "-nodecount=%d", top);
	snprintf(top_arg, sizeof(top_arg), "%d", top);
	if (top) {
		go_opts[1] = nodecount;
		TH_CPROF(&r, 60000, "view", path, opt, spec, "--top", top_arg);
	} else {
		TH_CPROF(&r, 60000, "view", path, opt, spec);
	}
	cr_assert_eq(r.exit_code, 0, "cprof view %s %s: %s", opt, spec, r.err);
	cr_assert_eq(th_pprof_top_ex(path, go_opts, &go_out), 0, "%s", go_out);
	mine = strstr(r.out, "Active filters:\n");
	theirs = strstr(go_out, "Active filters:\n");
	cr_assert_not_null(mine, "no filters in cprof view's header:\n%s", r.out);
	cr_assert_not_null(theirs, "no filters in pprof's header:\n%s", go_out);
	/* pprof's stderr follows its stdout in go_out ("Main binary filename not
	 * available."): the same text, then no more rows. */
	cr_expect(!strncmp(mine, theirs, strlen(mine)) && theirs[strlen(mine)] != ' ',
		  "%s %s: cprof view and go tool pprof differ:\n%s---\n%s", opt, spec, mine,
		  theirs);
	th_run_release(&r);
	free(go_out);
}

/* Sum of the wall values of the samples whose label @key is @value. */
static int64_t labelled_total(const struct profile *p, const char *key, const char *value)
{
	int64_t sum = 0;

	for (size_t i = 0; i < p->nsamples; i++)
		for (size_t l = 0; l < p->samples[i].nlabels; l++)
			if (!strcmp(p->samples[i].labels[l].key, key) &&
			    p->samples[i].labels[l].str &&
			    !strcmp(p->samples[i].labels[l].str, value))
				sum += p->samples[i].values[1];
	return sum;
}

Test(view, tag_filters_agree_with_pprof, .timeout = 300)
{
	static const struct {
		bool ignore;
		const char *spec;
	} filters[] = {
		{ false, "state=sleeping" },  { true, "state=sleeping" },
		{ false, "state=run" },       { false, "syscall=futex,nanosleep" },
		{ false, "thread_id=101" },   { false, "thread_id=101:102" },
		{ true, "thread_id=:101" },   { false, "state:running" },
		{ false, "nosuchkey=x" },
	};
	char *pb = tmp_file("wall.pb.gz"), *out = tmp_file("sleeping.pb.gz");
	struct profile *p = labelled_profile(), *q;
	int64_t sleeping = labelled_total(p, "state", "sleeping");
	struct th_run r;

	write_profile(pb, p);
	for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++) {
		expect_filtered_like_pprof(pb, filters[i].ignore, filters[i].spec, 0);
		expect_filtered_like_pprof(pb, filters[i].ignore, filters[i].spec, 2);
	}

	/* Every view shows the same part: folded stacks add up to it, the tree's
	 * root is it, and the profile written is the samples kept. */
	TH_CPROF(&r, 60000, "view", pb, "--tagfocus", "state=sleeping", "--folded");
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	cr_expect_eq(folded_sum(r.out), sleeping, "folded sum vs the sleeping samples");
	cr_expect(!strstr(r.out, "crunch"), "a running frame among the sleeping:\n%s", r.out);
	th_run_release(&r);
	TH_CPROF(&r, 60000, "view", pb, "--tagfocus", "state=sleeping", "--tree");
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	cr_expect(strstr(r.out, "0  all\n") && !strstr(r.out, "crunch"), "%s", r.out);
	th_run_release(&r);
	TH_CPROF(&r, 60000, "view", pb, "--tagfocus", "state=sleeping", "--pprof", "-o", out);
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	th_run_release(&r);
	q = th_load_profile(out);
	cr_expect_eq(profile_total(q, 1), sleeping, "the profile written keeps the sleeping");
	cr_expect_eq(labelled_total(q, "state", "sleeping"), sleeping);
	profile_free(q);

	/* A filter that keeps nothing says so; one that cannot be read is a usage
	 * error. */
	TH_CPROF(&r, 60000, "view", pb, "--tagfocus", "nosuchkey=x");
	cr_expect_eq(r.exit_code, 0);
	cr_expect(strstr(r.err, "no sample passes") && strstr(r.err, "labels are: thread_id, "
								       "state, syscall"),
		  "%s", r.err);
	th_run_release(&r);
	TH_CPROF(&r, 60000, "view", pb, "--tagfocus", "state=(");
	cr_expect_eq(r.exit_code, 64);
	cr_expect(strstr(r.err, "invalid --tagfocus 'state=('"), "%s", r.err);
	th_run_release(&r);
	profile_free(p);
	free(pb);
	free(out);
}

/* A 1 s cprof wall profile of wallmix in @pb (real threads, real labels);
 * skips the test when wall is refused here. */
static void wallmix_profile(const char *pb, const char *report)
{
	struct th_run r;
	pid_t pid;

	pid = TH_SPAWN("wallmix", "20", th_tmp_path(report));
	TH_CPROF(&r, 60000, "wall", "-p", th_pid_str(pid), "-d", "1s", "-o", pb, "-q");
	th_kill(pid);
	if (r.exit_code == 3)
		TH_SKIP_MISSING("cprof wall is refused here: %s", r.err);
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	th_run_release(&r);
}

/* The same on a profile cprof wall wrote of wallmix. */
Test(view, tag_filters_on_a_wall_profile, .timeout = 300)
{
	char *pb = tmp_file("wallmix.pb.gz");

	wallmix_profile(pb, "wallmix.report");
	expect_filtered_like_pprof(pb, false, "state=sleeping", 0);
	expect_filtered_like_pprof(pb, true, "state=sleeping", 0);
	expect_filtered_like_pprof(pb, false, "thread_name=sleeper,epoller", 10);
	free(pb);
}

/* A comparison of one part of two profiles: as pprof, the filter applies
 * to the merged profile (and the total stays OLD's). */
static void expect_diff_filtered_like_pprof(const char *path, const char *base, const char *spec)
{
	char go_base[PATH_MAX + 16], go_filter[256];
	const char *go_opts[3] = { go_base, go_filter, NULL };
	char *go_out = NULL;
	struct th_run r;

	snprintf(go_base, sizeof(go_base), "-diff_base=%s", base);
	snprintf(go_filter, sizeof(go_filter), "-tagfocus=%s", spec);
	TH_CPROF(&r, 60000, "view", path, "--diff-base", base, "--tagfocus", spec);
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	cr_assert_eq(th_pprof_top_ex(path, go_opts, &go_out), 0, "%s", go_out);
	cr_expect(strstr(r.out, "Active filters:\n"), "%s", r.out);
	cr_expect_str_eq(r.out, go_out, "--diff-base --tagfocus %s: cprof view and go tool pprof "
			 "differ", spec);
	th_run_release(&r);
	free(go_out);
}

/* Two cprof wall profiles of two runs of wallmix: labels, threads and
 * states differ from one to the other. */
Test(view, cprof_wall_profiles_compared_as_pprof, .timeout = 300)
{
	char *a = tmp_file("wallmix-a.pb.gz"), *b = tmp_file("wallmix-b.pb.gz");

	wallmix_profile(a, "wallmix-a.report");
	wallmix_profile(b, "wallmix-b.report");
	diff_agrees_with_pprof(b, a, NULL);
	expect_folded_difference(b, a, NULL);
	expect_diff_filtered_like_pprof(b, a, "state=sleeping");
	expect_diff_filtered_like_pprof(b, a, "thread_name=sleeper,epoller");
	free(a);
	free(b);
}

/* -o picks the format by its extension, as every command's does: .txt is
 * the table, anything else (x.pb.gz, kept.out) the profile, what the
 * filters keep. */
Test(view, output_name_picks_profile_or_table, .timeout = 120)
{
	char *pb = tmp_file("wallmix-o.pb.gz"), *kept = tmp_file("kept.pb.gz");
	char *table = tmp_file("kept.txt"), *other = tmp_file("kept.out");
	struct profile *whole, *part;
	uint8_t *buf;
	size_t len;
	struct th_run r;

	wallmix_profile(pb, "wallmix-o.report");
	TH_CPROF(&r, 60000, "view", pb, "--tagfocus", "thread_name=sleeper", "-o", kept);
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	th_run_release(&r);
	whole = th_load_profile(pb);
	part = th_load_profile(kept);
	cr_expect_gt(profile_total(part, 1), 0);
	cr_expect_lt(profile_total(part, 1), profile_total(whole, 1) / 2,
		     "the filter was not applied to the profile written");
	TH_CPROF(&r, 60000, "view", pb, "-o", table);
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	th_run_release(&r);
	cr_assert_eq(th_read_file(table, &buf, &len), 0);
	cr_expect(!th_is_gzip(buf, len) && memmem(buf, len, "flat%", 5),
		  "-o kept.txt is not the table");
	free(buf);
	TH_CPROF(&r, 60000, "view", pb, "-o", other);
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	th_run_release(&r);
	profile_free(th_load_profile(other));
	profile_free(whole);
	profile_free(part);
	free(pb);
	free(kept);
	free(table);
	free(other);
}
