/* precision_amp.c — the `amp` precision policy, FSDP MixedPrecision(param_dtype=bf16,
 * reduce_dtype=fp32, buffer_dtype=bf16) as open_lm --fsdp-amp and OLMo `mixed`:
 *   param (compute) bf16 | local gradient bf16 | reduce f32 | master + AdamW f32 | buffers bf16
 * Each rank's gradient is computed in the compute dtype (bf16) and cast to f32 just before the
 * collective, so the sum over ranks is exact-ish f32 arithmetic. grad_accum_dtype = f32 keeps
 * the local buffer (micro-batch sums) in f32 instead, for comparison.
 * Not for: custom reductions (the comm's own f32 collective is used).
 */
#include <ctrain/ctrain.h>
#include <ctrain/precision_kit.h>

#include <stdlib.h>

typedef struct amp_precision {
    int32_t grad_accum_dtype; /* CT_DTYPE_BF16 (FSDP) or CT_DTYPE_F32 */
} amp_precision;

static void *amp_create(const ct_create_args *args, ct_error *err) {
    int32_t accum;
    if (ct_pkit_get_grad_accum(args, &accum, err) != CT_OK) return NULL;
    amp_precision *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "precision amp: out of memory"), NULL;
    self->grad_accum_dtype = accum;
    return self;
}

static void amp_destroy(void *self) { free(self); }

static int32_t amp_policy(void *p, ct_precision_policy *out, ct_error *err) {
    amp_precision *self = p;
    (void)err;
    ct_pkit_policy(out, CT_DTYPE_BF16, CT_DTYPE_F32, self->grad_accum_dtype);
    return CT_OK;
}

static const ct_param_spec amp_params[] = {
    CT_PKIT_PARAM_GRAD_ACCUM,
    CT_PARAM_END,
};

static const ct_precision_vtable amp_vtable = {
    .struct_size    = sizeof(ct_precision_vtable),
    .create         = amp_create,
    .destroy        = amp_destroy,
    .policy         = amp_policy,
    .reduce_scatter = NULL, /* native collectives in reduce_dtype f32 */
    .all_reduce     = NULL,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_PRECISION,
    .name    = "amp",
    .version = "1.0.0",
    .summary = "FSDP mixed precision: bf16 compute, f32 reduction, f32 master",
    .params  = amp_params,
    .devices = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable  = &amp_vtable)

