/* wiring.h — which plugin owns which INI section, and the set-up that `validate` and `train`
 * share: read CONFIG.ini and --set overrides, validate every section (the host's own and each
 * plugin's, defaults filled), resolve every plugin.
 * Not for: the host's schema tables (host_schema.h) or loading .so files (registry.h).
 */
#ifndef CTRAIN_HOST_WIRING_H
#define CTRAIN_HOST_WIRING_H

#include "config/config.h"
#include "plugin/registry.h"

#define HOST_WIRING_MAX_LOSS  16
#define HOST_WIRING_MAX_INERT 32
#define HOST_WIRING_KINDS     16 /* own_section is indexed by ct_kind */

/* Where [model] init_from leads when it names a ctrain checkpoint or run folder rather than a
 * weights file the weights/ layer reads (import.h). The run/ layer implements it
 * (run/init_ckpt.h's init_ckpt_source); the callers of wiring_resolve hand it over and the wiring
 * keeps it for the ranks, so neither plugin/ nor run/rank.c includes run/init_ckpt.h, which
 * reads checkpoints and so sits above them. Every member is required. */
typedef struct host_model_source {
    /* Before [model] is validated: a run folder becomes its newest checkpoint; with
     * from_config, the keys that checkpoint's (or a Hugging Face config.json's) [model] sets. */
    int32_t (*settle)(host_config *cfg, ct_error *err);
    int (*is_checkpoint)(const char *init_from); /* nonzero: open_source etc. read it */
    /* the weights unit by unit (src: the source's own handle, closed with close_source) */
    int32_t (*open_source)(const char *path, const host_config *cfg, const ct_model_desc *d,
                           int say, void **src, ct_error *err);
    int32_t (*unit)(void *src, uint32_t u, float *full, ct_error *err);
    void (*close_source)(void *src);
} host_model_source;

/* The plugins of a run. Pointers are owned by the registry. */
typedef struct host_wiring {
    const host_plugin *model, *strategy, *precision, *comm, *device;
    const host_plugin *optimizer; /* ABI 1.7; its keys in own_section[CT_KIND_OPTIMIZER] */
    int32_t          n_loss;
    const host_plugin *loss[HOST_WIRING_MAX_LOSS];
    char             loss_section[HOST_WIRING_MAX_LOSS][64]; /* "loss.<plugin name>" */
    /* [KIND.NAME] of the selected plugin of each kind with one plugin ("precision.amp"),
     * indexed by ct_kind; "" for the others. [KIND] aliases it (config_alias). */
    char             own_section[HOST_WIRING_KINDS][CONFIG_NAME_MAX];
    /* sections of plugins that are not selected ([precision.amp] under plugin = fp32, [loss.X]
     * of a term [loss] plugins does not list) and [data.X] of a dataset [data] train's mixture
     * does not list (mixture.h), with why: read by nobody */
    int32_t          n_inert;
    char             inert[HOST_WIRING_MAX_INERT][CONFIG_NAME_MAX];
    char             inert_why[HOST_WIRING_MAX_INERT][160];
    const host_model_source *model_source; /* what wiring_resolve was handed; static storage */
} host_wiring;

/* Validate every section of cfg and resolve every plugin into *w:
 *   - host sections [run] [data] [optim] against the host schema (out_dir defaults to
 *     runs/<name>);
 *   - [model] [strategy] [precision] [comm] [device] [optimizer] (any kind with one plugin): the
 *     host key
 *     (plugin / type) picks plugin NAME; [KIND] holds the host's keys (plugin, comm's
 *     world_size, ...), validated against the host schema; NAME's own keys live in
 *     [KIND.NAME], validated against its schema, and [KIND] aliases [KIND.NAME]
 *     (config_alias), so config_get(cfg, "precision", key) and a plugin reading its
 *     ct_create_args.section ("precision") find them;
 *   - a key of NAME written flat in [KIND] (the layout before sections per plugin) is moved to
 *     [KIND.NAME] with a note on stderr; a flat key of another plugin of the kind (found by
 *     scanning the search path) is inert, with a note, and kept in [KIND.THAT] when one plugin
 *     owns it; a key no plugin of the kind knows is an error with the nearest key;
 *   - [loss] plugins = a, b: term NAME's keys live in [loss.NAME], validated against its schema;
 *   - [KIND.OTHER] of a plugin not selected (a term not listed) is inert: recorded in w->inert,
 *     never validated;
 *   - any other section is an error naming the nearest known section.
 * Afterwards every key a plugin reads exists (defaults filled, origin "default").
 * A plugin value with a '/' that is not absolute names a file relative to the folder of the
 * INI file it is written in; the same value given with --set is relative to the current
 * directory. [comm] plugin = auto is launcher_auto_comm's choice (launcher.h) for the process's
 * launcher and [device] type. Errors are CT_ERR_INVALID with "FILE:LINE: [section] ...". */
int32_t wiring_resolve(host_config *cfg, host_registry *reg, host_wiring *w,
                       const host_model_source *model_source, ct_error *err);

/* The comm plugin name [comm] plugin = auto stands for, given [device] type of cfg, world_size
 * and the launcher read by session_configure (launcher_current). */
const char *wiring_auto_comm(const host_config *cfg, int64_t world_size);

/* Print the chosen plugins ("model      gpt 1.0.0  build/plugins/model_gpt.so"), one a line. */
void wiring_print(const host_wiring *w, FILE *out);

#endif /* CTRAIN_HOST_WIRING_H */
