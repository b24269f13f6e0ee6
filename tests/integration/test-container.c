/*
 * A target in a container, profiled by its host pid.
 *
 * The container is made the way container runtimes make one: `unshare
 * --mount --pid --fork` and, inside, a bind mount of a minimal root that
 * becomes the root with pivot_root (not chroot: after a pivot, the host
 * reads the target's /proc/PID/maps with the container's paths, as it does
 * for Docker). The root holds tests/targets/demo at /app/target and its
 * libraries (from ldd) in /app/lib, paths the host does not have, so that
 * nothing can be read by the host path by mistake; the binary's build id is
 * changed in the copy, so the profile's build id tells which file was read.
 *
 *   - cpu: the target's functions come from the container's (stripped)
 *     binary and its debug file, found by .gnu_debuglink under the
 *     container's /usr/lib/debug; the mappings keep the container's paths
 *     and its build id; samples carry thread_id (host) and ns_thread_id (as
 *     the container numbers it);
 *   - threads --debug 2: "thread TID (ns tid N)" headers and the stacks of a
 *     stripped binary, named from its debug file in the container's
 *     /usr/lib/debug (by build id);
 *   - heap: a copy of the agent is placed in the container's /tmp, loaded,
 *     samples come back, the hooks are gone after; a second run reuses the
 *     resident agent, a new process of the container the same copy;
 *     block, mutex and threadcreate load it the same way; cprof SIGKILLed:
 *     the agent, which cannot see cprof's pid, unhooks by the heartbeat;
 *   - a container whose /tmp is a symlink out of it and whose /var/tmp
 *     anyone may write: cprof refuses to place the agent, and says why;
 *   - heap --source jemalloc: jeprofsites-jemalloc with its profiler on
 *     writes its dump into the container's /tmp, which cprof reads and
 *     empties (the host's /tmp is not where it goes).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/wire.h"
#include "session/session.h"
#include "testhelp.h"
#include "util/util.h"

TestSuite(container, .init = th_init, .fini = th_cleanup, .timeout = 120);

/*
 * demo's life in a container: longer than the longest test, sigkill_of_cprof
 * (up to three tries, each waiting out a late agent's call, then the
 * heartbeat's timeout). Its workers are not paced: block and mutex need
 * them to contend for the queue within a 1 s window, on a loaded host too.
 */
#define TARGET_SECONDS "60"

struct container {
	char root[1024];
	pid_t unshare; /* our child: unshare(1) */
	pid_t pid;     /* the target, pid 1 of its namespace, by its host pid */
	char build_id[128]; /* of the container's /app/target (changed) */
	char host_build_id[128]; /* of the host's build/targets/demo */
	bool jeprof;             /* /app/target is jeprofsites-jemalloc (CT_JEPROF) */
};

static const char *find_tool(const char *name)
{
	static const char *const dirs[] = { "/usr/bin", "/usr/sbin", "/bin", "/sbin" };
	static char path[8][256];
	static int next;
	char *p = path[next++ % 8];

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(p, 256, "%s/%s", dirs[i], name);
		if (access(p, X_OK) == 0)
			return p;
	}
	return NULL;
}

/* How the target is put in its container: pivot_root into $0. */
#define CONTAINER_SETUP                                                                          \
	"mount --bind \"$0\" \"$0\" && mount -t proc proc \"$0/proc\" && cd \"$0\" && "        \
	"pivot_root . old"

static void require_tools(void)
{
	if (geteuid() != 0)
		TH_SKIP_MISSING("containers need root (mount namespaces, ptrace): run as root");
	if (!find_tool("unshare") || !find_tool("pivot_root") || !find_tool("mount"))
		TH_SKIP_MISSING("unshare, pivot_root or mount (util-linux) not installed");
}

/* Skips unless this process may make the namespaces and pivot into @root. */
static void require_namespaces(const char *root)
{
	struct th_run r;

	th_run_cmd_ex(&r, 10000, 0, 0,
		      (const char *const[]){ find_tool("unshare"), "--mount", "--pid", "--fork",
					     "--propagation", "private", "/bin/sh", "-c",
					     CONTAINER_SETUP, root, NULL });
	if (r.exit_code != 0) {
		char why[256];

		snprintf(why, sizeof(why), "namespaces are not permitted here: unshare says %.200s",
			 r.err);
		th_run_release(&r);
		cr_skip_test("%s", why);
	}
	th_run_release(&r);
}

