/*
 * heapsites SECONDS REPORT [RETAIN_BLOCKS [ROUNDS_PER_SECOND]]
 *
 * Ground truth for cprof heap: the allocation pattern Go's heap sampling is
 * judged by (sizes on both sides of the rate, at sites of their own). Loop A
 * allocates 512 KiB, 256 KiB, 1 KiB, 256 KiB, 512 B, 256 KiB, 256 B,
 * 256 KiB, 16 B, loop B 1 KiB, 512 B, 256 B, 16 B, each at its own noinline
 * site, freed at once; site retain_4k keeps a ring of RETAIN_BLOCKS (default
 * 256) blocks of 4 KiB live, freeing the oldest. Between SIGUSR1 and SIGUSR2
 * it counts per site the objects and bytes allocated, and on SIGUSR2 writes
 *   "SITE OBJECTS BYTES\n" per site, then "live_retain_4k OBJECTS BYTES\n":
 * the retained blocks allocated in the window and still live at its end,
 * to REPORT (beside, then renamed). Prints "ready"; exits after SECONDS.
 *
 * The window is exactly the time cprof's agent hooks malloc: each round the
 * program reloads its own GOT slot of malloc (the one the agent patches) and
 * counts only while it differs from the value it had at start. When the
 * hook goes, the counts (and the live set) are frozen; SIGUSR2 then writes
 * them. (SIGUSR1 opens a window by hand instead, for runs without cprof.)
 * ROUNDS_PER_SECOND (default 5000) caps the pace of the loops, so that a
 * small sampling rate does not flood cprof with the big sites' samples.
 *
 * Built more ways than one (tests/CMakeLists.txt), for the allocators
 * beyond glibc's (issue 15): with HEAPSITES_JEMALLOC the a_ sites call
 * jemalloc's own API (mallocx, rallocx, xallocx, sdallocx, dallocx), with
 * HEAPSITES_MIMALLOC mimalloc's (mi_malloc, mi_realloc, mi_free_size, ...),
 * with HEAPSITES_CXX the b_ sites and retain_4k call operator new/delete
 * (sized, aligned, nothrow, arrays) as the allocator linked in defines
 * them. A site that resizes counts each of its allocations (its truth is
 * per call, as cprof's samples are).
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

enum {
	S_512K, S_256K_1, S_1K_A, S_256K_2, S_512_A, S_256K_3, S_256_A, S_256K_4, S_16_A,
	S_1K_B, S_512_B, S_256_B, S_16_B, S_RETAIN, NSITES
};

static const char *const names[NSITES] = {
	"a_512k", "a_256k_1", "a_1k", "a_256k_2", "a_512", "a_256k_3", "a_256", "a_256k_4",
	"a_16", "b_1k", "b_512", "b_256", "b_16", "retain_4k",
};

static uint64_t objects[NSITES], bytes[NSITES];
static volatile sig_atomic_t counting, report_now, by_hand;
static uint64_t frozen_live;
static int frozen;
static void *volatile sink;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void count(int site, size_t size)
{
	if (counting) {
		objects[site]++;
		bytes[site] += size;
	}
}

static void on_signal(int sig)
{
	if (sig == SIGUSR1) {
		counting = 1;
		by_hand = 1;
	}
	else {
		counting = 0;
		report_now = 1;
	}
}

/* A site: ALLOC(size) and FREE(p, size) as its allocator API spells them. */
#define SITE_WITH(fn, idx, size, ALLOC, FREE)  \
	static NOINLINE void fn(void)          \
	{                                      \
		void *p = ALLOC(size);         \
		sink = p;                      \
		count(idx, size);              \
		FREE(p, size);                 \
	}

#define LIBC_ALLOC(size) malloc(size)
#define LIBC_FREE(p, size) free(p)
#define SITE(fn, idx, size) SITE_WITH(fn, idx, size, LIBC_ALLOC, LIBC_FREE)

