/*
 * Where a function starts, for code that no symbol covers: a stripped
 * binary's, or the vDSO's helpers that it does not export. The compiler
 * gives every function one FDE (call frame information), and
 * .eh_frame_hdr lists their starts, sorted, for binary search: the start
 * of the one that covers an address names all of the function's code
 * alike ("file+0xSTART"), where the address itself would name each
 * instruction apart.
 *
 * Only the table's usual layout (the one GNU ld and the kernel's vDSO
 * write: a 4-byte count, pairs of 4-byte offsets from the header) is read;
 * another one leaves the module without starts. Its bytes come from the
 * target's files or memory: every read is bounds-checked.
 */
#include <dwarf.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>

#include "symbolize/symbolize-private.h"

#define EH_PE_OMIT 0xff
#define EH_PE_UDATA4 0x03
#define EH_PE_SDATA4 0x0b
#define EH_PE_UDATA8 0x04
#define EH_PE_SDATA8 0x0c
#define EH_PE_DATAREL_SDATA4 0x3b

static int32_t read_s32(const unsigned char *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* Size of a value encoded as @enc (the offset to .eh_frame), or 0. */
static size_t encoded_size(unsigned char enc)
{
	switch (enc & 0x0f) {
	case EH_PE_UDATA4:
	case EH_PE_SDATA4:
		return 4;
	case EH_PE_UDATA8:
	case EH_PE_SDATA8:
		return 8;
	default:
		return 0;
	}
}

void fde_table_find(struct sym_module *m)
{
	GElf_Addr bias;
	Elf *elf = dwfl_module_getelf(m->mod, &bias);
	size_t nph, ptr_size;
	const unsigned char *p;
	Elf_Data *d;
	GElf_Phdr ph;
	uint32_t count;

	if (!elf || elf_getphdrnum(elf, &nph) != 0)
		return;
	for (size_t i = 0; i < nph; i++) {
		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_GNU_EH_FRAME)
			continue;
		d = elf_getdata_rawchunk(elf, (int64_t)ph.p_offset, ph.p_filesz, ELF_T_BYTE);
		if (!d || !d->d_buf || d->d_size < 4)
			return;
		p = d->d_buf;
		if (p[0] != 1 || p[1] == EH_PE_OMIT || p[2] != EH_PE_UDATA4 ||
		    p[3] != EH_PE_DATAREL_SDATA4)
			return;
		ptr_size = encoded_size(p[1]);
		if (!ptr_size || d->d_size < 4 + ptr_size + 4)
			return;
		memcpy(&count, p + 4 + ptr_size, sizeof(count));
		if (count > (d->d_size - 8 - ptr_size) / 8)
			return;
		m->fde_table = p + 8 + ptr_size;
		m->fde_count = count;
		m->fde_base = ph.p_vaddr + bias;
		return;
	}
}

bool fde_function_start(struct sym_module *m, uint64_t address, uint64_t *ret_start)
{
	size_t lo = 0, hi = m->fde_count;
	Dwarf_Frame *frame;
	Dwarf_CFI *cfi;
	Dwarf_Addr bias;

	if (!m->fde_count)
		return false;
	/* The last FDE that starts at or below @address... */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->fde_base + (int64_t)read_s32(m->fde_table + 8 * mid) <= address)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return false;
	/* ...covers it if any does: FDEs do not overlap. libdw says whether one does. */
	cfi = dwfl_module_eh_cfi(m->mod, &bias);
	if (!cfi || dwarf_cfi_addrframe(cfi, address - bias, &frame) != 0)
		return false;
	free(frame);
	*ret_start = m->fde_base + (int64_t)read_s32(m->fde_table + 8 * (lo - 1));
	return true;
}
