/*
 * Go's net/http/pprof paths, parameters and texts (Index, Profile,
 * handler.ServeHTTP, serveDeltaProfile, Cmdline, serveError), answered for
 * a native process. What Go's ServeMux does around them too: "404 page not
 * found" off /debug/pprof/, and /debug/pprof redirected there.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pprof/pprof.h"
#include "serve/serve-private.h"
#include "util/util.h"

#define PREFIX "/debug/pprof/"
#define NOSNIFF "X-Content-Type-Options", "nosniff"
/* Go's serveError()'s headers, beside its http.Error()'s content type. */
#define GO_ERROR NOSNIFF, "X-Go-Pprof", "1"

static const char *const kind_names[] = {
	[SK_HEAP] = "heap",	    [SK_ALLOCS] = "allocs",
	[SK_BLOCK] = "block",	    [SK_MUTEX] = "mutex",
	[SK_THREADCREATE] = "threadcreate", [SK_GOROUTINE] = "goroutine",
	[SK_CPU] = "profile",	    [SK_WALL] = "wall",
};

/* Go's profileDescriptions, and cprof's wall. */
static const struct {
	const char *name, *desc;
	int kind; /* -1: no count */
} index_entries[] = {
	{ "allocs", "A sampling of all past memory allocations", SK_ALLOCS },
	{ "block", "Stack traces that led to blocking on synchronization primitives", SK_BLOCK },
	{ "cmdline", "The command line invocation of the current program", -1 },
	{ "goroutine", "Stack traces of all current goroutines", SK_GOROUTINE },
	{ "heap", "A sampling of memory allocations of live objects. You can specify the gc "
		  "GET parameter to run GC before taking the heap sample.", SK_HEAP },
	{ "mutex", "Stack traces of holders of contended mutexes", SK_MUTEX },
	{ "profile", "CPU profile. You can specify the duration in the seconds GET parameter. "
		     "After you get the profile file, use the go tool pprof command to "
		     "investigate the profile.", -1 },
	{ "threadcreate", "Stack traces that led to the creation of new OS threads",
	  SK_THREADCREATE },
	{ "wall", "cprof: where every thread's time goes, on and off CPU. You can specify the "
		  "duration in the seconds GET parameter.", -1 },
};

static void reply(struct http_request *req, unsigned status, const char *type, char *body,
		  size_t len, const char *const *headers)
{
	/* A reply that cannot be made (no memory) ends the connection. */
	(void)http_reply(req, status, type, body, len, headers);
}

static void reply_text(struct http_request *req, unsigned status, const char *const *headers,
		       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void reply_text(struct http_request *req, unsigned status, const char *const *headers,
		       const char *fmt, ...)
{
	char *body = NULL;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&body, fmt, ap);
	va_end(ap);
	if (n < 0)
		body = NULL;
	reply(req, status, HTTP_TEXT, body, n < 0 ? 0 : (size_t)n, headers);
}

void serve_error(struct http_request *req, unsigned status, const char *text)
{
	static const char *const h[] = { GO_ERROR, NULL };

	reply_text(req, status, h, "%s\n", text);
}

/* A goroutine profile asked too soon (serve_snapshot_refused()): 429, as
 * serveError() would write it, and when to come back. */
static bool refused_snapshot(const struct serve *s, struct http_request *req,
			     enum serve_kind k)
{
	char retry[16];
	const char *const h[] = { GO_ERROR, "Retry-After", retry, NULL };

	if (k != SK_GOROUTINE || !serve_snapshot_refused(s))
		return false;
	snprintf(retry, sizeof(retry), "%u", serve_snapshot_retry_s(s));
	reply_text(req, 429, h, "goroutine profiles are limited to one every %d ms, and to %d "
		   "times the last one's pause: each stops every thread of the process\n",
		   SERVE_SNAPSHOT_INTERVAL_MS, SERVE_SNAPSHOT_SHARE);
	return true;
}

