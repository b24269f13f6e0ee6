/*
 * regcheck MODE SECONDS
 *
 * Ground truth for lib/inject/: a thread taken on a detour must come back
 * with every register, flag and vector register as it left, and its system
 * call must go on as if nothing happened. Single-threaded, so that the
 * thread cprof picks is this one. Prints "ready", runs SECONDS, exits 0 if
 * every check held, 3 at the first that did not (saying which on stderr).
 *
 *   spin   an assembly loop that keeps known values in rbx, rdx, rsi, rdi,
 *          r8-r15 and xmm0-xmm15 and checks them on every turn: injected
 *          while running user code (cprof's mmap goes through libc's
 *          syscall(), its trampoline returns to the middle of the loop).
 *   sleep  nanosleep(20 ms) in a loop: each must return 0, not early
 *          (a restarted sleep keeps its remaining time).
 *   read   read() of a pipe that a child writes one byte into every 20 ms:
 *          every byte must arrive, in order.
 *   signals  counts the SIGRTMIN queued to it while it sleeps in 1 ms
 *          slices; SIGRTMIN+1 carries the number sent (real-time signals
 *          come lowest first, so every SIGRTMIN sent before it is in by
 *          then): exits 0 when the counts agree, 3 if one was lost or
 *          doubled, 3 if no total came by the end.
 *   slowsignals  as signals, but each SIGRTMIN's handler sleeps 200 ms:
 *          one taken as the detour puts the mask back is still running
 *          when cprof stops the thread to unmap the detour's pages.
 *   handler  sleeps inside a signal handler for the whole run: no thread
 *          is safe to inject (a handler may have interrupted malloc), so
 *          cprof must refuse, and the sleep must still end on time.
 *
 * SIGUSR2 ends a run early with its verdict so far (spin, sleep, read,
 * handler): a test gives SECONDS to spare on a loaded machine and does not
 * wait them out.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define SET(v, reg) "movabs $" #v ", %%rax\n\tmov %%rax, %%" #reg "\n\t"
#define CHK(v, reg) "movabs $" #v ", %%rax\n\tcmp %%rax, %%" #reg "\n\tjne 9f\n\t"
#define SETX(v, x) "movabs $" #v ", %%rax\n\tmovq %%rax, %%" #x "\n\t"
#define CHKX(v, x) "movq %%" #x ", %%rax\n\tmovabs $" #v ", %%r11\n\tcmp %%rax, %%r11\n\tjne 9f\n\t" \
	"movabs $0x7777777777777777, %%r11\n\t"

/* Turns of the loop, checking every register each time; 1 if one changed. */
static __attribute__((noinline)) int spin_and_check(uint64_t turns)
{
	uint64_t bad;

	__asm__ volatile(
		SET(0x1111111111111111, rbx) SET(0x2222222222222222, rdx)
		SET(0x3333333333333333, rsi) SET(0x4444444444444444, rdi)
		SET(0x5555555555555555, r8) SET(0x6666666666666666, r9)
		SET(0x8888888888888888, r10) SET(0x7777777777777777, r11)
		SET(0x9999999999999999, r12) SET(0xaaaaaaaaaaaaaaaa, r13)
		SET(0xbbbbbbbbbbbbbbbb, r14) SET(0xcccccccccccccccc, r15)
		SETX(0x0101010101010101, xmm0) SETX(0x0202020202020202, xmm1)
		SETX(0x0303030303030303, xmm2) SETX(0x0404040404040404, xmm3)
		SETX(0x0505050505050505, xmm4) SETX(0x0606060606060606, xmm5)
		SETX(0x0707070707070707, xmm6) SETX(0x0808080808080808, xmm7)
		SETX(0x0909090909090909, xmm8) SETX(0x0a0a0a0a0a0a0a0a, xmm9)
		SETX(0x0b0b0b0b0b0b0b0b, xmm10) SETX(0x0c0c0c0c0c0c0c0c, xmm11)
		SETX(0x0d0d0d0d0d0d0d0d, xmm12) SETX(0x0e0e0e0e0e0e0e0e, xmm13)
		SETX(0x0f0f0f0f0f0f0f0f, xmm14) SETX(0x1010101010101010, xmm15)
		"1:\n\t"
		CHK(0x1111111111111111, rbx) CHK(0x2222222222222222, rdx)
		CHK(0x3333333333333333, rsi) CHK(0x4444444444444444, rdi)
		CHK(0x5555555555555555, r8) CHK(0x6666666666666666, r9)
		CHK(0x8888888888888888, r10) CHK(0x7777777777777777, r11)
		CHK(0x9999999999999999, r12) CHK(0xaaaaaaaaaaaaaaaa, r13)
		CHK(0xbbbbbbbbbbbbbbbb, r14) CHK(0xcccccccccccccccc, r15)
		CHKX(0x0101010101010101, xmm0) CHKX(0x0202020202020202, xmm1)
		CHKX(0x0303030303030303, xmm2) CHKX(0x0404040404040404, xmm3)
		CHKX(0x0505050505050505, xmm4) CHKX(0x0606060606060606, xmm5)
		CHKX(0x0707070707070707, xmm6) CHKX(0x0808080808080808, xmm7)
		CHKX(0x0909090909090909, xmm8) CHKX(0x0a0a0a0a0a0a0a0a, xmm9)
		CHKX(0x0b0b0b0b0b0b0b0b, xmm10) CHKX(0x0c0c0c0c0c0c0c0c, xmm11)
		CHKX(0x0d0d0d0d0d0d0d0d, xmm12) CHKX(0x0e0e0e0e0e0e0e0e, xmm13)
		CHKX(0x0f0f0f0f0f0f0f0f, xmm14) CHKX(0x1010101010101010, xmm15)
		"dec %%rcx\n\t"
		"jnz 1b\n\t"
		"xor %%eax, %%eax\n\t"
		"jmp 8f\n"
		"9:\n\t"
		"mov $1, %%eax\n"
		"8:\n\t"
		: "=a"(bad), "+c"(turns)
		:
		: "rbx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
		  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
		  "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc", "memory");
	return (int)bad;
}

