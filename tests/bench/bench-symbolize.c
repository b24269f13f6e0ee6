/*
 * bench-symbolize: what lib/symbolize costs, on this process's libc: the
 * module's set-up (its symbol table, and DWARF when libc6-dbg is there),
 * a first lookup of an address, and a cached one. Printed, never judged:
 * scripts/bench-micro.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "symbolize/symbolize.h"
#include "util/util.h"

enum { N = 2000, ROUNDS = 50 };

int main(void)
{
	void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
	uint64_t q = libc ? (uint64_t)(uintptr_t)dlsym(libc, "qsort") : 0, t0, mod, cold, warm;
	struct symbolizer *sym;
	struct symbol_info si;

	if (!q || symbolizer_new(&sym, getpid()) < 0) {
		fprintf(stderr, "bench-symbolize: no libc qsort or no symbolizer\n");
		return 1;
	}
	t0 = now_monotonic_ns();
	if (symbolizer_lookup(sym, q - 64, &si) < 0)
		return 1;
	mod = now_monotonic_ns() - t0;
	t0 = now_monotonic_ns();
	for (uint64_t i = 0; i < N; i++)
		symbolizer_lookup(sym, q + 16 * i, &si);
	cold = now_monotonic_ns() - t0;
	t0 = now_monotonic_ns();
	for (int r = 0; r < ROUNDS; r++)
		for (uint64_t i = 0; i < N; i++)
			symbolizer_lookup(sym, q + 16 * i, &si);
	warm = now_monotonic_ns() - t0;
	printf("symbolize: libc module set-up %.1f ms (symbols%s), first lookup %.1f us, "
	       "cached lookup %.0f ns\n",
	       mod / 1e6, si.module && si.module->has_lines ? " + DWARF" : "",
	       cold / 1e3 / N, (double)warm / ROUNDS / N);
	symbolizer_unref(sym);
	return 0;
}
