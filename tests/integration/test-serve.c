/*
 * cprof serve: Go's /debug/pprof for a native process, read by real
 * clients (go tool pprof) and by a plain HTTP/1.1 client of this file that
 * checks Go's status codes, headers and texts; who may ask (the token, a
 * unix socket's mode), what a bad client cannot do (huge headers, a
 * thousand idle connections, one that never reads), and the target after
 * serve: its exit ends serve, and serve's end, SIGKILL included, unhooks.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/wire.h"
#include "pprof/pprof.h"
#include "profile/profile.h"
#include "serve-client.h"
#include "serve/serve.h"
#include "testhelp.h"

TestSuite(serve, .init = th_init, .fini = th_cleanup);

/* The served CPU profile's total against the process CPU clock over its
 * window, as cprof cpu's (test-cpu's CPU_TOTAL_MAX_ERR, and a margin for
 * the window's edges, which a request does not place as exactly). */
#define SERVE_CPU_MAX_ERR 0.05
/* How long a client asks /goroutine without pause. The target's time then,
 * against an equal window without requests: runnable (not held by a
 * snapshot) at least LOOP_RUNNABLE_MIN of it, as serve.h's interval means;
 * its CPU time, which others' work takes from too, LOOP_CPU_MIN. */
#define LOOP_MS 2000
#define LOOP_MAX_S 60
#define LOOP_RUNNABLE_MIN 0.9
#define LOOP_CPU_MIN 0.8
/* A command line of BIG_ARGS arguments of BIG_ARG_LEN bytes (the kernel
 * takes up to 128 KiB an argument): a reply of ~1 MB, several times what
 * a unix socket buffers (net.core.wmem_default; TCP's grow to hold it). */
#define BIG_ARGS 8
#define BIG_ARG_LEN 120000
/* The slow client reads SLOW_CHUNK bytes every SLOW_PAUSE_MS. */
#define SLOW_CHUNK 8192
#define SLOW_PAUSE_MS 10
/* Idle connections a test holds open against serve's bound. */
#define IDLE_CONNECTIONS 1000
/* serve's descriptors beyond one a connection, under them. */
#define IDLE_FDS_MAX 100

/* Go's serveError(): @status, text/plain, X-Go-Pprof: 1, @text and "\n". */
static void expect_go_error(const struct server *s, const char *path, int status,
			    const char *text)
{
	struct reply r;
	char want[512];

	get(s, path, NULL, &r);
	snprintf(want, sizeof(want), "%s\n", text);
	cr_expect_eq(r.status, status, "%s: status %d, want %d", path, r.status, status);
	cr_expect(has_header(&r, "\r\nContent-Type: text/plain; charset=utf-8"), "%s: %s", path,
		  r.head);
	cr_expect(has_header(&r, "\r\nX-Go-Pprof: 1"), "%s: %s", path, r.head);
	cr_expect_str_eq(r.body ? r.body : "", want, "%s", path);
	reply_release(&r);
}

/*
 * A server for the tests that judge what serve says, not how much: demo's
 * workers take 2000 requests a second (half a CPU), which gives every
 * endpoint its events and leaves the CPUs to serve, go tool pprof and the
 * suite beside this one.
 */
static pid_t paced_demo(void)
{
	return TH_SPAWN("demo", "120", "2", "2000");
}

/* Within 2 s of serve's end, the agent's hooks are gone. */
static void expect_unhooked(pid_t target, uint64_t end_ns)
{
	struct cprof_wire_header *h = th_agent_header(target);
	uint32_t state = CPROF_STATE_DETACHED;

	cr_assert_not_null(h, "no agent was ever loaded into pid %d", target);
	while (th_now_ns() - end_ns < 2000000000ULL) {
		state = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
		if (state == CPROF_STATE_DETACHED)
			break;
		th_sleep_ms(10);
	}
	cr_expect_eq(state, CPROF_STATE_DETACHED, "the agent's hooks are in 2 s after serve "
		     "ended (state %u)", state);
	munmap(h, CPROF_WIRE_HEADER_SIZE);
	th_assert_let_go(target, false, "serve's end");
}

/* `go tool pprof -top URL`: accepted, and its Type line. */
static void expect_pprof_reads(const struct server *s, const char *path, const char *type)
{
	char url[256], want[64], *out = NULL;
	int code;

	snprintf(url, sizeof(url), "http://%s/debug/pprof/%s", s->addr, path);
	code = th_pprof_top(url, &out);
	snprintf(want, sizeof(want), "Type: %s\n", type);
	cr_expect_eq(code, 0, "go tool pprof -top %s: exit %d\n%s", url, code, out);
	cr_expect(out && strstr(out, want), "go tool pprof -top %s lacks '%s':\n%s", url, want,
		  out);
	free(out);
}

