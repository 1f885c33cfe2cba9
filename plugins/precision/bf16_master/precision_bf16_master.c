/* precision_bf16_master.c — the `bf16_master` precision policy: bf16 compute, a wire/reduce
 * dtype of f32 (default, as amp) or bf16, and bf16 master weights (ABI 1.7) whose update is
 * written back by the rule of [precision.bf16_master] update: kahan (default; a bf16
 * compensation buffer per master element), sr (stochastic rounding) or nearest (round to
 * nearest even, the baseline that stalls). The host widens each owned shard to an f32 scratch,
 * the optimizer plugin updates it with its f32 state unchanged, and the host writes it back
 * with the rule (precision_kit.h, ct_pkit_master_write_bf16). The compute copy of a bf16
 * master is the master itself: no cast. Not for: custom reductions (the comm's own).
 */
#include <ctrain/ctrain.h>
#include <ctrain/precision_kit.h>

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct bm_precision {
    int32_t reduce_dtype;     /* the wire: CT_DTYPE_F32 (default) or CT_DTYPE_BF16 */
    int32_t grad_accum_dtype; /* CT_DTYPE_BF16 or CT_DTYPE_F32 */
    int32_t update;           /* a ct_master_update */
} bm_precision;

static const char *const bm_dtype_choices[] = {"f32", "bf16", NULL};
static const char *const bm_accum_choices[] = {"auto", "bf16", "f32", NULL};

static void *bm_create(const ct_create_args *args, ct_error *err) {
    const char *wire = NULL, *accum = NULL;
    int32_t update = CT_MASTER_KAHAN;
    if (args->api->get_string(args->host, args->section, "reduce_dtype", &wire, err) != CT_OK ||
        args->api->get_string(args->host, args->section, "grad_accum_dtype", &accum, err) !=
            CT_OK ||
        ct_pkit_get_master_update(args, &update, err) != CT_OK)
        return NULL;
    bm_precision *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "precision bf16_master: out of memory"), NULL;
    self->reduce_dtype = !strcmp(wire, "bf16") ? CT_DTYPE_BF16 : CT_DTYPE_F32;
    int f32 = !strcmp(accum, "f32") || (!strcmp(accum, "auto") && ct_pkit_under_ddp(args));
    self->grad_accum_dtype = f32 ? CT_DTYPE_F32 : CT_DTYPE_BF16;
    self->update = update;
    return self;
}

static void bm_destroy(void *self) { free(self); }

static int32_t bm_policy(void *p, ct_precision_policy *out, ct_error *err) {
    bm_precision *self = p;
    (void)err;
    ct_pkit_policy(out, CT_DTYPE_BF16, self->reduce_dtype, self->grad_accum_dtype);
    out->master_dtype = CT_DTYPE_BF16;
    /* a host older than 1.7 gives a shorter struct: it refuses the bf16 master anyway */
    if (out->struct_size >= offsetof(ct_precision_policy, master_update) + sizeof(int32_t))
        out->master_update = self->update;
    return CT_OK;
}

static const ct_param_spec bm_params[] = {
    CT_PKIT_PARAM_MASTER_UPDATE,
    CT_PARAM_ENUM("reduce_dtype", "f32", bm_dtype_choices,
                  "the wire and reduction dtype of the gradients: f32 (as amp) or bf16 (as "
                  "pure_bf16)"),
    CT_PARAM_ENUM("grad_accum_dtype", "auto", bm_accum_choices,
                  "dtype of the local gradient buffer: auto = f32 under strategy ddp, bf16 under "
                  "the FSDP strategies (as amp); bf16 or f32 force one"),
    CT_PARAM_END,
};

static const ct_precision_vtable bm_vtable = {
    .struct_size = sizeof(ct_precision_vtable),
    .create      = bm_create,
    .destroy     = bm_destroy,
    .policy      = bm_policy,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_PRECISION,
    .name    = "bf16_master",
    .version = "1.0.0",
    .summary = "bf16 compute and bf16 master weights updated by Kahan summation, stochastic "
               "rounding or round-to-nearest; f32 (or bf16) reduction; f32 optimizer state",
    .params  = bm_params,
    .devices = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable  = &bm_vtable)
