/*
 * Every failure between the agent's load and its detach unhooks it before
 * cprof exits (issue 36). Each test-only fault switch (lib/util/fault.h,
 * CPROF_TEST_FAULT=NAME) makes one step fail as a real failure there
 * would; each is run here with heap and with record on a fresh demo (those
 * of serve's own steps with serve, those of heap --keep's sampler with it),
 * and after cprof's exit (serve's: while it still serves):
 *
 *   - cprof said the switch fired, and did not exit 0;
 *   - no thread of the target is traced or stopped;
 *   - the agent ended its session because cprof told it to (its channel,
 *     or a call of cprof_agent_detach()), not because its watchdog saw
 *     cprof exit or its heartbeat stop: the hooks went before cprof did;
 *   - no GOT entry of any module of the target points into the agent's
 *     code, read from the target's memory with its sections' bounds taken
 *     from each file (libelf), not from cprof.
 *
 * switches[] lists them all: a switch in the sources that is not listed
 * here, or one listed that the sources no longer have, fails the test.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "agent/wire.h"
#include "serve-client.h"
#include "testhelp.h"
#include "util/util.h"

#ifndef SOURCE_DIR
#error "SOURCE_DIR must point at the source tree (for the switches)"
#endif

TestSuite(faults, .init = th_init, .fini = th_cleanup, .timeout = 300);

/* Where a switch stands: every agent command's steps, serve's own (serve
 * goes on without the agent: the hooks must go while it serves), or those
 * of heap --keep's background sampler. */
enum where { EVERY, SERVE, KEEP };

static const struct {
	const char *name;
	enum where where;
} switches[] = {
	{ "agent-channel", EVERY },  /* the agent's channel cannot be opened */
	{ "agent-builders", EVERY }, /* the profile's builders cannot be made */
	{ "window-drain", EVERY },   /* a drain of the records fails mid-window */
	{ "window-live", EVERY },    /* the live set's last snapshot fails */
	{ "serve-agent", SERVE },    /* serve's session fails once the agent is in */
	{ "keep-listen", KEEP },     /* --keep's socket cannot listen, profile written */
};

/* ---- the switches the sources have ----------------------------------------- */

static void add_found(char (*found)[64], size_t *n, size_t max, const char *name, size_t len)
{
	for (size_t i = 0; i < *n; i++)
		if (strlen(found[i]) == len && !strncmp(found[i], name, len))
			return;
	cr_assert_lt(*n, max, "more switches than the test can hold");
	snprintf(found[(*n)++], 64, "%.*s", (int)len, name);
}

/* The names of fault_injected("NAME") in the C files under @dir. */
static void scan_dir(const char *dir, regex_t *re, char (*found)[64], size_t *n, size_t max)
{
	char cmd[4200];
	struct th_run r;

	snprintf(cmd, sizeof(cmd), "%s/%s", SOURCE_DIR, dir);
	th_run_cmd_ex(&r, 30000, 0, 0,
		      (const char *const[]){ "/usr/bin/grep", "-rhoE", "--include=*.c",
					     "fault_injected\\(\"[^\"]+\"\\)", cmd, NULL });
	cr_assert(r.exit_code == 0 || r.exit_code == 1, "grep: %s", r.err);
	for (char *line = r.out; line && *line;) {
		char *end = strchr(line, '\n');
		regmatch_t m[2];

		if (end)
			*end = 0;
		if (regexec(re, line, 2, m, 0) == 0)
			add_found(found, n, max, line + m[1].rm_so, (size_t)(m[1].rm_eo - m[1].rm_so));
		line = end ? end + 1 : NULL;
	}
	th_run_release(&r);
}

Test(faults, every_switch_is_listed)
{
	char found[32][64];
	size_t n = 0;
	regex_t re;

	cr_assert_eq(regcomp(&re, "fault_injected\\(\"([^\"]+)\"\\)", REG_EXTENDED), 0);
	scan_dir("lib", &re, found, &n, 32);
	scan_dir("cli", &re, found, &n, 32);
	regfree(&re);
	for (size_t i = 0; i < n; i++) {
		bool listed = false;

		for (size_t j = 0; j < ARRAY_SIZE(switches); j++)
			listed |= !strcmp(found[i], switches[j].name);
		cr_expect(listed, "the sources have the fault switch '%s', which this test does "
				  "not run: add it to switches[]", found[i]);
	}
	for (size_t j = 0; j < ARRAY_SIZE(switches); j++) {
		bool there = false;

		for (size_t i = 0; i < n; i++)
			there |= !strcmp(found[i], switches[j].name);
		cr_expect(there, "switches[] lists '%s', which the sources no longer have",
			  switches[j].name);
	}
}

