/* step.h — one training step and one evaluation pass of a rank, driving the model stage by
 * stage as DESIGN §2 says: the strategy gathers a unit before its first stage and releases it
 * after its last, the losses add into one dlogits buffer, and a unit's gradient is handed to
 * the strategy as soon as its last backward stage is done. When the model and every loss term
 * take row ranges (ABI 1.3), the head, row statistics, losses and head backward run range by
 * range, so the (N,V) logits never exist at once (docs/architecture.md "Logits by ranges").
 * Not for: the optimizer update (optim.c) or logging (train.c). */
#ifndef CTRAIN_HOST_STEP_H
#define CTRAIN_HOST_STEP_H

#include "run/rank.h"

/* What a step or an eval pass measured on this rank (sums; the caller reduces over ranks). */
typedef struct host_step_stats {
    double         loss_sum;                /* sum over micro-batches of the summed terms */
    double         term_sum[HOST_MAX_LOSS];   /* per term */
    int64_t        micro_batches;
    int64_t        tokens;                  /* tokens processed on this rank */
    ct_logit_stats logits;                  /* accumulated over micro-batches */
} host_step_stats;

/* Forward and backward over grad_accum micro-batches; on return every shard's gradient is the
 * global mean gradient (strategy finish_backward done). */
int32_t step_train(host_rank *r, host_step_stats *stats, ct_error *err);

/* Forward only over `batches` micro-batches of the validation data from its start. */
int32_t step_eval(host_rank *r, int64_t batches, host_step_stats *stats, ct_error *err);

/* Forward only on the host tokens (B*T of them): r->logits (N,V) holds the logits after
 * (`ctrain logits`). A rank whose logits buffer holds one row range gets a whole-batch one. */
int32_t step_logits(host_rank *r, const int32_t *tokens, ct_error *err);

/* One line for the start-up log: the logits' path (row ranges or whole micro-batch), the bytes
 * of logits + dlogits per rank now and with the whole micro-batch, and why not by ranges. */
void step_describe_logits(const host_rank *r, char *out, size_t size);

#endif /* CTRAIN_HOST_STEP_H */
