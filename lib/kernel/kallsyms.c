/*
 * /proc/kallsyms -> a sorted table of the kernel's text symbols. About 120k
 * lines on a distribution kernel: read once per profile, with --kernel only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/kernel.h"
#include "target/target.h"
#include "util/util.h"

static int add_name(struct kallsyms *ks, const char *name, const char *module, size_t *ret)
{
	size_t n = strlen(name), m = module ? strlen(module) + 3 : 0;
	int r = GROW(ks->names, ks->names_len + n + m + 1, ks->names_alloc);

	if (r < 0)
		return r;
	*ret = ks->names_len;
	memcpy(ks->names + ks->names_len, name, n);
	if (module)
		snprintf(ks->names + ks->names_len + n, m + 1, " [%s]", module);
	ks->names_len += n + m + 1;
	ks->names[ks->names_len - 1] = '\0';
	return 0;
}

/* "ffffffff81000000 T _text" or "ffffffffc0a01000 t foo\t[module]". */
static int parse_line(struct kallsyms *ks, char *line, bool *ret_nonzero)
{
	char *end, *name, *module;
	uint64_t addr = strtoull(line, &end, 16);
	char type;
	size_t off;
	int r;

	if (end == line || end[0] != ' ' || !end[1] || end[2] != ' ')
		return 0;
	type = end[1];
	if (type != 't' && type != 'T' && type != 'w' && type != 'W')
		return 0;
	name = end + 3;
	name[strcspn(name, "\n")] = '\0';
	module = strchr(name, '\t');
	if (module) {
		*module++ = '\0';
		if (*module == '[')
			module++;
		module[strcspn(module, "]")] = '\0';
	}
	if (!*name)
		return 0;
	if (addr)
		*ret_nonzero = true;
	r = add_name(ks, name, module, &off);
	if (r < 0)
		return r;
	r = GROW(ks->v, ks->nr + 1, ks->alloc);
	if (r < 0)
		return r;
	ks->v[ks->nr++] = (struct kallsyms_entry){ .addr = addr, .name = off };
	return 0;
}

static int entry_cmp(const void *a, const void *b)
{
	const struct kallsyms_entry *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	/* Among aliases, the first listed (the order kallsyms gives). */
	return x->name < y->name ? -1 : x->name > y->name;
}

int kallsyms_load(struct kallsyms *ks, const char *path)
{
	struct kallsyms t = { 0 };
	char *line = NULL;
	size_t cap = 0;
	bool nonzero = false;
	FILE *f;
	int r = 0;

	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		r = parse_line(&t, line, &nonzero);
		if (r < 0)
			break;
	}
	free(line);
	fclose(f);
	if (r == 0 && !t.nr)
		r = -ENOENT;
	else if (r == 0 && !nonzero)
		r = -EACCES;
	if (r < 0) {
		kallsyms_release(&t);
		return r;
	}
	qsort(t.v, t.nr, sizeof(*t.v), entry_cmp);
	*ks = t;
	return 0;
}

void kallsyms_release(struct kallsyms *ks)
{
	free(ks->v);
	free(ks->names);
	memset(ks, 0, sizeof(*ks));
}

const char *kallsyms_lookup(const struct kallsyms *ks, uint64_t addr)
{
	size_t lo = 0, hi = ks->nr;

	/* The last entry with v[i].addr <= addr; among equal ones the first. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ks->v[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return NULL;
	lo--;
	while (lo > 0 && ks->v[lo - 1].addr == ks->v[lo].addr)
		lo--;
	return ks->names + ks->v[lo].name;
}

void kallsyms_strerror(int err, char *buf, size_t size)
{
	int restrict_level = -1;

	if (err < 0)
		err = -err;
	if (err == EACCES) {
		proc_sysctl_int("kernel/kptr_restrict", &restrict_level);
		snprintf(buf, size,
			 "cannot name kernel frames: /proc/kallsyms shows every address as zero "
			 "(kernel.kptr_restrict is %d)\n"
			 "hint: run as root (with kptr_restrict <= 1), or "
			 "`sysctl kernel.kptr_restrict=0`; or profile without --kernel",
			 restrict_level);
		return;
	}
	snprintf(buf, size, "cannot read the kernel's symbols from /proc/kallsyms: %s\n"
			    "hint: profile without --kernel",
		 strerror(err));
}
