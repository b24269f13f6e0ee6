#include "maps/maps.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"

static bool hex_field(const char **p, const char *end, char stop, uint64_t *ret)
{
	uint64_t v = 0;
	int digits = 0;

	while (*p < end && **p != stop) {
		char c = **p;
		int d = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;

		if (d < 0 || ++digits > 16)
			return false;
		v = v << 4 | (uint64_t)d;
		(*p)++;
	}
	if (!digits || *p >= end)
		return false;
	(*p)++; /* the stop character */
	*ret = v;
	return true;
}

static bool dec_field(const char **p, const char *end, uint64_t *ret)
{
	uint64_t v = 0;
	int digits = 0;

	while (*p < end && **p >= '0' && **p <= '9') {
		if (++digits > 19)
			return false;
		v = v * 10 + (uint64_t)(**p - '0');
		(*p)++;
	}
	*ret = v;
	return digits > 0;
}

/* "start-end perms offset dev inode   path" ; @line is NUL-terminated in place. */
static bool parse_line(char *line, char *end, struct map_entry *e)
{
	const char *p = line;
	uint64_t dummy;

	memset(e, 0, sizeof(*e));
	if (!hex_field(&p, end, '-', &e->start) || !hex_field(&p, end, ' ', &e->end) ||
	    e->end <= e->start)
		return false;
	if (end - p < 5)
		return false;
	e->prot = (p[0] == 'r' ? MAPS_READ : 0) | (p[1] == 'w' ? MAPS_WRITE : 0) |
		  (p[2] == 'x' ? MAPS_EXEC : 0);
	p += 5;
	if (!hex_field(&p, end, ' ', &e->offset))
		return false;
	/* dev "maj:min" */
	if (!hex_field(&p, end, ':', &dummy) || !hex_field(&p, end, ' ', &dummy))
		return false;
	if (!dec_field(&p, end, &e->inode))
		return false;
	while (p < end && *p == ' ')
		p++;
	e->path = p;
	return true;
}

int maps_parse(const char *text, size_t len, struct maps *ret)
{
	struct maps m = { 0 };
	char *line;
	int r;

	m.text = malloc(len + 1);
	if (!m.text)
		return -ENOMEM;
	memcpy(m.text, text, len);
	m.text[len] = '\0';
	line = m.text;
	while (line < m.text + len) {
		char *nl = memchr(line, '\n', (size_t)(m.text + len - line));
		char *end = nl ? nl : m.text + len;
		struct map_entry e;

		*end = '\0';
		/* Kernel output is sorted; anything else is malformed and skipped. */
		if (strlen(line) == (size_t)(end - line) && parse_line(line, end, &e) &&
		    (!m.n || e.start >= m.entries[m.n - 1].end)) {
			r = GROW(m.entries, m.n + 1, m.alloc);
			if (r < 0) {
				maps_release(&m);
				return r;
			}
			m.entries[m.n++] = e;
		}
		line = end + 1;
	}
	*ret = m;
	return 0;
}

int maps_read(pid_t pid, struct maps *ret)
{
	char path[64];
	char *buf = NULL;
	size_t len = 0, alloc = 0;
	int fd, r;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	for (;;) {
		ssize_t n;

		r = GROW(buf, len + 65536, alloc);
		if (r < 0)
			goto out_free;
		n = read(fd, buf + len, alloc - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = errno == ENOENT ? -ESRCH : -errno;
			goto out_free;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	r = maps_parse(buf ? buf : "", len, ret);
out_free:
	free(buf);
	close(fd);
	return r;
}

const struct map_entry *maps_find(const struct maps *m, uint64_t addr)
{
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (addr < m->entries[mid].start)
			hi = mid;
		else if (addr >= m->entries[mid].end)
			lo = mid + 1;
		else
			return &m->entries[mid];
	}
	return NULL;
}

void maps_release(struct maps *m)
{
	if (!m)
		return;
	free(m->entries);
	free(m->text);
	memset(m, 0, sizeof(*m));
}
