/*
 * file:line and inline frames from DWARF. physical_scopes() lists the DIEs
 * that contain an address, innermost first; each DW_TAG_inlined_subroutine
 * is one frame, and the DW_TAG_subprogram that holds them the last: named
 * by its origin, so that a compiler's clone of a function (f.isra.0,
 * f.constprop.0, f.part.0, f.cold) keeps the function's one name. The
 * innermost frame's line comes from the line table; each outer frame's line
 * is where it called the frame inside it: that inlined callee's
 * DW_AT_call_file/DW_AT_call_line (what eu-addr2line -i does too).
 */
#include <dwarf.h>
#include <errno.h>
#include <stdlib.h>

#include "symbolize/symbolize-private.h"

static const char *die_attr_string(Dwarf_Die *die, unsigned int name)
{
	Dwarf_Attribute attr;

	/* _integrate: an inlined or out-of-line instance names itself only
	 * through DW_AT_abstract_origin (and C++ methods DW_AT_specification). */
	return dwarf_formstring(dwarf_attr_integrate(die, name, &attr));
}

static bool die_attr_udata(Dwarf_Die *die, unsigned int name, Dwarf_Word *ret)
{
	Dwarf_Attribute attr;

	return dwarf_formudata(dwarf_attr(die, name, &attr), ret) == 0;
}

/* Pooled names of a function DIE: (demangled, linkage); NULL if nameless. */
static int die_names(struct symbolizer *s, Dwarf_Die *die, const char **ret_name,
		     const char **ret_system_name)
{
	const char *name = die_attr_string(die, DW_AT_name);
	const char *linkage = die_attr_string(die, DW_AT_linkage_name);
	const char *demangled = NULL;

	if (!linkage)
		linkage = die_attr_string(die, DW_AT_MIPS_linkage_name);
	if (!name && !linkage) {
		*ret_name = *ret_system_name = NULL;
		return 0;
	}
	/* The linkage name demangles to the qualified name with parameters
	 * (ns::Class::method(int)); DW_AT_name alone would say "method". */
	if (linkage)
		demangled = demangle_pooled(&s->strings, linkage);
	*ret_name = strpool_intern(&s->strings, demangled ? demangled : name ? name : linkage);
	/* An unmangled linkage name is an asm label (glibc's __GI_qsort for
	 * qsort): the name that callers link against is DW_AT_name. */
	*ret_system_name = strpool_intern(&s->strings, demangled || !name ? linkage : name);
	if (!*ret_name || !*ret_system_name)
		return -ENOMEM;
	return 0;
}

static const char *call_file(Dwarf_Die *cu, Dwarf_Die *inlined, Dwarf_Files **files)
{
	Dwarf_Word idx;
	size_t nfiles;

	if (!die_attr_udata(inlined, DW_AT_call_file, &idx))
		return NULL;
	if (!*files && dwarf_getsrcfiles(cu, files, &nfiles) != 0) {
		*files = NULL;
		return NULL;
	}
	return dwarf_filesrc(*files, idx, NULL, NULL);
}

/*
 * The DIEs that contain @pc as they nest in the unit, innermost first.
 * dwarf_getscopes() leaves the nesting at the innermost inlined call and
 * goes on with the scopes of its callee's abstract definition: the unit,
 * where the function that holds the call is out of line (a .isra,
 * .constprop, .part clone, a .cold part). The nesting of its innermost
 * scope (dwarf_getscopes_die(), as eu-addr2line -i does) reaches the
 * DW_TAG_subprogram that holds the code, whose name is its origin's. That
 * walks the unit again: only where an inlined call comes first.
 */
static int physical_scopes(Dwarf_Die *cu, Dwarf_Addr pc, Dwarf_Die **ret)
{
	Dwarf_Die *scopes = NULL, inner;
	int n = dwarf_getscopes(cu, pc, &scopes);

	for (int i = 0; i < n; i++) {
		int tag = dwarf_tag(&scopes[i]);

		if (tag == DW_TAG_inlined_subroutine)
			break;
		if (tag == DW_TAG_subprogram || i == n - 1) {
			*ret = scopes;
			return n;
		}
	}
	if (n <= 0)
		return n;
	inner = scopes[0];
	free(scopes);
	return dwarf_getscopes_die(&inner, ret);
}

int scratch_push(struct symbolizer *s, size_t n, const struct symbol_frame *f)
{
	int r = GROW(s->scratch, n + 1, s->scratch_alloc);

	if (r < 0)
		return r;
	s->scratch[n] = *f;
	return 0;
}

bool lines_file_line(struct symbolizer *s, struct sym_module *m, uint64_t address,
		     const char **ret_file, int *ret_line)
{
	Dwfl_Line *l;
	const char *file;
	int line = 0;

	if (!m->pub.has_lines)
		return false;
	l = dwfl_module_getsrc(m->mod, address);
	if (!l)
		return false;
	file = dwfl_lineinfo(l, NULL, &line, NULL, NULL, NULL);
	if (!file)
		return false;
	*ret_file = strpool_intern(&s->strings, file);
	*ret_line = line;
	return *ret_file != NULL;
}

int lines_frames(struct symbolizer *s, struct sym_module *m, uint64_t address,
		 struct dwarf_frames *ret)
{
	Dwarf_Addr bias, entry;
	Dwarf_Die *cu, *scopes = NULL;
	Dwarf_Files *files = NULL;
	const char *file = NULL;
	int line = 0, nscopes;
	size_t n = 0;
	int r = 0;

	*ret = (struct dwarf_frames){ 0 };
	if (!m->pub.has_lines)
		return 0;
	cu = dwfl_module_addrdie(m->mod, address, &bias);
	if (!cu)
		return 0;
	nscopes = physical_scopes(cu, address - bias, &scopes);
	if (nscopes <= 0)
		return 0;
	if (!lines_file_line(s, m, address, &file, &line)) {
		file = NULL;
		line = 0;
	}

	for (int i = 0; i < nscopes; i++) {
		Dwarf_Die *die = &scopes[i];
		int tag = dwarf_tag(die), decl_line = 0;
		struct symbol_frame f;
		Dwarf_Word w;

		if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram)
			continue;
		r = die_names(s, die, &f.function, &f.system_name);
		if (r < 0)
			goto out_free_scopes;
		if (!f.function) {
			/* Nameless (artificial) function: let the ELF symbol say. */
			break;
		}
		f.file = file;
		f.line = line;
		f.start_line = dwarf_decl_line(die, &decl_line) == 0 ? decl_line : 0;
		r = scratch_push(s, n, &f);
		if (r < 0)
			goto out_free_scopes;
		n++;
		if (tag == DW_TAG_subprogram) {
			if (dwarf_entrypc(die, &entry) == 0)
				ret->entry = entry + bias;
			ret->complete = true;
			break;
		}
		/* The next frame out is where this one was inlined. */
		file = call_file(cu, die, &files);
		if (file) {
			file = strpool_intern(&s->strings, file);
			if (!file) {
				r = -ENOMEM;
				goto out_free_scopes;
			}
		}
		line = die_attr_udata(die, DW_AT_call_line, &w) ? (int)w : 0;
	}
	ret->n = n;
	ret->file = file;
	ret->line = line;

out_free_scopes:
	free(scopes);
	return r;
}
