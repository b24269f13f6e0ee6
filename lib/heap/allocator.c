/*
 * An allocator linked into the executable, found by name in .symtab and
 * .dynsym (a stripped executable keeps only .dynsym: an allocator it does
 * not export goes unseen, and the profile then says only what it saw).
 */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "heap/allocator.h"

/* The entry points whose definition in the executable means its calls to
 * them are direct; first match wins, prefixed ones first. */
static const char *const entry_points[] = { "je_malloc", "_rjem_malloc", "mi_malloc",
					    "tc_malloc", "malloc" };

/* What the executable defines, as bits of these names. */
enum {
	DEF_JE = 1 << 0, DEF_RJEM = 1 << 1, DEF_MI = 1 << 2, DEF_TC = 1 << 3, DEF_MALLOC = 1 << 4,
	DEF_JEMALLOC_INNARDS = 1 << 5, DEF_LIBC_MALLOC = 1 << 6,
};

static unsigned classify(const char *name)
{
	for (size_t i = 0; i < sizeof(entry_points) / sizeof(entry_points[0]); i++)
		if (!strcmp(name, entry_points[i]))
			return 1u << i;
	/* jemalloc's own, unprefixed or not: its control interface. */
	if (!strcmp(name, "mallctl") || !strcmp(name, "je_mallctl") ||
	    !strcmp(name, "_rjem_mallctl") || !strcmp(name, "je_malloc_default"))
		return DEF_JEMALLOC_INNARDS;
	if (!strncmp(name, "_ZN8tcmalloc", 12))
		return DEF_TC;
	if (!strcmp(name, "__libc_malloc"))
		return DEF_LIBC_MALLOC;
	return 0;
}

/* The defined functions of symbol table @scn, as classify() bits. */
static unsigned scan_symbols(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	unsigned found = 0;
	size_t n;

	if (!data || !sh->sh_entsize)
		return 0;
	n = sh->sh_size / sh->sh_entsize;
	for (size_t i = 1; i < n; i++) {
		GElf_Sym sym;
		const char *name;

		if (!gelf_getsym(data, (int)i, &sym) || sym.st_shndx == SHN_UNDEF ||
		    GELF_ST_TYPE(sym.st_info) != STT_FUNC)
			continue;
		name = elf_strptr(elf, sh->sh_link, sym.st_name);
		if (name)
			found |= classify(name);
	}
	return found;
}

static bool has_interp(Elf *elf)
{
	size_t n;

	if (elf_getphdrnum(elf, &n) != 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_INTERP)
			return true;
	}
	return false;
}

static void describe(unsigned found, struct heap_allocator *ret)
{
	const char *name = "its own malloc";

	memset(ret, 0, sizeof(*ret));
	ret->hookable = true;
	for (size_t i = 0; i < sizeof(entry_points) / sizeof(entry_points[0]); i++) {
		if (!(found & (1u << i)))
			continue;
		ret->hookable = false;
		snprintf(ret->symbol, sizeof(ret->symbol), "%s", entry_points[i]);
		break;
	}
	if (found & (DEF_JE | DEF_RJEM | DEF_JEMALLOC_INNARDS))
		name = "jemalloc";
	else if (found & DEF_MI)
		name = "mimalloc";
	else if (found & DEF_TC)
		name = "tcmalloc";
	snprintf(ret->name, sizeof(ret->name), "%s", name);
}

int heap_allocator_inspect(const char *path, struct heap_allocator *ret)
{
	unsigned found = 0;
	Elf_Scn *scn = NULL;
	Elf *elf;
	int fd, r = 0;

	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOSYS;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		r = -ENOEXEC;
		goto out_close;
	}
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;

		if (gelf_getshdr(scn, &sh) && (sh.sh_type == SHT_SYMTAB || sh.sh_type == SHT_DYNSYM))
			found |= scan_symbols(elf, scn, &sh);
	}
	/* A static program (glibc's malloc inside it): the loader's business. */
	if (!has_interp(elf) || (found & DEF_LIBC_MALLOC))
		found = 0;
	describe(found, ret);
out_close:
	elf_end(elf);
	close(fd);
	return r;
}

bool heap_allocator_unhookable(pid_t pid, struct heap_allocator *ret)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	return heap_allocator_inspect(path, ret) == 0 && !ret->hookable;
}

void heap_allocator_why(const struct heap_allocator *a, char *buf, size_t size)
{
	snprintf(buf, size, "%s is linked into the executable (it defines %s): its calls go "
		 "through no GOT slot the agent could patch", a->name, a->symbol);
}
