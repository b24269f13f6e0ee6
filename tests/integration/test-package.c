/*
 * The .deb: scripts/package packages this build directory, dpkg -x unpacks
 * it into a throwaway root (nothing is installed on the machine), and the
 * unpacked cprof runs cpu and heap with the agent it finds relative to its
 * own binary.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testhelp.h"

TestSuite(package, .init = th_init, .fini = th_cleanup);

static char *run_out(const char *const *argv, int timeout_ms)
{
	struct th_run r;
	char *out;

	th_run_cmd_ex(&r, timeout_ms, 0, 0, argv);
	if (r.exit_code != 0)
		th_run_log(&r, argv[0]);
	cr_assert_eq(r.exit_code, 0, "%s %s failed", argv[0], argv[1] ? argv[1] : "");
	out = strdup(r.out);
	th_run_release(&r);
	return out;
}

static void assert_file(const char *root, const char *rel)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s%s/%s", root, INSTALL_PREFIX, rel);
	cr_expect(access(path, R_OK) == 0, "the package has no %s", path);
}

/* Runs the unpacked @cprof on @args; the profile it wrote, loaded. */
static struct profile *run_unpacked(const char *cprof, const char *cmd, pid_t pid,
				    const char *extra, const char *out)
{
	struct th_run r;
	struct profile *p;

	th_run_cmd_ex(&r, 60000, 0, 0,
		      (const char *const[]){ cprof, cmd, "-p", th_pid_str(pid), "-d", "1s", "-o",
					     out, extra, NULL });
	if (r.exit_code != 0)
		th_run_log(&r, cmd);
	cr_assert_eq(r.exit_code, 0, "unpacked cprof %s failed", cmd);
	th_run_release(&r);
	p = th_load_profile(out);
	th_assert_pprof_ok(out);
	return p;
}

Test(package, deb_unpacks_and_runs, .timeout = 300)
{
	char script[PATH_MAX], cprof[PATH_MAX], agent[PATH_MAX], real[PATH_MAX], line[PATH_MAX + 8];
	const char *dir, *root;
	char *deb, *field, *version;
	struct profile *p;
	pid_t pid;

	if (access("/usr/bin/dpkg-deb", X_OK) < 0 || access("/usr/bin/cpack", X_OK) < 0)
		TH_SKIP_MISSING("dpkg-deb or cpack is missing: not a Debian machine with cmake");
	dir = th_tmp_dir("package");
	snprintf(script, sizeof(script), "%s/scripts/package", SOURCE_DIR);
	deb = run_out((const char *const[]){ script, BUILD_DIR, dir, NULL }, 240000);
	deb[strcspn(deb, "\n")] = '\0';
	cr_log_info("built %s", deb);

	field = run_out((const char *const[]){ "/usr/bin/dpkg-deb", "-f", deb, "Package",
					       "Depends", "Maintainer", "Description", NULL },
			30000);
	cr_expect(strstr(field, "Package: cprof\n"), "%s", field);
	for (const char *const *d = (const char *const[]){ "libdw1", "libelf1", "zlib1g",
							    "libprotobuf-c1", "libmicrohttpd12", NULL };
	     *d; d++)
		cr_expect(strstr(field, *d), "Depends lacks %s: %s", *d, field);
	cr_expect(strstr(field, "Maintainer: ") && strstr(field, "Description: "), "%s", field);
	free(field);
	version = run_out((const char *const[]){ "/usr/bin/dpkg-deb", "-f", deb, "Version", NULL },
			  30000);
	cr_expect_str_eq(version, PROJECT_VERSION "\n");
	free(version);

	root = th_tmp_dir("root");
	free(run_out((const char *const[]){ "/usr/bin/dpkg", "-x", deb, root, NULL }, 30000));
	free(deb);
	assert_file(root, INSTALL_BINDIR "/cprof");
	assert_file(root, INSTALL_LIBDIR "/cprof/cprof-agent.so");
	assert_file(root, INSTALL_MANDIR "/man1/cprof.1");
	assert_file(root, INSTALL_MANDIR "/man1/cprof-cpu.1");
	assert_file(root, INSTALL_DATADIR "/bash-completion/completions/cprof");

	/* The agent is found beside the unpacked binary, not in the build tree. */
	unsetenv("CPROF_AGENT");
	snprintf(cprof, sizeof(cprof), "%s%s/%s/cprof", root, INSTALL_PREFIX, INSTALL_BINDIR);
	snprintf(agent, sizeof(agent), "%s%s/%s/cprof/cprof-agent.so", root, INSTALL_PREFIX,
		 INSTALL_LIBDIR);
	cr_assert_not_null(realpath(agent, real));
	snprintf(line, sizeof(line), "agent: %s\n", real);
	version = run_out((const char *const[]){ cprof, "--version", NULL }, 30000);
	cr_expect(strstr(version, line), "--version does not say %s: %s", line, version);
	free(version);

	th_require_perf(false);
	pid = TH_SPAWN("demo", "20");
	p = run_unpacked(cprof, "cpu", pid, NULL, th_tmp_path("cpu.pb.gz"));
	cr_expect_gt(p->nsamples, 0);
	profile_free(p);
	p = run_unpacked(cprof, "heap", pid, "--heap-rate=4096", th_tmp_path("heap.pb.gz"));
	cr_expect_gt(p->nsamples, 0);
	profile_free(p);
	th_kill(pid);
}
