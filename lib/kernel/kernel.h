/*
 * Kernel frames for cpu profiles: the kernel's text symbols from
 * /proc/kallsyms in a table sorted once and searched by bisection, and the
 * profile's "[kernel.kallsyms]" mapping and functions.
 *
 * x86-64 only, like the rest of cprof: a kernel address is one in the upper
 * half of the canonical address space.
 */
#ifndef CPROF_KERNEL_H
#define CPROF_KERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "profile/profile.h"

struct kallsyms_entry {
	uint64_t addr;
	size_t name; /* offset in kallsyms.names */
};

struct kallsyms {
	struct kallsyms_entry *v;
	size_t nr, alloc;
	char *names; /* NUL-separated, "name" or "name [module]" */
	size_t names_len, names_alloc;
};

/* The profile mapping's name, as perf calls it. */
#define KERNEL_MAPPING_NAME "[kernel.kallsyms]"

static inline bool kernel_address(uint64_t addr)
{
	return addr >= 0xffff800000000000ULL;
}

/*
 * Reads the text symbols (types t, T, w, W) of @path (/proc/kallsyms).
 * -EACCES when every address reads as zero (kernel.kptr_restrict hides them
 * from this user); -ENOENT when there is no text symbol at all.
 */
int kallsyms_load(struct kallsyms *ks, const char *path);
void kallsyms_release(struct kallsyms *ks);

/* The symbol containing @addr (the last one at or below it), or NULL. */
const char *kallsyms_lookup(const struct kallsyms *ks, uint64_t addr);

/* Why kallsyms_load() said @err, and what to do, in @buf ("...\nhint: ..."). */
void kallsyms_strerror(int err, char *buf, size_t size);

/*
 * Names every kernel-address location of @p, with mapping @mapping_id (0:
 * none yet). Call it before the user-space symbolizer (which then leaves
 * those locations alone, they have lines) and, once that has put the
 * program's mapping first, again with kallsyms_add_mapping()'s id.
 */
int kallsyms_fill_profile(const struct kallsyms *ks, struct profile *p, uint64_t mapping_id);

/*
 * The GNU build id in the ELF notes @buf (the format of /sys/kernel/notes),
 * as lower-case hex in @hex. 0, or -ENOENT when there is none (also for
 * malformed notes: every length is checked against @len).
 */
int kernel_build_id_parse(const uint8_t *buf, size_t len, char *hex, size_t size);

/*
 * Adds the "[kernel.kallsyms]" mapping over the kernel addresses @p uses,
 * with the running kernel's build id (from /sys/kernel/notes, when
 * readable) and has_functions set so that pprof does not try to symbolize
 * it. 0 and *ret_id = 0 when @p has no kernel location.
 */
int kallsyms_add_mapping(struct profile *p, uint64_t *ret_id);

#endif
