/* Uncompressed copies of compressed debug files (debug-cache.h). */
#include "symbolize/debug-cache.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <elfutils/libdwelf.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define COPY_CHUNK (1u << 20)

/* Whether a section of @e is compressed as libdw would inflate it; *@gnu
 * for one in the older .zdebug form (not copied: see make_copy()). */
static bool compressed(Elf *e, bool *gnu)
{
	size_t shstrndx;
	Elf_Scn *scn = NULL;
	bool any = false;

	*gnu = false;
	if (elf_getshdrstrndx(e, &shstrndx) < 0)
		return false;
	while ((scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		const char *name;

		if (!gelf_getshdr(scn, &sh))
			continue;
		name = elf_strptr(e, shstrndx, sh.sh_name);
		if (name && !strncmp(name, ".zdebug", 7))
			*gnu = true;
		any |= (sh.sh_flags & SHF_COMPRESSED) != 0;
	}
	return any;
}

/* @dir and its parents, made where missing (0755 for root, else 0700). */
static int make_dirs(char *dir)
{
	mode_t mode = geteuid() == 0 ? 0755 : 0700;
	struct stat st;

	if (stat(dir, &st) == 0)
		return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(dir, mode) < 0 && errno != EEXIST) {
			*p = '/';
			return -errno;
		}
		*p = '/';
	}
	return mkdir(dir, mode) < 0 && errno != EEXIST ? -errno : 0;
}

/* The cache's directory into @buf, made if missing when @make; -ENOENT:
 * no cache. A directory another user may write to is not used: its copies
 * would be theirs. */
