/* precision_bf16_avg.c — the `bf16_avg` research policy: pure_bf16's dtypes, with the sum
 * over ranks done as NCCL's ncclAvg does it in bf16 (what PyTorch FSDP2 uses for bf16
 * gradients): every contribution is first multiplied by bf16(1/N) and rounded to bf16, then the
 * comm's own bf16 SUM runs (a ring on threads/nccl).
 * Not for: a different sum order (the comm decides it) or f32 wires (amp).
 *
 * How it meets the strategies' divide factors. The hooks keep the SUM contract of
 * ct_precision_vtable: the strategy has already divided by its pre-divide factor f (FSDP1) or
 * by N (ddp) and will divide by N/f after the hook. So the hook returns
 *     bf16( N * bf16-sum_r bf16(x_r * bf16(1/N)) )
 * i.e. the AVG result scaled back to a sum, and the strategy's own divides turn it into the
 * mean. When N is a power of two, bf16(1/N), the premultiply and the rescale are all exact
 * (barring under/overflow), so bf16_avg gives the same bits as pure_bf16: FSDP2's AVG and
 * FSDP1's pre/post-divide are the same arithmetic there. For other N, bf16(1/N) is not 1/N
 * (bf16(1/3) = 0.333984375, +0.2%): every gradient is biased by N*bf16(1/N) - 1 exactly as in
 * NCCL, plus up to two roundings (<= 1 bf16 ulp each) from the rescale and the strategy's
 * post-divide, which a true FSDP2 run does not have. See docs/research-policies.md.
 *
 * Shape legend: N ranks, n = count (elements per rank's result).
 */
#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>
#include <ctrain/precision_kit.h>

#include <stdlib.h>

#define AVG_WHO "precision bf16_avg" /* starts every error message */

typedef struct avg_precision {
    int32_t       grad_accum_dtype; /* CT_DTYPE_BF16 (as FSDP) or CT_DTYPE_F32 */
    ct_device_ref dev;              /* the device of `pre` (first hook call) */
    void         *pre;              /* (N*n or n) bf16: the premultiplied contributions */
    uint64_t      pre_cap;          /*   capacity in elements */
} avg_precision;

/* NCCL's premultiplier on sm_80+: the bf16 nearest to float(1/N), as a float. */
static inline float avg_premul(int32_t N) { return ct_avg_scalar(N, 1); }

static void *avg_create(const ct_create_args *args, ct_error *err) {
    int32_t accum;
    if (ct_pkit_get_grad_accum(args, &accum, err) != CT_OK) return NULL;
    avg_precision *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, AVG_WHO ": out of memory"), NULL;
    self->grad_accum_dtype = accum;
    return self;
}

static void avg_destroy(void *p) {
    avg_precision *self = p;
    if (!self) return;
    if (self->dev.vt) self->dev.vt->free_mem(self->dev.self, self->pre);
    free(self);
}

static int32_t avg_policy(void *p, ct_precision_policy *out, ct_error *err) {
    avg_precision *self = p;
    (void)err;
    ct_pkit_policy(out, CT_DTYPE_BF16, CT_DTYPE_BF16, self->grad_accum_dtype);
    return CT_OK;
}

/* self->pre = bf16(send[i] * bf16(1/N)) for n elements, on `device`. */
static int32_t premultiply(avg_precision *self, ct_device_ref device, int32_t N, const void *send,
                           uint64_t n, ct_error *err) {
    int32_t rc = ct_pkit_bind_device(&self->dev, device, AVG_WHO, err);
    if (rc == CT_OK)
        rc = ct_pkit_ensure(device, &self->pre, &self->pre_cap, n, CT_DTYPE_BF16, AVG_WHO,
                            "premultiplied gradient", err);
    const ct_device_vtable *d = device.vt;
    if (rc == CT_OK)
        rc = d->copy(device.self, self->pre, send, n * sizeof(uint16_t), CT_COPY_D2D, err);
    /* scale computes bf16(x * a) with the product in f32: exact for two bf16 factors, so this
     * is the correctly rounded bf16 product, as __hmul2 on the GPU. */
    if (rc == CT_OK) rc = d->scale(device.self, self->pre, CT_DTYPE_BF16, n, avg_premul(N), err);
    return rc;
}

/* SUM reduce-scatter (send N*n, recv n, bf16) computed the AVG way, then scaled back by N. */
static int32_t avg_reduce_scatter(void *p, ct_comm_ref comm, ct_device_ref device,
                                  const void *send, void *recv, uint64_t count, int32_t dtype,
                                  ct_error *err) {
    avg_precision *self = p;
    int32_t N = comm.world_size;
    if (dtype != CT_DTYPE_BF16 || N == 1)
        return ct_pkit_comm_reduce_scatter(comm, send, recv, count, dtype, err);
    int32_t rc = premultiply(self, device, N, send, (uint64_t)N * count, err);
    if (rc == CT_OK)
        rc = ct_pkit_comm_reduce_scatter(comm, self->pre, recv, count, CT_DTYPE_BF16, err);
    if (rc == CT_OK) rc = device.vt->scale(device.self, recv, CT_DTYPE_BF16, count, (float)N, err);
    return rc;
}

/* SUM all-reduce (send, recv n, bf16; may be the same buffer), the AVG way, scaled back by N. */
static int32_t avg_all_reduce(void *p, ct_comm_ref comm, ct_device_ref device, const void *send,
                              void *recv, uint64_t count, int32_t dtype, ct_error *err) {
    avg_precision *self = p;
    int32_t N = comm.world_size;
    if (dtype != CT_DTYPE_BF16 || N == 1)
        return ct_pkit_comm_all_reduce(comm, send, recv, count, dtype, err);
    int32_t rc = premultiply(self, device, N, send, count, err);
    if (rc == CT_OK)
        rc = ct_pkit_comm_all_reduce(comm, self->pre, recv, count, CT_DTYPE_BF16, err);
    if (rc == CT_OK) rc = device.vt->scale(device.self, recv, CT_DTYPE_BF16, count, (float)N, err);
    return rc;
}

static const ct_param_spec avg_params[] = {
    CT_PKIT_PARAM_GRAD_ACCUM,
    CT_PARAM_END,
};

static const ct_precision_vtable avg_vtable = {
    .struct_size    = sizeof(ct_precision_vtable),
    .create         = avg_create,
    .destroy        = avg_destroy,
    .policy         = avg_policy,
    .reduce_scatter = avg_reduce_scatter,
    .all_reduce     = avg_all_reduce,
};

CT_DEFINE_PLUGIN(
    .kind              = CT_KIND_PRECISION,
    .name              = "bf16_avg",
    .version           = "1.0.0",
    .summary           = "pure bf16 with NCCL's AVG arithmetic (premultiply by bf16(1/N), bf16 "
                         "sum), as FSDP2",
    .params            = avg_params,
    .devices           = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable            = &avg_vtable,)

