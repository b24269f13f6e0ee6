#include "run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "epilogue.h"
#include "interrupt.h"
#include "preflight.h"
#include "report.h"
#include "util/parse.h"
#include "util/util.h"

int run_start_sampler(struct run *run, int r, const char *why)
{
	char err[256];

	if (r < 0) {
		report_error_text(NULL, why);
		if (r == -EACCES || r == -EPERM)
			return EXIT_PERMISSION;
		return r == -ESRCH ? EXIT_TARGET : EXIT_FAIL;
	}
	r = profiler_start(run->p, err, sizeof(err));
	if (r < 0) {
		report_error("cannot start sampling pid %d: %s", run->target.pid, strerror(-r));
		return r == -ESRCH ? EXIT_TARGET : EXIT_FAIL;
	}
	return 0;
}

int run_render_text(const struct run *run, int debug, char **ret, size_t *ret_len)
{
	FILE *f = open_memstream(ret, ret_len);
	int r;

	if (!f)
		return -errno;
	r = profiler_write_text(run->p, debug, f);
	if (fclose(f) != 0 && r == 0)
		r = -EIO;
	return r;
}

int run_prepare(const struct run_ops *ops, void *c, struct run *run, struct common_opts *o,
		uint64_t duration_ns, int argc, char **argv)
{
	char why[1024];
	int r, code;

	/* Every exit code is one to leave with, EXIT_OK included (a background
	 * session answered): only RUN_GO_ON goes on. */
	*run = (struct run){ .opts = o, .duration_ns = duration_ns };
	report_set_quiet(o->quiet);
	command_line_join(argc, argv, run->command_line, sizeof(run->command_line));
	if (options_set_given(o)) {
		code = run_prepare_set(ops, run, o);
		if (code != RUN_GO_ON)
			return code;
		goto out_prepare;
	}
	code = preflight_target(o->pid, &run->target);
	if (code)
		return code;
	o->pid = run->target.pid; /* the process, when a thread's id was given */
	snprintf(run->label, sizeof(run->label), "pid %d (%s)", run->target.pid,
		 run->target.comm);
	if (ops->check) {
		code = ops->check(c, run);
		if (code != RUN_GO_ON)
			return code;
	}
	if (ops->attach) {
		code = preflight_not_traced(&run->target, ops->attach);
		if (code)
			return code;
	}
out_prepare:
	r = output_prepare(&run->out, o->output, !o->debug && o->format == VIEW_PPROF, why,
			   sizeof(why));
	if (r < 0) {
		report_error_text(NULL, why);
		return EXIT_OUTPUT;
	}
	return RUN_GO_ON;
}

struct progress {
	const struct run_window_opts *o;
	char total[32];
	char label[160];
};

static void tick(void *arg, uint64_t elapsed_ns)
{
	struct progress *p = arg;
	char done[32], what[96];

	format_duration(elapsed_ns / 1000000000ULL * 1000000000ULL, done, sizeof(done));
	p->o->what(p->o->arg, what, sizeof(what));
	report_progress("%s %s: %s / %s, %s", p->o->verb, p->label, done, p->total, what);
}

int run_window(struct profiler **ps, size_t n, const struct run_window_opts *o,
	       bool *ret_exited, char *err, size_t errlen)
{
	struct progress pr = { .o = o };
	struct profilers_run_opts ro = {
		.duration_ns = o->duration_ns,
		.cancel = interrupt_cancel,
		.tick = o->verb ? tick : NULL,
		.tick_arg = &pr,
		.errors = o->errors,
	};
	int r;

	format_duration(o->duration_ns, pr.total, sizeof(pr.total));
	if (o->label)
		snprintf(pr.label, sizeof(pr.label), "%s", o->label);
	else
		snprintf(pr.label, sizeof(pr.label), "pid %d (%s)", o->target->pid,
			 o->target->comm);
	if (o->verb)
		report_log("%s %s for %s", o->verb, pr.label, pr.total);
	r = profilers_window(ps, n, &ro, ret_exited, err, errlen);
	report_progress_done();
	/* The window's length is the profile's to say (the agent's load and
	 * the first snapshot are no part of it). */
	if (o->verb)
		report_log("%s %s: the window is over", o->verb, pr.label);
	return r;
}

void run_say_ended(pid_t pid, bool exited)
{
	if (exited && !pid)
		report_warning("every process of the set exited during the profile; writing what "
			       "was collected");
	else if (exited)
		report_warning("pid %d exited during the profile; writing what was collected", pid);
	else if (interrupt_requested())
		report_note("interrupted; writing what was collected");
}

struct what {
	const struct run_ops *ops;
	const void *c;
	const struct run *run;
};

/* The end of a command's progress line: its own, or its count. */
static void what(const void *arg, char *buf, size_t size)
{
	const struct what *w = arg;
	unsigned long long n;

	if (w->ops->progress && !w->run->set) {
		w->ops->progress(w->c, w->run, buf, size);
		return;
	}
	n = profiler_count(w->run->p);
	snprintf(buf, size, "%llu %s", n, plural(n, w->ops->counts[0], w->ops->counts[1]));
}