void serve_profile(struct http_request *req, struct profile *p, const char *filename)
{
	char disposition[128];
	const char *h[] = { NOSNIFF, "Content-Disposition", disposition, NULL };
	uint8_t *buf = NULL;
	size_t len = 0;
	int r = pprof_encode_gzip(p, &buf, &len);

	profile_free(p);
	if (r < 0) {
		serve_error(req, 500, "failed to encode the profile");
		return;
	}
	snprintf(disposition, sizeof(disposition), "attachment; filename=\"%s\"", filename);
	reply(req, 200, "application/octet-stream", (char *)buf, len, h);
}

/* Go's strconv.Atoi(r.FormValue(name)): 0 when absent or not a number. */
static int arg_int(const struct http_request *req, const char *name)
{
	const char *v = http_arg(req, name);
	char *end;
	long n;

	if (!v || !*v)
		return 0;
	errno = 0;
	n = strtol(v, &end, 10);
	return *end || errno || n > INT_MAX || n < INT_MIN ? 0 : (int)n;
}

/* strconv.ParseInt(v, 10, 64) > 0; false for anything else. */
static bool parse_seconds(const char *v, long long *ret)
{
	char *end;

	if (!v || !*v || *v == ' ')
		return false;
	errno = 0;
	*ret = strtoll(v, &end, 10);
	return !*end && !errno && *ret > 0;
}

static void serve_index(struct serve *s, struct http_request *req)
{
	static const char *const h[] = { NOSNIFF, NULL };
	char *body = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&body, &len);

	if (!f) {
		serve_error(req, 500, "out of memory");
		return;
	}
	fputs("<html>\n<head>\n<title>/debug/pprof/</title>\n<style>\n.profile-name{\n"
	      "\tdisplay:inline-block;\n\twidth:6rem;\n}\n</style>\n</head>\n<body>\n"
	      "/debug/pprof/<br>\n<br>\nTypes of profiles available:\n<table>\n"
	      "<thead><td>Count</td><td>Profile</td></thead>\n", f);
	for (size_t i = 0; i < ARRAY_SIZE(index_entries); i++)
		fprintf(f, "<tr><td>%ld</td><td><a href='%s?debug=1'>%s</a></td></tr>\n",
			index_entries[i].kind < 0 ? 0 :
			serve_count(s, (enum serve_kind)index_entries[i].kind),
			index_entries[i].name, index_entries[i].name);
	fputs("</table>\n<a href=\"goroutine?debug=2\">full goroutine stack dump</a>\n<br>\n"
	      "<p>\nProfile Descriptions:\n<ul>\n", f);
	for (size_t i = 0; i < ARRAY_SIZE(index_entries); i++)
		fprintf(f, "<li><div class=profile-name>%s: </div> %s</li>\n",
			index_entries[i].name, index_entries[i].desc);
	fputs("</ul>\n</p>\n</body>\n</html>", f);
	if (fclose(f) != 0) {
		free(body);
		serve_error(req, 500, "out of memory");
		return;
	}
	reply(req, 200, "text/html; charset=utf-8", body, len, h);
}

/* Go's Cmdline: os.Args joined by NULs; here the target's (the kernel
 * shows at most what fits the argument pages, CMDLINE_MAX bounds it). */
#define CMDLINE_MAX (1u << 20)
static void serve_cmdline(struct serve *s, struct http_request *req)
{
	static const char *const h[] = { NOSNIFF, NULL };
	char path[64], *buf = malloc(CMDLINE_MAX);
	size_t len = 0;
	ssize_t n = 0;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", s->o.pid);
	fd = buf ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	while (fd >= 0 && len < CMDLINE_MAX &&
	       (n = read(fd, buf + len, CMDLINE_MAX - len)) > 0)
		len += (size_t)n;
	if (fd < 0 || n < 0) {
		serve_error(req, 500, strerror(buf ? errno : ENOMEM));
		free(buf);
		if (fd >= 0)
			close(fd);
		return;
	}
	close(fd);
	while (len && buf[len - 1] == '\0')
		len--;
	reply(req, 200, HTTP_TEXT, buf, len, h);
}

