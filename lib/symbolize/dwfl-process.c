/*
 * The Dwfl of a target process: its modules as /proc/PID/maps shows them,
 * the vDSO included (dwfl_linux_proc_report() finds it through the auxv and
 * reads its image from /proc/PID/mem; a maps-file report would not), and
 * every module's ELF opened at once, while the process is there to read.
 *
 * The paths in /proc/PID/maps are the target's: in a container (another
 * mount namespace) they name files of the container, which the host may not
 * have, or have in another version. So files are opened as the target sees
 * them: the very file mapped (/proc/PID/map_files), else the path under
 * /proc/PID/root; debug files are looked for by build id in the container's
 * /usr/lib/debug too. The module keeps the target's path as its name.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "symbolize/debug-cache.h"
#include "symbolize/symbolize-private.h"
#include "target/target.h"
#include "unwind/unwind.h"

/* libdw's default, ":.debug:/usr/lib/debug", and then the container's. */
#define DEBUGINFO_PATH ":.debug:/usr/lib/debug"

/* What libdw does not keep: where each mapping is and its file offset. */
struct map_offset {
	uint64_t start, end, offset;
};

struct map_offsets {
	struct map_offset *v;
	size_t nr, alloc;
};

static int read_map_offsets(pid_t pid, struct map_offsets *ret)
{
	char path[64], *line = NULL;
	size_t cap = 0;
	FILE *f;
	int r = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		unsigned long long start, end, offset;

		if (sscanf(line, "%llx-%llx %*s %llx", &start, &end, &offset) != 3)
			continue;
		r = GROW(ret->v, ret->nr + 1, ret->alloc);
		if (r < 0)
			break;
		ret->v[ret->nr++] =
			(struct map_offset){ .start = start, .end = end, .offset = offset };
	}
	free(line);
	fclose(f);
	return r;
}

static const struct map_offset *map_offset_at(const struct map_offsets *mo, uint64_t start)
{
	for (size_t i = 0; i < mo->nr; i++)
		if (mo->v[i].start == start)
			return &mo->v[i];
	return NULL;
}

