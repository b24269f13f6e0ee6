/*
 * demo [SECONDS] [WORKERS] [RATE]: a small stand-in for a real server, for
 * scripts/demo. WORKERS threads (default 2, "worker-0" ...) take requests
 * from a queue the main thread ("acceptor") fills, and each request goes
 * through parse_request, hash_payload (with an always-inlined mix64, so the
 * profile shows an inline frame), compress_block and format_response
 * (snprintf: time inside libc). The hot spot is compress_block, then
 * hash_payload. Exits by itself after SECONDS (default 30).
 *
 * RATE (requests per second; default 0, as fast as the workers take them)
 * paces the acceptor: a server that is not saturated, whose workers wait
 * for work, for a test that needs each kind of event but not the CPUs.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QUEUE_LEN 64
#define PAYLOAD 4096
#define WINDOW 24	  /* compress_block: how far back it looks for repeats */
#define HASH_ROUNDS 12	  /* hash_payload: passes over the payload */
#define FORMAT_REPEAT 100 /* format_response: snprintf calls (time in libc) */

struct request {
	char line[128];
	uint8_t payload[PAYLOAD];
};

struct parsed {
	char method[8];
	char path[64];
	unsigned long length;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t nonempty, nonfull;
	struct request *items[QUEUE_LEN];
	size_t head, count;
	int closed;
} queue = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

static atomic_int started;
static atomic_ulong served;
static volatile uint64_t sink;

static inline __attribute__((always_inline)) uint64_t mix64(uint64_t h, uint8_t b)
{
	h ^= b;
	h *= 0x100000001b3ULL;
	h ^= h >> 29;
	return h;
}

__attribute__((noinline)) static int parse_request(const char *line, struct parsed *p)
{
	const char *sp = strchr(line, ' ');

	if (!sp || (size_t)(sp - line) >= sizeof(p->method))
		return -1;
	memcpy(p->method, line, (size_t)(sp - line));
	p->method[sp - line] = '\0';
	const char *sp2 = strchr(sp + 1, ' ');
	if (!sp2 || (size_t)(sp2 - sp - 1) >= sizeof(p->path))
		return -1;
	memcpy(p->path, sp + 1, (size_t)(sp2 - sp - 1));
	p->path[sp2 - sp - 1] = '\0';
	p->length = strtoul(sp2 + 1, NULL, 10);
	return p->length <= PAYLOAD ? 0 : -1;
}

__attribute__((noinline)) static uint64_t hash_payload(const uint8_t *data, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (int round = 0; round < HASH_ROUNDS; round++)
		for (size_t i = 0; i < len; i++)
			h = mix64(h, data[i]);
	return h;
}

/* A run-length coder with a brute-force search for repeats: slow on purpose. */
__attribute__((noinline)) static size_t compress_block(const uint8_t *in, size_t len, uint8_t *out)
{
	size_t o = 0;

	for (size_t i = 0; i < len;) {
		size_t best = 0, dist = 0;
		size_t from = i > WINDOW ? i - WINDOW : 0;

		for (size_t j = from; j < i; j++) {
			size_t n = 0;
			while (i + n < len && n < 32 && in[j + n] == in[i + n])
				n++;
			if (n > best) {
				best = n;
				dist = i - j;
			}
		}
		if (best >= 4) {
			out[o++] = 0xff;
			out[o++] = (uint8_t)dist;
			out[o++] = (uint8_t)best;
			i += best;
		} else {
			out[o++] = in[i++];
		}
	}
	return o;
}

__attribute__((noinline)) static int format_response(char *buf, size_t size, const struct parsed *p,
						     uint64_t hash, size_t clen)
{
	int n = 0;

	for (int i = 0; i < FORMAT_REPEAT; i++)
		n = snprintf(buf, size,
			     "HTTP/1.1 200 OK\r\nX-Path: %s\r\nETag: %016llx\r\n"
			     "Content-Length: %zu\r\nX-Ratio: %.3f\r\n\r\n",
			     p->path, (unsigned long long)hash, clen,
			     (double)clen / (double)(p->length ? p->length : 1));
	return n;
}

