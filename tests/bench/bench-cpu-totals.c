/*
 * bench-cpu-totals: a profile's CPU totals against the target's own clocks,
 * for scripts/bench-cpu-totals (issue 34). Printed, never judged.
 *
 *   bench-cpu-totals cprof PROFILE TRUTHFILE
 *   bench-cpu-totals perf SCRIPT TRUTHFILE
 *
 * TRUTHFILE is what busy K SECONDS TRUTHFILE wrote (tests/targets/truth.h):
 * its process CPU clock and each busy thread's CLOCK_THREAD_CPUTIME_ID,
 * read by the target itself every ~1 ms with CLOCK_REALTIME stamps; nothing
 * cprof reads for its weights.
 *
 * cprof: PROFILE is a `cprof cpu` profile, judged as test-cpu.c judges one
 * (judge_totals): over the profile's window [time_nanos, time_nanos +
 * duration_nanos], the process's total (cpu/nanoseconds, less the
 * unlabeled "[unsampled: short-lived threads]" frame; a live thread no
 * sample caught is counted, its account under its own thread_id) against
 * the process clock, and each reported thread's (label thread_id) against
 * its own clock.
 *
 * perf: SCRIPT is `perf script -F tid,time,period --ns` of a `perf record
 * -e cpu-clock -k realtime` (stamps in CLOCK_REALTIME, as the truth's).
 * The window is perf's own: from its first sample to its last. A sample's
 * period is the CPU time since that thread's sample before it, so the
 * samples after the first and up to the last are summed: per tid, and for
 * the process all of them.
 *
 * Prints one line: PROCESS WORST KNOWN SAMPLES WINDOW_S UNSAMPLED_S WHOLE,
 * where PROCESS is the process's total over its clock, WORST the reported
 * thread whose ratio is furthest from 1, KNOWN how well the truth is known
 * at the window's ends (the widest th_truth_slack over the clock, process
 * or thread), SAMPLES the samples summed, UNSAMPLED_S cprof's unlabeled
 * "[unsampled]" frame, and WHOLE the process's total with it over its clock
 * (perf: 0 and PROCESS). Exit 1 with the cause on stderr when a file cannot be
 * read or the truth does not cover the window; 64 on bad usage.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../targets/truth.h"
#include "pprof/pprof.h"
#include "profile/profile.h"
#include "testhelp.h"
#include "util/util.h"

#define PROG "bench-cpu-totals"

/* What a profiler gave the process and each reported thread over a window. */
struct totals {
	int64_t t0, t1;	     /* the window, realtime ns */
	int64_t process;     /* ns */
	int64_t unsampled;   /* ns of threads that ended unsampled, not in process */
	int64_t samples;
	int nthreads;
	pid_t tids[TRUTH_MAX_THREADS];
	int64_t thread[TRUTH_MAX_THREADS]; /* ns */
};

static int cprof_totals(const char *path, struct totals *ret)
{
	struct profile *p = NULL;
	uint8_t *buf;
	size_t len;
	int r = th_read_file(path, &buf, &len), vi, ni;

	if (r < 0) {
		fprintf(stderr, PROG ": cannot read %s: %s\n", path, strerror(-r));
		return r;
	}
	r = pprof_decode(buf, len, &p);
	free(buf);
	if (r < 0) {
		fprintf(stderr, PROG ": %s: not a pprof profile: %s\n", path, strerror(-r));
		return r;
	}
	vi = th_sample_type(p, "cpu", "nanoseconds");
	ni = th_sample_type(p, "samples", "count");
	if (vi < 0 || ni < 0 || p->duration_nanos <= 0) {
		fprintf(stderr, PROG ": %s: no cpu/nanoseconds, samples/count or window\n", path);
		profile_free(p);
		return -EINVAL;
	}
	ret->t0 = p->time_nanos;
	ret->t1 = p->time_nanos + p->duration_nanos;
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		const struct profile_label *l = th_label(s, "thread_id");
		int64_t v = s->values[vi];

		ret->samples += s->values[ni];
		/* As test-cpu judges: the threads that ended unsampled apart. */
		if (!strncmp(th_leaf_name(p, s), "[unsampled", 10) &&
		    (!l || l->str || l->num <= 0)) {
			ret->unsampled += v;
			continue;
		}
		ret->process += v;
		for (int k = 0; l && !l->str && k < ret->nthreads; k++)
			if (l->num == ret->tids[k])
				ret->thread[k] += v;
	}
	profile_free(p);
	return 0;
}

/* "SEC.NSEC" (nine digits, perf script --ns) at *@s into ns; 0 or -1. */
static int parse_time(const char **s, int64_t *ret)
{
	char *end;
	long long sec = strtoll(*s, &end, 10);
	int64_t ns = 0;
	int digits = 0;

	if (end == *s || *end != '.')
		return -1;
	for (end++; *end >= '0' && *end <= '9'; end++, digits++)
		ns = ns * 10 + (*end - '0');
	if (digits != 9)
		return -1;
	*ret = (int64_t)sec * 1000000000LL + ns;
	*s = end;
	return 0;
}

