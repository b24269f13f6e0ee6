#include "collector.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "epilogue.h"
#include "interrupt.h"
#include "preflight.h"
#include "report.h"

int collector_render_text(const struct collector_ops *ops, const void *c, int debug, char **ret,
			  size_t *ret_len)
{
	FILE *f = open_memstream(ret, ret_len);
	int r;

	if (!f)
		return -errno;
	r = ops->write_text(c, debug, f);
	if (fclose(f) != 0 && r == 0)
		r = -EIO;
	return r;
}

/* The agent loaded, its window, and what it left said. 0, an exit code, or
 * -errno (reported by the caller). */
static int agent_collect(const struct collector_ops *ops, void *c, struct collection *run)
{
	struct channel_handlers h = { 0 };
	int r, code;

	code = agent_load(&run->al, &run->target, ops->events, run->rate);
	if (code)
		return code;
	r = ops->start(c, run, &h);
	if (r < 0)
		return r;
	if (ops->window)
		r = ops->window(c, run, &h);
	else
		r = agent_window(run->al.ch, &run->target, run->duration_ns, &h,
				 ops->records, &run->w);
	if (r < 0)
		return r;
	agent_window_report(&run->w, &run->target);
	run->pause_ns = (int64_t)run->al.rep.stopped_ns;
	return 0;
}

/* The profile, when the output or --top and --json need it. */
static int build(const struct collector_ops *ops, void *c, const struct collection *run,
		 int argc, char **argv, struct profile **ret)
{
	const struct common_opts *o = run->opts;
	char cmdline[1024];
	int r;

	if (o->debug && !o->top && !o->json)
		return 0;
	command_line_join(argc, argv, cmdline, sizeof(cmdline));
	r = ops->build(c, run, cmdline, ret);
	if (r == 0 && ops->events)
		r = agent_note_lost(&run->w.counters, *ret);
	return r;
}

static int write_output(const struct collector_ops *ops, const void *c, struct collection *run,
			const struct profile *profile)
{
	const struct common_opts *o = run->opts;
	char title[256], *text = NULL;
	size_t len = 0;
	int r;

	if (!o->debug) {
		output_title(ops->command, o->pid, profile, title, sizeof(title));
		return output_commit_view(&run->out, profile, o->format, (size_t)o->top, title);
	}
	r = collector_render_text(ops, c, o->debug, &text, &len);
	if (r == 0)
		r = output_commit_bytes(&run->out, text, len);
	else
		output_abort(&run->out);
	free(text);
	return r;
}

static int epilogue(const struct collector_ops *ops, const void *c,
		    const struct collection *run, const struct profile *profile)
{
	const struct common_opts *o = run->opts;
	struct epilogue_facts f = {
		.command = ops->command,
		.pid = o->pid,
		.output = o->output,
		.duration_ns = run->w.window_ns,
		.samples = ops->count(c),
		.lost = run->w.counters.lost,
		.pause_ns = run->pause_ns,
		.profile = profile,
	};

	return epilogue_report(o, &f) < 0 ? EXIT_FAIL : EXIT_OK;
}

int collector_run(const struct collector_ops *ops, void *c, struct common_opts *o,
		  uint64_t duration_ns, uint64_t rate, int argc, char **argv)
{
	struct collection run = { .opts = o, .duration_ns = duration_ns, .rate = rate,
				  .al = { .fd = -1 }, .pause_ns = -1 };
	struct profile *profile = NULL;
	char why[1024];
	int r, code;

	report_set_quiet(o->quiet);
	code = preflight_target(o->pid, &run.target);
	if (code)
		return code;
	o->pid = run.target.pid; /* the process, when a thread's id was given */
	if (ops->check) {
		code = ops->check(c, &run);
		if (code != COLLECTOR_GO_ON)
			return code;
	}
	code = preflight_not_traced(&run.target, ops->attach);
	if (code)
		return code;
	r = output_prepare(&run.out, o->output, !o->debug && o->format == VIEW_PPROF, why,
			   sizeof(why));
	if (r < 0) {
		report_error_text(NULL, why);
		return EXIT_OUTPUT;
	}
	if (ops->prepare) {
		code = ops->prepare(c, &run);
		if (code != COLLECTOR_GO_ON) {
			output_abort(&run.out);
			return code;
		}
	}
	/* SIGINT/SIGTERM must not kill us while the target is touched. */
	interrupt_install();
	r = ops->events ? agent_collect(ops, c, &run) : ops->take(c, &run);
	if (r > 0) {
		code = r;
		goto out_abort;
	}
	if (r < 0)
		goto out_fail;
	r = build(ops, c, &run, argc, argv, &profile);
	if (r == 0)
		r = write_output(ops, c, &run, profile);
	else
		output_abort(&run.out);
	if (r < 0) {
		code = output_report_failure(&run.out, r);
		goto out_abort;
	}
	run.written = true;
	ops->summary(c, &run);
	if (ops->events)
		report_unsymbolized_program(run.al.sym);
	else if (profile)
		report_unsymbolized(profile);
	code = epilogue(ops, c, &run, profile);
	goto out_free;
out_fail:
	report_error("profiling pid %d failed: %s", run.target.pid, strerror(-r));
	code = EXIT_FAIL;
out_abort:
	output_abort(&run.out);
out_free:
	if (ops->finish)
		code = ops->finish(c, &run, code, argc, argv);
	profile_free(profile);
	agent_session_release(&run.al);
	return code;
}
