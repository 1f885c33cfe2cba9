/* precision_bad_master.c — a deliberately wrong precision policy for test_check_plugin.sh and
 * test_bf16_master.sh: bf16_master's dtypes (bf16 compute, f32 wire, bf16 master), but the
 * update rule comes from a process-wide counter, so each instance answers another rule (kahan,
 * then sr, then nearest, ...): a resumed run would write its master weights otherwise than the
 * run it continues. check-plugin's master round trip must fail naming the fresh instance's
 * rule, while the dtype check passes. Not for: anything but those tests.
 */
#include <ctrain/ctrain.h>

#include <stdlib.h>

static int32_t bm_instances; /* WRONG: state shared by every instance of the process */

typedef struct bad_master {
    int32_t update; /* a ct_master_update */
} bad_master;

static void *bm_create(const ct_create_args *args, ct_error *err) {
    (void)args;
    bad_master *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "out of memory"), NULL;
    self->update = CT_MASTER_KAHAN - bm_instances++ % 3; /* WRONG: 2, 1, 0, 2, ... */
    return self;
}

static void bm_destroy(void *self) { free(self); }

static int32_t bm_policy(void *p, ct_precision_policy *out, ct_error *err) {
    (void)err;
    out->param_dtype = CT_DTYPE_BF16;
    out->reduce_dtype = CT_DTYPE_F32;
    out->master_dtype = CT_DTYPE_BF16;
    out->grad_accum_dtype = CT_DTYPE_BF16;
    out->buffer_dtype = CT_DTYPE_BF16;
    out->master_update = ((bad_master *)p)->update;
    return CT_OK;
}

static const ct_precision_vtable bm_vtable = {
    .struct_size = sizeof(ct_precision_vtable),
    .create      = bm_create,
    .destroy     = bm_destroy,
    .policy      = bm_policy,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_PRECISION,
    .name    = "bad_master",
    .version = "0.0.1",
    .summary = "WRONG on purpose: each instance answers another master update rule",
    .devices = CT_DEVICE_CPU,
    .vtable  = &bm_vtable)
