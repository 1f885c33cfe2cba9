/* registry.h — finding and loading plugins: the search path, ABI checks, host-owned
 * zero-extended copies of each plugin's descriptor, vtable and parameter schema.
 * Not for: deciding which plugin a section uses (wiring.h) or creating instances (rank.h).
 */
#ifndef CTRAIN_HOST_REGISTRY_H
#define CTRAIN_HOST_REGISTRY_H

#include <ctrain/ctrain.h>

/* One loaded plugin. Everything is owned by the registry and lives until registry_close();
 * the .so is never unloaded, not even by registry_close (strings in desc point into it). */
typedef struct ct_plugin {
    const char          *path;    /* the .so file, as found ("build/plugins/loss_ce.so") */
    ct_plugin_desc       desc;    /* zero-extended copy of the plugin's descriptor; desc.params
                                     and desc.vtable still point at the plugin's own arrays */
    const void          *vtable;  /* zero-extended host copy of the kind's vtable, our sizeof
                                     (ct_model_vtable, ...); struct_size is the plugin's */
    const ct_param_spec *params;  /* converted to our sizeof(ct_param_spec), ended by
                                     CT_PARAM_END; never NULL */
    int32_t              n_params;
} ct_plugin;

typedef struct ct_registry ct_registry;

/* Scan the search path: (a) <dir of the ctrain executable>/plugins, (b) <that dir>/../lib/
 * ctrain/plugins, (c) each folder of $CTRAIN_PLUGIN_PATH (colon separated), in that order.
 * Files that fail to load are remembered as problems (listed by `ctrain plugins`), not errors.
 * NULL only when out of memory. */
ct_registry *registry_open(ct_error *err);

/* The same over an explicit list of folders (NULL-terminated), for tests. */
ct_registry *registry_open_dirs(const char *const *dirs, ct_error *err);

void registry_close(ct_registry *reg);

/* The plugin of `kind` called `name_or_path`. A value that contains '/' or ends in ".so"
 * names a file (loaded now if it is not loaded yet; a bare "x.so" is looked up in the search
 * folders first, then the current directory). Errors (CT_ERR_INVALID, message without a
 * file:line prefix, the caller adds it): an unknown name lists the available plugins of the
 * kind; a plugin of another kind says so ("'ce' is a loss plugin; [model] needs a model
 * plugin"); a file that fails to load or is not a compatible plugin says why. */
const ct_plugin *registry_resolve(ct_registry *reg, int32_t kind, const char *name_or_path,
                                  ct_error *err);

/* Loaded plugins in search order (first of each kind+name only), sorted by kind then name. */
int32_t registry_count(const ct_registry *reg);
const ct_plugin *registry_at(const ct_registry *reg, int32_t i);

/* Plugins hidden by an earlier one of the same kind and name. */
int32_t registry_shadowed_count(const ct_registry *reg);
const ct_plugin *registry_shadowed_at(const ct_registry *reg, int32_t i);

/* Files of the search folders that could not be used: path and a one-line reason. */
int32_t registry_problem_count(const ct_registry *reg);
const char *registry_problem_path(const ct_registry *reg, int32_t i);
const char *registry_problem_message(const ct_registry *reg, int32_t i);

/* The folders searched, in order (existing or not). */
int32_t registry_dir_count(const ct_registry *reg);
const char *registry_dir_at(const ct_registry *reg, int32_t i);

/* "model", "loss", ... for a ct_kind; "?" for another value. */
const char *kind_name(int32_t kind);
/* The ct_kind named `name`, or 0. */
int32_t kind_from_name(const char *name);

#endif /* CTRAIN_HOST_REGISTRY_H */
