/* plugin.h — one loaded plugin as the host holds it (the registry makes them; the contract,
 * the call records and everything that calls a plugin read them) and the names of the kinds.
 * Not for: finding or loading plugins (registry.h) or what a kind must provide (contract.h).
 */
#ifndef CTRAIN_HOST_PLUGIN_H
#define CTRAIN_HOST_PLUGIN_H

#include <ctrain/ctrain.h>

/* One loaded plugin. Everything is owned by the registry and lives until registry_close();
 * the .so is never unloaded, not even by registry_close (strings in desc point into it). */
typedef struct host_plugin {
    const char          *path;    /* the .so file, as found ("build/plugins/loss_ce.so") */
    ct_plugin_desc       desc;    /* zero-extended copy of the plugin's descriptor; desc.params
                                     and desc.vtable still point at the plugin's own arrays */
    const void          *vtable;  /* zero-extended host copy of the kind's vtable, our sizeof
                                     (ct_model_vtable, ...); struct_size is the plugin's */
    const ct_param_spec *params;  /* converted to our sizeof(ct_param_spec), ended by
                                     CT_PARAM_END; never NULL */
    int32_t              n_params;
} host_plugin;

/* The kinds are 1 .. N_KINDS (ct_kind). */
#define N_KINDS 7

/* "model", "loss", ... for a ct_kind; "?" for another value. */
const char *kind_name(int32_t kind);
/* The ct_kind named `name`, or 0. */
int32_t kind_from_name(const char *name);

#endif /* CTRAIN_HOST_PLUGIN_H */
