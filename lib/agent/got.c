/*
 * Hooking by GOT rewriting. For every loaded object, the relocations of its
 * dynamic section (DT_JMPREL: R_X86_64_JUMP_SLOT, the PLT's slots; DT_RELA:
 * R_X86_64_GLOB_DAT, calls through the GOT with -fno-plt and taken
 * addresses) name the slot of each imported function; the slots of the
 * functions in agent_hooks get the hook's address. ld.so has already
 * relocated the dynamic section's pointers (x86-64 keeps it writable).
 *
 * Skipped: the agent (its own calls must reach the real functions), ld.so
 * (its allocations go through its own pointers, and patching it gains
 * nothing) and the vDSO (its dynamic section is not relocated).
 *
 * Slots in PT_GNU_RELRO were made read-only by ld.so after relocation (full
 * RELRO); they are made writable for the store and read-only again, exactly
 * the pages ld.so protects (_dl_protect_relro). A store of an aligned 8-byte
 * word is atomic: a thread calling through the slot meanwhile sees the old
 * or the new function, both fine.
 *
 * Names are not enough where glibc keeps an old ABI under an old version:
 * pthread_cond_wait@GLIBC_2.2.5 takes a condition of the pre-2.3.2 layout
 * (8 bytes) that the current function would overwrite as a 48-byte one. A
 * slot whose symbol is bound to a hook's compat_version (from the object's
 * DT_VERSYM and DT_VERNEED) is left alone: it gets no hook, and its program
 * keeps working.
 *
 * The original values are kept in a table of our own mapping. Restoring walks
 * the objects loaded NOW and writes back only slots that still hold a hook:
 * an object dlclose'd meanwhile is not touched (its slots are gone), and one
 * mapped at the same place since is recognized by its contents.
 */
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agent.h"

struct saved_slot {
	uint64_t *slot;
	uint64_t orig;
};

static struct saved_slot *saved;
static size_t nr_saved, saved_alloc;
static uint64_t nr_patched;

enum got_op { GOT_PATCH, GOT_RESTORE };

struct walk {
	enum got_op op;
	uintptr_t skip[3]; /* addresses inside objects to skip */
};

uint64_t got_nr_patched(void)
{
	return nr_patched;
}

static int saved_put(uint64_t *slot, uint64_t orig)
{
	for (size_t i = 0; i < nr_saved; i++) {
		if (saved[i].slot == slot) {
			saved[i].orig = orig;
			return 0;
		}
	}
	if (nr_saved == saved_alloc) {
		size_t n = saved_alloc ? saved_alloc * 2 : 512;
		void *p;

		/* Our own mapping: the target's heap is none of our business
		 * (and its allocator is what we hook). */
		if (saved)
			p = mremap(saved, saved_alloc * sizeof(*saved), n * sizeof(*saved), MREMAP_MAYMOVE);
		else
			p = mmap(NULL, n * sizeof(*saved), PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return -ENOMEM;
		saved = p;
		saved_alloc = n;
	}
	saved[nr_saved].slot = slot;
	saved[nr_saved].orig = orig;
	nr_saved++;
	return 0;
}

static bool saved_get(uint64_t *slot, uint64_t *ret_orig)
{
	for (size_t i = 0; i < nr_saved; i++) {
		if (saved[i].slot == slot) {
			*ret_orig = saved[i].orig;
			return true;
		}
	}
	return false;
}

static bool object_contains(const struct dl_phdr_info *info, uintptr_t addr)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t start = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && addr >= start && addr - start < ph->p_memsz)
			return true;
	}
	return false;
}

/* Store @value into @slot; @relro_start/@relro_end bound the read-only pages. */
static int slot_store(uint64_t *slot, uint64_t value, uintptr_t relro_start, uintptr_t relro_end)
{
	uintptr_t a = (uintptr_t)slot;
	uintptr_t page = a & ~((uintptr_t)getpagesize() - 1);
	bool ro = a >= relro_start && a < relro_end;

	if (ro && mprotect((void *)page, (size_t)getpagesize(), PROT_READ | PROT_WRITE) != 0)
		return -errno;
	__atomic_store_n(slot, value, __ATOMIC_RELEASE);
	if (ro)
		mprotect((void *)page, (size_t)getpagesize(), PROT_READ);
	return 0;
}

struct dyninfo {
	const ElfW(Rela) *jmprel, *rela;
	size_t jmprel_size, rela_size;
	const ElfW(Sym) *symtab;
	const char *strtab;
	size_t strsz;
	const ElfW(Half) *versym;   /* per symbol: its version's index, or NULL */
	const ElfW(Verneed) *verneed;
	size_t verneednum;
	uintptr_t relro_start, relro_end;
};

static uintptr_t dyn_ptr(const struct dl_phdr_info *info, uintptr_t p)
{
	/* Relocated already on x86-64; tolerate one that is not. */
	return p < info->dlpi_addr ? p + info->dlpi_addr : p;
}

