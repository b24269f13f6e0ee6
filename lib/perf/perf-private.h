/* Internals shared by the files of lib/perf/. */
#ifndef CPROF_PERF_PRIVATE_H
#define CPROF_PERF_PRIVATE_H

#include <linux/perf_event.h>
#include <poll.h>

#include "perf/perf.h"

/*
 * The user registers we ask for, in perf's x86-64 numbering
 * (arch/x86/include/uapi/asm/perf_regs.h): what DWARF unwinding needs, and no
 * segment registers (the kernel refuses DS/ES/FS/GS for 64-bit tasks).
 */
enum perf_x86_reg {
	PERF_X86_AX, PERF_X86_BX, PERF_X86_CX, PERF_X86_DX, PERF_X86_SI,
	PERF_X86_DI, PERF_X86_BP, PERF_X86_SP, PERF_X86_IP, PERF_X86_FLAGS,
	PERF_X86_CS, PERF_X86_SS, PERF_X86_DS, PERF_X86_ES, PERF_X86_FS,
	PERF_X86_GS, PERF_X86_R8, PERF_X86_R9, PERF_X86_R10, PERF_X86_R11,
	PERF_X86_R12, PERF_X86_R13, PERF_X86_R14, PERF_X86_R15,
};
#define PERF_REGS_MASK (((1ULL << (PERF_X86_IP + 1)) - 1) | (0xffULL << PERF_X86_R8))
#define PERF_REGS_COUNT 17

#define PERF_SAMPLE_FIELDS                                                              \
	(PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |          \
	 PERF_SAMPLE_PERIOD | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER)

struct perf_ring {
	int fd;      /* the event whose buffer this is; others SET_OUTPUT here */
	int cpu;
	void *base;  /* metadata page followed by the data pages */
	size_t data_size;
};

struct perf_session {
	struct perf_opts opts;
	struct perf_ring *rings;
	size_t nrings;
	int *fds; /* every event, ring owners included */
	size_t nfds, fds_alloc;
	struct pollfd *pfds;
	uint8_t *record; /* one record, unwrapped from the ring */
	size_t record_size;
	struct perf_stats stats;
};

/* Decodes the record in @rec (already unwrapped) and dispatches it. */
int perf_record_dispatch(struct perf_session *s, const uint8_t *rec, size_t size,
			 const struct perf_handlers *h);

/* The cpus that are online, from /sys/devices/system/cpu/online. */
int perf_online_cpus(int **ret_cpus, size_t *ret_n);

#endif
