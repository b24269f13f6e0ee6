/*
 * Debian's own servers under their own load tools, as a user meets them:
 * redis-server under redis-benchmark, nginx (two workers) under wrk,
 * memcached (four threads) under memcslap. Each is started here on
 * 127.0.0.1, on a free port, with its configuration in a directory of its
 * own, and killed by its pid; the load runs for the whole test.
 *
 * For each server:
 *   - threads --debug 2 names every thread as /proc/PID/task/TID/comm does;
 *   - heap's sites are the server's allocation functions (redis: zmalloc and
 *     its kin; nginx: ngx_alloc, ngx_memalign; memcached is stripped: its
 *     own frames, memcached+0xOFF, and cprof says how to get names);
 *   - memcached: mutex and block are not empty;
 *   - cpu's top 5 functions agree with `perf record --call-graph dwarf`
 *     over the same window (when perf is installed: Debian's linux-perf);
 *   - wall accounts every thread that lived through its window for the
 *     whole window, under its /proc name, and finds a stack for most of
 *     the time off the CPU;
 *   - afterwards the server answers a write and a read correctly, no thread
 *     is traced and the agent (resident by design) has every GOT entry back.
 *
 * Throughput under each command against none is scripts/bench-realworld:
 * timing has no place on CI's two shared cores.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/wire.h"
#include "testhelp.h"

/*
 * The bounds docs/measured.md quotes (tests/unit/test-docs checks them):
 * each of cpu's top 5 functions within TOP_MAX_POINTS points plus
 * TOP_MAX_REL of its share of perf's; every thread's wall total within
 * WALL_WINDOW_MAX_ERR of the window.
 */
#define TOP_MAX_POINTS 5
#define TOP_MAX_REL 0.25
#define WALL_WINDOW_MAX_ERR 0.02
#define WINDOW "2s"
#define MAX_THREADS 256

/*
 * nginx's workers are not our children: killed with its master (as the
 * cleanup kills every child, by pid, when a test fails), they would live
 * on, reparented to init. Their pids, to be killed after the master.
 */
static pid_t nginx_workers[8];
static size_t nworkers;

static void kill_workers(void)
{
	for (size_t i = 0; i < nworkers; i++)
		kill(nginx_workers[i], SIGKILL);
	nworkers = 0;
}

static void fini(void)
{
	th_cleanup(); /* the master first: it would start new workers */
	kill_workers();
}

TestSuite(realworld, .init = th_init, .fini = fini, .timeout = 240);

struct server {
	const char *name;
	pid_t started; /* the process started here (nginx: its master) */
	pid_t pid;     /* the process profiled (nginx: a worker) */
	pid_t load;
	int port;
	const char *dir;
	/* The server's own count of the bytes it has malloced, where it keeps
	 * one (memcached), and the load that makes it grow, started again when
	 * a window saw none. */
	long (*malloced)(const struct server *s);
	const char *const *load_argv;
};

/* The absolute path of @prog, or the test is skipped naming the package. */
static char *need(const char *prog, const char *package)
{
	char *path = th_find_in_path(prog);

	if (!path && access(prog, X_OK) == 0)
		path = strdup(prog);
	if (!path)
		TH_SKIP_MISSING("%s is not installed: apt-get install %s (scripts/setup)", prog,
			     package);
	return path;
}

static int connect_port(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * Sends @req to 127.0.0.1:@port and reads the answer until it contains
 * @until, the server closes, or 3 s pass. Returns what was read (free it).
 */
static char *exchange(int port, const char *req, const char *until)
{
	size_t len = 0, cap = 1 << 16;
	char *buf = calloc(1, cap + 1);
	int fd = connect_port(port);

	cr_assert_not_null(buf);
	if (fd < 0)
		return buf;
	if (write(fd, req, strlen(req)) == (ssize_t)strlen(req)) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		while (len < cap && !strstr(buf, until) && poll(&pfd, 1, 3000) == 1) {
			ssize_t n = read(fd, buf + len, cap - len);

			if (n <= 0)
				break;
			len += (size_t)n;
			buf[len] = '\0';
		}
	}
	close(fd);
	return buf;
}

/*
 * Waits up to 10 s for @port to accept a connection while @pid lives. A
 * server that lost the port to another exits (redis, memcached and nginx
 * all do): alive a moment after the connection, it is ours that answered.
 */
static bool wait_listening(pid_t pid, int port)
{
	for (int i = 0; i < 200 && th_alive(pid); i++) {
		int fd = connect_port(port);

		if (fd >= 0) {
			close(fd);
			th_sleep_ms(100);
			return th_alive(pid);
		}
		th_sleep_ms(50);
	}
	return false;
}

