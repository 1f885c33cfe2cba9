/* wiring.h — which plugin owns which INI section, and the set-up that `validate` and `train`
 * share: read CONFIG.ini and --set overrides, validate every section (the host's own and each
 * plugin's, defaults filled), resolve every plugin.
 * Not for: the host's schema tables (host_schema.h) or loading .so files (registry.h).
 */
#ifndef CTRAIN_HOST_WIRING_H
#define CTRAIN_HOST_WIRING_H

#include "config/config.h"
#include "plugin/registry.h"

#define HOST_WIRING_MAX_LOSS 16

/* The plugins of a run. Pointers are owned by the registry. */
typedef struct host_wiring {
    const host_plugin *model, *strategy, *precision, *comm, *device;
    const host_plugin *optimizer;                /* ABI 1.7; keys in optimizer_section */
    char             optimizer_section[80];      /* "optimizer.<plugin name>" */
    int32_t          n_loss;
    const host_plugin *loss[HOST_WIRING_MAX_LOSS];
    char             loss_section[HOST_WIRING_MAX_LOSS][64]; /* "loss.<plugin name>" */
} host_wiring;

/* Validate every section of cfg and resolve every plugin into *w:
 *   - host sections [run] [data] [optim] against the host schema (out_dir defaults to
 *     runs/<name>);
 *   - [model] [strategy] [precision] [comm] [device]: the host key (plugin / type, and comm's
 *     world_size) picks the plugin, then the section is validated against the host keys plus the
 *     plugin's schema;
 *   - [loss] plugins = a, b: term NAME's keys live in [loss.NAME], validated against its schema;
 *   - [optimizer] plugin = NAME (default adamw): its keys live in [optimizer.NAME]; a section
 *     [optimizer.OTHER] of a plugin not chosen is inert (kept, not validated, listed by
 *     wiring_inert);
 *   - any other section is an error naming the nearest known section.
 * Afterwards every key a plugin reads exists (defaults filled, origin "default").
 * A plugin value with a '/' that is not absolute names a file relative to the folder of the
 * INI file it is written in; the same value given with --set is relative to the current
 * directory. [comm] plugin = auto is launcher_auto_comm's choice (launcher.h) for the process's
 * launcher and [device] type. Errors are CT_ERR_INVALID with "FILE:LINE: [section] ...". */
int32_t wiring_resolve(host_config *cfg, host_registry *reg, host_wiring *w, ct_error *err);

/* The comm plugin name [comm] plugin = auto stands for, given [device] type of cfg, world_size
 * and the launcher read by session_configure (launcher_current). */
const char *wiring_auto_comm(const host_config *cfg, int64_t world_size);

/* The [optimizer.NAME] sections of cfg that configure a plugin other than the chosen one,
 * printed one per line ("inert: [optimizer.sgd] (the optimizer is adamw)"); none: nothing. */
void wiring_print_inert(const host_config *cfg, const host_wiring *w, FILE *out);

/* Print the chosen plugins ("model      gpt 1.0.0  build/plugins/model_gpt.so"), one a line. */
void wiring_print(const host_wiring *w, FILE *out);

#endif /* CTRAIN_HOST_WIRING_H */
