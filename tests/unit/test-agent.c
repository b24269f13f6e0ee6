/*
 * cprof-agent.so (lib/agent/), tested in-process: a forked child dlopens the
 * agent and attaches it with the test as "cprof"; the test maps the memfd
 * through /proc/CHILD/fd/N and reads the ring like cprof will (every record
 * bounds-checked). Scenarios run in the child; the child reports what it
 * checked itself (GOT contents) and the addresses it allocated.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <malloc.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

#include "agent/agent.h" /* LIVESET_FEW */
#include "agent/wire.h"
#include "testhelp.h"

#define SKIP_CODE 77
#define NINFO 16

/* --- child side ------------------------------------------------------------ */

struct child_ctx {
	int (*attach_events)(int, uint64_t, uint32_t, uint32_t);
	int (*detach)(void);
	int memfd;
	struct cprof_wire_header *hdr; /* the child's own view */
	int in, out;                   /* pipes from / to the parent */
	uint64_t info[NINFO];          /* reported to the parent */
};

struct scenario {
	int (*pre)(struct child_ctx *); /* before attach; 0 = ok */
	int (*run)(struct child_ctx *); /* after attach; 0 = ok, else a line number */
	void (*parent_mid)(pid_t child, struct cprof_wire_header *h, int to_child);
	uint64_t rate;
	uint32_t ring;
	pid_t cprof_pid; /* 0: the test process; -1: none (a cprof the agent cannot see) */
	uint32_t events; /* CPROF_EVENTS_*; 0: heap */
};

static void escape(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static void wait_parent(struct child_ctx *c)
{
	char b;

	if (read(c->in, &b, 1) != 1)
		_exit(3);
}

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond))                                                   \
			return __LINE__;                                       \
	} while (0)

static __attribute__((noreturn)) void child_main(const struct scenario *s, pid_t cprof, int in, int out)
{
	struct child_ctx c = { .in = in, .out = out };
	void *h = dlopen(CPROF_AGENT_PATH, RTLD_NOW | RTLD_LOCAL);
	int res;

	if (!h)
		_exit(2);
	c.attach_events = (int (*)(int, uint64_t, uint32_t, uint32_t))dlsym(h, "cprof_agent_attach_events");
	c.detach = (int (*)(void))dlsym(h, "cprof_agent_detach");
	if (!c.attach_events || !c.detach)
		_exit(2);
	res = s->pre ? s->pre(&c) : 0;
	if (res == 0) {
		c.memfd = c.attach_events(cprof, s->rate, s->ring,
					  s->events ? s->events : CPROF_EVENTS_HEAP);
		if (c.memfd < 0)
			res = 1000 - c.memfd;
	}
	if (res == 0)
		c.hdr = mmap(NULL, CPROF_WIRE_HEADER_SIZE, PROT_READ, MAP_SHARED, c.memfd, 0);
	if (write(out, &res, sizeof(res)) != sizeof(res) || write(out, &c.memfd, sizeof(int)) != sizeof(int))
		_exit(3);
	if (res != 0)
		_exit(4);
	wait_parent(&c); /* the parent mapped the memfd */
	res = s->run(&c);
	if (write(out, &res, sizeof(res)) != sizeof(res) || write(out, c.info, sizeof(c.info)) != sizeof(c.info))
		_exit(3);
	wait_parent(&c); /* the parent drained the ring */
	_exit(0);
}

/* --- GOT inspection (the test's own, independent of got.c) --------------- */

struct got_query {
	const char *object; /* "" = the executable, else a substring of the path */
	const char *symbol;
	uint64_t *slot;
};

static int got_find_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct got_query *q = data;
	const ElfW(Dyn) *dyn = NULL;
	const ElfW(Rela) *rel[2] = { NULL, NULL };
	size_t relsz[2] = { 0, 0 };
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;

	(void)size;
	if (q->object[0] ? !strstr(info->dlpi_name, q->object) : info->dlpi_name[0] != '\0')
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = (const void *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
	for (; dyn && dyn->d_tag != DT_NULL; dyn++) {
		switch (dyn->d_tag) {
		case DT_JMPREL: rel[0] = (const void *)dyn->d_un.d_ptr; break;
		case DT_PLTRELSZ: relsz[0] = dyn->d_un.d_val; break;
		case DT_RELA: rel[1] = (const void *)dyn->d_un.d_ptr; break;
		case DT_RELASZ: relsz[1] = dyn->d_un.d_val; break;
		case DT_SYMTAB: symtab = (const void *)dyn->d_un.d_ptr; break;
		case DT_STRTAB: strtab = (const void *)dyn->d_un.d_ptr; break;
		}
	}
	for (int k = 0; k < 2 && symtab && strtab; k++) {
		for (size_t i = 0; rel[k] && i < relsz[k] / sizeof(ElfW(Rela)); i++) {
			uint32_t t = ELF64_R_TYPE(rel[k][i].r_info);
			const char *name = strtab + symtab[ELF64_R_SYM(rel[k][i].r_info)].st_name;

			if ((t == R_X86_64_JUMP_SLOT || t == R_X86_64_GLOB_DAT) && strcmp(name, q->symbol) == 0) {
				q->slot = (uint64_t *)(info->dlpi_addr + rel[k][i].r_offset);
				return 1;
			}
		}
	}
	return 1;
}

static uint64_t *got_slot(const char *object, const char *symbol)
{
	struct got_query q = { object, symbol, NULL };

	dl_iterate_phdr(got_find_cb, &q);
	return q.slot;
}

static bool in_agent(uint64_t addr)
{
	Dl_info di;

	return dladdr((void *)(uintptr_t)addr, &di) && di.dli_fname && strstr(di.dli_fname, "cprof-agent.so");
}

/* The slots a scenario checks: the test's own and libc's. */
static const struct got_query watched[] = {
	{ "", "malloc", NULL },        { "", "free", NULL },
	{ "libc.so", "malloc", NULL }, { "libc.so", "free", NULL },
	{ "libc.so", "calloc", NULL }, { "libc.so", "realloc", NULL },
};
#define NWATCHED (sizeof(watched) / sizeof(watched[0]))
static uint64_t *watched_slot[NWATCHED];
static uint64_t watched_before[NWATCHED];

static int got_save(struct child_ctx *c)
{
	(void)c;
	for (size_t i = 0; i < NWATCHED; i++) {
		watched_slot[i] = got_slot(watched[i].object, watched[i].symbol);
		if (!watched_slot[i])
			return 100 + (int)i;
		watched_before[i] = *watched_slot[i];
	}
	return 0;
}

static int got_all_hooked(void)
{
	for (size_t i = 0; i < NWATCHED; i++)
		if (!in_agent(*watched_slot[i]) || *watched_slot[i] == watched_before[i])
			return 200 + (int)i;
	return 0;
}

