/* precision_amp.c — the `amp` precision policy: bf16 compute, f32 reduction, f32 master weights
 * and AdamW state, bf16 buffers. What the local gradient is depends on the wrapper it imitates:
 *   FSDP MixedPrecision(param_dtype=bf16, reduce_dtype=fp32) (open_lm --fsdp-amp, OLMo `mixed`):
 *     the gradient of the bf16 flat parameter, so bf16, cast to f32 just before the collective;
 *   PyTorch DDP under autocast: f32 parameters, so f32 `.grad` tensors (products of bf16
 *     operands, summed in f32), all-reduced as they are.
 * Key grad_accum_dtype = auto (default) picks f32 when the run's strategy is ddp, bf16 otherwise;
 * bf16 or f32 force one. Not for: custom reductions (the comm's own f32 collective is used).
 */
#include <ctrain/ctrain.h>
#include <ctrain/precision_kit.h>

#include <stdlib.h>
#include <string.h>

typedef struct amp_precision {
    int32_t grad_accum_dtype; /* CT_DTYPE_BF16 (FSDP) or CT_DTYPE_F32 (DDP under autocast) */
} amp_precision;

static const char *const amp_accum_choices[] = {"auto", "bf16", "f32", NULL};

static void *amp_create(const ct_create_args *args, ct_error *err) {
    const char *accum = NULL;
    if (args->api->get_string(args->host, args->section, "grad_accum_dtype", &accum, err) != CT_OK)
        return NULL;
    amp_precision *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "precision amp: out of memory"), NULL;
    int f32 = !strcmp(accum, "f32") || (!strcmp(accum, "auto") && ct_pkit_under_ddp(args));
    self->grad_accum_dtype = f32 ? CT_DTYPE_F32 : CT_DTYPE_BF16;
    if (!strcmp(accum, "auto") && f32 && args->rank == 0)
        args->api->log(args->host, CT_LOG_INFO,
                       "local gradients in f32 under ddp, as PyTorch DDP's .grad under autocast "
                       "(grad_accum_dtype = auto; bf16 keeps FSDP's bf16 gradient)");
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
    CT_PARAM_ENUM("grad_accum_dtype", "auto", amp_accum_choices,
                  "dtype of the local gradient buffer: auto = f32 under strategy ddp (PyTorch DDP "
                  "under autocast holds f32 .grad), bf16 under the FSDP strategies (the bf16 "
                  "flat parameter's gradient); bf16 or f32 force one"),
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
    .version = "1.1.0",
    .summary = "mixed precision: bf16 compute, f32 reduction, f32 master (FSDP's or DDP's)",
    .params  = amp_params,
    .devices = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable  = &amp_vtable)
