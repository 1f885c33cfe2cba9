/* hostapi.h — the services the host hands every plugin instance (ct_host_api): logging,
 * host memory, the resolved configuration, metric reports. One ct_host per plugin instance,
 * so log lines name the rank and the plugin. Not for: anything a plugin could change in the
 * host beyond its own metric reports. */
#ifndef CTRAIN_HOST_HOSTAPI_H
#define CTRAIN_HOST_HOSTAPI_H

#include "base/cores.h"
#include "config/config.h"
#include "io/metrics.h"

#include <ctrain/ctrain.h>

struct ct_host {
    const host_config *cfg;     /* resolved configuration (read-only for plugins) */
    int32_t          rank;
    char             name[64]; /* plugin name for log lines */
    host_metric_table *metrics; /* this rank's table for the current log step; may be NULL */
    int32_t          verbose; /* log CT_LOG_DEBUG lines too */
};

/* Fill *h. cfg and metrics must outlive every plugin instance that receives h. */
void hostapi_init(ct_host *h, const host_config *cfg, int32_t rank, const char *name,
                  host_metric_table *metrics);

/* The automatic thread count per rank of this process's ranks under cfg (the host key
 * [device] auto_threads; cores.h): the launcher's reading, and [comm] world_size ranks in this
 * process when no launcher started several. */
cores_choice hostapi_auto_threads(const host_config *cfg);

/* The function table (static storage). */
const ct_host_api *hostapi_table(void);

#endif /* CTRAIN_HOST_HOSTAPI_H */