static int got_all_restored(void)
{
	for (size_t i = 0; i < NWATCHED; i++)
		if (*watched_slot[i] != watched_before[i])
			return 300 + (int)i;
	return 0;
}

/* --- parent side: run a scenario, read the ring ---------------------------- */

struct rec {
	uint32_t type, flags, tid, stack_size;
	uint64_t addr, size, rsp, rip;
	const uint8_t *stack; /* into the mapping (valid until unmapped) */
};

struct run {
	struct rec *recs;
	size_t nr, alloc;
	int malformed;
	int result;
	uint64_t info[NINFO];
	struct cprof_wire_header *hdr, final;
	uint8_t *map;
	size_t map_size;
	uint8_t *stacks; /* stacks copied out (the ring is reused) */
	size_t stacks_used, stacks_alloc;
	pid_t pid;
};

/* ALLOC and EVENT: @fixed bytes, then @stack_size bytes of stack, all inside. */
static bool stack_record_ok(const struct cprof_wire_record *rh, size_t fixed, uint32_t stack_size,
			    uint32_t stack_max)
{
	return rh->size >= fixed && stack_size <= stack_max && fixed + stack_size <= rh->size;
}

static void drain(struct run *r)
{
	struct cprof_wire_header *h = r->hdr;
	uint64_t head = __atomic_load_n(&h->data_head, __ATOMIC_ACQUIRE);
	uint64_t tail = h->data_tail;
	uint32_t size = h->ring_size;
	const uint8_t *data = r->map + h->header_size;

	if (head - tail > size) {
		r->malformed++;
		return;
	}
	while (tail < head) {
		uint64_t off = tail & (size - 1);
		const struct cprof_wire_record *rh = (const void *)(data + off);
		struct rec x = { .type = rh->type };

		if (off + sizeof(*rh) > size || rh->size < 8 || rh->size % 8 || off + rh->size > size ||
		    rh->size > head - tail) {
			r->malformed++;
			return;
		}
		if (rh->type == CPROF_REC_ALLOC) {
			const struct cprof_wire_alloc *a = (const void *)rh;

			if (!stack_record_ok(rh, sizeof(*a), a->stack_size, h->stack_max)) {
				r->malformed++;
				return;
			}
			x.flags = a->flags;
			x.tid = a->tid;
			x.stack_size = a->stack_size;
			x.addr = a->address;
			x.size = a->size;
			x.rsp = a->regs[CPROF_REG_RSP];
			x.rip = a->regs[CPROF_REG_RIP];
			if (r->stacks_used + a->stack_size > r->stacks_alloc) {
				r->stacks_alloc = (r->stacks_alloc + a->stack_size) * 2;
				r->stacks = realloc(r->stacks, r->stacks_alloc);
				cr_assert_not_null(r->stacks);
			}
			memcpy(r->stacks + r->stacks_used, a->stack, a->stack_size);
			x.stack = (const uint8_t *)(uintptr_t)r->stacks_used; /* offset for now */
			r->stacks_used += a->stack_size;
		} else if (rh->type == CPROF_REC_FREE) {
			const struct cprof_wire_free *f = (const void *)rh;

			if (rh->size != sizeof(*f)) {
				r->malformed++;
				return;
			}
			x.addr = f->address;
			x.size = f->size;
			x.tid = f->tid;
		} else if (rh->type == CPROF_REC_EVENT) {
			const struct cprof_wire_event *e = (const void *)rh;

			if (!stack_record_ok(rh, sizeof(*e), e->stack_size, h->stack_max)) {
				r->malformed++;
				return;
			}
			x.flags = e->kind;
			x.tid = e->tid;
			x.addr = e->object;
		} else if (rh->type != CPROF_REC_PAD) {
			r->malformed++;
			return;
		}
		if (rh->type != CPROF_REC_PAD) {
			if (r->nr == r->alloc) {
				r->alloc = r->alloc ? r->alloc * 2 : 1024;
				r->recs = realloc(r->recs, r->alloc * sizeof(*r->recs));
				cr_assert_not_null(r->recs);
			}
			r->recs[r->nr++] = x;
		}
		tail += rh->size;
	}
	__atomic_store_n(&h->data_tail, tail, __ATOMIC_RELEASE);
}

static void read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t k = read(fd, (char *)buf + got, n - got);

		cr_assert_gt(k, 0, "child died early");
		got += (size_t)k;
	}
}

/*
 * The agent hooks the allocator of the process it is loaded in; here that
 * is this test, whose malloc is ASan's interposer, which no target has. Its
 * behaviour there (realloc of blocks from before the hooks mismatches ASan's
 * bookkeeping) says nothing about real targets. Called before any fork, so
 * that a skipped test leaves no child behind.
 */
static void skip_in_asan_host(void)
{
#ifdef __SANITIZE_ADDRESS__
	cr_skip_test("the agent is not run inside an ASan-instrumented host; see the plain build");
#endif
}