static volatile sig_atomic_t finish;

static void on_finish(int sig)
{
	(void)sig;
	finish = 1;
}

static bool running(uint64_t end)
{
	return !finish && now_ns() < end;
}

static int run_spin(uint64_t end)
{
	while (running(end))
		if (spin_and_check(1000000)) {
			fprintf(stderr, "regcheck: a register changed under the loop\n");
			return 3;
		}
	return 0;
}

static int run_sleep(uint64_t end)
{
	const struct timespec d = { 0, 20 * 1000 * 1000 };

	while (running(end)) {
		uint64_t t0 = now_ns();
		int r = nanosleep(&d, NULL);

		if (r != 0 && errno == EINTR && finish)
			break;
		if (r != 0) {
			fprintf(stderr, "regcheck: nanosleep returned %d (%s)\n", r, strerror(errno));
			return 3;
		}
		if (now_ns() - t0 < 20 * 1000 * 1000) {
			fprintf(stderr, "regcheck: nanosleep ended early\n");
			return 3;
		}
	}
	return 0;
}

static int run_read(uint64_t end, unsigned seconds)
{
	int fds[2], status;
	unsigned char expect = 0, b;
	pid_t child;

	if (pipe(fds) < 0)
		return 2;
	child = fork();
	if (child == 0) {
		const struct timespec d = { 0, 20 * 1000 * 1000 };
		unsigned char v = 0;

		close(fds[0]);
		alarm(seconds + 5);
		while (now_ns() < end && write(fds[1], &v, 1) == 1) {
			v++;
			nanosleep(&d, NULL);
		}
		_exit(0);
	}
	close(fds[1]);
	for (;;) {
		ssize_t n = read(fds[0], &b, 1);

		if (n == 0)
			break;
		if (n != 1 || b != expect) {
			fprintf(stderr, "regcheck: read %zd, byte %u, expected %u\n", n, b, expect);
			return 3;
		}
		expect++;
		if (finish)
			kill(child, SIGKILL);
	}
	waitpid(child, &status, 0);
	return 0;
}

static volatile sig_atomic_t handler_result = -1;
static uint64_t handler_end;

static void sleepy_handler(int sig)
{
	(void)sig;
	handler_result = run_sleep(handler_end);
}

static int run_handler(uint64_t end)
{
	handler_end = end;
	signal(SIGUSR1, sleepy_handler);
	raise(SIGUSR1);
	return handler_result;
}

static volatile sig_atomic_t rt_count;
static volatile long rt_total = -1;
static bool rt_slow;

static void count_rt(int sig, siginfo_t *si, void *uc)
{
	const struct timespec slow = { 0, 200000000 };

	(void)uc;
	if (sig != SIGRTMIN) {
		rt_total = si->si_value.sival_int;
		return;
	}
	rt_count++;
	if (rt_slow)
		while (nanosleep(&slow, NULL) < 0 && errno == EINTR)
			;
}

/* Before "ready": the stream may start the moment it is printed. */
static void count_signals(bool slow)
{
	struct sigaction sa = { .sa_sigaction = count_rt, .sa_flags = SA_SIGINFO | SA_RESTART };

	rt_slow = slow;
	sigaction(SIGRTMIN, &sa, NULL);
	sigaction(SIGRTMIN + 1, &sa, NULL);
}

static int run_signals(uint64_t end)
{
	const struct timespec ms = { 0, 1000000 };

	while (rt_total < 0 && now_ns() < end)
		nanosleep(&ms, NULL); /* EINTR is fine: each signal ends a slice */
	if (rt_total != (long)rt_count) {
		fprintf(stderr, "regcheck signals: %ld SIGRTMIN sent, %ld handled\n", (long)rt_total,
			(long)rt_count);
		return 3;
	}
	return 0;
}

int main(int argc, char **argv)
{
	unsigned seconds;
	uint64_t end;

	if (argc != 3) {
		fprintf(stderr, "usage: regcheck spin|sleep|read|signals|slowsignals|handler SECONDS\n");
		return 2;
	}
	seconds = (unsigned)atoi(argv[2]);
	alarm(seconds + 10); /* whatever happens, this ends */
	sigaction(SIGUSR2, &(struct sigaction){ .sa_handler = on_finish, .sa_flags = SA_RESTART },
		  NULL);
	end = now_ns() + (uint64_t)seconds * 1000000000ull;
	if (strcmp(argv[1], "signals") == 0 || strcmp(argv[1], "slowsignals") == 0)
		count_signals(strcmp(argv[1], "slowsignals") == 0);
	printf("ready\n");
	fflush(stdout);
	if (strcmp(argv[1], "spin") == 0)
		return run_spin(end);
	if (strcmp(argv[1], "sleep") == 0)
		return run_sleep(end);
	if (strcmp(argv[1], "handler") == 0)
		return run_handler(end);
	if (strcmp(argv[1], "read") == 0)
		return run_read(end, seconds);
	if (strcmp(argv[1], "signals") == 0 || strcmp(argv[1], "slowsignals") == 0)
		return run_signals(end);
	return 2;
}
