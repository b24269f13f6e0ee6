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
 * came meanwhile acts once they are put back.
 *
 * Where the code runs: for the first load, cprof maps TRAMP_SIZE bytes
 * (read, write, execute) in the target, copies the code to offset 0 and
 * fills the data block at TRAMP_DATA. Once the agent is resident, its own
 * copy of the code runs in place (cprof_agent_tramp, lib/agent/tramp.S) with
 * the data block in its .bss (cprof_agent_tramp_data), and that call unmaps
 * the page an earlier load left (TD_UNMAP): nothing cprof wrote stays
 * executable in the target.
 */
#ifndef CPROF_INJECT_TRAMPOLINE_H
#define CPROF_INJECT_TRAMPOLINE_H

#define TRAMP_SIZE 16384 /* bytes mapped in the target */
#define TRAMP_DATA 1024  /* offset of the data block (the code is before) */

/* Fields of the data block: offsets from TRAMP_DATA, 8 bytes each. */
#define TD_MAGIC 0     /* TRAMP_MAGIC: finds a page left by an earlier run */
#define TD_DLOPEN 8    /* addresses of libc's functions in the target */
#define TD_DLSYM 16
#define TD_DLERROR 24
#define TD_FLAGS 32    /* dlopen's mode */
#define TD_ARG0 40     /* the function's three integer arguments */
#define TD_ARG1 48
#define TD_ARG2 56
#define TD_HANDLE 64   /* results: dlopen's, */
#define TD_FUNC 72     /* dlsym's, */
#define TD_RET 80      /* the function's, */
#define TD_ERRSTR 88   /* dlerror's (an address in the target) */
#define TD_DONE 96     /* 0 while running, 1 when the results are in */
#define TD_FXSAVE 104  /* 1: restore with fxrstor64 (no XSAVE), 0: xrstor64 */
#define TD_ARG3 112    /* the function's fourth argument */
#define TD_REGS 128    /* the registers to go back with, TR_* order */
#define TD_SETCANCEL 272   /* pthread_setcancelstate in the target, 0: none */
#define TD_CANCELSTATE 280 /* the thread's cancel state, kept over the detour */
#define TD_SIGOLD 288      /* the thread's own mask, put back at the end */
#define TD_UNMAP 296       /* a page to unmap after the call, 0: none */
#define TD_SYM 320     /* NUL-terminated symbol name, TD_SYM_MAX bytes */
#define TD_SYM_MAX 64
#define TD_PATH 384    /* NUL-terminated path of the .so, TD_PATH_MAX bytes */
#define TD_PATH_MAX 1024
#define TD_STR 1408    /* NUL-terminated string argument (inject_opts.string) */
#define TD_STR_MAX 64
#define TD_XSAVE 1472  /* the xsave (or fxsave) image, 64-byte aligned */
#define TD_XSAVE_MAX (TRAMP_SIZE - TRAMP_DATA - TD_XSAVE)

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
#define TR_RIP 16
#define TR_RFLAGS 17
#define TR_COUNT 18

#define TRAMP_MAGIC 0x31504d4152544350 /* "PCTRAMP1", little-endian */

#ifndef __ASSEMBLER__
/* The code, to be copied to offset 0 of the target's page. */
extern const unsigned char cprof_tramp_code[], cprof_tramp_code_end[];

_Static_assert(TD_REGS + 8 * TR_COUNT <= TD_SETCANCEL, "trampoline layout");
_Static_assert(TD_UNMAP + 8 <= TD_SYM, "trampoline layout");
_Static_assert(TD_SYM + TD_SYM_MAX <= TD_PATH, "trampoline layout");
_Static_assert(TD_PATH + TD_PATH_MAX <= TD_STR, "trampoline layout");
_Static_assert(TD_STR + TD_STR_MAX <= TD_XSAVE, "trampoline layout");
_Static_assert((TRAMP_DATA + TD_XSAVE) % 64 == 0, "xrstor needs 64-byte alignment");
#endif

#endif