static const char *port_str(int port)
{
	static char buf[4][16];
	static int i;

	i = (i + 1) % 4;
	snprintf(buf[i], sizeof(buf[i]), "%d", port);
	return buf[i];
}

/* Starts @argv (which names the port with port_str()) until it listens:
 * a free port may be taken by someone else in between, then another. */
static void start_on_free_port(struct server *s, const char *const *(*argv_of)(struct server *))
{
	for (int attempt = 0; attempt < 3; attempt++) {
		const char *const *argv;
		char log[128];

		s->port = th_free_port();
		argv = argv_of(s);
		snprintf(log, sizeof(log), "%s.log", s->name);
		s->started = th_spawn_daemon(argv, th_tmp_path(log));
		if (wait_listening(s->started, s->port))
			return;
		th_kill(s->started);
	}
	cr_assert_fail("%s did not start listening", s->name);
}

/* ---- what /proc and cprof say about the threads ------------------------- */

struct named_tid {
	pid_t tid;
	char name[64];
};

static size_t proc_threads(pid_t pid, struct named_tid *out, size_t max)
{
	pid_t tids[MAX_THREADS];
	int n = th_task_list(pid, tids, MAX_THREADS);
	size_t k = 0;

	for (int i = 0; i < n && k < max; i++) {
		if (th_task_read(pid, tids[i], "comm", out[k].name, sizeof(out[k].name)) < 0)
			continue;
		out[k].name[strcspn(out[k].name, "\n")] = '\0';
		out[k++].tid = tids[i];
	}
	return k;
}

static const struct named_tid *find_tid(const struct named_tid *v, size_t n, pid_t tid)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].tid == tid)
			return &v[i];
	return NULL;
}

/* Every thread of cprof's --debug 2 is named as /proc names it (read just
 * before and after), and every thread /proc shows both times is there;
 * stderr says @said (NULL: anything). */
static void check_threads(const struct server *s, const char *said)
{
	struct named_tid before[MAX_THREADS], after[MAX_THREADS], seen[MAX_THREADS];
	size_t nb, na, ns = 0;
	struct th_run r;
	const char *line;

	nb = proc_threads(s->pid, before, MAX_THREADS);
	TH_CPROF(&r, 30000, "threads", "-p", th_pid_str(s->pid), "--debug", "2", "-o", "-");
	na = proc_threads(s->pid, after, MAX_THREADS);
	cr_assert_eq(r.exit_code, 0, "cprof threads on %s: %s", s->name, r.err);
	if (said)
		cr_expect(strstr(r.err, said), "%s: threads --debug 2 did not say '%s':\n%s",
			  s->name, said, r.err);
	for (line = r.out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		const struct named_tid *p;

		if (ns == MAX_THREADS || sscanf(line, "thread %d \"%63[^\"]\"", &seen[ns].tid,
						  seen[ns].name) != 2)
			continue;
		p = find_tid(before, nb, seen[ns].tid);
		if (!p)
			p = find_tid(after, na, seen[ns].tid);
		cr_expect_not_null(p, "%s: thread %d is not in /proc", s->name, seen[ns].tid);
		if (p)
			cr_expect_str_eq(seen[ns].name, p->name, "%s: thread %d", s->name, p->tid);
		ns++;
	}
	for (size_t i = 0; i < nb; i++)
		if (find_tid(after, na, before[i].tid))
			cr_expect_not_null(find_tid(seen, ns, before[i].tid),
					   "%s: thread %d \"%s\" missing", s->name, before[i].tid,
					   before[i].name);
	cr_expect_gt(ns, 0, "%s: no thread in:\n%s", s->name, r.out);
	for (size_t i = 0; i < ns; i++)
		cr_log_info("%s: thread %d \"%s\"", s->name, seen[i].tid, seen[i].name);
	th_run_release(&r);
}

/* ---- the agent's commands ---------------------------------------------- */

/* cprof KIND for WINDOW; its profile, with cprof's stderr in *@ret_err. */
static struct profile *agent_profile(const struct server *s, const char *kind, char **ret_err)
{
	const char *out = th_tmp_path(kind);
	struct profile *p;
	struct th_run r;

	TH_CPROF(&r, 60000, kind, "-p", th_pid_str(s->pid), "-d", WINDOW, "-o", out);
	if (r.exit_code != 0)
		th_run_log(&r, kind);
	cr_assert_eq(r.exit_code, 0, "cprof %s on %s failed", kind, s->name);
	p = th_load_profile(out);
	cr_assert_not_null(p);
	*ret_err = strdup(r.err);
	th_run_release(&r);
	return p;
}

