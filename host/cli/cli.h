/* cli.h — what the small commands of host/cli/ share: the command table (commands.h) read by
 * main and help, the error line every command prints, and the registry's warnings and a
 * plugin's devices as the listings print them. Not for: a command's own logic (one file each).
 */
#ifndef CTRAIN_HOST_CLI_H
#define CTRAIN_HOST_CLI_H

#include "plugin/registry.h"

#include <ctrain/ctrain.h>
#include <stddef.h>

typedef struct command {
    const char *name, *usage, *summary;
    int (*fn)(int argc, char **argv);
} command;

/* The commands of commands.h, in its order; *n set to their number. */
const command *cli_commands(int *n);
/* Does the command line's `arg` name table entry `name`? An '_' of the name is written '-'. */
int cli_command_is(const char *name, const char *arg);
/* The name as the command line writes it ('_' -> '-'), into buf. */
const char *cli_command_text(const char *name, char *buf, size_t cap);

/* "<who>: <what> '<name>' (did you mean '<nearest>'?) ---> `ctrain help` lists the commands" on
 * stderr, for a name that is no command ("ctrain", "unknown command"; "ctrain help", "no
 * command"). Returns 2, the status of a usage error. */
int cli_no_such_command(const char *who, const char *what, const char *name);

/* Whether the command line of command `name` (argv[0] is the command) asks for its usage: an
 * argument --help or -h, for the commands whose own parser does not answer it. */
int cli_help_wanted(const char *name, int argc, char **argv);
/* The whole usage of command `name` on the command's stdout: 0; 2 (and a message naming the
 * nearest command) when there is no such command. */
int cli_help_for(const char *name);

/* "ctrain: error: MESSAGE" on stderr; returns 1 (the failure exit status). */
int cli_fail(const ct_error *err);
/* An empty error struct. */
ct_error cli_new_err(void);
/* Files that could not be used and the search path's warnings, to stderr. */
void cli_registry_warnings(const host_registry *reg);
/* "cpu", "cuda" or "cpu,cuda" for a devices mask (never 0: the registry refuses it), into buf. */
const char *cli_devices_text(uint32_t mask, char *buf, size_t cap);

#endif /* CTRAIN_HOST_CLI_H */