Test(serve, go_tool_pprof_reads_every_endpoint, .timeout = 180)
{
	pid_t target = paced_demo();
	struct server s;
	uint64_t end;

	th_require_perf(false);
	serve_start(&s, target, (const char *const[]){ "--listen", "127.0.0.1:0",
						       "--block-rate", "10us",
						       "--mutex-fraction", "1", NULL });
	expect_pprof_reads(&s, "profile?seconds=2", "cpu");
	expect_pprof_reads(&s, "wall?seconds=1", "wall");
	expect_pprof_reads(&s, "heap", "inuse_space");
	expect_pprof_reads(&s, "allocs", "alloc_space");
	expect_pprof_reads(&s, "block", "delay");
	expect_pprof_reads(&s, "mutex", "delay");
	expect_pprof_reads(&s, "threadcreate", "threadcreate");
	expect_pprof_reads(&s, "goroutine", "threads");
	expect_pprof_reads(&s, "mutex?seconds=1", "delay");
	cr_expect_eq(serve_stop(&s, SIGTERM), 0);
	end = th_now_ns();
	expect_unhooked(target, end);
	cr_expect(th_alive(target), "the target died");
}

/* A delta covers its seconds, from the second profile's time back. */
static void expect_delta(const struct server *s, const char *path, int64_t seconds)
{
	struct reply r;
	struct profile *p = NULL;

	get_in_turn(s, path, &r);
	cr_assert_eq(r.status, 200, "%s: %d %s", path, r.status, r.body);
	cr_expect(has_header(&r, "filename=\""), "%s", r.head);
	cr_assert_eq(pprof_decode((const uint8_t *)r.body, r.body_len, &p), 0);
	cr_expect_geq(p->duration_nanos, seconds * 1000000000LL, "%s: %lld ns", path,
		      (long long)p->duration_nanos);
	cr_expect_lt(p->duration_nanos, (seconds + 10) * 1000000000LL, "%s: %lld ns", path,
		     (long long)p->duration_nanos);
	profile_free(p);
	reply_release(&r);
}

Test(serve, go_paths_texts_and_codes, .timeout = 180)
{
	pid_t target = paced_demo();
	struct server s;
	struct reply r, busy;
	char cmdline[4096];
	int fd, n;

	th_require_perf(false);
	serve_start(&s, target, (const char *const[]){ "--listen", "127.0.0.1:0",
						       "--max-seconds", "60", NULL });
	/* The index: Go's page, every profile linked with ?debug=1. */
	get(&s, "/debug/pprof/", NULL, &r);
	cr_expect_eq(r.status, 200);
	cr_expect(has_header(&r, "Content-Type: text/html; charset=utf-8"), "%s", r.head);
	for (const char *const *k = (const char *const[]){ "allocs", "block", "cmdline",
							    "goroutine", "heap", "mutex",
							    "profile", "threadcreate", NULL };
	     *k; k++) {
		char link[64];

		snprintf(link, sizeof(link), "<a href='%s?debug=1'>%s</a>", *k, *k);
		cr_expect(strstr(r.body, link), "the index lacks %s", link);
	}
	reply_release(&r);

	expect_go_error(&s, "/debug/pprof/nonesuch", 404, "Unknown profile");
	expect_go_error(&s, "/debug/pprof/heap?seconds=0", 400,
			"invalid value for \"seconds\" - must be a positive integer");
	expect_go_error(&s, "/debug/pprof/heap?seconds=1&debug=1", 400,
			"seconds and debug params are incompatible");
	expect_go_error(&s, "/debug/pprof/profile?seconds=60", 400,
			"profile duration exceeds server's WriteTimeout");
	get(&s, "/elsewhere", NULL, &r);
	cr_expect_eq(r.status, 404);
	cr_expect_str_eq(r.body, "404 page not found\n");
	reply_release(&r);
	get(&s, "/debug/pprof", NULL, &r);
	cr_expect_eq(r.status, 301);
	cr_expect(has_header(&r, "\r\nLocation: /debug/pprof/"), "%s", r.head);
	reply_release(&r);

	/* cmdline: the target's arguments, NUL-separated as Go's os.Args. */
	snprintf(cmdline, sizeof(cmdline), "/proc/%d/cmdline", target);
	fd = open(cmdline, O_RDONLY);
	n = (int)read(fd, cmdline, sizeof(cmdline));
	close(fd);
	get(&s, "/debug/pprof/cmdline", NULL, &r);
	cr_expect_eq(r.status, 200);
	cr_expect_eq(r.body_len, (size_t)n - 1);
	cr_expect(!memcmp(r.body, cmdline, (size_t)n - 1));
	reply_release(&r);

	/* Go's texts: debug=1 and the goroutine dump. */
	get_in_turn(&s, "/debug/pprof/goroutine?debug=2", &r);
	cr_expect_eq(r.status, 200);
	cr_expect(strstr(r.body, "\nthread ") || !strncmp(r.body, "thread ", 7), "%s", r.body);
	reply_release(&r);
	get(&s, "/debug/pprof/heap?debug=1", NULL, &r);
	cr_expect_eq(r.status, 200);
	cr_expect(!strncmp(r.body, "heap profile: ", 14), "%.80s", r.body);
	reply_release(&r);

	/* One CPU profile at a time, Go's 500 for the second; a client that
	 * goes away ends its window, and the next is served. */
	fd = connect_to(s.addr);
	cr_assert_geq(fd, 0);
	dprintf(fd, "GET /debug/pprof/profile?seconds=20 HTTP/1.1\r\nHost: x\r\n\r\n");
	th_sleep_ms(500);
	get(&s, "/debug/pprof/profile?seconds=1", NULL, &busy);
	cr_expect_eq(busy.status, 500);
	cr_expect_str_eq(busy.body ? busy.body : "",
			 "Could not enable CPU profiling: cpu profiling already in use\n");
	reply_release(&busy);
	close(fd);
	th_sleep_ms(500);
	get(&s, "/debug/pprof/profile?seconds=1", NULL, &r);
	cr_expect_eq(r.status, 200, "the abandoned window still holds the CPU profile: %d %s",
		     r.status, r.body);
	cr_expect(has_header(&r, "Content-Disposition: attachment; filename=\"profile\""), "%s",
		  r.head);
	reply_release(&r);

	expect_delta(&s, "/debug/pprof/allocs?seconds=2", 2);
	expect_delta(&s, "/debug/pprof/goroutine?seconds=1", 1);
	cr_expect_eq(serve_stop(&s, SIGINT), 0);
	expect_unhooked(target, th_now_ns());
}

