/*
 * libunwind-ptrace as the oracle of cprof's unwinding. Every thread of a
 * stopped target is unwound twice: live, by libunwind-ptrace reading the
 * stopped thread through ptrace (its own CFI parser and memory access), and
 * the way cprof does it, by libdw from a copy of the registers and stack
 * taken while stopped (lib/unwind). The two must give the same return
 * addresses, frame by frame.
 *
 * A thread asleep in a call is read without a stop by `cprof threads`
 * (lib/threads/asleep.c: sp and pc from /proc, the stack copied while it
 * sleeps): that walk, taken just before the stop, must be the same too.
 *
 * The targets: threads in nanosleep, condition variables and pipe reads
 * (threads), and unwindmix, a C++ program with a thread asleep in a signal
 * handler, one in a destructor run by an exception in flight (libgcc's
 * unwinder below it) and one calling into the vDSO in a loop.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <libunwind-ptrace.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>

#include "maps/maps.h"
#include "ptrace/ptrace.h"
#include "symbolize/symbolize.h"
#include "threads/threads-private.h"
#include "testhelp.h"
#include "unwind/unwind.h"

#define MAX_FRAMES 128
#define MAX_THREADS 64
#define STACK_COPY (256u << 10)

TestSuite(oracle, .init = th_init, .fini = th_cleanup, .timeout = 120);

struct walk {
	uint64_t pcs[MAX_FRAMES];
	int n;
};

/* libunwind-ptrace, live: the thread must be stopped under our ptrace. */
static void walk_live(unw_addr_space_t as, pid_t tid, struct walk *w)
{
	void *ui = _UPT_create(tid);
	unw_cursor_t c;

	w->n = 0;
	cr_assert_not_null(ui);
	if (unw_init_remote(&c, as, ui) == 0) {
		do {
			unw_word_t ip;

			if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0 || ip == 0)
				break;
			w->pcs[w->n++] = ip;
		} while (w->n < MAX_FRAMES && unw_step(&c) > 0);
	}
	_UPT_destroy(ui);
}

/* cprof's way: registers and a copy of the stack, unwound by libdw. */
static void walk_copy(struct unwinder *unw, pid_t tid, struct walk *w)
{
	struct user_regs_struct regs;
	struct unwind_input in = { 0 };
	struct iovec local, remote;
	uint8_t *stack = malloc(STACK_COPY);
	ssize_t n;

	cr_assert_not_null(stack);
	cr_assert_eq(ptrace(PTRACE_GETREGS, tid, 0, &regs), 0);
	ptrace_regs_to_unwind(&regs, in.regs);
	/* Page by page: the copy ends where the stack's mapping does. */
	in.stack_start = regs.rsp & ~0xfffULL;
	for (n = 0; (size_t)n < STACK_COPY; n += 4096) {
		local = (struct iovec){ stack + n, 4096 };
		remote = (struct iovec){ (void *)(uintptr_t)(in.stack_start + (uint64_t)n), 4096 };
		if (process_vm_readv(tid, &local, 1, &remote, 1, 0) != 4096)
			break;
	}
	in.stack = stack;
	in.stack_size = (size_t)n;
	w->n = unwinder_unwind(unw, &in, w->pcs, MAX_FRAMES);
	free(stack);
}

static char *frames_text(struct symbolizer *sym, const struct walk *w)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	cr_assert_not_null(f);
	symbolizer_write_frames(sym, w->pcs, w->n > 0 ? (size_t)w->n : 0, f);
	fclose(f);
	return text;
}

/*
 * Frame by frame: the first is the PC itself; a caller's is its return
 * address, which cprof gives minus one (inside the call) and libunwind as
 * it is, except above a signal frame, where both give the interrupted PC.
 * libunwind may stop one frame later or earlier at the thread's start.
 */
static int compare(const struct walk *copy, const struct walk *live, int cut)
{
	int n = copy->n < live->n ? copy->n : live->n;

	if (cut >= 0 && cut < n)
		n = cut;
	for (int i = 0; i < n; i++) {
		uint64_t diff = live->pcs[i] - copy->pcs[i];

		if (i == 0 ? diff != 0 : diff > 1)
			return i;
	}
	return cut >= 0 || abs(copy->n - live->n) <= 1 ? -1 : n;
}

/* [start, end) of the vDSO of @pid. */
static void vdso_range(pid_t pid, uint64_t *start, uint64_t *end)
{
	char path[64], line[512];
	FILE *f;

	*start = *end = 0;
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "re");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "[vdso]"))
			sscanf(line, "%lx-%lx", (unsigned long *)start, (unsigned long *)end);
	fclose(f);
}

/*
 * libunwind-ptrace reads CFI from the files /proc/PID/maps names, and the
 * vDSO has none: past a frame in it, its walk guesses (it follows rbp,
 * and skips the caller of a frameless helper that has CFI of its own in
 * the vDSO image libdw reads). Compared up to the first vDSO frame only
 * (-1: everywhere).
 */
static int vdso_cut(const struct walk *live, uint64_t start, uint64_t end)
{
	for (int i = 0; i < live->n; i++)
		if (live->pcs[i] >= start && live->pcs[i] < end)
			return i + 1;
	return -1;
}

