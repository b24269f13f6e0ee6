/*
 * The bad-input table (issue 6): every input cprof must refuse or survive,
 * for every command where it applies (cpu, threads, heap, block, mutex),
 * each with its exact exit code and a substring of its message, in one
 * place. After each row the target, if there is one, must be let go (not
 * traced, not stopped) and a refused run must have written nothing.
 *
 * Exit codes (cli/report.h, man/cprof.1 EXIT STATUS): 0 written, 1 failed
 * while profiling, 2 the target cannot be profiled, 3 privilege, 4 output,
 * 64 usage.
 *
 * Rows covered elsewhere, with more checks than a table row has, and not
 * repeated here:
 * - a process traced by another tracer, then let go and snapshotted again
 *   (threads): test-threads.c already_traced, already_traced_by_strace,
 *   one_thread_traced; here every command meets a PTRACE_SEIZEd target.
 * - a stopped target stays stopped: test-threads.c sigstop_stays_stopped,
 *   test-heap.c refuses_static_and_stopped_targets.
 * - -o into a missing directory or a directory, checked before attaching
 *   (the run ends long before its -d): test-cpu.c output_missing_dir,
 *   output_is_directory; test-threads.c output_not_writable.
 * - --help matches the man page's synopsis: test-cli.c help_matches_man_synopsis;
 *   bad --index/--debug/--keep with --stop: test-heap.c, test-cli.c usage_errors.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testhelp.h"

#define RUN_TIMEOUT_MS 30000
#define NOBODY 65534

TestSuite(badinput, .init = th_init, .fini = th_cleanup, .timeout = 240);

/* What a refusal or an output is tried on: a server at rest (demo at 200
 * requests/s, a twentieth of a CPU), with a thread, allocations and lock
 * waits for every command, and the CPUs left to the cprof runs. */
static pid_t quiet_target(void)
{
	return TH_SPAWN("demo", "60", "1", "200");
}

/* ---- the commands ------------------------------------------------------ */

struct cmd {
	const char *name;
	bool window; /* takes -d */
	bool agent;  /* loads cprof-agent.so */
	const char *rate_opt;
};

static const struct cmd cmds[] = {
	{ "cpu", true, false, "-F" },
	{ "threads", false, false, NULL },
	{ "heap", true, true, "--heap-rate" },
	{ "block", true, true, "--block-rate" },
	{ "mutex", true, true, "--mutex-fraction" },
	{ "wall", true, false, "-F" },
	{ "record", true, true, NULL }, /* -o is a directory it makes */
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))
/* Those that write a file (record, the last, makes a directory). */
#define NFILE_CMDS (NCMDS - 1)

/*
 * Runs `cprof CMD -p PID [-d 300ms] -o OUT EXTRA...` (-o only when @out is
 * not NULL) into @r.
 */
static void run_cmd(struct th_run *r, const struct cmd *c, const char *pid, const char *out,
		    const char *const *extra)
{
	const char *argv[32];
	size_t n = 0;

	argv[n++] = c->name;
	if (pid) {
		argv[n++] = "-p";
		argv[n++] = pid;
	}
	if (c->window) {
		argv[n++] = "-d";
		argv[n++] = "300ms";
	}
	if (out) {
		argv[n++] = "-o";
		argv[n++] = out;
	}
	for (; extra && *extra; extra++)
		argv[n++] = *extra;
	argv[n] = NULL;
	th_run_cprof_ex(r, RUN_TIMEOUT_MS, 0, 0, argv);
}

/* The row's verdict: exit @code and @want (if any) on stderr. */
static void expect_run(const struct th_run *r, const char *row, const struct cmd *c, int code,
		       const char *want)
{
	cr_log_info("%-28s %-8s exit %d  %.*s", row, c ? c->name : "", r->exit_code,
		    (int)strcspn(r->err, "\n"), r->err);
	cr_expect(!r->timed_out, "%s, %s: cprof hung", row, c ? c->name : "");
	cr_expect_eq(r->exit_code, code, "%s, %s: exit %d, want %d; stderr:\n%s", row,
		     c ? c->name : "", r->exit_code, code, r->err);
	if (want)
		cr_expect(strstr(r->err, want) != NULL, "%s, %s: stderr lacks \"%s\":\n%s", row,
			  c ? c->name : "", want, r->err);
	if (code != 0)
		cr_expect(strstr(r->err, "cprof: error: ") != NULL, "%s, %s: no error line:\n%s",
			  row, c ? c->name : "", r->err);
}