/* The window, and how it ended said. 0 or -errno (said by the caller). */
static int window(const struct run_ops *ops, const void *c, struct run *run)
{
	struct what w = { .ops = ops, .c = c, .run = run };
	struct run_window_opts o = { .target = &run->target, .label = run->label,
				     .duration_ns = run->duration_ns, .verb = ops->verb,
				     .what = what, .arg = &w };
	char err[1024] = "";
	bool exited;
	int r;

	r = run_window(&run->p, 1, &o, &exited, err, sizeof(err));
	profiler_facts(run->p, &run->facts);
	if (r < 0)
		return r;
	if (ops->ended && !run->set)
		ops->ended(c, run);
	else
		run_say_ended(run->set ? 0 : run->target.pid, run->facts.target_exited || exited);
	return 0;
}

/* The profile, when the output or --top and --json need it. */
static int build(const struct run *run, struct profile **ret)
{
	const struct common_opts *o = run->opts;

	*ret = NULL;
	if (o->debug && !o->top && !o->json)
		return 0;
	return profiler_finish(run->p, ret);
}

static int write_output(const struct run_ops *ops, struct run *run, const struct profile *profile)
{
	const struct common_opts *o = run->opts;
	char title[256], *text = NULL;
	size_t len = 0;
	int r;

	if (!o->debug) {
		output_title(ops->command, o->pid, profile, title, sizeof(title));
		return output_commit_view(&run->out, profile, o->format, (size_t)o->top, title);
	}
	r = run_render_text(run, o->debug, &text, &len);
	if (r == 0)
		r = output_commit_bytes(&run->out, text, len);
	else
		output_abort(&run->out);
	free(text);
	return r;
}

/* @code is what the run leaves with once written whole or in part. */
static int epilogue(const struct run_ops *ops, const struct run *run,
		    const struct profile *profile, int code)
{
	const struct common_opts *o = run->opts;
	pid_t *pids = NULL;
	size_t n = run->set ? profiler_set_members(run->p, NULL, 0) : 0;
	struct profiler_member *m = n ? calloc(n, sizeof(*m)) : NULL;
	struct epilogue_facts f = {
		.command = ops->command,
		.pid = o->pid,
		.output = o->output,
		.duration_ns = run->facts.window_ns,
		.samples = run->facts.count,
		.lost = run->facts.lost,
		.pause_ns = run->facts.pause_ns,
		.profile = profile,
		.exit_code = code,
	};
	int r;

	/* A set's processes, those profiled (the comments name the others). */
	if (m && (pids = calloc(n, sizeof(*pids)))) {
		profiler_set_members(run->p, m, n);
		for (size_t i = 0; i < n; i++)
			if (m[i].p && !m[i].error)
				pids[f.npids++] = m[i].pid;
		f.pids = pids;
	}
	r = epilogue_report(o, &f);
	free(pids);
	free(m);
	return r < 0 ? EXIT_FAIL : code;
}

int run_profile(const struct run_ops *ops, void *c, struct run *run)
{
	struct profile *profile = NULL;
	unsigned left_out = 0;
	int r, code;

	/* A second signal must not kill us while the target is touched. */
	interrupt_install();
	code = run->set ? run_open_set(ops, c, run) : ops->open(c, run);
	if (code)
		goto out_abort;
	r = window(ops, c, run);
	interrupt_target_released(run->target.pid);
	if (r < 0) {
		report_error("profiling pid %d failed: %s", run->target.pid, strerror(-r));
		code = EXIT_FAIL;
		goto out_abort;
	}
	r = build(run, &profile);
	if (r < 0) {
		report_error("cannot build the profile: %s", strerror(-r));
		code = EXIT_FAIL;
		goto out_abort;
	}
	r = write_output(ops, run, profile);
	if (r < 0) {
		code = output_report_failure(&run->out, r);
		goto out_abort;
	}
	run->written = true;
	if (run->set)
		left_out = run_summary_set(ops, run);
	else
		ops->summary(c, run);
	if (profile)
		report_unsymbolized(profile);
	else if (profiler_symbolizer(run->p))
		report_unsymbolized_program(profiler_symbolizer(run->p));
	/* What record does where a kind is missing: written, not whole. */
	code = epilogue(ops, run, profile, left_out ? EXIT_PARTIAL : EXIT_OK);
	goto out_free;

out_abort:
	interrupt_target_released(run->target.pid);
	output_abort(&run->out);
out_free:
	profile_free(profile);
	return code;
}

void run_release(struct run *run)
{
	profiler_free(run->p);
	run->p = NULL;
	free(run->set);
	run->set = NULL;
	run_set_free(run->set_spec);
	run->set_spec = NULL;
}

int run_command(const struct run_ops *ops, void *c, struct common_opts *o,
		uint64_t duration_ns, int argc, char **argv)
{
	struct run run;
	int code = run_prepare(ops, c, &run, o, duration_ns, argc, argv);

	if (code != RUN_GO_ON) {
		run_release(&run);
		return code;
	}
	code = run_profile(ops, c, &run);
	run_release(&run);
	return code;
}
