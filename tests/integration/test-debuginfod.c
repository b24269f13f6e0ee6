/*
 * Stripped binaries: with DEBUGINFOD_URLS set, functions and file:line come
 * from a debuginfod server (libdw's client, through libdwfl's standard
 * find_debuginfo callback); without, profiles still work and carry each
 * mapping's build id, by which its debug file can be found later.
 *
 * The server is Debian's own debuginfod, started here on a free port and
 * serving a directory with the debug file of the stripped copy of a target.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testhelp.h"

#define DEBUGINFOD "/usr/bin/debuginfod"

TestSuite(debuginfod, .init = th_init, .fini = th_cleanup);

struct stripped {
	char dir[512];
	char exe[600];   /* the stripped copy of the busy target */
	char srv[600];   /* what debuginfod serves: the debug file */
	char build_id[2 * 64 + 1];
};

static void run_ok(const char *const *argv)
{
	struct th_run r;

	th_run_cmd_ex(&r, 30000, 0, 0, argv);
	if (r.exit_code != 0)
		th_run_log(&r, argv[0]);
	cr_assert_eq(r.exit_code, 0, "%s %s failed", argv[0], argv[1]);
	th_run_release(&r);
}

/* The GNU build id of @path as hex (libelf: no other tool's output to parse). */
static void read_build_id(const char *path, char *hex, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf_Scn *scn = NULL;
	Elf *elf;

	hex[0] = '\0';
	cr_assert(fd >= 0);
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	cr_assert_not_null(elf);
	while ((scn = elf_nextscn(elf, scn)) && !hex[0]) {
		GElf_Shdr sh;
		GElf_Nhdr nh;
		size_t off = 0, name_off, desc_off;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		d = elf_getdata(scn, NULL);
		while (d && (off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
			const unsigned char *desc = (const unsigned char *)d->d_buf + desc_off;

			if (nh.n_type != NT_GNU_BUILD_ID || nh.n_namesz != 4 ||
			    memcmp((const char *)d->d_buf + name_off, "GNU", 4) != 0)
				continue;
			for (size_t i = 0; i < nh.n_descsz && 2 * i + 2 < size; i++)
				snprintf(hex + 2 * i, 3, "%02x", desc[i]);
			break;
		}
	}
	elf_end(elf);
	close(fd);
	cr_assert(hex[0], "%s has no build id", path);
}

/* A -g target copied, its debug part split off, the copy stripped. */
static void make_stripped(struct stripped *s)
{
	char debug[700];

	snprintf(s->dir, sizeof(s->dir), "%s", th_tmp_dir("debuginfod"));
	snprintf(s->exe, sizeof(s->exe), "%s/busy-stripped", s->dir);
	snprintf(s->srv, sizeof(s->srv), "%s/srv", s->dir);
	snprintf(debug, sizeof(debug), "%s/busy.debug", s->srv);
	cr_assert(mkdir(s->srv, 0755) == 0);
	run_ok((const char *const[]){ "/bin/cp", TARGETS_DIR "/busy", s->exe, NULL });
	run_ok((const char *const[]){ "/usr/bin/objcopy", "--only-keep-debug", s->exe, debug,
				      NULL });
	/* --strip-all keeps the build id note: it is allocated. */
	run_ok((const char *const[]){ "/usr/bin/strip", "--strip-all", s->exe, NULL });
	read_build_id(s->exe, s->build_id, sizeof(s->build_id));
}

/* HTTP status of GET @path on 127.0.0.1:@port, 0 when nothing answers. */
static int http_status(int port, const char *path)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { 5, 0 };
	char req[512], resp[64] = "";
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), status = 0;
	ssize_t n;

	if (fd < 0)
		return 0;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		goto out_close;
	snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
	if (write(fd, req, strlen(req)) != (ssize_t)strlen(req))
		goto out_close;
	n = read(fd, resp, sizeof(resp) - 1);
	if (n > 0) {
		resp[n] = '\0';
		sscanf(resp, "HTTP/%*s %d", &status);
	}
out_close:
	close(fd);
	return status;
}

/* The log of a debuginfod that did not come up, into the test log. */
static void log_debuginfod(const char *log)
{
	uint8_t *text = NULL;
	size_t len = 0;

	th_read_file(log, &text, &len);
	cr_log_warn("debuginfod log:\n%.*s", (int)len, text ? (char *)text : "");
	free(text);
}