static void copy_file(const char *from, const char *to, mode_t mode)
{
	uint8_t *buf;
	size_t len;
	int fd;

	cr_assert_eq(th_read_file(from, &buf, &len), 0, "read %s", from);
	fd = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	cr_assert(fd >= 0, "create %s: %s", to, strerror(errno));
	cr_assert_eq(write(fd, buf, len), (ssize_t)len);
	cr_assert_eq(fchmod(fd, mode), 0);
	close(fd);
	free(buf);
}

static void make_dirs(const char root[1024], const char *rel, mode_t mode)
{
	char path[4096];
	size_t n = strlen(root);

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (char *p = path + n + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(path, 0755);
			*p = '/';
		}
	cr_assert(mkdir(path, mode) == 0 || errno == EEXIST, "mkdir %s: %s", path,
		  strerror(errno));
	cr_assert_eq(chmod(path, mode), 0);
}

/*
 * The build id of ELF file @path as hex into @hex; with @change, its first
 * byte is flipped in the file first (the code is untouched: only the note).
 */
static void build_id(const char *path, bool change, char *hex, size_t size)
{
	int fd = open(path, change ? O_RDWR : O_RDONLY);
	Elf *elf;
	Elf_Scn *scn = NULL;
	bool found = false;

	cr_assert(fd >= 0, "open %s", path);
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	cr_assert_not_null(elf);
	while (!found && (scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		GElf_Nhdr nh;
		Elf_Data *d;
		size_t off = 0, name_off, desc_off;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		d = elf_getdata(scn, NULL);
		while (d && (off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
			uint8_t *desc = (uint8_t *)d->d_buf + desc_off;

			if (nh.n_type != NT_GNU_BUILD_ID || nh.n_descsz == 0)
				continue;
			if (change) {
				uint8_t b = desc[0] ^ 0xff;
				off_t at = (off_t)(sh.sh_offset + desc_off);

				cr_assert_eq(pwrite(fd, &b, 1, at), 1);
				desc[0] = b;
			}
			for (size_t i = 0; i < nh.n_descsz && 2 * i + 2 < size; i++)
				snprintf(hex + 2 * i, 3, "%02x", desc[i]);
			found = true;
			break;
		}
	}
	elf_end(elf);
	close(fd);
	cr_assert(found, "%s has no build id", path);
}

/* Copies what `ldd @exe` lists: libraries to /app/lib, the loader where it
 * is asked for. */
static void copy_libraries(const char root[1024], const char *exe)
{
	const char *ldd = find_tool("ldd");
	struct th_run r;
	char *line, *save = NULL;

	cr_assert_not_null(ldd, "ldd not installed");
	th_run_cmd_ex(&r, 10000, 0, 0, (const char *const[]){ ldd, exe, NULL });
	cr_assert_eq(r.exit_code, 0, "ldd %s: %s", exe, r.err);
	for (line = strtok_r(r.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char lib[1024], to[2200];
		const char *arrow = strstr(line, "=> /");

		if (arrow && sscanf(arrow + 3, "%1023s", lib) == 1) {
			snprintf(to, sizeof(to), "%s/app/lib/%s", root, strrchr(lib, '/') + 1);
			copy_file(lib, to, 0755);
		} else if (sscanf(line, " %1023s", lib) == 1 && lib[0] == '/') {
			char dir[1024];

			snprintf(dir, sizeof(dir), "%s", lib + 1);
			*strrchr(dir, '/') = '\0';
			make_dirs(root, dir, 0755);
			snprintf(to, sizeof(to), "%s%s", root, lib);
			copy_file(lib, to, 0755);
		}
	}
	th_run_release(&r);
}

/* The child of @parent (its only one), or 0. */
static pid_t only_child(pid_t parent)
{
	char path[96], buf[256];

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", parent, parent);
	for (int i = 0; i < 200; i++) {
		FILE *f = fopen(path, "re");
		int pid = 0;

		if (f) {
			if (fgets(buf, sizeof(buf), f))
				pid = atoi(buf);
			fclose(f);
		}
		if (pid > 0)
			return pid;
		th_sleep_ms(10);
	}
	return 0;
}

enum {
	/* /tmp is a symlink to the host's /tmp, /var/tmp anyone may write. */
	CT_UNSAFE_TMP = 1,
	/* /app/target stripped; its debug file only in the container's
	 * /usr/lib/debug/.build-id (the host has none for its build id). */
	CT_STRIPPED = 2,
	/* The same, the debug file found by .gnu_debuglink at the container's
	 * /usr/lib/debug/app/target.debug (the old layout, no build id path). */
	CT_DEBUGLINK = 4,
	/* /app/target is jeprofsites-jemalloc, its jemalloc profiling. */
	CT_JEPROF = 8,
};

static void run_tool(const char *const *argv)
{
	struct th_run r;

	th_run_cmd_ex(&r, 20000, 0, 0, argv);
	cr_assert_eq(r.exit_code, 0, "%s: %s", argv[0], r.err);
	th_run_release(&r);
}

/* The debug file of @exe split off into the container's /usr/lib/debug:
 * in its .build-id tree, or (@debuglink) under the binary's path. */
static void split_debug(const struct container *c, const char *exe, bool debuglink)
{
	const char *objcopy = find_tool("objcopy"), *strip = find_tool("strip");
	char dir[64], debug[1300], link[1400];

	if (!objcopy || !strip)
		TH_SKIP_MISSING("objcopy or strip (binutils) not installed");
	if (debuglink)
		snprintf(dir, sizeof(dir), "usr/lib/debug/app");
	else
		snprintf(dir, sizeof(dir), "usr/lib/debug/.build-id/%.2s", c->build_id);
	make_dirs(c->root, dir, 0755);
	if (debuglink)
		snprintf(debug, sizeof(debug), "%s/%s/target.debug", c->root, dir);
	else
		snprintf(debug, sizeof(debug), "%s/%s/%s.debug", c->root, dir, c->build_id + 2);
	run_tool((const char *const[]){ objcopy, "--only-keep-debug", exe, debug, NULL });
	run_tool((const char *const[]){ strip, "--strip-all", exe, NULL });
	if (debuglink) {
		snprintf(link, sizeof(link), "--add-gnu-debuglink=%s", debug);
		run_tool((const char *const[]){ objcopy, link, exe, NULL });
		/* Only the debuglink may find it: not by build id. */
		snprintf(link, sizeof(link), "%s/usr/lib/debug/.build-id", c->root);
		cr_assert_neq(access(link, F_OK), 0);
	}
}

/* Starts /app/target as pid 1 of new namespaces, in the root @c->root. */
static void container_run(struct container *c)
{
	/* The target finds its libraries where the host has none. */
	setenv("LD_LIBRARY_PATH", "/app/lib", 1);
	if (c->jeprof)
		setenv("MALLOC_CONF", "prof:true,prof_accum:true,lg_prof_sample:12", 1);
	c->unshare = th_spawn_cmd(
		(const char *const[]){
			find_tool("unshare"), "--mount", "--pid", "--fork", "--kill-child",
			"--propagation", "private", "/bin/sh", "-c",
			c->jeprof ? CONTAINER_SETUP " && exec /app/target " TARGET_SECONDS
							" /app/report"
				  : CONTAINER_SETUP " && exec /app/target " TARGET_SECONDS " 2",
			c->root, NULL },
		"demo in a container");
	unsetenv("LD_LIBRARY_PATH");
	unsetenv("MALLOC_CONF");
	c->pid = only_child(c->unshare);
	cr_assert_gt(c->pid, 0, "no target under unshare %d", c->unshare);
}

/* Builds a root (CT_* @flags) and starts demo in it. */
static void container_start(struct container *c, unsigned flags)
{
	char exe[1100], host_exe[4096];

	require_tools();
	memset(c, 0, sizeof(*c));
	cr_assert_lt(snprintf(c->root, sizeof(c->root), "%s", th_tmp_dir("container")),
		     (int)sizeof(c->root));
	make_dirs(c->root, "app/lib", 0755);
	make_dirs(c->root, "proc", 0555);
	make_dirs(c->root, "old", 0755);
	if (flags & CT_UNSAFE_TMP) {
		char link[1100];

		snprintf(link, sizeof(link), "%s/tmp", c->root);
		cr_assert_eq(symlink("/tmp", link), 0);
		make_dirs(c->root, "var/tmp", 0777);
	} else {
		make_dirs(c->root, "tmp", 01777);
	}
	c->jeprof = flags & CT_JEPROF;
	snprintf(host_exe, sizeof(host_exe), "%s/%s", TARGETS_DIR,
		 c->jeprof ? "jeprofsites-jemalloc" : "demo");
	if (access(host_exe, X_OK) != 0)
		TH_SKIP_MISSING("%s is not built (libjemalloc-dev: scripts/setup)", host_exe);
	snprintf(exe, sizeof(exe), "%s/app/target", c->root);
	copy_file(host_exe, exe, 0755);
	build_id(host_exe, false, c->host_build_id, sizeof(c->host_build_id));
	build_id(exe, true, c->build_id, sizeof(c->build_id));
	if (flags & (CT_STRIPPED | CT_DEBUGLINK))
		split_debug(c, exe, flags & CT_DEBUGLINK);
	copy_libraries(c->root, host_exe);
	require_namespaces(c->root);
	container_run(c);
}

static void container_stop(struct container *c)
{
	/* The target is its namespace's init: the namespace goes with it. */
	if (c->pid > 0)
		kill(c->pid, SIGKILL);
	th_kill(c->unshare);
}

/* The innermost NSpid of @tid, read by the test itself; 0 if gone. */
static long ns_tid_of(pid_t pid, pid_t tid)
{
	char buf[4096];
	const char *p;
	long v = 0;

	if (th_task_read(pid, tid, "status", buf, sizeof(buf)) < 0)
		return 0;
	p = strstr(buf, "NSpid:");
	if (!p)
		return 0;
	p += 6;
	while (*p && *p != '\n') {
		char *end;
		long x = strtol(p, &end, 10);

		if (end == p)
			break;
		v = x;
		p = end;
	}
	return v;
}

static const struct profile_mapping *mapping_named(const struct profile *p, const char *file)
{
	for (size_t i = 0; i < p->nmappings; i++)
		if (p->mappings[i].file && strcmp(p->mappings[i].file, file) == 0)
			return &p->mappings[i];
	return NULL;
}

Test(container, cpu)
{
	struct container c;
	const struct profile_mapping *m;
	struct th_func_sum *sums;
	struct profile *p;
	struct th_run r;
	size_t nsums, labelled = 0;
	const char *out = th_tmp_path("cpu.pb.gz");

	container_start(&c, CT_DEBUGLINK);
	TH_CPROF(&r, 60000, "cpu", "-p", th_pid_str(c.pid), "-d", "2s", "-o", out);
	th_run_log(&r, "cprof cpu");
	cr_assert_eq(r.exit_code, 0);
	th_run_release(&r);
	p = th_load_profile(out);

	/* Functions of the container's binary, by name (the host has no
	 * /app/target to take them from). */
	th_func_sums(p, 0, &sums, &nsums);
	cr_assert_gt(th_func_get(sums, nsums, "compress_block").flat, 0,
		     "no samples in compress_block: the container's binary was not read");
	cr_assert_gt(th_func_get(sums, nsums, "worker").cum, 0);
	free(sums);

	/* Container paths, the container's build id (not the host's). */
	m = mapping_named(p, "/app/target");
	cr_assert_not_null(m, "no mapping named /app/target");
	cr_assert_str_eq(m->build_id, c.build_id, "build id of the host's copy?");
	cr_assert_str_neq(m->build_id, c.host_build_id);
	cr_assert(m->has_functions);
	m = mapping_named(p, "/app/lib/libc.so.6");
	cr_assert_not_null(m, "no mapping named /app/lib/libc.so.6");
	cr_assert_str_neq(m->build_id, "");

	/* thread_id is the host's, ns_thread_id the container's. */
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct profile_label *host = th_label(&p->samples[i], "thread_id");
		const struct profile_label *ns = th_label(&p->samples[i], "ns_thread_id");
		long truth;

		cr_assert_not_null(host);
		if (!ns || host->num == 0)
			continue;
		truth = ns_tid_of(c.pid, (pid_t)host->num);
		if (truth)
			cr_assert_eq(ns->num, truth, "tid %lld: ns_thread_id %lld, NSpid says %ld",
				     (long long)host->num, (long long)ns->num, truth);
		cr_assert_neq(ns->num, host->num);
		labelled++;
	}
	cr_assert_gt(labelled, 0, "no sample has ns_thread_id");
	profile_free(p);
	th_assert_pprof_ok(out);
	container_stop(&c);
}

/* The binary is stripped: names and lines come from the debug file in the
 * container's /usr/lib/debug, found by build id through /proc/PID/root. */
Test(container, threads)
{
	struct container c;
	struct th_run r;
	char want[128];

	container_start(&c, CT_STRIPPED);
	TH_CPROF(&r, 60000, "threads", "-p", th_pid_str(c.pid), "--debug", "2");
	th_run_log(&r, "cprof threads");
	cr_assert_eq(r.exit_code, 0);
	/* The target is pid 1 of its namespace; its workers have their tids. */
	snprintf(want, sizeof(want), "thread %d (ns tid 1) \"target\"", c.pid);
	cr_assert_not_null(strstr(r.out, want), "no header '%s' in:\n%s", want, r.out);
	cr_assert_not_null(strstr(r.out, "\"worker-0\""), "%s", r.out);
	cr_assert_not_null(strstr(r.out, "\nmain(...)"), "main not named:\n%s", r.out);
	cr_assert_not_null(strstr(r.out, "\nworker(...)"), "worker not named:\n%s", r.out);
	cr_assert_not_null(strstr(r.out, "demo.c:"), "no file:line:\n%s", r.out);
	th_run_release(&r);
	th_assert_let_go(c.pid, false, "after cprof threads");
	container_stop(&c);
}

/* The copies of the agent in the container's /tmp. */
static int agent_copies(const struct container *c)
{
	char dir[1100];

	snprintf(dir, sizeof(dir), "%s/tmp", c->root);
	return th_dir_entries(dir);
}

/* @expect: the note cprof gives about the agent's copy ("placed", "found")
 * or NULL for none (an agent resident in the target already). */
static void run_heap(const struct container *c, const char *out, const char *expect)
{
	char note[128];
	struct profile *p;
	struct th_run r;
	int alloc;

	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(c->pid), "-d", "2s", "-o", out);
	th_run_log(&r, "cprof heap");
	cr_assert_eq(r.exit_code, 0);
	snprintf(note, sizeof(note), "loaded a copy of the agent %s at /tmp/cprof-agent-",
		 expect ? expect : "");
	if (expect)
		cr_assert_not_null(strstr(r.err, note), "no '%s' in: %s", note, r.err);
	else
		cr_assert_null(strstr(r.err, "loaded a copy of the agent"), "%s", r.err);
	th_run_release(&r);
	p = th_load_profile(out);
	alloc = th_sample_type(p, "alloc_space", "bytes");
	cr_assert_geq(alloc, 0);
	cr_assert_gt(profile_total(p, (size_t)alloc), 0, "no allocation sampled");
	profile_free(p);
}

/*
 * Files a copy must not be taken for: the agent's bytes but writable by
 * anyone, and root's 0644 file one byte off. */
static void plant_decoys(const struct container *c)
{
	char path[1200];
	uint8_t *buf;
	size_t len;

	cr_assert_eq(th_read_file(CPROF_AGENT_PATH, &buf, &len), 0);
	snprintf(path, sizeof(path), "%s/tmp/cprof-agent-0000000000000001.so", c->root);
	copy_file(CPROF_AGENT_PATH, path, 0666);
	snprintf(path, sizeof(path), "%s/tmp/cprof-agent-0000000000000002.so", c->root);
	copy_file(CPROF_AGENT_PATH, path, 0644);
	{
		int fd = open(path, O_WRONLY | O_CLOEXEC);
		uint8_t b = buf[len / 2] ^ 1;

		cr_assert(fd >= 0);
		cr_assert_eq(pwrite(fd, &b, 1, (off_t)(len / 2)), 1);
		close(fd);
	}
	free(buf);
}

Test(container, heap)
{
	struct container c;
	struct cprof_wire_header *h;
	char path[1400];
	struct stat st;
	DIR *d;
	struct dirent *e;

	container_start(&c, 0);
	plant_decoys(&c);
	run_heap(&c, th_tmp_path("heap1.pb.gz"), "placed");
	cr_assert_eq(agent_copies(&c), 3, "decoys used, or more than one copy written");

	/* The copy: root's, 0644, in the sticky /tmp, mapped by the target. */
	snprintf(path, sizeof(path), "%s/tmp", c.root);
	d = opendir(path);
	cr_assert_not_null(d);
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, "cprof-agent-", 12) && strncmp(e->d_name + 12, "000000", 6))
			snprintf(path, sizeof(path), "%s/tmp/%s", c.root, e->d_name);
	closedir(d);
	cr_assert_eq(lstat(path, &st), 0);
	cr_assert(S_ISREG(st.st_mode) && st.st_uid == 0 && (st.st_mode & 07777) == 0644);

	h = th_agent_header(c.pid);
	cr_assert_not_null(h, "no agent channel in the target");
	cr_assert_eq(h->state, CPROF_STATE_DETACHED, "hooks left after the window");
	/* Ended by cprof at the end of the window, not by a watchdog that took
	 * cprof for dead because it could not see its pid. */
	cr_assert_eq(h->detach_reason, CPROF_DETACH_COMMAND, "detach reason %u",
		     h->detach_reason);
	cr_assert_eq(h->hooked, 0);
	munmap(h, CPROF_WIRE_HEADER_SIZE);
	th_assert_let_go(c.pid, false, "after cprof heap");

	/* Again: the resident copy is reused, no second one. */
	run_heap(&c, th_tmp_path("heap2.pb.gz"), NULL);
	cr_assert_eq(agent_copies(&c), 3);
	th_assert_let_go(c.pid, false, "after the second cprof heap");

	/* A new process in the same container: the copy there is checked and
	 * loaded, not one more written. */
	container_stop(&c);
	container_run(&c);
	run_heap(&c, th_tmp_path("heap3.pb.gz"), "found");
	cr_assert_eq(agent_copies(&c), 3);
	th_assert_let_go(c.pid, false, "after cprof heap in a new process");
	container_stop(&c);
}