/*
 * One refused row for every command in @which (a mask of cmds[] indexes):
 * exit @code, @want on stderr, nothing written, the target (if @target)
 * let go.
 */
static void refuse_row(const char *row, unsigned which, pid_t target, const char *pid, int code,
		       const char *want, const char *const *extra)
{
	const char *dir = th_tmp_dir("out");
	char out[4200];

	snprintf(out, sizeof(out), "%s/profile", dir);
	for (size_t i = 0; i < NCMDS; i++) {
		struct th_run r;

		if (!(which & (1u << i)))
			continue;
		run_cmd(&r, &cmds[i], pid, out, extra);
		expect_run(&r, row, &cmds[i], code, want);
		cr_expect_eq(th_dir_entries(dir), 0, "%s, %s: something was written", row,
			     cmds[i].name);
		cr_expect_eq(r.out_len, 0, "%s, %s: something on stdout", row, cmds[i].name);
		th_run_release(&r);
		if (target > 0)
			th_assert_let_go(target, false, row);
	}
}
#define ALL 0x7fu
#define RECORD 0x40u
#define AGENT_CMDS 0x1cu	 /* heap, block, mutex (record: exit 5, test-record) */
#define PTRACE_CMDS 0x5eu	 /* threads, the agent's, record */
#define WINDOW_CMDS 0x7du	 /* all but threads */
#define EXTRA(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* A profile of @c: exit 0, and the file decodes (or a non-empty text). */
static void works_row(const char *row, const struct cmd *c, pid_t target, const char *want)
{
	const char *out = th_tmp_path("profile.pb.gz");
	struct th_run r;

	run_cmd(&r, c, th_pid_str(target), out, NULL);
	expect_run(&r, row, c, 0, want);
	if (r.exit_code == 0)
		profile_free(th_load_profile(out));
	th_run_release(&r);
	th_assert_let_go(target, false, row);
}

/* ---- pids -------------------------------------------------------------- */

Test(badinput, pid_that_does_not_exist)
{
	refuse_row("no such pid", ALL, 0, th_pid_str(th_dead_pid()), 2, "no such process", NULL);
}

Test(badinput, pid_out_of_range)
{
	static const char *const pids[] = { "0", "-1", "2147483648", "99999999999", "12abc" };

	for (size_t i = 0; i < sizeof(pids) / sizeof(pids[0]); i++) {
		char want[64];

		snprintf(want, sizeof(want), "invalid pid '%s'", pids[i]);
		refuse_row(pids[i], ALL, 0, pids[i], 64, want, NULL);
	}
}

Test(badinput, kernel_thread)
{
	char comm[64] = "";
	FILE *f = fopen("/proc/2/comm", "re");

	if (!f || !fgets(comm, sizeof(comm), f) || strcmp(comm, "kthreadd\n") != 0)
		cr_skip_test("pid 2 is not kthreadd here (a pid namespace?)");
	fclose(f);
	refuse_row("kernel thread (pid 2)", ALL, 0, "2", 2, "it is a kernel thread", NULL);
}

Test(badinput, zombie)
{
	refuse_row("zombie", ALL, 0, th_pid_str(th_make_zombie()), 2, "it is a zombie", NULL);
}

/* cprof's own pid: the shell's pid becomes cprof's by exec. */
Test(badinput, cprof_itself)
{
	for (size_t i = 0; i < NCMDS; i++) {
		const char *dir = th_tmp_dir("out");
		struct th_run r;
		char *script;

		cr_assert(asprintf(&script, "exec \"$0\" %s -p $$ %s -o %s/profile", cmds[i].name,
				   cmds[i].window ? "-d 300ms" : "", dir) > 0);
		th_run_cmd_ex(&r, RUN_TIMEOUT_MS, 0, 0,
			      (const char *const[]){ "/bin/sh", "-c", script, CPROF_BIN, NULL });
		expect_run(&r, "cprof's own pid", &cmds[i], 2, "that is cprof itself");
		cr_expect_eq(th_dir_entries(dir), 0, "%s: a profile was written", cmds[i].name);
		free(script);
		th_run_release(&r);
	}
}

/* Traced by someone else: the ptrace users refuse naming the tracer; cpu
 * (perf_event_open, no ptrace) profiles it. */
