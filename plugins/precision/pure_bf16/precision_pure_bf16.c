/* precision_pure_bf16.c — the `pure_bf16` precision policy, FSDP MixedPrecision with
 * param_dtype = reduce_dtype = buffer_dtype = bf16 (open_lm --fsdp-pure-bf16, OLMo `pure`):
 *   param (compute) bf16 | local gradient bf16 | reduce bf16 | master + AdamW f32 | buffers bf16
 * The collective sums in bf16, rounding every partial sum (NCCL's ring arithmetic): the policy
 * whose logit-norm growth the project studies. grad_accum_dtype = f32 keeps the local buffer
 * in f32 (it is still cast to bf16 before the collective).
 * Not for: custom reductions (the comm's own bf16 collective is used).
 */
#include <ctrain/ctrain.h>
#include <ctrain/precision_kit.h>

#include <stdlib.h>

typedef struct pure_bf16_precision {
    int32_t grad_accum_dtype; /* CT_DTYPE_BF16 (FSDP) or CT_DTYPE_F32 */
} pure_bf16_precision;

static void *pure_bf16_create(const ct_create_args *args, ct_error *err) {
    int32_t accum;
    if (ct_pkit_get_grad_accum(args, &accum, err) != CT_OK) return NULL;
    pure_bf16_precision *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "precision pure_bf16: out of memory"), NULL;
    self->grad_accum_dtype = accum;
    return self;
}

static void pure_bf16_destroy(void *self) { free(self); }

static int32_t pure_bf16_policy(void *p, ct_precision_policy *out, ct_error *err) {
    pure_bf16_precision *self = p;
    (void)err;
    ct_pkit_policy(out, CT_DTYPE_BF16, CT_DTYPE_BF16, self->grad_accum_dtype);
    return CT_OK;
}

static const ct_param_spec pure_bf16_params[] = {
    CT_PKIT_PARAM_GRAD_ACCUM,
    CT_PARAM_END,
};

static const ct_precision_vtable pure_bf16_vtable = {
    .struct_size    = sizeof(ct_precision_vtable),
    .create         = pure_bf16_create,
    .destroy        = pure_bf16_destroy,
    .policy         = pure_bf16_policy,
    .reduce_scatter = NULL, /* native collectives in reduce_dtype bf16 */
    .all_reduce     = NULL,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_PRECISION,
    .name    = "pure_bf16",
    .version = "1.0.0",
    .summary = "FSDP pure bf16: bf16 compute and bf16 reduction, f32 master",
    .params  = pure_bf16_params,
    .devices = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable  = &pure_bf16_vtable)