#if defined(HEAPSITES_CXX)
/* operator new/delete by their mangled names (this file is C). */
typedef size_t align_val;
void *_Znwm(size_t);
void *_Znam(size_t);
void *_ZnamRKSt9nothrow_t(size_t, const void *);
void *_ZnwmSt11align_val_t(size_t, align_val);
void *_ZnamSt11align_val_t(size_t, align_val);
void _ZdlPvm(void *, size_t);
void _ZdaPvm(void *, size_t);
void _ZdaPv(void *);
void _ZdlPvmSt11align_val_t(void *, size_t, align_val);
void _ZdaPvSt11align_val_t(void *, align_val);
#define NEW(size) _Znwm(size)
#define DELETE_SIZED(p, size) _ZdlPvm(p, size)
#define NEW_ALIGNED(size) _ZnwmSt11align_val_t(size, 64)
#define DELETE_SIZED_ALIGNED(p, size) _ZdlPvmSt11align_val_t(p, size, 64)
#define NEW_ARRAY_NOTHROW(size) _ZnamRKSt9nothrow_t(size, objects)
#define DELETE_ARRAY(p, size) _ZdaPv(p)
#define NEW_ARRAY(size) _Znam(size)
#define DELETE_ARRAY_SIZED(p, size) _ZdaPvm(p, size)
#define NEW_ARRAY_ALIGNED(size) _ZnamSt11align_val_t(size, 64)
#define DELETE_ARRAY_ALIGNED(p, size) _ZdaPvSt11align_val_t(p, 64)
#define B_SITE(fn, idx, size, A, F) SITE_WITH(fn, idx, size, A, F)
#define RETAIN_ALLOC(size) NEW_ARRAY_ALIGNED(size)
#define RETAIN_FREE(p) DELETE_ARRAY_ALIGNED(p, 4096)
#else
#define B_SITE(fn, idx, size, A, F) SITE(fn, idx, size)
#define RETAIN_ALLOC(size) malloc(size)
#define RETAIN_FREE(p) free(p)
#endif

#if defined(HEAPSITES_JEMALLOC)
#include <jemalloc/jemalloc.h>
#define MX(size) mallocx(size, 0)
#define MX_ZERO(size) mallocx(size, MALLOCX_ZERO)
#define MX_ALIGNED(size) mallocx(size, MALLOCX_ALIGN(64))
#define SDX(p, size) sdallocx(p, size, 0)
#define SDX_ALIGNED(p, size) sdallocx(p, size, MALLOCX_ALIGN(64))
#define DX(p, size) dallocx(p, 0)

SITE_WITH(a_512k, S_512K, 512 << 10, MX, SDX)
SITE_WITH(a_256k_1, S_256K_1, 256 << 10, MX_ZERO, DX)
SITE_WITH(a_256k_2, S_256K_2, 256 << 10, MX_ALIGNED, SDX_ALIGNED)
SITE_WITH(a_512, S_512_A, 512, MX, DX)
SITE_WITH(a_256, S_256_A, 256, MX, SDX)
SITE_WITH(a_256k_4, S_256K_4, 256 << 10, MX, DX)
SITE_WITH(a_16, S_16_A, 16, MX, SDX)

/* 512 bytes, then rallocx to 1 KiB: two allocations. */
static NOINLINE void a_1k(void)
{
	void *p = mallocx(512, 0);

	count(S_1K_A, 512);
	p = rallocx(p, 1024, 0);
	sink = p;
	count(S_1K_A, 1024);
	sdallocx(p, 1024, 0);
}

/* 128 KiB, then grown in place to 256 KiB by xallocx when the pages after
 * it are free (a second allocation), or left as it is. */
static NOINLINE void a_256k_3(void)
{
	void *p = mallocx(128 << 10, 0);

	count(S_256K_3, 128 << 10);
	if (xallocx(p, 256 << 10, 0, 0) >= (256 << 10))
		count(S_256K_3, 256 << 10);
	sink = p;
	dallocx(p, 0);
}
#elif defined(HEAPSITES_MIMALLOC)
#include <mimalloc.h>
#define MI(size) mi_malloc(size)
#define MI_Z(size) mi_zalloc(size)
#define MI_ALIGNED(size) mi_malloc_aligned(size, 64)
#define MI_ZALIGNED(size) mi_zalloc_aligned(size, 64)
#define MI_CALLOC(size) mi_calloc(2, (size) / 2)
#define MI_NEW(size) mi_new(size)
#define MI_N(size) mi_mallocn(16, (size) / 16)
#define MI_STRDUP(size) mi_strdup("fifteen chars..")
#define MI_FREE(p, size) mi_free(p)
#define MI_FREE_SIZE(p, size) mi_free_size(p, size)
#define MI_FREE_ALIGNED(p, size) mi_free_aligned(p, 64)
#define MI_FREE_SIZE_ALIGNED(p, size) mi_free_size_aligned(p, size, 64)

SITE_WITH(a_512k, S_512K, 512 << 10, MI, MI_FREE)
SITE_WITH(a_256k_1, S_256K_1, 256 << 10, MI_Z, MI_FREE_SIZE)
SITE_WITH(a_256k_2, S_256K_2, 256 << 10, MI_ALIGNED, MI_FREE_ALIGNED)
SITE_WITH(a_512, S_512_A, 512, MI_CALLOC, MI_FREE_SIZE)
SITE_WITH(a_256k_3, S_256K_3, 256 << 10, MI_NEW, MI_FREE)
SITE_WITH(a_256, S_256_A, 256, MI_N, MI_FREE)
SITE_WITH(a_256k_4, S_256K_4, 256 << 10, MI_ZALIGNED, MI_FREE_SIZE_ALIGNED)
SITE_WITH(a_16, S_16_A, 16, MI_STRDUP, MI_FREE)