Test(badinput, already_traced)
{
	pid_t target = quiet_target();
	pid_t tracer = th_start_tracer(target);
	const char *out = th_tmp_path("cpu.pb.gz");
	struct th_run r;
	char want[64];
	long held;

	snprintf(want, sizeof(want), "already traced by pid %d", (int)tracer);
	refuse_row("already traced", PTRACE_CMDS, 0, th_pid_str(target), 2, want, NULL);
	/* cpu needs no ptrace: it profiles a traced process (when perf allows). */
	run_cmd(&r, &cmds[0], th_pid_str(target), out, NULL);
	held = th_task_tracer(target, target);
	kill(tracer, SIGKILL);
	waitpid(tracer, NULL, 0);
	cr_expect_eq(held, tracer, "cprof took the target from its tracer");
	th_assert_let_go(target, false, "after its tracer left");
	if (r.exit_code != 3)
		expect_run(&r, "already traced", &cmds[0], 0, NULL);
	th_run_release(&r);
	th_kill(target);
}

/* As nobody, against root's process: exit 3 with a hint, nothing touched. */
Test(badinput, other_users_process)
{
	const char *dir;
	pid_t target;

	if (geteuid() != 0)
		TH_SKIP_MISSING("needs root, to run cprof as nobody against a root-owned target");
	target = quiet_target();
	dir = th_tmp_dir("nobody");
	cr_assert(chmod(dir, 0777) == 0);
	th_run_as(NOBODY, NOBODY);
	for (size_t i = 0; i < NCMDS; i++) {
		char out[4200];
		struct th_run r;

		snprintf(out, sizeof(out), "%s/profile", dir);
		run_cmd(&r, &cmds[i], th_pid_str(target), out, NULL);
		expect_run(&r, "another user's process", &cmds[i], 3, "it belongs to uid 0");
		cr_expect(strstr(r.err, "cprof: hint: ") != NULL, "%s: no hint:\n%s", cmds[i].name,
			  r.err);
		th_run_release(&r);
	}
	th_run_as((uid_t)-1, (gid_t)-1);
	cr_expect_eq(th_dir_entries(dir), 0, "something was written");
	th_assert_let_go(target, false, "after refusals as nobody");
	th_kill(target);
}

/* ---- binaries ---------------------------------------------------------- */

/* No libc.so, no dlopen: the agent commands refuse; cpu and threads work. */
Test(badinput, statically_linked)
{
	pid_t target = TH_SPAWN("statictarget", "60");

	refuse_row("statically linked", AGENT_CMDS, target, th_pid_str(target), 2,
		   "it is statically linked", NULL);
	works_row("statically linked", &cmds[1], target, NULL);
	th_require_perf(false);
	works_row("statically linked", &cmds[0], target, NULL);
	th_kill(target);
}

/* A copy of target @name at a fresh path; @strip: without symbols or debug info. */
static const char *copy_target(const char *name, bool strip)
{
	const char *path = th_tmp_path(name);
	char src[4096];
	struct th_run r;

	snprintf(src, sizeof(src), "%s/%s", TARGETS_DIR, name);
	if (strip)
		th_run_cmd_ex(&r, 10000, 0, 0,
			      (const char *const[]){ "/usr/bin/strip", "--strip-all", "-o", path,
						     src, NULL });
	else
		th_run_cmd_ex(&r, 10000, 0, 0,
			      (const char *const[]){ "/bin/cp", src, path, NULL });
	cr_assert_eq(r.exit_code, 0, "copying %s: %s", name, r.err);
	th_run_release(&r);
	return path;
}

/* No symbols, no debug info: addresses as BINARY+0xOFFSET, and the build id. */
Test(badinput, stripped_binary)
{
	const char *path = copy_target("busy", true);
	const char *base = strrchr(path, '/') + 1;
	char want[256];
	pid_t target = th_spawn_path(path, EXTRA("1", "60"));
	struct th_run r;

	snprintf(want, sizeof(want), "%s+0x", base);
	run_cmd(&r, &cmds[1], th_pid_str(target), "-", EXTRA("--debug", "2"));
	expect_run(&r, "stripped binary", &cmds[1], 0, NULL);
	cr_expect(strstr(r.out, want) != NULL, "threads: no \"%s\" frame:\n%s", want, r.out);
	th_run_release(&r);

	th_require_perf(false);
	const char *out = th_tmp_path("cpu.pb.gz");
	run_cmd(&r, &cmds[0], th_pid_str(target), out, NULL);
	expect_run(&r, "stripped binary", &cmds[0], 0, NULL);
	th_run_release(&r);
	struct profile *p = th_load_profile(out);
	bool mapped = false;
	for (size_t i = 0; i < p->nmappings; i++) {
		const struct profile_mapping *m = &p->mappings[i];

		if (strcmp(m->file, path) != 0)
			continue;
		mapped = true;
		cr_expect(m->build_id[0] != '\0', "no build id for the stripped %s", path);
		cr_expect(!m->has_functions, "function names claimed for a stripped binary");
	}
	cr_expect(mapped, "no mapping for %s", path);
	profile_free(p);
	th_assert_let_go(target, false, "after profiles of a stripped binary");
	th_kill(target);
}

