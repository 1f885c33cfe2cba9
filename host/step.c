/* step.c — the forward/backward drive of one rank (see step.h). */
#include "step.h"

#include "contract.h"
#include "probe.h"

#include <math.h>
#include <string.h>

/* Load the next micro-batch of `data` into the device's token and target buffers. */
static int32_t load_batch(host_rank *r, host_loader *data, ct_error *err) {
    int32_t rc = loader_next(data, r->h_tokens, r->h_targets, err);
    if (rc != CT_OK) return rc;
    uint64_t bytes = (uint64_t)r->N * sizeof(int32_t);
    rc = r->dev.vt->copy(r->dev.self, r->tokens, r->h_tokens, bytes, CT_COPY_H2D, err);
    if (rc == CT_OK)
        rc = r->dev.vt->copy(r->dev.self, r->targets, r->h_targets, bytes, CT_COPY_H2D, err);
    return rc;
}

static int64_t count_targets(const host_rank *r) {
    int64_t n = 0;
    for (int64_t i = 0; i < r->N; i++) n += r->h_targets[i] >= 0;
    return n;
}

static ct_stage_args stage_args(host_rank *r, int32_t s, int32_t micro) {
    ct_stage_args a = {
        .struct_size = sizeof a,
        .stage = s,
        .param_dtype = r->policy.param_dtype,
        .grad_dtype = r->policy.grad_accum_dtype,
        .tokens = r->tokens,
        .logits = r->logits,
        .dlogits = r->dlogits,
        .micro_step = micro,
    };
    return a;
}

/* Forward through every stage, then row statistics of the logits. */
static int32_t forward(host_rank *r, int32_t micro, ct_logit_stats *ls, ct_error *err) {
    const ct_model_vtable *mv = r->model.vt;
    const ct_strategy_vtable *st = r->strategy.vt;
    int32_t rc = CT_OK;
    for (uint32_t s = 0; s < r->mdesc.n_stages && rc == CT_OK; s++) {
        uint32_t u = (uint32_t)r->mdesc.stages[s].unit;
        /* a unit is gathered before its first stage and released after its last (the root
         * unit is held from embed to head, as FSDP keeps its root unit) */
        if ((int32_t)s == rank_unit_first_stage(r, u))
            rc = st->acquire(r->strategy.self, u, CT_PHASE_FORWARD, &r->held[u], err);
        if (rc != CT_OK) break;
        ct_stage_args a = stage_args(r, (int32_t)s, micro);
        a.params = r->held[u];
        rc = mv->forward(r->model.self, &a, err);
        if ((int32_t)s == rank_unit_last_stage(r, u)) {
            int32_t rc2 = st->release(r->strategy.self, u, CT_PHASE_FORWARD, err);
            if (rc == CT_OK) rc = rc2;
        }
    }
    if (rc != CT_OK) return rc;
    return r->dev.vt->row_stats(r->dev.self, r->logits, r->N, r->V, r->row_max, r->row_lse, ls,
                                err);
}

/* Every loss term on the current logits; dlogits NULL evaluates values only. A term whose
 * value is not finite stops the step here, before the backward pass, the optimizer update and
 * any checkpoint (DESIGN §9 Numbers): the error names the term, the step and the micro-batch. */
static int32_t losses(host_rank *r, int32_t micro, float *dlogits, double grad_scale,
                      host_step_stats *stats, ct_error *err) {
    ct_loss_batch b = {
        .struct_size = sizeof b,
        .logits = r->logits,
        .targets = r->targets,
        .row_max = r->row_max,
        .row_lse = r->row_lse,
        .n_rows = r->N,
        .vocab = r->V,
        .n_counted = count_targets(r),
        .dlogits = dlogits,
        .grad_scale = grad_scale,
        .device = r->dev,
    };
    double total = 0;
    for (int32_t i = 0; i < r->n_loss; i++) {
        const ct_loss_vtable *lv = r->loss[i].vt;
        ct_loss_result res = {.struct_size = sizeof res};
        int32_t rc = lv->forward_backward(r->loss[i].self, &b, &res, err);
        if (rc != CT_OK)
            return contract_name_silent_error(rc, err, r->loss[i].plugin, "forward_backward");
        if (!isfinite(res.value))
            return ct_error_set(err, CT_ERR_INVALID,
                                "%s %lld, micro-batch %d: loss term '%s' is %g ---> the run "
                                "stops before the optimizer step; nothing of this step is "
                                "saved (the newest checkpoint is the last good one). Lower "
                                "[optim] lr or set [optim] grad_clip, or check the term's "
                                "plugin (%s)",
                                dlogits ? "step" : "evaluation after step", (long long)r->step,
                                (int)micro, r->loss_name[i], res.value, r->loss[i].plugin->path);
        stats->term_sum[i] += res.value;
        total += res.value;
    }
    stats->loss_sum += total;
    return CT_OK;
}

