/* main.c — the ctrain command line: dispatches the subcommands listed in commands.h and holds
 * the small ones that only read the registry and the configuration (plugins, inspect,
 * validate, help). Not for: training (train), data preparation (prepare) and other commands
 * with files of their own.
 */
#include "base/blas_core.h"
#include "plugin/calls.h"
#include "base/cmdout.h"
#include "cli/commands.h"
#include "base/printable.h"
#include "config/config.h"
#include "config/host_schema.h"
#include "plugin/registry.h"
#include "plugin/supervise.h"
#include "plugin/wiring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct command {
    const char *name, *usage, *summary;
    int (*fn)(int argc, char **argv);
} command;

#define HOST_COMMAND_ROW(name, usage, summary) {#name, usage, summary, cmd_##name},
static const command commands[] = {HOST_COMMANDS(HOST_COMMAND_ROW)};
#undef HOST_COMMAND_ROW
#define N_COMMANDS ((int)(sizeof commands / sizeof *commands))

/* Does the command line's `arg` name table entry `name`? An '_' of the name is written '-'. */
static int command_is(const char *name, const char *arg) {
    for (; *name && *arg; name++, arg++)
        if (*name != *arg && !(*name == '_' && *arg == '-')) return 0;
    return *name == *arg;
}

/* The name as the command line writes it ('_' -> '-'), into buf. */
static const char *command_text(const char *name, char *buf, size_t cap) {
    size_t i = 0;
    for (; name[i] && i + 1 < cap; i++) buf[i] = name[i] == '_' ? '-' : name[i];
    buf[i] = '\0';
    return buf;
}

static int fail(const ct_error *err) {
    fprintf(stderr, "ctrain: error: %s\n", err->message);
    return 1;
}

static ct_error new_err(void) {
    ct_error e = {.struct_size = sizeof(ct_error)};
    return e;
}

/* "cpu", "cuda" or "cpu,cuda" for a devices mask (never 0: the registry refuses it), into buf. */
static const char *devices_text(uint32_t mask, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s%s", mask & CT_DEVICE_CPU ? "cpu" : "",
             (mask & CT_DEVICE_CPU) && (mask & CT_DEVICE_CUDA) ? "," : "",
             mask & CT_DEVICE_CUDA ? "cuda" : "");
    return buf;
}

/* ---- ctrain plugins ------------------------------------------------------------------ */

/* Files that could not be used and the search path's warnings, to stderr. */
static void print_registry_warnings(const host_registry *reg) {
    for (int32_t i = 0; i < registry_problem_count(reg); i++)
        fprintf(stderr, "warning: %s\n", registry_problem_message(reg, i));
    for (int32_t i = 0; i < registry_warning_count(reg); i++)
        fprintf(stderr, "warning: %s\n", registry_warning_at(reg, i));
}

static void plugin_row(const host_plugin *p, FILE *out) {
    char dev[16];
    fprintf(out, "%-10s %-14s %-8s %-9s %s\n%-10s %s\n", kind_name(p->desc.kind), p->desc.name,
            p->desc.version, devices_text(p->desc.devices, dev, sizeof dev), p->desc.summary, "",
            p->path);
}

int cmd_plugins(int argc, char **argv) {
    if (argc > 1) {
        fprintf(stderr, "ctrain plugins: unexpected argument '%s' ---> usage: ctrain plugins\n",
                argv[1]);
        return 2;
    }
    ct_error err = new_err();
    host_registry *reg = registry_open(&err);
    if (!reg) return fail(&err);
    if (registry_scan(reg, &err) != CT_OK) {
        registry_close(reg);
        return fail(&err);
    }
    fprintf(cmdout(), "%-10s %-14s %-8s %-9s %s\n", "KIND", "NAME", "VERSION", "DEVICES",
            "SUMMARY / FILE");
    for (int32_t i = 0; i < registry_count(reg); i++) plugin_row(registry_at(reg, i), cmdout());
    if (registry_shadowed_count(reg)) {
        fprintf(cmdout(), "\nshadowed (an earlier folder has a plugin of the same kind and "
                "name):\n");
        for (int32_t i = 0; i < registry_shadowed_count(reg); i++) {
            const host_plugin *p = registry_shadowed_at(reg, i);
            fprintf(cmdout(), "  %s %s %s\n", kind_name(p->desc.kind), p->desc.name, p->path);
        }
    }
    fprintf(cmdout(), "\nsearched:");
    for (int32_t i = 0; i < registry_dir_count(reg); i++)
        fprintf(cmdout(), "%s %s", i ? "," : "", registry_dir_at(reg, i));
    fprintf(cmdout(), "\n");
    fflush(cmdout());
    print_registry_warnings(reg);
    if (registry_count(reg) == 0)
        fprintf(stderr, "warning: no plugins found ---> build them (make) or set "
                        "CTRAIN_PLUGIN_PATH to a folder of plugin .so files\n");
    registry_close(reg);
    return 0;
}

