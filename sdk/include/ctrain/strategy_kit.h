/* strategy_kit.h — header-only helpers for writing a strategy plugin: FSDP1's pre/post divide
 * factors, flat-buffer padding and shard arithmetic, typed device buffers, the checks and
 * errors every strategy's create/setup/per-unit calls share, a replicated unit's bookkeeping,
 * and the reduction dispatch (the precision plugin's hooks when it has them, the comm's own
 * collective otherwise). The built-in ddp, no_shard and full_shard use it; a third-party
 * strategy (shard_grad_op, hybrid_shard, ...) gets the same arithmetic and messages by including
 * it. Not part of the ABI: nothing here crosses the plugin boundary, and it keeps no state.
 *
 * `who` arguments start error messages and name the plugin: "strategy no_shard".
 * Names: the kits are prefixed by kind — ct_skit_ (strategy), ct_pkit_ (precision_kit.h),
 * ct_lkit_ (loss_kit.h) — so `ct_` + one word stays the ABI of ctrain.h.
 */
#ifndef CTRAIN_STRATEGY_KIT_H
#define CTRAIN_STRATEGY_KIT_H

#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- arithmetic ------------------------------------------------------------------------ */

/* FSDP1's gradient pre-divide factor for N ranks (torch.distributed.fsdp, _get_gradient_
 * predivide_factor): f = 1; while N % f == 0 and N / f > f: f *= 2. The gradient is divided by
 * f before the SUM collective and by N / f after it, so neither the sum (overflow) nor the
 * addends (underflow) leave the low-precision range as easily as with one divide by N.
 * N = 1 -> 1, 2 -> 2, 3 -> 2, 4 -> 2, 6 -> 4, 8 -> 4, 16 -> 4, 32 -> 8, 64 -> 8. */
static inline int32_t ct_skit_predivide_factor(int32_t world_size) {
    int32_t f = 1;
    while (world_size % f == 0 && world_size / f > f) f *= 2;
    return f;
}

/* The post-divide factor that goes with it: N / f, as FSDP1 computes it in floating point
 * (an integer when N is a power of two; 1.5 for N = 3 or 6). */
static inline double ct_skit_postdivide_factor(int32_t world_size) {
    return (double)world_size / (double)ct_skit_predivide_factor(world_size);
}

/* How a strategy turns the ranks' gradients into their mean (the key grad_divide of the
 * built-in strategies): the divisor before the collective, the one after, and the collective's
 * op. With N ranks and FSDP1's factor f:
 *   fsdp1  x / f, SUM, / (N/f)      FSDP1 (torch.distributed.fsdp, FlatParameter)
 *   pre    x / N, SUM               DDP (its reducer divides the bucket before the all-reduce)
 *   post   SUM, / N                 FSDP2 with force_sum_reduction_for_comms (bf16/f32)
 *   avg    AVG                      FSDP2's default for bf16/f32 reduce dtypes: ncclAvg, every
 *                                   contribution premultiplied by the dtype's 1/N in the
 *                                   collective (CT_REDUCE_AVG, ABI 1.6), nothing divided */
typedef enum ct_skit_divide_mode {
    CT_SKIT_DIVIDE_FSDP1 = 0,
    CT_SKIT_DIVIDE_PRE = 1,
    CT_SKIT_DIVIDE_POST = 2,
    CT_SKIT_DIVIDE_AVG = 3,
} ct_skit_divide_mode;

/* The key's spellings, by mode (NULL-ended, for CT_PARAM_ENUM). */
static const char *const ct_skit_divide_names[] = {"fsdp1", "pre", "post", "avg", NULL};

/* The mode of a spelling, or -1. */
static inline int32_t ct_skit_divide_parse(const char *name) {
    for (int32_t i = 0; ct_skit_divide_names[i]; i++)
        if (name && strcmp(name, ct_skit_divide_names[i]) == 0) return i;
    return -1;
}

typedef struct ct_skit_grad_divide {
    double  pre, post; /* divisors before and after the collective (1: none) */
    int32_t op;        /* CT_REDUCE_SUM or CT_REDUCE_AVG */
} ct_skit_grad_divide;