/* The other agent commands go in the same way, and reuse the same copy. */
Test(container, block_mutex_threadcreate)
{
	static const char *const cmds[] = { "block", "mutex", "threadcreate" };
	struct container c;

	container_start(&c, 0);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		const char *out = th_tmp_path(cmds[i]);
		struct profile *p;
		struct th_run r;

		TH_CPROF(&r, 60000, cmds[i], "-p", th_pid_str(c.pid), "-d", "1s", "-o", out);
		th_run_log(&r, cmds[i]);
		cr_assert_eq(r.exit_code, 0, "cprof %s", cmds[i]);
		cr_assert_null(strstr(r.err, "ended its session"), "%s", r.err);
		th_run_release(&r);
		p = th_load_profile(out);
		/* demo's workers wait for the acceptor and contend for its queue;
		 * it creates no thread once running. */
		if (i < 2)
			cr_assert_gt(profile_total(p, 0), 0, "no contention seen by cprof %s",
				     cmds[i]);
		profile_free(p);
		th_assert_let_go(c.pid, false, cmds[i]);
	}
	cr_assert_eq(agent_copies(&c), 1);
	container_stop(&c);
}

/* The agent cannot see cprof's pid from inside: the heartbeat must do. */
Test(container, sigkill_of_cprof)
{
	struct container c;
	struct cprof_wire_header *h;
	struct th_run r;
	uint64_t killed;
	bool detached = false;

	container_start(&c, 0);
	/* Killed once the agent is in: on a loaded machine (or in ASan) that
	 * can take longer than the first try allows. */
	for (int delay_ms = 1500;; delay_ms *= 2) {
		th_run_cprof_ex(&r, 60000, SIGKILL, delay_ms,
				(const char *const[]){ "heap", "-p", th_pid_str(c.pid), "-d", "20s",
						       "-o", th_tmp_path("killed.pb.gz"), NULL });
		killed = r.signal_ns;
		if (r.exit_code != 128 + SIGKILL)
			th_run_log(&r, "heap, to be killed");
		cr_assert_eq(r.exit_code, 128 + SIGKILL, "cprof was not killed mid-window");
		th_run_release(&r);
		/* A call cprof launched finishes by itself, within its bound:
		 * the agent may come in after cprof is gone. */
		h = NULL;
		for (int waited = 0; !h && waited <= AGENT_SESSION_CALL_TIMEOUT_MS; waited += 100) {
			th_sleep_ms(100);
			h = th_agent_header(c.pid);
		}
		if (h || delay_ms >= 6000)
			break;
		cr_log_info("killed after %d ms: the agent was not in yet; again", delay_ms);
	}
	cr_assert_not_null(h, "no agent channel in the target");
	killed = MAX(killed, th_now_ns() - 100000000ull); /* or the agent came later */
	cr_assert_eq(h->cprof_pid, 0, "cprof's host pid given to an agent that cannot see it");
	while (th_now_ns() - killed < (CPROF_WIRE_HEARTBEAT_ALONE_TIMEOUT_MS + 4000) * 1000000ull) {
		if (__atomic_load_n(&h->state, __ATOMIC_ACQUIRE) == CPROF_STATE_DETACHED) {
			detached = true;
			break;
		}
		th_sleep_ms(10);
	}
	cr_assert(kill(c.pid, 0) == 0, "the target is gone (it lives %s s)", TARGET_SECONDS);
	cr_assert(detached, "the agent is still hooked %u s after cprof died",
		  CPROF_WIRE_HEARTBEAT_ALONE_TIMEOUT_MS / 1000 + 4);
	cr_assert_eq(h->detach_reason, CPROF_DETACH_HEARTBEAT);
	cr_assert_eq(h->hooked, 0);
	munmap(h, CPROF_WIRE_HEADER_SIZE);
	th_assert_let_go(c.pid, false, "after cprof was killed");
	container_stop(&c);
}

