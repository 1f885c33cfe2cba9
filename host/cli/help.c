/* help.c — `ctrain help [COMMAND]` and every command's --help: the command table (commands.h)
 * with each command's whole usage, and the longer text of a few. Not for: dispatching (main.c).
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
    if (!strcmp(name, "export"))
        return "\n  --force replaces an existing --out file, or writes into a non-empty --out folder.\n";
    if (!strcmp(name, "check_plugin"))
        return "\n  --set key=value: a key of the plugin's own section (e.g. --set coef=1e-3).\n"
               "  Each check runs in a child process with a time limit (--timeout SECONDS,\n"
               "  default 60): a plugin that crashes, calls exit() or hangs fails that check\n"
               "  with the call it was in, and the summary always prints. Buffers handed to the\n"
               "  plugin are fenced: a write past one or into a const input fails naming it.\n";
    if (!strcmp(name, "plugins") || !strcmp(name, "inspect"))
        return "\n  Plugin files not loaded yet are first loaded in a child process, killed\n"
               "  after 10 s (CTRAIN_PROBE_TIMEOUT_S overrides): a constructor that crashes,\n"
               "  exits or hangs is a warning naming the file, not a dead listing.\n";
    return NULL;
}

/* The commands whose own parser prints their whole usage on --help or -h, wherever it stands
 * (SAMPLE_USAGE and the like: longer than one row of the table). */
static int own_usage(const char *name) {
    static const char *const own[] = {"sample", "prepare", "tokenize", "what_if", "reduce", NULL};
    for (int i = 0; own[i]; i++)
        if (!strcmp(own[i], name)) return 1;
    return 0;
}

/* ' ' and `text` on f (the cursor at column `col`), the words wrapped before column 78 and
 * later lines indented by `indent`. */
static void print_wrapped(FILE *f, const char *text, int col, int indent) {
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, " ");
        if (col > indent && col + 1 + (int)n > 78) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", (int)n, p);
        col += (int)n;
        p += n;
        while (*p == ' ') p++;
    }
}

int cli_help_wanted(const char *name, int argc, char **argv) {
    int n_commands;
    const command *commands = cli_commands(&n_commands);
    for (int c = 0; c < n_commands; c++) {
        if (!cli_command_is(commands[c].name, name)) continue;
        if (own_usage(commands[c].name)) return 0;
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    }
    return 0;
}

int cli_help_for(const char *name) {
    int n_commands;
    const command *commands = cli_commands(&n_commands);
    char text[64];
    for (int i = 0; i < n_commands; i++) {
        if (!cli_command_is(commands[i].name, name)) continue;
        cli_command_text(commands[i].name, text, sizeof text);
        if (own_usage(commands[i].name)) {
            char *args[] = {text, "--help", NULL};
            return commands[i].fn(2, args);
        }
        const char *more = help_details(commands[i].name);
        fprintf(cmdout(), "usage: ctrain %s", text);
        print_wrapped(cmdout(), commands[i].usage, 14 + (int)strlen(text), 15 + (int)strlen(text));
        fprintf(cmdout(), "\n  %s\n%s", commands[i].summary, more ? more : "");
        return fflush(cmdout()) == 0 ? 0 : 1;
    }
    return cli_no_such_command("ctrain help", "no command", name);
}

int cmd_help(int argc, char **argv) {
    int n_commands;
    const command *commands = cli_commands(&n_commands);
    char text[64];
    if (argc > 1) return cli_help_for(argv[1]);
    fprintf(cmdout(), "ctrain %s — a language-model trainer built from plugins (ABI %d.%d)\n\n"
            "usage: ctrain COMMAND [ARGS]\n\n", CTRAIN_VERSION, CT_ABI_MAJOR, CT_ABI_MINOR);
    for (int i = 0; i < n_commands; i++) {
        /* the whole usage, wrapped; the summary beside it when it fits in 46 columns */
        cli_command_text(commands[i].name, text, sizeof text);
        size_t len = strlen(text) + (*commands[i].usage ? 1 + strlen(commands[i].usage) : 0);
        fprintf(cmdout(), "  %s", text);
        if (len > 46) {
            print_wrapped(cmdout(), commands[i].usage, 2 + (int)strlen(text), 4);
            fprintf(cmdout(), "\n  %-46s %s\n", "", commands[i].summary);
        } else {
            fprintf(cmdout(), "%s%s%*s %s\n", *commands[i].usage ? " " : "", commands[i].usage,
                    (int)(46 - len), "", commands[i].summary);
        }
    }
    fprintf(cmdout(), "\n  %-46s %s\n\n", "--version", "print the version");
    fprintf(cmdout(), "`ctrain help COMMAND` or `ctrain COMMAND --help` prints the whole usage of "
            "one command.\n");
    fprintf(cmdout(), "Plugins are searched in <dir of ctrain>/plugins, <dir of ctrain>/../lib/"
            "ctrain/plugins,\nthen each folder of $CTRAIN_PLUGIN_PATH (colon separated); a name NAME "
            "of kind KIND is\nthe file KIND_NAME.so of the first folder that has one.\n");
    return 0;
}