static inline ct_skit_grad_divide ct_skit_divide_plan(int32_t mode, int32_t world_size) {
    ct_skit_grad_divide d = {1.0, 1.0, CT_REDUCE_SUM};
    switch (mode) {
    case CT_SKIT_DIVIDE_PRE: d.pre = world_size; break;
    case CT_SKIT_DIVIDE_POST: d.post = world_size; break;
    case CT_SKIT_DIVIDE_AVG: d.op = world_size > 1 ? CT_REDUCE_AVG : CT_REDUCE_SUM; break;
    default:
        d.pre = ct_skit_predivide_factor(world_size);
        d.post = ct_skit_postdivide_factor(world_size);
    }
    return d;
}

/* create()'s reading of [section] grad_divide into the plan for this world: the collective's
 * op and the divisors around it. */
static inline int32_t ct_skit_get_divide(const ct_create_args *a, const char *who,
                                        int32_t world_size, ct_skit_grad_divide *out,
                                        ct_error *err) {
    const char *name = NULL;
    if (a->api->get_string(a->host, a->section, "grad_divide", &name, err)) return err->code;
    int32_t mode = ct_skit_divide_parse(name);
    if (mode < 0)
        return ct_error_set(err, CT_ERR_INVALID, "%s: grad_divide = %s is not known ---> use "
                            "fsdp1, pre, post or avg", who, name);
    *out = ct_skit_divide_plan(mode, world_size);
    return CT_OK;
}

/* A unit of `numel` elements laid out as one flat buffer, padded so it splits into world_size
 * equal shards that each start on a CT_TENSOR_ALIGN boundary (ct_shard.padded_numel). Never 0,
 * so every buffer of a unit is a real allocation. */
static inline uint64_t ct_skit_padded_numel(uint64_t numel, int32_t world_size) {
    uint64_t step = (uint64_t)world_size * CT_TENSOR_ALIGN;
    return numel == 0 ? step : ct_align_up(numel, step);
}

/* --- reading ABI structs that may come from an older build ------------------------------ */

/* *out = the first min(src->struct_size, size) bytes of src, the rest zero (the ABI's copy
 * rule); out->struct_size is set to `size`. For ct_strategy_setup, ct_precision_policy, ... */
static inline void ct_skit_copy_struct(void *out, const void *src, size_t size) {
    uint32_t src_size;
    memset(out, 0, size);
    if (!src) return;
    memcpy(&src_size, src, sizeof src_size);
    memcpy(out, src, src_size < size ? src_size : size);
    src_size = (uint32_t)size;
    memcpy(out, &src_size, sizeof src_size);
}

/* CT_HAS_MEMBER (ctrain.h) under the kit's older name. */
#define CT_SKIT_HAS(vt, type, member) CT_HAS_MEMBER(vt, type, member)

/* --- device buffers ---------------------------------------------------------------------- */

/* n elements of dtype on the device, zero-filled; NULL with err naming `what` (e.g. "unit 3
 * master shard") and the size when out of memory. */
static inline void *ct_skit_alloc(ct_device_ref dev, uint64_t n, int32_t dtype, const char *what,
                                 ct_error *err) {
    uint64_t bytes = n * ct_dtype_size(dtype);
    void *p = dev.vt->alloc(dev.self, bytes ? bytes : 64, err);
    if (!p && err && err->code == CT_OK)
        ct_error_set(err, CT_ERR_NOMEM, "%s: cannot allocate %llu bytes of device memory"
                     " ---> HINT: use a sharded strategy (full_shard), a smaller model, or more"
                     " ranks", what, (unsigned long long)bytes);
    else if (!p && err) {
        char why[sizeof err->message];
        memcpy(why, err->message, sizeof why);
        ct_error_set(err, err->code, "%s (%llu bytes): %.400s", what, (unsigned long long)bytes,
                     why);
    }
    return p;
}

/* ct_skit_alloc for a buffer of unit u, named "<who>: unit <u> <label>" in errors (label e.g.
 * "gradient", "master shard"). */