/* 512 bytes, then mi_realloc to 1 KiB: two allocations. */
static NOINLINE void a_1k(void)
{
	void *p = mi_malloc(512);

	count(S_1K_A, 512);
	p = mi_realloc(p, 1024);
	sink = p;
	count(S_1K_A, 1024);
	mi_free(p);
}
#else
SITE(a_512k, S_512K, 512 << 10)
SITE(a_256k_1, S_256K_1, 256 << 10)
SITE(a_1k, S_1K_A, 1024)
SITE(a_256k_2, S_256K_2, 256 << 10)
SITE(a_512, S_512_A, 512)
SITE(a_256k_3, S_256K_3, 256 << 10)
SITE(a_256, S_256_A, 256)
SITE(a_256k_4, S_256K_4, 256 << 10)
SITE(a_16, S_16_A, 16)
#endif
B_SITE(b_1k, S_1K_B, 1024, NEW, DELETE_SIZED)
B_SITE(b_512, S_512_B, 512, NEW_ALIGNED, DELETE_SIZED_ALIGNED)
B_SITE(b_256, S_256_B, 256, NEW_ARRAY_NOTHROW, DELETE_ARRAY)
B_SITE(b_16, S_16_B, 16, NEW_ARRAY, DELETE_ARRAY_SIZED)

#define RETAIN_MAX 65536
static void *ring[RETAIN_MAX];
static int ring_counted[RETAIN_MAX]; /* allocated while counting */
static unsigned ring_n, ring_pos;

static NOINLINE void retain_4k(void)
{
	void *p = RETAIN_ALLOC(4096);

	count(S_RETAIN, 4096);
	if (ring[ring_pos])
		RETAIN_FREE(ring[ring_pos]);
	ring[ring_pos] = p;
	ring_counted[ring_pos] = counting;
	ring_pos = (ring_pos + 1) % ring_n;
}

static void write_report(const char *path)
{
	char tmp[4200];
	uint64_t live = 0;
	FILE *f;

	for (unsigned i = 0; i < ring_n; i++)
		live += ring[i] && ring_counted[i];
	if (frozen)
		live = frozen_live;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	for (int i = 0; i < NSITES; i++)
		fprintf(f, "%s %llu %llu\n", names[i], (unsigned long long)objects[i],
			(unsigned long long)bytes[i]);
	fprintf(f, "live_retain_4k %llu %llu\n", (unsigned long long)live,
		(unsigned long long)(live * 4096));
	fclose(f);
	rename(tmp, path);
}

/* What malloc's GOT slot holds now: reloaded every time (not hoisted). */
static void *malloc_slot(void)
{
	void *v;

	__asm__ volatile("movq malloc@GOTPCREL(%%rip), %0" : "=r"(v));
	return v;
}

/* Counting follows the hook: on while the slot differs, frozen after. */
static void follow_hook(void *original)
{
	int hooked = malloc_slot() != original;

	if (by_hand || frozen)
		return;
	if (hooked && !counting) {
		counting = 1;
	} else if (!hooked && counting) {
		counting = 0;
		frozen = 1;
		for (unsigned i = 0; i < ring_n; i++)
			frozen_live += ring[i] && ring_counted[i];
	}
}

int main(int argc, char **argv)
{
	unsigned seconds, pace;
	uint64_t start, done = 0;
	time_t end;

	if (argc < 3) {
		fprintf(stderr, "usage: heapsites SECONDS REPORT [RETAIN_BLOCKS]\n");
		return 2;
	}
	seconds = (unsigned)atoi(argv[1]);
	ring_n = argc > 3 ? (unsigned)atoi(argv[3]) : 256;
	pace = argc > 4 ? (unsigned)atoi(argv[4]) : 5000;
	if (ring_n < 1 || ring_n > RETAIN_MAX)
		return 2;
	alarm(seconds + 10);
	signal(SIGUSR1, on_signal);
	signal(SIGUSR2, on_signal);
	end = time(NULL) + (time_t)seconds;
	start = now_ns();
	void *original = malloc_slot();
	printf("ready\n");
	fflush(stdout);
	while (time(NULL) < end) {
		for (int i = 0; i < 64; i++) {
			follow_hook(original);
			a_512k();
			a_256k_1();
			a_1k();
			a_256k_2();
			a_512();
			a_256k_3();
			a_256();
			a_256k_4();
			a_16();
			b_1k();
			b_512();
			b_256();
			b_16();
			retain_4k();
		}
		done += 64;
		/* Ahead of the pace: wait until it catches up. */
		while (pace && done * 1000000000ull / pace > now_ns() - start) {
			struct timespec ts = { 0, 200000 };

			nanosleep(&ts, NULL);
		}
		if (report_now) {
			report_now = 0;
			write_report(argv[2]);
		}
	}
	return 0;
}
