/* harness.c — the unit tests' host (see harness.h). */
#include "harness.h"

#include "config/config.h"
#include "plugin/contract.h"
#include "ct_test.h"
#include "plugin/hostapi.h"
#include "io/metrics.h"
#include "plugin/registry.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HARNESS_MAX 64

struct ct_harness {
    host_config        *cfg;
    host_metric_table   metrics[HARNESS_MAX]; /* one per host: rank threads report at once */
    ct_host           hosts[HARNESS_MAX]; /* one per instance, for log prefixes */
    int32_t           n_hosts;
    ct_harness_plugin made[HARNESS_MAX];
    int32_t           n_made;
    ct_device_ref     device;
    ct_comm_ref       comm;
};

ct_harness *harness_new(const char *ini_text) {
    ct_harness *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->cfg = config_new();
    ct_error err = {.struct_size = sizeof err};
    if (!h->cfg || config_load_string(h->cfg, "test.ini", ini_text, &err) != CT_OK) {
        ct_test_fail(__FILE__, __LINE__, "harness config: %s", err.message);
        if (h->cfg) config_free(h->cfg);
        free(h);
        return NULL;
    }
    return h;
}

void harness_free(ct_harness *h) {
    if (!h) return;
    for (int32_t i = h->n_made - 1; i >= 0; i--) {
        const ct_plugin_desc *d = h->made[i].desc;
        contract_lifecycle vt = contract_lifecycle_of(d->kind, d->vtable);
        if (vt.destroy && h->made[i].self) vt.destroy(h->made[i].self);
    }
    config_free(h->cfg);
    free(h);
}

/* The registry over the build's plugin folder, opened on first use and kept for the process
 * (plugins are never unloaded), so tests load plugins exactly as the host does. */
static host_registry *test_registry(void) {
    static host_registry *reg;
    if (!reg) {
        const char *dirs[] = {ct_test_plugin_dir(), NULL};
        ct_error err = {.struct_size = sizeof err};
        reg = registry_open_dirs(dirs, &err);
        if (!reg) ct_test_fail(__FILE__, __LINE__, "registry: %s", err.message);
    }
    return reg;
}

const ct_plugin_desc *harness_load(const char *so_file) {
    /* <kind>_<name>.so, the build's naming: resolved by kind and name through the registry */
    char kind[32], name[256];
    const char *us = strchr(so_file, '_');
    size_t len = strlen(so_file);
    if (!us || (size_t)(us - so_file) >= sizeof kind || len < 4 ||
        strcmp(so_file + len - 3, ".so") || len - (size_t)(us - so_file) - 4 >= sizeof name) {
        ct_test_fail(__FILE__, __LINE__, "%s is not named <kind>_<name>.so", so_file);
        return NULL;
    }
    snprintf(kind, sizeof kind, "%.*s", (int)(us - so_file), so_file);
    snprintf(name, sizeof name, "%.*s", (int)(len - (size_t)(us - so_file) - 4), us + 1);
    host_registry *reg = test_registry();
    ct_error err = {.struct_size = sizeof err};
    const host_plugin *p = reg ? registry_resolve(reg, kind_from_name(kind), name, &err) : NULL;
    if (!p) {
        ct_test_fail(__FILE__, __LINE__, "cannot load %s: %s", so_file, err.message);
        return NULL;
    }
    return &p->desc;
}

static ct_host *new_host(ct_harness *h, int32_t rank, const char *name) {
    if (h->n_hosts == HARNESS_MAX) return &h->hosts[HARNESS_MAX - 1];
    ct_host *host = &h->hosts[h->n_hosts];
    hostapi_init(host, h->cfg, rank, name, &h->metrics[h->n_hosts++]);
    return host;
}

double harness_metric(ct_harness *h, const char *name, int64_t *count) {
    *count = 0;
    for (int32_t k = 0; k < h->n_hosts; k++) {
        const host_metric_table *t = &h->metrics[k];
        for (int32_t i = 0; i < t->n; i++)
            if (strcmp(t->items[i].name, name) == 0) {
                *count = t->items[i].count;
                return metrics_value(t, name);
            }
    }
    return NAN;
}

