/* optim.c — schedule, clipping, parameter groups and the optimizer plugin's update over this
 * rank's shards (see optim.h). Not for: the update's arithmetic (plugins/optimizer/). */
#include "run/optim.h"

#include "base/init.h"
#include "plugin/contract.h"
#include "run/master.h"

#include <ctrain/numerics.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* err = "ORIGIN: [optim] KEY = VALUE: why ---> hint"; returns CT_ERR_INVALID. */
static int32_t bound_error(const host_config *cfg, const char *key, const char *why,
                           const char *hint, ct_error *err) {
    const char *v = config_get(cfg, "optim", key);
    return ct_error_set(err, CT_ERR_INVALID, "%s: [optim] %s = %s: %s ---> %s",
                        config_origin(cfg, "optim", key), key, v ? v : "?", why, hint);
}

int32_t optim_config(const host_config *cfg, host_optim_config *oc, ct_error *err) {
    memset(oc, 0, sizeof *oc);
    const char *sched = "cosine";
    int32_t rc = CT_OK;
    rc |= config_get_float(cfg, "optim", "lr", &oc->lr, err);
    rc |= config_get_float(cfg, "optim", "min_lr", &oc->min_lr, err);
    rc |= config_get_float(cfg, "optim", "beta1", &oc->beta1, err);
    rc |= config_get_float(cfg, "optim", "beta2", &oc->beta2, err);
    rc |= config_get_float(cfg, "optim", "eps", &oc->eps, err);
    rc |= config_get_float(cfg, "optim", "weight_decay", &oc->weight_decay, err);
    rc |= config_get_float(cfg, "optim", "grad_clip", &oc->grad_clip, err);
    rc |= config_get_int(cfg, "optim", "warmup", &oc->warmup, err);
    rc |= config_get_int(cfg, "run", "steps", &oc->steps, err);
    int64_t sched_len = 0; /* absent in a config.ini saved before the key existed */
    if (config_get(cfg, "optim", "schedule_steps"))
        rc |= config_get_int(cfg, "optim", "schedule_steps", &sched_len, err);
    rc |= config_get_string(cfg, "optim", "schedule", &sched, err);
    const char *shape = "linear";
    oc->decay_frac = 0.2;
    if (config_get(cfg, "optim", "decay_frac")) /* absent in an older config.ini */
        rc |= config_get_float(cfg, "optim", "decay_frac", &oc->decay_frac, err);
    if (config_get(cfg, "optim", "decay_shape"))
        rc |= config_get_string(cfg, "optim", "decay_shape", &shape, err);
    if (rc != CT_OK) return err->code ? err->code : CT_ERR_INVALID;
    oc->schedule = strcmp(sched, "linear") == 0 ? 1 : strcmp(sched, "constant") == 0 ? 2
                 : strcmp(sched, "wsd") == 0 ? 3 : 0;
    oc->decay_shape = strcmp(shape, "cosine") == 0 ? 1 : strcmp(shape, "sqrt") == 0 ? 2 : 0;
    oc->sched_steps = sched_len > 0 ? sched_len : oc->steps;
    if (sched_len > 0 && sched_len <= oc->warmup && oc->schedule != 2)
        return bound_error(cfg, "schedule_steps", "must be more than [optim] warmup (the decay "
                           "runs from the end of the warm-up to schedule_steps)",
                           "raise schedule_steps, or set 0 to follow [run] steps", err);
    /* The schema's ranges are closed; what AdamW's arithmetic (f32, ct_adamw_update) needs: */
    static const char *const betas[2] = {"beta1", "beta2"};
    for (int i = 0; i < 2; i++) {
        double b = i ? oc->beta2 : oc->beta1;
        if (!(b >= 0 && b < 1))
            return bound_error(cfg, betas[i],
                               b >= 1 ? "must be < 1 (AdamW's bias correction divides by "
                                        "1 - beta^step = 0, so every weight becomes NaN)"
                                      : "must be in [0, 1)",
                               i ? "use a value in [0, 1), e.g. 0.95"
                                 : "use a value in [0, 1), e.g. 0.9",
                               err);
    }
    if (!(oc->eps > 0))
        return bound_error(cfg, "eps",
                           "must be > 0 (a weight whose gradient is 0 would get 0/0 = NaN)",
                           "use e.g. 1e-8", err);
    if (!((float)oc->eps >= FLT_MIN))
        return bound_error(cfg, "eps",
                           "must be at least 1.1754944e-38, the smallest normal f32 (AdamW runs "
                           "in f32, where a smaller eps is 0 or subnormal)",
                           "use e.g. 1e-8", err);
    if (!(oc->min_lr <= oc->lr)) {
        char hint[160];
        snprintf(hint, sizeof hint, "the schedule decays from lr to min_lr: set min_lr <= %s "
                 "or raise [optim] lr (%s)", config_get(cfg, "optim", "lr"),
                 config_origin(cfg, "optim", "lr"));
        return bound_error(cfg, "min_lr", "must be <= [optim] lr", hint, err);
    }
    return CT_OK;
}