static void run_scenario(const struct scenario *s, struct run *r)
{
	int to_child[2], from_child[2], res, fd;
	char path[64];

	skip_in_asan_host();

	memset(r, 0, sizeof(*r));
	cr_assert_eq(pipe(to_child), 0);
	cr_assert_eq(pipe(from_child), 0);
	r->pid = fork();
	cr_assert_geq(r->pid, 0);
	if (r->pid == 0) {
		close(to_child[1]);
		close(from_child[0]);
		child_main(s, s->cprof_pid < 0 ? 0 : s->cprof_pid ? s->cprof_pid : getppid(),
			   to_child[0], from_child[1]);
	}
	close(to_child[0]);
	close(from_child[1]);
	read_full(from_child[0], &res, sizeof(res));
	read_full(from_child[0], &fd, sizeof(fd));
	if (res == SKIP_CODE) {
		kill(r->pid, SIGKILL);
		waitpid(r->pid, NULL, 0);
		cr_skip_test("scenario not possible here");
	}
	cr_assert_eq(res, 0, "child setup failed: %d", res);

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", r->pid, fd);
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
	r->hdr = mmap(NULL, CPROF_WIRE_HEADER_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	cr_assert_neq(r->hdr, MAP_FAILED);
	cr_assert_eq(r->hdr->magic, CPROF_WIRE_MAGIC);
	cr_assert_eq(r->hdr->version, CPROF_WIRE_VERSION);
	cr_assert_eq(r->hdr->header_size, CPROF_WIRE_HEADER_SIZE);
	cr_assert_eq(r->hdr->agent_pid, r->pid);
	r->map_size = r->hdr->header_size + (size_t)r->hdr->ring_size;
	munmap(r->hdr, CPROF_WIRE_HEADER_SIZE);
	r->map = mmap(NULL, r->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(r->map, MAP_FAILED);
	r->hdr = (void *)r->map;
	close(fd);

	cr_assert_eq(write(to_child[1], "g", 1), 1);
	if (s->parent_mid)
		s->parent_mid(r->pid, r->hdr, to_child[1]);
	for (;;) {
		struct pollfd p = { .fd = from_child[0], .events = POLLIN };

		__atomic_fetch_add(&r->hdr->heartbeat, 1, __ATOMIC_RELAXED);
		drain(r);
		if (poll(&p, 1, 2) > 0)
			break;
	}
	read_full(from_child[0], &r->result, sizeof(r->result));
	read_full(from_child[0], r->info, sizeof(r->info));
	drain(r);
	r->final = *r->hdr;
	for (size_t i = 0; i < r->nr; i++)
		if (r->recs[i].type == CPROF_REC_ALLOC)
			r->recs[i].stack = r->stacks + (uintptr_t)r->recs[i].stack;
	cr_assert_eq(write(to_child[1], "x", 1), 1);
	waitpid(r->pid, &res, 0);
	close(to_child[1]);
	close(from_child[0]);
	cr_assert_eq(r->malformed, 0, "malformed records");
	cr_assert(WIFEXITED(res) && WEXITSTATUS(res) == 0, "child status %#x", res);
}

static void run_release(struct run *r)
{
	munmap(r->map, r->map_size);
	free(r->recs);
	free(r->stacks);
}

static size_t count(const struct run *r, uint32_t type, uint64_t addr, uint64_t size)
{
	size_t n = 0;

	for (size_t i = 0; i < r->nr; i++)
		if (r->recs[i].type == type && (!addr || r->recs[i].addr == addr) &&
		    (size == UINT64_MAX || r->recs[i].size == size))
			n++;
	return n;
}

/* Every FREE must match an earlier ALLOC of the same block, not yet freed. */
static void check_pairing(const struct run *r)
{
	bool *live = calloc(r->nr + 1, sizeof(bool));

	cr_assert_not_null(live);
	for (size_t i = 0; i < r->nr; i++) {
		const struct rec *f = &r->recs[i];
		bool found = false;

		if (f->type == CPROF_REC_ALLOC) {
			live[i] = true;
			continue;
		}
		for (size_t j = i; j-- > 0 && !found;) {
			if (live[j] && r->recs[j].addr == f->addr) {
				cr_assert_eq(r->recs[j].size, f->size, "FREE size differs from ALLOC");
				live[j] = false;
				found = true;
			}
		}
		cr_assert(found, "FREE of %#" PRIx64 " without an ALLOC", f->addr);
	}
	free(live);
}

/* --- GOT patched, call through the PLT sampled, GOT restored ------------- */

static int got_run(struct child_ctx *c)
{
	void *p;
	int e;

	if ((e = got_all_hooked()))
		return e;
	CHECK(c->hdr->hooked >= NWATCHED);
	p = malloc(4321); /* through the test's PLT */
	escape(p);
	c->info[0] = (uintptr_t)p;
	free(p);
	CHECK(c->detach() == 0);
	CHECK(c->detach() == -ENOENT);
	if ((e = got_all_restored()))
		return e;
	CHECK(c->hdr->state == CPROF_STATE_DETACHED);
	CHECK(c->hdr->detach_reason == CPROF_DETACH_API);
	CHECK(c->hdr->hooked == 0);
	p = malloc(4322); /* not hooked any more */
	escape(p);
	free(p);
	return 0;
}

Test(agent, got_patch_and_restore)
{
	struct scenario s = { .pre = got_save, .run = got_run, .rate = 1 };
	struct run r;

	run_scenario(&s, &r);
	cr_assert_eq(r.result, 0, "child check failed at %d", r.result);
	cr_assert_eq(count(&r, CPROF_REC_ALLOC, r.info[0], 4321), 1);
	cr_assert_eq(count(&r, CPROF_REC_FREE, r.info[0], 4321), 1);
	cr_assert_eq(count(&r, CPROF_REC_ALLOC, 0, 4322), 0);
	cr_assert_gt(r.final.samples, 0);
	run_release(&r);
}

/* --- Poisson sampling ------------------------------------------------------ */

#define POISSON_RATE 4096
#define N_SMALL 200000
#define N_BIG 5000

static int poisson_run(struct child_ctx *c)
{
	(void)c;
	for (int i = 0; i < N_SMALL; i++) {
		void *p = malloc(64);

		escape(p);
		free(p);
	}
	for (int i = 0; i < N_BIG; i++) {
		void *p = malloc(2048);

		escape(p);
		free(p);
	}
	return 0;
}

/* Each allocation of n bytes is sampled independently with probability
 * 1 - exp(-n/rate) (sampler.c), so the count is binomial: 5 sigma. */
static void check_binomial(size_t got, double n, double size)
{
	double p = 1 - exp(-size / POISSON_RATE), mean = n * p, sd = sqrt(n * p * (1 - p));

	cr_log_info("size %.0f: %zu samples, expected %.1f +- %.1f", size, got, mean, sd);
	cr_assert_lt(fabs((double)got - mean), 5 * sd, "size %.0f: %zu samples, expected %.1f +- %.1f",
		     size, got, mean, sd);
}

Test(agent, poisson_sampling)
{
	struct scenario s = { .run = poisson_run, .rate = POISSON_RATE, .ring = 64u << 20 };
	struct run r;
	size_t small, big;

	run_scenario(&s, &r);
	cr_assert_eq(r.result, 0);
	cr_assert_eq(r.final.lost, 0, "ring overflow");
	small = count(&r, CPROF_REC_ALLOC, 0, 64);
	big = count(&r, CPROF_REC_ALLOC, 0, 2048);
	check_binomial(small, N_SMALL, 64);
	check_binomial(big, N_BIG, 2048);
	/* Every sampled block was freed: a FREE with the same address and size
	 * follows its ALLOC. */
	for (size_t i = 0; i < r.nr; i++) {
		const struct rec *a = &r.recs[i];
		bool found = false;

		if (a->type != CPROF_REC_ALLOC || (a->size != 64 && a->size != 2048))
			continue;
		cr_assert_eq(a->flags, 0);
		for (size_t j = i + 1; j < r.nr && !found; j++)
			if (r.recs[j].addr == a->addr)
				found = r.recs[j].type == CPROF_REC_FREE && r.recs[j].size == a->size;
		cr_assert(found, "no FREE for sampled block %#" PRIx64, a->addr);
	}
	cr_assert_eq(count(&r, CPROF_REC_FREE, 0, 64), small);
	cr_assert_eq(count(&r, CPROF_REC_FREE, 0, 2048), big);
	check_pairing(&r);
	cr_assert_eq(r.final.samples, count(&r, CPROF_REC_ALLOC, 0, UINT64_MAX));
	cr_assert_eq(r.final.frees, count(&r, CPROF_REC_FREE, 0, UINT64_MAX));
	run_release(&r);
}

/* --- blocks from before attach, realloc, the other allocators -------------- */

#define NPRE 64
static void *pre_blocks[NPRE];

static int pre_alloc(struct child_ctx *c)
{
	(void)c;
	for (int i = 0; i < NPRE; i++) {
		pre_blocks[i] = malloc(100 + i);
		escape(pre_blocks[i]);
	}
	return 0;
}

static int variety_run(struct child_ctx *c)
{
	uint64_t *in = c->info;
	void *p, *q;

	/* Frees of blocks allocated before the hooks pass straight through. */
	for (int i = 0; i < NPRE - 1; i++)
		free(pre_blocks[i]);
	/* realloc of a sampled block: FREE + ALLOC (rate 1: always sampled). */
	p = malloc(100);
	escape(p);
	in[0] = (uintptr_t)p;
	q = realloc(p, 50000);
	escape(q);
	in[1] = (uintptr_t)q;
	/* realloc of a block from before attach: only the ALLOC. */
	p = realloc(pre_blocks[NPRE - 1], 300);
	escape(p);
	in[2] = (uintptr_t)p;
	free(q);
	free(p);
	/* realloc(p, 0) frees. */
	p = malloc(72);
	escape(p);
	in[3] = (uintptr_t)p;
	p = realloc(p, 0);
	escape(p);
	free(p);
	p = calloc(10, 30);
	in[4] = (uintptr_t)p;
	free(p);
	CHECK(posix_memalign(&p, 64, 1000) == 0);
	in[5] = (uintptr_t)p;
	free(p);
	p = aligned_alloc(64, 128);
	in[6] = (uintptr_t)p;
	free(p);
	p = memalign(32, 96);
	in[7] = (uintptr_t)p;
	free(p);
	p = valloc(10);
	in[8] = (uintptr_t)p;
	free(p);
	p = pvalloc(10);
	in[9] = (uintptr_t)p;
	free(p);
	p = reallocarray(NULL, 7, 9);
	in[10] = (uintptr_t)p;
	free(p);
	/* A failed realloc keeps the sampled block live (and tracked). */
	p = malloc(200);
	escape(p);
	in[11] = (uintptr_t)p;
	q = realloc(p, SIZE_MAX / 2);
	CHECK(q == NULL);
	free(p);
	return 0;
}

Test(agent, pre_attach_realloc_and_friends)
{
	struct scenario s = { .pre = pre_alloc, .run = variety_run, .rate = 1 };
	static const uint64_t sizes[] = { 100, 50000, 300, 72, 300, 1000, 128, 96, 10, 10, 63, 200 };
	struct run r;
	uint64_t *in;

	run_scenario(&s, &r);
	cr_assert_eq(r.result, 0, "child check failed at %d", r.result);
	in = r.info;
	/* No FREE without its ALLOC: none for the blocks from before attach. */
	check_pairing(&r);
	for (int i = 0; i < 12; i++) {
		cr_assert_geq(count(&r, CPROF_REC_ALLOC, in[i], sizes[i]), 1, "ALLOC %d (size %" PRIu64 ")",
			      i, sizes[i]);
		cr_assert_geq(count(&r, CPROF_REC_FREE, in[i], sizes[i]), 1, "FREE %d (size %" PRIu64 ")", i,
			      sizes[i]);
	}
	/* The failed realloc emitted no FREE of its own: exactly one, from free(). */
	cr_assert_eq(count(&r, CPROF_REC_FREE, in[11], 200), 1);
	run_release(&r);
}

/* --- the live set grows through its tables under concurrent frees -------- */

/* Enough live sampled blocks per thread to move the set (liveset.c) from its
 * first table (1024 slots, half full at 512) through two more. */
#define GROW_LIVE 3000
#define GROW_THREADS 2

static void *grow_worker(void *arg)
{
	void **blocks = arg;

	for (int i = 0; i < GROW_LIVE; i++) {
		blocks[i] = malloc(32 + (size_t)i % 200);
		escape(blocks[i]);
		/* Frees of live sampled blocks while the other thread grows. */
		if (i % 3 == 2) {
			free(blocks[i - 1]);
			blocks[i - 1] = NULL;
		}
	}
	for (int i = GROW_LIVE; i-- > 0;)
		free(blocks[i]);
	return NULL;
}

static int grow_run(struct child_ctx *c)
{
	static void *blocks[GROW_THREADS][GROW_LIVE];
	pthread_t t[GROW_THREADS];

	(void)c;
	for (int i = 0; i < GROW_THREADS; i++)
		CHECK(pthread_create(&t[i], NULL, grow_worker, blocks[i]) == 0);
	for (int i = 0; i < GROW_THREADS; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	return 0;
}

Test(agent, liveset_grows)
{
	struct scenario s = { .run = grow_run, .rate = 1, .ring = 128u << 20 };
	size_t allocs, frees = 0;
	struct run r;

	run_scenario(&s, &r);
	cr_assert_eq(r.result, 0, "child check failed at %d", r.result);
	cr_assert_eq(r.final.lost, 0, "ring overflow");
	for (size_t i = 0; i < r.nr; i++)
		if (r.recs[i].type == CPROF_REC_ALLOC)
			cr_assert_eq(r.recs[i].flags, 0, "a sampled block was not tracked");
	/* Every tracked block the workers allocated was freed, and said so. */
	allocs = count(&r, CPROF_REC_ALLOC, 0, UINT64_MAX);
	for (size_t i = 0; i < r.nr; i++)
		frees += r.recs[i].type == CPROF_REC_FREE;
	cr_assert_geq(allocs, GROW_THREADS * GROW_LIVE);
	cr_assert_geq(frees, GROW_THREADS * GROW_LIVE);
	check_pairing(&r);
	run_release(&r);
}

/* --- the live set's filter: how many frees it sends to a lookup ----------- */

/*
 * A server's heap holds sampled blocks for good, so every free() in the
 * process asks the filter (liveset.c), and each false "maybe" costs a table
 * lookup. FILTER_LIVE blocks of 8 MiB (each sampled at 512 KiB: p = 1 -
 * e^-16) stay live while FILTER_FREES distinct small blocks are freed. A
 * filter of one bit per address (the first one: 4096 bits) sends ~4.9% of
 * them to a lookup; two bits in one word, ~1%.
 */
#define FILTER_LIVE 200
#define FILTER_FREES 100000
#define FILTER_BIG (8u << 20)

static int filter_run(struct child_ctx *c)
{
	static void *big[FILTER_LIVE], *small[FILTER_FREES];

	(void)c;
	for (int i = 0; i < FILTER_LIVE; i++) {
		big[i] = malloc(FILTER_BIG);
		CHECK(big[i]);
	}
	for (int i = 0; i < FILTER_FREES; i++) {
		small[i] = malloc(32);
		CHECK(small[i]);
	}
	for (int i = 0; i < FILTER_FREES; i++)
		free(small[i]);
	for (int i = 0; i < FILTER_LIVE; i++)
		free(big[i]);
	return 0;
}

Test(agent, liveset_filter_lets_few_frees_through)
{
	struct scenario s = { .run = filter_run, .rate = 512u << 10, .ring = 16u << 20 };
	size_t live, small_sampled;
	double share;
	struct run r;

	run_scenario(&s, &r);
	cr_assert_eq(r.result, 0, "child check failed at %d", r.result);
	cr_assert_eq(r.final.lost, 0, "ring overflow");
	live = count(&r, CPROF_REC_ALLOC, 0, FILTER_BIG);
	small_sampled = count(&r, CPROF_REC_ALLOC, 0, 32);
	cr_assert_geq(live, FILTER_LIVE - 2, "only %zu of the big blocks sampled", live);
	cr_assert_eq(count(&r, CPROF_REC_FREE, 0, FILTER_BIG), live);
	share = (double)r.final.filter_false_hits / (double)(FILTER_FREES - small_sampled);
	cr_log_info("%zu sampled blocks live: %" PRIu64 " of %zu frees of unsampled blocks looked up "
		    "(%.2f%%)", live, r.final.filter_false_hits, FILTER_FREES - small_sampled,
		    100 * share);
	/* Some: a filter that answers "no" to everything would lose FREEs, and a
	 * counter that never moves would pass the bound below. */
	cr_assert_gt(r.final.filter_false_hits, 0);
	cr_assert_lt(share, 0.025, "%.2f%% of frees went to a lookup", 100 * share);
	check_pairing(&r);
	run_release(&r);
}

/* --- the few blocks free() compares itself with --------------------------- */

/*
 * While at most LIVESET_FEW sampled blocks are live, free() compares its
 * address with them (agent.h); beyond, it asks the filter until the set is
 * empty again. A block missed on either side of a switch would lose its
 * FREE. Every allocation is sampled here, and each of two threads' live
 * counts wanders between 0 and FEW_MAX_LIVE (across LIVESET_FEW both ways,
 * and through empty) while blocks of other sizes come and go, freed in
 * random order.
 */
#define FEW_SIZE 72
#define FEW_MAX_LIVE 7
#define FEW_STEPS 100000
#define FEW_THREADS 2

/* The child's view of its ring, for few_worker's flow control. */
static const struct cprof_wire_header *few_hdr;

/*
 * Waits while the ring is more than half full: the parent drains it every
 * 2 ms, but a loaded machine may leave it without a CPU for longer than
 * this loop takes to fill 64 MiB, and a record lost is not what is tested.
 */
static void wait_for_room(const struct cprof_wire_header *h)
{
	for (int i = 0; h && i < 10000; i++) {
		uint64_t head = __atomic_load_n(&h->data_head, __ATOMIC_ACQUIRE);
		uint64_t tail = __atomic_load_n(&h->data_tail, __ATOMIC_ACQUIRE);

		if (head - tail < h->ring_size / 2)
			return;
		usleep(1000);
	}
}

/* 0, or the line of a failed check. */
static void *few_worker(void *arg)
{
	void *live[FEW_MAX_LIVE];
	int n = 0, empties = 0, manys = 0, many = 0;
	uint64_t x = 0x2545f4914f6cdd1dull ^ (uintptr_t)arg;

	for (int step = 0; step < FEW_STEPS; step++) {
		if (step % 256 == 0)
			wait_for_room(few_hdr);
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		/* Drift towards empty half the time, towards full the other half. */
		bool up = (step / 1000) % 2 ? (x & 3) != 0 : (x & 3) == 0;

		if ((up && n < FEW_MAX_LIVE) || n == 0) {
			live[n] = malloc(FEW_SIZE);
			if (!live[n])
				return (void *)(uintptr_t)__LINE__;
			escape(live[n++]);
		} else {
			int k = (int)((x >> 8) % (uint64_t)n);

			free(live[k]);
			live[k] = live[--n];
		}
		empties += n == 0;
		if (n > LIVESET_FEW && !many)
			manys++;
		many = n > LIVESET_FEW ? 1 : n == 0 ? 0 : many;
		/* Freed at once: asks whatever the set's state is. */
		free(malloc(FEW_SIZE + 16 + (x >> 40) % 64));
	}
	while (n > 0)
		free(live[--n]);
	return empties > 10 && manys > 10 ? NULL : (void *)(uintptr_t)__LINE__;
}

/* Two threads: the set's state also turns while the other one frees. */
static int few_run(struct child_ctx *c)
{
	pthread_t t[FEW_THREADS];
	void *ret;
	int bad = 0;

	few_hdr = c->hdr;
	for (int i = 0; i < FEW_THREADS; i++)
		CHECK(pthread_create(&t[i], NULL, few_worker, (void *)(uintptr_t)(i + 1)) == 0);
	for (int i = 0; i < FEW_THREADS; i++) {
		CHECK(pthread_join(t[i], &ret) == 0);
		if (ret)
			bad = (int)(uintptr_t)ret;
	}
	return bad;
}

Test(agent, liveset_few_blocks_pair_every_free)
{
	struct scenario s = { .run = few_run, .rate = 1, .ring = 64u << 20 };
	size_t allocs, frees;
	struct run r;

	run_scenario(&s, &r);
	cr_assert_eq(r.result, 0, "child check failed at %d", r.result);
	cr_assert_eq(r.final.lost, 0, "ring overflow");
	allocs = count(&r, CPROF_REC_ALLOC, 0, FEW_SIZE);
	frees = count(&r, CPROF_REC_FREE, 0, FEW_SIZE);
	cr_log_info("%zu sampled blocks of %d bytes, %zu FREEs", allocs, FEW_SIZE, frees);
	cr_assert_geq(allocs, FEW_THREADS * FEW_STEPS / 3);
	cr_assert_eq(frees, allocs, "%zu of %zu frees of sampled blocks missed", allocs - frees,
		     allocs);
	check_pairing(&r);
	run_release(&r);
}

/* --- records: registers and stack ------------------------------------------ */

struct thread_info {
	uint64_t tid, lo, hi, ptr;
};

/* The two outermost frames' CFAs, as libgcc's unwinder finds them. */
struct outer_cfas {
	uint64_t outer, below;
};

static _Unwind_Reason_Code cfa_cb(struct _Unwind_Context *ctx, void *arg)
{
	struct outer_cfas *o = arg;
	uint64_t cfa = _Unwind_GetCFA(ctx);

	if (cfa > o->outer) {
		o->below = o->outer;
		o->outer = cfa;
	}
	return _URC_NO_REASON;
}

static __attribute__((noinline)) void *alloc_site(size_t n)
{
	void *p = malloc(n);

	escape(p);
	return p;
}

static bool mapping_range(pid_t pid, const char *path_part, bool exec, uint64_t *lo, uint64_t *hi);

static void stack_bounds(struct thread_info *t)
{
	pthread_attr_t a;
	uint64_t map_lo, map_hi;
	void *lo;
	size_t sz;

	pthread_getattr_np(pthread_self(), &a);
	pthread_attr_getstack(&a, &lo, &sz);
	pthread_attr_destroy(&a);
	t->tid = (uint64_t)gettid();
	t->lo = (uintptr_t)lo;
	t->hi = (uintptr_t)lo + sz;
	/*
	 * glibc gives the main thread's top as __libc_stack_end rounded up to
	 * a page; the [stack] mapping goes on above it (argv, the
	 * environment), and the agent's copy may end up to 256 bytes past
	 * __libc_stack_end (capture.c): past that page end whenever argc sits
	 * in its last 256 bytes (a CI run: 96 bytes past). How far the copy
	 * goes past the frames is checked on its own (the outermost CFA).
	 */
	if (gettid() == getpid() && mapping_range(getpid(), "[stack]", false, &map_lo, &map_hi) &&
	    map_hi > t->hi)
		t->hi = map_hi;
}

struct worker_arg {
	struct thread_info *t;
	struct outer_cfas *o;
};

static void *worker(void *arg)
{
	struct worker_arg *w = arg;

	stack_bounds(w->t);
	_Unwind_Backtrace(cfa_cb, w->o);
	w->t->ptr = (uintptr_t)alloc_site(778);
	return NULL;
}

static int records_run(struct child_ctx *c)
{
	/* info: 0-3 main, 4-7 worker, 8-9 the agent's text, 10-11 and 12-13
	 * the outermost CFAs of main and worker. */
	struct thread_info *m = (void *)&c->info[0];
	struct worker_arg w = { (void *)&c->info[4], (void *)&c->info[12] };
	pthread_t t;

	CHECK(mapping_range(getpid(), "cprof-agent.so", true, &c->info[8], &c->info[9]));
	stack_bounds(m);
	_Unwind_Backtrace(cfa_cb, (struct outer_cfas *)&c->info[10]);
	m->ptr = (uintptr_t)alloc_site(777);
	CHECK(pthread_create(&t, NULL, worker, &w) == 0);
	pthread_join(t, NULL);
	return 0;
}

/* [start, end) of the mappings of @path_part in /proc/@pid/maps, r-x ones if @exec. */
static bool mapping_range(pid_t pid, const char *path_part, bool exec, uint64_t *lo, uint64_t *hi)
{
	char path[64], line[512];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	*lo = UINT64_MAX;
	*hi = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b;
		char perms[8];

		if (sscanf(line, "%lx-%lx %7s", &a, &b, perms) != 3 || !strstr(line, path_part))
			continue;
		if (exec && perms[2] != 'x')
			continue;
		if (a < *lo)
			*lo = a;
		if (b > *hi)
			*hi = b;
	}
	fclose(f);
	return *hi != 0;
}

Test(agent, records_wellformed)
{
	struct scenario s = { .run = records_run, .rate = 1 };
	uint64_t agent_lo, agent_hi, exe_lo, exe_hi;
	char exe[512];
	ssize_t n;
	struct run r;

	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	cr_assert_gt(n, 0);
	exe[n] = '\0';
	run_scenario(&s, &r);
	cr_assert_eq(r.result, 0, "child check failed at %d", r.result);
	/* fork: the child's executable is mapped where ours is. */
	cr_assert(mapping_range(getpid(), exe, true, &exe_lo, &exe_hi));
	agent_lo = r.info[8];
	agent_hi = r.info[9];
	for (int k = 0; k < 2; k++) {
		const struct thread_info *t = (const void *)&r.info[k * 4];
		const struct rec *a = NULL;
		bool ret_addr = false;

		for (size_t i = 0; i < r.nr; i++)
			if (r.recs[i].type == CPROF_REC_ALLOC && r.recs[i].addr == t->ptr)
				a = &r.recs[i];
		cr_assert_not_null(a, "no ALLOC for thread %d", k);
		cr_assert_eq(a->size, 777u + (unsigned)k);
		cr_assert_eq(a->tid, t->tid);
		cr_assert(a->rsp >= t->lo && a->rsp < t->hi, "rsp %#" PRIx64 " outside [%#" PRIx64 ", %#" PRIx64 ")",
			  a->rsp, t->lo, t->hi);
		cr_assert_gt(a->stack_size, 64);
		cr_assert_leq(a->stack_size, CPROF_WIRE_STACK_MAX);
		cr_assert_leq(a->rsp + a->stack_size, t->hi, "thread %d: rsp %#" PRIx64 " + %u > %#" PRIx64, k,
			      a->rsp, a->stack_size, t->hi);
		/* rip: in the agent's sampling function. */
		cr_assert(a->rip >= agent_lo && a->rip < agent_hi, "rip %#" PRIx64 " not in the agent", a->rip);
		cr_assert(a->rip < exe_lo || a->rip >= exe_hi);
		/* The copy reaches the caller: a return address into alloc_site(). */
		for (uint32_t o = 0; o + 8 <= a->stack_size && !ret_addr; o += 8) {
			uint64_t v;

			memcpy(&v, a->stack + o, 8);
			ret_addr = v >= (uintptr_t)alloc_site && v < (uintptr_t)alloc_site + 64;
		}
		cr_assert(ret_addr, "no return address into alloc_site() in the stack copy (thread %d)", k);
		/* It ends where the frames do: it holds every frame the unwinder
		 * reads (all but the outermost end at or below `below`), and not
		 * the argv, environment or TLS above (the outermost frame's CFA
		 * is at most 256 bytes past the main thread's argc). */
		const struct outer_cfas *o = (const void *)&r.info[10 + k * 2];
		uint64_t end = a->rsp + a->stack_size;

		cr_log_info("thread %d: copy %u bytes, ends %+" PRId64 " bytes from the outermost CFA", k,
			    a->stack_size, (int64_t)(end - o->outer));
		cr_assert(o->below && o->outer > o->below, "thread %d: libgcc found no two frames", k);
		cr_assert_geq(end, o->below, "thread %d: the copy ends %" PRIu64 " bytes short of the "
			      "frames", k, o->below - end);
		cr_assert_leq(end, o->outer + 512, "thread %d: the copy goes %" PRIu64 " bytes past "
			      "the outermost frame", k, end - o->outer);
	}
	check_pairing(&r);
	run_release(&r);
}

/* --- an old ABI under an old version: not hooked (got.c) ------------------ */

/* The pre-2.3.2 condition: 8 bytes (a pointer glibc fills in on first use);
 * the canary after it is what the current function would overwrite. */
struct old_cond {
	uint64_t cond;
	uint64_t canary[6];
};

#define CANARY 0x5ca1ab1e0ddba11ull

static void *compat_lib;

static int compat_pre(struct child_ctx *c)
{
	(void)c;
	compat_lib = dlopen(COMPATCOND_PATH, RTLD_NOW | RTLD_LOCAL);
	return compat_lib ? 0 : 7;
}

static int compat_run(struct child_ctx *c)
{
	int (*timedwait)(void *, void *, const struct timespec *) =
		(int (*)(void *, void *, const struct timespec *))dlsym(compat_lib, "compat_cond_timedwait");
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cur = PTHREAD_COND_INITIALIZER;
	struct old_cond old = { 0, { 0 } };
	struct timespec past = { 0, 0 };
	uint64_t *own = got_slot("", "pthread_cond_timedwait");
	uint64_t *compat = got_slot("compatcond", "pthread_cond_timedwait");
	uint64_t *compat_wait = got_slot("compatcond", "pthread_cond_wait");
	int r;

	(void)c;
	for (int i = 0; i < 6; i++)
		old.canary[i] = CANARY;
	CHECK(timedwait && own && compat && compat_wait);
	/* The current ABI is hooked, the old one is not. */
	CHECK(in_agent(*own));
	CHECK(!in_agent(*compat));
	CHECK(!in_agent(*compat_wait));
	/* Both still work: a wait whose deadline has passed returns at once. */
	pthread_mutex_lock(&m);
	r = pthread_cond_timedwait(&cur, &m, &past);
	CHECK(r == ETIMEDOUT);
	r = timedwait(&old, &m, &past);
	pthread_mutex_unlock(&m);
	CHECK(r == ETIMEDOUT);
	for (int i = 0; i < 6; i++)
		CHECK(old.canary[i] == CANARY);
	return 0;
}

Test(agent, old_abi_condition_variables_left_alone)
{
	struct scenario s = {
		.pre = compat_pre, .run = compat_run, .rate = 1, .events = CPROF_EVENTS_BLOCK,
	};
	struct run r;

	run_scenario(&s, &r);
	cr_assert_eq(r.result, 0, "child check failed at line %d", r.result);
	/* One wait recorded: the current ABI's (the old one went unhooked). */
	cr_assert_eq(count(&r, CPROF_REC_EVENT, 0, UINT64_MAX), 1, "%zu EVENT records", count(&r, CPROF_REC_EVENT, 0, UINT64_MAX));
	run_release(&r);
}

/* --- C++ operator new, in an object loaded after attach (dlopen hook) ------ */

static int cxx_run(struct child_ctx *c)
{
	void *lib = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL);
	void *(*op_new)(size_t);
	void (*op_delete)(void *);
	void *p;

	if (!lib)
		return SKIP_CODE;
	op_new = (void *(*)(size_t))dlsym(lib, "_Znwm");
	op_delete = (void (*)(void *))dlsym(lib, "_ZdlPv");
	CHECK(op_new && op_delete);
	/* libstdc++ calls malloc through its own GOT, patched by now. */
	CHECK(in_agent(*got_slot("libstdc++", "malloc")));
	p = op_new(1234);
	c->info[0] = (uintptr_t)p;
	op_delete(p);
	return 0;
}

Test(agent, cxx_new_after_dlopen)
{
	struct scenario s = { .run = cxx_run, .rate = 1 };
	struct run r;

	if (dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD))
		cr_log_info("libstdc++ already loaded in the test: the dlopen hook is not exercised");
	run_scenario(&s, &r);
	if (r.result == SKIP_CODE) {
		run_release(&r);
		TH_SKIP_MISSING("no libstdc++.so.6");
	}
	cr_assert_eq(r.result, 0, "child check failed at %d", r.result);
	cr_assert_eq(count(&r, CPROF_REC_ALLOC, r.info[0], 1234), 1);
	cr_assert_eq(count(&r, CPROF_REC_FREE, r.info[0], 1234), 1);
	run_release(&r);
}

