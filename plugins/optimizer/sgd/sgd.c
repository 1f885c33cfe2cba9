/* sgd.c — the optimizer plugin `sgd`: torch.optim.SGD (momentum, dampening, nesterov, weight
 * decay added to the gradient as an L2 term) on each shard, element by element.
 * Not for: the schedule, clipping or checkpoints (the host's); devices other than the cpu
 * (its buffers are read as host memory). */
#include <ctrain/ctrain.h>

#include <stdlib.h>

typedef struct sgd {
    float momentum, dampening;
    int32_t nesterov;
} sgd;

static const char *const state[1] = {"momentum_buffer"};

static void *sgd_create(const ct_create_args *a, ct_error *err) {
    double mom = 0, damp = 0;
    int32_t nest = 0;
    if (a->api->get_float(a->host, a->section, "momentum", &mom, err) != CT_OK ||
        a->api->get_float(a->host, a->section, "dampening", &damp, err) != CT_OK ||
        a->api->get_bool(a->host, a->section, "nesterov", &nest, err) != CT_OK)
        return NULL;
    if (nest && (mom <= 0 || damp != 0))
        return ct_error_set(err, CT_ERR_INVALID, "[%s] nesterov = true needs momentum > 0 and "
                            "dampening = 0 (as torch.optim.SGD) ---> set momentum, e.g. 0.9, "
                            "and dampening = 0", a->section), NULL;
    sgd *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "optimizer sgd: out of memory"), NULL;
    self->momentum = (float)mom;
    self->dampening = (float)damp;
    self->nesterov = nest;
    return self;
}

static void sgd_destroy(void *self) { free(self); }

static int32_t sgd_state_names(void *p, uint32_t *n, const char *const **names, ct_error *err) {
    (void)err;
    const sgd *self = p;
    *n = self->momentum != 0 ? 1 : 0;
    *names = state;
    return CT_OK;
}

/* One element: torch.optim.SGD's _single_tensor_sgd. first: the buffer is created (step 1). */
static inline void sgd_element(float *p, float g, float *buf, float lr, float wd, float mom,
                               float damp, int32_t nesterov, int first) {
    float d = wd != 0 ? g + wd * *p : g;
    if (buf) {
        *buf = first ? d : mom * *buf + (1.0f - damp) * d;
        d = nesterov ? d + mom * *buf : *buf;
    }
    *p = *p + -lr * d;
}

static int32_t sgd_update(void *p, const ct_optim_step *st, const ct_optim_shard *s,
                          ct_error *err) {
    const sgd *self = p;
    if (s->n_state != (self->momentum != 0 ? 1u : 0u))
        return ct_error_set(err, CT_ERR_INVALID, "optimizer sgd: %u state buffers given",
                            s->n_state);
    int first = st->step == 1;
    for (uint32_t k = 0; k < s->n_tensors; k++) {
        const ct_optim_tensor *t = &s->tensors[k];
        float lr = st->lr * t->lr_mult, wd = t->weight_decay;
        float *pp = s->param + t->shard_offset, *buf = s->n_state ? s->state[0] + t->shard_offset : NULL;
        const float *g = s->grad + t->shard_offset;
        for (uint64_t i = 0; i < t->part_numel; i++)
            sgd_element(&pp[i], g[i] * st->grad_scale, buf ? &buf[i] : NULL, lr, wd,
                        self->momentum, self->dampening, self->nesterov, first);
    }
    return CT_OK;
}

static const ct_param_spec sgd_params[] = {
    CT_PARAM_FLOAT_X("momentum", "0.9", 0, 1, CT_PARAM_MAX_EXCLUSIVE,
                     "momentum factor (0 = plain SGD, no state)"),
    CT_PARAM_FLOAT("dampening", "0", 0, 1, "dampening of the momentum (torch's)"),
    CT_PARAM_BOOL("nesterov", "false", "Nesterov momentum (needs momentum > 0, dampening 0)"),
    CT_PARAM_END,
};

static const ct_optimizer_vtable sgd_vtable = {
    .struct_size = sizeof(ct_optimizer_vtable),
    .create = sgd_create,
    .destroy = sgd_destroy,
    .state_names = sgd_state_names,
    .update = sgd_update,
};

CT_DEFINE_PLUGIN(.kind = CT_KIND_OPTIMIZER, .name = "sgd", .version = "1.0.0",
                 .summary = "SGD with momentum / nesterov (torch.optim.SGD; decay as L2)",
                 .params = sgd_params, .devices = CT_DEVICE_CPU, .vtable = &sgd_vtable)
