/* help.c — `ctrain help [COMMAND]`: the command table (commands.h) with each command's usage,
 * and the longer text of a few. Not for: dispatching (main.c).
 */
#include "cli/cli.h"
#include "cli/commands.h"
#include "base/cmdout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *help_details(const char *name) {
    if (!strcmp(name, "train"))
        return "\n  Signals: SIGTERM, SIGINT or SIGUSR1 stop the run at the end of the step in\n"
               "  progress, after a checkpoint of that step (exit status 3; continue with\n"
               "  --resume). Each rank then has [run] stop_grace_s seconds (default 30), or 3\n"
               "  times the longest step so far if that is longer, to reach the end of its\n"
               "  step; when one has not (a plugin call that does not return, or\n"
               "  ctrain blocked, say in an open()), ctrain prints which rank is in which plugin\n"
               "  call or operation of its own and exits with status 4, saving nothing. A second\n"
               "  signal ends the process at once (128 + the signal).\n"
               "  Plugin faults: a crash names the rank, the plugin and the call (128 + signal);\n"
               "  exit() inside a plugin call is named and ends ctrain with status 5.\n"
               "  Exit status: 0 done, 1 a rank failed, 2 refused before anything ran, 3 stopped\n"
               "  by a signal after a checkpoint, 4 stopped by a signal without one, 5 a plugin\n"
               "  called exit(), 128+N a crash by signal N or a second stop signal.\n";
    if (!strcmp(name, "check_plugin"))
        return "\n  Each check runs in a child process with a time limit (--timeout SECONDS,\n"
               "  default 60): a plugin that crashes, calls exit() or hangs fails that check\n"
               "  with the call it was in, and the summary always prints. Buffers handed to the\n"
               "  plugin are fenced: a write past one or into a const input fails naming it.\n";
    if (!strcmp(name, "plugins") || !strcmp(name, "inspect"))
        return "\n  Plugin files not loaded yet are first loaded in a child process, killed\n"
               "  after 10 s (CTRAIN_PROBE_TIMEOUT_S overrides): a constructor that crashes,\n"
               "  exits or hangs is a warning naming the file, not a dead listing.\n";
    return NULL;
}

int cmd_help(int argc, char **argv) {
    int n_commands;
    const command *commands = cli_commands(&n_commands);
    char text[64];
    for (int i = 0; argc > 1 && i < n_commands; i++)
        if (cli_command_is(commands[i].name, argv[1])) {
            const char *more = help_details(commands[i].name);
            fprintf(cmdout(), "usage: ctrain %s %s\n  %s\n%s",
                    cli_command_text(commands[i].name, text, sizeof text), commands[i].usage,
                    commands[i].summary, more ? more : "");
            return 0;
        }
    fprintf(cmdout(), "ctrain %s — a language-model trainer built from plugins (ABI %d.%d)\n\n"
            "usage: ctrain COMMAND [ARGS]\n\n", CTRAIN_VERSION, CT_ABI_MAJOR, CT_ABI_MINOR);
    for (int i = 0; i < n_commands; i++) {
        char head[160];
        snprintf(head, sizeof head, "%s %s", cli_command_text(commands[i].name, text, sizeof text),
                 commands[i].usage);
        if (strlen(head) > 46)
            fprintf(cmdout(), "  %s\n  %-46s %s\n", head, "", commands[i].summary);
        else fprintf(cmdout(), "  %-46s %s\n", head, commands[i].summary);
    }
    fprintf(cmdout(), "\n  %-46s %s\n\n", "--version", "print the version");
    fprintf(cmdout(), "Plugins are searched in <dir of ctrain>/plugins, <dir of ctrain>/../lib/"
            "ctrain/plugins,\nthen each folder of $CTRAIN_PLUGIN_PATH (colon separated); a name NAME "
            "of kind KIND is\nthe file KIND_NAME.so of the first folder that has one.\n");
    return 0;
}