/* The executable unlinked after the start (a program upgraded on disk while
 * it runs): profiled and symbolized all the same; never hurt. */
Test(badinput, binary_deleted_after_start)
{
	const char *path = copy_target("checksum", false);
	pid_t target = th_spawn_path(path, EXTRA("60", "--report", th_tmp_path("report"),
						 "--alloc", "1"));

	cr_assert_eq(unlink(path), 0);
	/* Symbolized from the file the kernel still holds (/proc/PID/map_files). */
	struct th_run r;

	run_cmd(&r, &cmds[1], th_pid_str(target), "-", EXTRA("--debug", "2"));
	expect_run(&r, "deleted binary", &cmds[1], 0, NULL);
	cr_expect(strstr(r.out, "\nmain(") != NULL, "threads: main not named:\n%s", r.out);
	th_run_release(&r);
	works_row("deleted binary", &cmds[2], target, NULL);
	th_require_perf(false);
	works_row("deleted binary", &cmds[0], target, NULL);
	cr_expect(th_alive(target), "the target died");
	th_kill(target);
}

/* A 32-bit (i386) process: refused before anything touches it. */
Test(badinput, process_32bit)
{
	const char *src = th_tmp_path("t32.c"), *bin = th_tmp_path("t32");
	FILE *f = fopen(src, "we");
	struct th_run r;
	pid_t target;

	cr_assert(f);
	fputs("#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n"
	      "int main(int argc, char **argv) {"
	      " if (argc > 1 && !strcmp(argv[1], \"probe\")) return 42;"
	      " puts(\"ready\"); fflush(stdout);"
	      " for (int i = 0; i < 60; i++) sleep(1); return 0; }\n", f);
	fclose(f);
	th_run_cmd_ex(&r, 60000, 0, 0,
		      (const char *const[]){ "/usr/bin/gcc", "-m32", "-o", bin, "-x", "c", src, NULL });
	if (r.exit_code != 0) {
		th_run_release(&r);
		TH_SKIP_MISSING("gcc -m32 cannot build here (gcc-multilib missing?)");
	}
	th_run_release(&r);
	/* Kernels built without CONFIG_IA32_EMULATION (or booted with
	 * ia32_emulation=0) refuse to exec it: the premise is missing. */
	th_run_cmd_ex(&r, 10000, 0, 0, (const char *const[]){ bin, "probe", NULL });
	if (r.exit_code != 42) {
		th_run_release(&r);
		cr_skip_test("this kernel does not run i386 binaries (no IA32 emulation)");
	}
	th_run_release(&r);
	target = th_spawn_path(bin, EXTRA("x"));
	refuse_row("32-bit process", ALL, target, th_pid_str(target), 2, "it is a 32-bit process",
		   NULL);
	th_kill(target);
}

/* ---- options ----------------------------------------------------------- */

Test(badinput, bad_durations)
{
	static const struct {
		const char *arg, *why;
	} rows[] = {
		{ "0", "must be longer than zero" },
		{ "-1s", "expected a duration" },
		{ "abc", "expected a duration" },
		{ "10y", "expected a duration" },
		{ "", "expected a duration" },
		{ "25h", "longer than the limit of 24h" },
		{ "9999999999999h", "longer than the limit of 24h" },
	};
	pid_t target = quiet_target();

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		char want[128], row[64];

		snprintf(want, sizeof(want), "invalid duration '%s': %s", rows[i].arg, rows[i].why);
		snprintf(row, sizeof(row), "-d '%s'", rows[i].arg);
		/* A second -d overrides the table's 300ms. */
		refuse_row(row, WINDOW_CMDS, target, th_pid_str(target), 64, want,
			   EXTRA("-d", rows[i].arg));
	}
	th_kill(target);
}

