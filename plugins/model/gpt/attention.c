/* attention.c — causal multi-head self-attention of the gpt plugin on the CPU, and the rotary
 * position embedding. Scores and products go through OpenBLAS sgemm one (batch, head) pair
 * at a time, the pairs spread over OpenMP threads; backward recomputes the probabilities from
 * the saved row log-sum-exp (no (B,NH,T,T) tensor is kept, as in flash attention).
 * Not for: the q/k/v projections (stages.c).
 * Shape legend: see gpt.h. q, k, v of row n, head h are qkv[n*3C + {0,C,2C} + h*HD + d].
 */
#include "gpt.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>

/* ---------------------------------------------------------------------------------------
 * Rotary embedding (open_lm / GPT-NeoX "rotate_half"): within each head, element d and
 * d+HD/2 rotate together by the angle t*theta^(-2d/HD), t the position in the sequence.
 * ------------------------------------------------------------------------------------- */

static inline void rope_pair(float *x1, float *x2, float c, float s) {
    float a = *x1, b = *x2;
    *x1 = a * c - b * s;
    *x2 = b * c + a * s;
}

void gpt_rope(const gpt *m, float *qkv, int64_t N, int inverse) {
    int64_t C = m->C, HD = m->HD, half = HD / 2, T = m->T, NH = m->NH;
#pragma omp parallel for num_threads(m->threads) if (N * C > 32768) schedule(static)
    for (int64_t n = 0; n < N; n++) {
        int64_t t = n % T;
        const float *cs = m->rope_cos + t * half, *sn = m->rope_sin + t * half;
        for (int64_t part = 0; part < 2; part++) /* q, then k */
            for (int64_t h = 0; h < NH; h++) {
                float *x = qkv + n * 3 * C + part * C + h * HD;
                for (int64_t d = 0; d < half; d++) /* backward: the transposed rotation */
                    rope_pair(&x[d], &x[d + half], cs[d], inverse ? -sn[d] : sn[d]);
            }
    }
}

/* ---------------------------------------------------------------------------------------
 * Attention. Forward per (b,h): S = Q K^T / sqrt(HD) (T,T), P = softmax over j <= t,
 * O = P V. Backward: dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(P*dP)),
 * dQ = dS K / sqrt(HD), dK = dS^T Q / sqrt(HD). Both run in blocks of query rows.
 * ------------------------------------------------------------------------------------- */

/* Query rows come in blocks of GPT_ATT_QB: block [r0, r1) only meets keys [0, r1), so the
 * products skip most of the masked upper triangle. */
/* S (r1-r0, r1) = scale * Q[r0:r1] K[0:r1]^T for one (b,h), row stride T; Q, K of stride 3C. */
static void scores(const gpt *m, float *S, const float *Q, const float *K, int64_t r0,
                   int64_t r1) {
    int64_t ld = 3 * m->C;
    float scale = 1.0f / sqrtf((float)m->HD);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(r1 - r0), (int)r1, (int)m->HD,
                scale, Q + r0 * ld, (int)ld, K, (int)ld, 0.0f, S, (int)m->T);
}

/* row[j] = exp(row[j] - lse) for j < n, rounded to bf16 when asked. Vectorizes (ct_exp). */
GPT_VECTOR_CLONES static void exp_span(float *row, int64_t n, float lse, int bf16) {
    if (bf16) {
#pragma omp simd
        for (int64_t j = 0; j < n; j++) row[j] = ct_round_bf16(ct_exp(row[j] - lse));
        return;
    }
#pragma omp simd
    for (int64_t j = 0; j < n; j++) row[j] = ct_exp(row[j] - lse);
}

/* log-sum-exp of row[0..n) (n >= 1): its max, then 16 running sums of exp(row[j] - max) (term j
 * to sum j % 16, folded pairwise, then the tail in order): a fixed order, so the same bits on
 * every machine, and wide enough to vectorize. */
#define GPT_LSE_LANES 16
GPT_VECTOR_CLONES static float row_lse(const float *row, int64_t n) {
    float mx = row[0];
    for (int64_t j = 1; j < n; j++) mx = row[j] > mx ? row[j] : mx;
    float acc[GPT_LSE_LANES] = {0};
    int64_t j = 0;
    for (; j + GPT_LSE_LANES <= n; j += GPT_LSE_LANES)
        for (int l = 0; l < GPT_LSE_LANES; l++) acc[l] += ct_exp(row[j + l] - mx);
    for (int w = GPT_LSE_LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    float sum = acc[0];
    for (; j < n; j++) sum += ct_exp(row[j] - mx);
    return mx + logf(sum);
}

/* P[t,j] = exp(S[t,j] - lse[t]) for j <= t, 0 for t < j < r1 (in place over the block S, rows
 * r0..r1-1); bf16: rounded, as a GPU kernel rounds P before the P V product. Forward and
 * backward call this with the same S and lse, so they see the same bits. */
static void probs(const gpt *m, float *S, const float *lse, int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; t++) {
        float *row = S + (t - r0) * m->T;
        exp_span(row, t + 1, lse[t], m->bf16);
        for (int64_t j = t + 1; j < r1; j++) row[j] = 0.0f;
    }
}

