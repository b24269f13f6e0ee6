#include "sampling/sampling.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kernel/kernel.h"
#include "symbolize/symbolize.h"
#include "unwind/unwind.h"
#include "util/util.h"

int sampling_init(struct sampling *s, const struct sampling_opts *o, char *err, size_t errlen)
{
	int r;

	memset(s, 0, sizeof(*s));
	s->pid = o->pid;
	s->rng = now_monotonic_ns() ^ (uint64_t)o->pid;
	agent_tasks_init(&s->agent, o->pid);
	r = profile_new(&s->profile, o->types, o->ntypes);
	if (r == 0)
		r = profile_begin_process(s->profile, o->pid, o->type, o->unit,
					  (int64_t)o->period_ns, o->command_line, &s->process_name);
	if (r < 0)
		return r;
	return symbolizer_share_unwinding(&s->sym, &s->unw, o->sym, o->pid, err, errlen);
}

int sampling_user_stack(struct sampling *s, const struct perf_sample *ps, uint64_t *pcs, int max,
			bool *ret_by_fp)
{
	int n;

	*ret_by_fp = false;
	if (!ps->has_user)
		return 0;
	n = unwinder_unwind(s->unw, &ps->user, pcs, max);
	if (n <= 0) {
		/* No CFI for the PC: the sample still counts, one frame. */
		pcs[0] = ps->user.regs[UNWIND_REG_RIP];
		return 1;
	}
	*ret_by_fp = n > 1 && unwinder_by_frame_pointers(s->unw);
	return n;
}

/*
 * Kernel frames are named first, so that the user-space symbolizer leaves
 * them alone and puts the program's mapping first (pprof's "File:"); their
 * own mapping comes after.
 */
int sampling_symbolize(struct sampling *s, const struct kallsyms *kernel)
{
	uint64_t kernel_mapping;
	int r;

	symbolizer_refresh(s->sym);
	if (kernel) {
		r = kallsyms_fill_profile(kernel, s->profile, 0);
		if (r < 0)
			return r;
	}
	r = symbolizer_fill_profile(s->sym, s->profile);
	if (r < 0 || !kernel)
		return r;
	r = kallsyms_add_mapping(s->profile, &kernel_mapping);
	if (r < 0 || !kernel_mapping)
		return r;
	return kallsyms_fill_profile(kernel, s->profile, kernel_mapping);
}

void sampling_hand_out(struct sampling *s, struct profile **ret)
{
	*ret = s->profile;
	s->profile = NULL;
}

void sampling_release(struct sampling *s)
{
	perf_session_free(s->perf);
	s->perf = NULL;
	symbolizer_unref(s->sym);
	s->sym = NULL;
	profile_free(s->profile);
	s->profile = NULL;
	agent_tasks_release(&s->agent);
}
