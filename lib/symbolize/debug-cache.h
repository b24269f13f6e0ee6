/*
 * Uncompressed copies of the debug files whose sections are compressed
 * (Debian's -dbg packages: libc6-dbg's .debug_info is zlib'd). libdw
 * inflates every debug section of such a file when it opens it, into its
 * heap, in every cprof run that symbolizes a frame of the library. The
 * copy, made once per build id with libelf's own decompression, is mapped
 * instead and read as the frames need it.
 *
 * Where: $CPROF_CACHE_DIR if set ("off": no cache), else /var/cache/cprof
 * for root, else $XDG_CACHE_HOME/cprof or ~/.cache/cprof; the files are
 * debug/BUILD_ID.debug there, and may be deleted at any time. A copy is
 * used only if it carries the module's build id; one that cannot be made
 * (a read-only or full disk) leaves the compressed file in use.
 */
#ifndef CPROF_SYMBOLIZE_DEBUG_CACHE_H
#define CPROF_SYMBOLIZE_DEBUG_CACHE_H

#include <elfutils/libdwfl.h>

/* A Dwfl_Callbacks.find_debuginfo: dwfl_standard_find_debuginfo's file,
 * or its uncompressed copy. */
int debug_cache_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
			       Dwarf_Addr base, const char *file_name, const char *debuglink_file,
			       GElf_Word debuglink_crc, char **debuginfo_file_name);

#endif
