/* precision_scaled_amp.c — the `scaled_amp` precision policy: amp's dtypes (bf16 compute, f32
 * wire and master) with torch.amp.GradScaler's dynamic loss scale through the ABI 1.7 members
 * loss_scale, after_reduce (skip on overflow) and state_save/state_load (16 bytes).
 * Not for: f16 compute or custom reductions (the comm's own f32 collectives are used).
 *
 * The rule (GradScaler.update): the scale S is an f32 value; an overflow skips the step and
 * multiplies S by backoff_factor; growth_interval clean steps in a row multiply it by
 * growth_factor, kept only when the product is a finite f32. grad_accum_dtype is amp's key. */
#include <ctrain/ctrain.h>
#include <ctrain/precision_kit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct scaled_amp {
    int32_t grad_accum_dtype;
    float   scale;           /* GradScaler._scale (f32) */
    int32_t growth_tracker;  /* GradScaler._growth_tracker: clean steps since the last change */
    float   growth_factor, backoff_factor;
    int32_t growth_interval;
} scaled_amp;

#define SAMP_STATE_MAGIC 0x53414d50u /* "SAMP" */

static const char *const samp_accum_choices[] = {"auto", "bf16", "f32", NULL};

/* Is the run's [strategy] plugin ddp, by name or as a path to strategy_ddp.so? */
static int samp_under_ddp(const ct_create_args *args) {
    const char *name = NULL;
    ct_error ignored = {.struct_size = sizeof ignored};
    if (args->api->get_string(args->host, "strategy", "plugin", &name, &ignored) != CT_OK)
        return 0;
    const char *base = strrchr(name, '/');
    return !strcmp(name, "ddp") || (base && !strcmp(base + 1, "strategy_ddp.so"));
}

static void *samp_create(const ct_create_args *args, ct_error *err) {
    const char *accum = NULL;
    double init = 0, growth = 0, backoff = 0;
    int64_t interval = 0;
    const ct_host_api *api = args->api;
    if (api->get_string(args->host, args->section, "grad_accum_dtype", &accum, err) != CT_OK ||
        api->get_float(args->host, args->section, "init_scale", &init, err) != CT_OK ||
        api->get_float(args->host, args->section, "growth_factor", &growth, err) != CT_OK ||
        api->get_float(args->host, args->section, "backoff_factor", &backoff, err) != CT_OK ||
        api->get_int(args->host, args->section, "growth_interval", &interval, err) != CT_OK)
        return NULL;
    scaled_amp *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "precision scaled_amp: out of memory"), NULL;
    int f32 = !strcmp(accum, "f32") || (!strcmp(accum, "auto") && samp_under_ddp(args));
    self->grad_accum_dtype = f32 ? CT_DTYPE_F32 : CT_DTYPE_BF16;
    self->scale = (float)init;
    self->growth_factor = (float)growth;
    self->backoff_factor = (float)backoff;
    self->growth_interval = (int32_t)interval;
    return self;
}

static void samp_destroy(void *self) { free(self); }

static int32_t samp_policy(void *p, ct_precision_policy *out, ct_error *err) {
    scaled_amp *self = p;
    (void)err;
    ct_pkit_policy(out, CT_DTYPE_BF16, CT_DTYPE_F32, self->grad_accum_dtype);
    return CT_OK;
}

static double samp_loss_scale(void *p) { return ((scaled_amp *)p)->scale; }

/* GradScaler.update (_amp_update_scale_): back off and restart the count on an overflow;
 * grow after growth_interval clean steps in a row. The optimizer step is skipped on an
 * overflow (GradScaler.step). */
static int32_t samp_after_reduce(void *p, int32_t grads_finite, int32_t *skip, ct_error *err) {
    scaled_amp *self = p;
    (void)err;
    if (!grads_finite) {
        self->scale = self->scale * self->backoff_factor;
        self->growth_tracker = 0;
        *skip = 1;
        return CT_OK;
    }
    int32_t successful = self->growth_tracker + 1;
    if (successful == self->growth_interval) {
        float grown = self->scale * self->growth_factor;
        if (isfinite(grown)) self->scale = grown;
        self->growth_tracker = 0;
    } else {
        self->growth_tracker = successful;
    }
    *skip = 0;
    return CT_OK;
}

/* 16 bytes: magic, the f32 scale's bits, the growth tracker, 0 (little-endian host order). */
static int32_t samp_state_save(void *p, void *buf, uint64_t cap, uint64_t *size, ct_error *err) {
    scaled_amp *self = p;
    uint32_t w[4] = {SAMP_STATE_MAGIC, 0, (uint32_t)self->growth_tracker, 0};
    if (cap < sizeof w)
        return ct_error_set(err, CT_ERR_INVALID, "precision scaled_amp: state needs %zu bytes",
                            sizeof w);
    memcpy(&w[1], &self->scale, 4);
    memcpy(buf, w, sizeof w);
    *size = sizeof w;
    return CT_OK;
}

static int32_t samp_state_load(void *p, const void *buf, uint64_t size, ct_error *err) {
    scaled_amp *self = p;
    uint32_t w[4];
    if (size != sizeof w)
        return ct_error_set(err, CT_ERR_INVALID, "precision scaled_amp: saved state is %llu "
                            "bytes, not 16 ---> resume with the policy that saved it",
                            (unsigned long long)size);
    memcpy(w, buf, sizeof w);
    float scale;
    memcpy(&scale, &w[1], 4);
    if (w[0] != SAMP_STATE_MAGIC || !(isfinite(scale) && scale > 0) || (int32_t)w[2] < 0)
        return ct_error_set(err, CT_ERR_INVALID, "precision scaled_amp: the saved state is not "
                            "scaled_amp's (magic, scale or counter) ---> resume with the policy "
                            "that saved it");
    self->scale = scale;
    self->growth_tracker = (int32_t)w[2];
    return CT_OK;
}

static const ct_param_spec samp_params[] = {
    CT_PARAM_ENUM("grad_accum_dtype", "auto", samp_accum_choices,
                  "dtype of the local gradient buffer: auto = f32 under strategy ddp, bf16 "
                  "under the FSDP strategies (as amp); bf16 or f32 force one"),
    CT_PARAM_FLOAT_X("init_scale", "65536", 0, 3.4028234663852886e38, CT_PARAM_MIN_EXCLUSIVE,
                     "the first loss scale (GradScaler init_scale, 2^16); an f32 value"),
    CT_PARAM_FLOAT_X("growth_factor", "2", 1, 1e6, CT_PARAM_MIN_EXCLUSIVE,
                     "the scale is multiplied by it after growth_interval clean steps"),
    CT_PARAM_FLOAT_X("backoff_factor", "0.5", 0, 1,
                     CT_PARAM_MIN_EXCLUSIVE | CT_PARAM_MAX_EXCLUSIVE,
                     "the scale is multiplied by it on a step with non-finite gradients "
                     "(which is skipped)"),
    CT_PARAM_INT("growth_interval", "2000", 1, 2147483647,
                 "clean steps in a row before the scale grows"),
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