/* The leaf functions of @type's values, as "name share%" lines in the log;
 * returns the share of those whose names start with one of @prefixes. */
static double leaf_share(const struct server *s, const struct profile *p, const char *type,
			 const char *unit, const char *const *prefixes)
{
	int vi = th_sample_type(p, type, unit);
	struct th_func_sum *f;
	int64_t total = 0, hit = 0;
	size_t n;

	cr_assert_geq(vi, 0, "no %s in the profile", type);
	th_func_sums(p, (size_t)vi, &f, &n);
	for (size_t i = 0; i < n; i++)
		total += f[i].flat;
	for (size_t i = 0; i < n; i++) {
		bool ours = false;

		for (const char *const *q = prefixes; *q; q++)
			ours |= !strncmp(f[i].name, *q, strlen(*q));
		if (f[i].flat)
			cr_log_info("%s %s: %-36s %5.1f%%%s", s->name, type, f[i].name,
				    total ? 100.0 * f[i].flat / total : 0, ours ? " *" : "");
		if (ours)
			hit += f[i].flat;
	}
	free(f);
	return total ? (double)hit / total : 0;
}

/*
 * A heap profile of @s whose window saw the server malloc, where it says
 * how much it malloced: memcached mallocs only while its slab pages grow,
 * and its load ends at a time the machine's speed decides. A window in
 * which its count did not move is no test of cprof: a new load, and again,
 * three windows at most.
 */
static struct profile *heap_profile(struct server *s, char **ret_err)
{
	long before = s->malloced ? s->malloced(s) : 0;
	struct profile *p = agent_profile(s, "heap", ret_err);

	for (int i = 1; i < 3 && s->malloced && s->malloced(s) == before; i++) {
		cr_log_info("%s: malloced nothing in heap window %d (%ld bytes before and after); "
			    "a new load, and again",
			    s->name, i, before);
		th_kill(s->load);
		before = s->malloced(s);
		s->load = th_spawn_daemon(s->load_argv, th_tmp_path("load.log"));
		/* The load makes its keys first: 15 s at most for the count to move. */
		for (int t = 0; t < 75 && s->malloced(s) == before; t++)
			th_sleep_ms(200);
		free(*ret_err);
		profile_free(p);
		before = s->malloced(s);
		p = agent_profile(s, "heap", ret_err);
	}
	return p;
}

/*
 * Most of alloc_space is allocated by @sites, and the profile names the
 * program as it was started, @program ("/redis-server": Debian's
 * /usr/bin/redis-server is a symbolic link to redis-check-rdb).
 */
static void check_heap(struct server *s, const char *const *sites, double min_share,
		       const char *program)
{
	char *err;
	struct profile *p = heap_profile(s, &err);
	double share = leaf_share(s, p, "alloc_space", "bytes", sites);
	const char *file = p->nmappings ? p->mappings[0].file : "";
	size_t len = strlen(file);

	cr_expect_geq(share, min_share, "%s: %.0f%% of alloc_space at %s... (want >= %.0f%%)",
		      s->name, 100 * share, sites[0], 100 * min_share);
	cr_expect(len >= strlen(program) && !strcmp(file + len - strlen(program), program),
		  "%s: the profile names its program %s", s->name, file);
	free(err);
	profile_free(p);
}

/*
 * Not empty; with @said (or NULL) in cprof's messages. A server's waits
 * come and go with its load and the machine's: an empty window, which cprof
 * must say is empty, is tried again, three windows at most.
 */
static void check_contention(const struct server *s, const char *kind, const char *said)
{
	static const char *const any[] = { "", NULL };
	char *err;
	struct profile *p = agent_profile(s, kind, &err);

	for (int i = 1; i < 3 && leaf_share(s, p, "contentions", "count", any) == 0; i++) {
		cr_assert(strstr(err, "no events in the window"),
			  "%s: an empty %s profile not said to be empty:\n%s", s->name, kind, err);
		cr_log_info("%s: %s window %d had no events; again", s->name, kind, i);
		free(err);
		profile_free(p);
		p = agent_profile(s, kind, &err);
	}
	cr_expect_gt(leaf_share(s, p, "contentions", "count", any), 0, "%s: empty %s profile: %s",
		     s->name, kind, err);
	if (said)
		cr_expect(strstr(err, said), "%s: cprof %s did not say '%s':\n%s", s->name, kind,
			  said, err);
	free(err);
	profile_free(p);
}

/* ---- cpu against perf --------------------------------------------------- */

struct share {
	char name[128];
	long n;
};

