/*
 * clones [SECONDS]: one thread that spends its time in the four kinds of
 * copies GCC makes of a function at -O2, each holding an inlined call (lcg):
 *  - clone_constprop.constprop.0: every caller passes the same constant;
 *  - clone_isra.isra.0: a struct passed by value of which two fields are
 *    read (scalar replacement of aggregates);
 *  - clone_cold.cold: the code after a call of a cold function, moved out
 *    of line (it is the branch that always runs here);
 *  - clone_part.part.0: partial inlining: the cheap test is inlined into
 *    main, the rest stays out of line.
 * A profile must name each by its function's one name. The tests check that
 * the compiler made each clone (the symbols are in the binary).
 *
 * Prints "ready", exits by itself after SECONDS (default 20).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct params {
	uint64_t mul, add, unused[6];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static inline __attribute__((always_inline)) uint64_t lcg(uint64_t x, uint64_t mul, uint64_t add)
{
	for (int i = 0; i < 2000; i++) {
		x = x * mul + add;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

__attribute__((noinline)) static uint64_t clone_constprop(uint64_t x, int rounds)
{
	for (int r = 0; r < rounds; r++)
		x = lcg(x, 6364136223846793005ULL, 1442695040888963407ULL + (uint64_t)r);
	return x;
}

__attribute__((noinline)) static uint64_t clone_isra(uint64_t x, struct params p)
{
	return lcg(x, p.mul, p.add);
}

__attribute__((cold, noinline)) static void rare_event(uint64_t *x)
{
	__asm__ volatile("" : "+m"(*x));
}

__attribute__((noinline)) static uint64_t clone_cold(uint64_t x, int slow)
{
	if (slow) {
		rare_event(&x);
		x = lcg(x, 2862933555777941757ULL, 3037000493ULL);
		rare_event(&x);
	}
	return x + 1;
}

static uint64_t clone_part(uint64_t x, const int *fast)
{
	if (*fast)
		return x;
	x = lcg(x, 0x9E3779B97F4A7C15ULL, 7);
	x = lcg(x, 0xBF58476D1CE4E5B9ULL, 11);
	x = lcg(x, 0x94D049BB133111EBULL, 13);
	return x;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? strtod(argv[1], NULL) : 20;
	/* volatile: values the compiler cannot fold into the clones. */
	volatile int slow = 1, fast_v = 0;
	volatile uint64_t mul = 6364136223846793005ULL;
	struct params p = { mul, (uint64_t)argc, { 0 } };
	int fast = fast_v;
	uint64_t x = 1, end = now_ns() + (uint64_t)(seconds * 1e9);

	printf("ready\n");
	fflush(stdout);
	while (now_ns() < end) {
		x = clone_constprop(x, 3);
		x += clone_constprop(x ^ 5, 3);
		x = clone_isra(x, p);
		x = clone_cold(x, slow);
		x = clone_part(x, &fast);
		x = clone_part(x + 3, &fast);
	}
	printf("%llu\n", (unsigned long long)x);
	return 0;
}
