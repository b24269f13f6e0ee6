/*
 * hardened MODE SECONDS
 *
 * A hardened service (issue 22): it puts a policy on itself, then runs a
 * malloc loop in main beside a thread asleep in nanosleep, for SECONDS, and
 * exits 0. MODE:
 *
 *   mdwe        prctl(PR_SET_MDWE): no mapping writable and executable,
 *               none made executable later (what the kernel offers);
 *   wx-errno    a seccomp filter as systemd's MemoryDenyWriteExecute=
 *   wx-kill     installs: mmap or mprotect asking for write and execute at
 *               once, or mprotect asking for execute, fail with EPERM (or
 *               kill the process);
 *   exec-errno  a seccomp filter refusing any executable mmap or mprotect
 *   exec-kill   (EPERM, or kill): no library can be loaded.
 *
 * The profiler must either work without what the policy forbids or leave
 * the process as it was; it must never make a call the policy kills for.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#define PR_MDWE_REFUSE_EXEC_GAIN 1
#endif

#define ARG_LO(n) (offsetof(struct seccomp_data, args) + 8 * (n))

static void *sleeper(void *arg)
{
	const struct timespec ms = { 0, 1000000 };

	(void)arg;
	for (;;)
		nanosleep(&ms, NULL);
	return NULL;
}

static int filter(bool any_exec, bool kill)
{
	uint32_t deny = kill ? SECCOMP_RET_KILL_PROCESS : SECCOMP_RET_ERRNO | EPERM;
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mmap, 3, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mprotect, 5, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pkey_mprotect, 4, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		/* mmap: write and execute at once (or execute at all) */
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(2)),
		BPF_STMT(BPF_ALU | BPF_AND | BPF_K, any_exec ? PROT_EXEC : PROT_WRITE | PROT_EXEC),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, any_exec ? PROT_EXEC : PROT_WRITE | PROT_EXEC, 2, 3),
		/* mprotect: execute */
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(2)),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, deny),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	double seconds = argc > 2 ? atof(argv[2]) : 10;
	struct timespec start, now;
	pthread_t th;
	int r;

	if (!strcmp(mode, "mdwe"))
		r = prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0);
	else if (!strncmp(mode, "wx-", 3) || !strncmp(mode, "exec-", 5))
		r = filter(mode[0] == 'e', strstr(mode, "kill") != NULL);
	else
		return 2;
	if (r < 0) {
		fprintf(stderr, "hardened: cannot set %s: %s\n", mode, strerror(errno));
		return 4;
	}
	pthread_create(&th, NULL, sleeper, NULL);
	printf("ready\n");
	fflush(stdout);
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		for (int i = 0; i < 1000; i++) {
			void *p = malloc(64 + (size_t)i * 16);

			__asm__ volatile("" : : "r"(p) : "memory");
			free(p);
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((double)(now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
	return 0;
}
