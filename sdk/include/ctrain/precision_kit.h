/* precision_kit.h — header-only helpers for writing a precision plugin: the grad_accum_dtype
 * key the bf16 policies share, filling a policy, the comm's own SUM collectives (the fallback of
 * a custom reduction hook) and its stochastic-rounding ones (ABI 1.5), and grow-only device
 * scratch bound to one rank's device. The built-in precision plugins use it; a third-party
 * policy gets the same key, defaults and messages by including it. Not part of the ABI: nothing
 * here crosses the plugin boundary, and it keeps no state.
 *
 * `who` arguments start error messages and name the plugin: "precision bf16_avg".
 */
#ifndef CTRAIN_PRECISION_KIT_H
#define CTRAIN_PRECISION_KIT_H

#include <ctrain/ctrain.h>

#include <string.h>

/* --- the grad_accum_dtype key -------------------------------------------------------------- */

/* Its choices; with CT_PKIT_PARAM_GRAD_ACCUM in a plugin's parameter schema. */
static const char *const ct_pkit_grad_accum_choices[] = {"bf16", "f32", NULL};

/* The schema entry: the local gradient buffer in bf16 (the compute dtype, as FSDP) by default,
 * or f32. */
#define CT_PKIT_PARAM_GRAD_ACCUM                                                                \
    CT_PARAM_ENUM("grad_accum_dtype", "bf16", ct_pkit_grad_accum_choices,                      \
                  "dtype of the local gradient buffer: bf16 = the compute dtype, as FSDP; f32 " \
                  "to accumulate micro-batches exactly")

/* *dtype = the key's value from the plugin's INI section: CT_DTYPE_F32 for "f32", else
 * CT_DTYPE_BF16 (the host has validated the choice). Returns the getter's error, *dtype
 * untouched then. */
static inline int32_t ct_pkit_get_grad_accum(const ct_create_args *args, int32_t *dtype,
                                             ct_error *err) {
    const char *accum = NULL;
    int32_t rc = args->api->get_string(args->host, args->section, "grad_accum_dtype", &accum, err);
    if (rc != CT_OK) return rc;
    *dtype = strcmp(accum, "f32") == 0 ? CT_DTYPE_F32 : CT_DTYPE_BF16;
    return CT_OK;
}

/* --- the policy ---------------------------------------------------------------------------- */

/* Fill *out as every built-in policy does: the given param (compute), reduce and grad
 * accumulation dtypes, f32 master weights and AdamW state, non-parameter buffers in the
 * compute dtype. out->struct_size is the caller's and stays as it is. */
static inline void ct_pkit_policy(ct_precision_policy *out, int32_t param_dtype,
                                  int32_t reduce_dtype, int32_t grad_accum_dtype) {
    out->param_dtype = param_dtype;
    out->reduce_dtype = reduce_dtype;
    out->master_dtype = CT_DTYPE_F32;
    out->grad_accum_dtype = grad_accum_dtype;
    out->buffer_dtype = param_dtype;
}

/* --- the comm's own collectives ------------------------------------------------------------- */

/* The comm's synchronous SUM reduce-scatter (send N*count, recv count) and all-reduce (send,
 * recv count; may be one buffer): what a reduction hook falls back to for a dtype or world
 * size it does not treat, and what it may build on. */
static inline int32_t ct_pkit_comm_reduce_scatter(ct_comm_ref comm, const void *send, void *recv,
                                                  uint64_t count, int32_t dtype, ct_error *err) {
    return comm.vt->reduce_scatter(comm.self, send, recv, count, dtype, CT_REDUCE_SUM, NULL, err);
}
static inline int32_t ct_pkit_comm_all_reduce(ct_comm_ref comm, const void *send, void *recv,
                                              uint64_t count, int32_t dtype, ct_error *err) {
    return comm.vt->all_reduce(comm.self, send, recv, count, dtype, CT_REDUCE_SUM, NULL, err);
}

/* The comm's stochastic-rounding bf16 SUM of ABI 1.5 (all_reduce_sr when all_reduce is 1, else
 * reduce_scatter_sr; same arguments), or NULL where the engine does not offer it (mpi, local,
 * or an engine built before 1.5): a policy that rounds stochastically then runs its own
 * reduction over send/recv. */
typedef int32_t (*ct_pkit_sr_fn)(void *self, const void *send, void *recv, uint64_t count,
                                 int32_t dtype, uint64_t stream, ct_error *err);
static inline ct_pkit_sr_fn ct_pkit_comm_sr(ct_comm_ref comm, int all_reduce) {
    if (all_reduce)
        return CT_HAS_MEMBER(comm.vt, ct_comm_vtable, all_reduce_sr) ? comm.vt->all_reduce_sr
                                                                      : NULL;
    return CT_HAS_MEMBER(comm.vt, ct_comm_vtable, reduce_scatter_sr) ? comm.vt->reduce_scatter_sr
                                                                      : NULL;
}

/* --- device scratch -------------------------------------------------------------------------- */

/* A plugin's scratch lives on the device of the first hook call: *bound = dev then. A later
 * call with another device is a wiring bug (one instance serves one rank): CT_ERR_INTERNAL. */
static inline int32_t ct_pkit_bind_device(ct_device_ref *bound, ct_device_ref dev,
                                          const char *who, ct_error *err) {
    if (!bound->vt) *bound = dev;
    if (bound->self != dev.self)
        return ct_error_set(err, CT_ERR_INTERNAL, "%s: called with another device than before"
                            " ---> one instance serves one rank", who);
    return CT_OK;
}

/* *buf holds at least n elements of dtype on dev: when *cap (elements) is smaller it is freed
 * and allocated anew (contents lost, *cap = n); never shrinks. On error *buf is NULL, *cap 0
 * and err names `what` (e.g. "all_to_all buffer") and the bytes. */
static inline int32_t ct_pkit_ensure(ct_device_ref dev, void **buf, uint64_t *cap, uint64_t n,
                                     int32_t dtype, const char *who, const char *what,
                                     ct_error *err) {
    if (n <= *cap) return CT_OK;
    dev.vt->free_mem(dev.self, *buf);
    *cap = 0;
    uint64_t bytes = n * ct_dtype_size(dtype); /* n > *cap >= 0: never 0 */
    *buf = dev.vt->alloc(dev.self, bytes, err);
    if (!*buf)
        return ct_error_set(err, CT_ERR_NOMEM, "%s: cannot allocate %llu bytes for the %s"
                            " ---> use a smaller model or more ranks", who,
                            (unsigned long long)bytes, what);
    *cap = n;
    return CT_OK;
}

#endif /* CTRAIN_PRECISION_KIT_H */
