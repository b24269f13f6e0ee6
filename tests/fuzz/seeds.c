/*
 * Writes the real inputs of tests/fuzz/corpus/: this process's own
 * /proc/self/maps, a profile encoded by lib/pprof (plain and gzipped), and
 * perf records taken from a real session on this process (a sample with
 * registers and stack, and a COMM). Run by hand when a format changes:
 *
 *   cmake --build build-fuzz --target fuzz-seeds
 *   build-fuzz/fuzz/fuzz-seeds tests/fuzz/corpus
 *
 * (fuzz-unwind writes its own seeds: they depend on the binary.)
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "maps/maps.h"
#include "perf/perf-private.h"
#include "pprof/pprof.h"
#include "util/util.h"

static const char *top;

static void die(const char *what, int err)
{
	fprintf(stderr, "fuzz-seeds: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

static void ok(int r, const char *what)
{
	if (r < 0)
		die(what, r);
}

static void write_seed(const char *dir, const char *name, const void *buf, size_t len)
{
	char path[4096];
	int fd, r;

	snprintf(path, sizeof(path), "%s/%s/%s", top, dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		die(path, errno);
	r = write_full(fd, buf, len);
	if (r < 0)
		die(path, r);
	close(fd);
	printf("%s: %zu bytes\n", path, len);
}

/* ---- maps ------------------------------------------------------------- */

static void maps_seeds(void)
{
	char buf[1 << 16];
	ssize_t n;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	size_t len = 0;

	if (fd < 0)
		die("/proc/self/maps", errno);
	while ((n = read(fd, buf + len, sizeof(buf) - len)) > 0)
		len += (size_t)n;
	close(fd);
	/* The first 30 lines are plenty: executable, heap, libraries. */
	for (size_t i = 0, lines = 0; i < len; i++)
		if (buf[i] == '\n' && ++lines == 30)
			len = i + 1;
	write_seed("maps", "self", buf, len);
}

/* ---- pprof ------------------------------------------------------------ */

/* Every field of the format: two sample types, mappings, inline frames,
 * string and numeric labels, header fields, comments. */
static struct profile *rich_profile(void)
{
	static const struct profile_value_type types[] = {
		{ "alloc_objects", "count" },
		{ "alloc_space", "bytes" },
	};
	struct profile_mapping app = {
		.start = 0x400000, .limit = 0x500000, .offset = 0x1000,
		.file = "/usr/bin/app", .build_id = "deadbeef00112233",
		.has_functions = true, .has_filenames = true,
		.has_line_numbers = true, .has_inline_frames = true,
	};
	struct profile_mapping libc = {
		.start = 0x7f0000000000, .limit = 0x7f0000200000,
		.file = "/lib/x86_64-linux-gnu/libc.so.6", .build_id = "",
	};
	struct profile_label worker[] = {
		{ .key = "thread_name", .str = "worker" },
		{ .key = "thread_id", .num = 101 },
		{ .key = "request", .num = 64, .num_unit = "bytes" },
	};
	struct profile_label main_thread[] = { { .key = "thread_name", .str = "main" } };
	uint64_t m_app, m_libc, f_main, f_compute, f_helper, f_malloc;
	uint64_t l_main, l_compute, l_inline, l_malloc;
	struct profile *p = NULL;

	ok(profile_new(&p, types, 2), "profile_new");
	ok(profile_add_mapping(p, &app, &m_app), "mapping");
	ok(profile_add_mapping(p, &libc, &m_libc), "mapping");
	ok(profile_intern_function(p, "main", "main", "main.c", 10, &f_main), "function");
	ok(profile_intern_function(p, "compute_things", "_Z14compute_thingsv", "compute.c", 20,
				   &f_compute), "function");
	ok(profile_intern_function(p, "inlined_helper", "inlined_helper", "helper.h", 5,
				   &f_helper), "function");
	ok(profile_intern_function(p, "malloc", "malloc", "", 0, &f_malloc), "function");

	struct profile_line main_lines[] = { { f_main, 15 } };
	struct profile_line compute_lines[] = { { f_compute, 25 } };
	struct profile_line inline_lines[] = { { f_helper, 7 }, { f_compute, 30 } };
	struct profile_line malloc_lines[] = { { f_malloc, 0 } };

	ok(profile_location_for_address(p, 0x400800, &l_main), "location");
	ok(profile_location_for_address(p, 0x401000, &l_compute), "location");
	ok(profile_location_for_address(p, 0x401100, &l_inline), "location");
	ok(profile_location_for_address(p, 0x7f0000001000, &l_malloc), "location");
	ok(profile_location_set(p, l_main, m_app, main_lines, 1), "lines");
	ok(profile_location_set(p, l_compute, m_app, compute_lines, 1), "lines");
	ok(profile_location_set(p, l_inline, m_app, inline_lines, 2), "lines");
	ok(profile_location_set(p, l_malloc, m_libc, malloc_lines, 1), "lines");

