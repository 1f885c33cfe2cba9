/* precision_fp16.c — the `fp16` precision policy: what fp16 mixed precision with
 * torch.amp.GradScaler does, in FSDP's terms:
 *   param (compute) f16 | local gradient f16 | reduce f16 | master + AdamW f32 | buffers f16
 * with GradScaler's dynamic loss scale (precision_kit.h's ct_pkit_scaler, shared with
 * scaled_amp): the loss gradient is multiplied by the scale (2^16 at first), so small
 * gradients stay above f16's 2^-24; a step whose reduced gradients overflowed f16 is skipped on
 * every rank and the scale halves; growth_interval clean steps double it. The model computes
 * in f16 as pure_f16 does: emulated on the CPU (f16-rounded operands and activations, f32
 * accumulation), f16 operands with f32 accumulation on CUDA.
 * Not for: custom reductions (the comm's own f16 collective is used).
 */
#include <ctrain/ctrain.h>
#include <ctrain/precision_kit.h>

#include <stdlib.h>
#include <string.h>

#define FP16_WHO "precision fp16"

static const char *const fp16_accum_choices[] = {"f16", "f32", NULL};

typedef struct fp16_precision {
    int32_t        grad_accum_dtype; /* CT_DTYPE_F16 (FSDP) or CT_DTYPE_F32 */
    ct_pkit_scaler scaler;           /* GradScaler's scale and counter */
} fp16_precision;

static void *fp16_create(const ct_create_args *args, ct_error *err) {
    const char *accum = NULL;
    ct_pkit_scaler scaler;
    if (args->api->get_string(args->host, args->section, "grad_accum_dtype", &accum, err) != CT_OK ||
        ct_pkit_scaler_read(args, &scaler, err) != CT_OK)
        return NULL;
    fp16_precision *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, FP16_WHO ": out of memory"), NULL;
    self->grad_accum_dtype = strcmp(accum, "f32") == 0 ? CT_DTYPE_F32 : CT_DTYPE_F16;
    self->scaler = scaler;
    return self;
}

static void fp16_destroy(void *self) { free(self); }

static int32_t fp16_policy(void *p, ct_precision_policy *out, ct_error *err) {
    (void)err;
    ct_pkit_policy(out, CT_DTYPE_F16, CT_DTYPE_F16, ((fp16_precision *)p)->grad_accum_dtype);
    return CT_OK;
}

static double fp16_loss_scale(void *p) { return ((fp16_precision *)p)->scaler.scale; }

static int32_t fp16_after_reduce(void *p, int32_t grads_finite, int32_t *skip, ct_error *err) {
    (void)err;
    ct_pkit_scaler_update(&((fp16_precision *)p)->scaler, grads_finite, skip);
    return CT_OK;
}

static int32_t fp16_state_save(void *p, void *buf, uint64_t cap, uint64_t *size, ct_error *err) {
    return ct_pkit_scaler_save(&((fp16_precision *)p)->scaler, buf, cap, size, FP16_WHO, err);
}

static int32_t fp16_state_load(void *p, const void *buf, uint64_t size, ct_error *err) {
    return ct_pkit_scaler_load(&((fp16_precision *)p)->scaler, buf, size, FP16_WHO, err);
}

static const ct_param_spec fp16_params[] = {
    CT_PARAM_ENUM("grad_accum_dtype", "f16", fp16_accum_choices,
                  "dtype of the local gradient buffer: f16 = the compute dtype, as FSDP; f32 "
                  "to accumulate micro-batches exactly"),
    CT_PKIT_PARAMS_SCALER,
    CT_PARAM_END,
};

static const ct_precision_vtable fp16_vtable = {
    .struct_size    = sizeof(ct_precision_vtable),
    .create         = fp16_create,
    .destroy        = fp16_destroy,
    .policy         = fp16_policy,
    .reduce_scatter = NULL, /* native collectives in reduce_dtype f16 */
    .all_reduce     = NULL,
    .loss_scale     = fp16_loss_scale,
    .after_reduce   = fp16_after_reduce,
    .state_save     = fp16_state_save,
    .state_load     = fp16_state_load,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_PRECISION,
    .name    = "fp16",
    .version = "1.0.0",
    .summary = "fp16 with GradScaler's dynamic loss scale: f16 compute and reduction, f32 "
               "master, overflowed steps skipped",
    .params  = fp16_params,
    .devices = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable  = &fp16_vtable)
