/*
 * Function symbols of ELF images read with libelf alone: the tests' own
 * truth about what lies at an address, apart from lib/symbolize's libdw.
 */
#ifndef CPROF_TH_ELF_H
#define CPROF_TH_ELF_H

#include <gelf.h>
#include <stdint.h>

struct th_elf_func {
	uint64_t value, size; /* ELF address and size */
	const char *name;     /* lives as long as the Elf */
};

/* The STT_FUNC symbols with an address of @elf's .symtab and .dynsym, in a
 * malloc'd array (*@ret); their number. Fails the test on a broken ELF. */
size_t th_elf_functions(Elf *elf, struct th_elf_func **ret);
/* The function of @funcs (@n of them) that covers ELF address @addr, or
 * NULL; among aliases, the first whose name starts with @prefer. */
const struct th_elf_func *th_elf_function_at(const struct th_elf_func *funcs, size_t n,
					     uint64_t addr, const char *prefer);
/* The p_vaddr of @elf's first PT_LOAD: where its image starts. */
uint64_t th_elf_load_vaddr(Elf *elf);
/* The ELF of the file at @path; th_elf_close() ends it. */
Elf *th_elf_open(const char *path);
/* This process's vDSO, from a private copy (the vDSO is not ours to
 * scribble on); *@ret_base is where it is mapped. th_elf_close() ends it. */
Elf *th_vdso_open(uint64_t *ret_base);
void th_elf_close(Elf *elf);

#endif
