/* wiring.c — which plugin owns which INI section: validates the host's sections, resolves the
 * model, loss terms, strategy, precision, comm and device plugins, validates each plugin's
 * section against host keys + its schema. Not for: loading .so files (registry.c), parsing INI
 * text (config.c) or a command's set-up from CONFIG.ini and --set (run/session.c).
 */
#include "plugin/wiring.h"

#include "data/data.h"
#include "data/mixture.h"
#include "config/host_schema.h"
#include "base/launcher.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
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

/* A note for the user on stderr, from the first process of a launch only. */
static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
    if (launcher_current()->rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("note: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static int has_param(const host_plugin *p, const char *key) {
    for (int32_t i = 0; p && i < p->n_params; i++)
        if (!strcmp(p->params[i].key, key)) return 1;
    return 0;
}

static int is_host_key(const host_section *h, const char *key) {
    for (const ct_param_spec *s = h->specs; s->key; s++)
        if (!strcmp(s->key, key)) return 1;
    return 0;
}

/* The selected plugin's section of kind section `parent` ("comm" -> "comm.threads"), or NULL
 * when `parent` is not a plugin kind's section. */
static const char *selected_section(const host_wiring *w, const char *parent, int32_t *is_loss) {
    const host_section *h = host_schema_find(parent);
    *is_loss = h && h->kind == CT_KIND_LOSS;
    if (!h || !h->kind || h->kind >= HOST_WIRING_KINDS || host_schema_flat(h)) return NULL;
    return w->own_section[h->kind];
}

/* Every section of cfg must be a host section, [KIND.NAME] of the selected plugin of a kind or
 * of a listed loss term, or [KIND.OTHER] of a plugin not selected (inert: recorded in w). */
static int32_t check_sections(const host_config *cfg, host_wiring *w, ct_error *err) {
    int32_t n_host;
    const host_section *hs = host_schema_sections(&n_host);
    const char *known[32 + HOST_WIRING_MAX_LOSS];
    int32_t n = 0;
    for (int32_t i = 0; i < n_host && n < 32; i++) known[n++] = hs[i].name;
    for (int32_t i = 0; i < w->n_loss; i++) known[n++] = w->loss_section[i];
    w->n_inert = 0;
    for (int32_t s = 0; s < config_section_count(cfg); s++) {
        const char *name = config_section_name(cfg, s);
        int ok = 0;
        for (int32_t i = 0; i < n && !ok; i++) ok = !strcmp(known[i], name);
        if (ok) continue;
        const char *where = config_section_origin(cfg, name);
        int listed = mixture_section_listed(cfg, name); /* [data.NAME] (mixture.h) */
        if (listed == 1) continue;
        if (listed == 0) { /* a dataset [data] train does not list: inert */
            if (w->n_inert == HOST_WIRING_MAX_INERT)
                return ct_error_set(err, CT_ERR_INVALID, "%s: more than %d inert sections ---> "
                                    "remove some", where, HOST_WIRING_MAX_INERT);
            snprintf(w->inert[w->n_inert], sizeof w->inert[0], "%s", name);
            snprintf(w->inert_why[w->n_inert], sizeof w->inert_why[0], "[data] train does not "
                     "list %s", name + 5);
            w->n_inert++;
            continue;
        }
        const char *dot = strchr(name, '.');
        char parent[CONFIG_NAME_MAX];
        snprintf(parent, sizeof parent, "%.*s", dot ? (int)(dot - name) : 0, name);
        int32_t is_loss = 0;
        const char *own = dot && dot[1] ? selected_section(w, parent, &is_loss) : NULL;
        if (own && !strcmp(own, name)) continue;
        if (own || is_loss) { /* a plugin of the kind that is not selected: inert */
            if (w->n_inert == HOST_WIRING_MAX_INERT)
                return ct_error_set(err, CT_ERR_INVALID, "%s: more than %d sections of plugins "
                                    "that are not selected ---> remove some", where,
                                    HOST_WIRING_MAX_INERT);
            snprintf(w->inert[w->n_inert], sizeof w->inert[0], "%s", name);
            char why[2 * CT_VALUE_MAX];
            if (is_loss)
                snprintf(why, sizeof why, "[loss] plugins = %s does not list %s",
                         config_get(cfg, "loss", "plugins") ? config_get(cfg, "loss", "plugins")
                                                            : "ce", dot + 1);
            else
                snprintf(why, sizeof why, "the %s plugin is %s", parent, own + strlen(parent) + 1);
            ct_message_fit(w->inert_why[w->n_inert], sizeof w->inert_why[0], why, strlen(why));
            w->n_inert++;
            continue;
        }
        const char *near = config_nearest(name, known, n);
        char hint[96] = "";
        if (near) snprintf(hint, sizeof hint, " (did you mean [%s]?)", near);
        return ct_error_set(err, CT_ERR_INVALID, "%s: unknown section [%s]%s ---> sections are "
                            "run, data, model, loss, strategy, precision, comm, device, optim, "
                            "optimizer, and KIND.NAME for plugin NAME's own keys (e.g. "
                            "[loss.zloss], [precision.amp])", where, name, hint);
    }
    return CT_OK;
}

/* Flat keys of plugin kind section [h] (the layout before each plugin had its own section):
 * the selected plugin p's keys move to [own] with a note (stay, silently, when
 * host_schema_flat(h): the model's keys live in [model]); a value given both flat and in [own]
 * is an error, unless one of the two comes from --set (it wins). Another plugin's keys are
 * inert (kept in [KIND.THAT] when exactly one plugin of the kind, found by scanning the search
 * path, owns it); a key no plugin of the kind knows is an error naming the nearest key. */
static int32_t settle_flat_keys(host_config *cfg, host_registry *reg, const host_section *h,
                                const host_plugin *p, const char *own, ct_error *err) {
    int scanned = 0;
    for (int32_t i = 0; i < config_key_count(cfg, h->name);) {
        char key[CONFIG_NAME_MAX], value[CT_VALUE_MAX], origin[2 * CT_VALUE_MAX];
        snprintf(key, sizeof key, "%s", config_key_name(cfg, h->name, i));
        if (is_host_key(h, key) || (host_schema_flat(h) && has_param(p, key))) {
            i++;
            continue;
        }
        snprintf(value, sizeof value, "%s", config_get(cfg, h->name, key));
        snprintf(origin, sizeof origin, "%s", config_origin(cfg, h->name, key));
        int from_set = !strcmp(origin, "--set");
        char fix[CT_VALUE_MAX + 2 * CONFIG_NAME_MAX + 16];
        if (has_param(p, key)) {
            const char *there = config_get(cfg, own, key);
            int there_set = there && !strcmp(config_origin(cfg, own, key), "--set");
            if (there && there_set && !from_set) { /* --set beats the file, either spelling */
                config_unset(cfg, h->name, key);
                continue;
            }
            if (there && from_set == there_set)
                return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] %s = %s, and %s: [%s] %s = "
                                    "%s: a key of %s plugin %s is given twice ---> keep the one "
                                    "in [%s]", origin, h->name, key, value,
                                    config_origin(cfg, own, key), own, key, there, h->name,
                                    p->desc.name, own);
            if (from_set) snprintf(fix, sizeof fix, "--set %s.%s=%s", own, key, value);
            else snprintf(fix, sizeof fix, "write it under [%s]", own);
            note("%s: [%s] %s is a key of %s plugin %s, taken from [%s] ---> %s (a plugin's "
                 "keys live in its own section)", origin, h->name, key, h->name, p->desc.name,
                 h->name, fix);
            int32_t rc = config_set(cfg, own, key, value, origin, err);
            if (rc != CT_OK) return rc;
            config_unset(cfg, h->name, key);
            continue;
        }
        /* another plugin of the kind: the search path's, all loaded (only now: a stray key) */
        if (!scanned++ && registry_scan(reg, err) != CT_OK) return err ? err->code : CT_ERR_NOMEM;
        const host_plugin *owner = NULL;
        int32_t owners = 0;
        for (int32_t j = 0; j < registry_count(reg); j++) {
            const host_plugin *q = registry_at(reg, j);
            if (q->desc.kind != h->kind || !strcmp(q->desc.name, p->desc.name) ||
                !has_param(q, key))
                continue;
            if (!owners++) owner = q;
        }
        if (owners) {
            char theirs[CONFIG_NAME_MAX];
            snprintf(theirs, sizeof theirs, "%s.%s", h->name, owner->desc.name);
            int keep = owners == 1 && !host_schema_flat(h) && !config_get(cfg, theirs, key);
            if (keep && from_set) snprintf(fix, sizeof fix, "--set %s.%s=...", theirs, key);
            else if (keep) snprintf(fix, sizeof fix, "write it under [%s]", theirs);
            else snprintf(fix, sizeof fix, "remove it");
            note("%s: [%s] %s is a key of %s plugin %s%s, not of %s (the one selected): "
                 "inert%s%s%s ---> %s", origin, h->name, key, h->name, owner->desc.name,
                 owners > 1 ? " and others" : "", p->desc.name, keep ? ", kept in [" : "",
                 keep ? theirs : "", keep ? "]" : "", fix);
            if (keep) {
                int32_t rc = config_set(cfg, theirs, key, value, origin, err);
                if (rc != CT_OK) return rc;
            }
            config_unset(cfg, h->name, key);
            continue;
        }
        const char *cands[256];
        int32_t nc = 0;
        for (const ct_param_spec *sp = h->specs; sp->key && nc < 256; sp++) cands[nc++] = sp->key;
        for (int32_t j = 0; j < p->n_params && nc < 256; j++) cands[nc++] = p->params[j].key;
        const char *near = config_nearest(key, (const char *const *)cands, nc);
        char hint[CONFIG_NAME_MAX + 32] = "";
        if (near) snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
        char other[2 * CONFIG_NAME_MAX + 48] = "";
        if (!host_schema_flat(h))
            snprintf(other, sizeof other, "; a key of another %s plugin goes under [%s.NAME]",
                     h->name, h->name);
        return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] unknown key '%s'%s: no %s plugin on "
                            "the search path has it ---> `ctrain inspect %s` lists the keys of "
                            "%s plugin %s%s", origin, h->name, key, hint, h->name, p->desc.name,
                            h->name, p->desc.name, other);
    }
    return CT_OK;
}

