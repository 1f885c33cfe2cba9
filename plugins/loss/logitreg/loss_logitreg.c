/* loss_logitreg.c — the `logitreg` term: a squared-norm logit regulariser that pushes the
 * output logits down, aimed directly at the quantity the logit-norm metrics watch.
 *   value      = coef * (1/n) * sum over rows i of ||z_i||^2 / V      (mean squared logit)
 *   d/dz[i,j]  = coef * 2 * z[i,j] / (n * V)
 * Unlike z-loss (which only pins the softmax normaliser lse, leaving the spread free) it
 * shrinks every logit towards 0, the shift and the spread alike. mask_ignored as in zloss:
 * true (default) leaves out rows with target < 0 (n = n_counted); false counts all N rows.
 * Runs on host memory (device cpu); batches on a CUDA device go to logitreg_cuda.cu, in the
 * companion cuda/loss_logitreg_cuda.so opened on the first such batch when built with nvcc
 * (CT_HAVE_CUDA). Not for: z-loss (loss zloss). Legend: N rows, V vocab.
 */
#include <ctrain/ctrain.h>
#include <ctrain/loss_kit.h>

#include "logitreg_cuda.h"

#ifdef CT_HAVE_CUDA
#define LOGITREG_DEVICES (CT_DEVICE_CPU | CT_DEVICE_CUDA)
#else
#define LOGITREG_DEVICES CT_DEVICE_CPU
#endif

/* The instance is a ct_lkit_term (loss_kit.h): coef, mask_ignored, the companion
 * cuda/loss_logitreg_cuda.so opened on the first CUDA batch and its scratch. */
static void *logitreg_create(const ct_create_args *args, ct_error *err) {
    return ct_lkit_term_create(args, "loss logitreg", err);
}

static int32_t logitreg_forward_backward(void *p, const ct_loss_batch *b, ct_loss_result *out,
                                         ct_error *err) {
    ct_lkit_term *self = p;
    if (!b->logits || !b->targets)
        return ct_error_set(err, CT_ERR_INVALID, "loss logitreg: batch without logits or "
                            "targets (a host bug; please report it)");
    const int64_t N = b->n_rows, V = b->vocab;
    const int64_t rows = ct_lkit_rows(self, b);
    out->value = 0.0;
    if (rows <= 0 || V <= 0) return CT_OK;
    const double nv = (double)rows * (double)V; /* elements averaged over */
    const float g = (float)(2.0 * self->coef * b->grad_scale / nv);

    if (b->device.type == CT_DEVICE_CUDA) {
        static const char *const names[2] = LOGITREG_CUDA_NAMES;
        return ct_lkit_term_cuda(self, b, "loss_logitreg_cuda.so", names, nv, g,
                                 "loss/logitreg/mean_sq_logit", out, err);
    }
    double sum_sq = 0.0;
    for (int64_t i = 0; i < N; i++) {
        if (!ct_lkit_row_counts(self->mask_ignored, b->targets[i])) continue;
        const float *z = b->logits + i * V;
        for (int64_t j = 0; j < V; j++) sum_sq += (double)z[j] * z[j];
    }
    if (!ct_lkit_term_value(self, b, sum_sq, nv, "loss/logitreg/mean_sq_logit", out))
        return CT_OK;

    /* rows are independent: each thread owns whole rows, so the result does not depend on
     * the thread count ([device] threads sets it for the rank's thread) */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        if (!ct_lkit_row_counts(self->mask_ignored, b->targets[i])) continue;
        const float *z = b->logits + i * V;
        float *dz = b->dlogits + i * V;
        for (int64_t j = 0; j < V; j++) dz[j] += g * z[j];
    }
    return CT_OK;
}

static const ct_param_spec logitreg_params[] = {
    CT_PARAM_FLOAT("coef", "1e-4", 0.0, 1e3,
                   "weight of the mean squared logit, mean over rows of ||z||^2/V"),
    CT_PARAM_BOOL("mask_ignored", "true",
                  "true: rows with ignored targets are left out; false: every row counts"),
    CT_PARAM_END,
};

static const ct_loss_vtable logitreg_vtable = {
    .struct_size      = sizeof(ct_loss_vtable),
    .create           = logitreg_create,
    .destroy          = ct_lkit_term_destroy,
    .forward_backward = logitreg_forward_backward,
    .forward_backward_rows = logitreg_forward_backward, /* rows are independent given n */
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_LOSS,
    .name    = "logitreg",
    .version = "1.0.0",
    .summary = "logit regulariser: coef * mean squared logit (pushes logits to 0)",
    .params  = logitreg_params,
    .devices = LOGITREG_DEVICES,
    .vtable  = &logitreg_vtable)

