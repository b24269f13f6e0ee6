/*
 * ownmalloc SECONDS [prefix]
 *
 * A program with its allocator inside its executable, as cprof heap cannot
 * hook it (lib/heap/allocator.h): without arguments beyond SECONDS it
 * defines malloc, free, calloc and realloc itself (a bump allocator on one
 * mapping that never frees); with "prefix" it defines je_malloc and
 * je_free instead, as jemalloc built with its je_ prefix and linked
 * statically would, and calls them directly (built as ownmalloc-prefix);
 * ownmalloc-jemalloc links Debian's libjemalloc_pic.a instead. Prints "ready", allocates in a
 * loop, exits after SECONDS.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define ARENA (64u << 20)

static unsigned char *arena;
static size_t used;

static __attribute__((unused)) void *bump(size_t size)
{
	size_t at = (used + 15) & ~(size_t)15;

	if (!arena) {
		void *m = mmap(NULL, ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (m == MAP_FAILED)
			return NULL;
		arena = m;
	}
	if (size > ARENA || at > ARENA - size)
		used = at = 0; /* wraps: a toy that only has to run a while */
	used = at + size;
	return arena + at;
}

#if defined(OWNMALLOC_JEMALLOC)
/* malloc and free from Debian's libjemalloc_pic.a, linked in. */
#define ALLOC malloc
#define FREE free
#elif defined(OWNMALLOC_PREFIX)
__attribute__((noinline)) void *je_malloc(size_t size)
{
	return bump(size);
}

__attribute__((noinline)) void je_free(void *p)
{
	(void)p;
}
#define ALLOC je_malloc
#define FREE je_free
#else
void *malloc(size_t size)
{
	return bump(size);
}

void free(void *p)
{
	(void)p;
}

void *calloc(size_t n, size_t size)
{
	void *p = n && size > SIZE_MAX / n ? NULL : bump(n * size);

	if (p)
		memset(p, 0, n * size);
	return p;
}

void *realloc(void *old, size_t size)
{
	void *p = bump(size);

	if (p && old)
		memcpy(p, old, size); /* the toy's blocks lie in one mapping */
	return p;
}
#define ALLOC malloc
#define FREE free
#endif

static void *volatile sink;

int main(int argc, char **argv)
{
	time_t end;

	if (argc < 2)
		return 2;
	alarm((unsigned)atoi(argv[1]) + 10);
	end = time(NULL) + atoi(argv[1]);
	printf("ready\n");
	fflush(stdout);
	while (time(NULL) < end) {
		for (int i = 0; i < 1000; i++) {
			sink = ALLOC(64);
			FREE(sink);
		}
		usleep(1000);
	}
	return 0;
}
