/* precision_kit.h — header-only helpers for writing a precision plugin: the grad_accum_dtype
 * key the bf16 policies share, filling a policy, the bf16 master weights' update rules and
 * their `update` key (ABI 1.7), the comm's own SUM collectives (the fallback of a custom
 * reduction hook) and its stochastic-rounding ones (ABI 1.5), grow-only device scratch bound
 * to one rank's device, and GradScaler's dynamic loss scale (ABI 1.7). The built-in precision
 * plugins use it; a third-party policy gets the same key, defaults and messages by including it. Not part of the ABI: nothing
 * here crosses the plugin boundary, and it keeps no state.
 *
 * `who` arguments start error messages and name the plugin: "precision bf16_avg".
 */
#ifndef CTRAIN_PRECISION_KIT_H
#define CTRAIN_PRECISION_KIT_H

#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include <math.h>
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

/* Is the run's [strategy] plugin ddp, by name or as a path to strategy_ddp.so? 0 when the
 * configuration has no [strategy] (a policy checked on its own, by check-plugin or a test).
 * What grad_accum_dtype = auto asks (amp, scaled_amp, bf16_master): f32 local gradients under
 * ddp, as PyTorch DDP's .grad under autocast; the compute dtype under the FSDP strategies. */
static inline int ct_pkit_under_ddp(const ct_create_args *args) {
    const char *name = NULL;
    ct_error ignored = {.struct_size = sizeof ignored};
    if (args->api->get_string(args->host, "strategy", "plugin", &name, &ignored) != CT_OK)
        return 0;
    const char *base = strrchr(name, '/');
    return !strcmp(name, "ddp") || (base && !strcmp(base + 1, "strategy_ddp.so"));
}

/* --- the policy ---------------------------------------------------------------------------- */

/* Fill *out as every built-in policy does: the given param (compute), reduce and grad
 * accumulation dtypes, f32 master weights and AdamW state (a bf16-master policy then sets
 * master_dtype and master_update), non-parameter buffers in the compute dtype. out->struct_size is the caller's and stays as it is. */
static inline void ct_pkit_policy(ct_precision_policy *out, int32_t param_dtype,
                                  int32_t reduce_dtype, int32_t grad_accum_dtype) {
    out->param_dtype = param_dtype;
    out->reduce_dtype = reduce_dtype;
    out->master_dtype = CT_DTYPE_F32;
    out->master_update = CT_MASTER_NEAREST; /* ignored for an f32 master */
    out->grad_accum_dtype = grad_accum_dtype;
    out->buffer_dtype = param_dtype;
}

/* --- low-precision master weights (ABI 1.7) ------------------------------------------------ */

/* The spellings of ct_master_update, by value (NULL-ended, for CT_PARAM_ENUM: the order of the
 * choices shown is ct_pkit_master_update_choices). */
static const char *const ct_pkit_master_update_names[] = {"nearest", "sr", "kahan", NULL};
static const char *const ct_pkit_master_update_choices[] = {"kahan", "sr", "nearest", NULL};

/* The schema entry of a bf16-master policy's `update` key. */
#define CT_PKIT_PARAM_MASTER_UPDATE                                                            \
    CT_PARAM_ENUM("update", "kahan", ct_pkit_master_update_choices,                           \
                  "how each step's f32 result is written back into the bf16 master weights: "  \
                  "kahan (a bf16 compensation buffer keeps what rounding lost, +2 bytes a "     \
                  "parameter), sr (stochastic rounding, deterministic per seed and step), "     \
                  "nearest (round to nearest even: small updates are lost)")

/* The name of a rule ("?" for an unknown value). */
static inline const char *ct_pkit_master_update_name(int32_t rule) {
    return rule >= 0 && rule <= CT_MASTER_KAHAN ? ct_pkit_master_update_names[rule] : "?";
}