/* A regular file, or -1 (libdw's "not found"): devices could hang a read. */
static int open_regular(const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * libdw's find_elf for files: the module's sym_module is already hung on
 * @userdata (sym_module_setup() opens the ELF right after). In a container
 * the file name handed back is the one under /proc/PID/root, so that libdw
 * looks for a .gnu_debuglink file beside the container's binary, not the
 * host's; otherwise the path itself, as libdw's own find_elf does.
 */
static int find_elf_in_root(Dwfl_Module *mod, void **userdata, const char *name,
			    Dwarf_Addr base, char **file_name, Elf **elfp)
{
	const struct sym_module *m = *userdata;
	char path[PATH_MAX + 64];
	int fd = -1;

	if (!m || name[0] != '/')
		return dwfl_linux_proc_find_elf(mod, userdata, name, base, file_name, elfp);
	if (m->map_end) {
		snprintf(path, sizeof(path), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64,
			 (int)m->pid, m->pub.start, m->map_end);
		fd = open_regular(path); /* needs CAP_SYS_ADMIN: root only */
	}
	if (snprintf(path, sizeof(path), "/proc/%d/root%s", (int)m->pid, name) >=
	    (int)sizeof(path))
		goto out_fallback;
	if (fd < 0)
		fd = open_regular(path);
	if (fd < 0)
		goto out_fallback;
	*file_name = strdup(m->other_root ? path : name);
	if (!*file_name) {
		close(fd);
		return -1;
	}
	return fd;

out_fallback:
	/* A deleted file: libdw reads its image from memory if it can. */
	return dwfl_linux_proc_find_elf(mod, userdata, name, base, file_name, elfp);
}

static const char *build_id_hex(struct symbolizer *s, Dwfl_Module *mod)
{
	const unsigned char *bits;
	GElf_Addr vaddr;
	char hex[2 * 64 + 1];
	int n = dwfl_module_build_id(mod, &bits, &vaddr);

	if (n <= 0)
		return strpool_intern(&s->strings, "");
	if (n > 64)
		n = 64;
	for (int i = 0; i < n; i++)
		snprintf(hex + 2 * i, 3, "%02x", bits[i]);
	return strpool_intern(&s->strings, hex);
}

struct setup_ctx {
	struct symbolizer *s;
	const struct map_offsets *offsets;
	int error;
};

static bool is_main_module(const struct symbolizer *s, const char *name)
{
	return s->exe && !s->main_module && !strcmp(name, s->exe);
}

static int sym_module_setup(struct setup_ctx *ctx, Dwfl_Module *mod, void **userdata,
			    const char *name, Dwarf_Addr start)
{
	struct symbolizer *s = ctx->s;
	const struct map_offset *first = map_offset_at(ctx->offsets, start);
	struct sym_module *m;
	Dwarf_Addr end;
	const char *slash;
	int r;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	r = GROW(s->modules, s->nmodules + 1, s->modules_alloc);
	if (r < 0)
		goto out_free;
	m->mod = mod;
	m->pid = s->pid;
	m->other_root = s->other_root;
	m->pub.start = start;
	m->map_end = first ? first->end : 0;
	dwfl_module_info(mod, NULL, NULL, &end, NULL, NULL, NULL, NULL);
	/* "[vdso: 1234]" is libdw's name; pprof and people know "[vdso]".
	 * The program goes by the name it was started as (the same file). */
	if (!strncmp(name, "[vdso", 5))
		m->pub.path = strpool_intern(&s->strings, "[vdso]");
	else if (is_main_module(s, name) && s->program)
		m->pub.path = s->program;
	else
		m->pub.path = strpool_intern(&s->strings, name);
	/* Opening now is the point: the file, or the vDSO's memory, may go.
	 * find_elf_in_root() finds @m on the userdata. */
	*userdata = m;
	m->has_elf = dwfl_module_getelf(mod, &m->bias) != NULL;
	m->pub.build_id = build_id_hex(s, mod);
	if (!m->pub.path || !m->pub.build_id) {
		r = -ENOMEM;
		goto out_free;
	}
	slash = strrchr(m->pub.path, '/');
	m->base_name = slash ? slash + 1 : m->pub.path;
	m->pub.end = end;
	m->pub.offset = first ? first->offset : 0;
	if (!m->has_elf)
		m->bias = start;

	s->modules[s->nmodules++] = m;
	if (is_main_module(s, name))
		s->main_module = m;
	return 0;

out_free:
	*userdata = NULL;
	free(m);
	return r;
}

static int setup_cb(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start,
		    void *arg)
{
	struct setup_ctx *ctx = arg;
	int r;

	if (*userdata)
		return DWARF_CB_OK; /* set up by an earlier report */
	r = sym_module_setup(ctx, mod, userdata, name, start);
	if (r < 0) {
		ctx->error = r;
		return DWARF_CB_ABORT;
	}
	return DWARF_CB_OK;
}

/* Sets up the modules reported since the last call. */
static int setup_new_modules(struct symbolizer *s)
{
	struct map_offsets mo = { 0 };
	struct setup_ctx ctx = { .s = s, .offsets = &mo };
	int r;

	/* Offsets only decorate the profile's mappings: carry on without. */
	if (read_map_offsets(s->pid, &mo) == -ENOMEM)
		return -ENOMEM;
	r = dwfl_getmodules(s->dwfl, setup_cb, &ctx, 0) < 0 && !ctx.error ? -EIO : ctx.error;
	free(mo.v);
	return r;
}

/*
 * libdw skips a mapping whose file was deleted after it was mapped ("PATH
 * (deleted)" in the maps): a program upgraded or removed on disk while it
 * runs. The kernel still holds the very file: open it through
 * /proc/PID/map_files (root, or CAP_SYS_ADMIN; otherwise it stays unknown)
 * and report it at the address of its first mapping. Best effort.
 */
static void report_deleted(struct symbolizer *s)
{
	char path[64], file[128], *line = NULL;
	size_t cap = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)s->pid);
	f = fopen(path, "re");
	if (!f)
		return;
	while (getline(&line, &cap, f) > 0) {
		unsigned long long start, end, offset;
		int name_at = 0;
		size_t len;
		char *name;

		if (sscanf(line, "%llx-%llx %*s %llx %*s %*s %n", &start, &end, &offset,
			   &name_at) < 3 || !name_at)
			continue;
		name = line + name_at;
		len = strcspn(name, "\n");
		name[len] = '\0';
		/* The first mapping of the file (offset 0), once. */
		if (offset != 0 || name[0] != '/' || len < 11 ||
		    strcmp(name + len - 10, " (deleted)") != 0)
			continue;
		snprintf(file, sizeof(file), "/proc/%d/map_files/%llx-%llx", (int)s->pid, start, end);
		dwfl_report_elf(s->dwfl, name, file, -1, start, false);
	}
	free(line);
	fclose(f);
}