/*
 * A name that looks like loopback and resolves elsewhere: what is bound
 * decides. The name is given an address by a hosts file mounted over
 * /etc/hosts in a mount namespace of cprof's own (unshare -m).
 */
Test(serve, a_name_that_resolves_off_loopback_is_refused)
{
	pid_t target = paced_demo();
	const char *hosts = th_tmp_path("hosts");
	struct th_run run;
	FILE *f;

	if (geteuid() != 0)
		TH_SKIP_MISSING("a hosts file of its own needs a mount namespace: run as root");
	th_run_cmd_ex(&run, 10000, 0, 0,
		      (const char *const[]){ "/usr/bin/unshare", "-m", "true", NULL });
	if (run.exit_code != 0) {
		char why[256];

		snprintf(why, sizeof(why), "%s", run.err);
		th_run_release(&run);
		th_kill(target);
		cr_skip_test("no mount namespace can be made here (a container without "
			     "CAP_SYS_ADMIN?): %s", why);
	}
	th_run_release(&run);
	f = fopen(hosts, "w");
	cr_assert_not_null(f);
	fputs("0.0.0.0 127.example.test\n", f);
	fclose(f);
	th_run_cmd_ex(&run, 10000, 0, 0,
		      (const char *const[]){ "/usr/bin/unshare", "-m", "sh", "-c",
					     "mount --bind \"$0\" /etc/hosts && exec \"$1\" serve -p "
					     "\"$2\" --listen 127.example.test:0",
					     hosts, CPROF_BIN, th_pid_str(target), NULL });
	th_run_log(&run, "serve on a name resolving to 0.0.0.0");
	cr_expect_eq(run.exit_code, 64, "%s", run.err);
	cr_expect(strstr(run.err, "is 0.0.0.0:") && strstr(run.err, "not a loopback address"),
		  "%s", run.err);
	cr_expect_null(th_agent_header(target), "the agent was loaded before the refusal");
	th_run_release(&run);
	th_kill(target);
}

