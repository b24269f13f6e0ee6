/*
 * A service as a set of processes: PIDs given in a list, each with its
 * descendants, or the processes of a cgroup and of the cgroups below it.
 * Read from /proc and the cgroup filesystem afresh at each look, so that a
 * process born since joins; reading never touches a process.
 */
#ifndef CPROF_TARGET_SET_H
#define CPROF_TARGET_SET_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct target_set_spec {
	const pid_t *pids;  /* given; their descendants too with @children */
	size_t npids;
	bool children;
	const char *cgroup; /* a cgroup's directory (target_cgroup_dir()); NULL: none */
};

/*
 * @arg as PIDs separated by commas or white space (`-p "$(pidof nginx)"`,
 * `-p 505,506`), in their order, each once, into *@ret (malloc'd). 0, or
 * -EINVAL (one is not a number, or none is given) and -ERANGE (out of
 * 1..4194304) with @why naming it.
 */
int target_pids_parse(const char *arg, pid_t **ret, size_t *ret_n, char *why, size_t whylen);

/*
 * The directory of cgroup @path: @path itself when it is one (it holds
 * cgroup.procs), else @path under the cgroup2 mount, then under each v1
 * hierarchy's mount, as /proc/self/mountinfo lists them (so that the path
 * /proc/PID/cgroup shows, or systemd's ControlGroup, finds it). -ENOENT
 * when none holds it, -ENAMETOOLONG.
 */
int target_cgroup_dir(const char *path, char *buf, size_t size);

/* Whether cgroup directory @dir is its hierarchy's root (its parent is no
 * cgroup): every process of the machine. */
bool target_cgroup_is_root(const char *dir);

/* The live processes of @spec now, ascending, each once, into *@ret
 * (malloc'd; none is 0 of them). -errno on a read that failed. */
int target_set_list(const struct target_set_spec *spec, pid_t **ret, size_t *ret_n);

#endif
