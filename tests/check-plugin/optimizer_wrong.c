/* optimizer_wrong.c — a deliberately wrong optimizer for tests/cli/test_check_plugin.sh, built
 * as a third party would build it; plain SGD (p -= lr g) with one mistake chosen by -D:
 *   WRONG_HIDDEN_STATE  keeps a step counter of its own (lr / its count) instead of reading
 *                       ct_optim_step.step: a resumed run would not continue as the saved one;
 *   WRONG_ASCENT        adds the gradient (goes uphill);
 *   WRONG_WRITES_GRAD   scales the gradient in place (the grad buffer is the host's, const).
 * Not for: anything else. */
#include <ctrain/ctrain.h>

#include <stdlib.h>

#if defined(WRONG_HIDDEN_STATE)
#define NAME "hidden_state"
#elif defined(WRONG_ASCENT)
#define NAME "ascent"
#else
#define NAME "writes_grad"
#endif

typedef struct wrong { int64_t count; } wrong;

static void *w_create(const ct_create_args *a, ct_error *err) {
    (void)a;
    wrong *w = calloc(1, sizeof *w);
    if (!w) ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    return w;
}
static void w_destroy(void *self) { free(self); }
static int32_t w_state_names(void *self, uint32_t *n, const char *const **names, ct_error *err) {
    (void)self, (void)names, (void)err;
    *n = 0;
    return CT_OK;
}
static int32_t w_update(void *p, const ct_optim_step *st, const ct_optim_shard *s, ct_error *err) {
    wrong *self = p;
    (void)err;
    float lr = st->lr;
#if defined(WRONG_HIDDEN_STATE)
    lr /= (float)++self->count;
#else
    (void)self;
#endif
    for (uint32_t k = 0; k < s->n_tensors; k++) {
        const ct_optim_tensor *t = &s->tensors[k];
        for (uint64_t i = 0; i < t->part_numel; i++) {
            float g = s->grad[t->shard_offset + i] * st->grad_scale;
#if defined(WRONG_ASCENT)
            s->param[t->shard_offset + i] += lr * g;
#else
            s->param[t->shard_offset + i] -= lr * g;
#endif
#if defined(WRONG_WRITES_GRAD)
            ((float *)s->grad)[t->shard_offset + i] = g * 0.5f;
#endif
        }
    }
    return CT_OK;
}

static const ct_optimizer_vtable w_vtable = {
    .struct_size = sizeof(ct_optimizer_vtable), .create = w_create, .destroy = w_destroy,
    .state_names = w_state_names, .update = w_update,
};
CT_DEFINE_PLUGIN(.kind = CT_KIND_OPTIMIZER, .name = NAME, .version = "0.0.1",
                 .summary = "a wrong optimizer (tests)", .devices = CT_DEVICE_CPU,
                 .vtable = &w_vtable)