/* perf and cprof name one function by different aliases at the same
 * address (glibc's __GI___libc_read is cprof's __libc_read, its
 * __memcpy_avx512_unaligned_erms is __memmove_...). */
static void normalize(const char *in, char *out, size_t size)
{
	const char *p = strncmp(in, "__GI_", 5) ? in : in + 5, *m = strstr(p, "memcpy");

	if (m)
		snprintf(out, size, "%.*smemmove%s", (int)(m - p), p, m + 6);
	else
		snprintf(out, size, "%s", p);
}

static void add_share(struct share *v, size_t *n, size_t max, const char *raw, long count)
{
	char name[128];

	normalize(raw, name, sizeof(name));
	for (size_t i = 0; i < *n; i++)
		if (!strcmp(v[i].name, name)) {
			v[i].n += count;
			return;
		}
	if (*n < max) {
		snprintf(v[*n].name, sizeof(v[*n].name), "%s", name);
		v[(*n)++].n = count;
	}
}

static int by_count(const void *a, const void *b)
{
	const struct share *x = a, *y = b;

	return (y->n > x->n) - (y->n < x->n);
}

/*
 * The leaf user frame of every sample of `perf script` (kernel frames above
 * it skipped: cprof's samples in system calls are charged to the call site
 * too). Unknown frames count in the total under no name.
 */
static size_t perf_leaves(const char *text, struct share *v, size_t max, long *ret_total)
{
	const char *line = text;
	bool in_sample = false, taken = false;
	size_t n = 0;

	*ret_total = 0;
	for (; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		char frame[512], sym[256] = "";
		unsigned long long ip;

		/* One line: strstr() on @line would search the rest of the text. */
		snprintf(frame, sizeof(frame), "%.*s", (int)strcspn(line, "\n"), line);
		if (!frame[0]) {
			in_sample = taken = false;
			continue;
		}
		if (!in_sample) {
			in_sample = true;
			(*ret_total)++;
		}
		if (taken || strstr(frame, "[kernel.kallsyms]") || !strstr(frame, " ("))
			continue;
		taken = true;
		if (sscanf(frame, " %llx %255s", &ip, sym) == 2 && strcmp(sym, "[unknown]"))
			add_share(v, &n, max, sym, 1);
	}
	qsort(v, n, sizeof(*v), by_count);
	return n;
}

static double share_of(const struct share *v, size_t n, long total, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i].name, name))
			return (double)v[i].n / (double)total;
	return 0;
}

static bool in_top(const struct share *v, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i].name, name))
			return true;
	return false;
}

/* cprof's and perf's top 5 (named leaves) each within 5 points + 25% of
 * the other's share of all samples. */
static void compare_tops(const struct server *s, const struct share *c, size_t nc, long ct,
			 const struct share *pf, size_t np, long pt)
{
	const struct share *tops[2] = { c, pf };
	size_t ns[2] = { nc < 5 ? nc : 5, np < 5 ? np : 5 };

	for (int side = 0; side < 2; side++)
		for (size_t i = 0; i < ns[side]; i++) {
			const char *name = tops[side][i].name;
			double a = share_of(c, nc, ct, name), b = share_of(pf, np, pt, name);
			double tol = TOP_MAX_POINTS / 100.0 + TOP_MAX_REL * (a > b ? a : b);

			if (side == 1 && in_top(c, ns[0], name))
				continue; /* compared already */
			cr_log_info("measured: %s cpu: %-36s cprof %5.1f%%  perf %5.1f%%", s->name,
				    name, 100 * a, 100 * b);
			cr_expect(a - b <= tol && b - a <= tol,
				  "%s: %s is %.1f%% of cprof's samples, %.1f%% of perf's", s->name,
				  name, 100 * a, 100 * b);
		}
}

#define MAX_FUNCS 4096

static size_t cprof_leaves(const struct profile *p, struct share *v, size_t max, long *ret_total)
{
	struct th_func_sum *f;
	size_t n, k = 0;

	th_func_sums(p, 0, &f, &n);
	*ret_total = 0;
	for (size_t i = 0; i < n; i++) {
		*ret_total += (long)f[i].flat;
		/* Named like perf's [unknown]: no name to compare. */
		if (f[i].flat && !strstr(f[i].name, "+0x") && strncmp(f[i].name, "0x", 2))
			add_share(v, &k, max, f[i].name, (long)f[i].flat);
	}
	free(f);
	qsort(v, k, sizeof(*v), by_count);
	return k;
}

/* perf record's samples are flowing: its file has grown past what it
 * writes before them (the system's mappings), by some of its 8 kB samples;
 * or 10 s went by, and the comparison says how many of perf's it had. */
