/*
 * A systemd unit as the cgroup systemd keeps its processes in, for a set
 * (set.h): a unit's main process may be restarted and its workers
 * replaced, its cgroup stays.
 */
#ifndef CPROF_TARGET_UNIT_H
#define CPROF_TARGET_UNIT_H

#include <stddef.h>

/*
 * The cgroup of unit @unit ("nginx", "nginx.service", "user@1000.service"),
 * as systemd names it under the cgroup mount ("/system.slice/nginx.service":
 * target_cgroup_dir() finds its directory), into @buf. Asked of systemctl
 * (`systemctl show -p ControlGroup --value`), for at most @timeout_ms.
 *
 * 0; -EHOSTDOWN when systemd is not running on this machine (no
 * /run/systemd/system, as sd_booted(3) decides); -ESRCH when the unit has
 * no cgroup (unknown, or not running); -ENOENT when there is no systemctl;
 * -ETIMEDOUT; -EIO when systemctl failed, with the first line it wrote
 * on stderr in @why; -ENAMETOOLONG.
 */
int target_unit_cgroup(const char *unit, int timeout_ms, char *buf, size_t size, char *why,
		       size_t whylen);

#endif
