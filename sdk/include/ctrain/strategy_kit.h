/* strategy_kit.h — header-only helpers for writing a strategy plugin: FSDP1's pre/post divide
 * factors, flat-buffer padding and shard arithmetic, typed device buffers, and the reduction
 * dispatch (the precision plugin's hooks when it has them, the comm's own collective otherwise).
 * The built-in ddp, no_shard and full_shard use it; a third-party strategy (shard_grad_op,
 * hybrid_shard, ...) gets the same arithmetic by including it. Not part of the ABI: nothing here
 * crosses the plugin boundary, and it keeps no state.
 */
#ifndef CTRAIN_STRATEGY_KIT_H
#define CTRAIN_STRATEGY_KIT_H

#include <ctrain/ctrain.h>

#include <stddef.h>

/* --- arithmetic ------------------------------------------------------------------------ */

/* FSDP1's gradient pre-divide factor for N ranks (torch.distributed.fsdp, _get_gradient_
 * predivide_factor): f = 1; while N % f == 0 and N / f > f: f *= 2. The gradient is divided by
 * f before the SUM collective and by N / f after it, so neither the sum (overflow) nor the
 * addends (underflow) leave the low-precision range as easily as with one divide by N.
 * N = 1 -> 1, 2 -> 2, 3 -> 2, 4 -> 2, 6 -> 4, 8 -> 4, 16 -> 4, 32 -> 8, 64 -> 8. */
static inline int32_t ct_kit_predivide_factor(int32_t world_size) {
    int32_t f = 1;
    while (world_size % f == 0 && world_size / f > f) f *= 2;
    return f;
}

/* The post-divide factor that goes with it: N / f, as FSDP1 computes it in floating point
 * (an integer when N is a power of two; 1.5 for N = 3 or 6). */
static inline double ct_kit_postdivide_factor(int32_t world_size) {
    return (double)world_size / (double)ct_kit_predivide_factor(world_size);
}

/* A unit of `numel` elements laid out as one flat buffer, padded so it splits into world_size
 * equal shards that each start on a CT_TENSOR_ALIGN boundary (ct_shard.padded_numel). Never 0,
 * so every buffer of a unit is a real allocation. */
static inline uint64_t ct_kit_padded_numel(uint64_t numel, int32_t world_size) {
    uint64_t step = (uint64_t)world_size * CT_TENSOR_ALIGN;
    return numel == 0 ? step : ct_align_up(numel, step);
}

/* --- reading ABI structs that may come from an older build ------------------------------ */

/* *out = the first min(src->struct_size, size) bytes of src, the rest zero (the ABI's copy
 * rule); out->struct_size is set to `size`. For ct_strategy_setup, ct_precision_policy, ... */
static inline void ct_kit_copy_struct(void *out, const void *src, size_t size) {
    uint32_t src_size;
    memset(out, 0, size);
    if (!src) return;
    memcpy(&src_size, src, sizeof src_size);
    memcpy(out, src, src_size < size ? src_size : size);
    src_size = (uint32_t)size;
    memcpy(out, &src_size, sizeof src_size);
}

/* Does the vtable `vt` (struct_size first) reach `member`, and is that member non-NULL? */
#define CT_KIT_HAS(vt, type, member) \
    ((vt) && (vt)->struct_size >= offsetof(type, member) + sizeof((vt)->member) && (vt)->member)

/* --- device buffers ---------------------------------------------------------------------- */

/* n elements of dtype on the device, zero-filled; NULL with err naming `what` (e.g. "unit 3
 * master shard") and the size when out of memory. */
static inline void *ct_kit_alloc(ct_device_ref dev, uint64_t n, int32_t dtype, const char *what,
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

/* dst = src converted from src_dtype to dst_dtype (n elements, device memory): a device copy
 * when the dtypes agree (nothing when dst == src), the device's cast (round to nearest even)
 * otherwise. */
static inline int32_t ct_kit_convert(ct_device_ref dev, void *dst, int32_t dst_dtype,
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
static inline int32_t ct_kit_divide(ct_device_ref dev, void *x, int32_t dtype, uint64_t n,
                                    double divisor, ct_error *err) {
    if (divisor == 1.0) return CT_OK;
    return dev.vt->scale(dev.self, x, dtype, n, (float)(1.0 / divisor), err);
}

/* --- reductions -------------------------------------------------------------------------- */

/* Who performs a gradient reduction: the precision plugin (research policies: stochastic
 * rounding, bf16 wire with f32 accumulation, ...) when it provides the hook, else the comm. */
typedef struct ct_kit_reducer {
    ct_comm_ref                comm;
    ct_device_ref              device;
    const ct_precision_vtable *precision;      /* may be NULL */
    void                      *precision_self;
} ct_kit_reducer;

/* SUM all-reduce of count elements of dtype. With a precision hook the call is synchronous
 * and *req is NULL; otherwise the comm's all_reduce is asynchronous when req is non-NULL and
 * the comm can wait (then *req must go to ct_kit_wait). */
static inline int32_t ct_kit_all_reduce_sum(const ct_kit_reducer *r, const void *send,
                                            void *recv, uint64_t count, int32_t dtype,
                                            ct_request **req, ct_error *err) {
    if (req) *req = NULL;
    if (CT_KIT_HAS(r->precision, ct_precision_vtable, all_reduce))
        return r->precision->all_reduce(r->precision_self, r->comm, r->device, send, recv, count,
                                        dtype, err);
    if (!r->comm.vt->wait) req = NULL;
    return r->comm.vt->all_reduce(r->comm.self, send, recv, count, dtype, CT_REDUCE_SUM, req,
                                  err);
}

/* SUM reduce-scatter: send holds world_size*count elements, recv gets this rank's count. Same
 * dispatch and asynchrony as ct_kit_all_reduce_sum. */
static inline int32_t ct_kit_reduce_scatter_sum(const ct_kit_reducer *r, const void *send,
                                                void *recv, uint64_t count, int32_t dtype,
                                                ct_request **req, ct_error *err) {
    if (req) *req = NULL;
    if (CT_KIT_HAS(r->precision, ct_precision_vtable, reduce_scatter))
        return r->precision->reduce_scatter(r->precision_self, r->comm, r->device, send, recv,
                                            count, dtype, err);
    if (!r->comm.vt->wait) req = NULL;
    return r->comm.vt->reduce_scatter(r->comm.self, send, recv, count, dtype, CT_REDUCE_SUM, req,
                                      err);
}

/* Complete *req if there is one, and clear it. */
static inline int32_t ct_kit_wait(ct_comm_ref comm, ct_request **req, ct_error *err) {
    if (!*req) return CT_OK;
    ct_request *q = *req;
    *req = NULL;
    return comm.vt->wait(comm.self, q, err);
}

#endif /* CTRAIN_STRATEGY_KIT_H */
