/* hostapi.c — ct_host_api over the resolved configuration and the rank's metric table.
 * Every function is safe from the rank thread that owns the instance; none keeps global state. */
#include "plugin/hostapi.h"

#include "base/cores.h"
#include "base/launcher.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hostapi_init(ct_host *h, const host_config *cfg, int32_t rank, const char *name,
                  host_metric_table *metrics) {
    memset(h, 0, sizeof *h);
    h->cfg = cfg;
    h->rank = rank;
    h->metrics = metrics;
    snprintf(h->name, sizeof h->name, "%s", name ? name : "?");
    h->verbose = getenv("CTRAIN_DEBUG") != NULL;
}

static void api_log(ct_host *h, int32_t level, const char *msg) {
    static const char *const names[] = {"error", "warning", "info", "debug"};
    if (level == CT_LOG_DEBUG && !h->verbose) return;
    const char *lv = level >= 0 && level <= 3 ? names[level] : "log";
    if (level <= CT_LOG_WARN || h->rank == 0)
        fprintf(stderr, "[rank %d] %s: %s: %s\n", h->rank, h->name, lv, msg);
}

static void *api_alloc(ct_host *h, uint64_t bytes) {
    (void)h;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    memset(p, 0, bytes);
    return p;
}

static void api_free(ct_host *h, void *p) {
    (void)h;
    free(p);
}

static int32_t api_get_bool(ct_host *h, const char *s, const char *k, int32_t *o, ct_error *e) {
    return config_get_bool(h->cfg, s, k, o, e);
}
cores_choice hostapi_auto_threads(const host_config *cfg) {
    const host_launch *l = launcher_current();
    int64_t in_process = 1; /* an in-process engine's ranks share this process's CPUs */
    if (l->world <= 1 && config_get(cfg, "comm", "world_size"))
        config_get_int(cfg, "comm", "world_size", &in_process, NULL);
    return cores_auto(l, in_process > 0 && in_process < INT32_MAX ? (int32_t)in_process : 1);
}

static int32_t api_get_int(ct_host *h, const char *s, const char *k, int64_t *o, ct_error *e) {
    /* [device] local_rank: the launcher's local rank (ctrain.h), not an INI key */
    if (s && k && !strcmp(s, "device") && !strcmp(k, "local_rank")) {
        const host_launch *l = launcher_current();
        *o = l->world > 1 ? l->local_rank : h->rank;
        return CT_OK;
    }
    /* [device] auto_threads: the host's thread count per rank for [device] threads = 0
     * (cores.h), the same for every CPU plugin of the rank */
    if (s && k && !strcmp(s, "device") && !strcmp(k, "auto_threads")) {
        *o = hostapi_auto_threads(h->cfg).threads;
        return CT_OK;
    }
    /* [comm] master_port: a torchrun-style launch's MASTER_PORT (launcher_master) */
    if (s && k && !strcmp(s, "comm") && !strcmp(k, "master_port"))
        return launcher_master(launcher_current(), NULL, o, e);
    return config_get_int(h->cfg, s, k, o, e);
}
static int32_t api_get_float(ct_host *h, const char *s, const char *k, double *o, ct_error *e) {
    return config_get_float(h->cfg, s, k, o, e);
}
static int32_t api_get_string(ct_host *h, const char *s, const char *k, const char **o,
                              ct_error *e) {
    /* [comm] master_addr: a torchrun-style launch's MASTER_ADDR (launcher_master) */
    if (s && k && !strcmp(s, "comm") && !strcmp(k, "master_addr"))
        return launcher_master(launcher_current(), o, NULL, e);
    return config_get_string(h->cfg, s, k, o, e);
}

static void api_metric(ct_host *h, const char *name, double value, int32_t reduce) {
    if (h->metrics) metrics_add(h->metrics, name, value, reduce);
}

static const ct_host_api table = {
    .struct_size = sizeof(ct_host_api),
    .log = api_log,
    .alloc = api_alloc,
    .free_mem = api_free,
    .get_bool = api_get_bool,
    .get_int = api_get_int,
    .get_float = api_get_float,
    .get_string = api_get_string,
    .metric = api_metric,
};

const ct_host_api *hostapi_table(void) { return &table; }