/* Copies of the agent in the host's /tmp made since @since (seconds). */
static int host_copies_since(time_t since)
{
	DIR *d = opendir("/tmp");
	struct dirent *e;
	int n = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d))) {
		char path[512];
		struct stat st;

		snprintf(path, sizeof(path), "/tmp/%s", e->d_name);
		if (!strncmp(e->d_name, "cprof-agent-", 12) && lstat(path, &st) == 0 &&
		    st.st_mtime >= since)
			n++;
	}
	closedir(d);
	return n;
}

Test(container, unsafe_tmp_refused)
{
	struct container c;
	struct th_run r;
	char dir[1100];
	time_t start = time(NULL);

	container_start(&c, CT_UNSAFE_TMP);
	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(c.pid), "-d", "1s", "-o",
		 th_tmp_path("refused.pb.gz"));
	th_run_log(&r, "cprof heap");
	cr_assert_eq(r.exit_code, 2);
	cr_assert_not_null(strstr(r.err, "no copy of the agent could be placed"), "%s", r.err);
	th_run_release(&r);
	/* Nothing through the symlink into the host's /tmp, nothing in the
	 * container's /var/tmp that anyone could replace. */
	cr_assert_eq(host_copies_since(start), 0, "the agent was written to the host's /tmp");
	snprintf(dir, sizeof(dir), "%s/var/tmp", c.root);
	cr_assert_eq(th_dir_entries(dir), 0);
	th_assert_let_go(c.pid, false, "after refusing");
	container_stop(&c);
}