static void perf_started(const char *data)
{
	struct stat st;

	for (int i = 0; i < 200; i++) {
		if (stat(data, &st) == 0 && st.st_size > 4 * 1024 * 1024)
			return;
		th_sleep_ms(50);
	}
}

/* CLOCK_MONOTONIC less CLOCK_REALTIME, in ns. */
static int64_t monotonic_less_realtime(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)th_now_ns() - ((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec);
}

/*
 * cprof cpu and perf record at the same rate, perf's samples of the server's
 * pid out of its system-wide ones: one cpu-clock event per cpu, as cprof
 * samples as root. perf record -p samples with an event per thread, whose
 * timer restarts when the thread comes back on a cpu and fires early in its
 * run, in the return from the call it waited in: against nginx it put
 * several points more in epoll_wait than either system-wide sampler, a
 * difference of mechanisms that is no test of cprof's stacks. perf runs
 * from before cprof's window to after it, its samples on CLOCK_MONOTONIC,
 * and only those inside cprof's window count: on a loaded host cprof's
 * start lags perf's by seconds, and a server's mix moves meanwhile (beside
 * stress-ng nginx's open() went from 5% to 15% of its samples). Without
 * perf the comparison is skipped with a warning (the rest of the test
 * stands); without perf events cprof cpu itself cannot run.
 */
static void check_cpu(const struct server *s)
{
	static struct share c[MAX_FUNCS], pf[MAX_FUNCS];
	const char *out = th_tmp_path("cpu.pb.gz"), *data = th_tmp_path("perf.data");
	char *perf = th_find_in_path("perf"), window[64];
	int64_t mono_of_realtime;
	struct profile *p;
	struct th_run r, ps;
	pid_t rec = 0;
	long ct, pt;
	size_t nc, np;

	if (perf) {
		rec = th_spawn_daemon((const char *const[]){ perf, "record", "-q", "-e", "cpu-clock",
							     "-F", "499", "--call-graph", "dwarf",
							     "-a", "-k", "CLOCK_MONOTONIC", "-o",
							     data, "--", "sleep", "60", NULL },
				      th_tmp_path("perf.log"));
		perf_started(data);
	}
	TH_CPROF(&r, 60000, "cpu", "-p", th_pid_str(s->pid), "-d", "3s", "-F", "499", "-q", "-o",
		 out);
	if (rec) {
		kill(rec, SIGINT);
		th_wait_exit(rec, 30000);
	}
	mono_of_realtime = monotonic_less_realtime();
	if (r.exit_code == 3) {
		cr_log_warn("%s: cprof cpu not permitted here (perf events): %s", s->name, r.err);
		th_run_release(&r);
		free(perf);
		return;
	}
	cr_assert_eq(r.exit_code, 0, "cprof cpu on %s: %s", s->name, r.err);
	th_run_release(&r);
	p = th_load_profile(out);
	cr_assert_not_null(p);
	nc = cprof_leaves(p, c, MAX_FUNCS, &ct);
	{
		int64_t start = p->time_nanos + mono_of_realtime, end = start + p->duration_nanos;

		snprintf(window, sizeof(window), "%lld.%06lld,%lld.%06lld",
			 (long long)(start / 1000000000), (long long)(start % 1000000000 / 1000),
			 (long long)(end / 1000000000), (long long)(end % 1000000000 / 1000));
	}
	profile_free(p);
	cr_assert_gt(ct, 0, "%s: no cpu samples", s->name);
	if (!perf) {
		cr_log_warn("%s: perf is not installed (Debian's linux-perf): cpu's top 5 not "
			    "compared with perf record", s->name);
		return;
	}
	th_run_cmd_ex(&ps, 60000, 0, 0,
		      (const char *const[]){ perf, "script", "-i", data, "--pid", th_pid_str(s->pid),
					     "--time", window, "-F", "ip,sym,dso", NULL });
	np = perf_leaves(ps.out, pf, MAX_FUNCS, &pt);
	th_run_release(&ps);
	free(perf);
	if (pt < 50) {
		cr_log_warn("%s: perf recorded %ld samples in cprof's window: not compared",
			    s->name, pt);
		return;
	}
	cr_log_info("%s cpu: %ld samples by cprof, %ld by perf", s->name, ct, pt);
	compare_tops(s, c, nc, ct, pf, np, pt);
}

/* ---- afterwards ---------------------------------------------------------- */

