/*
 * perf's map of generated code, /tmp/perf-PID.map, which JITs write (node
 * --perf-basic-prof, the JVM's perf-map-agent, LuaJIT, .NET, CPython -X
 * perf): "START SIZE name" a line, hex, appended as code is made, so the
 * last line for an address is the one that holds. The file is the
 * target's: read inside its root, by the pid its own namespace gives it,
 * only when it is a regular file owned by root or by the target's user
 * (as perf does: anyone may write a file of that name in /tmp first), and
 * every line is untrusted text: bounded, its control characters shown as
 * '?' (they would reach the terminal and the profile).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "symbolize/symbolize-private.h"
#include "target/target.h"

/* What is read of a map at most: a JIT that never reuses an address grows
 * its map for ever. */
#define PERFMAP_MAX_BYTES (256u << 20)
/* Earlier entries looked at for an address the nearest one misses. */
#define PERFMAP_OVERLAP_SCAN 16
/* A longer line is skipped: no symbol name needs more. */
#define PERFMAP_MAX_LINE 4096

static int by_start(const void *a, const void *b)
{
	const struct perfmap_entry *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Whether @uid may have written @pid's map: root, or the process's user
 * (its real uid, or its /proc directory's owner: the effective one). */
static bool owner_ok(pid_t pid, uid_t uid)
{
	char path[32];
	struct target t;
	struct stat st;

	if (uid == 0)
		return true;
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (stat(path, &st) == 0 && st.st_uid == uid)
		return true;
	return target_open(&t, pid) == 0 && t.uid == uid;
}

/* The map as a stream: inside the target's root, regular, the target's,
 * never blocking. */
static FILE *open_map(pid_t pid)
{
	char path[64], fdpath[64];
	pid_t ns = target_ns_tid(pid, pid);
	struct stat st;
	FILE *f = NULL;
	int pfd, fd;

	snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)(ns ? ns : pid));
	pfd = target_open_in_root(pid, path, 0);
	if (pfd < 0)
		return NULL;
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", pfd);
	if (fstat(pfd, &st) == 0 && S_ISREG(st.st_mode) && owner_ok(pid, st.st_uid)) {
		fd = open(fdpath, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
		f = fd >= 0 ? fdopen(fd, "re") : NULL;
		if (!f && fd >= 0)
			close(fd);
	}
	close(pfd);
	return f;
}

/*
 * The next line of @f into @buf (PERFMAP_MAX_LINE), without its newline:
 * its length read, 0 at the end. A longer one is read to its end and
 * given as empty.
 */
static size_t next_line(FILE *f, char *buf)
{
	size_t n = 0, len;

	while (fgets(buf, PERFMAP_MAX_LINE, f)) {
		len = strlen(buf);
		n += len;
		if (len && buf[len - 1] == '\n') {
			buf[len - 1] = '\0';
			break;
		}
		if (len < PERFMAP_MAX_LINE - 1)
			break; /* the last line, without a newline */
	}
	if (n >= PERFMAP_MAX_LINE)
		buf[0] = '\0';
	return n;
}

int perfmap_read(struct symbolizer *s)
{
	struct perfmap *m = &s->perfmap;
	char line[PERFMAP_MAX_LINE];
	size_t read_bytes = 0, n;
	FILE *f;
	int r = 0;

	m->n = 0;
	f = open_map(s->pid);
	m->found = f != NULL;
	if (!f)
		return 0;
	while ((n = next_line(f, line)) > 0 && (read_bytes += n) <= PERFMAP_MAX_BYTES) {
		unsigned long long start, size;
		int name_at = 0;
		const char *name;

		if (sscanf(line, "%llx %llx %n", &start, &size, &name_at) != 2 || !name_at ||
		    !size || start + size < start || !line[name_at])
			continue;
		for (char *c = line + name_at; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '?';
		name = strpool_intern(&s->strings, line + name_at);
		r = name ? GROW(m->v, m->n + 1, m->alloc) : -ENOMEM;
		if (r < 0)
			break;
		m->v[m->n] = (struct perfmap_entry){ .start = start, .end = start + size,
						     .name = name, .seq = m->n };
		m->n++;
	}
	fclose(f);
	if (r == 0 && m->n)
		qsort(m->v, m->n, sizeof(*m->v), by_start);
	return r;
}

const char *perfmap_name(const struct symbolizer *s, uint64_t address)
{
	const struct perfmap *m = &s->perfmap;
	const struct perfmap_entry *best = NULL;
	size_t lo = 0, hi = m->n;

	/* The last entry starting at or below @address... */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->v[mid].start <= address)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* ... and a few before it that may hold it too: the latest wins. */
	for (size_t i = lo, k = 0; i > 0 && k < PERFMAP_OVERLAP_SCAN; i--, k++) {
		const struct perfmap_entry *e = &m->v[i - 1];

		if (address < e->end && (!best || e->seq > best->seq))
			best = e;
	}
	return best ? best->name : NULL;
}
