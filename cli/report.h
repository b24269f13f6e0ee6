/*
 * Everything cprof says to the user goes through here: errors and hints on
 * stderr in git's manner ("cprof: error: cannot ...: why", then
 * "cprof: hint: what to do"), warnings, notes and the progress line.
 * Exit codes are documented in man/cprof.1; keep the two in step.
 */
#ifndef CPROF_REPORT_H
#define CPROF_REPORT_H

#include <stdbool.h>
#include <stdint.h>

enum cprof_exit {
	EXIT_OK = 0,         /* profile written (also when the target exited mid-window) */
	EXIT_FAIL = 1,       /* failure while profiling or building the profile */
	EXIT_TARGET = 2,     /* the target cannot be profiled: gone, kernel thread, zombie, ... */
	EXIT_PERMISSION = 3, /* the kernel or /proc refused: privilege needed */
	EXIT_OUTPUT = 4,     /* the output cannot be written: checked before attaching, or the final write failed (ENOSPC) */
	EXIT_PARTIAL = 5,    /* written in part: record's kinds, a set's processes (said why) */
	EXIT_USAGE = 64,     /* bad command line */
};

void report_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void report_hint(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void report_warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void report_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints a multi-line message from lib/: its first line as an error, lines
 * starting with "hint: " as hints. */
void report_error_text(const char *prefix, const char *text);
/* The same as a warning. */
void report_warning_text(const char *prefix, const char *text);

/* Quiet mode silences notes and progress, never errors or warnings. */
void report_set_quiet(bool quiet);

/* A note only when stderr is not a terminal, where no progress line is
 * drawn: a runbook's log sees a window start and end. Quiet-aware. */
void report_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A progress line redrawn in place, only when stderr is a terminal. */
void report_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void report_progress_done(void);

struct profile;
/*
 * A note (quiet-aware) when the profiled program itself (@p's first mapping)
 * has neither symbols nor debug information: what its frames look like, its
 * build id, and how to get names (DEBUGINFOD_URLS, /usr/lib/debug).
 */
void report_unsymbolized(const struct profile *p);
struct symbolizer;
/* The same note from the symbolizer, for text views that build no profile:
 * when the program's frames were looked up and stayed "NAME+0xOFF". */
void report_unsymbolized_program(struct symbolizer *s);

/*
 * --json on every path: main() says it was asked for, whoever prints the
 * command's object says so, and at the end a run that printed none (a
 * failure before or instead of its result) prints
 * {"command", "exit", "error", "hint"}: the first error and hint said on
 * stderr, null on success. Returns @code (EXIT_OUTPUT when stdout failed).
 */
void report_json_wanted(void);
void report_json_printed(void);
int report_json_fallback(const char *command, int code);

/* Usage error for command @cmd: message, @hint (what to do; may be NULL),
 * then "see 'cprof @cmd --help'". Returns EXIT_USAGE. */
int report_usage_hint(const char *cmd, const char *hint, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
#define report_usage(cmd, ...) report_usage_hint((cmd), NULL, __VA_ARGS__)

#endif