static inline void *ct_skit_alloc_unit(ct_device_ref dev, uint64_t n, int32_t dtype,
                                      const char *who, uint32_t u, const char *label,
                                      ct_error *err) {
    char what[64];
    snprintf(what, sizeof what, "%s: unit %u %s", who, u, label);
    return ct_skit_alloc(dev, n, dtype, what, err);
}

/* dst = src converted from src_dtype to dst_dtype (n elements, device memory): a device copy
 * when the dtypes agree (nothing when dst == src), the device's cast (round to nearest even)
 * otherwise. */
static inline int32_t ct_skit_convert(ct_device_ref dev, void *dst, int32_t dst_dtype,
                                     const void *src, int32_t src_dtype, uint64_t n,
                                     ct_error *err) {
    if (dst_dtype == src_dtype) {
        if (dst == src) return CT_OK;
        return dev.vt->copy(dev.self, dst, src, n * ct_dtype_size(dst_dtype), CT_COPY_D2D, err);
    }
    return dev.vt->cast(dev.self, dst, dst_dtype, src, src_dtype, n, err);
}

/* x *= 1/divisor in x's dtype (rounded to it); nothing for divisor 1. The device has no
 * divide, so this multiplies by the f32 reciprocal: the same as PyTorch's div_ when divisor is
 * a power of two (every factor is, for power-of-two N), within one rounding otherwise. */
static inline int32_t ct_skit_divide(ct_device_ref dev, void *x, int32_t dtype, uint64_t n,
                                    double divisor, ct_error *err) {
    if (divisor == 1.0) return CT_OK;
    return dev.vt->scale(dev.self, x, dtype, n, (float)(1.0 / divisor), err);
}

/* --- reductions -------------------------------------------------------------------------- */

/* Who performs a gradient reduction: the precision plugin (research policies: stochastic
 * rounding, bf16 wire with f32 accumulation, ...) when it provides the hook, else the comm. */
typedef struct ct_skit_reducer {
    ct_comm_ref                comm;
    ct_device_ref              device;
    const ct_precision_vtable *precision;      /* may be NULL */
    void                      *precision_self;
} ct_skit_reducer;

/* All-reduce of count elements of dtype with op (CT_REDUCE_SUM, or CT_REDUCE_AVG for
 * grad_divide = avg). A SUM goes to the precision plugin's hook when it has one (then the call
 * is synchronous and *req is NULL); otherwise, and for AVG (a hook only sums:
 * ct_skit_check_divide refuses the pair at setup), the comm's all_reduce, asynchronous when
 * req is non-NULL and the comm can wait (then *req must go to ct_skit_wait). */
static inline int32_t ct_skit_all_reduce_op(const ct_skit_reducer *r, int32_t op,
                                           const void *send, void *recv, uint64_t count,
                                           int32_t dtype, ct_request **req, ct_error *err) {
    if (req) *req = NULL;
    if (op == CT_REDUCE_SUM && CT_SKIT_HAS(r->precision, ct_precision_vtable, all_reduce))
        return r->precision->all_reduce(r->precision_self, r->comm, r->device, send, recv, count,
                                        dtype, err);
    if (!r->comm.vt->wait) req = NULL;
    return r->comm.vt->all_reduce(r->comm.self, send, recv, count, dtype, op, req, err);
}

/* Reduce-scatter: send holds world_size*count elements, recv gets this rank's count. Same ops,
 * dispatch and asynchrony as ct_skit_all_reduce_op. */
static inline int32_t ct_skit_reduce_scatter_op(const ct_skit_reducer *r, int32_t op,
                                               const void *send, void *recv, uint64_t count,
                                               int32_t dtype, ct_request **req, ct_error *err) {
    if (req) *req = NULL;
    if (op == CT_REDUCE_SUM && CT_SKIT_HAS(r->precision, ct_precision_vtable, reduce_scatter))
        return r->precision->reduce_scatter(r->precision_self, r->comm, r->device, send, recv,
                                            count, dtype, err);
    if (!r->comm.vt->wait) req = NULL;
    return r->comm.vt->reduce_scatter(r->comm.self, send, recv, count, dtype, op, req, err);
}

