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
 * nothing) and the vDSO (its dynamic section is not relocated); and the
 * heap hooks' slots of an object that implements the allocator (jemalloc,
 * tcmalloc, mimalloc: agent.h's hooks_allocator_marks), whose calls to
 * itself would otherwise count once more what its caller's hook counted.
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
 * The original values are kept in a table of our own mapping, with whether
 * the slot is in RELRO. Restoring goes through that table alone, since the
 * watchdog task does it (raw.h: no loader lock, so no dl_iterate_phdr), and
 * reads and writes each slot through the kernel (process_vm_readv/writev on
 * ourselves): a slot of an object dlclose'd meanwhile answers EFAULT instead
 * of faulting, and only a slot that still holds a hook is written, so an
 * object mapped at the same place since is recognized by its contents.
 */
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "agent.h"
#include "raw.h"

#define PAGE_SIZE_X86 4096ul

struct saved_slot {
	uint64_t *slot;
	uint64_t orig;
	bool relro;
};

static struct saved_slot *saved;
static size_t nr_saved, saved_alloc;
static uint64_t nr_patched;

struct walk {
	uintptr_t skip[3]; /* addresses inside objects to skip */
};

uint64_t got_nr_patched(void)
{
	return nr_patched;
}

static int saved_put(uint64_t *slot, uint64_t orig, bool relro)
{
	for (size_t i = 0; i < nr_saved; i++) {
		if (saved[i].slot == slot) {
			saved[i].orig = orig;
			saved[i].relro = relro;
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
	saved[nr_saved].relro = relro;
	nr_saved++;
	return 0;
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

/* Store @value into @slot, whose page ld.so made read-only if @relro. */
static int slot_store(uint64_t *slot, uint64_t value, bool relro)
{
	uintptr_t page = (uintptr_t)slot & ~(PAGE_SIZE_X86 - 1);
	long ret;

	if (relro) {
		ret = RAW3(SYS_mprotect, page, PAGE_SIZE_X86, PROT_READ | PROT_WRITE);
		if (ret < 0)
			return (int)ret;
	}
	__atomic_store_n(slot, value, __ATOMIC_RELEASE);
	if (relro)
		RAW3(SYS_mprotect, page, PAGE_SIZE_X86, PROT_READ);
	return 0;
}

/* The same for a slot that may be gone (see the top): 0 when restored,
 * 1 when it no longer holds a hook, else -errno. */
static int slot_restore(const struct saved_slot *s)
{
	uintptr_t page = (uintptr_t)s->slot & ~(PAGE_SIZE_X86 - 1);
	uint64_t cur = 0;
	struct iovec local = { &cur, sizeof(cur) }, remote = { s->slot, sizeof(cur) };
	long ret;

	ret = RAW6(SYS_process_vm_readv, agent_pid, &local, 1, &remote, 1, 0);
	if (ret != (long)sizeof(cur))
		return ret < 0 ? (int)ret : -EFAULT;
	if (!hooks_is_hook(cur))
		return 1;
	if (s->relro) {
		ret = RAW3(SYS_mprotect, page, PAGE_SIZE_X86, PROT_READ | PROT_WRITE);
		if (ret < 0)
			return (int)ret;
	}
	local.iov_base = (void *)&s->orig;
	ret = RAW6(SYS_process_vm_writev, agent_pid, &local, 1, &remote, 1, 0);
	if (s->relro)
		RAW3(SYS_mprotect, page, PAGE_SIZE_X86, PROT_READ);
	if (ret != (long)sizeof(cur))
		return ret < 0 ? (int)ret : -EFAULT;
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

static void do_slot(const struct dyninfo *d, uint64_t *slot, const struct hook_entry *h)
{
	uint64_t cur = __atomic_load_n(slot, __ATOMIC_RELAXED);
	bool relro = (uintptr_t)slot >= d->relro_start && (uintptr_t)slot < d->relro_end;

	if (hooks_is_hook(cur))
		return;
	if (saved_put(slot, cur, relro) != 0 || slot_store(slot, (uint64_t)(uintptr_t)h->hook, relro) != 0) {
		AGENT_COUNT(errors, 1);
		return;
	}
	nr_patched++;
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

static void do_relocs(const struct dl_phdr_info *info, const struct dyninfo *d,
		      const ElfW(Rela) *rel, size_t bytes, bool allocator)
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
		h = hooks_find(d->strtab + sym->st_name);
		/* The allocator's calls to itself (agent.h). */
		if (h && allocator && h->events == CPROF_EVENTS_HEAP)
			continue;
		if (h && h->compat_version) {
			const char *v = needed_version(d, ELF64_R_SYM(rel[i].r_info));

			if (v && strcmp(v, h->compat_version) == 0)
				continue;
		}
		if (h)
			do_slot(d, (uint64_t *)(info->dlpi_addr + rel[i].r_offset), h);
	}
}

/* Does the object implement the allocator (hooks_allocator_marks)? */
static bool is_allocator(const struct dl_phdr_info *info)
{
	for (int i = 0; i < HOOKS_ALLOCATOR_MARKS; i++)
		if (hooks_allocator_marks[i] && object_contains(info, hooks_allocator_marks[i]))
			return true;
	return false;
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
	do_relocs(info, &d, d.jmprel, d.jmprel_size, is_allocator(info));
	do_relocs(info, &d, d.rela, d.rela_size, is_allocator(info));
	return 0;
}

void got_patch_all(void)
{
	struct walk w = {
		.skip = {
			(uintptr_t)&got_nr_patched,
			(uintptr_t)getauxval(AT_BASE),
			(uintptr_t)getauxval(AT_SYSINFO_EHDR),
		},
	};

	dl_iterate_phdr(walk_object, &w);
}

void got_restore_all(void)
{
	for (size_t i = 0; i < nr_saved; i++)
		if (slot_restore(&saved[i]) < 0)
			AGENT_COUNT(errors, 1);
	/* Whatever was not restored belonged to objects gone since. */
	nr_patched = 0;
	nr_saved = 0;
}