ct_create_args harness_args_rank(ct_harness *h, const char *section, int32_t rank,
                                 int32_t world) {
    ct_create_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.api = hostapi_table();
    a.host = new_host(h, rank, section);
    a.section = section;
    a.rank = rank;
    a.world_size = world;
    a.device = h->device;
    a.seed = 1234;
    return a;
}

int32_t harness_validate(ct_harness *h, const char *so_file, const char *section,
                         ct_error *err) {
    const ct_plugin_desc *d = harness_load(so_file);
    if (!d) return ct_error_set(err, CT_ERR_IO, "cannot load %s", so_file);
    return config_validate_section(h->cfg, section, d->params, d->param_struct_size, d->name,
                                   NULL, err);
}

static int32_t create_raw(ct_harness *h, const char *so_file, const char *section,
                          ct_create_args *args, ct_harness_plugin *out, ct_error *err) {
    const ct_plugin_desc *d = harness_load(so_file);
    if (!d) return ct_error_set(err, CT_ERR_IO, "cannot load %s", so_file);
    int32_t rc = config_validate_section(h->cfg, section, d->params, d->param_struct_size,
                                         d->name, NULL, err);
    if (rc != CT_OK) return rc;
    contract_lifecycle vt = contract_lifecycle_of(d->kind, d->vtable);
    void *self = vt.create(args, err);
    if (!self) return err->code ? err->code : CT_ERR_INTERNAL;
    if (h->n_made == HARNESS_MAX) return ct_error_set(err, CT_ERR_NOMEM, "harness full");
    ct_harness_plugin p = {d, d->vtable, self};
    h->made[h->n_made++] = p;
    if (out) *out = p;
    return CT_OK;
}

ct_device_ref harness_device(ct_harness *h) {
    if (!h->device.vt) {
        ct_create_args a = harness_args_rank(h, "device", 0, 1);
        ct_harness_plugin p;
        ct_error err = {.struct_size = sizeof err};
        if (create_raw(h, "device_cpu.so", "device", &a, &p, &err) == CT_OK) {
            h->device.vt = p.vt;
            h->device.self = p.self;
            h->device.type = CT_DEVICE_CPU;
        } else {
            ct_test_fail(__FILE__, __LINE__, "device_cpu: %s", err.message);
        }
    }
    return h->device;
}

static ct_comm_ref harness_comm(ct_harness *h) {
    if (!h->comm.vt) {
        ct_create_args a = harness_args_rank(h, "comm", 0, 1);
        a.device = harness_device(h);
        ct_harness_plugin p;
        ct_error err = {.struct_size = sizeof err};
        if (create_raw(h, "comm_local.so", "comm", &a, &p, &err) == CT_OK) {
            h->comm.vt = p.vt;
            h->comm.self = p.self;
            h->comm.rank = 0;
            h->comm.world_size = 1;
        } else {
            ct_test_fail(__FILE__, __LINE__, "comm_local: %s", err.message);
        }
    }
    return h->comm;
}

ct_create_args harness_args(ct_harness *h, const char *section) {
    ct_create_args a = harness_args_rank(h, section, 0, 1);
    a.device = harness_device(h);
    a.comm = harness_comm(h);
    return a;
}

int32_t harness_create(ct_harness *h, const char *so_file, const char *section,
                       ct_harness_plugin *out, ct_error *err) {
    const ct_plugin_desc *d = harness_load(so_file);
    if (!d) return ct_error_set(err, CT_ERR_IO, "cannot load %s", so_file);
    ct_create_args a;
    if (d->kind == CT_KIND_DEVICE) a = harness_args_rank(h, section, 0, 1);
    else if (d->kind == CT_KIND_COMM) {
        a = harness_args_rank(h, section, 0, 1);
        a.device = harness_device(h);
    } else a = harness_args(h, section);
    return create_raw(h, so_file, section, &a, out, err);
}