Test(serve, token_socket_mode_and_bad_clients, .timeout = 180)
{
	pid_t target = paced_demo();
	const char *token = th_tmp_path("token");
	const char *sock = th_tmp_path("serve.sock");
	char listen[PATH_MAX + 8], header[20000], fdir[64];
	struct server s;
	struct reply r;
	struct stat st;
	struct th_run run;
	struct rlimit rl;
	int fds[IDLE_CONNECTIONS], nfds = 0, before, during, fd;
	FILE *f;

	/* Off loopback without a token: refused before anything is touched. */
	TH_CPROF(&run, 10000, "serve", "-p", th_pid_str(target), "--listen", "0.0.0.0:0");
	cr_expect_eq(run.exit_code, 64, "%s", run.err);
	cr_expect(strstr(run.err, "--token-file"), "%s", run.err);
	th_run_release(&run);

	f = fopen(token, "w");
	fputs("s3cret-token\n", f);
	fclose(f);
	snprintf(listen, sizeof(listen), "unix:%s", sock);
	serve_start(&s, target, (const char *const[]){ "--listen", listen, "--token-file", token,
						       NULL });
	cr_assert_eq(stat(sock, &st), 0);
	cr_expect_eq(st.st_mode & 0777, 0600, "the socket is mode %o", st.st_mode & 0777);

	get(&s, "/debug/pprof/cmdline", NULL, &r);
	cr_expect_eq(r.status, 401, "no token: %d", r.status);
	reply_release(&r);
	get(&s, "/debug/pprof/cmdline", "Authorization: Bearer s3cret-tokeX\r\n", &r);
	cr_expect_eq(r.status, 401, "a wrong token: %d", r.status);
	reply_release(&r);
	get(&s, "/debug/pprof/cmdline", "Authorization: Bearer s3cret-token\r\n", &r);
	cr_expect_eq(r.status, 200, "the token: %d", r.status);
	reply_release(&r);

	/* Oversized headers: refused, and the server goes on. */
	memset(header, 'a', sizeof(header));
	memcpy(header, "X-Big: ", 7);
	memcpy(header + sizeof(header) - 3, "\r\n", 3);
	get(&s, "/debug/pprof/cmdline", header, &r);
	cr_expect(r.status == 431 || r.status == 413 || r.status == 0,
		  "a 20 kB header was answered %d", r.status);
	reply_release(&r);

	/* A thousand idle connections and one that never reads: a scraper
	 * is answered beside them, and serve's descriptors stay bounded. */
	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < IDLE_CONNECTIONS + 64) {
		rl.rlim_cur = rl.rlim_max < IDLE_CONNECTIONS + 64 ? rl.rlim_max
								    : IDLE_CONNECTIONS + 64;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	snprintf(fdir, sizeof(fdir), "/proc/%d/fd", s.pid);
	before = th_dir_entries(fdir);
	fd = connect_to(s.addr);
	dprintf(fd, "GET /debug/pprof/goroutine?debug=2 HTTP/1.1\r\nHost: x\r\n"
		    "Authorization: Bearer s3cret-token\r\n\r\n");
	for (int i = 0; i < IDLE_CONNECTIONS; i++) {
		int c = connect_ex(s.addr, SOCK_NONBLOCK);

		if (c < 0)
			break;
		fds[nfds++] = c;
	}
	cr_expect_eq(nfds, IDLE_CONNECTIONS, "serve took %d idle connections", nfds);
	th_sleep_ms(500);
	get(&s, "/debug/pprof/cmdline", "Authorization: Bearer s3cret-token\r\n", &r);
	cr_expect_eq(r.status, 200, "beside %d idle connections: %d", nfds, r.status);
	reply_release(&r);
	during = th_dir_entries(fdir);
	cr_expect_lt(during - before, nfds + IDLE_FDS_MAX, "serve holds %d descriptors with %d "
		     "idle connections (%d before)", during, nfds, before);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	close(fd);

	cr_expect_eq(serve_stop(&s, SIGTERM), 0);
	cr_expect_neq(stat(sock, &st), 0, "the socket was left behind");
}

Test(serve, target_exit_ends_serve_and_sigkill_unhooks, .timeout = 120)
{
	pid_t target = paced_demo();
	struct server s;
	int st;

	serve_start(&s, target, (const char *const[]){ "--listen", "127.0.0.1:0", NULL });
	cr_expect_eq(serve_stop(&s, SIGKILL), 128 + SIGKILL);
	expect_unhooked(target, th_now_ns());

	serve_start(&s, target, (const char *const[]){ "--listen", "127.0.0.1:0", NULL });
	th_kill(target);
	st = th_wait_exit(s.pid, 20000);
	cr_assert_neq(st, -1, "serve outlived its target by 20 s");
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "serve ended %d after its target", st);
}

/*
 * serve keeps the agent's session, and so its task (cprof's, a member of the
 * target's thread group), for as long as it serves: a single-threaded
 * target still counts one goroutine on the index, and its dump and its
 * profile hold one thread (issue 34: 5 for a 4-thread target).
 */
