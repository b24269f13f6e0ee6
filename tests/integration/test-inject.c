/*
 * lib/inject/ on real processes: tests/targets/regcheck is taken on the
 * agent-loading detour while it spins with known values in every register,
 * sleeps in nanosleep, or blocks in read(); it checks itself that nothing
 * changed and exits 0 only if so; or counts the signals a stream sends it
 * while cprof injects. Around it: a thread in a signal handler is
 * refused, a traced process is refused with -EBUSY, a resident agent is
 * reused by its own path, and the target is always let go.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/wire.h"
#include "inject/inject-private.h"
#include "inject/inject.h"
#include "target/target.h"
#include "testhelp.h"

struct session {
	struct maps maps;
	struct symbolizer *sym;
	struct unwinder *unw;
	struct inject_report rep;
};

static void skip_without_ptrace(void)
{
	if (geteuid() != 0)
		TH_SKIP_MISSING("injection needs ptrace of the target: run as root");
}

/* One cprof run's worth of injection into @pid, as cprof heap does it. */
static int inject(pid_t pid, const char *agent, struct session *s)
{
	struct inject_opts o = {
		.agent_path = agent,
		.cprof_pid = getpid(),
		.rate = 1 << 20,
		.pick_timeout_ms = 2000,
		.call_timeout_ms = 5000,
	};
	int r;

	memset(s, 0, sizeof(*s));
	cr_assert_eq(maps_read(pid, &s->maps), 0);
	cr_assert_eq(symbolizer_new(&s->sym, pid), 0);
	cr_assert_eq(unwinder_new(&s->unw, symbolizer_dwfl(s->sym), pid), 0);
	o.maps = &s->maps;
	o.sym = s->sym;
	o.unw = s->unw;
	r = inject_agent(pid, &o, &s->rep);
	unwinder_free(s->unw);
	symbolizer_unref(s->sym);
	maps_release(&s->maps);
	return r;
}

