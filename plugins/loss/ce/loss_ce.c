/* loss_ce.c — the `ce` loss term: mean cross-entropy of the next token over counted rows.
 *   value      = (1/n) * sum over counted rows i of (lse_i - z[i, t_i])      n = n_counted
 *   d/dz[i,j]  = (softmax(z_i)_j - [j == t_i]) / n   for counted rows, 0 for ignored rows
 * lse_i is the host's row log-sum-exp (ct_loss_batch.row_lse); softmax is ct_loss_batch.probs
 * when the host gives it (ABI 1.3: the device's row_softmax), else exp(z - lse). The batch may
 * be a range of the micro-batch's rows (forward_backward_rows): n stays the micro-batch's.
 * Runs on host memory (device
 * cpu); batches on a CUDA device go to ce_cuda.cu, in the companion cuda/loss_ce_cuda.so
 * opened on the first such batch when built with nvcc (CT_HAVE_CUDA).
 * Not for: z-loss or logit penalties (loss zloss, loss logitreg).
 * Shape legend: N rows (B*T positions), V vocabulary.
 */
#include <ctrain/ctrain.h>

#include <ctrain/loss_kit.h>
#include <ctrain/numerics.h>

#include <math.h>
#include <stdlib.h>

#ifdef CT_HAVE_CUDA
#include "ce_cuda.h"
#include <ctrain/companion.h>
#define CE_DEVICES (CT_DEVICE_CPU | CT_DEVICE_CUDA)
#else
#define CE_DEVICES CT_DEVICE_CPU
#endif

typedef struct ce_loss {
    const char *section; /* "loss.ce", for messages */
    ct_lkit_cuda *cuda;   /* CUDA scratch, allocated on the first CUDA batch; else NULL */
#ifdef CT_HAVE_CUDA
    ce_cuda_fns cu;       /* the companion cuda/loss_ce_cuda.so, opened on the first CUDA batch */
#endif
} ce_loss;

static void *ce_create(const ct_create_args *args, ct_error *err) {
    ce_loss *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "loss ce: out of memory"), NULL;
    self->section = args->section;
    return self;
}

static void ce_destroy(void *p) {
    ce_loss *self = p;
#ifdef CT_HAVE_CUDA
    if (self && self->cuda) self->cu.free(self->cuda); /* cuda set: cu was resolved */
#endif
    free(self);
}

#ifdef CT_HAVE_CUDA
/* Resolve self->cu on the first CUDA batch (the CPU path never opens the companion). */
static int32_t ce_cuda_load(ce_loss *self, ct_error *err) {
    if (self->cu.forward_backward) return CT_OK;
    static const char *const names[] = CE_CUDA_NAMES;
    static const ct_companion_info want = {sizeof(ct_companion_info), CE_CUDA_INTERFACE,
                                           sizeof(ct_loss_batch)};
    void *fn[2];
    int32_t rc = ct_companion_load("loss ce", "loss_ce_cuda.so", &want, names, fn, 2, err);
    if (rc != CT_OK) return rc;
    self->cu.forward_backward =
        (int32_t (*)(ct_lkit_cuda **, const ct_loss_batch *, double *, ct_error *))fn[0];
    self->cu.free = (void (*)(ct_lkit_cuda *))fn[1];
    return CT_OK;
}
#endif

static int32_t ce_forward_backward(void *p, const ct_loss_batch *b, ct_loss_result *out,
                                   ct_error *err) {
    ce_loss *self = p;
    if (b->device.type == CT_DEVICE_CUDA) {
#ifdef CT_HAVE_CUDA
        if (!b->logits || !b->targets || !b->row_lse)
            return ct_error_set(err, CT_ERR_INVALID, "loss ce: batch without logits, targets or "
                                "row_lse (a host bug; please report it)");
        int32_t rc = ce_cuda_load(self, err);
        if (rc != CT_OK) return rc;
        return self->cu.forward_backward(&self->cuda, b, &out->value, err);
#else
        return ct_lkit_cpu_only("loss ce", self->section, err);
#endif
    }
    if (!b->logits || !b->targets || !b->row_lse)
        return ct_error_set(err, CT_ERR_INVALID, "loss ce: batch without logits, targets or "
                            "row_lse (a host bug; please report it)");
    const int64_t N = b->n_rows, V = b->vocab;
    /* Validate every target before touching dlogits, so a failure adds nothing. */
    for (int64_t i = 0; i < N; i++)
        if (b->targets[i] >= V)
            return ct_error_set(err, CT_ERR_INVALID, "loss ce: target %d at row %lld is outside "
                                "the vocabulary [0, %lld) ---> check that the data's tokenizer "
                                "matches [model] vocab_size",
                                (int)b->targets[i], (long long)(b->row_begin + i), (long long)V);
    out->value = 0.0;
    if (b->n_counted <= 0) return CT_OK;
    const double n = (double)b->n_counted;

    double sum = 0.0;
    for (int64_t i = 0; i < N; i++) {
        int32_t t = b->targets[i];
        if (t < 0) continue;
        sum += (double)b->row_lse[i] - (double)b->logits[i * V + t];
    }
    out->value = sum / n;
    if (!b->dlogits) return CT_OK;

    const float g = (float)(b->grad_scale / n); /* d(value)/d(per-row loss) times grad_scale */
    /* rows are independent: each thread owns whole rows, so the result does not depend on
     * the thread count ([device] threads sets it for the rank's thread) */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        int32_t t = b->targets[i];
        if (t < 0) continue;
        const float *z = b->logits + i * V;
        float *dz = b->dlogits + i * V;
        float lse = b->row_lse[i];
        if (b->probs) { /* the device's softmax, taken with the row statistics */
            const float *pr = b->probs + i * V;
            /* every j as a non-target (p - 0 is p: the same bits), then the target's own term
             * on its old value: one branch-free loop the compiler vectorizes */
            const float dz_t = dz[t];
            for (int64_t j = 0; j < V; j++) dz[j] += g * ct_ce_dlogit_p(pr[j], 0);
            dz[t] = dz_t + g * ct_ce_dlogit_p(pr[t], 1);
        } else {
            for (int64_t j = 0; j < V; j++) dz[j] += g * ct_ce_dlogit(z[j], lse, j == t);
        }
    }
    return CT_OK;
}

static const ct_param_spec ce_params[] = {
    CT_PARAM_END,
};

static const ct_loss_vtable ce_vtable = {
    .struct_size      = sizeof(ct_loss_vtable),
    .create           = ce_create,
    .destroy          = ce_destroy,
    .forward_backward = ce_forward_backward,
    .forward_backward_rows = ce_forward_backward, /* rows are independent given n_counted */
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_LOSS,
    .name    = "ce",
    .version = "1.0.0",
    .summary = "next-token cross-entropy, mean over counted positions",
    .params  = ce_params,
    .devices = CE_DEVICES,
    .vtable  = &ce_vtable)

