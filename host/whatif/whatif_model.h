/* whatif_model.h — the predictive model of the head's logit push (docs/logit-growth.md, "A model
 * of the push"): the expected change of the batch-mean logit per SGD step of rate 1 that the
 * reduction's rounding alone causes, from the world size, the vocabulary (its unigram
 * distribution), the tokens per rank, the order and the policy. `ctrain what-if` prints it
 * beside each replay. Not for: measuring (the replay, whatif_replay.h; the probe, probe.h).
 *
 * Two losses of round-to-nearest bf16 partial sums, both of the small push-down terms p_v h
 * that every rank holds for every row v:
 *   swamping   a row whose token is in the batch has, on the rank that saw it, a large term
 *              ~ |h| / T_loc; the small terms (~ q_v |h|) added to a partial sum after it are
 *              dropped when q_v T_loc < tau. The order sets how many come after it: ring
 *              (N - 1) / 2 on average, hier (G - 1) / 2 inside the node plus (N/G - 1) / 2 node
 *              sums of G terms each, trees only the sibling subtrees still below tau.
 *   stagnation a chain of L similar terms in bf16 stops growing after about k* of them: the
 *              ring (L = N) and hier's ring across nodes (L = N / G) lose 1 - k* / L of every
 *              row's small mass; trees do not (their partial sums grow by doubling).
 *   push = |hbar|^2 / V * (a * sum_v q_v P_v lost_v + b * max(0, 1 - k* / L)),
 * P_v = 1 - exp(-T_tot q_v) the chance that token v is in the batch. The unbiased or f32
 * policies (bf16_fp32acc, bf16_sr, amp) are predicted 0: their error has no sign.
 * Valid range: fitted and checked at 1..32 tokens per rank (x1.5 rms); at 64..128 tokens per
 * rank it is off by x6..x30 (its thresholds are sharp where rounding is gradual), so beyond
 * that the replay, not this, is the answer. */
#ifndef CTRAIN_HOST_WHATIF_MODEL_H
#define CTRAIN_HOST_WHATIF_MODEL_H

#include <stdint.h>

/* The fitted constants: scripts/whatif-fit.py on 7 ring replays (docs/logit-growth.md gives
 * the fit, and its error on 16 held-out replays of other orders and batches). */
#define WHATIF_MODEL_A 6.31
#define WHATIF_MODEL_TAU 7.943e-4
#define WHATIF_MODEL_B 0.5012
#define WHATIF_MODEL_KSTAR 384.0

typedef struct whatif_model_in {
    int32_t       N, algo, gpus_per_node, policy; /* gpus_per_node 0: one node */
    int64_t       V;
    double        tokens_per_rank;                /* T_loc; T_tot = N * T_loc */
    double        hbar2;                          /* |mean final hidden state|^2 */
    const double *q;                              /* (V) unigram probabilities; NULL: Zipf
                                                     (q_v proportional to 1 / (v + 1)) */
} whatif_model_in;

/* The predicted logit push per step (> 0: up). */
double whatif_model_push(const whatif_model_in *in);

#endif /* CTRAIN_HOST_WHATIF_MODEL_H */
