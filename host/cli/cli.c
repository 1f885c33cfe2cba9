/* cli.c — the command table and the helpers host/cli/'s commands share (cli.h).
 * Not for: dispatching (main.c) or any command's own work.
 */
#include "cli/cli.h"

#include "cli/commands.h"
#include "base/printable.h"
#include "config/config.h"

#include <stdio.h>

#define HOST_COMMAND_ROW(name, usage, summary) {#name, usage, summary, cmd_##name},
static const command commands[] = {HOST_COMMANDS(HOST_COMMAND_ROW)};
#undef HOST_COMMAND_ROW

const command *cli_commands(int *n) {
    *n = (int)(sizeof commands / sizeof *commands);
    return commands;
}

int cli_command_is(const char *name, const char *arg) {
    for (; *name && *arg; name++, arg++)
        if (*name != *arg && !(*name == '_' && *arg == '-')) return 0;
    return *name == *arg;
}

const char *cli_command_text(const char *name, char *buf, size_t cap) {
    size_t i = 0;
    for (; name[i] && i + 1 < cap; i++) buf[i] = name[i] == '_' ? '-' : name[i];
    buf[i] = '\0';
    return buf;
}

int cli_fail(const ct_error *err) {
    /* one line: a newline in a path the message names is shown as \n, never a fake log line */
    char shown[4 * sizeof err->message];
    fprintf(stderr, "ctrain: error: %s\n", printable(err->message, shown, sizeof shown));
    return 1;
}

ct_error cli_new_err(void) {
    ct_error e = {.struct_size = sizeof(ct_error)};
    return e;
}

void cli_registry_warnings(const host_registry *reg) {
    for (int32_t i = 0; i < registry_problem_count(reg); i++)
        fprintf(stderr, "warning: %s\n", registry_problem_message(reg, i));
    for (int32_t i = 0; i < registry_warning_count(reg); i++)
        fprintf(stderr, "warning: %s\n", registry_warning_at(reg, i));
}

const char *cli_devices_text(uint32_t mask, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s%s", mask & CT_DEVICE_CPU ? "cpu" : "",
             (mask & CT_DEVICE_CPU) && (mask & CT_DEVICE_CUDA) ? "," : "",
             mask & CT_DEVICE_CUDA ? "cuda" : "");
    return buf;
}

int cli_no_such_command(const char *who, const char *what, const char *name) {
    int n_commands;
    const command *commands = cli_commands(&n_commands);
    const char *names[64];
    char texts[64][64];
    for (int i = 0; i < n_commands && i < 64; i++)
        names[i] = cli_command_text(commands[i].name, texts[i], sizeof texts[i]);
    const char *near = config_nearest(name, names, n_commands < 64 ? n_commands : 64);
    fprintf(stderr, "%s: %s '%s'%s%s%s ---> `ctrain help` lists the commands\n", who, what, name,
            near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
    return 2;
}
