/*
 * The detour a target thread takes to load the agent (trampoline.S), and the
 * layout of the memory it runs in. Shared by the assembly and by inject.c:
 * plain #defines, no C below __ASSEMBLER__.
 *
 * The thread is sent to the code with the registers it had; the code calls
 *
 *     handle = dlopen(path, flags);           (dlerror() if NULL)
 *     fn = dlsym(handle, sym);
 *     ret = fn(arg0, arg1, arg2, arg3);
 *
 * or, when TD_FUNC is set beforehand (a resident agent), only the last line:
 * no loader call, no allocation. It stores the results, sets done, then puts
 * back the thread's extended state (xrstor), flags and registers from the
 * data block and jumps to where the thread was going (restarting its
 * interrupted system call as the kernel would). The thread is NOT traced
 * during the call: if cprof dies, nothing is left half done.
 *
 * Around it all, the thread has every signal blocked (cprof sets its mask,
 * PTRACE_SETSIGMASK, before it lets it go: a signal already pending would
 * otherwise be taken at the first instruction) and cancellation disabled;
 * both are put back after the results are in. No handler (one that
 * longjmps, say) and no pthread_cancel() takes the thread off the detour
 * halfway, holding a lock of the loader's or the agent's for good; one that
 * came meanwhile acts once they are put back. One exception, around the
 * calls only (TF_SIGWAKE): glibc's SIGSETXID, which no program can block.
 * setuid() holds the lock of glibc's thread list until every thread has
 * run its handler, and dlopen waits for that lock: blocked, the two would
 * wait for each other forever. Its handler makes one system call and
 * returns.
 *
 * What the thread goes back with lives on its own stack, in a frame cprof
 * writes below the red zone while the thread is stopped (TF_*), never in
 * the data block: once done is set the detour reads only that frame, so the
 * data block may serve the next call, another cprof's, at once, and no
 * thread can ever leave with another's registers.
 *
 * Where the code runs: for the first load, cprof has the target map
 * TRAMP_SIZE bytes, the code from a memfd at offset 0 (read, execute) and
 * the data block at TRAMP_DATA (read, write): never a page both writable
 * and executable (MDWE). cprof unmaps them once the call is done, and only
 * once the thread cannot come back to them: the page's code, its agent
 * loaded, leaves by a jump to the agent's copy of the tail (TD_TAIL,
 * cprof_agent_tramp_tail) before it restores a thing. Every call the page
 * made has returned by then and no signal could interrupt it (all were
 * blocked), so a thread whose pc is out of the page has no frame, call or
 * signal, that returns into it. Had the page run the tail itself, a signal
 * taken as the mask is put back, or a stop inside pthread_setcancelstate,
 * would return into pages cprof had just unmapped. Without a tail (the
 * load failed) the pages stay for the next load to unmap (TD_UNMAP). Once the
 * agent is resident, its own copy of the code runs in place
 * (cprof_agent_tramp, lib/agent/tramp.S) with the data block in its .bss
 * (cprof_agent_tramp_data); that call unmaps pages an earlier load left
 * (TD_UNMAP), had its cprof gone before it could. Either block is written only under the target's
 * ptrace claim (target/claim.h), which every cprof takes before it stops a
 * thread of the target.
 */
#ifndef CPROF_INJECT_TRAMPOLINE_H
#define CPROF_INJECT_TRAMPOLINE_H

#define TRAMP_SIZE 8192 /* bytes mapped in the target: code, then data */
#define TRAMP_DATA 4096  /* offset of the data block (the code is before) */