Test(serve, goroutines_are_the_targets_threads, .timeout = 120)
{
	pid_t target = TH_SPAWN("ring", "60", th_tmp_path("ring.report"), "1", "64", "4096",
				"2000");
	const char *path = th_tmp_path("goroutine.pb.gz");
	struct profile *p;
	struct server s;
	struct reply r;
	const char *row;
	pid_t tids[4];
	long count = -1;
	int fd, blocks;

	serve_start(&s, target, (const char *const[]){ "--listen", "127.0.0.1:0", NULL });
	cr_assert_eq(th_task_list(target, tids, 4), 2,
		     "the agent's task is not there to leave out");
	get(&s, "/debug/pprof/", NULL, &r);
	cr_expect_eq(r.status, 200);
	row = r.body ? strstr(r.body, "</td><td><a href='goroutine?debug=1'>") : NULL;
	cr_assert(row, "no goroutine row on the index:\n%s", r.body);
	while (row > r.body && row[-1] != '>')
		row--;
	count = strtol(row, NULL, 10);
	cr_expect_eq(count, 1, "the index counts %ld goroutines of a single-threaded target",
		     count);
	reply_release(&r);

	get_in_turn(&s, "/debug/pprof/goroutine?debug=2", &r);
	cr_expect_eq(r.status, 200);
	cr_assert(r.body);
	blocks = !strncmp(r.body, "thread ", 7);
	for (const char *b = r.body; (b = strstr(b, "\nthread ")); b++)
		blocks++;
	cr_expect_eq(blocks, 1, "%d thread blocks in the dump:\n%s", blocks, r.body);
	cr_expect_null(strstr(r.body, "peer_gone"), "the agent's frames:\n%s", r.body);
	reply_release(&r);

	th_sleep_ms(SERVE_SNAPSHOT_INTERVAL_MS);
	get_in_turn(&s, "/debug/pprof/goroutine", &r);
	cr_expect_eq(r.status, 200);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, r.body, r.body_len), (ssize_t)r.body_len);
	close(fd);
	reply_release(&r);
	p = th_load_profile(path);
	cr_expect_eq(th_sample_sum(p, "threads", "count"), 1.0, "%.0f threads in the profile",
		     th_sample_sum(p, "threads", "count"));
	profile_free(p);
	cr_expect_eq(serve_stop(&s, SIGINT), 0);
	expect_unhooked(target, th_now_ns());
}

/*
 * The profiles served are the commands' own: the CPU profile's total
 * against the target's process CPU clock over the profile's window, and
 * its functions in busy's proportions (work_a the most).
 */
Test(serve, cpu_profile_holds_the_clock, .timeout = 120)
{
	pid_t target = TH_SPAWN("busy", "2", "60");
	struct th_cpuclock *clk = th_cpuclock_start(target);
	struct server s;
	struct reply r;
	struct profile *p = NULL;
	struct th_cpustat load0, load1;
	int64_t truth, total;
	int vi;

	th_require_perf(false);
	th_skip_accuracy_when_sanitized();
	serve_start(&s, target, (const char *const[]){ "--listen", "127.0.0.1:0", "--no-agent",
						       NULL });
	th_cpustat_read(&load0);
	get(&s, "/debug/pprof/profile?seconds=3", NULL, &r);
	th_cpustat_read(&load1);
	th_cpuclock_stop(clk);
	cr_assert_eq(r.status, 200, "%d %s", r.status, r.body);
	cr_assert_eq(pprof_decode((const uint8_t *)r.body, r.body_len, &p), 0);
	vi = th_sample_type(p, "cpu", "nanoseconds");
	cr_assert_geq(vi, 0);
	total = profile_total(p, (size_t)vi);
	truth = th_cpuclock_between(clk, p->time_nanos, p->time_nanos + p->duration_nanos);
	cr_log_info("measured: served cpu %lld ns, the CPU clock %lld ns over its window (%+.2f%%)",
		    (long long)total, (long long)truth, truth > 0 ? 100.0 * total / truth - 100 : 0);
	cr_assert_gt(truth, 0, "the clock's readings do not cover the profile's window");
	/* Judged on a busy machine too: each thread's samples are weighed by its
	 * own clock, so the total is the process's CPU whoever else runs. */
	cr_log_info("measured: served cpu: other processes used %.0f%% of the CPUs",
		    th_foreign_load(&load0, &load1, truth) * 100);
	cr_expect(total >= truth * (1 - SERVE_CPU_MAX_ERR) &&
		  total <= truth * (1 + SERVE_CPU_MAX_ERR),
		  "served cpu %lld ns against the clock's %lld", (long long)total, (long long)truth);
	profile_free(p);
	reply_release(&r);
	th_cpuclock_free(clk);
	cr_expect_eq(serve_stop(&s, SIGTERM), 0);
}

/* What the target had of its time, read at one moment. */
struct share {
	int64_t run, runnable, serve_run;
	uint64_t ns;
	struct th_cpustat load;
};

static void share_read(struct share *m, pid_t target, pid_t serve)
{
	th_cpustat_read(&m->load);
	m->run = th_schedstat_total(target);
	m->runnable = th_schedstat_runnable(target);
	m->serve_run = th_schedstat_total(serve);
	m->ns = th_now_ns();
	cr_assert(m->run >= 0 && m->runnable >= 0, "pid %d's schedstat cannot be read", target);
}

/* From @a to @b: the target's CPU time and the time it was runnable, per
 * second, and the share of the CPUs that went to other processes. */