/* --- the watchdog ---------------------------------------------------------- */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static pid_t fake_cprof;
static uint64_t detach_ms;

/* The child waits for the parent's verdict, then checks its own GOT. */
static int wait_then_check_restored(struct child_ctx *c)
{
	int e = got_all_hooked();

	if (e)
		return e;
	wait_parent(c);
	c->info[0] = c->hdr->detach_reason;
	return got_all_restored();
}

static void kill_fake_cprof(pid_t child, struct cprof_wire_header *h, int to_child)
{
	uint64_t t0;

	(void)child;
	/* Heartbeats keep coming (from us): only the death can end it. */
	for (int i = 0; i < 5; i++) {
		__atomic_fetch_add(&h->heartbeat, 1, __ATOMIC_RELAXED);
		usleep(50000);
	}
	cr_assert_eq(h->state, CPROF_STATE_RUNNING);
	kill(fake_cprof, SIGKILL);
	t0 = now_ns();
	while (__atomic_load_n(&h->state, __ATOMIC_ACQUIRE) != CPROF_STATE_DETACHED && now_ns() - t0 < 3000000000ull) {
		__atomic_fetch_add(&h->heartbeat, 1, __ATOMIC_RELAXED);
		usleep(5000);
	}
	detach_ms = (now_ns() - t0) / 1000000;
	cr_assert_eq(write(to_child, "k", 1), 1);
}

