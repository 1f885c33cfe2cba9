/* adamw.c — the optimizer plugin `adamw`: PyTorch's torch.optim.AdamW (decoupled weight decay)
 * on each shard, the per-element update ct_adamw_update of numerics.h, the same bits as the
 * device plugins' adamw member that it replaces as the default optimizer (ABI 1.7).
 * Not for: the schedule, clipping or checkpoints (the host's), other devices' arithmetic (on
 * cuda it calls the device's own adamw kernel, which runs the same per-element function). */
#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { KERNEL_AUTO = 0, KERNEL_PLUGIN = 1, KERNEL_DEVICE = 2 };

typedef struct adamw {
    ct_device_ref dev;
    int           kernel;  /* KERNEL_PLUGIN (this file's loop) or KERNEL_DEVICE */
    int           threads; /* OpenMP threads of the plugin's loop */
} adamw;

static const char *const state[2] = {"m", "v"};

static void *adamw_create(const ct_create_args *a, ct_error *err) {
    const char *kernel = "auto";
    if (a->api->get_string(a->host, a->section, "kernel", &kernel, err) != CT_OK) return NULL;
    adamw *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "optimizer adamw: out of memory"), NULL;
    self->dev = a->device;
    int cpu = a->device.type == CT_DEVICE_CPU;
    self->kernel = !strcmp(kernel, "device") ? KERNEL_DEVICE
                 : !strcmp(kernel, "plugin") ? KERNEL_PLUGIN
                 : cpu ? KERNEL_PLUGIN : KERNEL_DEVICE;
    if (self->kernel == KERNEL_PLUGIN && !cpu) {
        free(self);
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "optimizer adamw: [%s] kernel = plugin runs "
                            "on the cpu device only (its buffers are host memory) ---> use "
                            "kernel = auto or device", a->section), NULL;
    }
    if (self->kernel == KERNEL_DEVICE && (!a->device.vt || !a->device.vt->adamw)) {
        free(self);
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "optimizer adamw: the device plugin has no "
                            "adamw kernel ---> use [%s] kernel = plugin on the cpu device",
                            a->section), NULL;
    }
    /* the device's thread count: [device] threads, 0 = the host's count for the rank */
    int64_t threads = 0, automatic = 1;
    ct_error ignored = {.struct_size = sizeof ignored};
    a->api->get_int(a->host, "device", "threads", &threads, &ignored);
    if (threads <= 0 && a->api->get_int(a->host, "device", "auto_threads", &automatic,
                                        &ignored) == CT_OK)
        threads = automatic;
    self->threads = threads > 0 ? (int)threads : 1;
    return self;
}

static void adamw_destroy(void *self) { free(self); }

static int32_t adamw_state_names(void *self, uint32_t *n, const char *const **names,
                                 ct_error *err) {
    (void)self, (void)err;
    *n = 2;
    *names = state;
    return CT_OK;
}

#define SPAN 4096 /* elements per span: one thread's unit of work */

/* n elements from `at` of the shard; wd applies where mask[i] (mask NULL: everywhere). */
static void adamw_loop(const adamw *self, const ct_optim_shard *s, uint64_t at, uint64_t n,
                       const uint8_t *mask, float lr, float wd, const ct_optim_step *st,
                       float bc1, float bc2) {
    float *p = s->param + at, *m = s->state[0] + at, *v = s->state[1] + at;
    const float *g = s->grad + at;
    float b1 = st->beta1, b2 = st->beta2, eps = st->eps, gs = st->grad_scale;
    int64_t count = (int64_t)n, spans = (count + SPAN - 1) / SPAN;
#pragma omp parallel for schedule(static) num_threads(self->threads) if (count >= 32768)
    for (int64_t sp = 0; sp < spans; sp++) {
        int64_t lo = sp * SPAN, hi = count - lo < SPAN ? count : lo + SPAN;
        if (!mask) {
#pragma omp simd
            for (int64_t i = lo; i < hi; i++)
                ct_adamw_update(&p[i], g[i] * gs, &m[i], &v[i], lr, b1, b2, eps, wd, bc1, bc2);
        } else {
#pragma omp simd
            for (int64_t i = lo; i < hi; i++) {
                float wd_i = mask[at + i] ? wd : 0.0f;
                ct_adamw_update(&p[i], g[i] * gs, &m[i], &v[i], lr, b1, b2, eps, wd_i, bc1, bc2);
            }
        }
    }
}