static int cache_dir(char *buf, size_t size, bool make)
{
	const char *env = getenv("CPROF_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
		   *home = getenv("HOME");
	struct stat st;
	int n, r;

	if (env && (!*env || !strcmp(env, "off")))
		return -ENOENT;
	if (env)
		n = snprintf(buf, size, "%s/debug", env);
	else if (geteuid() == 0)
		n = snprintf(buf, size, "/var/cache/cprof/debug");
	else if (xdg && xdg[0] == '/')
		n = snprintf(buf, size, "%s/cprof/debug", xdg);
	else if (home && home[0] == '/')
		n = snprintf(buf, size, "%s/.cache/cprof/debug", home);
	else
		return -ENOENT;
	if (n < 0 || (size_t)n >= size || buf[0] != '/')
		return -ENOENT;
	r = make ? make_dirs(buf) : 0;
	if (r < 0)
		return r;
	if (stat(buf, &st) < 0)
		return -errno;
	if (st.st_uid != geteuid() || (st.st_mode & 022))
		return -EPERM;
	return 0;
}

/* Whether every section of @e, and their table, lie within @size bytes:
 * a copy cut short would give wrong names, not none. */
static bool whole(Elf *e, off_t size)
{
	GElf_Ehdr eh;
	Elf_Scn *scn = NULL;
	size_t n;

	if (!gelf_getehdr(e, &eh) || elf_getshdrnum(e, &n) < 0 || n == 0 ||
	    eh.e_shoff + (uint64_t)n * eh.e_shentsize > (uint64_t)size)
		return false;
	while ((scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;

		if (!gelf_getshdr(scn, &sh))
			return false;
		if (sh.sh_type != SHT_NOBITS && sh.sh_offset + sh.sh_size > (uint64_t)size)
			return false;
	}
	return true;
}

/* Whether the file open at @fd is a whole, uncompressed debug file of
 * build id @id (@len bytes). */
static bool good_copy(int fd, const unsigned char *id, int len)
{
	const void *got = NULL;
	struct stat st;
	bool gnu, ok;
	Elf *e;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return false;
	e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!e)
		return false;
	ok = whole(e, st.st_size) && dwelf_elf_gnu_build_id(e, &got) == len &&
	     !memcmp(got, id, (size_t)len) && !compressed(e, &gnu);
	elf_end(e);
	return ok;
}

static int copy_file(int from, int to)
{
	char *buf = malloc(COPY_CHUNK);
	off_t at = 0;
	ssize_t n;
	int r = 0;

	if (!buf)
		return -ENOMEM;
	while ((n = pread(from, buf, COPY_CHUNK, at)) > 0) {
		if (write(to, buf, (size_t)n) != n) {
			r = -EIO;
			break;
		}
		at += n;
	}
	if (n < 0)
		r = -errno;
	free(buf);
	return r;
}

/*
 * The uncompressed copy of the debug file at @from, made in @dir as @path
 * (written beside it, then renamed: a cprof running at the same time
 * sees the whole file or none). 0 or -errno.
 */
static int make_copy(int from, const char *dir, const char *path)
{
	char tmp[PATH_MAX];
	Elf_Scn *scn = NULL;
	Elf *e = NULL;
	int fd, r;

	if (snprintf(tmp, sizeof(tmp), "%s/.new-XXXXXX", dir) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = copy_file(from, fd);
	if (r < 0)
		goto out_unlink;
	e = elf_begin(fd, ELF_C_RDWR, NULL);
	if (!e) {
		r = -EINVAL;
		goto out_unlink;
	}
	while ((scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;

		if (gelf_getshdr(scn, &sh) && (sh.sh_flags & SHF_COMPRESSED) &&
		    elf_compress(scn, 0, 0) < 0) {
			r = -EINVAL;
			goto out_end;
		}
	}
	if (elf_update(e, ELF_C_WRITE) < 0) {
		r = -EIO;
		goto out_end;
	}
	elf_end(e);
	if (fchmod(fd, 0644) < 0 || rename(tmp, path) < 0) {
		r = -errno;
		goto out_unlink;
	}
	close(fd);
	return 0;

out_end:
	elf_end(e);
out_unlink:
	unlink(tmp);
	close(fd);
	return r;
}

/* The path of the copy for build id @id (@len bytes) in cache directory
 * @dir, into @path. */
static int copy_path(const unsigned char *id, int len, const char *dir, char *path, size_t size)
{
	int n = snprintf(path, size, "%s/", dir);

	for (int i = 0; i < len && n > 0 && (size_t)n < size; i++)
		n += snprintf(path + n, size - (size_t)n, "%02x", id[i]);
	if (n < 0 || (size_t)n + sizeof(".debug") > size)
		return -ENAMETOOLONG;
	memcpy(path + n, ".debug", sizeof(".debug"));
	return 0;
}

/* The copy of debug file @name of build id @id for the next run, if it is
 * compressed: the cache's directory is made only then. */
static void make_copy_of(const char *name, const unsigned char *id, int len)
{
	char dir[PATH_MAX], path[PATH_MAX + 80];
	int from = open(name, O_RDONLY | O_CLOEXEC);
	Elf *e;
	bool gnu, packed;

	if (from < 0)
		return;
	e = elf_begin(from, ELF_C_READ_MMAP, NULL);
	packed = e && compressed(e, &gnu);
	elf_end(e);
	if (packed && !gnu && cache_dir(dir, sizeof(dir), true) == 0 &&
	    copy_path(id, len, dir, path, sizeof(path)) == 0)
		make_copy(from, dir, path);
	close(from);
}

/*
 * A copy made by an earlier run is returned before libdw looks: its own
 * lookup by build id keeps the Elf it opens (the descriptor a callback
 * returns after it is not read), so this run reads the compressed file,
 * and makes the copy for the next.
 */
int debug_cache_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
			       Dwarf_Addr base, const char *file_name, const char *debuglink_file,
			       GElf_Word debuglink_crc, char **debuginfo_file_name)
{
	char dir[PATH_MAX], path[PATH_MAX + 80];
	const unsigned char *id;
	GElf_Addr vaddr;
	int len, fd;

	len = dwfl_module_build_id(mod, &id, &vaddr);
	if (len <= 0 || len > 64)
		return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name,
						    debuglink_file, debuglink_crc,
						    debuginfo_file_name);
	if (cache_dir(dir, sizeof(dir), false) == 0 &&
	    copy_path(id, len, dir, path, sizeof(path)) == 0) {
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd >= 0 && good_copy(fd, id, len)) {
			char *name = strdup(path);

			if (name) {
				free(*debuginfo_file_name);
				*debuginfo_file_name = name;
				return fd;
			}
		}
		if (fd >= 0)
			close(fd);
	}
	fd = dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file,
					  debuglink_crc, debuginfo_file_name);
	if (fd >= 0 && *debuginfo_file_name)
		make_copy_of(*debuginfo_file_name, id, len);
	return fd;
}