/* Ends the agent's session on memfd @fd of @pid, as cprof does at the end. */
static void end_session(pid_t pid, int fd)
{
	struct cprof_wire_header *h;
	char path[64];
	int mfd;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
	mfd = open(path, O_RDWR | O_CLOEXEC);
	cr_assert_geq(mfd, 0, "open %s", path);
	h = mmap(NULL, CPROF_WIRE_HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	close(mfd);
	cr_assert_neq(h, MAP_FAILED);
	cr_assert_eq(h->magic, CPROF_WIRE_MAGIC);
	__atomic_store_n(&h->command, CPROF_CMD_DETACH, __ATOMIC_RELEASE);
	for (int i = 0; i < 300 && __atomic_load_n(&h->state, __ATOMIC_ACQUIRE) != CPROF_STATE_DETACHED; i++)
		th_sleep_ms(10);
	cr_assert_eq(h->state, CPROF_STATE_DETACHED, "the agent did not detach");
	munmap(h, CPROF_WIRE_HEADER_SIZE);
}

/*
 * Mappings of @pid at file offset 0 with permissions @perms whose path
 * contains @path ("": anonymous ones only).
 */
static int count_mappings(pid_t pid, const char *perms, const char *path)
{
	char file[64], line[4200];
	int n = 0;
	FILE *f;

	snprintf(file, sizeof(file), "/proc/%d/maps", (int)pid);
	f = fopen(file, "re");
	cr_assert(f);
	while (fgets(line, sizeof(line), f)) {
		char p[8] = "", name[4096] = "";
		unsigned long long off = 1;

		if (sscanf(line, "%*s %7s %llx %*s %*s %4095s", p, &off, name) < 2 || off != 0 ||
		    strcmp(p, perms) != 0)
			continue;
		n += path[0] ? strstr(name, path) != NULL : !name[0];
	}
	fclose(f);
	return n;
}

/* Pages of @pid both writable and executable (MDWE refuses them). */
static int rwx_pages(pid_t pid)
{
	return count_mappings(pid, "rwxp", "");
}

/* The detour's code, mapped for a first load. */
static int detour_pages(pid_t pid)
{
	return count_mappings(pid, "r-xs", "cprof-detour");
}

/* Ends regcheck @pid's run (SIGUSR2) and asserts that every check held. */
static void finish_regcheck(pid_t pid, const char *what)
{
	int st;

	cr_assert(th_signal(pid, SIGUSR2), "regcheck %s had already ended", what);
	st = th_wait_exit(pid, 15000);
	cr_assert_eq(st, 0, "regcheck %s: exit status 0x%x", what, st);
}

/*
 * Injects @times times into regcheck @mode; the target must exit 0. The
 * first load goes through pages cprof has the target map (code read+exec,
 * data read+write) and unmaps after; later ones through the resident
 * agent's own trampoline. No page is ever writable and executable.
 */
static void detours(const char *mode, int times)
{
	pid_t pid;

	skip_without_ptrace();
	/* Ended by the test: five sessions on a loaded machine have no
	 * bound the target's own run could be set to. */
	pid = TH_SPAWN("regcheck", mode, "60");
	for (int i = 0; i < times; i++) {
		struct session s;
		uint64_t t0 = th_now_ns();
		int fd = inject(pid, CPROF_AGENT_PATH, &s);

		if (fd < 0) {
			/* Whether the target was hurt or only slow tells the two apart. */
			int st = th_alive(pid) ? -2 : th_wait_exit(pid, 1000);

			cr_assert_fail("%s, injection %d: %s (%s) after %.0f ms, %d threads tried; "
				       "target %s 0x%x",
				       mode, i, strerror(-fd), s.rep.why, (th_now_ns() - t0) / 1e6,
				       (int)s.rep.tried, st == -2 ? "alive" : "exit status", st);
		}
		cr_log_info("measured: regcheck %s: injection %d by thread %d, stopped %.2f ms, "
			    "call %.2f ms%s",
			    mode, i, (int)s.rep.tid, s.rep.stopped_ns / 1e6, s.rep.call_ns / 1e6,
			    s.rep.resident ? ", the resident agent's trampoline" : "");
		cr_assert_eq(s.rep.tid, pid, "single-threaded: the detour is the main thread's");
		cr_assert_eq(s.rep.left_pages, 0, "the detour's pages were left");
		cr_assert_eq(s.rep.resident, i > 0, "injection %d: resident %d", i, s.rep.resident);
		cr_assert_eq(rwx_pages(pid), 0, "injection %d: %d pages writable and executable", i,
			     rwx_pages(pid));
		cr_assert_eq(detour_pages(pid), 0, "injection %d: the detour's code left mapped", i);
		th_assert_let_go(pid, false, "after an injection");
		end_session(pid, fd);
	}
	cr_assert_eq(count_mappings(pid, "r--p", "cprof-agent"), 1, "the agent is loaded once");
	finish_regcheck(pid, mode);
}

TestSuite(inject, .init = th_init, .fini = th_cleanup, .timeout = 120);

Test(inject, running_thread_keeps_every_register)
{
	detours("spin", 5);
}

Test(inject, nanosleep_restarts_with_its_time)
{
	detours("sleep", 5);
}

Test(inject, blocked_read_loses_nothing)
{
	detours("read", 5);
}

struct stream {
	pid_t pid;
	int stop;
	long sent;
};

/* Queues SIGRTMIN to the target, bursts of 8 every ~50 us. */
static void *send_stream(void *arg)
{
	const struct timespec gap = { 0, 50000 };
	struct stream *st = arg;
	union sigval v = { 0 };

	while (!__atomic_load_n(&st->stop, __ATOMIC_RELAXED)) {
		for (int i = 0; i < 8; i++) {
			if (sigqueue(st->pid, SIGRTMIN, v) == 0)
				st->sent++;
			else if (errno != EAGAIN) /* EAGAIN: its queue is full */
				return NULL;
		}
		nanosleep(&gap, NULL);
	}
	return NULL;
}

/*
 * The detour's thread gets signals all along (torture found cprof holding
 * them back: a stream of them kept the thread from its mmap call, cprof
 * hung, and all but 8 were lost). Every injection must end in bounded time,
 * loaded or refused; every signal must be handled, once.
 */
Test(inject, a_stream_of_signals_is_neither_lost_nor_in_the_way)
{
	struct stream st = { 0 };
	union sigval total;
	pthread_t th;
	int loaded = 0;

	skip_without_ptrace();
	st.pid = TH_SPAWN("regcheck", "signals", "30");
	cr_assert_eq(pthread_create(&th, NULL, send_stream, &st), 0);
	for (int i = 0; i < 3; i++) {
		struct session s;
		uint64_t t0 = th_now_ns();
		int fd = inject(st.pid, CPROF_AGENT_PATH, &s);
		double ms = (double)(th_now_ns() - t0) / 1e6;

		cr_log_info("injection %d under a signal stream: %s in %.0f ms (%u threads tried, %s)",
			    i, fd >= 0 ? "loaded" : strerror(-fd), ms, s.rep.tried, s.rep.why);
		/* The longest search (pick_timeout_ms 2000, INJECT_MIN_LOOKS)
		 * + call_timeout_ms 5000, and slack. */
		cr_assert_lt(ms, 2000 * INJECT_PICK_CAP + 5000 + 2000, "injection %d took %.0f ms", i,
			     ms);
		cr_assert(fd >= 0 || fd == -EAGAIN || fd == -ETIMEDOUT, "injection %d: %s", i,
			  strerror(-fd));
		th_assert_let_go(st.pid, false, "after an injection under signals");
		if (fd >= 0) {
			loaded++;
			end_session(st.pid, fd);
		}
	}
	__atomic_store_n(&st.stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	cr_log_info("%ld SIGRTMIN sent, %d of 3 injections loaded the agent", st.sent, loaded);
	cr_assert_gt(st.sent, 1000, "the stream hardly ran");
	total.sival_int = (int)st.sent;
	cr_assert_eq(sigqueue(st.pid, SIGRTMIN + 1, total), 0);
	cr_assert_eq(th_wait_exit(st.pid, 15000), 0, "the target lost or doubled a signal");
}

struct on_detour {
	pid_t pid;
	int stop;
	int sent;
};

/* The blocked-signal mask of thread @tid of @pid, 0 when it is gone. */
static uint64_t blocked_mask(pid_t pid, pid_t tid)
{
	char buf[2048];
	const char *p;

	if (th_task_read(pid, tid, "status", buf, sizeof(buf)) < 0)
		return 0;
	p = strstr(buf, "SigBlk:");
	return p ? strtoull(p + 7, NULL, 16) : 0;
}

/* Sends one SIGRTMIN the moment the target's thread blocks every signal
 * (cprof's mask over the detour): it is taken as the mask goes back. */
static void *signal_on_detour(void *arg)
{
	struct on_detour *d = arg;
	const struct timespec gap = { 0, 20000 };
	union sigval v = { 0 };

	while (!__atomic_load_n(&d->stop, __ATOMIC_RELAXED)) {
		if (__builtin_popcountll(blocked_mask(d->pid, d->pid)) >= 60) {
			d->sent = sigqueue(d->pid, SIGRTMIN, v) == 0;
			return NULL;
		}
		nanosleep(&gap, NULL);
	}
	return NULL;
}

/*
 * A signal that arrived during the first load's detour is taken as the
 * detour puts the thread's mask back; its handler (200 ms) still runs when
 * cprof stops the thread to unmap the detour's pages. The pages must go
 * only once nothing can return into them: the handler returned into an
 * unmapped page (SIGSEGV) when the page ran that last stretch itself.
 */
Test(inject, a_signal_taken_as_the_detour_ends_returns_to_live_code)
{
	struct on_detour d = { 0 };
	union sigval total = { .sival_int = 1 };
	char fate[64];
	pthread_t th;

	skip_without_ptrace();
	for (int tries = 0; tries < 3 && !d.sent; tries++) {
		struct session s;
		int fd;

		if (d.pid)
			th_kill(d.pid);
		d = (struct on_detour){ .pid = TH_SPAWN("regcheck", "slowsignals", "60") };
		cr_assert_eq(pthread_create(&th, NULL, signal_on_detour, &d), 0);
		fd = inject(d.pid, CPROF_AGENT_PATH, &s);
		__atomic_store_n(&d.stop, 1, __ATOMIC_RELAXED);
		pthread_join(th, NULL);
		cr_assert_geq(fd, 0, "injection %d: %s (%s)", tries, strerror(-fd), s.rep.why);
		cr_log_info("try %d: %s during the detour, pages %s", tries,
			    d.sent ? "a signal sent" : "no signal sent (the detour was missed)",
			    s.rep.left_pages ? "left" : "unmapped");
		th_sleep_ms(400); /* the handler's 200 ms, and its return */
		cr_assert(th_alive(d.pid), "the target died after the detour: %s",
			  th_fate(d.pid, fate, sizeof(fate)));
		th_assert_let_go(d.pid, false, "after a signal on the detour");
		cr_assert_eq(s.rep.left_pages, 0, "the detour's pages were left");
		cr_assert_eq(detour_pages(d.pid), 0, "the detour's code left mapped");
		end_session(d.pid, fd);
	}
	cr_assert(d.sent, "in 3 tries no signal came during the detour: the premise was not met");
	cr_assert_eq(sigqueue(d.pid, SIGRTMIN + 1, total), 0);
	cr_assert_eq(th_wait_exit(d.pid, 15000), 0, "the target lost or doubled the signal");
}

/*
 * A load that fails (dlopen refuses the file) ran the page's own tail, so
 * its pages stay, said in the report; the next load unmaps them.
 */
Test(inject, a_failed_load_leaves_its_pages_to_the_next)
{
	const char *bad = th_tmp_path("cprof-agent-broken.so");
	struct session s;
	FILE *f;
	pid_t pid;
	int r;

	skip_without_ptrace();
	f = fopen(bad, "we");
	cr_assert_not_null(f);
	fputs("not an ELF file\n", f);
	fclose(f);
	pid = TH_SPAWN("regcheck", "sleep", "60");
	r = inject(pid, bad, &s);
	cr_assert_eq(r, -ENOEXEC, "got %d (%s)", r, strerror(-r));
	cr_log_info("a failed load: %s", s.rep.dlerror);
	cr_assert_eq(s.rep.left_pages, 1, "the report hides pages left");
	cr_assert_eq(detour_pages(pid), 1, "pages left: %d", detour_pages(pid));
	r = inject(pid, CPROF_AGENT_PATH, &s);
	cr_assert_geq(r, 0, "%s (%s)", strerror(-r), s.rep.why);
	cr_assert_eq(s.rep.left_pages, 0);
	cr_assert_eq(detour_pages(pid), 0, "the next load left %d detour pages", detour_pages(pid));
	end_session(pid, r);
	finish_regcheck(pid, "sleep");
}

Test(inject, refuses_a_thread_in_a_signal_handler)
{
	struct session s;
	pid_t pid;
	int r;

	skip_without_ptrace();
	pid = TH_SPAWN("regcheck", "handler", "60");
	th_sleep_ms(100);
	r = inject(pid, CPROF_AGENT_PATH, &s);
	cr_assert_eq(r, -EAGAIN, "got %d", r);
	cr_assert(strstr(s.rep.why, "__restore_rt"), "why: %s", s.rep.why);
	cr_log_info("refused %u looks in 2 s: %s", s.rep.refused, s.rep.why);
	cr_assert_eq(count_mappings(pid, "r--p", "cprof-agent"), 0);
	th_assert_let_go(pid, false, "after a refusal");
	finish_regcheck(pid, "handler");
}

Test(inject, refuses_a_traced_process)
{
	struct session s;
	pid_t pid, tracer;
	int sync[2], r;
	char c;

	skip_without_ptrace();
	pid = TH_SPAWN("regcheck", "sleep", "60");
	cr_assert_eq(pipe(sync), 0);
	tracer = fork();
	cr_assert_geq(tracer, 0);
	if (tracer == 0) {
		alarm(10);
		if (ptrace(PTRACE_SEIZE, pid, 0, 0) < 0)
			_exit(1);
		c = 'x';
		if (write(sync[1], &c, 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	cr_assert_eq(read(sync[0], &c, 1), 1);
	r = inject(pid, CPROF_AGENT_PATH, &s);
	kill(tracer, SIGKILL);
	waitpid(tracer, NULL, 0);
	cr_assert_eq(r, -EBUSY, "got %d", r);
	finish_regcheck(pid, "sleep");
}

Test(inject, resident_agent_is_reused_by_its_path)
{
	const char *copy = th_tmp_path("cprof-agent-copy.so");
	char cmd[4200];
	struct session s;
	pid_t pid;
	int r;

	skip_without_ptrace();
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", CPROF_AGENT_PATH, copy);
	cr_assert_eq(system(cmd), 0);
	pid = TH_SPAWN("regcheck", "sleep", "60");
	r = inject(pid, CPROF_AGENT_PATH, &s);
	cr_assert_geq(r, 0);
	end_session(pid, r);
	r = inject(pid, copy, &s);
	cr_assert_geq(r, 0, "%s", strerror(-r));
	cr_assert_str_eq(s.rep.agent_path, CPROF_AGENT_PATH);
	cr_assert_eq(count_mappings(pid, "r--p", "cprof-agent-copy"), 0, "a second agent was loaded");
	finish_regcheck(pid, "sleep");
}

/* Reads "key value" @key from the report at @path, after asking @pid (SIGUSR2). */
static unsigned long long report_value(pid_t pid, const char *path, const char *key)
{
	unsigned long long v = 0, x;
	char line[128], k[32];
	FILE *f = th_report_open(pid, path);

	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%31s %llu", k, &x) == 2 && !strcmp(k, key))
			v = x;
	fclose(f);
	return v;
}

/*
 * A target that cancels threads in a loop, whose waiters (asleep in a
 * futex) are the threads the detour prefers: mutex and block sessions in
 * turn all get in and out, every cancelled thread ran its cleanup, and the
 * program goes on. A thread cancelled on the detour used to leave a lock
 * held, and the next load waited out its 10 s.
 */
Test(inject, sessions_on_a_target_that_cancels_threads)
{
	const char *report = th_tmp_path("cancelloop.report");
	unsigned long long rounds, cleanups, later;
	pid_t pid;

	skip_without_ptrace();
	pid = TH_SPAWN("cancelloop", "60", report);
	for (int i = 0; i < 8; i++)
		th_session_ok(i % 2 ? "block" : "mutex", pid, "300ms", i + 1);
	th_assert_let_go(pid, false, "eight sessions");
	rounds = report_value(pid, report, "rounds");
	cleanups = report_value(pid, report, "cleanups");
	th_sleep_ms(200);
	later = report_value(pid, report, "rounds");
	cr_log_info("%llu threads cancelled, %llu cleanups, %llu more in 200 ms", rounds, cleanups,
		    later - rounds);
	cr_assert_geq(cleanups, rounds, "a cancelled thread ran no cleanup");
	cr_assert_gt(later, rounds, "the program stopped cancelling threads");
	th_kill(pid);
}

/* The thread of @pid named @name. */
static pid_t thread_named(pid_t pid, const char *name)
{
	pid_t tids[64];
	int n = th_task_list(pid, tids, 64);
	char comm[64];

	for (int i = 0; i < n; i++)
		if (target_thread_name(pid, tids[i], comm, sizeof(comm)) == 0 && !strcmp(comm, name))
			return tids[i];
	cr_assert_fail("pid %d has no thread \"%s\"", pid, name);
	return 0;
}

/*
 * The judgement of a thread seen from outside, asleep: one asleep inside a
 * signal handler (a signal frame below it) is refused without a stop, one
 * asleep under plain frames is left to the judgement at its stop. Its
 * naps are 20 ms: a look that finds it awake is tried again, for up to 5 s
 * (beside eight CPU hogs a thread whose nap ended may wait that long for
 * a CPU, seen awake at every look of a tight loop).
 */
Test(inject, a_thread_asleep_where_it_must_not_load_is_refused_without_a_stop)
{
	pid_t pid = TH_SPAWN("unwindmix", "30");
	struct inject_opts o = { 0 };
	struct session s = { 0 };
	char why[256] = "";
	int refused = 0, passed = 0;

	skip_without_ptrace();
	cr_assert_eq(maps_read(pid, &s.maps), 0);
	cr_assert_eq(symbolizer_new(&s.sym, pid), 0);
	cr_assert_eq(unwinder_new(&s.unw, symbolizer_dwfl(s.sym), pid), 0);
	o.maps = &s.maps;
	o.sym = s.sym;
	o.unw = s.unw;
	for (int i = 0; i < 500 && !refused; i++) {
		refused = inject_judge_asleep(&o, pid, thread_named(pid, "handler"), false, why,
					      sizeof(why)) == -EAGAIN;
		if (!refused)
			th_sleep_ms(10);
	}
	cr_assert(refused, "the thread asleep in a signal handler was not refused from outside");
	cr_log_info("refused without a stop: %s", why);
	cr_assert(strstr(why, "asleep, seen without a stop") && strstr(why, "__restore_rt"),
		  "%s", why);
	for (int i = 0; i < 20; i++)
		passed += inject_judge_asleep(&o, pid, thread_named(pid, "nested"), false, why,
					      sizeof(why)) == 0;
	cr_assert_eq(passed, 20, "the thread asleep under plain frames was refused: %s", why);
	cr_assert_eq(th_task_tracer(pid, thread_named(pid, "handler")), 0);
	unwinder_free(s.unw);
	symbolizer_unref(s.sym);
	maps_release(&s.maps);
	th_kill(pid);
}

/*
 * A target that maps its libc's file as data too, below the loaded one and
 * from offset 0: cprof itself, whose libdw reads the libc of the process
 * it profiles. The loader's functions must come from the code mapping: a
 * `cprof wall` in its window used to be sent into the data copy and die
 * of SIGSEGV.
 */
Test(inject, a_library_also_mapped_as_data_is_not_mistaken_for_its_code)
{
	/* Paced (2000 requests a second): the wall run needs threads, not CPUs. */
	pid_t demo = TH_SPAWN("demo", "60", "2", "2000");
	const char *argv[] = { CPROF_BIN, "wall", "-p", th_pid_str(demo), "-d", "8s", "-q", "-o",
			       th_tmp_path("inner-wall.pb.gz"), NULL };
	pid_t wall;
	struct th_run r;
	int st;

	skip_without_ptrace();
	wall = th_spawn_daemon(argv, th_tmp_path("inner-wall.log"));
	th_sleep_ms(2000);
	cr_assert(th_alive(wall), "cprof wall ended before the test began");
	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(wall), "-d", "500ms", "-o",
		 th_tmp_path("cprof-heap.pb.gz"));
	th_run_log(&r, "cprof heap on cprof wall");
	cr_expect_eq(r.exit_code, 0, "exit %d:\n%s", r.exit_code, r.err);
	th_run_release(&r);
	st = th_wait_exit(wall, 20000);
	cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the cprof wall profiled ended with status 0x%x", st);
	th_kill(demo);
}

/*
 * glibc's list of threads is locked by setuid (until every thread has run
 * its SIGSETXID handler), by pthread_create and pthread_join, and by the
 * agent's dlopen (its static TLS goes to every thread). A thread stopped
 * holding it must not be chosen, and the chosen one must still answer
 * SIGSETXID on the detour: either way the target would wait forever.
 */
Test(inject, a_target_that_calls_setuid_while_it_vforks_is_not_stalled)
{
	pid_t pid;
	int st;

	skip_without_ptrace();
	pid = TH_SPAWN("setxid", "10");
	for (int i = 0; i < 4; i++) {
		struct session s;
		int fd = inject(pid, CPROF_AGENT_PATH, &s);

		cr_assert_geq(fd, 0, "injection %d: %s (%s), %d threads tried; target %s", i,
			      strerror(-fd), s.rep.why, (int)s.rep.tried,
			      th_alive(pid) ? "alive" : "gone");
		cr_log_info("measured: setxid: injection %d by thread %d, call %.2f ms", i,
			    (int)s.rep.tid, s.rep.call_ns / 1e6);
		th_assert_let_go(pid, false, "after an injection");
		end_session(pid, fd);
	}
	st = th_wait_exit(pid, 20000);
	cr_assert(st != -1, "the target did not exit by itself: a thread waits for glibc's lock");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "setxid ended with status 0x%x", st);
}

/* Waits up to 5 s for the only thread of @pid to be in write(2). */
static void wait_in_write(pid_t pid)
{
	char path[64], line[64] = "";

	snprintf(path, sizeof(path), "/proc/%d/syscall", pid);
	for (int i = 0; i < 500; i++) {
		FILE *f = fopen(path, "r");

		if (f && fgets(line, sizeof(line), f) && !strncmp(line, "1 ", 2)) {
			fclose(f);
			return;
		}
		if (f)
			fclose(f);
		th_sleep_ms(10);
	}
	cr_assert_fail("pid %d is not in write(2) but \"%.20s\"", pid, line);
}

/*
 * A resident agent's attach runs on any thread, one inside malloc
 * included (inject_warm_agent()), on the premise that it then allocates
 * nothing. Here the target's only thread waits inside malloc_stats() with
 * the main arena's lock held, and any allocation takes that lock
 * (tests/targets/inmalloc.c): the attach of every kind's session after the
 * first runs there, and one allocation of it would wait forever, its own
 * thread holding the lock. It used to: every attach asked dlsym for
 * jemalloc's and mimalloc's functions, and a dlsym that finds nothing
 * allocates its error.
 */
Test(inject, a_resident_agent_attaches_on_a_thread_holding_the_allocator)
{
	static const char *const kinds[] = { "heap", "mutex", "block", "threadcreate" };
	char path[64], buf[4096], *out = NULL;
	pid_t pid;
	int fd;

	skip_without_ptrace();
	pid = TH_SPAWN("inmalloc", "60");
	th_session_ok("heap", pid, "200ms", 1);
	th_signal(pid, SIGUSR1);
	cr_assert_eq(th_read_until(pid, "held", 5000, &out), 0, "inmalloc said: %s", out);
	free(out);
	wait_in_write(pid);
	for (size_t i = 0; i < ARRAY_SIZE(kinds); i++)
		th_session_ok(kinds[i], pid, "200ms", (int)i + 2);
	th_assert_let_go(pid, false, "sessions on a thread inside malloc_stats()");
	/* Read the pipe: the thread leaves malloc_stats() and allocates. */
	snprintf(path, sizeof(path), "/proc/%d/fd/100", pid);
	fd = open(path, O_RDONLY | O_NONBLOCK);
	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	for (int i = 0; i < 500 && th_read_until(pid, "done", 10, &out) != 0; i++) {
		free(out);
		while (read(fd, buf, sizeof(buf)) > 0)
			;
	}
	close(fd);
	cr_assert(out && strstr(out, "done"), "inmalloc did not go on after its pipe was read: %s",
		  out ? out : "");
	free(out);
	th_kill(pid);
}