Test(agent, watchdog_cprof_sigkill)
{
	struct scenario s = { .pre = got_save, .run = wait_then_check_restored, .parent_mid = kill_fake_cprof, .rate = 1 };
	struct run r;

	skip_in_asan_host();
	fake_cprof = fork();
	cr_assert_geq(fake_cprof, 0);
	if (fake_cprof == 0) {
		alarm(60); /* bounded, whatever happens to this test */
		pause();
		_exit(0);
	}
	s.cprof_pid = fake_cprof;
	run_scenario(&s, &r);
	waitpid(fake_cprof, NULL, 0);
	cr_log_info("GOT restored %" PRIu64 " ms after SIGKILL of cprof", detach_ms);
	cr_assert_eq(r.result, 0, "child check failed at %d", r.result);
	cr_assert_eq(r.info[0], CPROF_DETACH_PEER_EXIT);
	cr_assert_eq(r.final.state, CPROF_STATE_DETACHED);
	cr_assert_eq(r.final.hooked, 0);
	/* How soon is a promise of the command's, judged where the command
	 * runs: test-heap's sigkill_of_cprof_unhooks_within_a_second. */
	run_release(&r);
}

static void stop_heartbeat(pid_t child, struct cprof_wire_header *h, int to_child)
{
	uint64_t t0 = now_ns();

	(void)child;
	while (__atomic_load_n(&h->state, __ATOMIC_ACQUIRE) != CPROF_STATE_DETACHED &&
	       now_ns() - t0 < (CPROF_WIRE_HEARTBEAT_ALONE_TIMEOUT_MS + 4000) * 1000000ull)
		usleep(5000);
	detach_ms = (now_ns() - t0) / 1000000;
	cr_assert_eq(write(to_child, "k", 1), 1);
}

