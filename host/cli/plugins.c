/* plugins.c — `ctrain plugins`: every plugin on the search path (each probed in a child
 * first), a row each, the shadowed ones and the folders searched. Not for: one plugin's schema
 * (inspect.c) or loading plugins (plugin/registry.c).
 */
#include "cli/cli.h"
#include "cli/commands.h"
#include "base/cmdout.h"
#include "plugin/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void plugin_row(const host_plugin *p, FILE *out) {
    char dev[16];
    fprintf(out, "%-10s %-14s %-8s %-9s %s\n%-10s %s\n", kind_name(p->desc.kind), p->desc.name,
            p->desc.version, cli_devices_text(p->desc.devices, dev, sizeof dev), p->desc.summary, "",
            p->path);
}

int cmd_plugins(int argc, char **argv) {
    if (argc > 1) {
        fprintf(stderr, "ctrain plugins: unexpected argument '%s' ---> usage: ctrain plugins\n",
                argv[1]);
        return 2;
    }
    ct_error err = cli_new_err();
    host_registry *reg = registry_open(&err);
    if (!reg) return cli_fail(&err);
    if (registry_scan(reg, &err) != CT_OK) {
        registry_close(reg);
        return cli_fail(&err);
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
    cli_registry_warnings(reg);
    if (registry_count(reg) == 0)
        fprintf(stderr, "warning: no plugins found ---> build them (make) or set "
                        "CTRAIN_PLUGIN_PATH to a folder of plugin .so files\n");
    registry_close(reg);
    return 0;
}