double optim_lr(const host_optim_config *oc, int64_t step) {
    if (oc->schedule == 3) { /* warmup-stable-decay: the decay is the last decay_frac */
        if (step < oc->warmup) return oc->lr * (double)(step + 1) / (double)oc->warmup;
        double len = (double)(oc->sched_steps - oc->warmup);
        double start = (double)oc->sched_steps - oc->decay_frac * len;
        if ((double)step < start) return oc->lr;
        double span = (double)oc->sched_steps - start;
        double f = span > 0 ? ((double)step - start) / span : 1; /* 0 .. 1 through the decay */
        if (f > 1) f = 1;
        double k = oc->decay_shape == 1 ? 0.5 * (1 + cos(3.14159265358979323846 * f))
                 : oc->decay_shape == 2 ? 1 - sqrt(f) : 1 - f; /* what is left of lr - min_lr */
        return oc->min_lr + k * (oc->lr - oc->min_lr);
    }
    if (oc->schedule == 2) {
        if (step < oc->warmup) return oc->lr * (double)(step + 1) / (double)oc->warmup;
        return oc->lr;
    }
    if (oc->schedule == 1) {
        if (step < oc->warmup) return oc->lr * (double)(step + 1) / (double)oc->warmup;
        double frac = (double)(step - oc->warmup) / (double)(oc->sched_steps - oc->warmup);
        if (frac > 1) frac = 1;
        return oc->lr + frac * (oc->min_lr - oc->lr);
    }
    return ct_lr_cosine(step, oc->sched_steps, oc->warmup, (float)oc->lr, (float)oc->min_lr);
}

int32_t optim_allreduce_f64(host_rank *r, double *x, uint64_t n, int32_t op, ct_error *err) {
    if (r->world == 1) return CT_OK;
    /* collectives take device memory: stage through a device buffer */
    double *buf = RANK_DEV(r, alloc, n * sizeof(double), err);
    if (!buf) return err->code;
    int32_t rc = RANK_DEV(r, copy, buf, x, n * sizeof(double), CT_COPY_H2D, err);
    if (rc == CT_OK) rc = RANK_COMM(r, all_reduce, buf, buf, n, CT_DTYPE_F64, op, NULL, err);
    if (rc == CT_OK) rc = RANK_DEV(r, copy, x, buf, n * sizeof(double), CT_COPY_D2H, err);
    RANK_DEV_VOID(r, free_mem, buf);
    return rc;
}

/* Sum of squares over the shards: [0] of sharded units (to be summed over ranks), [1] of
 * replicated ones (identical on every rank: counted once). */
int32_t optim_grad_norm(host_rank *r, double *norm, ct_error *err) {
    double sums[2] = {0, 0};
    for (uint32_t u = 0; u < r->mdesc.n_units; u++) {
        ct_shard sh = {.struct_size = sizeof sh};
        int32_t rc = RANK_STRATEGY(r, shard, u, &sh, err);
        double s = 0;
        if (rc == CT_OK) rc = RANK_DEV(r, sumsq, sh.grad, CT_DTYPE_F32, sh.numel, &s, err);
        if (rc != CT_OK) return rc;
        sums[sh.replicated ? 1 : 0] += s;
    }
    int32_t rc = optim_allreduce_f64(r, sums, 1, CT_REDUCE_SUM, err);
    *norm = sqrt(sums[0] + sums[1]);
    return rc;
}