/*
 * libdw's three-valued answer (0, -1, errno) as -errno. Deleted files are
 * added in the @first report only: a later one keeps the modules it had,
 * and would take the same file again for an overlap.
 */
static int report_process(struct symbolizer *s, bool first)
{
	int r = dwfl_linux_proc_report(s->dwfl, s->pid);

	if (r == 0 && first)
		report_deleted(s);

	if (dwfl_report_end(s->dwfl, NULL, NULL) != 0 && r == 0)
		r = -1;
	if (r == 0)
		return 0;
	if (r < 0)
		return -EIO;
	return r == ENOENT ? -ESRCH : -r;
}

static const char *read_exe(struct symbolizer *s)
{
	char path[64], buf[PATH_MAX];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)s->pid);
	n = readlink(path, buf, sizeof(buf) - 1);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	return strpool_intern(&s->strings, buf);
}

/* The program's path as started (target_program_path()), or NULL: then
 * its module keeps the name of the file. */
static const char *read_program(struct symbolizer *s)
{
	char buf[PATH_MAX];

	if (!s->exe || target_program_path(s->pid, s->exe, buf, sizeof(buf)) < 0)
		return NULL;
	return strpool_intern(&s->strings, buf);
}

/* libdw keeps a pointer to the callbacks: they live in @s. */
static int setup_callbacks(struct symbolizer *s)
{
	char path[128];

	s->debuginfo_path = NULL; /* NULL: libdw's default */
	s->other_root = target_other_root(s->pid);
	if (s->other_root) {
		snprintf(path, sizeof(path), DEBUGINFO_PATH ":/proc/%d/root/usr/lib/debug",
			 (int)s->pid);
		s->debuginfo_path = strdup(path);
		if (!s->debuginfo_path)
			return -ENOMEM;
	}
	s->callbacks = (Dwfl_Callbacks){
		.find_elf = find_elf_in_root,
		/* A debuglink under the container's /usr/lib/debug/PATH is found
		 * too: libdw tries each tail of the file's directory in turn. */
		.find_debuginfo = debug_cache_find_debuginfo,
		.debuginfo_path = &s->debuginfo_path,
	};
	return 0;
}

int symbolizer_new(struct symbolizer **ret, pid_t pid)
{
	struct symbolizer *s;
	int r;

	if (pid <= 0)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->refs = 1;
	s->pid = pid;
	strpool_init(&s->strings);
	u64map_init(&s->cache);
	r = setup_callbacks(s);
	if (r < 0)
		goto out_free;
	s->dwfl = dwfl_begin(&s->callbacks);
	if (!s->dwfl) {
		r = -ENOMEM;
		goto out_free;
	}
	/* Before the report: a process with no exe link (a kernel thread) still
	 * has modules worth naming, so a missing one is no error. */
	s->exe = read_exe(s);
	s->program = read_program(s);
	dwfl_report_begin(s->dwfl);
	r = report_process(s, true);
	if (r < 0)
		goto out_free;
	r = setup_new_modules(s);
	if (r < 0)
		goto out_free;
	/* Without the maps, libdw's modules alone say what is whose. */
	if (sym_regions_read(s) == -ENOMEM) {
		r = -ENOMEM;
		goto out_free;
	}
	*ret = s;
	return 0;

out_free:
	symbolizer_unref(s);
	return r;
}

struct symbolizer *symbolizer_ref(struct symbolizer *s)
{
	s->refs++;
	return s;
}

int symbolizer_share(struct symbolizer **ret, struct symbolizer *shared, pid_t pid)
{
	if (!shared)
		return symbolizer_new(ret, pid);
	if (shared->pid != pid)
		return -EINVAL;
	/* -ESRCH keeps what it has: the caller finds the target gone itself. */
	symbolizer_refresh(shared);
	*ret = symbolizer_ref(shared);
	return 0;
}

void symbolizer_unref(struct symbolizer *s)
{
	if (!s || --s->refs > 0)
		return;
	for (size_t i = 0; i < s->ninfos; i++)
		free((void *)s->infos[i].frames);
	free(s->infos);
	u64map_release(&s->cache);
	free(s->scratch);
	for (size_t i = 0; i < s->nmodules; i++) {
		symtab_release(&s->modules[i]->symtab);
		free(s->modules[i]);
	}
	free(s->modules);
	if (s->dwfl)
		dwfl_end(s->dwfl);
	/* After dwfl_end(), which never calls back into it. */
	unwinder_free(s->unw);
	free(s->debuginfo_path);
	maps_release(&s->maps);
	free(s->perfmap.v);
	strpool_release(&s->strings);
	free(s);
}

