/* signum.c — an optimizer plugin built out of tree through `pkg-config ctrain-sdk` only: Signum
 * (Bernstein et al. 2018, "signSGD: compressed optimisation for non-convex problems"), the sign
 * of a momentum: m = beta m + (1 - beta) g; p = p (1 - lr wd) - lr sign(m). One state buffer per
 * parameter element ("momentum"), which ctrain allocates, checkpoints and reshards; the plugin
 * works element by element, so any shard of any strategy (full_shard's slices included) is
 * updated as the whole would be. Runs on the cpu device (its buffers are host memory there). */
#include <ctrain/ctrain.h>

#include <stdlib.h>

typedef struct signum {
    float beta; /* [optimizer.signum] beta */
} signum;

static const char *const state_names[1] = {"momentum"};

static void *signum_create(const ct_create_args *a, ct_error *err) {
    double beta;
    if (a->api->get_float(a->host, a->section, "beta", &beta, err) != CT_OK) return NULL;
    signum *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "optimizer signum: out of memory"), NULL;
    self->beta = (float)beta;
    return self;
}

static void signum_destroy(void *self) { free(self); }

static int32_t signum_state(void *self, uint32_t *n, const char *const **names, ct_error *err) {
    (void)self, (void)err;
    *n = 1;
    *names = state_names;
    return CT_OK;
}

// Each tensor's part in this shard: its own lr (lr x its group's multiplier) and weight decay
// (0 in the groups without decay: norms, biases).
static int32_t signum_update(void *p, const ct_optim_step *st, const ct_optim_shard *s,
                             ct_error *err) {
    const signum *self = p;
    (void)err;
    for (uint32_t k = 0; k < s->n_tensors; k++) {
        const ct_optim_tensor *t = &s->tensors[k];
        float lr = st->lr * t->lr_mult, keep = 1.0f - lr * t->weight_decay;
        float *w = s->param + t->shard_offset, *m = s->state[0] + t->shard_offset;
        const float *g = s->grad + t->shard_offset;
        for (uint64_t i = 0; i < t->part_numel; i++) {
            m[i] = self->beta * m[i] + (1.0f - self->beta) * (g[i] * st->grad_scale);
            float sign = m[i] > 0 ? 1.0f : m[i] < 0 ? -1.0f : 0.0f;
            w[i] = w[i] * keep - lr * sign;
        }
    }
    return CT_OK;
}

static const ct_param_spec signum_params[] = {
    CT_PARAM_FLOAT_X("beta", "0.9", 0, 1, CT_PARAM_MAX_EXCLUSIVE, "momentum decay"),
    CT_PARAM_END
};
static const ct_optimizer_vtable signum_vtable = {
    .struct_size = sizeof(ct_optimizer_vtable), .create = signum_create,
    .destroy = signum_destroy, .state_names = signum_state, .update = signum_update,
};
CT_DEFINE_PLUGIN(.kind = CT_KIND_OPTIMIZER, .name = "signum", .version = "1.0.0",
                 .summary = "Signum: sign of the momentum (an out-of-tree example)",
                 .params = signum_params, .devices = CT_DEVICE_CPU, .vtable = &signum_vtable)
