/*
 * Which allocations to sample: Go's heap profiler scheme (runtime/malloc.go,
 * nextSample/fastexprand). Sample points form a Poisson process of rate
 * 1/rate over the stream of allocated bytes, so the gaps between them are
 * exponentially distributed with mean `rate`. Each thread keeps a countdown
 * of bytes to the next sample point; an allocation of n bytes is sampled when
 * the point falls inside it (n >= countdown), and the countdown is then drawn
 * afresh.
 *
 * With countdown = ceil(X), X ~ Exp(rate), the countdown is geometric, which
 * is memoryless: every allocation of n bytes is sampled independently with
 * probability 1 - exp(-n / rate), whatever came before. cprof unbiases with
 * that (Go's scaleHeapSample).
 *
 * The unsampled path is one compare and one subtraction on a thread-local
 * variable in the hook (hooks.c); this file only runs on sample points.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "agent.h"

AGENT_TLS uint64_t agent_countdown;
AGENT_TLS int agent_in_hook;
uint64_t agent_rate = AGENT_DEFAULT_RATE;

/* Per-thread PRNG state (wyrand); 0 = not seeded yet. */
static AGENT_TLS uint64_t prng_state;

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void prng_seed(void)
{
	struct timespec ts;
	uint64_t s;

	/* Distinct per thread (the TLS address) and per run (the clock). */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)&prng_state;
	prng_state = splitmix64(s) | 1;
}

static uint64_t prng_next(void)
{
	__uint128_t m;

	prng_state += 0xa0761d6478bd642full;
	m = (__uint128_t)prng_state * (prng_state ^ 0xe7037ed1a0b428dbull);
	return (uint64_t)(m >> 64) ^ (uint64_t)m;
}

/*
 * -ln(x) without libm: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), then
 * ln(m) = 2 atanh(t), t = (m - 1) / (m + 1), |t| <= 0.1716, summed to t^11.
 * The first omitted term is 2 t^13 / 13 < 1.7e-11 absolute, so -ln(x) is
 * within ~1e-10 absolute (relative error < 1e-6 for every x < 1 - 1e-4, and
 * the absolute error is what matters for the mean of the draws).
 */
double sampler_neg_log(double x)
{
	uint64_t bits;
	int e;
	double m, t, t2, s;

	memcpy(&bits, &x, sizeof(bits));
	e = (int)((bits >> 52) & 0x7ff) - 1023;
	bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull; /* m in [1, 2) */
	memcpy(&m, &bits, sizeof(m));
	if (m > 1.4142135623730951) {
		m *= 0.5;
		e++;
	}
	t = (m - 1.0) / (m + 1.0);
	t2 = t * t;
	s = t * (2.0 + t2 * (2.0 / 3 + t2 * (2.0 / 5 + t2 * (2.0 / 7 + t2 * (2.0 / 9 + t2 * (2.0 / 11))))));
	return -(s + e * 0.6931471805599453);
}

uint64_t sampler_draw(uint64_t rate)
{
	double u, gap;

	if (rate <= 1)
		return 0;
	if (rate > CPROF_WIRE_RATE_MAX)
		rate = CPROF_WIRE_RATE_MAX;
	if (unlikely(prng_state == 0))
		prng_seed();
	/* u uniform in (0, 1]: 53 random bits, + 1. -ln(u) <= 36.8. */
	u = (double)((prng_next() >> 11) + 1) * 0x1p-53;
	gap = sampler_neg_log(u) * (double)rate;
	/* ceil, and at least 1 byte: countdown = ceil(X) (see the top). */
	uint64_t g = (uint64_t)gap;
	if ((double)g < gap || g == 0)
		g++;
	return g;
}

bool sampler_should_sample(uint64_t size)
{
	uint64_t rate = __atomic_load_n(&agent_rate, __ATOMIC_RELAXED);
	bool first = agent_countdown == 0 && prng_state == 0 && rate > 1;

	agent_countdown = sampler_draw(rate);
	/* A thread's first allocation only starts its countdown; sampling it
	 * would over-represent threads' first allocations. The countdown is
	 * memoryless, so starting it here is as good as at thread start. */
	if (first) {
		if (size < agent_countdown) {
			agent_countdown -= size;
			return false;
		}
		agent_countdown = sampler_draw(rate);
	}
	return true;
}

uint64_t sampler_random(void)
{
	if (unlikely(prng_state == 0))
		prng_seed();
	return prng_next();
}
