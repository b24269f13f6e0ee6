/* lib/kernel: parsing kallsyms, lookups, and what a hidden table means. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kernel/kernel.h"
#include "testhelp.h"

TestSuite(kallsyms, .init = th_init, .fini = th_cleanup);

static const char *write_file(const char *text)
{
	const char *path = th_tmp_path("kallsyms");
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

Test(kallsyms, sorted_text_symbols_and_modules)
{
	struct kallsyms ks;
	const char *path = write_file("ffffffff81000100 T second\n"
				      "ffffffff81000000 T _text\n"
				      "ffffffff81000000 t first_alias_is_later\n"
				      "ffffffff81200000 D some_data\n"
				      "ffffffff81000200 W weak_one\n"
				      "ffffffffc0001000 t mod_fn\t[mymod]\n"
				      "garbage line\n");

	cr_assert_eq(kallsyms_load(&ks, path), 0);
	cr_expect_eq(ks.nr, 5, "data and garbage skipped: %zu", ks.nr);
	cr_expect_null(kallsyms_lookup(&ks, 0xffffffff80ffffffULL));
	cr_expect_str_eq(kallsyms_lookup(&ks, 0xffffffff81000000ULL), "_text");
	cr_expect_str_eq(kallsyms_lookup(&ks, 0xffffffff810000ffULL), "_text");
	cr_expect_str_eq(kallsyms_lookup(&ks, 0xffffffff81000100ULL), "second");
	cr_expect_str_eq(kallsyms_lookup(&ks, 0xffffffff81000234ULL), "weak_one");
	cr_expect_str_eq(kallsyms_lookup(&ks, 0xffffffffc0001010ULL), "mod_fn [mymod]");
	kallsyms_release(&ks);
}

Test(kallsyms, zeros_mean_hidden)
{
	struct kallsyms ks;
	char msg[512];
	const char *path = write_file("0000000000000000 T _text\n"
				      "0000000000000000 t foo\n");

	cr_expect_eq(kallsyms_load(&ks, path), -EACCES);
	kallsyms_strerror(-EACCES, msg, sizeof(msg));
	cr_expect(strstr(msg, "kptr_restrict") && strstr(msg, "\nhint: "), "%s", msg);
	cr_expect_eq(kallsyms_load(&ks, write_file("ffffffff81200000 D data\n")), -ENOENT);
}

Test(kallsyms, build_id_from_notes)
{
	/* A "Linux" note, then the GNU build id; then truncated copies. */
	static const uint8_t notes[] = {
		6, 0, 0, 0, 4, 0, 0, 0, 1, 1, 0, 0, 'L', 'i', 'n', 'u', 'x', 0, 0, 0, 9, 9, 9, 9,
		4, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0, 0xde, 0xad, 0xbe, 0xef,
	};
	char hex[129];

	cr_assert_eq(kernel_build_id_parse(notes, sizeof(notes), hex, sizeof(hex)), 0);
	cr_expect_str_eq(hex, "deadbeef");
	for (size_t len = 0; len < sizeof(notes); len++)
		cr_expect_eq(kernel_build_id_parse(notes, len, hex, sizeof(hex)), -ENOENT,
			     "found in %zu bytes", len);
	cr_expect_eq(kernel_build_id_parse(notes, sizeof(notes), hex, 8), -ENOENT,
		     "no room: nothing");
}

Test(kallsyms, profile_mapping_after_the_program)
{
	static const struct profile_value_type t[] = { { "samples", "count" } };
	struct profile_mapping user = { .start = 0x1000, .limit = 0x2000, .file = "/bin/x",
					.build_id = "" };
	struct kallsyms ks;
	struct profile *p;
	uint64_t loc[2], umap, kmap;
	int64_t v = 1;

	cr_assert_eq(kallsyms_load(&ks, write_file("ffffffff81000000 T entry_SYSCALL_64\n")), 0);
	cr_assert_eq(profile_new(&p, t, 1), 0);
	cr_assert_eq(profile_location_for_address(p, 0xffffffff81000010ULL, &loc[0]), 0);
	cr_assert_eq(profile_location_for_address(p, 0x1234, &loc[1]), 0);
	cr_assert_eq(profile_add_sample(p, loc, 2, &v, NULL, 0), 0);
	cr_assert_eq(kallsyms_fill_profile(&ks, p, 0), 0);
	cr_assert_eq(profile_add_mapping(p, &user, &umap), 0);
	cr_assert_eq(kallsyms_add_mapping(p, &kmap), 0);
	cr_assert_eq(kmap, 2);
	cr_assert_eq(kallsyms_fill_profile(&ks, p, kmap), 0);
	cr_expect_eq(th_location(p, loc[0])->mapping_id, kmap);
	cr_expect_str_eq(th_function(p, th_location(p, loc[0])->lines[0].function_id)->name,
			 "entry_SYSCALL_64");
	cr_expect_eq(th_location(p, loc[1])->nlines, 0, "user locations are not touched");
	cr_expect(th_mapping(p, kmap)->has_functions);
	cr_expect_str_eq(th_mapping(p, kmap)->file, "[kernel.kallsyms]");
	profile_free(p);
	kallsyms_release(&ks);
}
