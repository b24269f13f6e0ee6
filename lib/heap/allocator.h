/*
 * Which allocator a program's executable carries inside itself, read from
 * its symbol tables before any agent is loaded. cprof heap hooks the
 * allocator's entry points through GOT slots (lib/agent/got.c); an
 * executable that defines malloc itself (an allocator linked statically),
 * or an allocator under a prefix of its own (je_, _rjem_ of Rust's
 * tikv-jemallocator, mi_, tc_), calls it directly, through no slot: its
 * heap profile would be silently empty.
 */
#ifndef CPROF_HEAP_ALLOCATOR_H
#define CPROF_HEAP_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct heap_allocator {
	bool hookable;
	/* When not: "jemalloc", "mimalloc", "tcmalloc" or "its own malloc",
	 * and the entry point the executable defines ("je_malloc"). */
	char name[32];
	char symbol[32];
};

/*
 * Inspects the ELF executable at @path (/proc/PID/exe). A static
 * executable is hookable as far as this check goes (no agent can be loaded
 * into it at all; the loader says so). 0 with *@ret filled, or -errno
 * (-ENOEXEC: not an ELF file); *@ret untouched on failure.
 */
int heap_allocator_inspect(const char *path, struct heap_allocator *ret);

/* Process @pid's executable carries an allocator no hook reaches (*@ret
 * says which); false when it does not or cannot be read. */
bool heap_allocator_unhookable(pid_t pid, struct heap_allocator *ret);

/* Why @a's calls are not profiled, one sentence into @buf. */
void heap_allocator_why(const struct heap_allocator *a, char *buf, size_t size);

#endif