/* Go's Profile (cpu) and cprof's wall: seconds <= 0 or not a number is 30. */
static void serve_sampled(struct serve *s, struct http_request *req, enum serve_kind k)
{
	long long sec = 30;
	char why[1024] = "";
	int r;

	if (!parse_seconds(http_arg(req, "seconds"), &sec))
		sec = 30;
	if (sec >= s->o.max_seconds) {
		serve_error(req, 400, "profile duration exceeds server's WriteTimeout");
		return;
	}
	r = serve_window(s, req, k, (unsigned)sec, why, sizeof(why));
	if (r == -EBUSY)
		snprintf(why, sizeof(why), "Could not enable %s profiling: %s profiling already "
			 "in use", k == SK_CPU ? "CPU" : "wall", k == SK_CPU ? "cpu" : "wall");
	if (r < 0)
		serve_error(req, 500, why);
}

/* Go's serveDeltaProfile's checks, then the window. */
static void serve_delta(struct serve *s, struct http_request *req, enum serve_kind k,
			const char *seconds)
{
	long long sec;
	char why[1024] = "";

	if (!parse_seconds(seconds, &sec)) {
		serve_error(req, 400, "invalid value for \"seconds\" - must be a positive integer");
		return;
	}
	if (sec >= s->o.max_seconds) {
		serve_error(req, 400, "profile duration exceeds server's WriteTimeout");
		return;
	}
	if (arg_int(req, "debug") != 0) {
		serve_error(req, 400, "seconds and debug params are incompatible");
		return;
	}
	if (refused_snapshot(s, req, k))
		return;
	if (serve_window(s, req, k, (unsigned)sec, why, sizeof(why)) < 0)
		serve_error(req, 500, why);
}

/* Go's handler.ServeHTTP: ?gc is taken and ignored (no collector here). */
static void serve_named(struct serve *s, struct http_request *req, enum serve_kind k)
{
	static const char *const h[] = { NOSNIFF, NULL };
	const char *seconds = http_arg(req, "seconds");
	int debug = arg_int(req, "debug");
	struct profile *p = NULL;
	char why[1024] = "", *text = NULL;
	size_t len = 0;

	if (seconds) {
		serve_delta(s, req, k, seconds);
		return;
	}
	if (refused_snapshot(s, req, k))
		return;
	if (debug != 0) {
		if (serve_text(s, k, debug, &text, &len, why, sizeof(why)) < 0)
			serve_error(req, 500, why);
		else
			reply(req, 200, HTTP_TEXT, text, len, h);
		return;
	}
	if (serve_build(s, k, &p, why, sizeof(why)) < 0)
		serve_error(req, 500, why);
	else
		serve_profile(req, p, kind_names[k]);
}

void serve_route(void *arg, struct http_request *req)
{
	struct serve *s = arg;
	const char *path = http_path(req), *name;

	if (!strcmp(path, "/debug/pprof")) {
		static const char body[] = "<a href=\"" PREFIX "\">Moved Permanently</a>.\n\n";
		static const char *const h[] = { "Location", PREFIX, NULL };

		reply(req, 301, "text/html; charset=utf-8", strdup(body), sizeof(body) - 1, h);
		return;
	}
	if (strncmp(path, PREFIX, strlen(PREFIX)) != 0) {
		static const char *const h[] = { NOSNIFF, NULL };

		reply_text(req, 404, h, "404 page not found\n");
		return;
	}
	name = path + strlen(PREFIX);
	if (!*name) {
		serve_index(s, req);
		return;
	}
	if (!strcmp(name, "cmdline")) {
		serve_cmdline(s, req);
		return;
	}
	for (int k = 0; k < (int)ARRAY_SIZE(kind_names); k++) {
		if (strcmp(name, kind_names[k]) != 0)
			continue;
		if (k == SK_CPU || k == SK_WALL)
			serve_sampled(s, req, (enum serve_kind)k);
		else
			serve_named(s, req, (enum serve_kind)k);
		return;
	}
	serve_error(req, 404, "Unknown profile");
}
