/* precision_pure_f16.c — the `pure_f16` precision policy, pure_bf16 with IEEE half instead of
 * bf16 (FSDP MixedPrecision with param_dtype = reduce_dtype = buffer_dtype = float16):
 *   param (compute) f16 | local gradient f16 | reduce f16 | master + AdamW f32 | buffers f16
 * f16 keeps 10 fraction bits (bf16: 7) but only 5 exponent bits: values below 2^-24 flush to
 * zero and above 65504 overflow to inf. Without loss scaling (not in this policy) small
 * gradients underflow; docs/research-policies.md says more. The collective sums in f16,
 * rounding every partial sum. grad_accum_dtype = f32 keeps the local buffer in f32 (it is
 * still cast to f16 before the collective). On the CPU the model emulates f16 compute
 * (f16-rounded operands and activations, f32 accumulation); on CUDA its products take f16
 * operands with f32 accumulation (cuBLAS CUDA_R_16F), rounding where the CPU rounds.
 * Not for: loss scaling, custom reductions (the comm's own f16 collective is used).
 */
#include <ctrain/ctrain.h>
#include <ctrain/precision_kit.h>

#include <stdlib.h>
#include <string.h>

static const char *const pure_f16_accum_choices[] = {"f16", "f32", NULL};

typedef struct pure_f16_precision {
    int32_t grad_accum_dtype; /* CT_DTYPE_F16 (FSDP) or CT_DTYPE_F32 */
} pure_f16_precision;

static void *pure_f16_create(const ct_create_args *args, ct_error *err) {
    const char *accum = NULL;
    if (args->api->get_string(args->host, args->section, "grad_accum_dtype", &accum, err) != CT_OK)
        return NULL;
    pure_f16_precision *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "precision pure_f16: out of memory"), NULL;
    self->grad_accum_dtype = strcmp(accum, "f32") == 0 ? CT_DTYPE_F32 : CT_DTYPE_F16;
    return self;
}

static void pure_f16_destroy(void *self) { free(self); }

static int32_t pure_f16_policy(void *p, ct_precision_policy *out, ct_error *err) {
    pure_f16_precision *self = p;
    (void)err;
    ct_pkit_policy(out, CT_DTYPE_F16, CT_DTYPE_F16, self->grad_accum_dtype);
    return CT_OK;
}

static const ct_param_spec pure_f16_params[] = {
    CT_PARAM_ENUM("grad_accum_dtype", "f16", pure_f16_accum_choices,
                  "dtype of the local gradient buffer: f16 = the compute dtype, as FSDP; f32 "
                  "to accumulate micro-batches exactly"),
    CT_PARAM_END,
};

static const ct_precision_vtable pure_f16_vtable = {
    .struct_size    = sizeof(ct_precision_vtable),
    .create         = pure_f16_create,
    .destroy        = pure_f16_destroy,
    .policy         = pure_f16_policy,
    .reduce_scatter = NULL, /* native collectives in reduce_dtype f16 */
    .all_reduce     = NULL,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_PRECISION,
    .name    = "pure_f16",
    .version = "1.0.0",
    .summary = "pure f16: f16 compute and f16 reduction, f32 master; no loss scaling, so small "
               "gradients underflow",
    .params  = pure_f16_params,
    .devices = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable  = &pure_f16_vtable)
