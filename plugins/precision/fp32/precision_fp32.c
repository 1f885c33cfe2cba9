/* precision_fp32.c — the `fp32` precision policy: everything in f32 (parameters, activations,
 * gradients, the reduction, master weights and AdamW state). The reference every mixed policy
 * is compared with. Not for: custom reductions (the comm's own f32 collective is used).
 */
#include <ctrain/ctrain.h>
#include <ctrain/precision_kit.h>

#include <stdlib.h>

typedef struct fp32_precision {
    int32_t unused; /* the policy is fixed; an instance exists so every kind looks the same */
} fp32_precision;

static void *fp32_create(const ct_create_args *args, ct_error *err) {
    (void)args;
    fp32_precision *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "precision fp32: out of memory"), NULL;
    return self;
}

static void fp32_destroy(void *self) { free(self); }

static int32_t fp32_policy(void *self, ct_precision_policy *out, ct_error *err) {
    (void)self;
    (void)err;
    ct_pkit_policy(out, CT_DTYPE_F32, CT_DTYPE_F32, CT_DTYPE_F32);
    return CT_OK;
}

static const ct_param_spec fp32_params[] = {
    CT_PARAM_END,
};

static const ct_precision_vtable fp32_vtable = {
    .struct_size    = sizeof(ct_precision_vtable),
    .create         = fp32_create,
    .destroy        = fp32_destroy,
    .policy         = fp32_policy,
    .reduce_scatter = NULL, /* native f32 collectives */
    .all_reduce     = NULL,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_PRECISION,
    .name    = "fp32",
    .version = "1.0.0",
    .summary = "all f32: compute, gradients, reduction, master weights",
    .params  = fp32_params,
    .devices = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable  = &fp32_vtable)

