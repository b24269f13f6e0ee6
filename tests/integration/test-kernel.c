/*
 * cprof cpu --kernel: kernel frames, named from /proc/kallsyms, on top of
 * the user stacks, in their own "[kernel.kallsyms]" mapping; none without.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernel/kernel.h"
#include "target/target.h"
#include "testhelp.h"

TestSuite(kernel, .init = th_init, .fini = th_cleanup);

static void require_kernel_frames(void)
{
	struct kallsyms ks;
	int paranoid = 2, r;

	th_require_perf(false);
	if (geteuid() != 0 &&
	    (proc_sysctl_int("kernel/perf_event_paranoid", &paranoid) < 0 || paranoid > 1))
		TH_SKIP_MISSING("kernel samples need root or kernel.perf_event_paranoid <= 1 (it is %d)",
			     paranoid);
	r = kallsyms_load(&ks, "/proc/kallsyms");
	if (r < 0)
		cr_skip_test("/proc/kallsyms gives no addresses here (%s): kptr_restrict?",
			     strerror(-r));
	kallsyms_release(&ks);
}

/* utime and stime of @pid (clock ticks), /proc/PID/stat's 14th and 15th. */
static void cpu_ticks(pid_t pid, unsigned long long *utime, unsigned long long *stime)
{
	char path[64], buf[1024];
	const char *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	cr_assert_eq(proc_read(path, buf, sizeof(buf), NULL), 0);
	p = strrchr(buf, ')');
	cr_assert_not_null(p);
	cr_assert_eq(sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", utime,
			    stime), 2);
}

/* The target's own share of time in the kernel over the last profile's
 * window: what the kernel's accounting says, how much a syscall costs on
 * this machine (mitigations, the hypervisor) included. */
static double kernel_share_truth;

static struct profile *profile_syscalls(bool kernel, const char **ret_path)
{
	const char *out = th_tmp_path(kernel ? "kernel.pb.gz" : "user.pb.gz");
	pid_t pid = TH_SPAWN("syscalls", "10");
	unsigned long long u0, s0, u1, s1;
	struct th_run r;

	/* 1000 Hz: enough samples even when a busy machine leaves the target a
	 * tenth of a CPU (at 100 Hz a CI run under load once got 2). */
	cpu_ticks(pid, &u0, &s0);
	if (kernel)
		TH_CPROF(&r, 60000, "cpu", "-p", th_pid_str(pid), "-d", "1s", "-F", "1000",
			 "--kernel", "-o", out);
	else
		TH_CPROF(&r, 60000, "cpu", "-p", th_pid_str(pid), "-d", "1s", "-F", "1000", "-o",
			 out);
	cpu_ticks(pid, &u1, &s1);
	kernel_share_truth = u1 + s1 > u0 + s0 ? (double)(s1 - s0) / (double)(u1 + s1 - u0 - s0) : 0;
	if (r.exit_code != 0)
		th_run_log(&r, "cprof cpu");
	cr_assert_eq(r.exit_code, 0);
	th_run_release(&r);
	th_kill(pid);
	*ret_path = out;
	return th_load_profile(out);
}

static bool is_kernel_location(const struct profile *p, uint64_t id)
{
	const struct profile_location *l = th_location(p, id);
	const struct profile_mapping *m = l->mapping_id ? th_mapping(p, l->mapping_id) : NULL;

	return m && !strcmp(m->file, "[kernel.kallsyms]");
}

Test(kernel, frames_on_top_of_user_stacks, .timeout = 120)
{
	const struct profile_mapping *km = NULL;
	int64_t total = 0, with_kernel = 0, syscall_names = 0;
	const char *path;
	struct profile *p;

	require_kernel_frames();
	p = profile_syscalls(true, &path);
	for (size_t i = 0; i < p->nmappings; i++)
		if (!strcmp(p->mappings[i].file, "[kernel.kallsyms]"))
			km = &p->mappings[i];
	cr_assert_not_null(km, "no [kernel.kallsyms] mapping");
	cr_expect(km->has_functions, "pprof would try to symbolize the kernel mapping");
	cr_expect_neq(km->id, 1, "the program's mapping must stay first");
	cr_expect(kernel_address(km->start) && km->limit > km->start);
	if (access("/sys/kernel/notes", R_OK) == 0)
		cr_expect_gt(strlen(km->build_id), 0, "no build id of the running kernel");

	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		size_t k = 0;
		bool named = false, loop_below = false;

		total += s->values[0];
		while (k < s->nlocations && is_kernel_location(p, s->location_ids[k])) {
			const char *name = th_function(p, th_location(p, s->location_ids[k])->lines[0]
								  .function_id)->name;

			named |= strstr(name, "sys_") || strstr(name, "entry_SYSCALL");
			k++;
		}
		/* Below the kernel part: only user frames, the loop among them. */
		for (size_t j = k; j < s->nlocations; j++) {
			cr_expect(!is_kernel_location(p, s->location_ids[j]),
				  "a kernel frame below a user frame");
			loop_below |= th_location_has(p, s->location_ids[j], "syscall_loop");
		}
		if (!k)
			continue;
		with_kernel += s->values[0];
		syscall_names += named ? s->values[0] : 0;
		cr_expect(loop_below, "a kernel stack without syscall_loop under it");
	}
	cr_log_info("%lld of %lld samples with kernel frames, %lld naming the syscall path",
		    (long long)with_kernel, (long long)total, (long long)syscall_names);
	cr_assert_gt(total, 20, "too few samples: %lld", (long long)total);
	/* As many samples in the kernel as the kernel's own accounting of
	 * the target's time says (its tick-based split: within 15 points). */
	cr_log_info("measured: %.1f%% of the samples in the kernel, %.1f%% of the target's time "
		    "by its stime", 100.0 * (double)with_kernel / (double)total,
		    100.0 * kernel_share_truth);
	cr_expect_lt(fabs((double)with_kernel / (double)total - kernel_share_truth), 0.15,
		     "%lld of %lld samples in the kernel, against %.1f%% by the target's stime",
		     (long long)with_kernel, (long long)total, 100.0 * kernel_share_truth);
	cr_expect_gt(syscall_names * 2, with_kernel);
	th_assert_pprof_ok(path);
	profile_free(p);
}

Test(kernel, none_without_the_option, .timeout = 120)
{
	const char *path;
	struct profile *p;

	th_require_perf(false);
	p = profile_syscalls(false, &path);
	cr_assert_gt(p->nsamples, 0);
	for (size_t i = 0; i < p->nmappings; i++)
		cr_expect_str_neq(p->mappings[i].file, "[kernel.kallsyms]");
	for (size_t i = 0; i < p->nlocations; i++)
		cr_expect(!kernel_address(p->locations[i].address), "kernel address %#llx",
			  (unsigned long long)p->locations[i].address);
	profile_free(p);
}
