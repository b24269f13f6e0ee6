/* Kernel frames in a profile: named from kallsyms, in their own mapping. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

static uint32_t u32_at(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

int kernel_build_id_parse(const uint8_t *buf, size_t len, char *hex, size_t size)
{
	size_t off = 0;

	/* Elf64_Nhdr: namesz, descsz, type; name and desc each padded to 4. */
	while (len - off >= 12) {
		uint32_t namesz = u32_at(buf + off), descsz = u32_at(buf + off + 4);
		uint32_t type = u32_at(buf + off + 8);
		size_t name = off + 12, desc, next;

		if (namesz > len || descsz > len)
			break;
		desc = name + ((namesz + 3u) & ~3u);
		next = desc + ((descsz + 3u) & ~3u);
		if (next > len)
			break;
		if (type == 3 /* NT_GNU_BUILD_ID */ && namesz == 4 &&
		    !memcmp(buf + name, "GNU", 4) && descsz && 2 * (size_t)descsz < size) {
			for (uint32_t i = 0; i < descsz; i++)
				snprintf(hex + 2 * i, 3, "%02x", buf[desc + i]);
			return 0;
		}
		off = next;
	}
	return -ENOENT;
}

static void running_kernel_build_id(char *hex, size_t size)
{
	uint8_t buf[4096];
	ssize_t n;
	int fd = open("/sys/kernel/notes", O_RDONLY | O_CLOEXEC);

	hex[0] = '\0';
	if (fd < 0)
		return;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n <= 0 || kernel_build_id_parse(buf, (size_t)n, hex, size) < 0)
		hex[0] = '\0';
}

int kallsyms_add_mapping(struct profile *p, uint64_t *ret_id)
{
	char build_id[2 * 64 + 1];
	struct profile_mapping m = {
		.start = UINT64_MAX,
		.file = KERNEL_MAPPING_NAME,
		.build_id = build_id,
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
	running_kernel_build_id(build_id, sizeof(build_id));
	return profile_add_mapping(p, &m, ret_id);
}
