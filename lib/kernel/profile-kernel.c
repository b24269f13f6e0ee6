/* Kernel frames in a profile: named from kallsyms, in their own mapping. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "kernel/kernel.h"

int kallsyms_fill_profile(const struct kallsyms *ks, struct profile *p, uint64_t mapping_id)
{
	for (size_t i = 0; i < p->nlocations; i++) {
		const struct profile_location *l = &p->locations[i];
		struct profile_line line = { 0 };
		const char *name;
		char hex[32];
		int r;

		if (!kernel_address(l->address))
			continue;
		name = kallsyms_lookup(ks, l->address);
		if (!name) {
			snprintf(hex, sizeof(hex), "[kernel] 0x%" PRIx64, l->address);
			name = hex;
		}
		r = profile_intern_function(p, name, name, "", 0, &line.function_id);
		if (r < 0)
			return r;
		r = profile_location_set(p, l->id, mapping_id, &line, 1);
		if (r < 0)
			return r;
	}
	return 0;
}

int kallsyms_add_mapping(struct profile *p, uint64_t *ret_id)
{
	struct profile_mapping m = {
		.start = UINT64_MAX,
		.file = KERNEL_MAPPING_NAME,
		.build_id = "",
		/* Named already, and there is no file pprof could read. */
		.has_functions = true,
	};

	*ret_id = 0;
	for (size_t i = 0; i < p->nlocations; i++) {
		uint64_t a = p->locations[i].address;

		if (!kernel_address(a))
			continue;
		m.start = MIN(m.start, a);
		m.limit = MAX(m.limit, a + 1);
	}
	if (m.start == UINT64_MAX)
		return 0;
	return profile_add_mapping(p, &m, ret_id);
}