/* *rule = the `update` key of the plugin's section as a ct_master_update. */
static inline int32_t ct_pkit_get_master_update(const ct_create_args *args, int32_t *rule,
                                                ct_error *err) {
    const char *name = NULL;
    int32_t rc = args->api->get_string(args->host, args->section, "update", &name, err);
    if (rc != CT_OK) return rc;
    for (int32_t i = 0; ct_pkit_master_update_names[i]; i++)
        if (name && strcmp(name, ct_pkit_master_update_names[i]) == 0) {
            *rule = i;
            return CT_OK;
        }
    return ct_error_set(err, CT_ERR_INVALID, "[%s] update = %s is not known ---> use kahan, sr "
                        "or nearest", args->section, name ? name : "(unset)");
}

/* Whether a policy's master dtype and rule are ones the host can hold: an f32 master (any rule:
 * ignored), or a bf16 master with a known rule. */
static inline int ct_pkit_master_ok(const ct_precision_policy *pol) {
    if (pol->master_dtype == CT_DTYPE_F32) return 1;
    return pol->master_dtype == CT_DTYPE_BF16 && pol->master_update >= CT_MASTER_NEAREST &&
           pol->master_update <= CT_MASTER_KAHAN;
}

/* Bytes per parameter of the master's compensation buffer: 2 for a bf16 master with kahan, 0
 * otherwise. */
static inline uint32_t ct_pkit_master_comp_bytes(const ct_precision_policy *pol) {
    return pol->master_dtype == CT_DTYPE_BF16 && pol->master_update == CT_MASTER_KAHAN ? 2 : 0;
}

/* Write the optimizer's f32 results x[0..n) back into n bf16 master weights w with `rule`
 * (host memory, element i at index first + i of unit `unit`'s flat buffer, at 1-based step
 * `step` of a run of seed `seed`): c, the bf16 compensation buffer, for CT_MASTER_KAHAN (NULL
 * otherwise). The one loop the host's optimizer driver and check-plugin both run. */
