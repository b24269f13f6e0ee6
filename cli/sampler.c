#include "sampler.h"

#include <errno.h>
#include <string.h>

#include "epilogue.h"
#include "interrupt.h"
#include "report.h"
#include "util/parse.h"
#include "util/util.h"

int sampler_setup_exit_code(int err)
{
	if (err == -EACCES || err == -EPERM)
		return EXIT_PERMISSION;
	return err == -ESRCH ? EXIT_TARGET : EXIT_FAIL;
}

static int window(const struct sampler_ops *ops, void *p, uint64_t duration_ns,
		  const struct target *t)
{
	uint64_t start = now_monotonic_ns(), next_progress = start;
	char total[32], done[32], what[64];

	format_duration(duration_ns, total, sizeof(total));
	while (!interrupt_requested()) {
		uint64_t now = now_monotonic_ns(), left;
		int r;

		if (now - start >= duration_ns)
			break;
		left = duration_ns - (now - start);
		r = ops->poll(p, (int)MIN(left / 1000000 + 1, 100ULL));
		if (r < 0)
			return r;
		if (now >= next_progress) {
			format_duration((now - start) / 1000000000ULL * 1000000000ULL, done,
					sizeof(done));
			ops->progress(p, what, sizeof(what));
			report_progress("sampling pid %d (%s): %s / %s, %s", t->pid, t->comm, done,
					total, what);
			next_progress = now + 1000000000ULL;
		}
	}
	return 0;
}

static int epilogue(const struct sampler_ops *ops, const void *p, const struct common_opts *o,
		    const struct profile *profile)
{
	struct sampler_facts facts;
	struct epilogue_facts f;

	ops->facts(p, &facts);
	f = (struct epilogue_facts){
		.command = ops->command,
		.pid = o->pid,
		.output = o->output,
		.duration_ns = facts.window_ns,
		.samples = facts.samples,
		.lost = facts.lost,
		.pause_ns = -1,
		.profile = profile,
	};
	return epilogue_report(o, &f) < 0 ? EXIT_FAIL : EXIT_OK;
}

int sampler_run(const struct sampler_ops *ops, void *p, const void *args,
		const struct common_opts *o, uint64_t duration_ns, const struct target *t,
		struct output *out)
{
	struct profile *profile = NULL;
	struct sampler_facts facts;
	char title[256];
	int r, code;

	r = ops->start(p);
	if (r < 0) {
		report_error("cannot start sampling pid %d: %s", o->pid, strerror(-r));
		code = r == -ESRCH ? EXIT_TARGET : EXIT_FAIL;
		goto out_abort;
	}
	r = window(ops, p, duration_ns, t);
	if (r < 0 && r != -ESRCH) {
		report_error("sampling pid %d failed: %s", o->pid, strerror(-r));
		code = EXIT_FAIL;
		goto out_abort;
	}
	ops->stop(p);
	report_progress_done();
	ops->facts(p, &facts);
	if (facts.target_exited)
		report_warning("pid %d exited during the profile; writing what was collected",
			       o->pid);
	else if (interrupt_requested())
		report_note("interrupted; writing what was collected");
	r = ops->finish(p, &profile);
	if (r < 0) {
		report_error("cannot build the profile: %s", strerror(-r));
		code = EXIT_FAIL;
		goto out_abort;
	}
	output_title(ops->command, o->pid, profile, title, sizeof(title));
	r = output_commit_view(out, profile, o->format, (size_t)o->top, title);
	if (r < 0) {
		code = output_report_failure(out, r);
		goto out_free;
	}
	ops->summary(p, args, out);
	report_unsymbolized(profile);
	code = epilogue(ops, p, o, profile);
	goto out_free;

out_abort:
	output_abort(out);
out_free:
	profile_free(profile);
	return code;
}
