/* gather_sum.c — an out-of-tree precision policy, built only through `pkg-config ctrain-sdk`:
 * what a policy chooses (the dtypes) and how it may own a reduction (the two hooks).
 *
 *   param (compute) bf16 | local gradient bf16 | wire bf16 | master + AdamW f32
 *
 * The reduction: every rank's bf16 contribution is gathered whole (all_gather / all_to_all:
 * N times the bytes of a ring, the simplest correct way to see them all), then summed in f32 in
 * rank order and rounded to bf16 once, so no partial sum is ever rounded to bf16. That is the
 * arithmetic of the built-in `bf16_fp32acc` (which moves the ring's bytes instead): the two
 * give the same bits, and the example's test checks it.
 *
 * The hooks read and write the buffers as host memory, so the plugin declares device cpu only.
 * Shape legend: N ranks (comm.world_size), n elements of the result per rank.
 */
#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>
#include <ctrain/precision_kit.h>

#include <stdlib.h>

#define WHO "precision gather_sum" /* starts every error message */

typedef struct gather_sum {
    int32_t       grad_accum_dtype; /* [precision] grad_accum_dtype: bf16 (FSDP) or f32 */
    ct_device_ref dev;              /* the device the scratch lives on (the first hook's) */
    void         *all;              /* (N*n) bf16: every rank's contribution */
    uint64_t      all_cap;          /*   its capacity in elements */
} gather_sum;

static void *gs_create(const ct_create_args *args, ct_error *err) {
    int32_t accum;
    if (ct_pkit_get_grad_accum(args, &accum, err) != CT_OK) return NULL;
    gather_sum *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, WHO ": out of memory"), NULL;
    self->grad_accum_dtype = accum;
    return self;
}

static void gs_destroy(void *p) {
    gather_sum *self = p;
    if (self->dev.vt) self->dev.vt->free_mem(self->dev.self, self->all);
    free(self);
}

/* The dtypes: bf16 compute and wire, f32 master (ct_pkit_policy fills the rest). */
static int32_t gs_policy(void *p, ct_precision_policy *out, ct_error *err) {
    gather_sum *self = p;
    (void)err;
    ct_pkit_policy(out, CT_DTYPE_BF16, CT_DTYPE_BF16, self->grad_accum_dtype);
    return CT_OK;
}

/* recv[i] = bf16(f32 sum over r = 0..N-1, in that order, of all[r*n + i]), i < n. */
static void sum_in_rank_order(const uint16_t *all, int32_t N, uint64_t n, uint16_t *recv) {
    for (uint64_t i = 0; i < n; i++) {
        float acc = 0.0f; /* 0 + x_0 is exact; each later add rounds to f32 once */
        for (int32_t r = 0; r < N; r++) acc += ct_bf16_to_f32(all[(uint64_t)r * n + i]);
        recv[i] = ct_bf16_from_f32(acc);
    }
}

/* The scratch for N*n contributions on the hook's device. */
static int32_t scratch(gather_sum *self, ct_device_ref device, uint64_t elems, ct_error *err) {
    int32_t rc = ct_pkit_bind_device(&self->dev, device, WHO, err);
    if (rc == CT_OK)
        rc = ct_pkit_ensure(self->dev, &self->all, &self->all_cap, elems, CT_DTYPE_BF16, WHO,
                            "gathered contributions", err);
    return rc;
}

/* SUM reduce-scatter: send (N*n) bf16, recv (n) bf16 = this rank's block summed over ranks.
 * all_to_all hands rank r's block for me to all[r*n ..]. Other dtypes: the comm's own. */
static int32_t gs_reduce_scatter(void *p, ct_comm_ref comm, ct_device_ref device,
                                 const void *send, void *recv, uint64_t n, int32_t dtype,
                                 ct_error *err) {
    gather_sum *self = p;
    if (dtype != CT_DTYPE_BF16) return ct_pkit_comm_reduce_scatter(comm, send, recv, n, dtype, err);
    int32_t rc = scratch(self, device, (uint64_t)comm.world_size * n, err);
    if (rc == CT_OK) rc = comm.vt->all_to_all(comm.self, send, self->all, n, CT_DTYPE_BF16, NULL, err);
    if (rc == CT_OK) sum_in_rank_order(self->all, comm.world_size, n, recv);
    return rc;
}

/* SUM all-reduce: send (n) bf16, recv (n) bf16 (may be send). all_gather puts rank r's whole
 * buffer at all[r*n ..]; every rank sums the same values in the same order: the same bits. */
static int32_t gs_all_reduce(void *p, ct_comm_ref comm, ct_device_ref device, const void *send,
                             void *recv, uint64_t n, int32_t dtype, ct_error *err) {
    gather_sum *self = p;
    if (dtype != CT_DTYPE_BF16) return ct_pkit_comm_all_reduce(comm, send, recv, n, dtype, err);
    int32_t rc = scratch(self, device, (uint64_t)comm.world_size * n, err);
    if (rc == CT_OK) rc = comm.vt->all_gather(comm.self, send, self->all, n, CT_DTYPE_BF16, NULL, err);
    if (rc == CT_OK) sum_in_rank_order(self->all, comm.world_size, n, recv);
    return rc;
}

static const ct_param_spec gs_params[] = {
    CT_PKIT_PARAM_GRAD_ACCUM,
    CT_PARAM_END,
};

static const ct_precision_vtable gs_vtable = {
    .struct_size    = sizeof(ct_precision_vtable),
    .create         = gs_create,
    .destroy        = gs_destroy,
    .policy         = gs_policy,
    .reduce_scatter = gs_reduce_scatter,
    .all_reduce     = gs_all_reduce,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_PRECISION,
    .name    = "gather_sum",
    .version = "1.0.0",
    .summary = "example: bf16 compute and wire, every contribution gathered and summed in f32",
    .params  = gs_params,
    .devices = CT_DEVICE_CPU,
    .vtable  = &gs_vtable)
