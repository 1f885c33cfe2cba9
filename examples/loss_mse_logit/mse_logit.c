/* mse_logit.c — an out-of-tree loss plugin: coef * mean over counted rows of mean_v(logit^2).
 * Below this comment, the file is the example at the top of <ctrain/ctrain.h>, line for line
 * (ctrain's tests compare the two). Built only through `pkg-config ctrain-sdk` (see Makefile),
 * exactly as a third party would build it; run.ini beside it is a minimal configuration using
 * it. Not for: real training advice (the built-in logitreg does this with more options).
 * Shapes: N rows (B*T positions), V vocabulary; logits and dlogits are (N,V) row-major.
 */
#include <ctrain/ctrain.h>
#include <stdlib.h>

typedef struct { float coef; } mse_logit;          // one instance per rank

static void *mse_create(const ct_create_args *a, ct_error *err) {
    mse_logit *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "out of memory"), NULL;
    double coef;
    if (a->api->get_float(a->host, a->section, "coef", &coef, err) != CT_OK) {
        free(self); return NULL;
    }
    self->coef = (float)coef;
    return self;
}
static void mse_destroy(void *self) { free(self); }

// value = coef * mean over counted rows of mean_v(logit^2); d/dlogit = 2*coef*logit/(V*rows)
// The batch may be a range of the micro-batch's rows (ABI 1.3, forward_backward_rows):
// b->n_rows rows from row b->row_begin on, while b->n_counted counts the whole
// micro-batch, so the values of its ranges add up to the micro-batch's mean.
static int32_t mse_forward_backward(void *p, const ct_loss_batch *b, ct_loss_result *r,
                                    ct_error *err) {
    mse_logit *self = p; double sum = 0; int64_t rows = b->n_counted;
    (void)err;
    for (int64_t i = 0; i < b->n_rows; i++) {
        if (b->targets[i] < 0) continue;
        for (int64_t j = 0; j < b->vocab; j++) {
            float z = b->logits[i * b->vocab + j]; sum += (double)z * z;
        }
    }
    if (rows == 0) { r->value = 0; return CT_OK; }
    r->value = self->coef * sum / ((double)rows * b->vocab);
    if (!b->dlogits) return CT_OK;                  // evaluation: the value only
    float g = (float)(2.0 * self->coef / ((double)rows * b->vocab) * b->grad_scale);
    for (int64_t i = 0; i < b->n_rows; i++) {
        if (b->targets[i] < 0) continue;
        for (int64_t j = 0; j < b->vocab; j++)
            b->dlogits[i * b->vocab + j] += g * b->logits[i * b->vocab + j];
    }
    return CT_OK;
}

static const ct_param_spec mse_params[] = {
    CT_PARAM_FLOAT("coef", "1e-4", 0.0, 1e3, "weight of the term"),
    CT_PARAM_END
};
static const ct_loss_vtable mse_vtable = {
    .struct_size = sizeof(ct_loss_vtable), .create = mse_create,
    .destroy = mse_destroy, .forward_backward = mse_forward_backward,
    .forward_backward_rows = mse_forward_backward, // rows are independent: ranges work
};
CT_DEFINE_PLUGIN(.kind = CT_KIND_LOSS, .name = "mse_logit", .version = "1.0.0",
                 .summary = "mean squared logit penalty", .params = mse_params,
                 .devices = CT_DEVICE_CPU, .vtable = &mse_vtable)