/* [model] vocab_size left out (its origin "default") takes the vocabulary that the meta.ini of
 * [data] train records, with that meta.ini as its origin (validate shows it). */
static int32_t vocab_from_meta(host_config *cfg, ct_error *err) {
    const char *origin = config_origin(cfg, "model", "vocab_size");
    const char *train = mixture_train_path(cfg); /* a mixture's first dataset */
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

/* The plugin of kind section h (its host key, [comm] plugin = auto resolved) into *out. */
static int32_t resolve_kind(host_config *cfg, host_registry *reg, const host_section *h,
                            const host_plugin **out, ct_error *err) {
    const char *name = value_or_default(cfg, h, h->plugin_key);
    char chosen[CT_VALUE_MAX];
    snprintf(chosen, sizeof chosen, "%s", name);
    if (h->kind == CT_KIND_COMM && !strcmp(chosen, "auto")) {
        /* the schema's parser ("1e1" is 10 here as everywhere); a value it refuses is reported
         * when [comm] is validated */
        int64_t ws = 1;
        if (config_get(cfg, "comm", "world_size") &&
            config_get_int(cfg, "comm", "world_size", &ws, NULL) != CT_OK)
            ws = 1;
        snprintf(chosen, sizeof chosen, "%s", wiring_auto_comm(cfg, ws));
    }
    char file[2 * CT_VALUE_MAX];
    *out = registry_resolve(reg, h->kind, plugin_path(chosen, file, sizeof file), err);
    return *out ? CT_OK : prefix_error(cfg, h->name, h->plugin_key, name, err);
}

int32_t wiring_resolve(host_config *cfg, host_registry *reg, host_wiring *w,
                       const host_model_source *model_source, ct_error *err) {
    memset(w, 0, sizeof *w);
    w->model_source = model_source;
    int32_t rc = resolve_losses(cfg, reg, w, err);
    if (rc != CT_OK) return rc;

    /* the plugin of each kind with one plugin, and its own section [KIND.NAME] */
    int32_t n_host;
    const host_section *hs = host_schema_sections(&n_host);
    const host_plugin *chosen[HOST_WIRING_KINDS] = {NULL};
    for (int32_t i = 0; i < n_host; i++) {
        const host_section *h = &hs[i];
        if (!h->kind || h->kind == CT_KIND_LOSS) continue;
        assert(h->kind < HOST_WIRING_KINDS);
        const host_plugin *p;
        if ((rc = resolve_kind(cfg, reg, h, &p, err)) != CT_OK) return rc;
        chosen[h->kind] = p;
        int n = snprintf(w->own_section[h->kind], sizeof w->own_section[0], "%s.%s", h->name,
                         p->desc.name);
        if (n < 0 || (size_t)n >= sizeof w->own_section[0])
            return ct_error_set(err, CT_ERR_INVALID, "%s plugin name '%s' is too long for a "
                                "section name", h->name, p->desc.name);
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

    for (int32_t i = 0; i < n_host; i++) {
        const host_section *h = &hs[i];
        /* the host's own keys ([loss] holds only those: each term's keys are in [loss.NAME]) */
        const host_plugin *p = h->kind && h->kind != CT_KIND_LOSS ? chosen[h->kind] : NULL;
        const char *own = p ? w->own_section[h->kind] : NULL;
        if (p) {
            if ((rc = settle_flat_keys(cfg, reg, h, p, own, err)) != CT_OK) return rc;
            if (!host_schema_flat(h) && config_alias(cfg, h->name, own) != CT_OK)
                return ct_error_set(err, CT_ERR_INVALID, "[%s]: too many plugin sections",
                                    own);
        }
        /* [model] init_from settled by the caller's model_source (a run folder: its newest
         * checkpoint; with from_config, the keys that checkpoint's or config.json's [model]
         * sets), before defaults fill the rest */
        if (h->kind == CT_KIND_MODEL && (rc = model_source->settle(cfg, err)) != CT_OK)
            return rc;
        char owner[128] = "ctrain";
        if (p) snprintf(owner, sizeof owner, "%s plugin %s", kind_name(p->desc.kind), p->desc.name);
        if (p && host_schema_flat(h)) { /* host keys and the plugin's in one section */
            ct_param_spec *specs = merge_specs(h->specs, p);
            if (!specs) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
            rc = config_validate_section(cfg, h->name, specs, sizeof(ct_param_spec), owner, NULL,
                                         err);
            free(specs);
            if (rc != CT_OK) return rc;
            continue;
        }
        rc = config_validate_section(cfg, h->name, h->specs, sizeof(ct_param_spec), "ctrain",
                                     NULL, err);
        if (rc != CT_OK) return rc;
        if (!p) continue;
        rc = config_validate_section(cfg, own, p->params, sizeof(ct_param_spec), owner, NULL,
                                     err);
        if (rc != CT_OK) return rc;
    }
    for (int32_t i = 0; i < w->n_loss; i++) {
        char owner[128];
        snprintf(owner, sizeof owner, "loss plugin %s", w->loss[i]->desc.name);
        rc = config_validate_section(cfg, w->loss_section[i], w->loss[i]->params,
                                     sizeof(ct_param_spec), owner, NULL, err);
        if (rc != CT_OK) return rc;
    }
    if ((rc = mixture_validate(cfg, err)) != CT_OK) return rc;
    if ((rc = vocab_from_meta(cfg, err)) != CT_OK) return rc;
    /* again: flat keys of plugins not selected may have made sections of their own */
    if ((rc = check_sections(cfg, w, err)) != CT_OK) return rc;
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
