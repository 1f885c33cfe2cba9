/* wiring.c — which plugin owns which INI section: validates the host's sections, resolves the
 * model, loss terms, strategy, precision, comm and device plugins, validates each plugin's
 * section against host keys + its schema. Not for: loading .so files (registry.c), parsing INI
 * text (config.c) or a command's set-up from CONFIG.ini and --set (run/session.c).
 */
#include "plugin/wiring.h"

#include "data/data.h"
#include "weights/hf_config.h"
#include "config/host_schema.h"
#include "base/launcher.h"

#include <stdlib.h>
#include <string.h>

/* Host keys followed by the plugin's keys, as one CT_PARAM_END-terminated array (malloc'd). */
static ct_param_spec *merge_specs(const ct_param_spec *host, const host_plugin *p) {
    int32_t nh = 0;
    while (host && host[nh].key) nh++;
    int32_t np = p ? p->n_params : 0;
    ct_param_spec *all = calloc((size_t)(nh + np + 1), sizeof *all);
    if (!all) return NULL;
    for (int32_t i = 0; i < nh; i++) all[i] = host[i];
    for (int32_t i = 0; i < np; i++) all[nh + i] = p->params[i];
    return all;
}

/* "FILE:LINE: [section] key = value: " prefix + err's message, in place (its end kept). */
static int32_t prefix_error(const host_config *cfg, const char *section, const char *key,
                            const char *value, ct_error *err) {
    if (!err) return CT_ERR_INVALID;
    char full[2 * sizeof err->message + 2 * CT_VALUE_MAX];
    snprintf(full, sizeof full, "%s: [%s] %s = %s: %s", config_origin(cfg, section, key),
             section, key, value, err->message);
    ct_message_fit(err->message, sizeof err->message, full, strlen(full)); /* the hint stays */
    return err->code;
}

/* The value of section.key, or the host default when absent. */
static const char *value_or_default(const host_config *cfg, const host_section *hs,
                                    const char *key) {
    const char *v = config_get(cfg, hs->name, key);
    if (v) return v;
    for (const ct_param_spec *s = hs->specs; s->key; s++)
        if (!strcmp(s->key, key)) return s->default_value;
    return NULL;
}

/* A plugin value naming a file by a relative path ("my/loss_x.so") is relative to the current
 * working directory, as every path of a configuration is, whether written in the INI file or
 * given with --set (config_abs_path); it is opened by its absolute path, so a message about it
 * names the file ctrain looked for. A bare name ("x.so", "ce") goes to the search path. */
static const char *plugin_path(const char *value, char *buf, size_t cap) {
    if (!strchr(value, '/')) return value;
    return config_abs_path(value, buf, cap);
}

const char *wiring_auto_comm(const host_config *cfg, int64_t world_size) {
    const host_section *dev = host_schema_find("device");
    const char *type = dev ? value_or_default(cfg, dev, "type") : NULL;
    int32_t cuda = type && strcmp(type, "cuda") == 0;
    return launcher_auto_comm(launcher_current(), cuda, world_size);
}

static int32_t device_mask_check(const host_wiring *w, const host_config *cfg, ct_error *err) {
    uint32_t dev = w->device->desc.devices;
    const char *dtype = dev & CT_DEVICE_CUDA ? "cuda" : "cpu";
    const host_plugin *all[6 + HOST_WIRING_MAX_LOSS] = {w->model, w->strategy, w->precision,
                                                        w->comm, w->optimizer};
    int32_t n = w->optimizer ? 5 : 4;
    for (int32_t i = 0; i < w->n_loss; i++) all[n++] = w->loss[i];
    for (int32_t i = 0; i < n; i++) {
        const host_plugin *p = all[i];
        if (!p->desc.devices || !dev || (p->desc.devices & dev)) continue;
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: [device] type = %s, but %s plugin '%s' "
                            "runs only on %s ---> choose another plugin or device",
                            config_origin(cfg, "device", "type"), dtype,
                            kind_name(p->desc.kind), p->desc.name,
                            p->desc.devices & CT_DEVICE_CUDA ? "cuda" : "cpu");
    }
    return CT_OK;
}

