/* whatif_grad.h — the would-be ranks' local gradients of the output head for `ctrain what-if`:
 * from the final hidden states of a global batch (one row per token) and the head weight,
 * the gradient of the loss (cross-entropy, optionally z-loss) with respect to the head, summed
 * over each rank's share of the tokens, one part of the vocabulary at a time.
 * Not for: running the model (whatif.c) or reducing (whatif_replay.h).
 *
 * It follows the gpt plugin's head with bf16 compute (plugins/model/gpt/stages.c): logits =
 * bf16(h . w_v), dlogits = bf16((p - y + zcoef * 2 * lse * p) / n_local) with p = softmax
 * in f32, and rank n's gradient row v = bf16(sum over its tokens of dlogits[t, v] * h[t]) (a
 * bf16 local gradient, FSDP's grad_accum_dtype). The sums are formed in f64 where the plugin's
 * sgemm uses f32, so a value can land one bf16 step away from the run's where the f32 result
 * sits next to a rounding boundary (rarely: the figures agree with the run's probe to < 1%,
 * tests/cli/test_whatif.sh). With bf16 = 0 nothing is rounded to bf16 (an f32 run's logits). */
#ifndef CTRAIN_HOST_WHATIF_GRAD_H
#define CTRAIN_HOST_WHATIF_GRAD_H

#include <ctrain/ctrain.h>

typedef struct whatif_batch {
    int64_t        n_tok;   /* tokens of the global batch, in the order the ranks are dealt */
    int64_t        C, V;
    const float   *h;       /* (n_tok, C) final hidden states (bf16 values when bf16) */
    const float   *w;       /* (V, C) head weight as the forward used it */
    const int32_t *target;  /* (n_tok) next-token ids */
    double         zcoef;   /* z-loss coefficient; 0: cross-entropy only */
    int32_t        bf16;    /* 1: bf16 compute (logits and dlogits rounded to bf16) */
    double        *lse;     /* (n_tok) filled by whatif_grad_lse */
} whatif_batch;

/* b->lse[t] = log sum_v exp(logit[t, v]), over the whole vocabulary. */
void whatif_grad_lse(whatif_batch *b);

/* Token t of rank n of N: tokens [whatif_share_begin(n), whatif_share_begin(n+1)), floor
 * division (shares differ by at most one token). */
int64_t whatif_share_begin(int64_t n_tok, int32_t N, int32_t n);

/* Rows [v0, v0 + vc) of every rank's local head gradient: x[n * vc * C + (v - v0) * C + c] as
 * bf16 bits, n < N. acc: scratch of vc * C doubles. */
void whatif_grad_part(const whatif_batch *b, int32_t N, int64_t v0, int64_t vc, double *acc,
                      uint16_t *x);

#endif /* CTRAIN_HOST_WHATIF_GRAD_H */
