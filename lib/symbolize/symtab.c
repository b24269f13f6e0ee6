/*
 * A per-module table of function symbols, sorted once, searched by bisection.
 * dwfl_module_addrname() walks every symbol on each call (250 us per address
 * in libc with its 10k symbols); this costs that once per module.
 */
#include <errno.h>
#include <gelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "symbolize/symbolize-private.h"

struct candidate {
	struct symtab_entry e;
	int binding;
};

static size_t leading_underscores(const char *s)
{
	size_t n = 0;

	while (s[n] == '_')
		n++;
	return n;
}

static int binding_rank(int binding)
{
	switch (binding) {
	case STB_GLOBAL:
		return 0;
	case STB_WEAK:
		return 1;
	default:
		return 2;
	}
}

/* The vDSO's own name of a function: the kernel defines __vdso_NAME and
 * NAME as its weak alias; libc and Go look up the __vdso_ name, perf shows
 * it, and it keeps the vDSO's code apart from libc's NAME that calls it. */
static bool is_vdso_name(const char *name)
{
	return !strncmp(name, "__vdso_", 7);
}

/*
 * By address; among aliases of one address the best name first: a vDSO
 * function's own name, then the one a person would call (getpid over
 * __getpid), then global over weak over local, then the shorter, then any
 * fixed order so that results do not depend on the symbol table's order.
 */
static int candidate_cmp(const void *a, const void *b)
{
	const struct candidate *x = a, *y = b;
	size_t ux, uy, lx, ly;

	if (x->e.addr != y->e.addr)
		return x->e.addr < y->e.addr ? -1 : 1;
	if (is_vdso_name(x->e.name) != is_vdso_name(y->e.name))
		return is_vdso_name(x->e.name) ? -1 : 1;
	ux = leading_underscores(x->e.name);
	uy = leading_underscores(y->e.name);
	if (ux != uy)
		return ux < uy ? -1 : 1;
	if (binding_rank(x->binding) != binding_rank(y->binding))
		return binding_rank(x->binding) - binding_rank(y->binding);
	lx = strlen(x->e.name);
	ly = strlen(y->e.name);
	if (lx != ly)
		return lx < ly ? -1 : 1;
	return strcmp(x->e.name, y->e.name);
}

int symtab_build(struct symtab *t, Dwfl_Module *mod)
{
	struct candidate *c;
	size_t nc = 0, nr = 0;
	int n = dwfl_module_getsymtab(mod);

	t->entries = NULL;
	t->nr = 0;
	if (n <= 0)
		return 0;
	c = calloc((size_t)n, sizeof(*c));
	if (!c)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		GElf_Sym sym;
		GElf_Addr addr;
		GElf_Word shndx;
		const char *name;
		int type;

		name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, NULL, NULL);
		if (!name || !*name)
			continue;
		type = GELF_ST_TYPE(sym.st_info);
		if (type != STT_FUNC && type != STT_GNU_IFUNC)
			continue;
		/* Imports, and symbols of sections that are not loaded. */
		if (shndx == SHN_UNDEF || shndx == (GElf_Word)-1)
			continue;
		c[nc].e = (struct symtab_entry){ .addr = addr, .size = sym.st_size, .name = name };
		c[nc].binding = GELF_ST_BIND(sym.st_info);
		nc++;
	}
	qsort(c, nc, sizeof(*c), candidate_cmp);

	/* Keep one entry per address; an alias may know the size. */
	t->entries = calloc(nc ? nc : 1, sizeof(*t->entries));
	if (!t->entries) {
		free(c);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nc; i++) {
		if (nr && t->entries[nr - 1].addr == c[i].e.addr) {
			if (t->entries[nr - 1].size < c[i].e.size)
				t->entries[nr - 1].size = c[i].e.size;
			continue;
		}
		t->entries[nr++] = c[i].e;
	}
	t->nr = nr;
	free(c);
	return 0;
}

const struct symtab_entry *symtab_find(const struct symtab *t, uint64_t addr)
{
	size_t lo = 0, hi = t->nr;
	const struct symtab_entry *e;

	/* The last entry at or below @addr. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->entries[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	e = &t->entries[lo - 1];
	/* Size 0 (hand-written assembly): it runs up to the next symbol. */
	if (e->size && addr - e->addr >= e->size)
		return NULL;
	return e;
}

void symtab_release(struct symtab *t)
{
	if (!t)
		return;
	free(t->entries);
	t->entries = NULL;
	t->nr = 0;
}