static bool read_dynamic(const struct dl_phdr_info *info, struct dyninfo *d)
{
	const ElfW(Dyn) *dyn = NULL;
	uintptr_t page = (uintptr_t)getpagesize();
	int pltrel = DT_RELA;

	memset(d, 0, sizeof(*d));
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_DYNAMIC)
			dyn = (const void *)(info->dlpi_addr + ph->p_vaddr);
		if (ph->p_type == PT_GNU_RELRO) {
			d->relro_start = (info->dlpi_addr + ph->p_vaddr) & ~(page - 1);
			d->relro_end = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz) & ~(page - 1);
		}
	}
	if (!dyn)
		return false;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		switch (dyn->d_tag) {
		case DT_JMPREL: d->jmprel = (const void *)dyn_ptr(info, dyn->d_un.d_ptr); break;
		case DT_PLTRELSZ: d->jmprel_size = dyn->d_un.d_val; break;
		case DT_PLTREL: pltrel = (int)dyn->d_un.d_val; break;
		case DT_RELA: d->rela = (const void *)dyn_ptr(info, dyn->d_un.d_ptr); break;
		case DT_RELASZ: d->rela_size = dyn->d_un.d_val; break;
		case DT_SYMTAB: d->symtab = (const void *)dyn_ptr(info, dyn->d_un.d_ptr); break;
		case DT_STRTAB: d->strtab = (const void *)dyn_ptr(info, dyn->d_un.d_ptr); break;
		case DT_STRSZ: d->strsz = dyn->d_un.d_val; break;
		case DT_VERSYM: d->versym = (const void *)dyn_ptr(info, dyn->d_un.d_ptr); break;
		case DT_VERNEED: d->verneed = (const void *)dyn_ptr(info, dyn->d_un.d_ptr); break;
		case DT_VERNEEDNUM: d->verneednum = dyn->d_un.d_val; break;
		default: break;
		}
	}
	if (pltrel != DT_RELA)
		d->jmprel = NULL;
	return d->symtab && d->strtab;
}

static void do_slot(const struct walk *w, const struct dyninfo *d, uint64_t *slot,
		    const struct hook_entry *h)
{
	uint64_t cur = __atomic_load_n(slot, __ATOMIC_RELAXED), orig;

	if (w->op == GOT_PATCH) {
		if (hooks_is_hook(cur))
			return;
		if (saved_put(slot, cur) != 0 ||
		    slot_store(slot, (uint64_t)(uintptr_t)h->hook, d->relro_start, d->relro_end) != 0) {
			AGENT_COUNT(errors, 1);
			return;
		}
		nr_patched++;
	} else {
		if (!hooks_is_hook(cur))
			return;
		if (!saved_get(slot, &orig))
			orig = (uint64_t)(uintptr_t)*h->real;
		if (slot_store(slot, orig, d->relro_start, d->relro_end) != 0) {
			AGENT_COUNT(errors, 1);
			return;
		}
		if (nr_patched)
			nr_patched--;
	}
}

/* The version symbol @symidx of the object is bound to ("GLIBC_2.2.5"), or
 * NULL: unversioned, or defined by the object itself. */
static const char *needed_version(const struct dyninfo *d, size_t symidx)
{
	const ElfW(Verneed) *vn = d->verneed;
	ElfW(Half) ndx;

	if (!d->versym || !vn)
		return NULL;
	ndx = d->versym[symidx] & 0x7fff;
	if (ndx < 2)
		return NULL;
	for (size_t i = 0; i < d->verneednum; i++) {
		const ElfW(Vernaux) *va = (const void *)((const char *)vn + vn->vn_aux);

		for (unsigned k = 0; k < vn->vn_cnt; k++) {
			if (va->vna_other == ndx)
				return d->strsz && va->vna_name >= d->strsz ? NULL
									 : d->strtab + va->vna_name;
			if (!va->vna_next)
				break;
			va = (const void *)((const char *)va + va->vna_next);
		}
		if (!vn->vn_next)
			break;
		vn = (const void *)((const char *)vn + vn->vn_next);
	}
	return NULL;
}

static void do_relocs(const struct walk *w, const struct dl_phdr_info *info,
		      const struct dyninfo *d, const ElfW(Rela) *rel, size_t bytes)
{
	if (!rel)
		return;
	for (size_t i = 0; i < bytes / sizeof(*rel); i++) {
		uint32_t type = ELF64_R_TYPE(rel[i].r_info);
		const ElfW(Sym) *sym;
		const struct hook_entry *h;

		if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT)
			continue;
		sym = &d->symtab[ELF64_R_SYM(rel[i].r_info)];
		if (sym->st_name == 0 || (d->strsz && sym->st_name >= d->strsz))
			continue;
		h = hooks_find(d->strtab + sym->st_name, w->op == GOT_RESTORE);
		if (h && w->op == GOT_PATCH && h->compat_version) {
			const char *v = needed_version(d, ELF64_R_SYM(rel[i].r_info));

			if (v && strcmp(v, h->compat_version) == 0)
				continue;
		}
		if (h)
			do_slot(w, d, (uint64_t *)(info->dlpi_addr + rel[i].r_offset), h);
	}
}

static int walk_object(struct dl_phdr_info *info, size_t size, void *data)
{
	const struct walk *w = data;
	struct dyninfo d;

	(void)size;
	for (size_t i = 0; i < sizeof(w->skip) / sizeof(w->skip[0]); i++)
		if (w->skip[i] && object_contains(info, w->skip[i]))
			return 0;
	if (!read_dynamic(info, &d))
		return 0;
	do_relocs(w, info, &d, d.jmprel, d.jmprel_size);
	do_relocs(w, info, &d, d.rela, d.rela_size);
	return 0;
}

static void walk_all(enum got_op op)
{
	struct walk w = {
		.op = op,
		.skip = {
			(uintptr_t)&got_nr_patched,
			(uintptr_t)getauxval(AT_BASE),
			(uintptr_t)getauxval(AT_SYSINFO_EHDR),
		},
	};

	dl_iterate_phdr(walk_object, &w);
}

void got_patch_all(void)
{
	walk_all(GOT_PATCH);
}

void got_restore_all(void)
{
	walk_all(GOT_RESTORE);
	/* Whatever was not restored belonged to objects gone since. */
	nr_patched = 0;
	nr_saved = 0;
}
