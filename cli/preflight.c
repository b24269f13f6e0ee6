#include "preflight.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "report.h"
#include "target/claim.h"

/* EI_CLASS of the target's executable: 2 for 64-bit ELF. */
static int exe_elf_class(pid_t pid)
{
	unsigned char ident[5];
	char path[64];
	int fd, n;

	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = (int)read(fd, ident, sizeof(ident));
	close(fd);
	if (n != (int)sizeof(ident) || memcmp(ident, "\177ELF", 4))
		return -ENOEXEC;
	return ident[4];
}

/* Another user's process, and we are not root. (A capability such as
 * CAP_SYS_PTRACE would let /proc answer, and the kernel judge later.) */
static int refuse_other_user(const struct target *t)
{
	report_error("cannot profile pid %d (%s): it belongs to uid %u and cprof runs as uid %u",
		     t->pid, t->comm, (unsigned)t->uid, (unsigned)geteuid());
	report_hint("run cprof as root (or with CAP_SYS_PTRACE and CAP_PERFMON), or as uid %u, "
		    "the owner of pid %d", (unsigned)t->uid, t->pid);
	return EXIT_PERMISSION;
}

int preflight_target(pid_t pid, struct target *t)
{
	int r;

	memset(t, 0, sizeof(*t));
	r = target_open(t, pid);
	/* A thread's id (ps -L, top -H, a log line): the process it belongs to. */
	if (r == 0 && t->tgid != pid && !t->kernel_thread) {
		pid_t tid = pid;

		pid = t->tgid;
		memset(t, 0, sizeof(*t));
		r = target_open(t, pid);
		if (r == 0)
			report_note("%d is a thread of pid %d (%s); profiling the whole process",
				    tid, pid, t->comm);
	}

	if (r == -ESRCH) {
		report_error("cannot profile pid %d: no such process", pid);
		report_hint("check the pid with 'ps -p %d'; the process may have exited", pid);
		return EXIT_TARGET;
	}
	if ((r == -EACCES || r == -EPERM) && t->pid == pid && t->uid != geteuid())
		return refuse_other_user(t);
	if (r == -EACCES || r == -EPERM) {
		report_error("cannot profile pid %d: permission denied reading /proc/%d", pid, pid);
		report_hint("run cprof as root, or as the user that owns pid %d", pid);
		return EXIT_PERMISSION;
	}
	if (r < 0) {
		report_error("cannot profile pid %d: reading /proc/%d failed: %s", pid, pid,
			     strerror(-r));
		return EXIT_TARGET;
	}
	if (t->is_self) {
		report_error("cannot profile pid %d: that is cprof itself", pid);
		return EXIT_TARGET;
	}
	if (t->kernel_thread) {
		report_error("cannot profile pid %d (%s): it is a kernel thread, with no user space "
			     "to profile", pid, t->comm);
		report_hint("kernel threads show up in system-wide tools such as 'perf top'");
		return EXIT_TARGET;
	}
	if (t->state == 'Z' || t->state == 'X') {
		report_error("cannot profile pid %d (%s): it is a zombie (exited, not yet reaped by "
			     "its parent)", pid, t->comm);
		return EXIT_TARGET;
	}
	if (geteuid() != 0 && t->uid != geteuid())
		return refuse_other_user(t);
	r = exe_elf_class(pid);
	if (r == 1) {
		report_error("cannot profile pid %d (%s): it is a 32-bit process, and cprof "
			     "unwinds 64-bit (x86-64) processes only", pid, t->comm);
		return EXIT_TARGET;
	}
	return 0;
}

void preflight_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int preflight_not_traced(const struct target *t, const char *what)
{
	char name[64] = "?";
	struct target now;

	if (!t->tracer_pid)
		return 0;
	/*
	 * Another cprof stopping threads of it (its claim names it) is waited
	 * for, not refused; so is a tracer that lets go within a second (a
	 * tracer thread that has ended holds its tracees until the kernel has
	 * reaped it, after its claim is gone).
	 */
	for (int i = 0; i < 100; i++) {
		const struct timespec pause = { 0, 10 * 1000 * 1000 };

		if (target_claim_holder(t->pid, TARGET_CLAIM_PTRACE) == t->tracer_pid ||
		    (target_open(&now, t->pid) == 0 && now.tracer_pid == 0))
			return 0;
		nanosleep(&pause, NULL);
	}
	target_process_name(t->tracer_pid, name, sizeof(name));
	report_error("cannot %s pid %d (%s): it is already traced by pid %d (%s)", what, t->pid,
		     t->comm, t->tracer_pid, name);
	report_hint("a process has one tracer at a time; detach the debugger or strace first");
	return EXIT_TARGET;
}

int preflight_command(struct common_opts *o, bool binary, struct target *ret_target,
		      struct output *ret_out)
{
	char why[1024];
	int code;

	report_set_quiet(o->quiet);
	code = preflight_target(o->pid, ret_target);
	if (code)
		return code;
	o->pid = ret_target->pid;
	if (output_prepare(ret_out, o->output, binary, why, sizeof(why)) < 0) {
		report_error_text(NULL, why);
		return EXIT_OUTPUT;
	}
	return 0;
}