int32_t optim_check_finite(host_rank *r, int64_t step, ct_error *err) {
    /* sumsq is NaN or Inf exactly when an element is (|x| <= FLT_MAX: x^2 fits a double) */
    double P = 1.0 + r->n_state; /* parts per unit: master, then each state buffer */
    double first = INFINITY; /* P * unit + part of this rank's first non-finite shard */
    int32_t rc = CT_OK;
    for (uint32_t u = 0; u < r->mdesc.n_units && isinf(first) && rc == CT_OK; u++) {
        ct_shard sh = {.struct_size = sizeof sh};
        if ((rc = RANK_STRATEGY(r, shard, u, &sh, err)) != CT_OK) break;
        for (uint32_t k = 0; k <= r->n_state && rc == CT_OK; k++) {
            const float *part = k == 0 ? sh.master : r->units[u].state[k - 1];
            int32_t dt = k == 0 ? r->policy.master_dtype : CT_DTYPE_F32;
            double s = 0;
            rc = RANK_DEV(r, sumsq, part, dt, sh.numel, &s, err);
            if (rc == CT_OK && !isfinite(s)) {
                first = P * u + k;
                break;
            }
        }
    }
    if (rc != CT_OK) return rc;
    if ((rc = optim_allreduce_f64(r, &first, 1, CT_REDUCE_MIN, err)) != CT_OK) return rc;
    if (isinf(first)) return CT_OK;

    /* the first bad tensor of that unit and part over all ranks: 2 * tensor + (NaN ? 1 : 0) */
    uint32_t u = (uint32_t)(first / P);
    int k = (int)(first - P * u);
    ct_shard sh = {.struct_size = sizeof sh};
    if ((rc = RANK_STRATEGY(r, shard, u, &sh, err)) != CT_OK) return rc;
    const float *part = k == 0 ? sh.master : r->units[u].state[k - 1];
    const int32_t dt = k == 0 ? r->policy.master_dtype : CT_DTYPE_F32;
    char part_name[96];
    if (k == 0) snprintf(part_name, sizeof part_name, "master weights");
    else snprintf(part_name, sizeof part_name, "%s state '%s'",
                  r->optimizer.plugin ? r->optimizer.plugin->desc.name : "optimizer",
                  r->state_names[k - 1]);
    const ct_unit_spec *us = &r->mdesc.units[u];
    double which = INFINITY;
    for (uint32_t t = 0; t < us->n_tensors && isinf(which); t++) {
        uint64_t lo = init_tensor_offset(&r->mdesc, u, t);
        uint64_t hi = lo + ct_tensor_numel(init_tensor(&r->mdesc, u, t));
        uint64_t a = lo > sh.offset ? lo : sh.offset;
        uint64_t b = hi < sh.offset + sh.numel ? hi : sh.offset + sh.numel;
        double s = 0;
        if (b <= a) continue;
        const void *at = (const char *)part + (a - sh.offset) * ct_dtype_size(dt);
        if ((rc = RANK_DEV(r, sumsq, at, dt, b - a, &s, err))) return rc;
        if (!isfinite(s)) which = 2.0 * t + (isnan(s) ? 1 : 0);
    }
    if ((rc = optim_allreduce_f64(r, &which, 1, CT_REDUCE_MIN, err)) != CT_OK) return rc;
    const char *tname = "(alignment padding)", *what = "NaN or Inf";
    if (!isinf(which)) {
        uint32_t t = (uint32_t)(which / 2);
        tname = init_tensor(&r->mdesc, u, t)->name;
        what = which - 2.0 * t > 0 ? "NaN" : "Inf";
    }
    return ct_error_set(err, CT_ERR_INVALID,
                        "step %lld: unit %u (%s) tensor '%s' holds %s in its %s; stopped "
                        "before any checkpoint of it was written: the newest checkpoint is the "
                        "last good one ---> lower [optim] lr, check [optim] beta1, beta2 and "
                        "eps (or the optimizer's own keys), then resume with --resume",
                        (long long)step, u, us->name ? us->name : "?", tname, what,
                        part_name);
}

int32_t optim_head_norm(host_rank *r, double *norm, ct_error *err) {
    uint32_t u = (uint32_t)r->mdesc.head_unit;
    ct_shard sh = {.struct_size = sizeof sh};
    int32_t rc = RANK_STRATEGY(r, shard, u, &sh, err);
    if (rc != CT_OK) return rc;
    const ct_tensor_spec *t = init_tensor(&r->mdesc, u, (uint32_t)r->mdesc.head_tensor);
    uint64_t lo = init_tensor_offset(&r->mdesc, u, (uint32_t)r->mdesc.head_tensor);
    uint64_t hi = lo + ct_tensor_numel(t);
    /* the part of the head tensor inside this rank's shard */
    uint64_t a = lo > sh.offset ? lo : sh.offset, b = hi < sh.offset + sh.numel ? hi : sh.offset + sh.numel;
    double s[2] = {0, 0};
    if (b > a) {
        const int32_t dt = r->policy.master_dtype;
        const void *at = (const char *)sh.master + (a - sh.offset) * ct_dtype_size(dt);
        rc = RANK_DEV(r, sumsq, at, dt, b - a, &s[sh.replicated ? 1 : 0], err);
        if (rc != CT_OK) return rc;
    }
    rc = optim_allreduce_f64(r, s, 1, CT_REDUCE_SUM, err);
    *norm = sqrt(s[0] + s[1]);
    return rc;
}

int32_t optim_scale_begin(host_rank *r, ct_error *err) {
    const ct_precision_vtable *pv = r->precision.vt;
    r->loss_scale = 1.0;
    if (!CT_HAS_MEMBER(pv, ct_precision_vtable, loss_scale)) return CT_OK;
    double s = CALLS(r->precision.plugin, "loss_scale", pv->loss_scale(r->precision.self));
    if (!(isfinite(s) && s > 0))
        return ct_error_set(err, CT_ERR_INVALID, "step %lld: precision %s (%s): loss_scale "
                            "returned %g; it must be finite and > 0 ---> report this to the "
                            "plugin's author", (long long)r->step, r->precision.plugin->desc.name,
                            r->precision.plugin->path, s);
    r->loss_scale = s;
    return CT_OK;
}

