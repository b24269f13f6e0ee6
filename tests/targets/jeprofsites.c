/*
 * jeprofsites SECONDS REPORT [DUMP]
 *
 * Ground truth for cprof heap --source jemalloc (issue 15): built linked
 * with jemalloc only (tests/CMakeLists.txt: jeprofsites-jemalloc) and run
 * with MALLOC_CONF=prof:true,prof_accum:true,lg_prof_sample:N, so that
 * jemalloc's own profiler samples it from its first allocation. At start
 * each site allocates a known count of blocks of one size (sizes that are
 * jemalloc size classes: its profile counts usable sizes): small_64,
 * medium_4k and large_256k free each block at once, retain_1k and
 * retain_16k keep theirs until exit. Then it writes
 *   "SITE OBJECTS BYTES\n" per site (what was allocated), then
 *   "live_SITE OBJECTS BYTES\n" for the two retaining ones (what is in use)
 * to REPORT (beside, then renamed), with DUMP has its jemalloc write its
 * heap profile there itself (mallctl "prof.dump"), prints "ready", and
 * sleeps; it exits after SECONDS. (The plain build, without
 * JEPROFSITES_JEMALLOC, runs on any malloc and cannot dump.)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef JEPROFSITES_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

#define NOINLINE __attribute__((noinline, noclone))

static void *volatile sink;
static void **kept_1k, **kept_16k;

struct site {
	const char *name;
	uint64_t objects, size;
};

enum { SMALL, MEDIUM, LARGE, RETAIN_1K, RETAIN_16K, NSITES };

static const struct site sites[NSITES] = {
	{ "small_64", 400000, 64 },       { "medium_4k", 40000, 4096 },
	{ "large_256k", 1000, 262144 },   { "retain_1k", 40000, 1024 },
	{ "retain_16k", 2000, 16384 },
};

NOINLINE static void small_64(void)
{
	for (uint64_t i = 0; i < sites[SMALL].objects; i++) {
		sink = malloc(sites[SMALL].size);
		free(sink);
	}
}

NOINLINE static void medium_4k(void)
{
	for (uint64_t i = 0; i < sites[MEDIUM].objects; i++) {
		sink = malloc(sites[MEDIUM].size);
		free(sink);
	}
}

NOINLINE static void large_256k(void)
{
	for (uint64_t i = 0; i < sites[LARGE].objects; i++) {
		sink = malloc(sites[LARGE].size);
		free(sink);
	}
}

NOINLINE static void retain_1k(void)
{
	for (uint64_t i = 0; i < sites[RETAIN_1K].objects; i++)
		kept_1k[i] = malloc(sites[RETAIN_1K].size);
	sink = kept_1k[0];
}

NOINLINE static void retain_16k(void)
{
	for (uint64_t i = 0; i < sites[RETAIN_16K].objects; i++)
		kept_16k[i] = malloc(sites[RETAIN_16K].size);
	sink = kept_16k[0];
}

static int write_report(const char *path)
{
	char tmp[4096];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return -1;
	for (int i = 0; i < NSITES; i++)
		fprintf(f, "%s %llu %llu\n", sites[i].name, (unsigned long long)sites[i].objects,
			(unsigned long long)(sites[i].objects * sites[i].size));
	for (int i = RETAIN_1K; i <= RETAIN_16K; i++)
		fprintf(f, "live_%s %llu %llu\n", sites[i].name,
			(unsigned long long)sites[i].objects,
			(unsigned long long)(sites[i].objects * sites[i].size));
	if (fclose(f) != 0)
		return -1;
	return rename(tmp, path);
}

int main(int argc, char **argv)
{
	struct timespec end, now;
	int seconds;

	if (argc < 3) {
		fprintf(stderr, "usage: jeprofsites SECONDS REPORT [DUMP]\n");
		return 64;
	}
	seconds = atoi(argv[1]);
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += seconds;
	/* calloc's: before the sites, so that their blocks are the sites' own. */
	kept_1k = calloc(sites[RETAIN_1K].objects, sizeof(void *));
	kept_16k = calloc(sites[RETAIN_16K].objects, sizeof(void *));
	if (!kept_1k || !kept_16k)
		return 1;
	small_64();
	medium_4k();
	large_256k();
	retain_1k();
	retain_16k();
	if (write_report(argv[2]) != 0) {
		perror("jeprofsites: report");
		return 1;
	}
	if (argc > 3) {
#ifdef JEPROFSITES_JEMALLOC
		const char *dump = argv[3];
		int r = mallctl("prof.dump", NULL, NULL, (void *)&dump, sizeof(dump));

		if (r != 0) {
			fprintf(stderr, "jeprofsites: prof.dump: %s\n", strerror(r));
			return 1;
		}
#else
		fprintf(stderr, "jeprofsites: built without jemalloc: no dump\n");
		return 1;
#endif
	}
	printf("ready\n");
	fflush(stdout);
	do {
		usleep(20000);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec < end.tv_sec ||
		 (now.tv_sec == end.tv_sec && now.tv_nsec < end.tv_nsec));
	return 0;
}