/* Untraced, and the agent (resident by design) has every GOT entry back. */
static void check_let_go(const struct server *s)
{
	struct cprof_wire_header *h;

	th_assert_let_go(s->pid, false, s->name);
	h = th_agent_header(s->pid);
	cr_assert_not_null(h, "%s: no agent channel after heap", s->name);
	cr_expect_eq(h->state, CPROF_STATE_DETACHED, "%s: agent state %u", s->name, h->state);
	cr_expect_eq(h->hooked, 0, "%s: %llu GOT entries still hooked", s->name,
		     (unsigned long long)h->hooked);
	munmap(h, CPROF_WIRE_HEADER_SIZE);
}

/* ---- wall ----------------------------------------------------------------- */

struct thread_time {
	pid_t tid;
	const char *name;
	int64_t total, off, unseen;
};

static struct thread_time *thread_time_of(struct thread_time *v, size_t *n, pid_t tid)
{
	for (size_t i = 0; i < *n; i++)
		if (v[i].tid == tid)
			return &v[i];
	if (*n == MAX_THREADS)
		return NULL;
	v[*n] = (struct thread_time){ .tid = tid };
	return &v[(*n)++];
}

static const struct profile_label *label_of(const struct profile_sample *s, const char *key)
{
	for (size_t i = 0; i < s->nlabels; i++)
		if (!strcmp(s->labels[i].key, key))
			return &s->labels[i];
	return NULL;
}

static bool leaf_named(const struct profile *p, const struct profile_sample *s, const char *name)
{
	const struct profile_location *l;
	const struct profile_function *f;

	if (!s->nlocations)
		return false;
	l = &p->locations[s->location_ids[0] - 1];
	if (!l->nlines)
		return false;
	f = &p->functions[l->lines[0].function_id - 1];
	return !strcmp(f->name, name);
}

/* Each thread /proc lists before and after the window totals the window
 * (within 2%) under its /proc name; the stackless part of its time off the
 * CPU is logged, and is under half of it over all threads where they slept
 * a quarter of the window or more. */
static void check_wall(const struct server *s)
{
	struct named_tid before[MAX_THREADS], after[MAX_THREADS];
	struct thread_time t[MAX_THREADS];
	size_t nb, na, nt = 0;
	int64_t off = 0, unseen = 0;
	char *err;
	struct profile *p;
	int vi;

	nb = proc_threads(s->pid, before, MAX_THREADS);
	p = agent_profile(s, "wall", &err);
	na = proc_threads(s->pid, after, MAX_THREADS);
	vi = th_sample_type(p, "wall", "nanoseconds");
	cr_assert_geq(vi, 0, "%s: no wall values", s->name);
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *sa = &p->samples[i];
		const struct profile_label *tid = label_of(sa, "thread_id");
		const struct profile_label *name = label_of(sa, "thread_name");
		const struct profile_label *state = label_of(sa, "state");
		struct thread_time *x;

		cr_assert(tid && name && state, "%s: a sample without thread_id, thread_name "
			  "or state", s->name);
		x = thread_time_of(t, &nt, (pid_t)tid->num);
		if (!x)
			continue;
		x->name = name->str;
		x->total += sa->values[vi];
		if (strcmp(state->str, "running") && strcmp(state->str, "runnable")) {
			x->off += sa->values[vi];
			if (leaf_named(p, sa, "[off-CPU: stack not seen]"))
				x->unseen += sa->values[vi];
		}
	}
	for (size_t i = 0; i < nb; i++) {
		const struct named_tid *a = find_tid(after, na, before[i].tid);
		struct thread_time *x = thread_time_of(t, &nt, before[i].tid);

		if (!a || !x)
			continue;
		cr_log_info("measured: %s wall: thread %d \"%s\": %.3f s of %.3f s, %.3f s off "
			    "the CPU, "
			    "%.3f s of it without a stack", s->name, x->tid, x->name ? x->name : "?",
			    x->total / 1e9, p->duration_nanos / 1e9, x->off / 1e9, x->unseen / 1e9);
		cr_expect(x->total >= p->duration_nanos * (1 - WALL_WINDOW_MAX_ERR) &&
				  x->total <= p->duration_nanos * (1 + WALL_WINDOW_MAX_ERR),
			  "%s: thread %d: %.3f s in a %.3f s window", s->name, x->tid,
			  x->total / 1e9, p->duration_nanos / 1e9);
		cr_expect(x->name && !strcmp(x->name, a->name), "%s: thread %d named '%s', /proc "
			  "says '%s'", s->name, x->tid, x->name ? x->name : "", a->name);
		off += x->off;
		unseen += x->unseen;
	}
	/* A busy server may hardly sleep at all (nginx's worker under wrk on a
	 * loaded machine: 0.08 s in 2 s, every wait shorter than a copy). How
	 * many waits outlast the copy of their stack is cprof's speed, which the
	 * sanitized build does not have: judged in the plain build. */
