/* loss_zloss.c — the `zloss` term (PaLM; open_lm's --z-loss-coefficient): pulls each row's
 * log-sum-exp towards 0, which keeps the softmax normaliser (and the logits) from drifting.
 *   value      = coef * (1/n) * sum over rows i of lse_i^2
 *   d/dz[i,j]  = coef * 2 * lse_i * softmax(z_i)_j / n
 * mask_ignored = true (default, as OLMo): rows with target < 0 are left out and n = n_counted;
 * false (as open_lm, which has no mask): every row counts and n = N.
 * Runs on host memory (device cpu); batches on a CUDA device go to zloss_cuda.cu, in the
 * companion cuda/loss_zloss_cuda.so opened on the first such batch when built with nvcc
 * (CT_HAVE_CUDA). Not for: the cross-entropy itself (loss ce).
 * Shape legend: N rows (B*T positions), V vocabulary.
 */
#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include <math.h>
#include <stdlib.h>

#ifdef CT_HAVE_CUDA
#include "zloss_cuda.h"
#include <ctrain/companion.h>
#define ZLOSS_DEVICES (CT_DEVICE_CPU | CT_DEVICE_CUDA)
#else
#define ZLOSS_DEVICES CT_DEVICE_CPU
#endif

typedef struct zloss {
    const ct_host_api *api;
    ct_host           *host;
    const char        *section;      /* "loss.zloss", for messages */
    double             coef;
    int32_t            mask_ignored; /* 1: skip rows with target < 0 */
    struct zloss_cuda *cuda;     /* CUDA scratch after the first CUDA batch; else NULL */
#ifdef CT_HAVE_CUDA
    zloss_cuda_fns cu; /* the companion cuda/loss_zloss_cuda.so, opened on the first CUDA batch */
#endif
} zloss;

static void *zloss_create(const ct_create_args *args, ct_error *err) {
    zloss *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "loss zloss: out of memory"), NULL;
    self->api = args->api;
    self->host = args->host;
    self->section = args->section;
    if (args->api->get_float(args->host, args->section, "coef", &self->coef, err) != CT_OK ||
        args->api->get_bool(args->host, args->section, "mask_ignored", &self->mask_ignored,
                            err) != CT_OK) {
        free(self);
        return NULL;
    }
    return self;
}

static void zloss_destroy(void *p) {
    zloss *self = p;
#ifdef CT_HAVE_CUDA
    if (self && self->cuda) self->cu.free(self->cuda); /* cuda set: cu was resolved */
#endif
    free(self);
}

#ifdef CT_HAVE_CUDA
/* Resolve self->cu on the first CUDA batch (the CPU path never opens the companion). */
static int32_t zloss_cuda_load(zloss *self, ct_error *err) {
    if (self->cu.run) return CT_OK;
    static const char *const names[] = ZLOSS_CUDA_NAMES;
    void *fn[2];
    int32_t rc = ct_companion_load("loss zloss", "loss_zloss_cuda.so", names, fn, 2, err);
    if (rc != CT_OK) return rc;
    self->cu.run = (int32_t (*)(zloss_cuda **, const ct_loss_batch *, int32_t, float, int32_t,
                                double *, ct_error *))fn[0];
    self->cu.free = (void (*)(zloss_cuda *))fn[1];
    return CT_OK;
}
#endif

static inline int row_counts(const zloss *self, int32_t target) {
    return !self->mask_ignored || target >= 0;
}

static int32_t zloss_forward_backward(void *p, const ct_loss_batch *b, ct_loss_result *out,
                                      ct_error *err) {
    zloss *self = p;
    if (!b->logits || !b->targets || !b->row_lse)
        return ct_error_set(err, CT_ERR_INVALID, "loss zloss: batch without logits, targets or "
                            "row_lse (a host bug; please report it)");
    const int64_t N = b->n_rows, V = b->vocab;
    const int64_t rows = self->mask_ignored ? b->n_counted : N;
    out->value = 0.0;
    if (rows <= 0) return CT_OK;
    const double n = (double)rows;

    if (b->device.type == CT_DEVICE_CUDA) {
#ifdef CT_HAVE_CUDA
        double sum = 0.0;
        int32_t rc = zloss_cuda_load(self, err);
        if (rc != CT_OK) return rc;
        rc = self->cu.run(&self->cuda, b, self->mask_ignored,
                          (float)(self->coef * b->grad_scale / n), b->dlogits != NULL,
                          &sum, err);
        if (rc != CT_OK) return rc;
        out->value = self->coef * sum / n;
        if (b->dlogits && self->api && self->api->metric)
            self->api->metric(self->host, "loss/zloss/lse_sq", sum / n, CT_METRIC_MEAN);
        return CT_OK;
#else
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "loss zloss: logits on a CUDA device; this "
                            "build of [%s] runs on cpu only ---> rebuild with nvcc, or use "
                            "[device] type = cpu", self->section);
#endif
    }
    double sum_sq = 0.0;
    for (int64_t i = 0; i < N; i++)
        if (row_counts(self, b->targets[i])) sum_sq += (double)b->row_lse[i] * b->row_lse[i];
    out->value = self->coef * sum_sq / n;
    if (!b->dlogits) return CT_OK;

    if (self->api && self->api->metric)
        self->api->metric(self->host, "loss/zloss/lse_sq", sum_sq / n, CT_METRIC_MEAN);
    const float g = (float)(self->coef * b->grad_scale / n);
    /* rows are independent: each thread owns whole rows, so the result does not depend on
     * the thread count ([device] threads sets it for the rank's thread) */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        if (!row_counts(self, b->targets[i])) continue;
        const float *z = b->logits + i * V;
        float *dz = b->dlogits + i * V;
        float lse = b->row_lse[i];
        for (int64_t j = 0; j < V; j++) dz[j] += g * ct_zloss_dlogit(z[j], lse);
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
    .destroy          = zloss_destroy,
    .forward_backward = zloss_forward_backward,
};

static const ct_plugin_desc zloss_desc = {
    .struct_size       = sizeof(ct_plugin_desc),
    .abi_major         = CT_ABI_MAJOR,
    .abi_minor         = CT_ABI_MINOR,
    .kind              = CT_KIND_LOSS,
    .name              = "zloss",
    .version           = "1.0.0",
    .summary           = "z-loss: coef * mean over positions of logsumexp(logits)^2",
    .params            = zloss_params,
    .param_struct_size = sizeof(ct_param_spec),
    .devices           = ZLOSS_DEVICES,
    .vtable            = &zloss_vtable,
};

CT_EXPORT const ct_plugin_desc *ctrain_plugin_v1(void) { return &zloss_desc; }