Test(badinput, bad_rates)
{
	static const char *const args[] = { "0", "-1", "abc", "1.5", "99999999999999999999" };
	pid_t target = quiet_target();

	for (size_t i = 0; i < NCMDS; i++) {
		if (!cmds[i].rate_opt)
			continue;
		for (size_t j = 0; j < sizeof(args) / sizeof(args[0]); j++) {
			char row[64], want[64];

			snprintf(row, sizeof(row), "%s '%s'", cmds[i].rate_opt, args[j]);
			snprintf(want, sizeof(want), "invalid %s '%s'",
				 strcmp(cmds[i].rate_opt, "-F") == 0 ? "frequency" : cmds[i].rate_opt,
				 args[j]);
			refuse_row(row, 1u << i, target, th_pid_str(target), 64, want,
				   EXTRA(cmds[i].rate_opt, args[j]));
		}
	}
	th_kill(target);
}

/* --rate, the old name of each agent command's rate: still taken, and said
 * to be deprecated in favour of serve's name for it. */
Test(badinput, old_rate_name)
{
	static const char *const rates[] = { "64KiB", "1ms", "2" };

	for (size_t i = 0; i < 3; i++) {
		const struct cmd *c = &cmds[2 + i];
		char want[128];
		struct th_run r;

		snprintf(want, sizeof(want), "--rate is deprecated, and goes in a later release: "
					     "it is %s", c->rate_opt);
		run_cmd(&r, c, th_pid_str(th_dead_pid()), th_tmp_path("old-rate"),
			EXTRA("--rate", rates[i]));
		expect_run(&r, "--rate", c, 2, want);
		th_run_release(&r);
	}
}

Test(badinput, unknown_flag_and_stray_argument)
{
	refuse_row("unknown flag", ALL, 0, "1", 64, "unknown option '--bogus'", EXTRA("--bogus"));
	refuse_row("unknown short flag", ALL, 0, "1", 64, "unknown option '-Z'", EXTRA("-Z"));
	refuse_row("stray argument", ALL, 0, "1", 64, "unexpected argument 'extra'",
		   EXTRA("extra"));
	refuse_row("no -p", ALL, 0, NULL, 64, "missing -p PID", NULL);
	refuse_row("-p without value", ALL, 0, NULL, 64, "needs a value", EXTRA("-p"));
}

Test(badinput, unknown_command)
{
	struct th_run r;

	TH_CPROF(&r, RUN_TIMEOUT_MS, "flamegraph", "-p", "1");
	expect_run(&r, "unknown command", NULL, 64, "flamegraph");
	th_run_release(&r);
	TH_CPROF(&r, RUN_TIMEOUT_MS, "--bogus");
	expect_run(&r, "unknown top-level flag", NULL, 64, "--bogus");
	th_run_release(&r);
}

Test(badinput, help)
{
	struct th_run r;

	for (size_t i = 0; i < NCMDS; i++) {
		char want[64];

		snprintf(want, sizeof(want), "usage: cprof %s -p PID", cmds[i].name);
		TH_CPROF(&r, RUN_TIMEOUT_MS, cmds[i].name, "--help");
		expect_run(&r, "--help", &cmds[i], 0, NULL);
		cr_expect(strstr(r.out, want) != NULL, "%s --help: no \"%s\" on stdout:\n%s",
			  cmds[i].name, want, r.out);
		th_run_release(&r);
	}
	TH_CPROF(&r, RUN_TIMEOUT_MS, "--help");
	expect_run(&r, "--help", NULL, 0, NULL);
	cr_expect(strstr(r.out, "usage: cprof <command>") != NULL, "cprof --help:\n%s", r.out);
	th_run_release(&r);
}

/* ---- outcomes that still write ------------------------------------------ */

/* The output of @c's run into @dir: a file to decode, or record's directory. */
static void expect_written(const struct cmd *c, const char *out, const char *row)
{
	char path[4200];

	snprintf(path, sizeof(path), "%s%s", out, strcmp(c->name, "record") ? "" : "/cpu.pb.gz");
	cr_expect_eq(access(path, F_OK), 0, "%s, %s: %s was not written", row, c->name, path);
	if (access(path, F_OK) == 0)
		profile_free(th_load_profile(path));
}

/*
 * The process exits mid-window, or cprof is interrupted (SIGINT): every
 * command with a window writes what it collected and exits 0, as cprof(1)'s
 * EXIT STATUS says, and says why the window was short.
 */