/* The SUM forms of the two (FSDP1, DDP). */
static inline int32_t ct_skit_all_reduce_sum(const ct_skit_reducer *r, const void *send,
                                            void *recv, uint64_t count, int32_t dtype,
                                            ct_request **req, ct_error *err) {
    return ct_skit_all_reduce_op(r, CT_REDUCE_SUM, send, recv, count, dtype, req, err);
}
static inline int32_t ct_skit_reduce_scatter_sum(const ct_skit_reducer *r, const void *send,
                                                void *recv, uint64_t count, int32_t dtype,
                                                ct_request **req, ct_error *err) {
    return ct_skit_reduce_scatter_op(r, CT_REDUCE_SUM, send, recv, count, dtype, req, err);
}

/* setup()'s check of grad_divide = avg: the precision plugin must not reduce through its own
 * hook for this collective (all_reduce non-zero: the all-reduce hook, else the reduce-scatter
 * hook), since a hook sums; `who` and the precision's name go into the message. */
static inline int32_t ct_skit_check_divide(const char *who, const ct_skit_reducer *r,
                                          int32_t op, int all_reduce, ct_error *err) {
    int hook = all_reduce ? CT_SKIT_HAS(r->precision, ct_precision_vtable, all_reduce)
                          : CT_SKIT_HAS(r->precision, ct_precision_vtable, reduce_scatter);
    if (op != CT_REDUCE_AVG || !hook) return CT_OK;
    return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: grad_divide = avg averages in the "
                        "comm's collective (ncclAvg), but the precision policy reduces through "
                        "its own hook, which sums ---> use grad_divide = fsdp1 (or pre for "
                        "ddp), or a policy without a reduction hook (pure_bf16, amp, fp32)",
                        who);
}

/* The dtype a SUM reduction's result comes back in: the policy's result_dtype (ABI 1.2) when
 * the precision plugin performs that reduction (its all_reduce hook when all_reduce is
 * non-zero, else its reduce_scatter hook) and sets it, else the wire dtype (reduce_dtype). A
 * strategy sizes its receive buffer and its post-divide by it. */
static inline int32_t ct_skit_result_dtype(const ct_skit_reducer *r,
                                          const ct_precision_policy *pol, int all_reduce) {
    int hook = all_reduce ? CT_SKIT_HAS(r->precision, ct_precision_vtable, all_reduce)
                          : CT_SKIT_HAS(r->precision, ct_precision_vtable, reduce_scatter);
    return hook && pol->result_dtype ? pol->result_dtype : pol->reduce_dtype;
}

/* Complete *req if there is one, and clear it. */
static inline int32_t ct_skit_wait(ct_comm_ref comm, ct_request **req, ct_error *err) {
    if (!*req) return CT_OK;
    ct_request *q = *req;
    *req = NULL;
    return comm.vt->wait(comm.self, q, err);
}

/* The send side of a gradient reduction: dst (dst_dtype, the wire) = src (src_dtype, the local
 * gradient) converted as ct_skit_convert, then divided by `divisor` in dst_dtype as
 * ct_skit_divide (FSDP1's pre-divide factor f, or N for ddp). n elements; dst may alias src only
 * when the dtypes agree. */
static inline int32_t ct_skit_convert_and_divide(ct_device_ref dev, void *dst, int32_t dst_dtype,
                                                const void *src, int32_t src_dtype, uint64_t n,
                                                double divisor, ct_error *err) {
    int32_t rc = ct_skit_convert(dev, dst, dst_dtype, src, src_dtype, n, err);
    return rc ? rc : ct_skit_divide(dev, dst, dst_dtype, n, divisor, err);
}

/* The receive side of FSDP1's reduction: x (x_dtype, the collective's result) divided by
 * `divisor` (N/f) in place, then out (f32) = x converted. n elements; out may be x when
 * x_dtype is f32. */