/* jemalloc's own profile of a target in a container: dumped into the
 * container's /tmp (a directory the host's /tmp is not), read, removed. */
Test(container, heap_source_jemalloc)
{
	const char *out = th_tmp_path("heap-jemalloc-ct.pb.gz");
	char report[1100];
	struct container c;
	struct profile *p;
	struct th_run r;
	int inuse;

	container_start(&c, CT_JEPROF);
	/* jeprofsites is done allocating once its report is there. */
	snprintf(report, sizeof(report), "%s/app/report", c.root);
	for (int i = 0; i < 200 && access(report, F_OK) != 0; i++)
		th_sleep_ms(25);
	cr_assert_eq(access(report, F_OK), 0, "jeprofsites wrote no report");
	TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(c.pid), "--source", "jemalloc", "-o", out);
	th_run_log(&r, "cprof heap --source jemalloc");
	cr_assert_eq(r.exit_code, 0);
	cr_expect(strstr(r.err, "jemalloc's own heap profile"), "%s", r.err);
	th_run_release(&r);
	/* The agent's copy is all that stays in its /tmp. */
	cr_expect_eq(agent_copies(&c), 1, "the dump was left in the container's /tmp");
	p = th_load_profile(out);
	inuse = th_sample_type(p, "inuse_space", "bytes");
	cr_assert_geq(inuse, 0);
	/* retain_1k and retain_16k keep 73,728,000 bytes. */
	cr_expect_gt(profile_total(p, (size_t)inuse), 70000000, "in use: %lld",
		     (long long)profile_total(p, (size_t)inuse));
	profile_free(p);
	th_assert_let_go(c.pid, false, "after cprof heap --source jemalloc");
	container_stop(&c);
}
