/* step.c — the forward/backward drive of one rank (see step.h). */
#include "run/step.h"

#include "plugin/contract.h"
#include "run/probe.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Load the next micro-batch of `data` (NULL: the training mixture, r->train_mix) into the
 * device's token and target buffers. */
static int32_t load_batch(host_rank *r, host_loader *data, ct_error *err) {
    const char *was = calls_host_op("reading the data");
    int32_t rc = data ? loader_next(data, r->h_tokens, r->h_targets, err)
                      : mixture_next(r->train_mix, r->h_tokens, r->h_targets, err);
    calls_host_op(was);
    if (rc != CT_OK) return rc;
    uint64_t bytes = (uint64_t)r->N * sizeof(int32_t);
    rc = RANK_DEV(r, copy, r->tokens, r->h_tokens, bytes, CT_COPY_H2D, err);
    if (rc == CT_OK)
        rc = RANK_DEV(r, copy, r->targets, r->h_targets, bytes, CT_COPY_H2D, err);
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
        .train = r->training,
        .doc_mask = r->doc_mask,
        .eot_token = r->doc_mask ? r->eot_token : 0,
        .step = r->training ? r->step : 0,
        .seed = r->training ? r->seed : 0,
    };
    return a;
}

/* Forward through stages [0, end): a unit is gathered before its first stage and released
 * after its last (the root unit is held from embed to head, as FSDP keeps its root unit; with
 * end short of the head it stays held). */
static int32_t forward_stages(host_rank *r, int32_t micro, uint32_t end, ct_error *err) {
    int32_t rc = CT_OK;
    for (uint32_t s = 0; s < end && rc == CT_OK; s++) {
        uint32_t u = (uint32_t)r->mdesc.stages[s].unit;
        if ((int32_t)s == rank_unit_first_stage(r, u))
            rc = RANK_STRATEGY(r, acquire, u, CT_PHASE_FORWARD, &r->held[u], err);
        if (rc != CT_OK) break;
        ct_stage_args a = stage_args(r, (int32_t)s, micro);
        a.params = r->held[u];
        rc = RANK_MODEL(r, forward, &a, err);
        if ((int32_t)s == rank_unit_last_stage(r, u)) {
            int32_t rc2 = RANK_STRATEGY(r, release, u, CT_PHASE_FORWARD, err);
            if (rc == CT_OK) rc = rc2;
        }
    }
    return rc;
}

/* Forward through every stage, then row statistics of the whole (N,V) logits. */
static int32_t forward(host_rank *r, int32_t micro, ct_logit_stats *ls, ct_error *err) {
    int32_t rc = forward_stages(r, micro, r->mdesc.n_stages, err);
    if (rc != CT_OK) return rc;
    return RANK_DEV(r, row_stats, r->logits, r->N, r->V, r->row_max, r->row_lse, ls,
                    err);
}

/* Every loss term on rows [row0, row0 + rows) of the micro-batch, whose logits are r->logits
 * (rows,V) (row0 = 0, rows = N: the whole micro-batch, each term's forward_backward; else a
 * range, forward_backward_rows); dlogits NULL evaluates values only. A term whose value is not
 * finite stops the step here, before the backward pass, the optimizer update and any
 * checkpoint (DESIGN §9 Numbers): the error names the term, the step and the micro-batch. */