static void short_window_row(const char *row, bool target_exits)
{
	for (size_t i = 0; i < NCMDS; i++) {
		const struct cmd *c = &cmds[i];
		const char *out = th_tmp_path("short");
		const char *argv[] = { c->name, "-p", NULL, "-d", "10s", "-o", out, NULL };
		pid_t pid;
		struct th_run r;

		if (!c->window)
			continue;
		pid = target_exits ? TH_SPAWN("demo", "60", "1", "200") : quiet_target();
		argv[2] = th_pid_str(pid);
		/* A second into the window, whatever its start took: the
		 * target ends (SIGTERM, as a service's stop), or Ctrl-C. */
		th_run_signal_after(" for 10s", target_exits ? pid : 0);
		th_run_cprof_ex(&r, RUN_TIMEOUT_MS, target_exits ? SIGTERM : SIGINT, 1000, argv);
		expect_run(&r, row, c, 0, target_exits ? "exited during the profile"
						       : "interrupted; writing what was collected");
		expect_written(c, out, row);
		th_run_release(&r);
		th_kill(pid);
	}
}

Test(badinput, target_exits_mid_window)
{
	th_require_perf(false);
	short_window_row("target exits mid-window", true);
}

Test(badinput, interrupted_mid_window)
{
	th_require_perf(false);
	short_window_row("SIGINT mid-window", false);
}

/* ---- --json on a refusal ------------------------------------------------ */

/*
 * With --json a refused run prints one object on stdout all the same: the
 * exit code it exits with, the error and the hint it said on stderr.
 */
static void refuse_json(const char *row, pid_t target, const char *pid, int code,
			const char *const *extra)
{
	for (size_t i = 0; i < NCMDS; i++) {
		const char *args[8] = { 0 };
		char exit_key[32], error[512];
		const char *line = NULL, *nl;
		struct th_run r;
		size_t n = 0;

		for (; extra && extra[n]; n++)
			args[n] = extra[n];
		args[n] = "--json";
		run_cmd(&r, &cmds[i], pid, th_tmp_path("json-out"), args);
		expect_run(&r, row, &cmds[i], code, NULL);
		snprintf(exit_key, sizeof(exit_key), "\"exit\":%d,", code);
		cr_expect(r.out_len > 2 && r.out[0] == '{' && !strcmp(r.out + r.out_len - 2, "}\n") &&
				  !strchr(r.out, '\n')[1],
			  "%s, %s --json: not one object on stdout: '%s'", row, cmds[i].name, r.out);
		cr_expect(strstr(r.out, exit_key) != NULL, "%s, %s --json: no %s in %s", row,
			  cmds[i].name, exit_key, r.out);
		line = strstr(r.err, "cprof: error: ");
		cr_assert_not_null(line, "%s, %s: no error on stderr", row, cmds[i].name);
		line += strlen("cprof: error: ");
		nl = strchr(line, '\n');
		snprintf(error, sizeof(error), "\"error\":\"%.*s\"", (int)(nl ? nl - line : 400),
			 line);
		cr_expect(strstr(r.out, error) != NULL, "%s, %s --json: %s is not in %s", row,
			  cmds[i].name, error, r.out);
		cr_expect(strstr(r.out, "\"hint\":\"") != NULL, "%s, %s --json: no hint in %s", row,
			  cmds[i].name, r.out);
		th_run_release(&r);
		if (target > 0)
			th_assert_let_go(target, false, row);
	}
}

/* And on success: the same keys begin every command's object (record's is
 * its manifest). */
Test(badinput, json_on_success)
{
	pid_t target = quiet_target();

	th_require_perf(false);
	for (size_t i = 0; i < NCMDS; i++) {
		char want[128];
		struct th_run r;

		run_cmd(&r, &cmds[i], th_pid_str(target), th_tmp_path("json-ok"),
			EXTRA("--json", "-q"));
		expect_run(&r, "--json, written", &cmds[i], 0, NULL);
		cr_expect(r.out_len > 2 && r.out[0] == '{' && !strcmp(r.out + r.out_len - 2, "}\n"),
			  "%s --json: not one object on stdout: '%s'", cmds[i].name, r.out);
		snprintf(want, sizeof(want), "\"command\":\"%s\"", cmds[i].name);
		cr_expect(strstr(r.out, want), "%s --json: no %s in %s", cmds[i].name, want, r.out);
		cr_expect(strstr(r.out, "\"exit\":0,"), "%s --json: no exit 0 in %s", cmds[i].name,
			  r.out);
		snprintf(want, sizeof(want), "\"pid\":%d,", (int)target);
		cr_expect(strstr(r.out, want), "%s --json: no %s in %s", cmds[i].name, want, r.out);
		th_run_release(&r);
		th_assert_let_go(target, false, "--json, written");
	}
	th_kill(target);
}