/* The (b,h) pairs are spread over the threads; each thread has its own (GPT_ATT_QB,T) scratch
 * and calls OpenBLAS on its own (single-threaded) products. */
void gpt_attention_forward(gpt *m, float *att, float *lse, const float *qkv) {
    int64_t B = m->B, T = m->T, C = m->C, NH = m->NH, HD = m->HD, ld = 3 * C;
#pragma omp parallel for num_threads(m->threads) schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; bh++) {
        int64_t b = bh / NH, h = bh % NH;
        float *S = m->att_s + (int64_t)omp_get_thread_num() * GPT_ATT_QB * T;
        const float *Q = qkv + b * T * ld + h * HD, *K = Q + C, *V = Q + 2 * C;
        float *O = att + b * T * C + h * HD;
        float *L = lse + (b * NH + h) * T;
        for (int64_t r0 = 0; r0 < T; r0 += GPT_ATT_QB) {
            int64_t r1 = r0 + GPT_ATT_QB < T ? r0 + GPT_ATT_QB : T;
            scores(m, S, Q, K, r0, r1);
            for (int64_t t = r0; t < r1; t++) L[t] = row_lse(S + (t - r0) * T, t + 1); /* j <= t */
            probs(m, S, L, r0, r1);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(r1 - r0), (int)HD,
                        (int)r1, 1.0f, S, (int)T, V, (int)ld, 0.0f, O + r0 * C, (int)C);
        }
    }
}

void gpt_attention_backward(gpt *m, float *dqkv, const float *datt, const float *qkv,
                            const float *lse) {
    int64_t B = m->B, T = m->T, C = m->C, NH = m->NH, HD = m->HD, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)HD);
#pragma omp parallel for num_threads(m->threads) schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; bh++) {
        int64_t b = bh / NH, h = bh % NH;
        float *P = m->att_s + (int64_t)omp_get_thread_num() * GPT_ATT_QB * T;
        float *dP = m->att_dp + (int64_t)omp_get_thread_num() * GPT_ATT_QB * T;
        const float *Q = qkv + b * T * ld + h * HD, *K = Q + C, *V = Q + 2 * C;
        const float *dO = datt + b * T * C + h * HD;
        const float *L = lse + (b * NH + h) * T;
        float *dQ = dqkv + b * T * ld + h * HD, *dK = dQ + C, *dV = dQ + 2 * C;
        for (int64_t t = 0; t < T; t++) /* dK, dV accumulate over query blocks */
            for (int64_t d = 0; d < HD; d++) dK[t * ld + d] = dV[t * ld + d] = 0.0f;
        for (int64_t r0 = 0; r0 < T; r0 += GPT_ATT_QB) {
            int64_t r1 = r0 + GPT_ATT_QB < T ? r0 + GPT_ATT_QB : T;
            int nr = (int)(r1 - r0), nk = (int)r1;
            scores(m, P, Q, K, r0, r1);
            probs(m, P, L, r0, r1);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, (int)HD, nr, 1.0f, P, (int)T,
                        dO + r0 * C, (int)C, 1.0f, dV, (int)ld);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, (int)HD, 1.0f,
                        dO + r0 * C, (int)C, V, (int)ld, 0.0f, dP, (int)T);
            for (int64_t t = r0; t < r1; t++) { /* dS = P * (dP - sum_j P dP), in place of dP */
                const float *p = P + (t - r0) * T;
                float *dp = dP + (t - r0) * T;
                float D = 0.0f;
                for (int64_t j = 0; j <= t; j++) D += p[j] * dp[j];
                for (int64_t j = 0; j <= t; j++) {
                    float ds = p[j] * (dp[j] - D);
                    dp[j] = m->bf16 ? ct_round_bf16(ds) : ds;
                }
                for (int64_t j = t + 1; j < r1; j++) dp[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, (int)HD, nk, scale, dP,
                        (int)T, K, (int)ld, 0.0f, dQ + r0 * ld, (int)ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, (int)HD, nr, scale, dP,
                        (int)T, Q + r0 * ld, (int)ld, 1.0f, dK, (int)ld);
        }
    }
}