/* Split [loss] plugins into terms and resolve each. */
static int32_t resolve_losses(host_config *cfg, host_registry *reg, host_wiring *w, ct_error *err) {
    const host_section *hs = host_schema_find("loss");
    const char *list = value_or_default(cfg, hs, "plugins");
    char buf[CT_VALUE_MAX];
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ' || *tok == '\t') tok++;
        char *end = tok + strlen(tok);
        while (end > tok && (end[-1] == ' ' || end[-1] == '\t')) *--end = '\0';
        if (!*tok) continue;
        if (w->n_loss == HOST_WIRING_MAX_LOSS)
            return ct_error_set(err, CT_ERR_INVALID, "%s: [loss] plugins lists more than %d "
                                "terms ---> drop some", config_origin(cfg, "loss", "plugins"),
                                HOST_WIRING_MAX_LOSS);
        char file[2 * CT_VALUE_MAX];
        const host_plugin *p = registry_resolve(
            reg, CT_KIND_LOSS, plugin_path(tok, file, sizeof file), err);
        if (!p) return prefix_error(cfg, "loss", "plugins", list, err);
        for (int32_t i = 0; i < w->n_loss; i++)
            if (w->loss[i] == p || !strcmp(w->loss[i]->desc.name, p->desc.name))
                return ct_error_set(err, CT_ERR_INVALID, "%s: [loss] plugins lists '%s' twice "
                                    "---> list each term once",
                                    config_origin(cfg, "loss", "plugins"), p->desc.name);
        snprintf(w->loss_section[w->n_loss], sizeof w->loss_section[0], "loss.%s",
                 p->desc.name);
        w->loss[w->n_loss++] = p;
    }
    if (w->n_loss == 0)
        return ct_error_set(err, CT_ERR_INVALID, "%s: [loss] plugins is empty ---> name at least "
                            "one loss term, e.g. plugins = ce",
                            config_origin(cfg, "loss", "plugins"));
    return CT_OK;
}

/* Every section of cfg must be a host section or [loss.TERM] of a listed term. */
static int32_t check_sections(const host_config *cfg, const host_wiring *w, ct_error *err) {
    int32_t n_host;
    const host_section *hs = host_schema_sections(&n_host);
    const char *known[32 + HOST_WIRING_MAX_LOSS];
    int32_t n = 0;
    for (int32_t i = 0; i < n_host; i++) known[n++] = hs[i].name;
    for (int32_t i = 0; i < w->n_loss; i++) known[n++] = w->loss_section[i];
    for (int32_t s = 0; s < config_section_count(cfg); s++) {
        const char *name = config_section_name(cfg, s);
        int ok = 0;
        for (int32_t i = 0; i < n && !ok; i++) ok = !strcmp(known[i], name);
        if (!ok && !strncmp(name, "optimizer.", 10) && name[10]) ok = 1; /* inert unless chosen */
        if (ok) continue;
        const char *where = config_section_origin(cfg, name);
        if (!strncmp(name, "loss.", 5))
            return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] configures loss term '%s', but "
                                "[loss] plugins = %s does not list it ---> add it to [loss] "
                                "plugins or remove the section", where, name, name + 5,
                                config_get(cfg, "loss", "plugins") ? config_get(cfg, "loss",
                                "plugins") : "ce (default)");
        const char *near = config_nearest(name, known, n);
        char hint[96] = "";
        if (near) snprintf(hint, sizeof hint, " (did you mean [%s]?)", near);
        return ct_error_set(err, CT_ERR_INVALID, "%s: unknown section [%s]%s ---> sections are "
                            "run, data, model, loss, loss.NAME, strategy, precision, comm, "
                            "device, optim, optimizer, optimizer.NAME", where, name, hint);
    }
    return CT_OK;
}

/* [model] vocab_size left out (its origin "default") takes the vocabulary that the meta.ini of
 * [data] train records, with that meta.ini as its origin (validate shows it). */
static int32_t vocab_from_meta(host_config *cfg, ct_error *err) {
    const char *origin = config_origin(cfg, "model", "vocab_size");
    const char *train = config_get(cfg, "data", "train");
    if (!config_get(cfg, "model", "vocab_size") || strcmp(origin, "default") != 0 || !train ||
        !*train)
        return CT_OK;
    host_data_meta m;
    int32_t rc = data_meta_for(train, &m, err);
    if (rc != CT_OK) return rc;
    if (m.found && m.vocab_size > 0) {
        char v[32];
        snprintf(v, sizeof v, "%d", m.vocab_size);
        rc = config_set(cfg, "model", "vocab_size", v, m.path, err);
    }
    data_meta_free(&m);
    return rc;
}