/* ---- the target's GOT -------------------------------------------------------- */

struct span {
	uint64_t lo, hi;
};

/* The executable mappings of the agent in @pid, into @agent (at most @max). */
static size_t agent_code(pid_t pid, struct span *agent, size_t max)
{
	char path[64], line[4352];
	size_t n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	cr_assert_not_null(f);
	while (n < max && fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi;
		char perms[8];

		if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) == 3 && perms[2] == 'x' &&
		    strstr(line, "cprof-agent"))
			agent[n++] = (struct span){ lo, hi };
	}
	fclose(f);
	return n;
}

/* The .got and .got.plt of ELF file @file, loaded at @base, into @out. */
static size_t got_sections(const char *file, uint64_t base, struct span *out, size_t max)
{
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	size_t n = 0, shstrndx;
	Elf_Scn *scn = NULL;
	GElf_Ehdr eh;
	Elf *e;

	if (fd < 0)
		return 0;
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ, NULL);
	if (!e || !gelf_getehdr(e, &eh) || elf_getshdrstrndx(e, &shstrndx) != 0)
		goto out;
	if (eh.e_type == ET_EXEC)
		base = 0;
	while (n < max && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		const char *name;

		if (!gelf_getshdr(scn, &sh))
			continue;
		name = elf_strptr(e, shstrndx, sh.sh_name);
		if (name && (!strcmp(name, ".got") || !strcmp(name, ".got.plt")))
			out[n++] = (struct span){ base + sh.sh_addr, base + sh.sh_addr + sh.sh_size };
	}
out:
	if (e)
		elf_end(e);
	close(fd);
	return n;
}

/*
 * The GOT entries of every module of @pid that point into the agent's
 * code, counted; the first is named in @first.
 */
static unsigned got_into_agent(pid_t pid, char *first, size_t size)
{
	struct span agent[16], got[4];
	size_t nagent = agent_code(pid, agent, 16);
	char path[64], line[4352], last[4096] = "";
	unsigned hits = 0;
	FILE *f;

	first[0] = 0;
	cr_assert_gt(nagent, 0, "no code of the agent mapped in pid %d", (int)pid);
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi, off;
		char *file = strchr(line, '/');
		size_t ng;

		if (sscanf(line, "%llx-%llx %*s %llx", &lo, &hi, &off) != 3 || !file || off != 0)
			continue;
		file[strcspn(file, "\n")] = 0;
		/* A module's first mapping (offset 0) is its base; the agent's own
		 * GOT may point into it. */
		if (!strcmp(file, last) || strstr(file, "cprof-agent"))
			continue;
		snprintf(last, sizeof(last), "%s", file);
		ng = got_sections(file, lo, got, 4);
		for (size_t g = 0; g < ng; g++) {
			size_t len = got[g].hi - got[g].lo;
			uint64_t *words = malloc(len ? len : 1);
			struct iovec local = { words, len }, remote = { (void *)got[g].lo, len };

			cr_assert_not_null(words);
			if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != (ssize_t)len) {
				free(words);
				continue;
			}
			for (size_t w = 0; w < len / 8; w++)
				for (size_t a = 0; a < nagent; a++)
					if (words[w] >= agent[a].lo && words[w] < agent[a].hi) {
						if (!hits++)
							snprintf(first, size, "%s+0x%" PRIx64,
								 file, (uint64_t)(got[g].lo - lo + w * 8));
					}
			free(words);
		}
	}
	fclose(f);
	return hits;
}

/* ---- a switch, a command ------------------------------------------------------ */

/* The agent ended its session because cprof said so, and nothing of the
 * target's GOT points into it. */
static void expect_unhooked(pid_t pid, const char *name, const char *command)
{
	struct cprof_wire_header *h;
	char first[4200];
	unsigned hits;

	cr_assert(th_alive(pid), "%s %s: the target died", command, name);
	th_assert_let_go(pid, false, name);
	h = th_agent_header(pid);
	cr_assert_not_null(h, "%s %s: no agent channel in the target", command, name);
	cr_expect_eq(h->state, CPROF_STATE_DETACHED, "%s %s: the agent's session still runs",
		     command, name);
	cr_expect(h->detach_reason == CPROF_DETACH_COMMAND || h->detach_reason == CPROF_DETACH_API,
		  "%s %s: the hooks went for reason %u (3: the watchdog saw cprof exit, 4: its "
		  "heartbeat stopped), not because cprof removed them",
		  command, name, h->detach_reason);
	munmap(h, CPROF_WIRE_HEADER_SIZE);
	hits = got_into_agent(pid, first, sizeof(first));
	cr_expect_eq(hits, 0, "%s %s: %u GOT entries still point into the agent (%s)", command,
		     name, hits, first);
}