Test(badinput, json_on_a_refusal)
{
	pid_t target = quiet_target();

	refuse_json("no such pid", 0, th_pid_str(th_dead_pid()), 2, NULL);
	refuse_json("bad duration", target, th_pid_str(target), 64, EXTRA("-d", "abc"));
	refuse_json("unknown flag", 0, "1", 64, EXTRA("--bogus"));
	th_kill(target);
}

/* ---- outputs ----------------------------------------------------------- */

/* An output cprof cannot use: exit 4 before the target is touched. */
static void refuse_output(const char *row, unsigned which, const char *out, const char *want)
{
	pid_t target = quiet_target();

	for (size_t i = 0; i < NCMDS; i++) {
		struct th_run r;

		if (!(which & (1u << i)))
			continue;
		run_cmd(&r, &cmds[i], th_pid_str(target), out, NULL);
		expect_run(&r, row, &cmds[i], 4, want);
		th_run_release(&r);
		th_assert_let_go(target, false, row);
	}
	th_kill(target);
}

Test(badinput, output_unwritable)
{
	const char *file = th_tmp_path("a-file");
	const char *dir = th_tmp_dir("a-dir");
	char under[4200];
	FILE *f = fopen(file, "we");

	cr_assert(f);
	fclose(f);
	/* Under a regular file: ENOTDIR, whatever our privileges. */
	snprintf(under, sizeof(under), "%s/profile", file);
	refuse_output("-o under a file", ALL, under, "Not a directory");
	/* record's -o is a directory to make: an existing one is refused with
	 * its own words (test-record). */
	refuse_output("-o an existing directory", ALL & ~RECORD, dir, "is a directory");
	cr_expect_eq(th_dir_entries(dir), 0, "something was written into %s", dir);
	refuse_output("-o /proc/version", 1u << 1, "/proc/version", "cannot write");
}

/* A full device is written in place (never replaced) and ENOSPC is exit 4. */
Test(badinput, output_dev_full)
{
	struct stat before, after;
	pid_t target = quiet_target();

	cr_assert(stat("/dev/full", &before) == 0);
	for (size_t i = 0; i < NFILE_CMDS; i++) {
		struct th_run r;

		if (i == 0)
			th_require_perf(false);
		run_cmd(&r, &cmds[i], th_pid_str(target), "/dev/full", NULL);
		expect_run(&r, "-o /dev/full", &cmds[i], 4, "No space left on device");
		th_run_release(&r);
		th_assert_let_go(target, false, "-o /dev/full");
	}
	cr_assert(stat("/dev/full", &after) == 0);
	cr_expect(S_ISCHR(after.st_mode) && after.st_rdev == before.st_rdev &&
			  after.st_ino == before.st_ino,
		  "/dev/full was replaced");
	th_kill(target);
}

/* Reads a FIFO to its end in a child; returns the child, which exits with
 * 0 if it read a gzip header. */
static pid_t fifo_reader(const char *path)
{
	pid_t child = fork();

	cr_assert(child >= 0);
	if (child == 0) {
		unsigned char buf[4096];
		size_t total = 0;
		ssize_t n;
		bool gzip = false;
		int fd;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(30);
		fd = open(path, O_RDONLY);
		if (fd < 0)
			_exit(2);
		while ((n = read(fd, buf, sizeof(buf))) > 0) {
			if (total == 0 && n >= 2 && buf[0] == 0x1f && buf[1] == 0x8b)
				gzip = true;
			total += (size_t)n;
		}
		_exit(gzip && total > 20 ? 0 : 1);
	}
	return child;
}