static int32_t backward(host_rank *r, int32_t micro, int32_t last, ct_error *err) {
    const ct_model_vtable *mv = r->model.vt;
    const ct_strategy_vtable *st = r->strategy.vt;
    for (int32_t s = (int32_t)r->mdesc.n_stages - 1; s >= 0; s--) {
        uint32_t u = (uint32_t)r->mdesc.stages[s].unit;
        int32_t rc = CT_OK;
        if (s == rank_unit_last_stage(r, u))
            rc = st->acquire(r->strategy.self, u, CT_PHASE_BACKWARD, &r->held[u], err);
        ct_stage_args a = stage_args(r, s, micro);
        a.params = r->held[u];
        if (rc == CT_OK) rc = st->grad_buffer(r->strategy.self, u, &a.grads, err);
        if (rc == CT_OK) rc = mv->backward(r->model.self, &a, err);
        if (rc != CT_OK) return rc;
        /* the unit's last backward stage is its first forward stage: release it and hand
         * its gradient to the strategy (which may start the reduction asynchronously) */
        if (s == rank_unit_first_stage(r, u)) {
            rc = st->release(r->strategy.self, u, CT_PHASE_BACKWARD, err);
            if (rc == CT_OK && last && r->probe_now) rc = probe_unit(r, u, err);
            if (rc == CT_OK) rc = st->unit_backward_done(r->strategy.self, u, last, err);
            if (rc != CT_OK) return rc;
        }
    }
    return CT_OK;
}

int32_t step_train(host_rank *r, host_step_stats *stats, ct_error *err) {
    memset(stats, 0, sizeof *stats);
    stats->logits.struct_size = sizeof stats->logits;
    const ct_strategy_vtable *st = r->strategy.vt;
    int32_t rc = st->begin_step(r->strategy.self, err);
    for (int32_t m = 0; rc == CT_OK && m < r->grad_accum; m++) {
        rc = load_batch(r, r->train_data, err);
        if (rc == CT_OK) rc = forward(r, m, &stats->logits, err);
        if (rc == CT_OK)
            rc = r->dev.vt->zero(r->dev.self, r->dlogits,
                                 (uint64_t)r->N * (uint64_t)r->V * sizeof(float), err);
        if (rc == CT_OK) rc = losses(r, m, r->dlogits, 1.0 / (double)r->grad_accum, stats, err);
        if (rc == CT_OK) rc = backward(r, m, m == r->grad_accum - 1, err);
        stats->micro_batches++;
        stats->tokens += r->N;
    }
    if (rc == CT_OK) rc = st->finish_backward(r->strategy.self, err);
    return rc;
}

int32_t step_eval(host_rank *r, int64_t batches, host_step_stats *stats, ct_error *err) {
    memset(stats, 0, sizeof *stats);
    stats->logits.struct_size = sizeof stats->logits;
    if (!r->val_data) return CT_OK;
    loader_reset(r->val_data);
    for (int64_t b = 0; b < batches; b++) {
        int32_t rc = load_batch(r, r->val_data, err);
        if (rc == CT_OK) rc = forward(r, 0, &stats->logits, err);
        if (rc == CT_OK) rc = losses(r, (int32_t)b, NULL, 1.0, stats, err);
        if (rc != CT_OK) return rc;
        stats->micro_batches++;
        stats->tokens += r->N;
    }
    return CT_OK;
}