static void run_switch(const char *name, const char *command)
{
	const char *out = th_tmp_path("fault.pb.gz");
	char mark[128], dir_arg[256];
	struct th_run r;
	pid_t pid;

	pid = TH_SPAWN("demo", "60", "2", "2000");
	cr_assert_eq(setenv("CPROF_TEST_FAULT", name, 1), 0);
	if (!strcmp(command, "record")) {
		snprintf(dir_arg, sizeof(dir_arg), "%s", th_tmp_path("fault-record"));
		TH_CPROF(&r, 60000, "record", "-p", th_pid_str(pid), "-d", "1s", "-o", dir_arg,
			 "-q");
	} else if (!strcmp(command, "heap --keep")) {
		TH_CPROF(&r, 60000, "heap", "-p", th_pid_str(pid), "-d", "1s", "--keep", "-o", out,
			 "-q");
	} else {
		TH_CPROF(&r, 60000, command, "-p", th_pid_str(pid), "-d", "1s", "-o", out, "-q");
	}
	unsetenv("CPROF_TEST_FAULT");
	th_run_log(&r, name);
	snprintf(mark, sizeof(mark), "test fault '%s' injected", name);
	cr_assert_not_null(strstr(r.err, mark), "%s %s: the switch did not fire", command, name);
	cr_assert_neq(r.exit_code, 0, "%s %s: exit 0 after a failure", command, name);
	cr_assert(!r.timed_out, "%s %s: cprof hung", command, name);
	th_run_release(&r);
	expect_unhooked(pid, name, command);
	th_kill(pid);
}

/* serve goes on without the agent's kinds: the hooks must be gone while
 * it still serves, not once it exits. */
static void run_serve_switch(const char *name)
{
	struct server sv;
	char *log;
	pid_t pid;

	pid = TH_SPAWN("demo", "60", "2", "2000");
	cr_assert_eq(setenv("CPROF_TEST_FAULT", name, 1), 0);
	serve_start(&sv, pid, (const char *const[]){ "--listen", "127.0.0.1:0", NULL });
	unsetenv("CPROF_TEST_FAULT");
	cr_assert(th_alive(sv.pid), "serve %s: serve is gone", name);
	expect_unhooked(pid, name, "serve");
	cr_expect_eq(serve_stop(&sv, SIGTERM), 0, "serve %s: its exit", name);
	log = th_read_text(sv.log, NULL);
	cr_assert_not_null(log, "serve %s: no log %s", name, sv.log);
	cr_expect_not_null(strstr(log, "not served: test fault"), "serve %s: %s", name, log);
	free(log);
	th_kill(pid);
}

static void skip_unless_root(void)
{
	if (geteuid() != 0)
		TH_SKIP_MISSING("the agent's commands need ptrace of the target: run as root");
}

/* The GOT check sees hooks that are there: a session kept (heap --keep)
 * has some, and none once it is stopped. */
Test(faults, the_got_check_sees_hooks)
{
	char first[4200];
	unsigned hooked;
	pid_t pid;

	skip_unless_root();
	pid = TH_SPAWN("heapsites", "30", th_tmp_path("got.report"), "64", "1000");
	th_agent_session_keep(pid);
	hooked = got_into_agent(pid, first, sizeof(first));
	cr_expect_gt(hooked, 0, "a kept session, and no GOT entry points into the agent");
	cr_log_info("hooked while kept: %u GOT entries, the first %s", hooked, first);
	th_agent_session_stop(pid);
	hooked = got_into_agent(pid, first, sizeof(first));
	cr_expect_eq(hooked, 0, "%u GOT entries point into the agent after --stop (%s)", hooked,
		     first);
	th_kill(pid);
}

Test(faults, heap)
{
	skip_unless_root();
	for (size_t i = 0; i < ARRAY_SIZE(switches); i++)
		if (switches[i].where == EVERY)
			run_switch(switches[i].name, "heap");
}

Test(faults, record)
{
	skip_unless_root();
	for (size_t i = 0; i < ARRAY_SIZE(switches); i++)
		if (switches[i].where == EVERY)
			run_switch(switches[i].name, "record");
}

Test(faults, serve)
{
	skip_unless_root();
	for (size_t i = 0; i < ARRAY_SIZE(switches); i++)
		if (switches[i].where == SERVE)
			run_serve_switch(switches[i].name);
}

/* --keep's sampler, past the profile it wrote: the hooks go with it. */
Test(faults, keep)
{
	skip_unless_root();
	for (size_t i = 0; i < ARRAY_SIZE(switches); i++)
		if (switches[i].where == KEEP)
			run_switch(switches[i].name, "heap --keep");
}