__attribute__((noinline)) static void handle_request(struct request *r)
{
	static __thread uint8_t out[PAYLOAD * 2];
	struct parsed p;
	char resp[512];

	if (parse_request(r->line, &p) != 0)
		return;
	uint64_t h = hash_payload(r->payload, p.length);
	size_t clen = compress_block(r->payload, p.length, out);
	sink += (uint64_t)format_response(resp, sizeof(resp), &p, h, clen);
	atomic_fetch_add(&served, 1);
}

static void *worker(void *arg)
{
	(void)arg;
	atomic_fetch_add(&started, 1);
	for (;;) {
		pthread_mutex_lock(&queue.lock);
		while (queue.count == 0 && !queue.closed)
			pthread_cond_wait(&queue.nonempty, &queue.lock);
		if (queue.count == 0) {
			pthread_mutex_unlock(&queue.lock);
			return NULL;
		}
		struct request *r = queue.items[queue.head];
		queue.head = (queue.head + 1) % QUEUE_LEN;
		queue.count--;
		pthread_cond_signal(&queue.nonfull);
		pthread_mutex_unlock(&queue.lock);
		handle_request(r);
		free(r);
	}
}

__attribute__((noinline)) static struct request *accept_request(uint64_t *rng)
{
	static const char *paths[] = {"/index.html", "/api/items", "/static/app.js",
				      "/img/logo.png"};
	struct request *r = malloc(sizeof(*r));

	if (!r)
		return NULL;
	*rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
	size_t len = 1024 + (*rng >> 40) % (PAYLOAD - 1024);
	snprintf(r->line, sizeof(r->line), "GET %s %zu", paths[(*rng >> 20) % 4], len);
	for (size_t i = 0; i < len; i++) {
		*rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
		/* Text-like bytes from a small alphabet, so there are repeats. */
		r->payload[i] = (uint8_t)("etaoin shrdlu"[(*rng >> 59) % 13]);
	}
	return r;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? strtod(argv[1], NULL) : 30;
	int workers = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 2;
	double rate = argc > 3 ? strtod(argv[3], NULL) : 0;
	pthread_t *t;
	struct timespec now, end, next;
	uint64_t rng = 1;

	if (seconds <= 0 || workers < 1 || workers > 64 || rate < 0) {
		fprintf(stderr, "usage: demo [SECONDS] [WORKERS] [RATE]\n");
		return 64;
	}
	t = calloc((size_t)workers, sizeof(*t));
	if (!t)
		return 1;
	for (int i = 0; i < workers; i++) {
		char name[16];

		if (pthread_create(&t[i], NULL, worker, NULL) != 0)
			return 1;
		snprintf(name, sizeof(name), "worker-%d", i);
		pthread_setname_np(t[i], name);
	}
	while (atomic_load(&started) < workers) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	printf("ready\n");
	fflush(stdout);

	clock_gettime(CLOCK_MONOTONIC, &end);
	next = end;
	end.tv_sec += (time_t)seconds;
	for (;;) {
		if (rate > 0) {
			next.tv_nsec += (long)(1e9 / rate);
			next.tv_sec += next.tv_nsec / 1000000000;
			next.tv_nsec %= 1000000000;
			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > end.tv_sec ||
		    (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
			break;
		struct request *r = accept_request(&rng);
		if (!r)
			break;
		pthread_mutex_lock(&queue.lock);
		while (queue.count == QUEUE_LEN)
			pthread_cond_wait(&queue.nonfull, &queue.lock);
		queue.items[(queue.head + queue.count) % QUEUE_LEN] = r;
		queue.count++;
		pthread_cond_signal(&queue.nonempty);
		pthread_mutex_unlock(&queue.lock);
	}
	pthread_mutex_lock(&queue.lock);
	queue.closed = 1;
	pthread_cond_broadcast(&queue.nonempty);
	pthread_mutex_unlock(&queue.lock);
	for (int i = 0; i < workers; i++)
		pthread_join(t[i], NULL);
	fprintf(stderr, "demo: served %lu requests\n", (unsigned long)atomic_load(&served));
	free(t);
	return 0;
}