static inline int32_t ct_skit_divide_to_f32(ct_device_ref dev, float *out, void *x,
                                           int32_t x_dtype, uint64_t n, double divisor,
                                           ct_error *err) {
    int32_t rc = ct_skit_divide(dev, x, x_dtype, n, divisor, err);
    return rc ? rc : ct_skit_convert(dev, out, CT_DTYPE_F32, x, x_dtype, n, err);
}

/* --- a unit's parameters ----------------------------------------------------------------- */

/* What a rank holds of a unit's parameters: the master (the whole unit, or this rank's shard)
 * in the policy's master_dtype (f32, or bf16 since ABI 1.7) and the compute copy that forward
 * and backward read (or that is all-gathered). */
typedef struct ct_skit_params {
    float  *master;       /* (n) master weights in master_dtype, owned (a bf16 master: cast to
                             uint16_t *); the optimizer's update lands here */
    void   *compute;      /* (n) param_dtype, owned; aliases master when param_dtype is the
                             master's dtype (f32 with f32, bf16 with bf16: no cast at all) */
    int32_t master_dtype; /* CT_DTYPE_F32 or CT_DTYPE_BF16 (0 is read as f32) */
} ct_skit_params;

/* The master's dtype, 0 read as f32. */
static inline int32_t ct_skit_master_dtype(const ct_skit_params *p) {
    return p->master_dtype ? p->master_dtype : CT_DTYPE_F32;
}

/* Allocate both for n elements of unit u, the master in master_dtype (compute only when
 * param_dtype differs from it). sharded only changes their names in errors: "master shard" /
 * "compute shard" instead of "master" / "compute copy". On error what was allocated stays in
 * *p for ct_skit_params_free. */
static inline int32_t ct_skit_params_alloc_dt(ct_device_ref dev, ct_skit_params *p, uint64_t n,
                                             int32_t param_dtype, int32_t master_dtype,
                                             const char *who, uint32_t u, int sharded,
                                             ct_error *err) {
    p->master_dtype = master_dtype ? master_dtype : CT_DTYPE_F32;
    p->master = (float *)ct_skit_alloc_unit(dev, n, p->master_dtype, who, u,
                                           sharded ? "master shard" : "master", err);
    if (!p->master) return err->code;
    p->compute = p->master;
    if (param_dtype == p->master_dtype) return CT_OK;
    p->compute = ct_skit_alloc_unit(dev, n, param_dtype, who, u,
                                   sharded ? "compute shard" : "compute copy", err);
    return p->compute ? CT_OK : err->code;
}

/* The same with an f32 master (the kit's form before ABI 1.7). */
static inline int32_t ct_skit_params_alloc(ct_device_ref dev, ct_skit_params *p, uint64_t n,
                                          int32_t param_dtype, const char *who, uint32_t u,
                                          int sharded, ct_error *err) {
    return ct_skit_params_alloc_dt(dev, p, n, param_dtype, CT_DTYPE_F32, who, u, sharded, err);
}

/* dst (f32, host memory) = n elements of src (device memory, dtype f32 or bf16) widened
 * exactly. */
static inline int32_t ct_skit_to_host_f32(ct_device_ref dev, float *dst, const void *src,
                                         int32_t dtype, uint64_t n, ct_error *err) {
    if (dtype != CT_DTYPE_BF16)
        return dev.vt->copy(dev.self, dst, src, n * sizeof(float), CT_COPY_D2H, err);
    uint16_t *h = (uint16_t *)malloc((n ? n : 1) * sizeof *h);
    if (!h) return ct_error_set(err, CT_ERR_NOMEM, "out of memory widening %llu bf16 values",
                                (unsigned long long)n);
    int32_t rc = dev.vt->copy(dev.self, h, src, n * sizeof *h, CT_COPY_D2H, err);
    for (uint64_t i = 0; rc == CT_OK && i < n; i++) dst[i] = ct_bf16_to_f32(h[i]);
    free(h);
    return rc;
}

/* dst (device memory, dtype f32 or bf16) = n elements of src (f32, host memory), rounded to
 * nearest even for bf16. */
