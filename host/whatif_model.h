/* whatif_model.h — the predictive model of the head's logit push (docs/logit-growth.md, "A model
 * of the push"): the expected change of the batch-mean logit per SGD step of rate 1 that the
 * reduction's rounding alone causes, from the world size, the vocabulary, the tokens per rank,
 * the order and the policy. `ctrain what-if` prints it beside each replay.
 * Not for: measuring (the replay, whatif_replay.h; the probe, probe.h). */
#ifndef CTRAIN_HOST_WHATIF_MODEL_H
#define CTRAIN_HOST_WHATIF_MODEL_H

#include <stdint.h>

/* Roundings a pure_bf16 element goes through on its way through the order: ring N - 1,
 * dbtree ~ (G - 1) + ceil(log2(N / G)) on the longest path, hier (G - 1) + (N / G - 1), heap
 * tree ~ log2 N; for the scaled-error model see whatif_model_push. */
double whatif_model_roundings(int32_t N, int32_t algo, int32_t gpus_per_node);

/* The predicted logit push per step (> 0: up), with the fitted constants; hnorm2 is the
 * squared norm of the mean final hidden state (|hbar|^2) and gscale the mean |gradient| of a
 * head element (sum |e| / (V*C)) of the batch, both known to the caller. */
double whatif_model_push(int32_t N, int64_t V, int64_t C, double tokens_per_rank, int32_t algo,
                         int32_t gpus_per_node, int32_t policy, double hnorm2, double gscale);

#endif /* CTRAIN_HOST_WHATIF_MODEL_H */