Dwfl *symbolizer_dwfl(struct symbolizer *s)
{
	return s->dwfl;
}

int symbolizer_unwinder(struct symbolizer *s, struct unwinder **ret)
{
	int r;

	if (!s->unw) {
		r = unwinder_new(&s->unw, s->dwfl, s->pid);
		if (r < 0)
			return r;
	}
	*ret = s->unw;
	return 0;
}

int symbolizer_share_unwinding(struct symbolizer **ret, struct unwinder **ret_unw,
			       struct symbolizer *shared, pid_t pid, char *err, size_t errlen)
{
	int r = symbolizer_share(ret, shared, pid);

	if (r < 0) {
		*ret = NULL;
		snprintf(err, errlen, "cannot read the modules of pid %d: %s", pid, strerror(-r));
		return r;
	}
	r = symbolizer_unwinder(*ret, ret_unw);
	if (r < 0)
		snprintf(err, errlen, "cannot set up unwinding: %s", strerror(-r));
	return r;
}

int symbolizer_refresh(struct symbolizer *s)
{
	size_t before = s->nmodules;
	int r;

	/* Reporting a gone process would fail half-way; keep what we have. */
	if (kill(s->pid, 0) < 0 && errno == ESRCH)
		return -ESRCH;
	dwfl_report_begin_add(s->dwfl);
	r = report_process(s, false);
	if (r < 0)
		return r;
	r = setup_new_modules(s);
	if (r < 0)
		return r;
	if (sym_regions_read(s) == -ENOMEM)
		return -ENOMEM;
	if (s->nmodules != before)
		return sym_cache_forget_moduleless(s);
	return 0;
}

int symbolizer_refresh_arg(void *symbolizer)
{
	return symbolizer_refresh(symbolizer);
}

struct sym_module *symbolizer_module_of(struct symbolizer *s, uint64_t address)
{
	Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, address);
	void **userdata;

	if (!mod || sym_region_outside_files(s, address))
		return NULL;
	dwfl_module_info(mod, &userdata, NULL, NULL, NULL, NULL, NULL, NULL);
	return *userdata;
}

void sym_module_prepare(struct sym_module *m)
{
	Dwarf_Addr bias;

	if (m->prepared)
		return;
	m->prepared = true;
	/* Out of memory leaves the module without symbols, not broken. */
	if (m->has_elf && symtab_build(&m->symtab, m->mod) < 0)
		symtab_release(&m->symtab);
	if (m->has_elf)
		fde_table_find(m);
	m->pub.has_symbols = m->symtab.nr > 0;
	/* Looks in /usr/lib/debug (by build-id too) once; libdw remembers. */
	m->pub.has_lines = m->has_elf && dwfl_module_getdwarf(m->mod, &bias) != NULL;
}

const struct symbol_module *symbolizer_program(struct symbolizer *s)
{
	return s && s->main_module && s->main_module->prepared ? &s->main_module->pub : NULL;
}

struct module_search {
	const char *prefix;
	uint64_t start, end;
	bool found;
};

static int match_module(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start,
			void *arg)
{
	struct module_search *ms = arg;
	const char *path = NULL, *base;
	Dwarf_Addr lo, hi;

	(void)userdata, (void)name, (void)start;
	dwfl_module_info(mod, NULL, &lo, &hi, NULL, NULL, &path, NULL);
	base = path ? strrchr(path, '/') : NULL;
	if (!base || strncmp(base + 1, ms->prefix, strlen(ms->prefix)) != 0)
		return DWARF_CB_OK;
	ms->start = lo;
	ms->end = hi;
	ms->found = true;
	return DWARF_CB_ABORT;
}

int symbolizer_module_range(struct symbolizer *s, const char *prefix, uint64_t *ret_start,
			    uint64_t *ret_end)
{
	struct module_search ms = { .prefix = prefix };

	dwfl_getmodules(symbolizer_dwfl(s), match_module, &ms, 0);
	if (!ms.found)
		return -ENOENT;
	*ret_start = ms.start;
	*ret_end = ms.end;
	return 0;
}
