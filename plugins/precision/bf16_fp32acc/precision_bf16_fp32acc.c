/* precision_bf16_fp32acc.c — the `bf16_fp32acc` research policy: pure_bf16's dtypes (bf16
 * compute, bf16 on the wire, f32 master), but the sum over ranks is accumulated in f32 and
 * rounded to bf16 once: reduce-scatter = all_to_all of the bf16 blocks (the same bytes a bf16
 * ring reduce-scatter moves) + a local f32 sum of the N contributions in rank order.
 * With `result = f32` the hooks hand the f32 sums back (ct_precision_policy.result_dtype,
 * ABI 1.2) instead of rounding them to bf16, so the strategy post-divides in f32; the
 * all-reduce's all-gather then moves f32. Default `result = bf16`: the 1.0 behaviour, bit for bit.
 * Not for: the arithmetic of the comm's own collectives (pure_bf16) or f32 wires (amp).
 *
 * Shape legend: N ranks, n = count (elements per rank's result).
 */
#include <ctrain/ctrain.h>
#include <ctrain/precision_kit.h>

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define FP32ACC_WHO "precision bf16_fp32acc" /* starts every error message */

typedef struct fp32acc_precision {
    int32_t       grad_accum_dtype; /* CT_DTYPE_BF16 (as FSDP) or CT_DTYPE_F32 */
    int32_t       result_dtype;     /* key result: CT_DTYPE_BF16 (default) or CT_DTYPE_F32 */
    ct_device_ref dev;              /* the device the scratch below lives on (first hook call) */
    void         *blocks;           /* (N*n) bf16: all_to_all's result, or the padded send */
    uint64_t      blocks_cap;       /*   its capacity in elements */
    void         *padded;           /* (N*n) bf16: all_reduce's padded send */
    uint64_t      padded_cap;
    void         *gathered;         /* (N*n) result dtype: all_reduce's gathered result */
    uint64_t      gathered_cap;
    void         *acc;              /* (n) f32: the local sum */
    uint64_t      acc_cap;
    void         *mine;             /* (n) result dtype: this rank's reduced chunk (all_reduce) */
    uint64_t      mine_cap;
} fp32acc_precision;

static void *fp32acc_create(const ct_create_args *args, ct_error *err) {
    int32_t accum;
    if (ct_pkit_get_grad_accum(args, &accum, err) != CT_OK) return NULL;
    const char *result;
    if (args->api->get_string(args->host, args->section, "result", &result, err) != CT_OK)
        return NULL;
    fp32acc_precision *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, FP32ACC_WHO ": out of memory"), NULL;
    self->grad_accum_dtype = accum;
    self->result_dtype = strcmp(result, "f32") == 0 ? CT_DTYPE_F32 : CT_DTYPE_BF16;
    return self;
}

static void free_scratch(fp32acc_precision *self) {
    if (!self->dev.vt) return;
    self->dev.vt->free_mem(self->dev.self, self->blocks);
    self->dev.vt->free_mem(self->dev.self, self->padded);
    self->dev.vt->free_mem(self->dev.self, self->gathered);
    self->dev.vt->free_mem(self->dev.self, self->acc);
    self->dev.vt->free_mem(self->dev.self, self->mine);
    self->blocks = self->padded = self->gathered = self->mine = self->acc = NULL;
    self->blocks_cap = self->padded_cap = self->gathered_cap = self->acc_cap = 0;
    self->mine_cap = 0;
}

static void fp32acc_destroy(void *p) {
    fp32acc_precision *self = p;
    if (!self) return;
    free_scratch(self);
    free(self);
}

static int32_t fp32acc_policy(void *p, ct_precision_policy *out, ct_error *err) {
    fp32acc_precision *self = p;
    (void)err;
    ct_pkit_policy(out, CT_DTYPE_BF16, CT_DTYPE_BF16, self->grad_accum_dtype);
    if (out->struct_size >= offsetof(ct_precision_policy, result_dtype) + sizeof(int32_t))
        out->result_dtype = self->result_dtype;
    return CT_OK;
}

/* *buf holds at least n elements of dtype on the bound device (grown, contents lost, when
 * smaller). */
static int32_t ensure(fp32acc_precision *self, void **buf, uint64_t *cap, uint64_t n,
                      int32_t dtype, const char *what, ct_error *err) {
    return ct_pkit_ensure(self->dev, buf, cap, n, dtype, FP32ACC_WHO, what, err);
}

/* recv (n, result dtype) = f32 sum over ranks r = 0..N-1, in that order, of blocks[r], rounded
 * once to bf16 unless the result is f32, where blocks (N*n, bf16) holds every rank's
 * contribution to this rank's chunk. */
static int32_t sum_blocks_f32(fp32acc_precision *self, int32_t N, uint64_t n, const void *blocks,
                              void *recv, ct_error *err) {
    const ct_device_vtable *d = self->dev.vt;
    void *ds = self->dev.self;
    int32_t rc = ensure(self, &self->acc, &self->acc_cap, n, CT_DTYPE_F32,
                        "f32 accumulator", err);
    if (rc != CT_OK) return rc;
    rc = d->zero(ds, self->acc, n * sizeof(float), err);
    /* 0 + x_0 is exact; then each add rounds to f32 once, in rank order. */
    for (int32_t r = 0; r < N && rc == CT_OK; r++)
        rc = d->axpy(ds, self->acc, 1.0f, (const uint16_t *)blocks + (uint64_t)r * n,
                     CT_DTYPE_BF16, n, err);
    if (rc == CT_OK && self->result_dtype == CT_DTYPE_F32)
        return d->copy(ds, recv, self->acc, n * sizeof(float), CT_COPY_D2D, err);
    if (rc == CT_OK) rc = d->cast(ds, recv, CT_DTYPE_BF16, self->acc, CT_DTYPE_F32, n, err);
    return rc;
}