/* Without a pidfd (cprof_pid 0: a cprof in a PID namespace the agent
 * cannot see), the heartbeat alone tells cprof's death. */
Test(agent, watchdog_stale_heartbeat, .timeout = 60)
{
	struct scenario s = { .pre = got_save, .run = wait_then_check_restored, .parent_mid = stop_heartbeat,
			      .rate = 1, .cprof_pid = -1 };
	struct run r;

	run_scenario(&s, &r);
	cr_log_info("GOT restored %" PRIu64 " ms after the last heartbeat", detach_ms);
	cr_assert_eq(r.result, 0, "child check failed at %d", r.result);
	cr_assert_eq(r.info[0], CPROF_DETACH_HEARTBEAT);
	/* Not before the silence lasted its bound; after it, stop_heartbeat()
	 * waited for the detach, which the state above shows came. */
	cr_assert_geq(detach_ms, CPROF_WIRE_HEARTBEAT_ALONE_TIMEOUT_MS - 100);
	run_release(&r);
}

/* A cprof that lives but is starved (a saturated host) misses heartbeats:
 * its pidfd says it lives, and the session goes on. */
static bool running_after_silence;

static void starve_heartbeat(pid_t child, struct cprof_wire_header *h, int to_child)
{
	(void)child;
	usleep(3000000);
	running_after_silence = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE) == CPROF_STATE_RUNNING;
	cr_assert_eq(write(to_child, "k", 1), 1);
}

