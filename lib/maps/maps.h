/*
 * /proc/PID/maps: the address space of the target, read before anything is
 * stopped (parsing it inside a pause would lengthen it). The text is untrusted:
 * maps_parse() takes any bytes and either accepts a line or skips it.
 */
#ifndef CPROF_MAPS_H
#define CPROF_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MAPS_READ 1
#define MAPS_WRITE 2
#define MAPS_EXEC 4

struct map_entry {
	uint64_t start, end; /* [start, end) */
	uint64_t offset;
	uint64_t inode;
	unsigned prot;       /* MAPS_READ | MAPS_WRITE | MAPS_EXEC */
	const char *path;    /* "" for anonymous, "[stack]", "[vdso]", a file */
};

struct maps {
	struct map_entry *entries; /* sorted by start, non-overlapping */
	size_t n, alloc;
	char *text; /* the strings point into this copy */
};

/* Reads /proc/@pid/maps. -ESRCH when the process is gone. */
int maps_read(pid_t pid, struct maps *ret);
/* Parses @len bytes of maps text (copied). Malformed lines are skipped. */
int maps_parse(const char *text, size_t len, struct maps *ret);
/* The entry containing @addr, or NULL. */
const struct map_entry *maps_find(const struct maps *m, uint64_t addr);
void maps_release(struct maps *m);

#endif