/* ---- ctrain inspect ------------------------------------------------------------------ */

static void schema_table(const ct_param_spec *specs, FILE *out) {
    fprintf(out, "  %-20s %-7s %-10s %-22s %s\n", "KEY", "TYPE", "DEFAULT", "RANGE/CHOICES",
            "HELP");
    static const char *const types[] = {"?", "bool", "int", "float", "string", "enum"};
    for (const ct_param_spec *s = specs; s && s->key; s++) {
        char range[256] = "";
        if (s->type == CT_PARAM_TYPE_ENUM) {
            size_t used = 0;
            for (const char *const *c = s->choices; c && *c; c++) {
                int w = snprintf(range + used, sizeof range - used, "%s%s", used ? "|" : "", *c);
                if (w < 0 || (size_t)w >= sizeof range - used) break;
                used += (size_t)w;
            }
        } else if ((s->type == CT_PARAM_TYPE_INT || s->type == CT_PARAM_TYPE_FLOAT) &&
                   s->min <= s->max) {
            config_range_text(s, 10, range, sizeof range);
        }
        const char *def = s->default_value ? s->default_value : "(required)";
        if (s->default_value && !*s->default_value) def = "\"\"";
        fprintf(out, "  %-20s %-7s %-10s %-22s %s\n", s->key,
                s->type >= 1 && s->type <= 5 ? types[s->type] : "?", def, range,
                s->help ? s->help : "");
    }
}

static void inspect_plugin(const host_plugin *p, FILE *out) {
    char dev[16];
    fprintf(out, "%s (%s plugin)\n", p->desc.name, kind_name(p->desc.kind));
    fprintf(out, "  summary:  %s\n", p->desc.summary);
    fprintf(out, "  version:  %s\n", p->desc.version);
    fprintf(out, "  ABI:      %u.%u (this ctrain speaks %d.%d)\n", p->desc.abi_major,
            p->desc.abi_minor, CT_ABI_MAJOR, CT_ABI_MINOR);
    fprintf(out, "  devices:  %s\n", devices_text(p->desc.devices, dev, sizeof dev));
    fprintf(out, "  file:     %s\n", p->path);
    const char *section = p->desc.kind == CT_KIND_LOSS ? "loss.<name>" : kind_name(p->desc.kind);
    if (p->desc.kind == CT_KIND_LOSS) fprintf(out, "  section:  [loss.%s]\n", p->desc.name);
    else fprintf(out, "  section:  [%s]\n", section);
    if (p->n_params == 0) {
        fprintf(out, "  keys:     none\n");
        return;
    }
    fprintf(out, "  keys:\n");
    schema_table(p->params, out);
}

static int inspect_host(void) {
    int32_t n;
    const host_section *hs = host_schema_sections(&n);
    fprintf(cmdout(), "ctrain %s (plugin ABI %d.%d): the host's own INI keys\n", CTRAIN_VERSION,
            CT_ABI_MAJOR, CT_ABI_MINOR);
    for (int32_t i = 0; i < n; i++) {
        fprintf(cmdout(), "\n[%s] %s%s%s\n", hs[i].name, hs[i].help,
                hs[i].kind ? "; plus the keys of its plugin" : "",
                hs[i].kind == CT_KIND_LOSS ? "s' [loss.NAME] sections" : "");
        schema_table(hs[i].specs, cmdout());
    }
    return 0;
}

int cmd_inspect(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: ctrain inspect NAME | KIND/NAME | FILE.so | ctrain\n");
        return 2;
    }
    const char *what = argv[1];
    if (!strcmp(what, "ctrain") || !strcmp(what, "host")) return inspect_host();
    ct_error err = new_err();
    host_registry *reg = registry_open(&err);
    if (!reg) return fail(&err);
    int rc = 0;
    int found = 0;
    const char *slash = strchr(what, '/');
    size_t nlen = strlen(what);
    int is_file = nlen > 3 && !strcmp(what + nlen - 3, ".so");
    char kname[32];
    if (slash && !is_file && (size_t)(slash - what) < sizeof kname) {
        memcpy(kname, what, (size_t)(slash - what));
        kname[slash - what] = '\0';
        int32_t kind = kind_from_name(kname);
        if (kind) {
            const host_plugin *p = registry_resolve(reg, kind, slash + 1, &err);
            if (!p) rc = fail(&err);
            else inspect_plugin(p, cmdout());
            registry_close(reg);
            return rc;
        }
    }
    if (slash || is_file) {
        /* a file: resolve it as whatever kind it declares */
        const host_plugin *p = NULL;
        for (int32_t k = 1; k <= 6 && !p; k++) {
            ct_error e = new_err();
            p = registry_resolve(reg, k, what, &e);
            if (!p && !strstr(e.message, "plugin; [")) {
                err = e;
                break;
            }
        }
        if (!p) rc = fail(&err);
        else inspect_plugin(p, cmdout());
        registry_close(reg);
        return rc;
    }
    /* a bare name may be any kind: look at every file (each probed in a child first) */
    if (registry_scan(reg, &err) != CT_OK) {
        registry_close(reg);
        return fail(&err);
    }
    fflush(cmdout());
    print_registry_warnings(reg);
    for (int32_t i = 0; i < registry_count(reg); i++) {
        const host_plugin *p = registry_at(reg, i);
        if (strcmp(p->desc.name, what)) continue;
        if (found++) fprintf(cmdout(), "\n");
        inspect_plugin(p, cmdout());
    }
    if (!found) {
        const char *names[512];
        int32_t n = 0;
        for (int32_t i = 0; i < registry_count(reg) && n < 512; i++)
            names[n++] = registry_at(reg, i)->desc.name;
        const char *near = config_nearest(what, names, n);
        fprintf(stderr, "ctrain: error: no plugin named '%s'%s%s%s ---> `ctrain plugins` lists "
                        "them\n", what, near ? " (did you mean '" : "", near ? near : "",
                near ? "'?)" : "");
        rc = 1;
    }
    registry_close(reg);
    return rc;
}

