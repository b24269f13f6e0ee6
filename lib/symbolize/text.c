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
	return strchr(name, '+') || !strncmp(name, "0x", 2);
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
			/* "libfoo.so+0x1234" and "0x..." names carry their own offset. */
			if (symbol_name_has_offset(fr->function))
				fputs(fr->function, f);
			else
				fprintf(f, "%s+%#llx", fr->function,
					(unsigned long long)info.offset_in_function);
			fprintf(f, "\t%s:%d\n", symbol_file_or_module(fr, &info), fr->line);
		}
	}
}