/* The device's kernel on n elements from `at`. */
static int32_t adamw_device(const adamw *self, const ct_optim_shard *s, uint64_t at, uint64_t n,
                            const uint8_t *mask, float lr, float wd, const ct_optim_step *st,
                            ct_error *err) {
    ct_adamw_args a = {
        .struct_size = sizeof a, .lr = lr, .beta1 = st->beta1, .beta2 = st->beta2,
        .eps = st->eps, .weight_decay = wd, .step = st->step, .grad_scale = st->grad_scale,
    };
    return self->dev.vt->adamw(self->dev.self, s->param + at, s->grad + at, s->state[0] + at,
                               s->state[1] + at, mask ? mask + at : NULL, n, &a, err);
}

static int32_t adamw_update(void *p, const ct_optim_step *st, const ct_optim_shard *s,
                            ct_error *err) {
    adamw *self = p;
    if (st->step < 1)
        return ct_error_set(err, CT_ERR_INVALID, "optimizer adamw: step %lld must be >= 1 (it "
                            "is 1-based, for bias correction)", (long long)st->step);
    if (s->n_state != 2) return ct_error_set(err, CT_ERR_INVALID, "optimizer adamw: %u state "
                                             "buffers given, 2 declared", s->n_state);
    /* Bias corrections in double, as PyTorch computes them on the host. */
    float bc1 = (float)(1.0 - pow((double)st->beta1, (double)st->step));
    float bc2 = (float)(1.0 - pow((double)st->beta2, (double)st->step));
    int uniform = 1; /* every tensor of the shard at lr x 1: one call over the whole shard */
    for (uint32_t k = 0; k < s->n_tensors; k++)
        uniform &= s->tensors[k].part_numel == 0 || s->tensors[k].lr_mult == 1.0f;
    if (uniform) {
        if (self->kernel == KERNEL_DEVICE)
            return adamw_device(self, s, 0, s->numel, s->decay_mask, st->lr, st->weight_decay,
                                st, err);
        adamw_loop(self, s, 0, s->numel, s->decay_mask, st->lr, st->weight_decay, st, bc1, bc2);
        return CT_OK;
    }
    for (uint32_t k = 0; k < s->n_tensors; k++) { /* tensor by tensor, each at its group's lr */
        const ct_optim_tensor *t = &s->tensors[k];
        if (!t->part_numel) continue;
        float lr = st->lr * t->lr_mult;
        if (self->kernel == KERNEL_DEVICE) {
            int32_t rc = adamw_device(self, s, t->shard_offset, t->part_numel, NULL, lr,
                                      t->weight_decay, st, err);
            if (rc != CT_OK) return rc;
        } else {
            adamw_loop(self, s, t->shard_offset, t->part_numel, NULL, lr, t->weight_decay, st,
                       bc1, bc2);
        }
    }
    return CT_OK;
}

static const char *const kernel_choices[] = {"auto", "plugin", "device", NULL};
static const ct_param_spec adamw_params[] = {
    CT_PARAM_ENUM("kernel", "auto", kernel_choices,
                  "plugin: this plugin's loop (cpu); device: the device plugin's adamw kernel "
                  "(the same per-element function); auto: plugin on cpu, device elsewhere"),
    CT_PARAM_END,
};

static const ct_optimizer_vtable adamw_vtable = {
    .struct_size = sizeof(ct_optimizer_vtable),
    .create = adamw_create,
    .destroy = adamw_destroy,
    .state_names = adamw_state_names,
    .update = adamw_update,
};

CT_DEFINE_PLUGIN(.kind = CT_KIND_OPTIMIZER, .name = "adamw", .version = "1.0.0",
                 .summary = "AdamW (torch.optim.AdamW): decoupled decay, [optim] beta1/beta2/eps",
                 .params = adamw_params, .devices = CT_DEVICE_CPU | CT_DEVICE_CUDA,
                 .vtable = &adamw_vtable)