Test(badinput, output_fifo_written_in_place)
{
	const char *fifo = th_tmp_path("fifo");
	pid_t target = quiet_target();
	struct stat st;

	cr_assert(mkfifo(fifo, 0600) == 0);
	for (size_t i = 0; i < NFILE_CMDS; i++) {
		struct th_run r;
		pid_t reader;
		int status = -1;

		if (i == 0)
			th_require_perf(false);
		reader = fifo_reader(fifo);
		/* The reader must have the FIFO open first (cprof never blocks in open). */
		for (int k = 0; k < 200; k++) {
			run_cmd(&r, &cmds[i], th_pid_str(target), fifo, NULL);
			if (r.exit_code != 4 || !strstr(r.err, "no reader"))
				break;
			th_run_release(&r);
			th_sleep_ms(10);
		}
		expect_run(&r, "-o FIFO", &cmds[i], 0, NULL);
		th_run_release(&r);
		waitpid(reader, &status, 0);
		cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "%s: the FIFO's reader did not get a gzip profile (status %#x)",
			  cmds[i].name, status);
	}
	cr_assert(lstat(fifo, &st) == 0);
	cr_expect(S_ISFIFO(st.st_mode), "the FIFO was replaced");
	th_kill(target);
}

Test(badinput, output_fifo_without_reader)
{
	const char *fifo = th_tmp_path("fifo");

	cr_assert(mkfifo(fifo, 0600) == 0);
	refuse_output("-o FIFO, no reader", 1u << 1, fifo, "it is a FIFO with no reader");
}

Test(badinput, output_stdout)
{
	pid_t target = quiet_target();

	for (size_t i = 0; i < NFILE_CMDS; i++) {
		struct th_run r;

		if (i == 0)
			th_require_perf(false);
		run_cmd(&r, &cmds[i], th_pid_str(target), "-", NULL);
		expect_run(&r, "-o -", &cmds[i], 0, NULL);
		cr_expect(th_is_gzip((const uint8_t *)r.out, r.out_len),
			  "%s -o -: stdout is not gzip (%zu bytes)", cmds[i].name, r.out_len);
		th_run_release(&r);
		th_assert_let_go(target, false, "-o -");
	}
	th_kill(target);
}

/* A thread's id (ps -L, top -H) names its process: said, and profiled whole. */
Test(badinput, thread_id_given_as_pid)
{
	pid_t target = TH_SPAWN("demo", "60", "2", "200"), tids[16], tid = 0;
	char expect[128], main_thread[64];
	struct th_run r;
	int n;

	if (geteuid() != 0)
		TH_SKIP_MISSING("threads needs ptrace of the target: run as root");
	n = th_task_list(target, tids, 16);
	for (int i = 0; i < n && !tid; i++)
		if (tids[i] != target)
			tid = tids[i];
	cr_assert_gt(tid, 0, "demo has no thread besides its main one");
	TH_CPROF(&r, 30000, "threads", "-p", th_pid_str(tid), "--debug", "2", "-o", "-");
	th_run_log(&r, "threads -p TID");
	cr_assert_eq(r.exit_code, 0);
	snprintf(expect, sizeof(expect), "%d is a thread of pid %d (demo)", (int)tid, (int)target);
	cr_assert_not_null(strstr(r.err, expect), "stderr does not say '%s'", expect);
	/* The whole process: its main thread is there too. */
	snprintf(main_thread, sizeof(main_thread), "thread %d \"demo\"", (int)target);
	cr_assert_not_null(strstr(r.out, main_thread), "no '%s' in:\n%s", main_thread, r.out);
	th_run_release(&r);
	th_kill(target);
}

/* An earlier profile at -o is kept as .old, never replaced silently. */
Test(badinput, earlier_output_kept_as_old)
{
	const char *out = th_tmp_path("kept.pb.gz");
	char old[4200];
	uint8_t *first, *kept;
	size_t first_len, kept_len;
	struct th_run r;
	pid_t target = quiet_target();

	snprintf(old, sizeof(old), "%s.old", out);
	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", th_pid_str(target), "-o", out);
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	th_run_release(&r);
	cr_assert_eq(th_read_file(out, &first, &first_len), 0);
	cr_expect_eq(access(old, F_OK), -1, "an .old without an earlier file");
	TH_CPROF(&r, RUN_TIMEOUT_MS, "threads", "-p", th_pid_str(target), "-o", out);
	cr_assert_eq(r.exit_code, 0, "%s", r.err);
	cr_expect(strstr(r.err, "kept the earlier") != NULL, "not said:\n%s", r.err);
	th_run_release(&r);
	cr_assert_eq(th_read_file(old, &kept, &kept_len), 0, "no %s", old);
	cr_expect(kept_len == first_len && memcmp(kept, first, first_len) == 0,
		  "%s is not the first profile", old);
	free(first);
	free(kept);
	th_kill(target);
}