int32_t optim_unscale(host_rank *r, ct_error *err) {
    if (!(r->loss_scale > 0) || r->loss_scale == 1.0) return CT_OK;
    float inv = (float)(1.0 / r->loss_scale); /* GradScaler's f32 inv_scale */
    for (uint32_t u = 0; u < r->mdesc.n_units; u++) {
        ct_shard sh = {.struct_size = sizeof sh};
        int32_t rc = RANK_STRATEGY(r, shard, u, &sh, err);
        if (rc == CT_OK && sh.numel)
            rc = RANK_DEV(r, scale, sh.grad, CT_DTYPE_F32, sh.numel, inv, err);
        if (rc != CT_OK) return rc;
    }
    return CT_OK;
}

int32_t optim_after_reduce(host_rank *r, double grad_norm, int32_t *skip, ct_error *err) {
    const ct_precision_vtable *pv = r->precision.vt;
    *skip = 0;
    if (!CT_HAS_MEMBER(pv, ct_precision_vtable, after_reduce)) {
        if (!isfinite(grad_norm))
            return ct_error_set(err, CT_ERR_INVALID,
                                "step %lld: gradient norm is %g ---> lower [optim] lr or use "
                                "[optim] grad_clip", (long long)r->step, grad_norm);
        return CT_OK;
    }
    /* one verdict for all ranks: the minimum over ranks of "my gradients are finite" */
    double finite = isfinite(grad_norm) ? 1.0 : 0.0;
    int32_t rc = optim_allreduce_f64(r, &finite, 1, CT_REDUCE_MIN, err);
    if (rc != CT_OK) return rc;
    int32_t sk = 0;
    rc = CALLS(r->precision.plugin, "after_reduce",
               pv->after_reduce(r->precision.self, finite > 0 ? 1 : 0, &sk, err));
    if (rc != CT_OK)
        return contract_name_silent_error(rc, err, r->precision.plugin, "after_reduce");
    if (!(finite > 0) && !sk)
        return ct_error_set(err, CT_ERR_INVALID, "step %lld: gradient norm is %g and precision "
                            "%s did not skip the update ---> lower [optim] lr or use [optim] "
                            "grad_clip", (long long)r->step, grad_norm,
                            r->precision.plugin->desc.name);
    *skip = sk ? 1 : 0;
    return CT_OK;
}

int32_t optim_step(host_rank *r, const host_optim_config *oc, int64_t step, double lr,
                   double grad_norm, int32_t skip, ct_error *err) {
    float clip = 1.0f;
    if (oc->grad_clip > 0 && grad_norm > oc->grad_clip) clip = (float)(oc->grad_clip / grad_norm);
    ct_optim_step args = {
        .struct_size = sizeof args,
        .step = step - r->updates_skipped, /* updates applied, this one included */
        .lr = (float)lr,
        .grad_scale = clip,
        .weight_decay = (float)oc->weight_decay,
        .beta1 = (float)oc->beta1,
        .beta2 = (float)oc->beta2,
        .eps = (float)oc->eps,
    };
    for (uint32_t u = 0; u < r->mdesc.n_units && !skip; u++) {
        ct_shard sh = {.struct_size = sizeof sh};
        int32_t rc = RANK_STRATEGY(r, shard, u, &sh, err);
        if (rc != CT_OK) return rc;
        host_unit_state *us = &r->units[u];
        float *param = sh.master; /* a bf16 master: its exact f32 widening (master.h) */
        if (master_is_low(r) && (rc = master_widen(r, &sh, &param, err)) != CT_OK) return rc;
        ct_optim_shard os = {
            .struct_size = sizeof os,
            .unit = u,
            .unit_name = r->mdesc.units[u].name,
            .param = param,
            .grad = sh.grad,
            .state = us->state,
            .n_state = r->n_state,
            .numel = sh.numel,
            .offset = sh.offset,
            .padded_numel = sh.padded_numel,
            .replicated = sh.replicated,
            .decay_mask = us->decay_mask,
            .n_tensors = r->mdesc.units[u].n_tensors,
            .tensors = us->tensors,
        };
        rc = RANK_OPTIMIZER(r, update, &args, &os, err);
        if (rc != CT_OK) return contract_name_silent_error(rc, err, r->optimizer.plugin, "update");
        if (master_is_low(r) && (rc = master_write_back(r, u, &sh, step, err)) != CT_OK)
            return rc;
    }
    r->updates_skipped += skip;
    return RANK_STRATEGY(r, step_done, err);
}