#ifndef __SANITIZE_ADDRESS__
	if (off > p->duration_nanos / 4)
		cr_expect_lt(unseen, off / 2, "%s: %.3f s of %.3f s off the CPU without a "
			     "stack\n%s", s->name, unseen / 1e9, off / 1e9, err);
#endif
	free(err);
	profile_free(p);
}

static void expect_answer(const struct server *s, const char *req, const char *want)
{
	char *got = exchange(s->port, req, want);

	cr_expect(strstr(got, want), "%s answered '%s' to '%s'", s->name, got, req);
	free(got);
}

/* nginx's master ends its workers on SIGTERM (waited for 5 s). */
static void stop(struct server *s)
{
	th_kill(s->load);
	th_signal(s->started, SIGTERM);
	if (th_wait_exit(s->started, 5000) == -1)
		th_kill(s->started);
	kill_workers();
}

/* ---- the servers ---------------------------------------------------------- */

static const char *const *redis_argv(struct server *s)
{
	static const char *argv[16];
	static char *path;

	path = path ? path : need("redis-server", "redis-server");
	memcpy(argv, (const char *const[]){ path, "--port", port_str(s->port), "--bind", "127.0.0.1",
					    "--save", "", "--appendonly", "no", "--daemonize", "no",
					    "--dir", s->dir, NULL },
	       14 * sizeof(*argv));
	return argv;
}

Test(realworld, redis)
{
	static const char *const sites[] = { "zmalloc", "ztrymalloc", "zcalloc", "zrealloc",
					     "ztryrealloc", NULL };
	struct server s = { .name = "redis", .dir = th_tmp_dir("redis") };
	char *bench = need("redis-benchmark", "redis-tools");

	start_on_free_port(&s, redis_argv);
	s.pid = s.started;
	s.load = th_spawn_daemon((const char *const[]){ bench, "-p", port_str(s.port), "-c", "16",
							"-P", "4", "-r", "100000", "-d", "256",
							"-t", "set,get,lpush,lpop", "-n",
							"100000000", "-q", NULL },
				 th_tmp_path("redis-benchmark.log"));
	th_sleep_ms(500);
	check_threads(&s, NULL);
	check_heap(&s, sites, 0.5, "/redis-server");
	check_cpu(&s);
	check_wall(&s);
	expect_answer(&s, "*3\r\n$3\r\nSET\r\n$7\r\ncprofkv\r\n$5\r\nhello\r\n", "+OK\r\n");
	expect_answer(&s, "*2\r\n$3\r\nGET\r\n$7\r\ncprofkv\r\n", "$5\r\nhello\r\n");
	check_let_go(&s);
	stop(&s);
	free(bench);
}

static const char *const *nginx_argv(struct server *s)
{
	static const char *argv[8];
	static char conf[512], *path;
	char file[256];
	FILE *f;

	path = path ? path : need("nginx", "nginx");
	snprintf(conf, sizeof(conf), "%s/nginx.conf", s->dir);
	f = fopen(conf, "we");
	cr_assert_not_null(f);
	/* Every path inside the test's directory: nginx -p makes it the prefix. */
	fprintf(f, "worker_processes 2;\ndaemon off;\npid %s/nginx.pid;\nerror_log %s/error.log;\n"
		   "events { worker_connections 1024; }\n"
		   "http {\n\taccess_log off;\n\tclient_body_temp_path %s/body;\n"
		   "\tproxy_temp_path %s/proxy;\n\tfastcgi_temp_path %s/fastcgi;\n"
		   "\tuwsgi_temp_path %s/uwsgi;\n\tscgi_temp_path %s/scgi;\n"
		   "\tserver { listen 127.0.0.1:%d; root %s/www; }\n}\n",
		s->dir, s->dir, s->dir, s->dir, s->dir, s->dir, s->dir, s->port, s->dir);
	fclose(f);
	snprintf(file, sizeof(file), "%s/www", s->dir);
	mkdir(file, 0755);
	snprintf(file, sizeof(file), "%s/www/index.html", s->dir);
	f = fopen(file, "we");
	cr_assert_not_null(f);
	for (int i = 0; i < 64; i++)
		fprintf(f, "cprof realworld line %02d: the quick brown fox jumps over it\n", i);
	fclose(f);
	memcpy(argv, (const char *const[]){ path, "-p", s->dir, "-c", conf, "-e", "stderr", NULL },
	       8 * sizeof(*argv));
	return argv;
}

/* The workers of nginx's master @master, remembered for kill_workers();
 * returns the first (the one profiled: each serves connections). */
