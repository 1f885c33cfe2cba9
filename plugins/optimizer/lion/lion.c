/* lion.c — the optimizer plugin `lion`: the update of Chen et al. 2023, "Symbolic Discovery of
 * Optimization Algorithms" (Algorithm 2, decoupled weight decay): c = b1 m + (1 - b1) g,
 * p = p (1 - lr wd) - lr sign(c), m = b2 m + (1 - b2) g; on each shard, element by element.
 * Not for: the schedule, clipping or checkpoints (the host's); devices other than the cpu. */
#include <ctrain/ctrain.h>

#include <stdlib.h>

typedef struct lion {
    float beta1, beta2;
} lion;

static const char *const state[1] = {"exp_avg"};

static void *lion_create(const ct_create_args *a, ct_error *err) {
    double b1 = 0, b2 = 0;
    if (a->api->get_float(a->host, a->section, "beta1", &b1, err) != CT_OK ||
        a->api->get_float(a->host, a->section, "beta2", &b2, err) != CT_OK)
        return NULL;
    lion *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "optimizer lion: out of memory"), NULL;
    self->beta1 = (float)b1;
    self->beta2 = (float)b2;
    return self;
}

static void lion_destroy(void *self) { free(self); }

static int32_t lion_state_names(void *self, uint32_t *n, const char *const **names,
                                ct_error *err) {
    (void)self, (void)err;
    *n = 1;
    *names = state;
    return CT_OK;
}

static inline float sign_of(float x) { return x > 0 ? 1.0f : x < 0 ? -1.0f : 0.0f; }

static inline void lion_element(float *p, float g, float *m, float lr, float wd, float b1,
                                float b2) {
    float c = b1 * *m + (1.0f - b1) * g;
    *p = *p * (1.0f - lr * wd);
    *p = *p - lr * sign_of(c);
    *m = b2 * *m + (1.0f - b2) * g;
}

static int32_t lion_update(void *p, const ct_optim_step *st, const ct_optim_shard *s,
                           ct_error *err) {
    const lion *self = p;
    if (s->n_state != 1)
        return ct_error_set(err, CT_ERR_INVALID, "optimizer lion: %u state buffers given",
                            s->n_state);
    for (uint32_t k = 0; k < s->n_tensors; k++) {
        const ct_optim_tensor *t = &s->tensors[k];
        float lr = st->lr * t->lr_mult;
        float *pp = s->param + t->shard_offset, *m = s->state[0] + t->shard_offset;
        const float *g = s->grad + t->shard_offset;
        for (uint64_t i = 0; i < t->part_numel; i++)
            lion_element(&pp[i], g[i] * st->grad_scale, &m[i], lr, t->weight_decay, self->beta1,
                         self->beta2);
    }
    return CT_OK;
}

static const ct_param_spec lion_params[] = {
    CT_PARAM_FLOAT_X("beta1", "0.9", 0, 1, CT_PARAM_MAX_EXCLUSIVE,
                     "interpolation of the update direction (the paper's beta1)"),
    CT_PARAM_FLOAT_X("beta2", "0.99", 0, 1, CT_PARAM_MAX_EXCLUSIVE,
                     "decay of the momentum (the paper's beta2)"),
    CT_PARAM_END,
};

static const ct_optimizer_vtable lion_vtable = {
    .struct_size = sizeof(ct_optimizer_vtable),
    .create = lion_create,
    .destroy = lion_destroy,
    .state_names = lion_state_names,
    .update = lion_update,
};

CT_DEFINE_PLUGIN(.kind = CT_KIND_OPTIMIZER, .name = "lion", .version = "1.0.0",
                 .summary = "Lion (Chen et al. 2023): sign of interpolated momentum, [optim] lr "
                            "~3-10x below AdamW's",
                 .params = lion_params, .devices = CT_DEVICE_CPU, .vtable = &lion_vtable)
