/* param_norms.h — [run] log_param_norms: the gradient norm of every parameter tensor, for
 * metrics.jsonl ("grad_norm/blocks.0.attn.qkv.weight"). Over ranks: a sharded strategy's
 * shards add their sums of squares (then the square root); a replicated shard counts once.
 * Not for: the global norm and clipping (optim.c). */
#ifndef CTRAIN_HOST_PARAM_NORMS_H
#define CTRAIN_HOST_PARAM_NORMS_H

#include "run/rank.h"

/* Collective (every rank calls it after step_train). Adds one MEAN entry per tensor to *out
 * (identical on every rank). CT_ERR_INVALID when the table cannot hold them all. */
int32_t param_norms_grad(host_rank *r, host_metric_table *out, ct_error *err);

#endif /* CTRAIN_HOST_PARAM_NORMS_H */
