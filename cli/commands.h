/* The command table's entries: one function per file cli/cmd-NAME.c. Each
 * takes argv with argv[0] = the command name and returns an exit code. */
#ifndef CPROF_COMMANDS_H
#define CPROF_COMMANDS_H

#include <stddef.h>

int cmd_cpu(int argc, char **argv);
int cmd_threads(int argc, char **argv);
int cmd_wall(int argc, char **argv);
int cmd_heap(int argc, char **argv);
int cmd_block(int argc, char **argv);
int cmd_mutex(int argc, char **argv);
int cmd_threadcreate(int argc, char **argv);
int cmd_record(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_view(int argc, char **argv);

/* cprof --version: version, libraries, debuginfod, the agent's path (version.c). */
void print_version(void);

/* Joins argv into one line for a profile's comments ("cprof cpu -p 42 ..."). */
void command_line_join(int argc, char **argv, char *buf, size_t size);

#endif
