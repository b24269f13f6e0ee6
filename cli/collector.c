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

int collector_render_text(const struct collector_ops *ops, const void *c,
			  const struct collection *run, int debug, char **ret, size_t *ret_len)
{
	FILE *f = open_memstream(ret, ret_len);
	int r;

	if (!f)
		return -errno;
	r = ops->events ? agent_profiler_write_text(run->ap, f) : ops->write_text(c, debug, f);
	if (fclose(f) != 0 && r == 0)
		r = -EIO;
	return r;
}

/* The agent's profiler opened, its window, and what it left said. 0, an
 * exit code, or -errno (reported by the caller). */
static int agent_collect(const struct collector_ops *ops, void *c, struct collection *run)
{
	struct agent_profiler_opts ao = {
		.pid = run->target.pid,
		.events = ops->events,
		.rate = run->rate,
		.duration_ns = run->duration_ns,
		/* Without rules every record carries its stack copy (cprof(1)). */
		.copy_stacks = getenv("CPROF_COPY_STACKS") != NULL,
		.progress = window_progress,
		.progress_arg = &run->progress,
		.command_line = run->command_line,
	};
	int r, code;

	if (ops->configure)
		ops->configure(c, &ao);
	window_progress_init(&run->progress, &run->target, ops->records, run->duration_ns);
	code = agent_open(&run->ap, &run->target, &ao);
	if (code)
		return code;
	do
		r = agent_profiler_poll(run->ap, 1000);
	while (r == 0);
	report_progress_done();
	if (r > 0)
		r = agent_profiler_stop(run->ap);
	run->w = *agent_profiler_window(run->ap);
	if (r < 0)
		return r;
	agent_window_report(&run->w, &run->target);
	run->pause_ns = (int64_t)agent_profiler_session(run->ap)->rep.stopped_ns;
	return 0;
}

/* The profile, when the output or --top and --json need it. */
static int build(const struct collector_ops *ops, void *c, const struct collection *run,
		 struct profile **ret)
{
	const struct common_opts *o = run->opts;

	if (o->debug && !o->top && !o->json)
		return 0;
	if (ops->events)
		return agent_profiler_finish(run->ap, ret);
	return ops->build(c, run, run->command_line, ret);
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
	r = collector_render_text(ops, c, run, o->debug, &text, &len);
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
		.samples = ops->events ? agent_profiler_count(run->ap) : ops->count(c),
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
				  .pause_ns = -1 };
	struct profile *profile = NULL;
	char why[1024];
	int r, code;

	report_set_quiet(o->quiet);
	command_line_join(argc, argv, run.command_line, sizeof(run.command_line));
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
	r = build(ops, c, &run, &profile);
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
		report_unsymbolized_program(agent_profiler_session(run.ap)->sym);
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
	agent_profiler_free(run.ap);
	return code;
}