int32_t wiring_resolve(host_config *cfg, host_registry *reg, host_wiring *w, ct_error *err) {
    memset(w, 0, sizeof *w);
    int32_t rc = resolve_losses(cfg, reg, w, err);
    if (rc != CT_OK) return rc;
    rc = check_sections(cfg, w, err);
    if (rc != CT_OK) return rc;

    /* [run] out_dir defaults to runs/<name> */
    if (!config_get(cfg, "run", "out_dir")) {
        const char *name = config_get(cfg, "run", "name");
        char dir[CT_VALUE_MAX];
        snprintf(dir, sizeof dir, "runs/%s", name ? name : "run");
        rc = config_set(cfg, "run", "out_dir", dir, "default", err);
        if (rc != CT_OK) return rc;
    }

    int32_t n_host;
    const host_section *hs = host_schema_sections(&n_host);
    for (int32_t i = 0; i < n_host; i++) {
        const host_section *h = &hs[i];
        if (h->kind == CT_KIND_LOSS) {
            /* the [loss] section itself holds only host keys */
            rc = config_validate_section(cfg, h->name, h->specs, sizeof(ct_param_spec), "ctrain",
                                         NULL, err);
            if (rc != CT_OK) return rc;
            continue;
        }
        const host_plugin *p = NULL;
        if (h->kind) {
            const char *name = value_or_default(cfg, h, h->plugin_key);
            char chosen[CT_VALUE_MAX];
            snprintf(chosen, sizeof chosen, "%s", name);
            if (h->kind == CT_KIND_COMM && !strcmp(chosen, "auto")) {
                /* the schema's parser ("1e1" is 10 here as everywhere); a value it refuses
                 * is reported when [comm] is validated below */
                int64_t ws = 1;
                if (config_get(cfg, "comm", "world_size") &&
                    config_get_int(cfg, "comm", "world_size", &ws, NULL) != CT_OK)
                    ws = 1;
                snprintf(chosen, sizeof chosen, "%s", wiring_auto_comm(cfg, ws));
            }
            char file[2 * CT_VALUE_MAX];
            p = registry_resolve(reg, h->kind,
                                 plugin_path(chosen, file, sizeof file), err);
            if (!p) return prefix_error(cfg, h->name, h->plugin_key, name, err);
            switch (h->kind) {
            case CT_KIND_MODEL: w->model = p; break;
            case CT_KIND_STRATEGY: w->strategy = p; break;
            case CT_KIND_PRECISION: w->precision = p; break;
            case CT_KIND_COMM: w->comm = p; break;
            case CT_KIND_DEVICE: w->device = p; break;
            case CT_KIND_OPTIMIZER: w->optimizer = p; break;
            default: break;
            }
        }
        if (h->kind == CT_KIND_OPTIMIZER) { /* the plugin's keys live in [optimizer.NAME] */
            rc = config_validate_section(cfg, h->name, h->specs, sizeof(ct_param_spec), "ctrain",
                                         NULL, err);
            if (rc != CT_OK) return rc;
            snprintf(w->optimizer_section, sizeof w->optimizer_section, "optimizer.%s",
                     p->desc.name);
            char owner[128];
            snprintf(owner, sizeof owner, "optimizer plugin %s", p->desc.name);
            rc = config_validate_section(cfg, w->optimizer_section, p->params,
                                         sizeof(ct_param_spec), owner, NULL, err);
            if (rc != CT_OK) return rc;
            continue;
        }
        /* [model] from_config: the keys config.json sets, before defaults fill the rest */
        if (h->kind == CT_KIND_MODEL && (rc = hf_config_fill(cfg, err)) != CT_OK) return rc;
        ct_param_spec *specs = merge_specs(h->specs, p);
        if (!specs) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        char owner[128];
        if (p) snprintf(owner, sizeof owner, "%s plugin %s", kind_name(p->desc.kind), p->desc.name);
        else snprintf(owner, sizeof owner, "ctrain");
        rc = config_validate_section(cfg, h->name, specs, sizeof(ct_param_spec), owner, NULL, err);
        free(specs);
        if (rc != CT_OK) return rc;
    }
    for (int32_t i = 0; i < w->n_loss; i++) {
        char owner[128];
        snprintf(owner, sizeof owner, "loss plugin %s", w->loss[i]->desc.name);
        rc = config_validate_section(cfg, w->loss_section[i], w->loss[i]->params,
                                     sizeof(ct_param_spec), owner, NULL, err);
        if (rc != CT_OK) return rc;
    }
    if ((rc = vocab_from_meta(cfg, err)) != CT_OK) return rc;
    return device_mask_check(w, cfg, err);
}

void wiring_print(const host_wiring *w, FILE *out) {
    const struct { const char *what; const host_plugin *p; } rows[] = {
        {"model", w->model}, {"strategy", w->strategy}, {"precision", w->precision},
        {"comm", w->comm}, {"device", w->device}, {"optimizer", w->optimizer},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        if (rows[i].p)
            fprintf(out, "%-10s %-12s %-8s %s\n", rows[i].what, rows[i].p->desc.name,
                    rows[i].p->desc.version, rows[i].p->path);
    for (int32_t i = 0; i < w->n_loss; i++)
        fprintf(out, "%-10s %-12s %-8s %s\n", "loss", w->loss[i]->desc.name,
                w->loss[i]->desc.version, w->loss[i]->path);
}

void wiring_print_inert(const host_config *cfg, const host_wiring *w, FILE *out) {
    for (int32_t s = 0; s < config_section_count(cfg); s++) {
        const char *name = config_section_name(cfg, s);
        if (strncmp(name, "optimizer.", 10) != 0 || !strcmp(name, w->optimizer_section)) continue;
        fprintf(out, "inert: [%s] (%s): [optimizer] plugin = %s does not read it\n", name,
                config_section_origin(cfg, name), w->optimizer ? w->optimizer->desc.name : "?");
    }
}
