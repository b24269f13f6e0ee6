#include "th-elf.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

size_t th_elf_functions(Elf *elf, struct th_elf_func **ret)
{
	struct th_elf_func *v = NULL;
	Elf_Scn *scn = NULL;
	size_t n = 0;

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM))
			continue;
		d = elf_getdata(scn, NULL);
		cr_assert(d && sh.sh_entsize, "a symbol table without data");
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym s;
			const char *name;

			if (!gelf_getsym(d, (int)i, &s) || GELF_ST_TYPE(s.st_info) != STT_FUNC ||
			    !s.st_value)
				continue;
			name = elf_strptr(elf, sh.sh_link, s.st_name);
			if (!name)
				continue;
			v = realloc(v, (n + 1) * sizeof(*v));
			cr_assert_not_null(v);
			v[n++] = (struct th_elf_func){ .value = s.st_value, .size = s.st_size,
						       .name = name };
		}
	}
	*ret = v;
	return n;
}

const struct th_elf_func *th_elf_function_at(const struct th_elf_func *funcs, size_t n,
					     uint64_t addr, const char *prefer)
{
	const struct th_elf_func *found = NULL;

	for (size_t i = 0; i < n; i++) {
		const struct th_elf_func *f = &funcs[i];

		if (addr < f->value || addr >= f->value + f->size)
			continue;
		if (!found || (prefer && !strncmp(f->name, prefer, strlen(prefer))))
			found = f;
	}
	return found;
}

uint64_t th_elf_load_vaddr(Elf *elf)
{
	size_t nph;

	cr_assert_eq(elf_getphdrnum(elf, &nph), 0);
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;

		if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD)
			return ph.p_vaddr;
	}
	cr_assert_fail("an ELF with nothing to load");
	return 0;
}

Elf *th_elf_open(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t size;
	char *copy;
	Elf *elf;
	FILE *f;

	/* A copy in memory, as for the vDSO: th_elf_close() frees both alike. */
	cr_assert(fd >= 0, "cannot open %s", path);
	f = fdopen(fd, "r");
	cr_assert_not_null(f);
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	size = (size_t)ftell(f);
	rewind(f);
	copy = malloc(size);
	cr_assert_not_null(copy);
	cr_assert_eq(fread(copy, 1, size, f), size, "short read of %s", path);
	fclose(f);
	elf_version(EV_CURRENT);
	elf = elf_memory(copy, size);
	cr_assert_not_null(elf, "%s is no ELF", path);
	return elf;
}

Elf *th_vdso_open(uint64_t *ret_base)
{
	uint64_t base = getauxval(AT_SYSINFO_EHDR), start, end;
	char line[512];
	size_t size = 0;
	char *copy;
	Elf *elf;
	FILE *f;

	cr_assert_neq(base, 0, "no vDSO here");
	f = fopen("/proc/self/maps", "re");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "[vdso]") && sscanf(line, "%" SCNx64 "-%" SCNx64, &start, &end) == 2)
			size = end - start;
	fclose(f);
	cr_assert_gt(size, 0);
	copy = malloc(size);
	cr_assert_not_null(copy);
	memcpy(copy, (const void *)(uintptr_t)base, size);
	elf_version(EV_CURRENT);
	elf = elf_memory(copy, size);
	cr_assert_not_null(elf);
	*ret_base = base;
	return elf;
}

void th_elf_close(Elf *elf)
{
	size_t size;
	char *image = elf ? elf_rawfile(elf, &size) : NULL;

	elf_end(elf);
	free(image);
}
