/* precision_scaled_amp.c — the `scaled_amp` precision policy: amp's dtypes (bf16 compute, f32
 * wire and master) with torch.amp.GradScaler's dynamic loss scale through the ABI 1.7 members
 * loss_scale, after_reduce (skip on overflow) and state_save/state_load (16 bytes).
 * Not for: f16 compute or custom reductions (the comm's own f32 collectives are used).
 *
 * The rule (GradScaler.update) is precision_kit.h's ct_pkit_scaler, shared with `fp16`: an
 * overflow skips the step and multiplies the f32 scale by backoff_factor; growth_interval clean
 * steps in a row multiply it by growth_factor. grad_accum_dtype is amp's key. */
#include <ctrain/ctrain.h>
#include <ctrain/precision_kit.h>

#include <stdlib.h>
#include <string.h>

typedef struct scaled_amp {
    int32_t        grad_accum_dtype;
    ct_pkit_scaler scaler; /* GradScaler's scale and counter (precision_kit.h) */
} scaled_amp;

#define SAMP_WHO "precision scaled_amp"

static const char *const samp_accum_choices[] = {"auto", "bf16", "f32", NULL};

static void *samp_create(const ct_create_args *args, ct_error *err) {
    const char *accum = NULL;
    ct_pkit_scaler scaler;
    if (args->api->get_string(args->host, args->section, "grad_accum_dtype", &accum, err) != CT_OK ||
        ct_pkit_scaler_read(args, &scaler, err) != CT_OK)
        return NULL;
    scaled_amp *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, SAMP_WHO ": out of memory"), NULL;
    int f32 = !strcmp(accum, "f32") || (!strcmp(accum, "auto") && ct_pkit_under_ddp(args));
    self->grad_accum_dtype = f32 ? CT_DTYPE_F32 : CT_DTYPE_BF16;
    self->scaler = scaler;
    return self;
}

static void samp_destroy(void *self) { free(self); }

static int32_t samp_policy(void *p, ct_precision_policy *out, ct_error *err) {
    scaled_amp *self = p;
    (void)err;
    ct_pkit_policy(out, CT_DTYPE_BF16, CT_DTYPE_F32, self->grad_accum_dtype);
    return CT_OK;
}

static double samp_loss_scale(void *p) { return ((scaled_amp *)p)->scaler.scale; }

static int32_t samp_after_reduce(void *p, int32_t grads_finite, int32_t *skip, ct_error *err) {
    (void)err;
    ct_pkit_scaler_update(&((scaled_amp *)p)->scaler, grads_finite, skip);
    return CT_OK;
}

static int32_t samp_state_save(void *p, void *buf, uint64_t cap, uint64_t *size, ct_error *err) {
    return ct_pkit_scaler_save(&((scaled_amp *)p)->scaler, buf, cap, size, SAMP_WHO, err);
}

static int32_t samp_state_load(void *p, const void *buf, uint64_t size, ct_error *err) {
    return ct_pkit_scaler_load(&((scaled_amp *)p)->scaler, buf, size, SAMP_WHO, err);
}

static const ct_param_spec samp_params[] = {
    CT_PARAM_ENUM("grad_accum_dtype", "auto", samp_accum_choices,
                  "dtype of the local gradient buffer: auto = f32 under strategy ddp, bf16 "
                  "under the FSDP strategies (as amp); bf16 or f32 force one"),
    CT_PKIT_PARAMS_SCALER,
    CT_PARAM_END,
};

static const ct_precision_vtable samp_vtable = {
    .struct_size    = sizeof(ct_precision_vtable),
    .create         = samp_create,
    .destroy        = samp_destroy,
    .policy         = samp_policy,
    .reduce_scatter = NULL, /* native collectives in reduce_dtype f32 */
    .all_reduce     = NULL,
    .loss_scale     = samp_loss_scale,
    .after_reduce   = samp_after_reduce,
    .state_save     = samp_state_save,
    .state_load     = samp_state_load,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_PRECISION,
    .name    = "scaled_amp",
    .version = "1.0.0",
    .summary = "amp with a dynamic loss scale (torch.amp.GradScaler's): skip on overflow",
    .params  = samp_params,
    .devices = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable  = &samp_vtable)