/* SUM reduce-scatter: send (N*n) bf16, recv (n, result dtype) = rank's chunk, summed in f32.
 * Other dtypes go to the comm's own collective (the policy only ever reduces bf16). */
static int32_t fp32acc_reduce_scatter(void *p, ct_comm_ref comm, ct_device_ref device,
                                      const void *send, void *recv, uint64_t count,
                                      int32_t dtype, ct_error *err) {
    fp32acc_precision *self = p;
    if (dtype != CT_DTYPE_BF16)
        return ct_pkit_comm_reduce_scatter(comm, send, recv, count, dtype, err);
    int32_t N = comm.world_size, rc = ct_pkit_bind_device(&self->dev, device, FP32ACC_WHO, err);
    if (rc == CT_OK)
        rc = ensure(self, &self->blocks, &self->blocks_cap, (uint64_t)N * count, CT_DTYPE_BF16,
                    "all_to_all buffer", err);
    /* Block j of my send goes to rank j; block r of `blocks` is rank r's block for me. */
    if (rc == CT_OK)
        rc = comm.vt->all_to_all(comm.self, send, self->blocks, count, CT_DTYPE_BF16, NULL, err);
    if (rc == CT_OK) rc = sum_blocks_f32(self, N, count, self->blocks, recv, err);
    return rc;
}

/* SUM all-reduce: send (n) bf16, recv (n, result dtype; the same buffer as send only for a bf16
 * result). The buffer is padded to N equal chunks, reduce-scattered as above, and all-gathered
 * in the result dtype, so every rank gets the same bits. */
static int32_t fp32acc_all_reduce(void *p, ct_comm_ref comm, ct_device_ref device,
                                  const void *send, void *recv, uint64_t count, int32_t dtype,
                                  ct_error *err) {
    fp32acc_precision *self = p;
    if (dtype != CT_DTYPE_BF16)
        return ct_pkit_comm_all_reduce(comm, send, recv, count, dtype, err);
    int32_t N = comm.world_size, rc = ct_pkit_bind_device(&self->dev, device, FP32ACC_WHO, err);
    uint64_t chunk = (count + (uint64_t)N - 1) / (uint64_t)N, total = chunk * (uint64_t)N;
    const ct_device_vtable *d = device.vt;
    if (rc == CT_OK)
        rc = ensure(self, &self->padded, &self->padded_cap, total, CT_DTYPE_BF16,
                    "padded all_reduce buffer", err);
    const int32_t rdt = self->result_dtype;
    if (rc == CT_OK)
        rc = ensure(self, &self->mine, &self->mine_cap, chunk, rdt, "reduced chunk", err);
    if (rc == CT_OK)
        rc = ensure(self, &self->gathered, &self->gathered_cap, total, rdt,
                    "gathered all_reduce result", err);
    if (rc != CT_OK) return rc;
    uint64_t es = ct_dtype_size(CT_DTYPE_BF16);
    rc = d->zero(device.self, self->padded, total * es, err);
    if (rc == CT_OK)
        rc = d->copy(device.self, self->padded, send, count * es, CT_COPY_D2D, err);
    if (rc == CT_OK)
        rc = fp32acc_reduce_scatter(self, comm, device, self->padded, self->mine, chunk, dtype,
                                    err);
    if (rc == CT_OK)
        rc = comm.vt->all_gather(comm.self, self->mine, self->gathered, chunk, rdt, NULL, err);
    if (rc == CT_OK)
        rc = d->copy(device.self, recv, self->gathered, count * ct_dtype_size(rdt), CT_COPY_D2D,
                     err);
    return rc;
}

static const char *const fp32acc_results[] = {"bf16", "f32", NULL};
static const ct_param_spec fp32acc_params[] = {
    CT_PKIT_PARAM_GRAD_ACCUM,
    CT_PARAM_ENUM("result", "bf16", fp32acc_results,
                  "dtype the f32-accumulated sums are handed back in: bf16 (rounded once, as "
                  "a bf16 collective's result) or f32 (the strategy divides in f32)"),
    CT_PARAM_END,
};

static const ct_precision_vtable fp32acc_vtable = {
    .struct_size    = sizeof(ct_precision_vtable),
    .create         = fp32acc_create,
    .destroy        = fp32acc_destroy,
    .policy         = fp32acc_policy,
    .reduce_scatter = fp32acc_reduce_scatter,
    .all_reduce     = fp32acc_all_reduce,
};

CT_DEFINE_PLUGIN(
    .kind              = CT_KIND_PRECISION,
    .name              = "bf16_fp32acc",
    .version           = "1.0.0",
    .summary           = "bf16 compute and bf16 wire, but the sum over ranks accumulated in f32 "
                         "(all_to_all + local sum)",
    .params            = fp32acc_params,
    .devices           = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable            = &fp32acc_vtable,)