/* One sample of perf script: tid, time, period. */
struct perf_sample {
	pid_t tid;
	int64_t time, period;
};

static int perf_totals(const char *path, struct totals *ret)
{
	FILE *f = fopen(path, "re");
	char line[512];
	struct perf_sample *v = NULL;
	size_t n = 0, alloc = 0, bad = 0;
	int r;

	if (!f) {
		r = -errno;
		fprintf(stderr, PROG ": cannot open %s: %s\n", path, strerror(-r));
		return r;
	}
	/* "  TID SEC.NSEC:   PERIOD" */
	while (fgets(line, sizeof(line), f)) {
		struct perf_sample s;
		const char *c = line;
		char *end;

		s.tid = (pid_t)strtol(c, &end, 10);
		c = end;
		while (*c == ' ')
			c++;
		if (end == line || parse_time(&c, &s.time) < 0 || *c++ != ':') {
			bad++;
			continue;
		}
		s.period = strtoll(c, &end, 10);
		if (end == c || s.period <= 0) {
			bad++;
			continue;
		}
		if (GROW(v, n + 1, alloc) < 0) {
			fprintf(stderr, PROG ": %s: out of memory\n", path);
			free(v);
			fclose(f);
			return -ENOMEM;
		}
		v[n++] = s;
	}
	fclose(f);
	if (bad)
		fprintf(stderr, PROG ": %s: %zu lines not \"TID SEC.NSEC: PERIOD\", left out\n",
			path, bad);
	if (n < 2) {
		fprintf(stderr, PROG ": %s: %zu samples, too few for a window\n", path, n);
		free(v);
		return -EINVAL;
	}
	ret->t0 = ret->t1 = v[0].time;
	for (size_t i = 0; i < n; i++) {
		if (v[i].time < ret->t0)
			ret->t0 = v[i].time;
		if (v[i].time > ret->t1)
			ret->t1 = v[i].time;
	}
	/* A sample stands for the CPU time before it: the first's lies before
	 * the window, the last's inside it. */
	for (size_t i = 0; i < n; i++) {
		if (v[i].time <= ret->t0)
			continue;
		ret->samples++;
		ret->process += v[i].period;
		for (int k = 0; k < ret->nthreads; k++)
			if (v[i].tid == ret->tids[k])
				ret->thread[k] += v[i].period;
	}
	free(v);
	return 0;
}

static double share(int64_t part, int64_t whole)
{
	return whole > 0 ? (double)part / (double)whole : 0;
}

int main(int argc, char **argv)
{
	struct totals tot = { 0 };
	char why[320];
	struct th_truth *t;
	int64_t truth, slack;
	double worst = NAN, known;
	int r;

	if (argc != 4 || (strcmp(argv[1], "cprof") && strcmp(argv[1], "perf"))) {
		fprintf(stderr, "usage: " PROG " cprof|perf PROFILE|SCRIPT TRUTHFILE\n");
		return 64;
	}
	t = th_truth_load(argv[3], why, sizeof(why));
	if (!t) {
		fprintf(stderr, PROG ": %s\n", why);
		return 1;
	}
	tot.nthreads = th_truth_nthreads(t);
	for (int k = 0; k < tot.nthreads; k++)
		tot.tids[k] = th_truth_tid(t, k);
	r = !strcmp(argv[1], "cprof") ? cprof_totals(argv[2], &tot) : perf_totals(argv[2], &tot);
	if (r < 0)
		goto out_free;
	r = -1;
	truth = th_truth_between(t, TH_TRUTH_PROCESS, tot.t0, tot.t1);
	slack = th_truth_slack(t, TH_TRUTH_PROCESS, tot.t0, tot.t1);
	if (truth <= 0 || slack < 0) {
		fprintf(stderr, PROG ": the truth does not cover the window\n");
		goto out_free;
	}
	known = share(slack, truth);
	for (int k = 0; k < tot.nthreads; k++) {
		int64_t tt = th_truth_between(t, k, tot.t0, tot.t1);
		int64_t ts = th_truth_slack(t, k, tot.t0, tot.t1);
		double ratio = share(tot.thread[k], tt);

		if (tt <= 0 || ts < 0) {
			fprintf(stderr, PROG ": the truth of thread %d does not cover the window\n",
				(int)tot.tids[k]);
			goto out_free;
		}
		if (isnan(worst) || fabs(ratio - 1) > fabs(worst - 1))
			worst = ratio;
		known = fmax(known, share(ts, tt));
	}
	printf("%.4f %.4f %.4f %lld %.3f %.3f %.4f\n", share(tot.process, truth), worst, known,
	       (long long)tot.samples, (double)(tot.t1 - tot.t0) / 1e9,
	       (double)tot.unsampled / 1e9, share(tot.process + tot.unsampled, truth));
	r = 0;
out_free:
	th_truth_free(t);
	return r < 0 ? 1 : 0;
}
