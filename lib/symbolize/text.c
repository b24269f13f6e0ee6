/*
 * Frames as Go's legacy text profiles print them (runtime/pprof's
 * printStackRecord): one "#\t0xPC\tfunction+0xOFF\tfile:line" line per
 * frame, inlined frames first under the same PC. Shared by every --debug 1
 * writer (threads, heap, mutex, block).
 */
#include <string.h>

#include "symbolize/symbolize.h"

const char *symbol_file_or_module(const struct symbol_frame *f, const struct symbol_info *info)
{
	if (f->file)
		return f->file;
	return info->module && info->module->path ? info->module->path : "?";
}

bool symbol_name_has_offset(const char *name)
{
	/* Not any '+': C++'s "operator+(...)" and Rust's "dyn Any + Send"
	 * have one, and still need the offset. */
	const char *plus = strrchr(name, '+');
	const char *off = plus ? plus + 1 : name;

	return !strncmp(off, "0x", 2) && off[2] &&
	       strspn(off + 2, "0123456789abcdef") == strlen(off + 2);
}

static bool ends_with(const char *s, size_t len, const char *suffix, size_t *ret_len)
{
	size_t n = strlen(suffix);

	if (len < n || memcmp(s + len - n, suffix, n) != 0)
		return false;
	*ret_len = len - n;
	return true;
}

bool symbol_name_has_params(const char *name)
{
	/* What the C++ demangler may print after the parameter list. */
	static const char *const qualifiers[] = { " const", " volatile", " restrict", " &&",
						  " &",	    " noexcept", " transaction_safe" };
	size_t len = strlen(name);
	bool more = true;

	while (more) {
		const char *clone;

		more = false;
		for (size_t i = 0; i < ARRAY_SIZE(qualifiers); i++)
			more |= ends_with(name, len, qualifiers[i], &len);
		/* "f() [clone .cold]", "f() [clone .constprop.0] [clone .isra.0]" */
		if (len && name[len - 1] == ']') {
			clone = memrchr(name, '[', len);
			if (clone && clone > name && !strncmp(clone - 1, " [clone .", 9)) {
				len = (size_t)(clone - 1 - name);
				more = true;
			}
		}
	}
	return len && name[len - 1] == ')';
}

void symbolizer_write_frames(struct symbolizer *s, const uint64_t *pcs, size_t n, FILE *f)
{
	for (size_t j = 0; j < n; j++) {
		struct symbol_info info;

		if (symbolizer_lookup(s, pcs[j], &info) < 0)
			continue;
		for (size_t k = 0; k < info.nframes; k++) {
			const struct symbol_frame *fr = &info.frames[k];

			fprintf(f, "#\t%#llx\t", (unsigned long long)pcs[j]);
			/* "0x..." names carry their own offset, and so do
			 * "libfoo.so+0x1234" ones, unless 0x1234 is where the
			 * function starts (by its FDE): then the offset follows. */
			if (symbol_name_has_offset(fr->function) && !info.offset_in_function)
				fputs(fr->function, f);
			else
				fprintf(f, "%s+%#llx", fr->function,
					(unsigned long long)info.offset_in_function);
			fprintf(f, "\t%s:%d\n", symbol_file_or_module(fr, &info), fr->line);
		}
	}
}