/* The child, told by the parent, checks it is still hooked, then ends the
 * session itself. */
static int wait_then_check_hooked(struct child_ctx *c)
{
	int e;

	wait_parent(c);
	e = got_all_hooked();
	c->info[0] = c->hdr->state;
	CHECK(c->detach() == 0);
	return e;
}

Test(agent, watchdog_starved_cprof_is_not_dead)
{
	struct scenario s = { .pre = got_save, .run = wait_then_check_hooked,
			      .parent_mid = starve_heartbeat, .rate = 1 };
	struct run r;

	run_scenario(&s, &r);
	cr_assert(running_after_silence, "the agent left a live cprof after 3 s without a heartbeat");
	cr_assert_eq(r.info[0], CPROF_STATE_RUNNING);
	cr_assert_eq(r.result, 0, "the hooks were gone after 3 s without a heartbeat (%d)", r.result);
	run_release(&r);
}

/* The target (or anyone with its descriptors) cannot cut the memfd short
 * under cprof's mapping: SIGBUS in both. */
static int sealed_run(struct child_ctx *c)
{
	CHECK(ftruncate(c->memfd, 0) == -1 && errno == EPERM);
	CHECK(ftruncate(c->memfd, 4096) == -1 && errno == EPERM);
	CHECK(fcntl(c->memfd, F_GET_SEALS) & F_SEAL_SHRINK);
	CHECK(c->detach() == 0);
	return 0;
}

