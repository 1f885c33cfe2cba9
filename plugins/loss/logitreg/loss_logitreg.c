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

#include <stdlib.h>

#ifdef CT_HAVE_CUDA
#include "logitreg_cuda.h"
#include <ctrain/companion.h>
#define LOGITREG_DEVICES (CT_DEVICE_CPU | CT_DEVICE_CUDA)
#else
#define LOGITREG_DEVICES CT_DEVICE_CPU
#endif

typedef struct logitreg {
    const ct_host_api *api;
    ct_host           *host;
    const char        *section;      /* "loss.logitreg", for messages */
    double             coef;
    int32_t            mask_ignored; /* 1: skip rows with target < 0 */
    struct logitreg_cuda *cuda;  /* CUDA scratch after the first CUDA batch; else NULL */
#ifdef CT_HAVE_CUDA
    logitreg_cuda_fns cu;        /* companion cuda/loss_logitreg_cuda.so, from the 1st CUDA batch */
#endif
} logitreg;

static void *logitreg_create(const ct_create_args *args, ct_error *err) {
    logitreg *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "loss logitreg: out of memory"), NULL;
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

static void logitreg_destroy(void *p) {
    logitreg *self = p;
#ifdef CT_HAVE_CUDA
    if (self && self->cuda) self->cu.free(self->cuda); /* cuda set: cu was resolved */
#endif
    free(self);
}

#ifdef CT_HAVE_CUDA
/* Resolve self->cu on the first CUDA batch (the CPU path never opens the companion). */
static int32_t logitreg_cuda_load(logitreg *self, ct_error *err) {
    if (self->cu.run) return CT_OK;
    static const char *const names[] = LOGITREG_CUDA_NAMES;
    void *fn[2];
    int32_t rc = ct_companion_load("loss logitreg", "loss_logitreg_cuda.so", names, fn, 2, err);
    if (rc != CT_OK) return rc;
    self->cu.run = (int32_t (*)(logitreg_cuda **, const ct_loss_batch *, int32_t, float, int32_t,
                                double *, ct_error *))fn[0];
    self->cu.free = (void (*)(logitreg_cuda *))fn[1];
    return CT_OK;
}
#endif

static inline int row_counts(const logitreg *self, int32_t target) {
    return !self->mask_ignored || target >= 0;
}

static int32_t logitreg_forward_backward(void *p, const ct_loss_batch *b, ct_loss_result *out,
                                         ct_error *err) {
    logitreg *self = p;
    if (!b->logits || !b->targets)
        return ct_error_set(err, CT_ERR_INVALID, "loss logitreg: batch without logits or "
                            "targets (a host bug; please report it)");
    const int64_t N = b->n_rows, V = b->vocab;
    const int64_t rows = self->mask_ignored ? b->n_counted : N;
    out->value = 0.0;
    if (rows <= 0 || V <= 0) return CT_OK;
    const double nv = (double)rows * (double)V; /* elements averaged over */

    if (b->device.type == CT_DEVICE_CUDA) {
#ifdef CT_HAVE_CUDA
        double sum = 0.0;
        int32_t rc = logitreg_cuda_load(self, err);
        if (rc != CT_OK) return rc;
        rc = self->cu.run(&self->cuda, b, self->mask_ignored,
                          (float)(2.0 * self->coef * b->grad_scale / nv),
                          b->dlogits != NULL, &sum, err);
        if (rc != CT_OK) return rc;
        out->value = self->coef * sum / nv;
        if (b->dlogits && self->api && self->api->metric)
            self->api->metric(self->host, "loss/logitreg/mean_sq_logit", sum / nv,
                              CT_METRIC_MEAN);
        return CT_OK;
#else
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "loss logitreg: logits on a CUDA device; "
                            "this build of [%s] runs on cpu only ---> rebuild with nvcc, or use "
                            "[device] type = cpu", self->section);
#endif
    }
    double sum_sq = 0.0;
    for (int64_t i = 0; i < N; i++) {
        if (!row_counts(self, b->targets[i])) continue;
        const float *z = b->logits + i * V;
        for (int64_t j = 0; j < V; j++) sum_sq += (double)z[j] * z[j];
    }
    out->value = self->coef * sum_sq / nv;
    if (!b->dlogits) return CT_OK;

    if (self->api && self->api->metric)
        self->api->metric(self->host, "loss/logitreg/mean_sq_logit", sum_sq / nv,
                          CT_METRIC_MEAN);
    const float g = (float)(2.0 * self->coef * b->grad_scale / nv);
    /* rows are independent: each thread owns whole rows, so the result does not depend on
     * the thread count ([device] threads sets it for the rank's thread) */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        if (!row_counts(self, b->targets[i])) continue;
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
    .destroy          = logitreg_destroy,
    .forward_backward = logitreg_forward_backward,
};

static const ct_plugin_desc logitreg_desc = {
    .struct_size       = sizeof(ct_plugin_desc),
    .abi_major         = CT_ABI_MAJOR,
    .abi_minor         = CT_ABI_MINOR,
    .kind              = CT_KIND_LOSS,
    .name              = "logitreg",
    .version           = "1.0.0",
    .summary           = "logit regulariser: coef * mean squared logit (pushes logits to 0)",
    .params            = logitreg_params,
    .param_struct_size = sizeof(ct_param_spec),
    .devices           = LOGITREG_DEVICES,
    .vtable            = &logitreg_vtable,
};

CT_EXPORT const ct_plugin_desc *ctrain_plugin_v1(void) { return &logitreg_desc; }
