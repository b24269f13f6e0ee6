/*
 * Exported functions of a module mapped in the target, from its .dynsym:
 * where dlopen, dlsym and dlerror are in the target's libc. The file is read
 * through /proc/PID/map_files (the very file mapped, even if replaced or in
 * another mount namespace) or else /proc/PID/root.
 */
#include "inject/inject.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static bool name_starts(const char *path, const char *lib)
{
	const char *base = strrchr(path, '/');

	return base && strncmp(base + 1, lib, strlen(lib)) == 0;
}

static int open_module(pid_t pid, const struct map_entry *e)
{
	char path[4200];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, e->start,
		 e->end);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		return fd;
	snprintf(path, sizeof(path), "/proc/%d/root%s", pid, e->path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd >= 0 ? fd : -errno;
}

/* What st_value must be added to: the PT_LOAD that maps the file from the
 * executable mapping @x's offset is at @x's start. */
static int load_bias(Elf *elf, const struct map_entry *x, uint64_t *ret)
{
	size_t n;

	if (elf_getphdrnum(elf, &n) < 0)
		return -ENOEXEC;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD ||
		    (ph.p_offset & ~(uint64_t)0xfff) != x->offset)
			continue;
		*ret = x->start - (ph.p_vaddr & ~(uint64_t)0xfff);
		return 0;
	}
	return -ENOEXEC;
}

/* dlopen has two versions in glibc 2.34+; take the default one (versym
 * without the hidden bit), else any definition. */
static int find_symbol(Elf *elf, const char *name, uint64_t *ret)
{
	Elf_Scn *scn = NULL, *dynsym = NULL, *versym = NULL;
	Elf_Data *syms, *vers = NULL;
	GElf_Shdr sh;
	uint64_t any = 0;

	while ((scn = elf_nextscn(elf, scn))) {
		if (!gelf_getshdr(scn, &sh))
			continue;
		if (sh.sh_type == SHT_DYNSYM)
			dynsym = scn;
		else if (sh.sh_type == SHT_GNU_versym)
			versym = scn;
	}
	if (!dynsym || !gelf_getshdr(dynsym, &sh) || !(syms = elf_getdata(dynsym, NULL)))
		return -ENOENT;
	if (versym)
		vers = elf_getdata(versym, NULL);
	for (size_t i = 0; sh.sh_entsize && i < sh.sh_size / sh.sh_entsize; i++) {
		GElf_Sym s;
		GElf_Versym v;
		const char *n;

		if (!gelf_getsym(syms, (int)i, &s) || s.st_shndx == SHN_UNDEF ||
		    (GELF_ST_TYPE(s.st_info) != STT_FUNC && GELF_ST_TYPE(s.st_info) != STT_OBJECT))
			continue;
		n = elf_strptr(elf, sh.sh_link, s.st_name);
		if (!n || strcmp(n, name) != 0)
			continue;
		if (vers && gelf_getversym(vers, (int)i, &v) && !(v & 0x8000)) {
			*ret = s.st_value;
			return 0;
		}
		any = s.st_value;
	}
	if (!any)
		return -ENOENT;
	*ret = any;
	return 0;
}

int inject_find_function(pid_t pid, const struct maps *m, const char *lib, const char *name,
			 uint64_t *ret)
{
	const struct map_entry *e = NULL;
	uint64_t bias, value;
	Elf *elf;
	int fd, r;

	/*
	 * The library's code as the loader mapped it: its executable mapping.
	 * The same file may be mapped besides as data, from offset 0 (a
	 * profiler, a debugger reading ELF files): a symbol there is no code.
	 */
	for (size_t i = 0; i < m->n; i++)
		if ((m->entries[i].prot & MAPS_EXEC) && m->entries[i].path[0] == '/' &&
		    name_starts(m->entries[i].path, lib)) {
			e = &m->entries[i];
			break;
		}
	if (!e)
		return -ENOENT;
	fd = open_module(pid, e);
	if (fd < 0)
		return fd;
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf) {
		r = -ENOEXEC;
		goto out_close;
	}
	r = load_bias(elf, e, &bias);
	if (r < 0)
		goto out_end;
	r = find_symbol(elf, name, &value);
	if (r < 0)
		goto out_end;
	*ret = bias + value;
out_end:
	elf_end(elf);
out_close:
	close(fd);
	return r;
}