/* Fields of the data block: offsets from TRAMP_DATA, 8 bytes each. */
#define TD_MAGIC 0     /* TRAMP_MAGIC: finds a page left by an earlier run */
#define TD_DLOPEN 8    /* addresses of libc's functions in the target */
#define TD_DLSYM 16
#define TD_DLERROR 24
#define TD_FLAGS 32    /* dlopen's mode */
#define TD_ARG0 40     /* the function's four integer arguments */
#define TD_ARG1 48
#define TD_ARG2 56
#define TD_ARG3 64
#define TD_HANDLE 72   /* results: dlopen's, */
#define TD_FUNC 80     /* dlsym's, */
#define TD_RET 88      /* the function's, */
#define TD_ERRSTR 96   /* dlerror's (an address in the target) */
#define TD_DONE 104    /* 0 while running, 1 when the results are in */
#define TD_UNMAP 112   /* a page to unmap after the call, 0: none */
#define TD_TAIL 120    /* result: the agent's tail the page left by, 0: none */
#define TD_SYM 128     /* NUL-terminated symbol name, TD_SYM_MAX bytes */
#define TD_SYM_MAX 40
#define TD_TAILSYM 168 /* "cprof_agent_tramp_tail", TD_TAILSYM_MAX bytes */
#define TD_TAILSYM_MAX 24
#define TD_PATH 192    /* NUL-terminated path of the .so, TD_PATH_MAX bytes */
#define TD_PATH_MAX 1024
#define TD_STR 1216    /* NUL-terminated string argument (inject_opts.string) */
#define TD_STR_MAX 64
#define TD_END 1280

/*
 * The frame on the thread's stack. From the detour's entry rsp S (64-byte
 * aligned, below everything else):
 */
#define TF_REGS 0        /* the address G of the registers (below) */
#define TF_SIGOLD 8      /* the thread's own mask, put back at the end */
#define TF_CANCELSTATE 16 /* its cancel state, kept over the detour */
#define TF_FXSAVE 24     /* 1: restore with fxrstor64 (no XSAVE), 0: xrstor64 */
#define TF_SETCANCEL 32  /* pthread_setcancelstate in the target, 0: none */
#define TF_SIGWAKE 40    /* signals let through during the calls, 0: none */
#define TF_XSAVE 64      /* the xsave (or fxsave) image, 64-byte aligned */
#define TF_XSAVE_MAX 16384
/*
 * and, at fixed distances below the thread's own rsp O, G = O - TF_RET_POP
 * - 8 * TR_COUNT: the registers in TR_* order, rflags and rip last, so that
 * `popfq; ret $TF_RET_POP` from G + 8 * TR_RFLAGS leaves rsp at O. The
 * rip slot ends TF_RET_POP bytes below O: outside the red zone.
 */
#define TF_RET_POP 128

/* Register slots in TD_REGS. */
#define TR_RAX 0
#define TR_RBX 1
#define TR_RCX 2
#define TR_RDX 3
#define TR_RSI 4
#define TR_RDI 5
#define TR_RBP 6
#define TR_RSP 7
#define TR_R8 8
#define TR_R9 9
#define TR_R10 10
#define TR_R11 11
#define TR_R12 12
#define TR_R13 13
#define TR_R14 14
#define TR_R15 15
#define TR_RFLAGS 16
#define TR_RIP 17
#define TR_COUNT 18

#define TRAMP_MAGIC 0x32504d4152544350 /* "PCTRAMP2", little-endian */

#ifndef __ASSEMBLER__
/* The code, to be copied to offset 0 of the target's page. */
extern const unsigned char cprof_tramp_code[], cprof_tramp_code_end[];

_Static_assert(TD_TAIL == TD_UNMAP + 8 && TD_TAIL + 8 <= TD_SYM, "trampoline layout");
_Static_assert(TD_SYM + TD_SYM_MAX <= TD_TAILSYM, "trampoline layout");
_Static_assert(TD_TAILSYM + TD_TAILSYM_MAX <= TD_PATH, "trampoline layout");
_Static_assert(TD_PATH + TD_PATH_MAX <= TD_STR, "trampoline layout");
_Static_assert(TD_STR + TD_STR_MAX <= TD_END, "trampoline layout");
_Static_assert(TRAMP_DATA + TD_END <= TRAMP_SIZE, "trampoline layout");
_Static_assert(TF_SETCANCEL + 8 <= TF_XSAVE && TF_XSAVE % 64 == 0, "xrstor needs 64-byte alignment");
_Static_assert(TR_RIP == TR_RFLAGS + 1 && TR_RIP == TR_COUNT - 1, "popfq; ret");
#endif

#endif
