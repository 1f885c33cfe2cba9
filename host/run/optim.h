/* optim.h — the optimizer driver: learning-rate schedule, global-norm gradient clipping over
 * all ranks, and the optimizer plugin's update of the shards this rank owns (the plugin does
 * the arithmetic, ABI 1.7; the parameter groups it is given: groups.h).
 * Not for: computing gradients (step.c) or where the shards live (the strategy plugin). */
#ifndef CTRAIN_HOST_OPTIM_H
#define CTRAIN_HOST_OPTIM_H

#include "run/groups.h"
#include "run/rank.h"

#include <stdio.h>

typedef struct host_optim_config {
    double  lr, min_lr, beta1, beta2, eps, weight_decay, grad_clip;
    int64_t warmup, steps;
    int64_t sched_steps; /* the schedule's length: [optim] schedule_steps, or steps when 0 */
    int32_t schedule; /* 0 cosine, 1 linear, 2 constant, 3 wsd (warmup-stable-decay) */
    double  decay_frac;  /* wsd: the decay's share of the schedule's steps after warm-up */
    int32_t decay_shape; /* wsd: 0 linear, 1 cosine, 2 1-sqrt */
} host_optim_config;


/* Read [optim] and [run] steps from the resolved configuration and check the bounds the
 * arithmetic needs beyond the schema's ranges: beta1 and beta2 in [0, 1) (1 divides by
 * 1 - beta^t = 0), eps at least FLT_MIN (a zero or subnormal f32 eps gives 0/0 for a zero
 * gradient), min_lr <= lr. CT_ERR_INVALID with "FILE:LINE: [optim] KEY = VALUE: ..." naming
 * the value's origin. */
int32_t optim_config(const host_config *cfg, host_optim_config *out, ct_error *err);

/* Learning rate at 0-based step `step`, on a schedule of sched_steps steps (past its end the
 * schedule's last value holds). */
double optim_lr(const host_optim_config *oc, int64_t step);

/* Global L2 norm of the gradient over all ranks (each replicated shard counted once).
 * Collective: every rank calls it. */
int32_t optim_grad_norm(host_rank *r, double *norm, ct_error *err);

/* Global L2 norm of the model's output-head weight (the master, f32 or bf16), over all ranks.
 * Collective. */
int32_t optim_head_norm(host_rank *r, double *norm, ct_error *err);

/* Loss scaling owned by the precision policy (ctrain.h ct_precision_vtable.loss_scale):
 * optim_scale_begin sets r->loss_scale to the policy's scale of this step (1 without the
 * member); optim_unscale multiplies every reduced gradient shard by the f32 1/r->loss_scale
 * (GradScaler's inv_scale; nothing when it is 1); optim_after_reduce agrees over ranks (MIN
 * all-reduce) whether the gradients are finite, hands the verdict to the policy's
 * after_reduce and sets *skip as it says. Without after_reduce a non-finite grad_norm is an
 * error, as before. Collective (after_reduce). */
int32_t optim_scale_begin(host_rank *r, ct_error *err);
int32_t optim_unscale(host_rank *r, ct_error *err);
int32_t optim_after_reduce(host_rank *r, double grad_norm, int32_t *skip, ct_error *err);

/* The optimizer plugin's update of every shard with clipping to oc->grad_clip (0 = off; a bf16
 * master is widened to an f32 scratch for it and written back by the policy's rule: master.h), then
 * the strategy's step_done; skip = 1 leaves every shard as it is (a step the policy skipped)
 * and calls step_done only. step is 1-based. */
int32_t optim_step(host_rank *r, const host_optim_config *oc, int64_t step, double lr,
                   double grad_norm, int32_t skip, ct_error *err);

/* Every master weight and optimizer state element of every rank's shards is finite. Collective: every
 * rank calls it and every rank gets the same answer: CT_OK, or CT_ERR_INVALID naming the first
 * bad unit (index and name), tensor, which of master or a named state buffer, NaN or Inf, and
 * `step`. */
int32_t optim_check_finite(host_rank *r, int64_t step, ct_error *err);

/* Sum a vector of doubles over ranks, in place (op a ct_reduce_op). Collective. */
int32_t optim_allreduce_f64(host_rank *r, double *x, uint64_t n, int32_t op, ct_error *err);

#endif /* CTRAIN_HOST_OPTIM_H */