/*
 * Starts debuginfod serving @s->srv and waits until it serves the debug
 * file. debuginfod 0.188 has no option to listen on loopback only: it
 * listens on every interface, the test talks to it on 127.0.0.1. The port
 * was free a moment before; if another process took it meanwhile,
 * debuginfod exits and another port is tried. Skips the test (with its log)
 * when it cannot start.
 */
static pid_t start_debuginfod(const struct stripped *s, int *ret_port)
{
	char port_s[16], db[700], log[700], path[256];

	if (access(DEBUGINFOD, X_OK) < 0)
		TH_SKIP_MISSING("%s is not installed (Debian's debuginfod package; scripts/setup)",
			     DEBUGINFOD);
	snprintf(path, sizeof(path), "/buildid/%s/debuginfo", s->build_id);
	for (int attempt = 0; attempt < 3; attempt++) {
		int port = th_free_port();
		pid_t pid;

		snprintf(port_s, sizeof(port_s), "%d", port);
		snprintf(db, sizeof(db), "%s/debuginfod-%d.sqlite", s->dir, attempt);
		snprintf(log, sizeof(log), "%s/debuginfod-%d.log", s->dir, attempt);
		/* -t 0 -g 0: one scan at start, no rescans or grooming during the test. */
		pid = th_spawn_daemon((const char *const[]){ DEBUGINFOD, "-p", port_s, "-F",
							     s->srv, "-d", db, "-t", "0", "-g",
							     "0", NULL },
				      log);
		for (int i = 0; i < 200; i++) {
			if (http_status(port, path) == 200) {
				*ret_port = port;
				return pid;
			}
			if (!th_alive(pid))
				break;
			th_sleep_ms(50);
		}
		th_kill(pid);
		log_debuginfod(log);
	}
	cr_skip_test("debuginfod did not serve %s within 10 s, 3 tries", path);
	return -1;
}

static const struct profile_mapping *mapping_of(const struct profile *p, const char *file)
{
	for (size_t i = 0; i < p->nmappings; i++)
		if (p->mappings[i].file && !strcmp(p->mappings[i].file, file))
			return &p->mappings[i];
	return NULL;
}

/* A line of some location naming @func in a file ending with @file and a line > 0. */
static bool has_file_line(const struct profile *p, const char *func, const char *file)
{
	for (size_t i = 0; i < p->nlocations; i++)
		for (size_t j = 0; j < p->locations[i].nlines; j++) {
			const struct profile_line *l = &p->locations[i].lines[j];
			const struct profile_function *f = th_function(p, l->function_id);
			size_t fl = strlen(f->file), n = strlen(file);

			if (!strcmp(f->name, func) && l->line > 0 && fl >= n &&
			    !strcmp(f->file + fl - n, file))
				return true;
		}
	return false;
}

/* Samples enough that each of busy's three functions has some: the
 * least, a fifth of the time, has none in 40 with odds of 1 in 7500. */
#define MIN_SAMPLES 40
#define MAX_TRIES 3

static int64_t samples_of(const struct profile *p)
{
	int64_t n = 0;

	for (size_t i = 0; i < p->nsamples; i++)
		n += p->samples[i].values[0];
	return n;
}

/*
 * Runs `cprof cpu` for 1 s on @pid into @out; fails the test unless it
 * succeeds. Whether it said how to get names for the program's frames goes
 * to *@ret_hinted. A loaded host may leave the target too little CPU in
 * that second for MIN_SAMPLES: it is taken again over twice the time,
 * MAX_TRIES times at most (beside stress-ng busy ran 0.22 s a second).
 */
static struct profile *cpu_profile(pid_t pid, const char *out, bool *ret_hinted)
{
	struct profile *p = NULL;
	struct th_run r;

	for (int try = 1, seconds = 1; try <= MAX_TRIES; try++, seconds *= 2) {
		char duration[16];

		profile_free(p);
		snprintf(duration, sizeof(duration), "%ds", seconds);
		TH_CPROF(&r, 60000, "cpu", "-p", th_pid_str(pid), "-d", duration, "-o", out);
		if (r.exit_code != 0)
			th_run_log(&r, "cprof cpu");
		cr_assert_eq(r.exit_code, 0);
		*ret_hinted = strstr(r.err, "has no symbols or debug information") &&
			      strstr(r.err, "DEBUGINFOD_URLS");
		cr_log_info("cprof cpu said:\n%s", r.err);
		th_run_release(&r);
		p = th_load_profile(out);
		if (samples_of(p) >= MIN_SAMPLES)
			break;
		cr_log_info("the target ran little: %lld samples in %d s, fewer than %d (try %d)",
			    (long long)samples_of(p), seconds, MIN_SAMPLES, try);
	}
	return p;
}

