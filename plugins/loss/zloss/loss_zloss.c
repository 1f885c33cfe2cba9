/* loss_zloss.c — the `zloss` term (PaLM; open_lm's --z-loss-coefficient): pulls each row's
 * log-sum-exp towards 0, which keeps the softmax normaliser (and the logits) from drifting.
 *   value      = coef * (1/n) * sum over rows i of lse_i^2
 *   d/dz[i,j]  = coef * 2 * lse_i * softmax(z_i)_j / n
 * mask_ignored = true (default, as OLMo): rows with target < 0 are left out and n = n_counted;
 * false (as open_lm, which has no mask): every row counts and n = N.
 * softmax is ct_loss_batch.probs when the host gives it (ABI 1.3), else exp(z - lse); the batch
 * may be a range of the micro-batch's rows (forward_backward_rows), n the micro-batch's.
 * Runs on host memory (device cpu); batches on a CUDA device go to zloss_cuda.cu, in the
 * companion cuda/loss_zloss_cuda.so opened on the first such batch when built with nvcc
 * (CT_HAVE_CUDA). Not for: the cross-entropy itself (loss ce).
 * Shape legend: N rows (B*T positions), V vocabulary.
 */
#include <ctrain/ctrain.h>
#include <ctrain/loss_kit.h>
#include <ctrain/numerics.h>

#include <math.h>

#include "zloss_cuda.h"

#ifdef CT_HAVE_CUDA
#define ZLOSS_DEVICES (CT_DEVICE_CPU | CT_DEVICE_CUDA)
#else
#define ZLOSS_DEVICES CT_DEVICE_CPU
#endif

/* The instance is a ct_lkit_term (loss_kit.h): coef, mask_ignored, the companion
 * cuda/loss_zloss_cuda.so opened on the first CUDA batch and its scratch. */
static void *zloss_create(const ct_create_args *args, ct_error *err) {
    return ct_lkit_term_create(args, "loss zloss", err);
}

static int32_t zloss_forward_backward(void *p, const ct_loss_batch *b, ct_loss_result *out,
                                      ct_error *err) {
    ct_lkit_term *self = p;
    if (!b->logits || !b->targets || !b->row_lse)
        return ct_error_set(err, CT_ERR_INVALID, "loss zloss: batch without logits, targets or "
                            "row_lse (a host bug; please report it)");
    const int64_t N = b->n_rows, V = b->vocab;
    const int64_t rows = ct_lkit_rows(self, b);
    out->value = 0.0;
    if (rows <= 0) return CT_OK;
    const double n = (double)rows;
    const float g = (float)(self->coef * b->grad_scale / n);

    if (b->device.type == CT_DEVICE_CUDA) {
        static const char *const names[2] = ZLOSS_CUDA_NAMES;
        return ct_lkit_term_cuda(self, b, "loss_zloss_cuda.so", names, n, g, "loss/zloss/lse_sq",
                                 out, err);
    }
    double sum_sq = 0.0;
    for (int64_t i = 0; i < N; i++)
        if (ct_lkit_row_counts(self->mask_ignored, b->targets[i]))
            sum_sq += (double)b->row_lse[i] * b->row_lse[i];
    if (!ct_lkit_term_value(self, b, sum_sq, n, "loss/zloss/lse_sq", out)) return CT_OK;

    /* rows are independent: each thread owns whole rows, so the result does not depend on
     * the thread count ([device] threads sets it for the rank's thread) */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        if (!ct_lkit_row_counts(self->mask_ignored, b->targets[i])) continue;
        const float *z = b->logits + i * V;
        float *dz = b->dlogits + i * V;
        float lse = b->row_lse[i];
        if (b->probs) { /* the device's softmax, taken with the row statistics */
            const float *pr = b->probs + i * V;
            for (int64_t j = 0; j < V; j++) dz[j] += g * ct_zloss_dlogit_p(pr[j], lse);
        } else {
            for (int64_t j = 0; j < V; j++) dz[j] += g * ct_zloss_dlogit(z[j], lse);
        }
    }
    return CT_OK;
}

static const ct_param_spec zloss_params[] = {
    CT_PARAM_FLOAT("coef", "1e-4", 0.0, 1e3,
                   "weight of mean(lse^2); 1e-4 as PaLM and open_lm"),
    CT_PARAM_BOOL("mask_ignored", "true",
                  "true: rows with ignored targets are left out (OLMo); false: every row counts "
                  "(open_lm)"),
    CT_PARAM_END,
};

static const ct_loss_vtable zloss_vtable = {
    .struct_size      = sizeof(ct_loss_vtable),
    .create           = zloss_create,
    .destroy          = ct_lkit_term_destroy,
    .forward_backward = zloss_forward_backward,
    .forward_backward_rows = zloss_forward_backward, /* rows are independent given n */
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_LOSS,
    .name    = "zloss",
    .version = "1.0.0",
    .summary = "z-loss: coef * mean over positions of logsumexp(logits)^2",
    .params  = zloss_params,
    .devices = ZLOSS_DEVICES,
    .vtable  = &zloss_vtable)

