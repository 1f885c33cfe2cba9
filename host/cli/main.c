/* main.c — the ctrain command line: makes stderr safe for the terminal, chooses OpenBLAS's
 * kernel for the commands that multiply and how idle OpenMP threads wait, keeps a plugin's output off the command's own for the
 * commands that load plugins, and dispatches to the command (one file each in host/cli/,
 * listed in commands.h). Not for: any command's own work.
 */
#include "base/blas_core.h"
#include "base/cmdout.h"
#include "base/cores.h"
#include "base/printable.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "plugin/calls.h"
#include "plugin/supervise.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int n_commands;
    const command *commands = cli_commands(&n_commands);
    printable_stderr(); /* messages quote configs and paths: never raw control characters */
    if (argc < 2) {
        cmd_help(0, NULL);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--version") || !strcmp(name, "version")) {
        fprintf(cmdout(), "ctrain %s (plugin ABI %d.%d)\n", CTRAIN_VERSION, CT_ABI_MAJOR,
                CT_ABI_MINOR);
        return 0;
    }
    if (!strcmp(name, "--help") || !strcmp(name, "-h")) return cmd_help(0, NULL);
    /* `ctrain CMD --help`: the same whole usage as `ctrain help CMD`, before anything loads */
    if (cli_help_wanted(name, argc - 1, argv + 1)) return cli_help_for(name);
    /* the commands that run matrix products: OpenBLAS's kernel is chosen before a plugin
     * loads it (may restart this program once) */
    static const char *const blas_users[] = {"train", "sample", "check-plugin", "logits", "what-if", NULL};
    for (int i = 0; blas_users[i]; i++)
        if (!strcmp(name, blas_users[i])) blas_core_choose(argv);
    /* idle OpenMP threads sleep unless the user chose (cores.h): before any plugin loads the
     * OpenMP runtime */
    cores_wait_policy_init();
    /* the commands that load plugins: what a plugin prints goes to stderr, never into the
     * command's output (cmdout.h); an exit() or a crash inside a plugin call is named
     * (calls.h, supervise.h) */
    static const char *const plugin_users[] = {"plugins", "inspect", "validate", "train",
                                               "sample", "check-plugin", "export", "what-if",
                                               "logits", "reduce", NULL};
    for (int i = 0; plugin_users[i]; i++)
        if (!strcmp(name, plugin_users[i])) {
            cmdout_separate();
            calls_start();
            supervise_report_fatal_signals();
        }
    for (int i = 0; i < n_commands; i++)
        if (cli_command_is(commands[i].name, name)) return commands[i].fn(argc - 1, argv + 1);
    return cli_no_such_command("ctrain", "unknown command", name);
}
