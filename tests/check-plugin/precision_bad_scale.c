/* precision_bad_scale.c — a deliberately wrong precision policy for test_check_plugin.sh: amp's
 * dtypes with a loss scale 2^e that halves on every overflow but is 0 once e < 0 (after 17
 * overflows in a row), so check-plugin's loss-scale protocol check must fail naming
 * loss_scale(). Not for: anything but that test.
 */
#include <ctrain/ctrain.h>

#include <stdlib.h>

typedef struct bad_scale {
    int32_t exponent; /* the scale is 2^exponent, floored to an integer: 0 below 2^0 */
} bad_scale;

static void *bs_create(const ct_create_args *args, ct_error *err) {
    (void)args;
    bad_scale *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "out of memory"), NULL;
    self->exponent = 16;
    return self;
}

static void bs_destroy(void *self) { free(self); }

static int32_t bs_policy(void *p, ct_precision_policy *out, ct_error *err) {
    (void)p, (void)err;
    out->param_dtype = CT_DTYPE_BF16;
    out->reduce_dtype = CT_DTYPE_F32;
    out->master_dtype = CT_DTYPE_F32;
    out->grad_accum_dtype = CT_DTYPE_BF16;
    out->buffer_dtype = CT_DTYPE_BF16;
    out->result_dtype = CT_DTYPE_F32;
    return CT_OK;
}

static double bs_loss_scale(void *p) {
    int32_t e = ((bad_scale *)p)->exponent;
    return e < 0 ? 0.0 : (double)(1u << e); /* WRONG: 0 below 2^0 */
}

static int32_t bs_after_reduce(void *p, int32_t finite, int32_t *skip, ct_error *err) {
    (void)err;
    bad_scale *self = p;
    if (!finite) self->exponent--;
    *skip = !finite;
    return CT_OK;
}

static const ct_precision_vtable bs_vtable = {
    .struct_size  = sizeof(ct_precision_vtable),
    .create       = bs_create,
    .destroy      = bs_destroy,
    .policy       = bs_policy,
    .loss_scale   = bs_loss_scale,
    .after_reduce = bs_after_reduce,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_PRECISION,
    .name    = "bad_scale",
    .version = "0.0.1",
    .summary = "wrong on purpose: its loss scale reaches 0",
    .devices = CT_DEVICE_CPU,
    .vtable  = &bs_vtable)
