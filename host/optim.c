/* optim.c — schedule, clipping and AdamW over this rank's shards (see optim.h). */
#include "optim.h"

#include "init.h"

#include <ctrain/numerics.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int32_t optim_config(const ct_config *cfg, ct_optim_config *oc, ct_error *err) {
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
    rc |= config_get_string(cfg, "optim", "schedule", &sched, err);
    if (rc != CT_OK) return err->code ? err->code : CT_ERR_INVALID;
    oc->schedule = strcmp(sched, "linear") == 0 ? 1 : strcmp(sched, "constant") == 0 ? 2 : 0;
    return CT_OK;
}

double optim_lr(const ct_optim_config *oc, int64_t step) {
    if (oc->schedule == 2) {
        if (step < oc->warmup) return oc->lr * (double)(step + 1) / (double)oc->warmup;
        return oc->lr;
    }
    if (oc->schedule == 1) {
        if (step < oc->warmup) return oc->lr * (double)(step + 1) / (double)oc->warmup;
        double frac = (double)(step - oc->warmup) / (double)(oc->steps - oc->warmup);
        if (frac > 1) frac = 1;
        return oc->lr + frac * (oc->min_lr - oc->lr);
    }
    return ct_lr_cosine(step, oc->steps, oc->warmup, (float)oc->lr, (float)oc->min_lr);
}

int32_t optim_allreduce_f64(ct_rank *r, double *x, uint64_t n, int32_t op, ct_error *err) {
    if (r->world == 1) return CT_OK;
    const ct_comm_vtable *cv = r->comm_ref.vt;
    /* collectives take device memory: stage through a device buffer */
    double *buf = r->dev.vt->alloc(r->dev.self, n * sizeof(double), err);
    if (!buf) return err->code;
    int32_t rc = r->dev.vt->copy(r->dev.self, buf, x, n * sizeof(double), CT_COPY_H2D, err);
    if (rc == CT_OK) rc = cv->all_reduce(r->comm_ref.self, buf, buf, n, CT_DTYPE_F64, op, NULL, err);
    if (rc == CT_OK) rc = r->dev.vt->copy(r->dev.self, x, buf, n * sizeof(double), CT_COPY_D2H, err);
    r->dev.vt->free_mem(r->dev.self, buf);
    return rc;
}

/* Sum of squares over the shards: [0] of sharded units (to be summed over ranks), [1] of
 * replicated ones (identical on every rank: counted once). */
int32_t optim_grad_norm(ct_rank *r, double *norm, ct_error *err) {
    const ct_strategy_vtable *st = r->strategy.vt;
    double sums[2] = {0, 0};
    for (uint32_t u = 0; u < r->mdesc.n_units; u++) {
        ct_shard sh = {.struct_size = sizeof sh};
        int32_t rc = st->shard(r->strategy.self, u, &sh, err);
        double s = 0;
        if (rc == CT_OK) rc = r->dev.vt->sumsq(r->dev.self, sh.grad, CT_DTYPE_F32, sh.numel, &s, err);
        if (rc != CT_OK) return rc;
        sums[sh.replicated ? 1 : 0] += s;
    }
    int32_t rc = optim_allreduce_f64(r, sums, 1, CT_REDUCE_SUM, err);
    *norm = sqrt(sums[0] + sums[1]);
    return rc;
}

int32_t optim_head_norm(ct_rank *r, double *norm, ct_error *err) {
    const ct_strategy_vtable *st = r->strategy.vt;
    uint32_t u = (uint32_t)r->mdesc.head_unit;
    ct_shard sh = {.struct_size = sizeof sh};
    int32_t rc = st->shard(r->strategy.self, u, &sh, err);
    if (rc != CT_OK) return rc;
    const ct_tensor_spec *t = init_tensor(&r->mdesc, u, (uint32_t)r->mdesc.head_tensor);
    uint64_t lo = init_tensor_offset(&r->mdesc, u, (uint32_t)r->mdesc.head_tensor);
    uint64_t hi = lo + ct_tensor_numel(t);
    /* the part of the head tensor inside this rank's shard */
    uint64_t a = lo > sh.offset ? lo : sh.offset, b = hi < sh.offset + sh.numel ? hi : sh.offset + sh.numel;
    double s[2] = {0, 0};
    if (b > a) {
        rc = r->dev.vt->sumsq(r->dev.self, sh.master + (a - sh.offset), CT_DTYPE_F32, b - a,
                              &s[sh.replicated ? 1 : 0], err);
        if (rc != CT_OK) return rc;
    }
    rc = optim_allreduce_f64(r, s, 1, CT_REDUCE_SUM, err);
    *norm = sqrt(s[0] + s[1]);
    return rc;
}

int32_t optim_step(ct_rank *r, const ct_optim_config *oc, int64_t step, double lr,
                   double grad_norm, ct_error *err) {
    const ct_strategy_vtable *st = r->strategy.vt;
    float clip = 1.0f;
    if (oc->grad_clip > 0 && grad_norm > oc->grad_clip) clip = (float)(oc->grad_clip / grad_norm);
    ct_adamw_args args = {
        .struct_size = sizeof args,
        .lr = (float)lr,
        .beta1 = (float)oc->beta1,
        .beta2 = (float)oc->beta2,
        .eps = (float)oc->eps,
        .weight_decay = (float)oc->weight_decay,
        .step = step,
        .grad_scale = clip,
    };
    for (uint32_t u = 0; u < r->mdesc.n_units; u++) {
        ct_shard sh = {.struct_size = sizeof sh};
        int32_t rc = st->shard(r->strategy.self, u, &sh, err);
        if (rc == CT_OK)
            rc = r->dev.vt->adamw(r->dev.self, sh.master, sh.grad, r->units[u].m, r->units[u].v,
                                  r->units[u].decay_mask, sh.numel, &args, err);
        if (rc != CT_OK) return rc;
    }
    return st->step_done(r->strategy.self, err);
}