static inline int32_t ct_skit_from_host_f32(ct_device_ref dev, void *dst, int32_t dtype,
                                           const float *src, uint64_t n, ct_error *err) {
    if (dtype != CT_DTYPE_BF16)
        return dev.vt->copy(dev.self, dst, src, n * sizeof(float), CT_COPY_H2D, err);
    uint16_t *h = (uint16_t *)malloc((n ? n : 1) * sizeof *h);
    if (!h) return ct_error_set(err, CT_ERR_NOMEM, "out of memory rounding %llu values to bf16",
                                (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) h[i] = ct_bf16_from_f32(src[i]);
    int32_t rc = dev.vt->copy(dev.self, dst, h, n * sizeof *h, CT_COPY_H2D, err);
    free(h);
    return rc;
}

/* Master elements [at, at + n) = src (f32 host memory) in the master's dtype. */
static inline int32_t ct_skit_params_put(ct_device_ref dev, ct_skit_params *p, uint64_t at,
                                        const float *src, uint64_t n, ct_error *err) {
    size_t es = ct_dtype_size(ct_skit_master_dtype(p));
    return ct_skit_from_host_f32(dev, (char *)p->master + at * es, ct_skit_master_dtype(p), src,
                                 n, err);
}

/* The master zero-filled, n elements. */
static inline int32_t ct_skit_params_zero(ct_device_ref dev, ct_skit_params *p, uint64_t n,
                                         ct_error *err) {
    return dev.vt->zero(dev.self, p->master, n * ct_dtype_size(ct_skit_master_dtype(p)), err);
}

/* Free what ct_skit_params_alloc made (NULL members are fine: a device frees NULL as nothing). */
static inline void ct_skit_params_free(ct_device_ref dev, ct_skit_params *p) {
    if (p->compute != (void *)p->master) dev.vt->free_mem(dev.self, p->compute);
    dev.vt->free_mem(dev.self, p->master);
}

/* compute = master cast to param_dtype (round to nearest even), as FSDP does before its
 * all-gather; nothing when they alias (a bf16 master with bf16 compute: the identity). n
 * elements. */
static inline int32_t ct_skit_params_refresh(ct_device_ref dev, ct_skit_params *p, uint64_t n,
                                            int32_t param_dtype, ct_error *err) {
    return ct_skit_convert(dev, p->compute, param_dtype, p->master, ct_skit_master_dtype(p), n,
                           err);
}

/* Bytes of device memory both take, n elements: for memory(). */
static inline uint64_t ct_skit_params_bytes(const ct_skit_params *p, uint64_t n,
                                           int32_t param_dtype) {
    return n * ct_dtype_size(ct_skit_master_dtype(p)) +
           (p->compute != (void *)p->master ? n * ct_dtype_size(param_dtype) : 0);
}

/* --- create, setup and the per-unit checks ----------------------------------------------- */

/* create()'s first check: a strategy works through the rank's device and comm engines. */
static inline int32_t ct_skit_check_engines(const ct_create_args *a, const char *who,
                                           ct_error *err) {
    if (a->device.vt && a->comm.vt) return CT_OK;
    return ct_error_set(err, CT_ERR_INVALID, "%s: created without a device or comm engine"
                        " ---> HINT: the host creates device and comm first", who);
}

/* The world size and this rank's index: the values in the ref when the host filled them in
 * (world_size > 0), else the engine's own answer. */
static inline int32_t ct_skit_world_size(ct_comm_ref c) {
    return c.world_size > 0 ? c.world_size : c.vt->world_size(c.self);
}
static inline int32_t ct_skit_rank(ct_comm_ref c) {
    return c.world_size > 0 ? c.rank : c.vt->rank(c.self);
}

/* The dtypes a built-in strategy moves gradients and parameters in: the device casts between
 * f32 and either 16-bit one (f16: the CPU device only). */
static inline int32_t ct_skit_check_dtype(const char *who, const char *what, int32_t dtype,
                                         ct_error *err) {
    if (dtype == CT_DTYPE_F32 || dtype == CT_DTYPE_BF16 || dtype == CT_DTYPE_F16) return CT_OK;
    return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: %s %s is not supported"
                        " ---> HINT: use a precision policy with f32, bf16 or f16", who, what,
                        ct_dtype_name(dtype));
}