/* ---- ctrain validate ----------------------------------------------------------------- */

int cmd_validate(int argc, char **argv) {
    ct_error err = new_err();
    host_config *cfg;
    host_registry *reg;
    host_wiring w;
    int n_rest;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return ct_error_set(&err, CT_ERR_NOMEM, "out of memory"), fail(&err);
    int32_t rc = session_configure(argc, argv, &n_rest, rest, &cfg, &reg, &w, &err);
    if (rc != CT_OK) {
        free(rest);
        return fail(&err);
    }
    int status = 0;
    if (n_rest > 0) {
        fprintf(stderr, "ctrain validate: unexpected argument '%s' ---> usage: ctrain validate "
                        "CONFIG.ini [--set section.key=value ...]\n", rest[0]);
        status = 2;
        goto out_close;
    }
    fprintf(cmdout(), "; %s resolved: every key with its value and origin\n", config_path(cfg));
    config_show(cfg, cmdout());
    fprintf(cmdout(), "\n; plugins\n");
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (mem) {
        wiring_print(&w, mem);
        fclose(mem);
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
            fprintf(cmdout(), ";   %s\n", line);
        free(buf);
    }
    fprintf(stderr, "ctrain: %s is valid\n", config_path(cfg));
out_close:
    registry_close(reg);
    config_free(cfg);
    free(rest);
    return status;
}

/* ---- ctrain help / --version --------------------------------------------------------- */

/* More than the summary line, for `ctrain help NAME`; NULL when there is nothing more. */
static const char *help_details(const char *name) {
    if (!strcmp(name, "train"))
        return "\n  Signals: SIGTERM, SIGINT or SIGUSR1 stop the run at the end of the step in\n"
               "  progress, after a checkpoint of that step (exit status 3; continue with\n"
               "  --resume). Each rank then has [run] stop_grace_s seconds (default 30) to reach\n"
               "  the end of its step; when one has not (a plugin call that does not return, or\n"
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
    char text[64];
    for (int i = 0; argc > 1 && i < N_COMMANDS; i++)
        if (command_is(commands[i].name, argv[1])) {
            const char *more = help_details(commands[i].name);
            fprintf(cmdout(), "usage: ctrain %s %s\n  %s\n%s",
                    command_text(commands[i].name, text, sizeof text), commands[i].usage,
                    commands[i].summary, more ? more : "");
            return 0;
        }
    fprintf(cmdout(), "ctrain %s — a language-model trainer built from plugins (ABI %d.%d)\n\n"
            "usage: ctrain COMMAND [ARGS]\n\n", CTRAIN_VERSION, CT_ABI_MAJOR, CT_ABI_MINOR);
    for (int i = 0; i < N_COMMANDS; i++) {
        char head[160];
        snprintf(head, sizeof head, "%s %s", command_text(commands[i].name, text, sizeof text),
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

int main(int argc, char **argv) {
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
    /* the commands that run matrix products: OpenBLAS's kernel is chosen before a plugin
     * loads it (may restart this program once) */
    static const char *const blas_users[] = {"train", "sample", "check-plugin", "logits", "what-if", NULL};
    for (int i = 0; blas_users[i]; i++)
        if (!strcmp(name, blas_users[i])) blas_core_choose(argv);
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
    for (int i = 0; i < N_COMMANDS; i++)
        if (command_is(commands[i].name, name)) return commands[i].fn(argc - 1, argv + 1);
    const char *names[64];
    char texts[64][64];
    for (int i = 0; i < N_COMMANDS && i < 64; i++)
        names[i] = command_text(commands[i].name, texts[i], sizeof texts[i]);
    const char *near = config_nearest(name, names, N_COMMANDS < 64 ? N_COMMANDS : 64);
    fprintf(stderr, "ctrain: unknown command '%s'%s%s%s ---> `ctrain help` lists the commands\n",
            name, near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
    return 2;
}