static void share_between(const struct share *a, const struct share *b, double *ret_cpu,
			  double *ret_runnable, double *ret_foreign)
{
	double ns = (double)(b->ns - a->ns);

	*ret_cpu = (double)(b->run - a->run) / ns;
	*ret_runnable = (double)(b->runnable - a->runnable) / ns;
	*ret_foreign = th_foreign_load(&a->load, &b->load,
				       (b->run - a->run) + (b->serve_run - a->serve_run));
}

/* Keeps every thread of @pid (0: the calling thread) on CPU @cpu. */
static void pin(pid_t pid, int cpu)
{
	pid_t tids[64] = { 0 };
	int n = pid ? th_task_list(pid, tids, (int)ARRAY_SIZE(tids)) : 1;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	for (int i = 0; i < n; i++)
		cr_assert_eq(sched_setaffinity(tids[i], sizeof(set), &set), 0, "cpu %d: %s", cpu,
			     strerror(errno));
}

/*
 * A client that asks /goroutine without pause: its snapshots are at least
 * SERVE_SNAPSHOT_INTERVAL_MS apart, the others get 429 with Retry-After,
 * and the target keeps its time. A thread that always runs is runnable but
 * while a snapshot holds it: the time it was runnable is what the
 * snapshots left it, whatever else the machine runs. Its CPU time, which
 * others take too, is judged where they take little. The client and serve
 * share a CPU, the target has another: what is judged is what the
 * snapshots take from it, not what thousands of requests a second cost a
 * machine of two CPUs. The index's count of goroutines takes no snapshot:
 * a profile right after it is served.
 */