Test(debuginfod, stripped_target_symbolized_from_server, .timeout = 120)
{
	struct stripped s;
	char urls[64], cache[700];
	struct th_func_sum *sums;
	struct profile *p;
	const char *out;
	bool hinted;
	size_t n;
	int port;
	pid_t server, target;

	th_require_perf(false);
	make_stripped(&s);
	server = start_debuginfod(&s, &port);
	target = TH_SPAWN(s.exe, "1", "30");

	snprintf(urls, sizeof(urls), "http://127.0.0.1:%d", port);
	snprintf(cache, sizeof(cache), "%s/cache", s.dir);
	setenv("DEBUGINFOD_URLS", urls, 1);
	setenv("DEBUGINFOD_CACHE_PATH", cache, 1);
	setenv("DEBUGINFOD_TIMEOUT", "20", 1);
	out = th_tmp_path("with.pb.gz");
	p = cpu_profile(target, out, &hinted);
	cr_expect(!hinted, "a hint about missing symbols although the server had them");
	unsetenv("DEBUGINFOD_URLS");
	unsetenv("DEBUGINFOD_CACHE_PATH");
	unsetenv("DEBUGINFOD_TIMEOUT");

	th_func_sums(p, 1, &sums, &n);
	for (const char *const *f = (const char *const[]){ "work_a", "work_b", "work_c", NULL };
	     *f; f++) {
		cr_expect_gt(th_func_get(sums, n, *f).flat, 0, "%s has no samples", *f);
		cr_expect(has_file_line(p, *f, "busy.c"), "%s has no busy.c:line", *f);
	}
	{
		const struct profile_mapping *m = mapping_of(p, s.exe);

		cr_assert_not_null(m, "no mapping of %s", s.exe);
		cr_expect_str_eq(m->build_id, s.build_id);
		cr_expect(m->has_functions && m->has_line_numbers);
	}
	/* The client fetched it into the private cache, by build id. */
	{
		char cached[900];

		snprintf(cached, sizeof(cached), "%s/%s/debuginfo", cache, s.build_id);
		cr_expect(access(cached, R_OK) == 0, "%s was not fetched", cached);
	}
	th_assert_pprof_ok(out);
	free(sums);
	profile_free(p);
	th_kill(target);
	/* The server is ours: killed by its pid. */
	th_kill(server);
}

/*
 * Without a server: no names for the stripped program's own code, but the
 * profile is whole (libc still has its symbols), and its mapping carries the
 * build id so that the debug file can be found later.
 */
Test(debuginfod, stripped_target_without_server, .timeout = 120)
{
	struct stripped s;
	struct th_func_sum *sums;
	struct th_run r;
	struct profile *p;
	const struct profile_mapping *m;
	const char *out;
	bool hinted;
	size_t n;
	bool hex_names = false;
	pid_t target;

	th_require_perf(false);
	make_stripped(&s);
	unsetenv("DEBUGINFOD_URLS");
	target = TH_SPAWN(s.exe, "1", "30");

	out = th_tmp_path("without.pb.gz");
	p = cpu_profile(target, out, &hinted);
	cr_expect(hinted, "no hint about the stripped program and DEBUGINFOD_URLS");
	th_func_sums(p, 1, &sums, &n);
	cr_expect_eq(th_func_get(sums, n, "work_a").cum, 0, "work_a named without debug info?");
	for (size_t i = 0; i < n; i++)
		hex_names |= !strncmp(sums[i].name, "busy-stripped+0x", 16) && sums[i].flat > 0;
	cr_expect(hex_names, "no busy-stripped+0x... frames");
	m = mapping_of(p, s.exe);
	cr_assert_not_null(m);
	cr_expect_str_eq(m->build_id, s.build_id);
	/* Not claimed to be symbolized: a reader may try to do better. */
	cr_expect(!m->has_line_numbers);
	th_assert_pprof_ok(out);
	free(sums);
	profile_free(p);

	out = th_tmp_path("threads.pb.gz");
	TH_CPROF(&r, 60000, "threads", "-p", th_pid_str(target), "-o", out);
	if (r.exit_code != 0)
		th_run_log(&r, "cprof threads");
	cr_assert_eq(r.exit_code, 0);
	th_run_release(&r);
	p = th_load_profile(out);
	cr_expect_gt(p->nsamples, 0);
	m = mapping_of(p, s.exe);
	cr_assert_not_null(m);
	cr_expect_str_eq(m->build_id, s.build_id);
	profile_free(p);
	th_kill(target);
}