/* setup()'s common part, before any buffer: *su = *setup_in and *policy = *su->policy (both by
 * the ABI copy rule); then the checks every built-in strategy makes, in this order: setup()
 * not run before (`already` non-zero is an error), units and a policy given, an f32 or bf16
 * master (ABI 1.7: ct_skit_params_alloc_dt keeps it in that dtype),
 * f32, bf16 or f16 param / reduce / grad accumulation dtypes. On success the precision plugin's
 * hooks go into *r. On error *su and *policy may be filled, *r is untouched. */
static inline int32_t ct_skit_setup_begin(const char *who, int already,
                                         const ct_strategy_setup *setup_in,
                                         ct_strategy_setup *su, ct_precision_policy *policy,
                                         ct_skit_reducer *r, ct_error *err) {
    ct_skit_copy_struct(su, setup_in, sizeof *su);
    if (already) return ct_error_set(err, CT_ERR_INVALID, "%s: setup() called twice", who);
    if (su->n_units == 0 || !su->unit_numel || !su->policy)
        return ct_error_set(err, CT_ERR_INVALID, "%s: setup without units or precision policy",
                            who);
    ct_skit_copy_struct(policy, su->policy, sizeof *policy);
    if (policy->master_dtype != CT_DTYPE_F32 && policy->master_dtype != CT_DTYPE_BF16)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: master dtype %s; only f32 and bf16"
                            " master weights are supported ---> HINT: use a precision policy"
                            " with master f32 (amp) or bf16 (bf16_master)", who,
                            ct_dtype_name(policy->master_dtype));
    if (ct_skit_check_dtype(who, "param dtype", policy->param_dtype, err) ||
        ct_skit_check_dtype(who, "reduce dtype", policy->reduce_dtype, err) ||
        ct_skit_check_dtype(who, "grad accumulation dtype", policy->grad_accum_dtype, err) ||
        (policy->result_dtype &&
         ct_skit_check_dtype(who, "reduction result dtype", policy->result_dtype, err)))
        return err->code;
    r->precision = su->precision;
    r->precision_self = su->precision_self;
    return CT_OK;
}

/* Every per-unit call's check: setup() done (`ready` non-zero) and u < n_units. */
static inline int32_t ct_skit_check_unit(const char *who, int ready, uint32_t u, uint32_t n_units,
                                        ct_error *err) {
    if (!ready) return ct_error_set(err, CT_ERR_INVALID, "%s: used before setup()", who);
    if (u >= n_units)
        return ct_error_set(err, CT_ERR_INVALID, "%s: unit %u out of range (the model has %u"
                            " units)", who, u, n_units);
    return CT_OK;
}

/* The host broke the step protocol (ctrain.h, ct_strategy_vtable): unit u's gradient was
 * handed over twice in one step, or never. CT_ERR_INTERNAL: a host bug, not a user error. */
static inline int32_t ct_skit_error_reduced_twice(const char *who, uint32_t u, ct_error *err) {
    return ct_error_set(err, CT_ERR_INTERNAL, "%s: unit %u reduced twice in one step", who, u);
}
static inline int32_t ct_skit_error_never_reduced(const char *who, uint32_t u, ct_error *err) {
    return ct_error_set(err, CT_ERR_INTERNAL, "%s: unit %u's gradient was never reduced"
                        " ---> HINT: the host must call unit_backward_done(u, last=1) for every"
                        " unit", who, u);
}
/* ... or began a step while unit u's reduction of the last one was still in flight. */
static inline int32_t ct_skit_error_in_flight(const char *who, uint32_t u, ct_error *err) {
    return ct_error_set(err, CT_ERR_INTERNAL, "%s: begin_step while unit %u's reduction is in"
                        " flight ---> HINT: call finish_backward first", who, u);
}
/* ... or released unit u more often than it acquired it. */
static inline int32_t ct_skit_error_not_acquired(const char *who, uint32_t u, ct_error *err) {
    return ct_error_set(err, CT_ERR_INTERNAL, "%s: release of unit %u that is not acquired", who,
                        u);
}

