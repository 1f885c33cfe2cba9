/* whatif_grad.c — the would-be ranks' local head gradients (see whatif_grad.h).
 * Not for: the model's forward (whatif_run.c) or the reduction replay (whatif_replay.c).
 *
 * Shapes: C channels, V vocabulary rows, n tokens; d (n, ld) dlogits of the rows being formed,
 * h (n, C) hidden states, acc (rows, C) f64 sums.
 */
#include "whatif/whatif_grad.h"

#include <ctrain/numerics.h>
#include <math.h>

/* The accumulation loop in AVX-512, AVX2 and baseline code (cpuid picks one when ctrain
 * starts); the same bits in each: every product of two floats is exact in f64 and each
 * element's sum is taken in t order, without FMA contraction (ISO C). */
#define WHATIF_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

#define RB 4  /* rows per register block */
#define CB 32 /* channels per register block */

int64_t whatif_share_begin(int64_t n_tok, int32_t N, int32_t n) {
    return n_tok * n / N;
}

int32_t whatif_share_of(int64_t n_tok, int32_t N, int64_t t) {
    int32_t n = (int32_t)((t * N) / n_tok); /* a first guess, at most one off */
    while (n > 0 && whatif_share_begin(n_tok, N, n) > t) n--;
    while (n + 1 < N && whatif_share_begin(n_tok, N, n + 1) <= t) n++;
    return n;
}

float whatif_dlogit(float logit, double lse, int is_target, double zcoef, double inv,
                    int32_t bf16, float *p) {
    float pv = expf((float)((double)logit - lse));
    double g = (double)pv - (is_target ? 1.0 : 0.0) + zcoef * 2.0 * lse * pv;
    float d = (float)(g * inv);
    if (p) *p = pv;
    return bf16 ? ct_round_bf16(d) : d;
}

/* RB rows x CB channels held in registers over all n tokens. */
WHATIF_CLONES static void accum_tile(double *acc, int64_t C, const float *d, int64_t ld,
                                     const float *h, int64_t n) {
    double a[RB][CB], hv[CB];
    for (int r = 0; r < RB; r++)
        for (int c = 0; c < CB; c++) a[r][c] = acc[r * C + c];
    for (int64_t t = 0; t < n; t++) {
        const float *ht = h + t * C;
        for (int c = 0; c < CB; c++) hv[c] = ht[c];
        for (int r = 0; r < RB; r++) {
            double dv = d[t * ld + r];
            for (int c = 0; c < CB; c++) a[r][c] += dv * hv[c];
        }
    }
    for (int r = 0; r < RB; r++)
        for (int c = 0; c < CB; c++) acc[r * C + c] = a[r][c];
}

void whatif_grad_accum(double *acc, int64_t rows, int64_t C, const float *d, int64_t ld,
                       const float *h, int64_t n) {
    int64_t rf = rows - rows % RB, cf = C - C % CB;
    for (int64_t j = 0; j < rf; j += RB)
        for (int64_t c = 0; c < cf; c += CB) accum_tile(acc + j * C + c, C, d + j, ld, h + c, n);
    /* the edges: rows past the last full block, channels past the last full block */
    for (int64_t j = 0; j < rows; j++)
        for (int64_t t = 0; t < n; t++) {
            double dv = d[t * ld + j];
            const float *ht = h + t * C;
            for (int64_t c = j < rf ? cf : 0; c < C; c++) acc[j * C + c] += dv * ht[c];
        }
}

/* dbuf (n, vc): the dlogits of rows [v0, v0 + vc) for tokens [t0, t0 + n) (inv = 0: the
 * softmax probabilities themselves). */
static void dlogits(const whatif_batch *b, int64_t t0, int64_t n, int64_t v0, int64_t vc,
                    double inv, float *dbuf) {
    for (int64_t t = 0; t < n; t++) {
        const float *lg = b->logits + (t0 + t) * b->V + v0;
        int32_t y = b->target[t0 + t];
        for (int64_t j = 0; j < vc; j++) {
            float p;
            float d = whatif_dlogit(lg[j], b->lse[t0 + t], y == v0 + j, b->zcoef, inv ? inv : 1.0,
                                    b->bf16, &p);
            dbuf[t * vc + j] = inv ? d : p;
        }
    }
}

void whatif_grad_part(const whatif_batch *b, int32_t N, int64_t v0, int64_t vc, double *acc,
                      float *dbuf, uint16_t *x) {
    int64_t C = b->C;
    for (int32_t n = 0; n < N; n++) {
        int64_t t0 = whatif_share_begin(b->n_tok, N, n), t1 = whatif_share_begin(b->n_tok, N, n + 1);
        double inv = t1 > t0 ? 1.0 / (double)(t1 - t0) : 0.0; /* the rank's mean over its tokens */
        for (int64_t i = 0; i < vc * C; i++) acc[i] = 0;
        for (int64_t t = t0; t < t1; t += WHATIF_GRAD_BLOCK) {
            int64_t k = t1 - t < WHATIF_GRAD_BLOCK ? t1 - t : WHATIF_GRAD_BLOCK;
            dlogits(b, t, k, v0, vc, inv, dbuf);
            whatif_grad_accum(acc, vc, C, dbuf, vc, b->h + t * C, k);
        }
        uint16_t *xn = x + (uint64_t)n * (uint64_t)(vc * C);
        for (int64_t i = 0; i < vc * C; i++) xn[i] = ct_bf16_from_f32((float)acc[i]);
    }
}

void whatif_grad_softmax_part(const whatif_batch *b, int64_t v0, int64_t vc, double *m,
                              float *dbuf) {
    for (int64_t i = 0; i < vc * b->C; i++) m[i] = 0;
    for (int64_t t = 0; t < b->n_tok; t += WHATIF_GRAD_BLOCK) {
        int64_t k = b->n_tok - t < WHATIF_GRAD_BLOCK ? b->n_tok - t : WHATIF_GRAD_BLOCK;
        dlogits(b, t, k, v0, vc, 0.0, dbuf);
        whatif_grad_accum(m, vc, b->C, dbuf, vc, b->h + t * b->C, k);
    }
    for (int64_t i = 0; i < vc * b->C; i++) m[i] /= (double)b->n_tok;
}