static pid_t nginx_worker(pid_t master)
{
	char path[64], buf[256];

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)master, (int)master);
	for (int i = 0; i < 100 && nworkers == 0; i++) {
		FILE *f = fopen(path, "re");
		char *p = buf, *end;

		if (f && fgets(buf, sizeof(buf), f))
			for (long c; nworkers < 8 && (c = strtol(p, &end, 10)) > 0; p = end)
				nginx_workers[nworkers++] = (pid_t)c;
		if (f)
			fclose(f);
		if (nworkers == 0)
			th_sleep_ms(50);
	}
	cr_assert_gt(nworkers, 0, "nginx %d started no worker", (int)master);
	return nginx_workers[0];
}

Test(realworld, nginx)
{
	static const char *const sites[] = { "ngx_alloc", "ngx_memalign", "ngx_palloc",
					     "ngx_pnalloc", "ngx_calloc", "ngx_pcalloc", NULL };
	struct server s = { .name = "nginx", .dir = th_tmp_dir("nginx") };
	char *wrk = need("wrk", "wrk"), url[64];

	start_on_free_port(&s, nginx_argv);
	s.pid = nginx_worker(s.started);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", s.port);
	s.load = th_spawn_daemon((const char *const[]){ wrk, "-t1", "-c16", "-d120s", url, NULL },
				 th_tmp_path("wrk.log"));
	th_sleep_ms(500);
	check_threads(&s, NULL);
	check_heap(&s, sites, 0.5, "/nginx");
	check_cpu(&s);
	check_wall(&s);
	expect_answer(&s, "GET / HTTP/1.0\r\n\r\n", "line 63: the quick brown fox jumps over it\n");
	check_let_go(&s);
	stop(&s);
	free(wrk);
}

static const char *const *memcached_argv(struct server *s)
{
	static const char *argv[16];
	static char *path;

	path = path ? path : need("memcached", "memcached");
	/* -u: memcached refuses to run as root without a user to run as. -m
	 * above what memcslap writes (~350 MB): memcached mallocs only for a new
	 * slab page, none once full (at 256 MB, ~9 s into the load), and heap's
	 * window must see some whenever it starts. */
	memcpy(argv, (const char *const[]){ path, "-l", "127.0.0.1", "-p", port_str(s->port), "-U",
					    "0", "-t", "4", "-m", "1024", "-u", "root", NULL },
	       14 * sizeof(*argv));
	if (geteuid() != 0)
		argv[11] = NULL;
	return argv;
}

/* memcached's total_malloced: the bytes of the slab pages it malloced. */
static long memcached_malloced(const struct server *s)
{
	char *got = exchange(s->port, "stats slabs\r\n", "END\r\n");
	const char *at = strstr(got, "STAT total_malloced ");
	long n = at ? atol(at + strlen("STAT total_malloced ")) : -1;

	free(got);
	return n;
}

Test(realworld, memcached)
{
	/* Debian's memcached is stripped and exports no function: its own
	 * frames (slabs_alloc and kin, assoc_expand) read memcached+0xOFF. */
	static const char *const sites[] = { "memcached+0x", NULL };
	struct server s = { .name = "memcached", .dir = th_tmp_dir("memcached") };
	char *slap = need("memcslap", "libmemcached-tools"), servers[64];

	start_on_free_port(&s, memcached_argv);
	s.pid = s.started;
	snprintf(servers, sizeof(servers), "127.0.0.1:%d", s.port);
	/* 8 threads x 200000 sets: 10-20 s of load, keys made in 0.5 s; a
	 * new run's keys are new, and memcached's slab pages grow again. */
	s.load_argv = (const char *const[]){ slap, "-s", servers, "-c", "8", "-e", "200000",
					     "-t", "set", NULL };
	s.malloced = memcached_malloced;
	s.load = th_spawn_daemon(s.load_argv, th_tmp_path("memcslap.log"));
	th_sleep_ms(1000);
	check_threads(&s, "/usr/bin/memcached has no symbols or debug information");
	check_heap(&s, sites, 0.5, "/memcached");
	/* Stripped: cprof says how its frames could get names. */
	check_contention(&s, "mutex", "/usr/bin/memcached has no symbols or debug information");
	check_contention(&s, "block", "DEBUGINFOD_URLS");
	check_cpu(&s);
	check_wall(&s);
	expect_answer(&s, "set cprofkv 0 0 5\r\nhello\r\n", "STORED\r\n");
	expect_answer(&s, "get cprofkv\r\n", "VALUE cprofkv 0 5\r\nhello\r\nEND\r\n");
	check_let_go(&s);
	stop(&s);
	free(slap);
}