/* shard()'s answer: as much of *sh as out->struct_size asks for (0: all of it), and
 * out->struct_size set to the bytes written. */
static inline void ct_skit_put_shard(ct_shard *out, const ct_shard *sh) {
    uint32_t n = out->struct_size && out->struct_size < sizeof *sh ? out->struct_size
                                                                    : (uint32_t)sizeof *sh;
    memcpy(out, sh, n);
    out->struct_size = n;
}

/* --- a replicated unit (ddp, no_shard) ---------------------------------------------------- */

/* Every rank holds all of the unit: master, compute copy and a local gradient, each of the
 * padded length. acquire/release only count holds, to catch a host whose calls do not pair. */
typedef struct ct_skit_replica {
    uint64_t      numel;      /* elements before padding */
    uint64_t      padded;     /* ct_skit_padded_numel(numel, N) */
    ct_skit_params params;     /* (padded) each */
    void         *grad_local; /* (padded) grad_accum_dtype: backward stages add into it */
    int32_t       holds;      /* acquire() minus release() calls */
} ct_skit_replica;

/* Allocate unit u's master (in the policy's master_dtype), compute copy and local gradient
 * (zero-filled). On error what was allocated stays in *x for ct_skit_replica_free. */
static inline int32_t ct_skit_replica_alloc(ct_device_ref dev, ct_skit_replica *x, uint64_t numel,
                                           int32_t world_size, const ct_precision_policy *pol,
                                           const char *who, uint32_t u, ct_error *err) {
    x->numel = numel;
    x->padded = ct_skit_padded_numel(numel, world_size);
    if (ct_skit_params_alloc_dt(dev, &x->params, x->padded, pol->param_dtype, pol->master_dtype,
                               who, u, 0, err))
        return err->code;
    x->grad_local = ct_skit_alloc_unit(dev, x->padded, pol->grad_accum_dtype, who, u, "gradient",
                                      err);
    return x->grad_local ? CT_OK : err->code;
}

/* Free the local gradient, then the parameters. */
static inline void ct_skit_replica_free(ct_device_ref dev, ct_skit_replica *x) {
    dev.vt->free_mem(dev.self, x->grad_local);
    ct_skit_params_free(dev, &x->params);
}

/* load_unit: master = the full unpadded f32 copy in host memory, rounded to the master's
 * dtype (the padding stays zero), then the compute copy is refreshed. */
static inline int32_t ct_skit_replica_load(ct_device_ref dev, ct_skit_replica *x,
                                          int32_t param_dtype, const float *full, ct_error *err) {
    int32_t rc = ct_skit_params_put(dev, &x->params, 0, full, x->numel, err);
    return rc ? rc : ct_skit_params_refresh(dev, &x->params, x->padded, param_dtype, err);
}

/* save_unit: the unpadded master into host memory `full` as f32, widened exactly from a bf16
 * master (no collective: every rank has it). */
static inline int32_t ct_skit_replica_save(ct_device_ref dev, const ct_skit_replica *x, float *full,
                                          ct_error *err) {
    return ct_skit_to_host_f32(dev, full, x->params.master, ct_skit_master_dtype(&x->params),
                               x->numel, err);
}

/* acquire: one more hold; the compute copy is always there. */
static inline void ct_skit_replica_acquire(ct_skit_replica *x, const void **params) {
    x->holds++;
    *params = x->params.compute;
}

/* release: one hold less; an error when there is none. */
static inline int32_t ct_skit_replica_release(const char *who, uint32_t u, ct_skit_replica *x,
                                             ct_error *err) {
    if (x->holds == 0) return ct_skit_error_not_acquired(who, u, err);
    x->holds--;
    return CT_OK;
}

/* begin_step: the local gradient back to zero. */
static inline int32_t ct_skit_replica_zero_grad(ct_device_ref dev, ct_skit_replica *x,
                                               int32_t grad_accum_dtype, ct_error *err) {
    return dev.vt->zero(dev.self, x->grad_local, x->padded * ct_dtype_size(grad_accum_dtype),
                        err);
}

#endif /* CTRAIN_STRATEGY_KIT_H */