static inline void ct_pkit_master_write_bf16(int32_t rule, uint16_t *w, uint16_t *c,
                                             const float *x, uint64_t n, uint64_t seed,
                                             int64_t step, uint32_t unit, uint64_t first) {
    if (rule == CT_MASTER_KAHAN)
        for (uint64_t i = 0; i < n; i++) ct_bf16_kahan_write(&w[i], &c[i], x[i]);
    else if (rule == CT_MASTER_SR)
        for (uint64_t i = 0; i < n; i++)
            w[i] = ct_bf16_from_f32_sr(x[i], ct_master_sr_bits(seed, step, unit, first + i));
    else
        for (uint64_t i = 0; i < n; i++) w[i] = ct_bf16_from_f32(x[i]);
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

/* --- a dynamic loss scale (ABI 1.7's loss_scale / after_reduce / state_save / state_load) ---
 * torch.amp.GradScaler's rule: the scale S is an f32 value; a step whose gradients overflowed
 * is skipped and S is multiplied by backoff_factor; growth_interval clean steps in a row
 * multiply it by growth_factor, kept only when the product is a finite f32. The keys are
 * CT_PKIT_PARAMS_SCALER's; the state is 16 bytes. Include <math.h> and <string.h> before. */

typedef struct ct_pkit_scaler {
    float   scale;          /* GradScaler._scale (f32) */
    int32_t growth_tracker; /* GradScaler._growth_tracker: clean steps since the last change */
    float   growth_factor, backoff_factor;
    int32_t growth_interval;
} ct_pkit_scaler;

#define CT_PKIT_SCALER_MAGIC 0x53414d50u /* "SAMP": the saved state's first word */

/* The schema entries of the scaler's keys (GradScaler's defaults). */
#define CT_PKIT_PARAMS_SCALER                                                                  \
    CT_PARAM_FLOAT_X("init_scale", "65536", 0, 3.4028234663852886e38, CT_PARAM_MIN_EXCLUSIVE, \
                     "the first loss scale (GradScaler init_scale, 2^16); an f32 value"),      \
    CT_PARAM_FLOAT_X("growth_factor", "2", 1, 1e6, CT_PARAM_MIN_EXCLUSIVE,                    \
                     "the scale is multiplied by it after growth_interval clean steps"),      \
    CT_PARAM_FLOAT_X("backoff_factor", "0.5", 0, 1,                                           \
                     CT_PARAM_MIN_EXCLUSIVE | CT_PARAM_MAX_EXCLUSIVE,                          \
                     "the scale is multiplied by it on a step with non-finite gradients "     \
                     "(which is skipped)"),                                                    \
    CT_PARAM_INT("growth_interval", "2000", 1, 2147483647,                                    \
                 "clean steps in a row before the scale grows")

/* *s from the plugin's section (the keys of CT_PKIT_PARAMS_SCALER). */
static inline int32_t ct_pkit_scaler_read(const ct_create_args *args, ct_pkit_scaler *s,
                                          ct_error *err) {
    double init = 0, growth = 0, backoff = 0;
    int64_t interval = 0;
    const ct_host_api *api = args->api;
    int32_t rc = api->get_float(args->host, args->section, "init_scale", &init, err);
    if (rc == CT_OK) rc = api->get_float(args->host, args->section, "growth_factor", &growth, err);
    if (rc == CT_OK) rc = api->get_float(args->host, args->section, "backoff_factor", &backoff, err);
    if (rc == CT_OK) rc = api->get_int(args->host, args->section, "growth_interval", &interval, err);
    if (rc != CT_OK) return rc;
    s->scale = (float)init;
    s->growth_tracker = 0;
    s->growth_factor = (float)growth;
    s->backoff_factor = (float)backoff;
    s->growth_interval = (int32_t)interval;
    return CT_OK;
}

/* GradScaler.update (_amp_update_scale_) with the all-ranks verdict; *skip = 1 on an overflow
 * (GradScaler.step skips the optimizer). */
static inline void ct_pkit_scaler_update(ct_pkit_scaler *s, int32_t grads_finite, int32_t *skip) {
    if (!grads_finite) {
        s->scale = s->scale * s->backoff_factor;
        s->growth_tracker = 0;
        *skip = 1;
        return;
    }
    int32_t successful = s->growth_tracker + 1;
    if (successful == s->growth_interval) {
        float grown = s->scale * s->growth_factor;
        if (isfinite(grown)) s->scale = grown;
        s->growth_tracker = 0;
    } else {
        s->growth_tracker = successful;
    }
    *skip = 0;
}

/* 16 bytes: the magic, the f32 scale's bits, the growth tracker, 0 (host byte order). `who`
 * starts the messages ("precision scaled_amp"). */
static inline int32_t ct_pkit_scaler_save(const ct_pkit_scaler *s, void *buf, uint64_t cap,
                                          uint64_t *size, const char *who, ct_error *err) {
    uint32_t w[4] = {CT_PKIT_SCALER_MAGIC, 0, (uint32_t)s->growth_tracker, 0};
    if (cap < sizeof w)
        return ct_error_set(err, CT_ERR_INVALID, "%s: state needs %zu bytes", who, sizeof w);
    memcpy(&w[1], &s->scale, 4);
    memcpy(buf, w, sizeof w);
    *size = sizeof w;
    return CT_OK;
}

static inline int32_t ct_pkit_scaler_load(ct_pkit_scaler *s, const void *buf, uint64_t size,
                                          const char *who, ct_error *err) {
    uint32_t w[4];
    if (size != sizeof w)
        return ct_error_set(err, CT_ERR_INVALID, "%s: saved state is %llu bytes, not 16 ---> "
                            "resume with the policy that saved it", who,
                            (unsigned long long)size);
    memcpy(w, buf, sizeof w);
    float scale;
    memcpy(&scale, &w[1], 4);
    if (w[0] != CT_PKIT_SCALER_MAGIC || !(isfinite(scale) && scale > 0) || (int32_t)w[2] < 0)
        return ct_error_set(err, CT_ERR_INVALID, "%s: the saved state is not a loss scaler's "
                            "(magic, scale or counter) ---> resume with the policy that saved it",
                            who);
    s->scale = scale;
    s->growth_tracker = (int32_t)w[2];
    return CT_OK;
}

#endif /* CTRAIN_PRECISION_KIT_H */
