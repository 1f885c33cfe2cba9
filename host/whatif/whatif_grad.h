/* whatif_grad.h — the would-be ranks' local gradients of the output head for `ctrain what-if`:
 * from each token's final hidden state, its logits and log-sum-exp as the model's forward made
 * them, the gradient of the loss (cross-entropy, optionally z-loss) with respect to the head,
 * summed over each rank's share of the tokens; for a part of the vocabulary with every token
 * held (the whole replay), or for a list of rows with the tokens streamed a block at a time
 * (the sampled replay, whatif_sample.h).
 * Not for: running the model (whatif_run.c) or reducing (whatif_replay.h).
 *
 * It follows the gpt plugin's head with bf16 compute (plugins/model/gpt/stages.c): dlogits =
 * bf16((p - y + zcoef * 2 * lse * p) / n_local) with p = expf(logit - lse) in f32, and rank n's
 * gradient row v = bf16(sum over its tokens of dlogits[t, v] * h[t]) (a bf16 local gradient,
 * FSDP's grad_accum_dtype). The sums are formed in f64 in token order where the plugin's sgemm
 * uses f32, so a value can land one bf16 step away from the run's where the f32 result sits
 * next to a rounding boundary (rarely: the figures agree with the run's probe to < 1%,
 * tests/cli/test_whatif.sh); both replays form every value with the same arithmetic, so a row
 * holds the same bits in either. With bf16 = 0 nothing is rounded to bf16 (an f32 run). */
#ifndef CTRAIN_HOST_WHATIF_GRAD_H
#define CTRAIN_HOST_WHATIF_GRAD_H

#include <ctrain/ctrain.h>

typedef struct whatif_batch {
    int64_t        n_tok;   /* tokens of the global batch, in the order the ranks are dealt */
    int64_t        C, V;
    const float   *h;       /* (n_tok, C) final hidden states (bf16 values when bf16) */
    const float   *logits;  /* (n_tok, V) the model's logits (the whole replay only) */
    const int32_t *target;  /* (n_tok) next-token ids */
    const double  *lse;     /* (n_tok) log-sum-exp of each token's logits */
    double         zcoef;   /* z-loss coefficient; 0: cross-entropy only */
    int32_t        bf16;    /* 1: bf16 compute (dlogits and local gradients rounded to bf16) */
} whatif_batch;

/* Token t of rank n of N: tokens [whatif_share_begin(n), whatif_share_begin(n+1)), floor
 * division (shares differ by at most one token). */
int64_t whatif_share_begin(int64_t n_tok, int32_t N, int32_t n);

/* The rank of token t at world size N (the n with share_begin(n) <= t < share_begin(n+1)). */
int32_t whatif_share_of(int64_t n_tok, int32_t N, int64_t t);

/* One token's softmax probability of a row and its dlogit on a rank that averages over its
 * tokens with inv = 1 / n_local: p = expf(logit - lse), d = (p - [target] + zcoef 2 lse p) inv,
 * rounded to bf16 when bf16. */
float whatif_dlogit(float logit, double lse, int is_target, double zcoef, double inv,
                    int32_t bf16, float *p);

/* acc (rows, C) += sum over t < n of d[t * ld + j] * h[t * C + c], in f64, the terms of each
 * element added in t order (so any blocking gives the same bits). */
void whatif_grad_accum(double *acc, int64_t rows, int64_t C, const float *d, int64_t ld,
                       const float *h, int64_t n);

/* Tokens per block of the whole replay's dlogits scratch (dbuf: WHATIF_GRAD_BLOCK * vc floats). */
#define WHATIF_GRAD_BLOCK 256

/* Rows [v0, v0 + vc) of every rank's local head gradient: x[n * vc * C + (v - v0) * C + c] as
 * bf16 bits, n < N. acc: scratch of vc * C doubles; dbuf: of WHATIF_GRAD_BLOCK * vc floats. */
void whatif_grad_part(const whatif_batch *b, int32_t N, int64_t v0, int64_t vc, double *acc,
                      float *dbuf, uint16_t *x);

/* Rows [v0, v0 + vc) of the exact gradient's softmax part, m[(v - v0) * C + c] = sum over the
 * batch's tokens of p[t, v] h[t, c] / n_tok (what z-loss's gradient is proportional to). */
void whatif_grad_softmax_part(const whatif_batch *b, int64_t v0, int64_t vc, double *m,
                              float *dbuf);

#endif /* CTRAIN_HOST_WHATIF_GRAD_H */
