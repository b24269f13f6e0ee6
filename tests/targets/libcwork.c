/*
 * libcwork [K] [SECONDS]: K threads (default 2, named "libc-0" ...) that
 * spend most of their time inside libc, which Debian builds without frame
 * pointers: qsort (calling back into cmp_u32 here), memcpy and memset of
 * buffers larger than the caches, strlen and memchr over long strings.
 * A profiler that unwinds with frame pointers, or not at all, ends its stacks
 * inside libc; one that uses the CFI reaches start_thread (threads) and
 * __libc_start_call_main (the main thread, which also works here).
 *
 * Prints "ready" once every thread runs, exits by itself after SECONDS
 * (default 20).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SORT_N 20000
#define BUF_SIZE (8u << 20)
#define STR_SIZE (1u << 20)

static atomic_int started;
static atomic_int stop;
static volatile size_t sink;

__attribute__((noinline)) static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

__attribute__((noinline)) static void sort_work(uint32_t *v, uint64_t *rng)
{
	for (size_t i = 0; i < SORT_N; i++) {
		*rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
		v[i] = (uint32_t)(*rng >> 33);
	}
	qsort(v, SORT_N, sizeof(*v), cmp_u32);
	sink += v[SORT_N / 2];
}

__attribute__((noinline)) static void copy_work(char *dst, char *src)
{
	for (int i = 0; i < 4; i++) {
		memset(src, 'a' + i, BUF_SIZE);
		memcpy(dst, src, BUF_SIZE);
	}
	sink += (size_t)dst[BUF_SIZE / 3];
}

__attribute__((noinline)) static void scan_work(const char *s)
{
	for (int i = 0; i < 16; i++) {
		sink += strlen(s);
		sink += (size_t)(memchr(s, 'z', STR_SIZE) != NULL);
	}
}

static void work_loop(void)
{
	uint32_t *v = malloc(SORT_N * sizeof(*v));
	char *src = malloc(BUF_SIZE), *dst = malloc(BUF_SIZE);
	char *s = malloc(STR_SIZE + 1);
	uint64_t rng = (uintptr_t)&rng;

	if (!v || !src || !dst || !s) {
		fprintf(stderr, "libcwork: out of memory\n");
		exit(1);
	}
	memset(s, 'x', STR_SIZE);
	s[STR_SIZE] = '\0';
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		sort_work(v, &rng);
		copy_work(dst, src);
		scan_work(s);
	}
	free(v);
	free(src);
	free(dst);
	free(s);
}

static void *worker(void *arg)
{
	(void)arg;
	atomic_fetch_add(&started, 1);
	work_loop();
	return NULL;
}

int main(int argc, char **argv)
{
	int k = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 2;
	double seconds = argc > 2 ? strtod(argv[2], NULL) : 20;
	pthread_attr_t attr;
	struct timespec end;

	if (k < 0 || k > 256 || seconds <= 0) {
		fprintf(stderr, "usage: libcwork [K] [SECONDS]\n");
		return 64;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	for (int i = 0; i < k; i++) {
		pthread_t t;
		char name[16];

		if (pthread_create(&t, &attr, worker, NULL) != 0) {
			perror("pthread_create");
			return 1;
		}
		snprintf(name, sizeof(name), "libc-%d", i);
		pthread_setname_np(t, name);
	}
	while (atomic_load(&started) < k) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	printf("ready\n");
	fflush(stdout);

	/* The main thread works too (its stacks end in __libc_start_call_main). */
	clock_gettime(CLOCK_MONOTONIC, &end);
	uint64_t deadline = (uint64_t)end.tv_sec * 1000000000ULL + (uint64_t)end.tv_nsec +
			    (uint64_t)(seconds * 1e9);
	uint32_t *v = malloc(SORT_N * sizeof(*v));
	uint64_t rng = 42;

	if (!v)
		return 1;
	for (;;) {
		struct timespec now;

		sort_work(v, &rng);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec >= deadline)
			break;
	}
	free(v);
	atomic_store(&stop, 1);
	return 0;
}