Test(agent, memfd_sealed_against_shrinking)
{
	struct scenario s = { .run = sealed_run, .rate = 1 };
	struct run r;

	run_scenario(&s, &r);
	cr_assert_eq(r.result, 0, "child check failed at %d", r.result);
	run_release(&r);
}

/* --- commands, re-attach --------------------------------------------------- */

static int reattach_run(struct child_ctx *c)
{
	struct cprof_wire_header *h;
	int fd, e;
	void *p;

	CHECK(c->attach_events(getppid(), 1, 0, CPROF_EVENTS_HEAP) == -EBUSY);
	CHECK(c->attach_events(getppid(), 1, 1000, CPROF_EVENTS_HEAP) == -EINVAL);
	CHECK(c->detach() == 0);
	if ((e = got_all_restored()))
		return e;
	fd = c->attach_events(getppid(), 1, 0, CPROF_EVENTS_HEAP);
	CHECK(fd >= 0);
	if ((e = got_all_hooked()))
		return e;
	h = mmap(NULL, CPROF_WIRE_HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(h != MAP_FAILED);
	CHECK(h->session == 2 && h->state == CPROF_STATE_RUNNING && h->samples == 0);
	/* cprof's STOP: hooks stay, no samples. */
	h->command = CPROF_CMD_STOP;
	for (int i = 0; i < 50 && h->state != CPROF_STATE_PAUSED; i++)
		usleep(10000);
	CHECK(h->state == CPROF_STATE_PAUSED);
	p = malloc(5555);
	escape(p);
	free(p);
	CHECK(h->samples == 0);
	/* cprof's DETACH. */
	h->command = CPROF_CMD_DETACH;
	for (int i = 0; i < 50 && h->state != CPROF_STATE_DETACHED; i++)
		usleep(10000);
	CHECK(h->state == CPROF_STATE_DETACHED && h->detach_reason == CPROF_DETACH_COMMAND);
	return got_all_restored();
}

Test(agent, reattach_and_commands)
{
	struct scenario s = { .pre = got_save, .run = reattach_run, .rate = 1 };
	struct run r;

	run_scenario(&s, &r);
	cr_assert_eq(r.result, 0, "child check failed at %d", r.result);
	run_release(&r);
}

/*
 * The agent's watchdog task has no TLS of its own: code built with a stack
 * protector reads the canary at %fs:0x28 there and faults (issue 22: the
 * target died 5 of 5 with -fstack-protector-strong, the default of other
 * distributions). Whatever the compiler's default, the agent calls no
 * __stack_chk_fail and reads no canary.
 */
Test(agent, built_without_a_stack_protector)
{
	char cmd[sizeof(CPROF_AGENT_PATH) + 64], line[256];
	bool defined = false, chk = false;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "nm -D '%s' 2>&1", CPROF_AGENT_PATH);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f)) {
		defined |= strstr(line, " T cprof_agent_attach_events") != NULL;
		chk |= strstr(line, "__stack_chk_fail") != NULL;
	}
	pclose(f);
	cr_assert(defined, "nm -D did not list the agent's symbols");
	cr_assert(!chk, "the agent calls __stack_chk_fail: built with a stack protector");
}