	uint64_t s1[] = { l_malloc, l_inline, l_main }, s2[] = { l_compute, l_main };
	uint64_t s3[] = { l_main };
	int64_t v1[] = { 3, 3000 }, v2[] = { 1, 512 }, v3[] = { 2, 2048 };

	ok(profile_add_sample(p, s1, 3, v1, worker, 3), "sample");
	ok(profile_add_sample(p, s2, 2, v2, main_thread, 1), "sample");
	ok(profile_add_sample(p, s3, 1, v3, NULL, 0), "sample");
	ok(profile_set_period(p, "space", "bytes", 524288), "period");
	ok(profile_set_default_sample_type(p, "alloc_space"), "default sample type");
	ok(profile_set_drop_frames(p, "cprof_agent_.*"), "drop frames");
	ok(profile_add_comment(p, "cprof heap -p 42"), "comment");
	p->time_nanos = 1700000000123456789;
	p->duration_nanos = 30000000000;
	return p;
}

static void pprof_seeds(void)
{
	static const struct profile_value_type cpu[] = { { "samples", "count" },
							 { "cpu", "nanoseconds" } };
	struct profile *p = rich_profile(), *empty = NULL;
	uint8_t *buf;
	size_t len;

	ok(pprof_encode(p, &buf, &len), "pprof_encode");
	write_seed("pprof", "rich-pb", buf, len);
	free(buf);
	ok(pprof_encode_gzip(p, &buf, &len), "pprof_encode_gzip");
	write_seed("pprof", "rich-pb-gz", buf, len);
	free(buf);
	profile_free(p);

	ok(profile_new(&empty, cpu, 2), "profile_new");
	ok(profile_set_period(empty, "cpu", "nanoseconds", 10000000), "period");
	ok(pprof_encode(empty, &buf, &len), "pprof_encode");
	write_seed("pprof", "empty-pb", buf, len);
	free(buf);
	profile_free(empty);
}

/* ---- perf ------------------------------------------------------------- */

static struct perf_session *session;
static bool have_sample, have_comm;
static volatile bool stop;

/* The record being dispatched is still in session->record: save it raw,
 * after the fuzzer's flags byte (1: hdr.size from the length, 2: our pid). */
static void save_record(const char *name)
{
	const struct perf_event_header *hdr = (const void *)session->record;
	uint8_t *buf = malloc(1 + hdr->size);

	if (!buf)
		die("malloc", ENOMEM);
	buf[0] = 3;
	memcpy(buf + 1, session->record, hdr->size);
	write_seed("perf", name, buf, 1 + hdr->size);
	free(buf);
}

static int on_sample(const struct perf_sample *s, void *arg)
{
	(void)arg;
	if (!have_sample && s->has_user && s->user.stack_size) {
		have_sample = true;
		save_record("sample");
	}
	return 0;
}

static void on_comm(pid_t tid, const char *name, void *arg)
{
	(void)tid;
	(void)arg;
	if (!have_comm && !strcmp(name, "fuzz-seed")) {
		have_comm = true;
		save_record("comm");
	}
}

static void *spin(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "fuzz-seed");
	while (!stop)
		__asm__ volatile("" ::: "memory");
	return NULL;
}

static void perf_seeds(void)
{
	struct perf_opts o = { .pid = getpid(), .period_ns = 1000000, .scope = PERF_SCOPE_THREAD,
			       .stack_bytes = 512, .ring_pages = 16 };
	struct perf_handlers h = { .sample = on_sample, .comm = on_comm };
	uint64_t end;
	pthread_t t;
	int r;

	r = perf_session_open(&session, &o);
	if (r < 0)
		die("perf_session_open", r);
	if (perf_session_enable(session) < 0)
		die("perf_session_enable", errno);
	if (pthread_create(&t, NULL, spin, NULL))
		die("pthread_create", EAGAIN);
	end = now_monotonic_ns() + 2000000000ULL;
	while ((!have_sample || !have_comm) && now_monotonic_ns() < end) {
		perf_session_wait(session, 20);
		perf_session_drain(session, &h);
	}
	stop = true;
	pthread_join(t, NULL);
	perf_session_free(session);
	if (!have_sample || !have_comm)
		die("no sample or comm record within 2 s", ETIMEDOUT);

	/* Hand-built: the kernel's LOST and LOST_SAMPLES records. */
	struct {
		uint8_t flags;
		struct perf_event_header hdr;
		uint64_t id, lost;
	} __attribute__((packed)) lost = { 1, { PERF_RECORD_LOST, 0, 24 }, 7, 42 };
	struct {
		uint8_t flags;
		struct perf_event_header hdr;
		uint64_t lost;
	} __attribute__((packed)) lost_samples = { 1, { PERF_RECORD_LOST_SAMPLES, 0, 16 }, 5 };

	write_seed("perf", "lost", &lost, sizeof(lost));
	write_seed("perf", "lost-samples", &lost_samples, sizeof(lost_samples));
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fuzz-seeds CORPUS_DIR\n");
		return 64;
	}
	top = argv[1];
	maps_seeds();
	pprof_seeds();
	perf_seeds();
	return 0;
}