Test(serve, goroutine_snapshots_are_bounded, .timeout = 180)
{
	/* It outlives the test's timeout: the loop and the waits its 429s ask
	 * for took 71 s beside the sanitized suites, and serve ends with it. */
	pid_t target = TH_SPAWN("busy", "1", "170");
	int n200 = 0, n429 = 0, nother = 0, other = 0, cpus[2], ncpus = 0, retry_s = 1;
	double cpu0, cpu1, runnable0, runnable1, foreign0, foreign1, paused_ms = 0;
	struct share m0, m1, m2;
	struct server s;
	struct reply r;
	cpu_set_t allowed;

	serve_start(&s, target, (const char *const[]){ "--listen", "127.0.0.1:0", "--no-agent",
						       NULL });
	cr_assert_eq(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
	for (int c = 0; c < CPU_SETSIZE && ncpus < 2; c++)
		if (CPU_ISSET(c, &allowed))
			cpus[ncpus++] = c;
	if (ncpus == 2) {
		pin(0, cpus[0]);
		pin(s.pid, cpus[0]);
		pin(target, cpus[1]);
	}
	share_read(&m0, target, s.pid);
	th_sleep_ms(LOOP_MS);
	share_read(&m1, target, s.pid);
	/* LOOP_MS, and on until a profile was served twice and refused once:
	 * on a loaded machine one snapshot can take as long as the loop, its
	 * process waiting for a CPU while it holds the target, and the next
	 * waits twenty times that (SERVE_SNAPSHOT_SHARE): the loop goes on
	 * until a second after the last 429 said, LOOP_MAX_S at most. */
	for (uint64_t until = m1.ns + 10 * LOOP_MS * 1000000ULL;;) {
		uint64_t now = th_now_ns(), spent = now - m1.ns;
		const char *at;

		if (spent >= LOOP_MS * 1000000ULL &&
		    ((n200 >= 2 && n429 >= 1) || now >= until))
			break;
		get(&s, "/debug/pprof/goroutine?debug=1", NULL, &r);
		if (r.status == 200) {
			n200++;
			at = r.body ? strstr(r.body, "# paused ") : NULL;
			paused_ms += at ? strtod(at + 9, NULL) : 0;
		} else if (r.status == 429) {
			n429++;
			retry_s = retry_after_s(&r);
			cr_expect_geq(retry_s, 1, "429 without a Retry-After of 1 s or more:\n%s",
				      r.head);
			if (n200 < 2 && now + (retry_s + 1) * 1000000000ULL > until)
				until = now + (retry_s + 1) * 1000000000ULL;
			if (until > m1.ns + LOOP_MAX_S * 1000000000ULL)
				until = m1.ns + LOOP_MAX_S * 1000000000ULL;
			cr_expect(has_header(&r, "\r\nX-Go-Pprof: 1"), "%s", r.head);
			cr_expect(r.body && strstr(r.body, "stops every thread"), "429: %s", r.body);
		} else {
			nother++;
			other = r.status;
		}
		reply_release(&r);
	}
	share_read(&m2, target, s.pid);
	/* Others' share is of every CPU this test may use, as before the pin. */
	cr_assert_eq(sched_setaffinity(0, sizeof(allowed), &allowed), 0);
	share_between(&m0, &m1, &cpu0, &runnable0, &foreign0);
	share_between(&m1, &m2, &cpu1, &runnable1, &foreign1);
	cr_log_info("measured: goroutine loop of %.0f ms: %d served, %d refused (429); serve "
		    "said its snapshots held the target %.3f ms in all", (m2.ns - m1.ns) / 1e6,
		    n200, n429, paused_ms);
	cr_log_info("measured: the target runnable %.3f s/s under the loop, %.3f without "
		    "(%.1f%%); its CPU %.3f s/s, %.3f without (%.1f%%); others took %.0f%%, "
		    "%.0f%% of the CPUs", runnable1, runnable0, 100 * runnable1 / runnable0,
		    cpu1, cpu0, 100 * cpu1 / cpu0, 100 * foreign1, 100 * foreign0);
	cr_expect_eq(nother, 0, "%d replies were neither 200 nor 429 (%d)", nother, other);
	cr_expect(n200 >= 2 && n429 >= 1, "%d served, %d refused", n200, n429);
	cr_expect_leq(n200, (int)((m2.ns - m1.ns) / (SERVE_SNAPSHOT_INTERVAL_MS * 1000000ULL)) + 1,
		      "%d snapshots in %.0f ms: closer than %d ms", n200, (m2.ns - m1.ns) / 1e6,
		      SERVE_SNAPSHOT_INTERVAL_MS);
	cr_expect_geq(runnable1, runnable0 * LOOP_RUNNABLE_MIN, "the target was runnable %.3f "
		      "s/s under the loop, %.3f without", runnable1, runnable0);
	if (ncpus < 2 || foreign0 < 0 || foreign1 < 0 || foreign0 > TH_MAX_FOREIGN ||
	    foreign1 > TH_MAX_FOREIGN)
		cr_log_info("not judged: the target's CPU time (%d CPUs; others took %.0f%%, "
			    "%.0f%%)", ncpus, 100 * foreign1, 100 * foreign0);
	else
		cr_expect_geq(cpu1, cpu0 * LOOP_CPU_MIN, "the target ran %.3f s/s under the "
			      "loop, %.3f without", cpu1, cpu0);

	/* A 429 (after a last profile served, if the turn was free), and as
	 * long as it said: a snapshot's turn has come, and nothing took it. */
	for (int status = 0; status != 429;) {
		get(&s, "/debug/pprof/goroutine?debug=1", NULL, &r);
		status = r.status;
		retry_s = retry_after_s(&r);
		reply_release(&r);
		cr_assert(status == 200 || status == 429, "goroutine: %d", status);
	}
	th_sleep_ms(1000 * (retry_s > 1 ? retry_s : 1));
	get(&s, "/debug/pprof/", NULL, &r);
	cr_expect_eq(r.status, 200);
	reply_release(&r);
	get(&s, "/debug/pprof/goroutine?debug=1", NULL, &r);
	cr_expect_eq(r.status, 200, "a goroutine profile right after the index: %d %s",
		     r.status, r.body);
	reply_release(&r);
	cr_expect_eq(serve_stop(&s, SIGTERM), 0);
}

struct slow_read {
	char *buf;
	size_t len, alloc;
	bool end;       /* the peer closed its end */
	pid_t server;   /* watched while reading ... */
	uint64_t gone_ns; /* ... seen gone then (th_now_ns()), or 0 */
};

/* Reads @fd SLOW_CHUNK bytes every SLOW_PAUSE_MS until @until bytes in
 * all (0: until its end), for REPLY_MS at most. */
static void read_slowly(int fd, struct slow_read *b, size_t until)
{
	uint64_t t0 = th_now_ns();

	while (!b->end && (!until || b->len < until) && th_now_ns() - t0 < REPLY_MS * 1000000ULL) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (b->server && !b->gone_ns && !th_alive(b->server))
			b->gone_ns = th_now_ns();

		if (b->len + SLOW_CHUNK + 1 > b->alloc) {
			b->alloc = (b->len + SLOW_CHUNK + 1) * 2;
			b->buf = realloc(b->buf, b->alloc);
			cr_assert_not_null(b->buf);
		}
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		n = read(fd, b->buf + b->len, SLOW_CHUNK);
		if (n <= 0)
			b->end = true;
		else
			b->len += (size_t)n;
		b->buf[b->len] = '\0';
		th_sleep_ms(SLOW_PAUSE_MS);
	}
}

/* The body of the reply in @b, and its Content-Length (-1: none). */
static const char *reply_body(const struct slow_read *b, long *ret_length)
{
	const char *sep = b->buf ? strstr(b->buf, "\r\n\r\n") : NULL;
	const char *cl = b->buf ? strcasestr(b->buf, "\r\nContent-Length: ") : NULL;

	*ret_length = cl && sep && cl < sep ? strtol(cl + 18, NULL, 10) : -1;
	return sep ? sep + 4 : NULL;
}

