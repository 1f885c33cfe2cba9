/* inspect.c — `ctrain inspect NAME|KIND/NAME|FILE.so|ctrain`: a plugin's description and
 * parameter schema, or the host's own keys. Not for: listing every plugin (plugins.c).
 */
#include "cli/cli.h"
#include "cli/commands.h"
#include "base/cmdout.h"
#include "config/config.h"
#include "config/host_schema.h"
#include "plugin/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The KEY column is as wide as the longest key (at least 20), so every row lines up. */
static void schema_table(const ct_param_spec *specs, FILE *out) {
    int kw = 20;
    for (const ct_param_spec *s = specs; s && s->key; s++)
        if ((int)strlen(s->key) > kw) kw = (int)strlen(s->key);
    fprintf(out, "  %-*s %-7s %-10s %-22s %s\n", kw, "KEY", "TYPE", "DEFAULT", "RANGE/CHOICES",
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
        fprintf(out, "  %-*s %-7s %-10s %-22s %s\n", kw, s->key,
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
    fprintf(out, "  devices:  %s\n", cli_devices_text(p->desc.devices, dev, sizeof dev));
    fprintf(out, "  file:     %s\n", p->path);
    /* where the keys live: [model] itself (the architecture), else the plugin's own section */
    const host_section *hs = host_schema_find(kind_name(p->desc.kind));
    if (host_schema_flat(hs)) fprintf(out, "  section:  [%s]\n", hs->name);
    else fprintf(out, "  section:  [%s.%s]\n", kind_name(p->desc.kind), p->desc.name);
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
        int own = hs[i].kind && hs[i].kind != CT_KIND_LOSS && !host_schema_flat(&hs[i]);
        fprintf(cmdout(), "\n[%s] %s%s%s%s%s\n", hs[i].name, hs[i].help,
                host_schema_flat(&hs[i]) ? "; plus the keys of its plugin" : "",
                own ? "; plugin NAME's own keys go in [" : "", own ? hs[i].name : "",
                own ? ".NAME]" : "");
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
    ct_error err = cli_new_err();
    host_registry *reg = registry_open(&err);
    if (!reg) return cli_fail(&err);
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
            if (!p) rc = cli_fail(&err);
            else inspect_plugin(p, cmdout());
            registry_close(reg);
            return rc;
        }
    }
    if (slash || is_file) {
        /* a file: resolve it as whatever kind it declares */
        const host_plugin *p = NULL;
        for (int32_t k = 1; k <= 6 && !p; k++) {
            ct_error e = cli_new_err();
            p = registry_resolve(reg, k, what, &e);
            if (!p && !strstr(e.message, "plugin; [")) {
                err = e;
                break;
            }
        }
        if (!p) rc = cli_fail(&err);
        else inspect_plugin(p, cmdout());
        registry_close(reg);
        return rc;
    }
    /* a bare name may be any kind: look at every file (each probed in a child first) */
    if (registry_scan(reg, &err) != CT_OK) {
        registry_close(reg);
        return cli_fail(&err);
    }
    fflush(cmdout());
    cli_registry_warnings(reg);
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