static int32_t losses(host_rank *r, int32_t micro, int64_t row0, int64_t rows, int64_t counted,
                      float *dlogits, double grad_scale, host_step_stats *stats, ct_error *err) {
    int whole = row0 == 0 && rows == r->N; /* forward_backward, as before ABI 1.3 */
    ct_loss_batch b = {
        .struct_size = sizeof b,
        .logits = r->logits,
        .targets = r->targets + row0,
        .row_max = r->row_max + row0,
        .row_lse = r->row_lse + row0,
        .n_rows = rows,
        .vocab = r->V,
        .n_counted = counted,
        .dlogits = dlogits,
        .grad_scale = grad_scale,
        .device = r->dev,
        .row_begin = row0,
        .batch_rows = r->N,
        .probs = whole ? NULL : r->probs, /* the ranges' softmax (micro_by_ranges) */
    };
    double total = 0;
    for (int32_t i = 0; i < r->n_loss; i++) {
        ct_loss_result res = {.struct_size = sizeof res};
        int32_t rc = whole ? RANK_LOSS(r, i, forward_backward, &b, &res, err)
                           : RANK_LOSS(r, i, forward_backward_rows, &b, &res, err);
        if (rc != CT_OK)
            return contract_name_silent_error(rc, err, r->loss[i].plugin,
                                              whole ? "forward_backward" : "forward_backward_rows");
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

/* Unit u's last backward stage is done: release it and hand its gradient to the strategy
 * (which may start the reduction asynchronously); the probe looks at it first. */
static int32_t unit_done(host_rank *r, uint32_t u, int32_t last, ct_error *err) {
    int32_t rc = RANK_STRATEGY(r, release, u, CT_PHASE_BACKWARD, err);
    if (rc == CT_OK && last && r->probe_now) rc = probe_unit(r, u, err);
    if (rc == CT_OK) rc = RANK_STRATEGY(r, unit_backward_done, u, last, err);
    return rc;
}

/* Backward through stages top, top-1, ..., 0. A unit is gathered at its last forward stage
 * (unless top is below it: the caller gathered it) and finished at its first. */
static int32_t backward(host_rank *r, int32_t micro, int32_t last, int32_t top, ct_error *err) {
    for (int32_t s = top; s >= 0; s--) {
        uint32_t u = (uint32_t)r->mdesc.stages[s].unit;
        int32_t rc = CT_OK;
        if (s == rank_unit_last_stage(r, u))
            rc = RANK_STRATEGY(r, acquire, u, CT_PHASE_BACKWARD, &r->held[u], err);
        ct_stage_args a = stage_args(r, s, micro);
        a.params = r->held[u];
        if (rc == CT_OK) rc = RANK_STRATEGY(r, grad_buffer, u, &a.grads, err);
        if (rc == CT_OK) rc = RANK_MODEL(r, backward, &a, err);
        if (rc == CT_OK && s == rank_unit_first_stage(r, u)) rc = unit_done(r, u, last, err);
        if (rc != CT_OK) return rc;
    }
    return CT_OK;
}

/* One micro-batch by row ranges (ABI 1.3, ctrain.h "Row ranges"): the stages below the head
 * forward as usual; then for each range of r->chunk_rows rows the head's forward writes the
 * range's logits into r->logits, the device takes their row statistics (with row_softmax,
 * when the device has it, also their softmax into r->probs, so each logit's exponential is
 * taken once for the statistics and every term), every loss term adds
 * its value and (training: dlogits non-NULL) its gradient, and the head's backward adds the
 * range's head gradient; then the stages below the head backward as usual. In training the
 * head's unit is gathered once for the backward phase (as the whole path gathers it for the
 * head's backward) and both the head's forward and backward use it. */
static int32_t micro_by_ranges(host_rank *r, int32_t micro, int32_t train, int32_t last,
                               double grad_scale, host_step_stats *stats, ct_error *err) {
    int32_t head = (int32_t)r->mdesc.n_stages - 1;
    uint32_t u = (uint32_t)r->mdesc.stages[head].unit;
    int32_t phase = train ? CT_PHASE_BACKWARD : CT_PHASE_FORWARD;
    int held_before = rank_unit_first_stage(r, u) < head; /* held since an earlier stage */
    int32_t rc = forward_stages(r, micro, (uint32_t)head, err);
    /* the head is the unit's last forward stage: its forward hold ends here in training */
    if (rc == CT_OK && held_before && train)
        rc = RANK_STRATEGY(r, release, u, CT_PHASE_FORWARD, err);
    if (rc == CT_OK && (train || !held_before))
        rc = RANK_STRATEGY(r, acquire, u, phase, &r->held[u], err);
    if (rc != CT_OK) return rc;
    ct_stage_args a = stage_args(r, head, micro);
    a.params = r->held[u];
    if (train) rc = RANK_STRATEGY(r, grad_buffer, u, &a.grads, err);
    int64_t counted = count_targets(r);
    for (int64_t row0 = 0; rc == CT_OK && row0 < r->N; row0 += r->chunk_rows) {
        int64_t rows = r->N - row0 < r->chunk_rows ? r->N - row0 : r->chunk_rows;
        uint64_t bytes = (uint64_t)rows * (uint64_t)r->V * sizeof(float);
        a.row_begin = row0;
        a.row_count = rows;
        rc = RANK_MODEL(r, forward, &a, err);
        if (rc == CT_OK && r->probs) /* exponentials once: the softmax with the statistics */
            rc = RANK_DEV(r, row_softmax, r->logits, rows, r->V, r->row_max + row0,
                          r->row_lse + row0, r->probs, &stats->logits, err);
        else if (rc == CT_OK)
            rc = RANK_DEV(r, row_stats, r->logits, rows, r->V, r->row_max + row0,
                          r->row_lse + row0, &stats->logits, err);
        if (rc == CT_OK && train) rc = RANK_DEV(r, zero, r->dlogits, bytes, err);
        if (rc == CT_OK)
            rc = losses(r, micro, row0, rows, counted, train ? r->dlogits : NULL, grad_scale,
                        stats, err);
        if (rc == CT_OK && train) rc = RANK_MODEL(r, backward, &a, err);
    }
    if (rc != CT_OK) return rc;
    if (!train) return RANK_STRATEGY(r, release, u, CT_PHASE_FORWARD, err);
    if (!held_before && (rc = unit_done(r, u, last, err)) != CT_OK) return rc;
    return backward(r, micro, last, head - 1, err);
}

int32_t step_train(host_rank *r, host_step_stats *stats, ct_error *err) {
    memset(stats, 0, sizeof *stats);
    stats->logits.struct_size = sizeof stats->logits;
    int32_t rc = RANK_STRATEGY(r, begin_step, err);
    r->training = 1; /* stage_args: ct_stage_args.train, step, seed */
    /* the policy's loss scale multiplies the loss gradient (a power of two: exact) */
    double scale = 1.0 / (double)r->grad_accum * (r->loss_scale > 0 ? r->loss_scale : 1.0);
    for (int32_t m = 0; rc == CT_OK && m < r->grad_accum; m++) {
        int32_t last = m == r->grad_accum - 1;
        rc = load_batch(r, r->train_data, err);
        if (rc == CT_OK && r->chunk_train) {
            rc = micro_by_ranges(r, m, 1, last, scale, stats, err);
        } else {
            if (rc == CT_OK) rc = forward(r, m, &stats->logits, err);
            if (rc == CT_OK)
                rc = RANK_DEV(r, zero, r->dlogits,
                              (uint64_t)r->N * (uint64_t)r->V * sizeof(float), err);
            if (rc == CT_OK)
                rc = losses(r, m, 0, r->N, count_targets(r), r->dlogits, scale, stats, err);
            if (rc == CT_OK) rc = backward(r, m, last, (int32_t)r->mdesc.n_stages - 1, err);
        }
        stats->micro_batches++;
        stats->tokens += r->N;
    }
    r->training = 0;
    if (rc == CT_OK) rc = RANK_STRATEGY(r, finish_backward, err);
    return rc;
}

int32_t step_eval(host_rank *r, int64_t batches, host_step_stats *stats, ct_error *err) {
    memset(stats, 0, sizeof *stats);
    stats->logits.struct_size = sizeof stats->logits;
    if (!r->val_data) return CT_OK;
    loader_reset(r->val_data);
    for (int64_t b = 0; b < batches; b++) {
        int32_t rc = load_batch(r, r->val_data, err);
        if (rc == CT_OK && r->chunk_eval) {
            rc = micro_by_ranges(r, (int32_t)b, 0, 0, 1.0, stats, err);
        } else {
            if (rc == CT_OK) rc = forward(r, 0, &stats->logits, err);
            if (rc == CT_OK)
                rc = losses(r, (int32_t)b, 0, r->N, count_targets(r), NULL, 1.0, stats, err);
        }
        if (rc != CT_OK) return rc;
        stats->micro_batches++;
        stats->tokens += r->N;
    }
    return CT_OK;
}

int32_t step_logits(host_rank *r, const int32_t *tokens, ct_error *err) {
    ct_logit_stats ls = {.struct_size = sizeof ls};
    if (r->logit_rows < r->N) { /* the logits of every row at once: a whole-batch buffer */
        uint64_t bytes = (uint64_t)r->N * (uint64_t)r->V * sizeof(float);
        float *full = RANK_DEV(r, alloc, bytes, err);
        if (!full)
            return ct_error_set(err, CT_ERR_NOMEM, "out of memory for the whole micro-batch's "
                                "logits (%llu bytes) ---> lower [data] batch_size or seq_len",
                                (unsigned long long)bytes);
        RANK_DEV_VOID(r, free_mem, r->logits);
        r->logits = full;
        r->logit_rows = r->N;
    }
    memcpy(r->h_tokens, tokens, (size_t)r->N * sizeof *tokens);
    int32_t rc = RANK_DEV(r, copy, r->tokens, r->h_tokens,
                          (uint64_t)r->N * sizeof(int32_t), CT_COPY_H2D, err);
    if (rc == CT_OK) rc = forward(r, 0, &ls, err);
    return rc;
}

void step_describe_logits(const host_rank *r, char *out, size_t size) {
    double whole = 2.0 * (double)r->N * (double)r->V * sizeof(float);
    double now = 2.0 * (double)r->logit_rows * (double)r->V * sizeof(float);
    double probs = r->probs ? (double)r->chunk_rows * (double)r->V * sizeof(float) : 0;
    if (r->chunk_train)
        snprintf(out, size, "logits: ranges of %lld rows: logits + dlogits%s %.1f MB per rank "
                 "(whole micro-batch: %.1f MB)", (long long)r->chunk_rows,
                 r->probs ? " + softmax" : "", (now + probs) / 1e6, whole / 1e6);
    else
        snprintf(out, size, "logits: whole micro-batch (%lld rows): logits + dlogits %.1f MB per "
                 "rank%s%s%s", (long long)r->N, now / 1e6, r->chunk_eval ? "; evaluation by "
                 "ranges" : "", r->chunk_why[0] ? "; " : "", r->chunk_why);
}