/*
 * SIGTERM while a large reply is on its way to a client that reads slowly:
 * the client gets it whole and serve exits 0. Beside it a client that reads
 * nothing is given up on after SERVE_REPLY_STALL_S, which it shows by the
 * part of its reply it never got: the reply did not fit the sockets'
 * buffers, the slow client's was under way too.
 */
Test(serve, replies_under_way_are_written_at_the_stop, .timeout = 120)
{
	const char *args[3 + BIG_ARGS + 1] = { "120", "1", "10" };
	static const char request[] = "GET /debug/pprof/cmdline HTTP/1.1\r\nHost: x\r\n"
				      "Connection: close\r\n\r\n";
	const char *sock = th_tmp_path("big.sock");
	struct slow_read slow = { 0 }, stalled = { 0 };
	char path[64], listen[PATH_MAX + 8], *big[BIG_ARGS];
	uint8_t *want = NULL, *log = NULL;
	size_t want_len = 0, log_len = 0;
	const char *body;
	struct server s;
	long length;
	uint64_t sig_ns;
	pid_t target;
	int fd, quiet, code;

	for (int i = 0; i < BIG_ARGS; i++) {
		big[i] = malloc(BIG_ARG_LEN);
		cr_assert_not_null(big[i]);
		memset(big[i], 'a' + i, BIG_ARG_LEN - 1);
		big[i][BIG_ARG_LEN - 1] = '\0';
		args[3 + i] = big[i];
	}
	target = th_spawn_target("demo", args);
	snprintf(path, sizeof(path), "/proc/%d/cmdline", target);
	cr_assert_eq(th_read_file(path, &want, &want_len), 0);
	while (want_len && want[want_len - 1] == '\0')
		want_len--;
	snprintf(listen, sizeof(listen), "unix:%s", sock);
	serve_start(&s, target, (const char *const[]){ "--listen", listen, "--no-agent", NULL });
	fd = connect_to(s.addr);
	quiet = connect_to(s.addr);
	cr_assert(fd >= 0 && quiet >= 0, "cannot connect to %s", s.addr);
	cr_assert_eq(write(quiet, request, sizeof(request) - 1), (ssize_t)sizeof(request) - 1);
	cr_assert_eq(write(fd, request, sizeof(request) - 1), (ssize_t)sizeof(request) - 1);
	read_slowly(fd, &slow, 16 * SLOW_CHUNK);
	cr_assert(!slow.end, "the reply came whole before the stop (%zu bytes)", slow.len);

	cr_assert(th_signal(s.pid, SIGTERM));
	sig_ns = th_now_ns();
	slow.server = s.pid;
	read_slowly(fd, &slow, 0);
	code = serve_wait(&s);
	if (!slow.gone_ns)
		slow.gone_ns = th_now_ns();
	cr_log_info("measured: stop under way: the slow client read %zu bytes, serve ended "
		    "%.0f ms after SIGTERM", slow.len, (slow.gone_ns - sig_ns) / 1e6);
	cr_expect_eq(code, 0, "serve's exit code after SIGTERM");
	cr_expect_lt(slow.gone_ns - sig_ns, (SERVE_REPLY_STALL_S + 2) * 1000000000ULL,
		     "serve took %.0f ms to stop", (slow.gone_ns - sig_ns) / 1e6);
	body = reply_body(&slow, &length);
	cr_assert_not_null(body, "no reply: %.200s", slow.buf);
	cr_expect(!strncmp(slow.buf, "HTTP/1.1 200 ", 13), "%.200s", slow.buf);
	cr_expect_eq(length, (long)want_len, "Content-Length %ld of a %zu-byte command line",
		     length, want_len);
	cr_expect_eq((size_t)(slow.buf + slow.len - body), want_len,
		     "the slow client got %zu of %zu bytes", (size_t)(slow.buf + slow.len - body),
		     want_len);
	cr_expect(!memcmp(body, want, want_len < (size_t)(slow.buf + slow.len - body)
			  ? want_len : (size_t)(slow.buf + slow.len - body)),
		  "the reply is not the command line");

	read_slowly(quiet, &stalled, 0);
	body = reply_body(&stalled, &length);
	cr_expect(body && (size_t)(stalled.buf + stalled.len - body) < want_len,
		  "the client that read nothing still got all %zu bytes: the test's reply fits "
		  "the sockets' buffers", want_len);
	cr_assert_eq(th_read_file(s.log, &log, &log_len), 0);
	cr_expect(memmem(log, log_len, "cut short", 9), "serve's log does not say a reply was "
		  "cut short:\n%.*s", (int)log_len, (char *)log);

	close(fd);
	close(quiet);
	free(slow.buf);
	free(stalled.buf);
	free(want);
	free(log);
	for (int i = 0; i < BIG_ARGS; i++)
		free(big[i]);
	th_kill(target);
}
