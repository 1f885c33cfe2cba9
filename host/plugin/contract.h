/* contract.h — what a plugin must provide before the host loads it: per kind, the vtable
 * members that are REQUIRED (ctrain.h marks each member), and a parameter schema that agrees
 * with itself (unique keys, defaults that the schema itself accepts, enums with choices).
 * Not for: finding or opening .so files (registry.h) or exercising a plugin (check-plugin).
 */
#ifndef CTRAIN_HOST_CONTRACT_H
#define CTRAIN_HOST_CONTRACT_H

#include <ctrain/ctrain.h>

/* The first REQUIRED member of kind's vtable that is NULL in `vtable` (the host's zero-extended
 * copy, so a member beyond the plugin's struct_size reads NULL too), or NULL when every one is
 * present; *offset (if non-NULL) gets the member's byte offset, so the caller can tell "NULL"
 * from "beyond struct_size". Also reports world_destroy when a comm plugin has world_create but
 * not it. */
const char *contract_missing_member(int32_t kind, const void *vtable, size_t *offset);

/* Check the schema specs[0..n) (already converted to this build's ct_param_spec): keys
 * [a-z0-9_]+, known types, ENUM choices non-empty, no key twice, and every default accepted
 * by the same validation an INI value gets (type, range, exclusive ends, choices). `who`
 * starts the message ("loss ls_ce (/path/loss_ls_ce.so)"). CT_OK, or CT_ERR_INVALID naming
 * the key and what to fix. */
int32_t contract_check_schema(const ct_param_spec *specs, int32_t n, const char *who,
                              ct_error *err);

/* A plugin's create and destroy, whatever its kind: every vtable has them right after
 * struct_size except comm's, which has world_create and world_destroy first. This is the one
 * place that knows the two layouts. Either may be NULL for a vtable that was not checked. */
typedef struct contract_lifecycle {
    void *(*create)(const ct_create_args *args, ct_error *err);
    void (*destroy)(void *self);
} contract_lifecycle;
contract_lifecycle contract_lifecycle_of(int32_t kind, const void *vtable);

/* After a plugin call that returned rc: when rc is not CT_OK and the plugin left err's message
 * empty, fill it naming the plugin (kind, name, file), the member called and the status, so no
 * error reaches the user as an empty line. Returns rc. */
struct host_plugin;
int32_t contract_name_silent_error(int32_t rc, ct_error *err, const struct host_plugin *p,
                                   const char *member);

/* After create() of plugin p returned NULL: the error to report. A code and a message: as set.
 * A code without a message: named as contract_name_silent_error does. Neither: "KIND NAME
 * (FILE): create returned NULL and set no error (no code, no message) ---> ...", with code
 * CT_ERR_INVALID (not a code the plugin never set). Returns err->code. */
int32_t contract_name_failed_create(ct_error *err, const struct host_plugin *p);

/* "CT_ERR_INVALID", ... for a ct_status; "an unknown status" otherwise. */
const char *contract_status_name(int32_t rc);

#endif /* CTRAIN_HOST_CONTRACT_H */