static void stop_all(pid_t *tids, int n)
{
	for (int i = 0; i < n; i++) {
		cr_assert_eq(ptrace(PTRACE_SEIZE, tids[i], 0, 0), 0, "seize %d: %s", tids[i],
			     strerror(errno));
		cr_assert_eq(ptrace(PTRACE_INTERRUPT, tids[i], 0, 0), 0);
	}
	for (int i = 0; i < n; i++) {
		int status;

		cr_assert_eq(waitpid(tids[i], &status, __WALL), tids[i]);
		cr_assert(WIFSTOPPED(status));
	}
}

static void release_all(pid_t *tids, int n)
{
	for (int i = 0; i < n; i++)
		ptrace(PTRACE_DETACH, tids[i], 0, 0);
}

/* The threads of @tids asleep in a call, read and confirmed without a stop. */
static void look_asleep(pid_t pid, const pid_t *tids, int n, struct unwinder *unw,
			struct asleep_set *ret)
{
	struct thread_record before[MAX_THREADS] = { 0 };
	struct maps maps = { 0 };

	for (int i = 0; i < n; i++) {
		before[i].tid = tids[i];
		before[i].state = th_task_state(pid, tids[i]);
	}
	cr_assert_eq(maps_read(pid, &maps), 0);
	cr_assert_eq(asleep_look(ret, pid, before, (size_t)n, &maps, unw), 0);
	asleep_confirm(ret, pid);
	maps_release(&maps);
}

/* The asleep walk of @tid (if it was one) against the live one: 1 when
 * compared, 0 when the thread was not read asleep. */
static int compare_asleep(const struct asleep_set *as, pid_t tid, const struct walk *live,
			  int cut, struct symbolizer *sym)
{
	const struct asleep *a = asleep_find(as, tid);
	struct walk w = { .n = 0 };
	int bad;

	if (!a)
		return 0;
	w.n = (int)MIN(a->npcs, (size_t)MAX_FRAMES);
	memcpy(w.pcs, a->pcs, (size_t)w.n * sizeof(w.pcs[0]));
	bad = compare(&w, live, cut);
	if (bad >= 0) {
		char *x = frames_text(sym, &w), *y = frames_text(sym, live);

		cr_expect(bad < 0, "thread %d: read asleep, the walks part at frame %d\n"
			  "libdw, from sp and pc without a stop:\n%slibunwind-ptrace, live:\n%s",
			  tid, bad, x, y);
		free(x);
		free(y);
	}
	return 1;
}

/* Every thread of @pid, @rounds times: returns the frames compared. */
static int oracle_rounds(pid_t pid, int rounds, int min_frames)
{
	unw_addr_space_t as = unw_create_addr_space(&_UPT_accessors, 0);
	struct symbolizer *sym;
	struct unwinder *unw;
	uint64_t vdso_start, vdso_end;
	int compared = 0, cut_walks = 0, asleep = 0;

	cr_assert_not_null(as);
	cr_assert_eq(symbolizer_new(&sym, pid), 0);
	cr_assert_eq(unwinder_new(&unw, symbolizer_dwfl(sym), pid), 0);
	vdso_range(pid, &vdso_start, &vdso_end);
	for (int round = 0; round < rounds; round++) {
		pid_t tids[MAX_THREADS];
		int n = th_task_list(pid, tids, MAX_THREADS);
		struct asleep_set sleepers;

		look_asleep(pid, tids, n, unw, &sleepers);
		stop_all(tids, n);
		for (int i = 0; i < n; i++) {
			struct walk copy, live;
			int bad, cut;

			walk_copy(unw, tids[i], &copy);
			walk_live(as, tids[i], &live);
			cut = vdso_cut(&live, vdso_start, vdso_end);
			cut_walks += cut >= 0;
			bad = compare(&copy, &live, cut);
			if (bad >= 0 || copy.n < min_frames) {
				char *a = frames_text(sym, &copy), *b = frames_text(sym, &live);

				cr_expect(bad < 0, "thread %d: the walks part at frame %d\n"
					  "libdw, from the copy:\n%slibunwind-ptrace, live:\n%s",
					  tids[i], bad, a, b);
				cr_expect_geq(copy.n, min_frames, "thread %d: %d frames only:\n%s",
					      tids[i], copy.n, a);
				free(a);
				free(b);
			}
			compared += copy.n;
			asleep += compare_asleep(&sleepers, tids[i], &live, cut, sym);
		}
		release_all(tids, n);
		asleep_release(&sleepers);
		th_sleep_ms(20);
	}
	cr_log_info("%d walks of threads read asleep without a stop agree", asleep);
	cr_expect_gt(asleep, 0, "no thread was read asleep");
	if (cut_walks)
		cr_log_info("%d walks through the vDSO compared up to its first frame only: "
			    "libunwind-ptrace has no CFI for it", cut_walks);
	unwinder_free(unw);
	symbolizer_unref(sym);
	unw_destroy_addr_space(as);
	return compared;
}

Test(oracle, threads_in_their_calls)
{
	pid_t pid = TH_SPAWN("threads", "8", "30");

	cr_log_info("measured: oracle, threads: %d frames agree", oracle_rounds(pid, 5, 4));
	th_assert_let_go(pid, false, "after the oracle");
	th_kill(pid);
}

Test(oracle, signal_frames_exceptions_in_flight_and_the_vdso)
{
	pid_t pid = TH_SPAWN("unwindmix", "30");

	/* Many rounds: the vDSO thread is caught in the vDSO's code in some. */
	cr_log_info("measured: oracle, unwindmix: %d frames agree", oracle_rounds(pid, 20, 3));
	th_assert_let_go(pid, false, "after the oracle");
	th_kill(pid);
}
