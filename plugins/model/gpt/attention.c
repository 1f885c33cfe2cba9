/* attention.c — causal multi-head self-attention of the gpt plugin on the CPU, and the rotary
 * position embedding. Scores and products go through OpenBLAS sgemm one (batch, head) pair
 * at a time, the pairs spread over OpenMP threads; backward recomputes the probabilities from
 * the saved row log-sum-exp (no (B,NH,T,T) tensor is kept, as in flash attention). On the
 * oneDNN path (m->use_dnnl, bf16) the same products take the same bf16 values as bf16 bits,
 * each OpenMP thread with its own one-thread oneDNN context (m->dnnl_att).
 * Document masking narrows row t's keys to doc_start[t]..t (the probabilities of the keys before
 * are 0); dropout of the probabilities (m->drop_on) multiplies P by its mask and 1/(1-p) before
 * P V, and backward takes the same mask from dropout.h.
 * Not for: the q/k/v projections (stages.c).
 * Shape legend: see gpt.h. q of row n, head h is qkv[n*QW + h*HD + d]; its key and value are
 * those of key head kh = h / (NH/KVH): qkv[n*QW + C + kh*HD + d] and qkv[n*QW + C + KC + kh*HD + d]
 * (with KVH = NH: the layout of 3C-wide rows, q|k|v).
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
    int64_t C = m->C, HD = m->HD, half = HD / 2, T = m->T, NH = m->NH, QW = m->QW;
#pragma omp parallel for num_threads(m->threads) if (N * C > 32768) schedule(static)
    for (int64_t n = 0; n < N; n++) {
        int64_t t = n % T;
        const float *cs = m->rope_cos + t * half, *sn = m->rope_sin + t * half;
        for (int64_t part = 0; part < 2; part++) /* q (NH heads), then k (KVH heads) */
            for (int64_t h = 0; h < (part ? m->KVH : NH); h++) {
                float *x = qkv + n * QW + part * C + h * HD;
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
/* row[j] = exp(row[j] - lse) for j < n, rounded to bf16 (h16 1) or f16 (h16 2) when asked.
 * Vectorizes (ct_exp). */
GPT_VECTOR_CLONES static void exp_span(float *row, int64_t n, float lse, int h16) {
    if (h16 == 1) {
#pragma omp simd
        for (int64_t j = 0; j < n; j++) row[j] = ct_round_bf16(ct_exp(row[j] - lse));
        return;
    }
    if (h16 == 2) {
#pragma omp simd
        for (int64_t j = 0; j < n; j++) row[j] = ct_round_f16(ct_exp(row[j] - lse));
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

/* P[t,j] = exp(S[t,j] - lse[t]) for ds[t] <= j <= t, 0 for the other j < r1 (in place over the
 * block S, rows r0..r1-1; ds the rows' document starts, all 0 without document masking); bf16:
 * rounded, as a GPU kernel rounds P before the P V product. Forward and backward call this with
 * the same S and lse, so they see the same bits. */
static void probs(const gpt *m, float *S, const float *lse, const int32_t *ds, int64_t r0,
                  int64_t r1) {
    for (int64_t t = r0; t < r1; t++) {
        float *row = S + (t - r0) * m->T;
        int64_t s0 = ds[t];
        for (int64_t j = 0; j < s0; j++) row[j] = 0.0f;
        exp_span(row + s0, t + 1 - s0, lse[t], m->bf16 ? 1 + m->f16 : 0);
        for (int64_t j = t + 1; j < r1; j++) row[j] = 0.0f;
    }
}

/* Pd = P after dropout, rows r0..r1-1 of the block (stride T), keys [0, r1): element
 * ((b*NH + h)*T + t)*T + j of the layer's site (site_key), bh = b*NH + h; rounded to the 16-bit
 * compute dtype when round (the probabilities a GPU stores; not their gradient). */
static void drop_probs(const gpt *m, float *Pd, const float *P, uint64_t site_key, int64_t bh,
                       int64_t r0, int64_t r1, int round) {
    int64_t T = m->T;
    for (int64_t t = r0; t < r1; t++)
        gpt_dropout_span(m, Pd + (t - r0) * T, P + (t - r0) * T, r1, site_key,
                         ((uint64_t)bh * (uint64_t)T + (uint64_t)t) * (uint64_t)T, round);
}

/* One product of a (b,h) pair inside the parallel loop: C (M,N) = alpha op(A) op(B) + beta C.
 * OpenBLAS on the f32 operands A, B; or, when d (the calling thread's oneDNN context) is not
 * NULL, oneDNN on A16, B16, the same values as bf16 bits. */
static void att_gemm(gpt *m, gpt_dnnl *d, int ta, int tb, int64_t M, int64_t N, int64_t K,
                     float alpha, const float *A, const uint16_t *A16, int64_t lda,
                     const float *B, const uint16_t *B16, int64_t ldb, float beta, float *C,
                     int64_t ldc) {
    if (d) {
        gpt_gemm_bf16(m, d, ta, tb, M, N, K, alpha, A16, lda, B16, ldb, beta, C, ldc);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* The calling thread's oneDNN context and bf16 scratch (2 x GPT_ATT_QB x T: P, then dS), or
 * NULL on the OpenBLAS path. */
static gpt_dnnl *att_context(const gpt *m, uint16_t **scratch) {
    *scratch = NULL;
    if (!gpt_dnnl_on(m)) return NULL;
    int t = omp_get_thread_num();
    *scratch = m->att_b + (int64_t)t * 2 * GPT_ATT_QB * m->T;
    return m->dnnl_att[t];
}

/* The (b,h) pairs are spread over the threads; each thread has its own (GPT_ATT_QB,T) scratch
 * and calls OpenBLAS on its own (single-threaded) products. */
void gpt_attention_forward(gpt *m, float *att, float *lse, const float *qkv, int64_t layer) {
    int64_t B = m->B, T = m->T, C = m->C, NH = m->NH, HD = m->HD, ld = m->QW, KC = m->KC;
    int64_t G = NH / m->KVH; /* query heads per key/value head */
    float scale = 1.0f / sqrtf((float)HD);
    int dnnl = gpt_dnnl_on(m);
    uint64_t site_key = m->drop_on ? gpt_drop_site_key(m->drop_key, GPT_DROP_SITE_ATT(layer)) : 0;
    if (dnnl) gpt_to_bf16(m, m->qkvb, qkv, m->N, ld, ld);
#pragma omp parallel for num_threads(m->threads) schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; bh++) {
        int64_t b = bh / NH, h = bh % NH;
        float *S = m->att_s + (int64_t)omp_get_thread_num() * GPT_ATT_QB * T;
        uint16_t *P16;
        gpt_dnnl *c = att_context(m, &P16);
        int64_t at = b * T * ld + h * HD;                 /* Q of (b,h) */
        int64_t ak = b * T * ld + C + (h / G) * HD;       /* K of its key head; V at +KC */
        const float *Q = qkv + at, *K = qkv + ak, *V = K + KC;
        const uint16_t *Q16 = dnnl ? m->qkvb + at : NULL, *K16 = dnnl ? m->qkvb + ak : NULL;
        const uint16_t *V16 = dnnl ? K16 + KC : NULL;
        float *O = att + b * T * C + h * HD;
        float *L = lse + (b * NH + h) * T;
        for (int64_t r0 = 0; r0 < T; r0 += GPT_ATT_QB) {
            int64_t r1 = r0 + GPT_ATT_QB < T ? r0 + GPT_ATT_QB : T, nr = r1 - r0;
            /* S (nr, r1) = scale Q[r0:r1] K[0:r1]^T: the block meets keys [0, r1) only */
            att_gemm(m, c, 0, 1, nr, r1, HD, scale, Q + r0 * ld, dnnl ? Q16 + r0 * ld : NULL, ld,
                     K, K16, ld, 0.0f, S, T);
            const int32_t *ds = m->doc_start + b * T; /* keys ds[t] <= j <= t */
            for (int64_t t = r0; t < r1; t++)
                L[t] = row_lse(S + (t - r0) * T + ds[t], t + 1 - ds[t]);
            probs(m, S, L, ds, r0, r1);
            if (m->drop_on) drop_probs(m, S, S, site_key, bh, r0, r1, 1); /* in place */
            if (P16) gpt_to_bf16(m, P16, S, nr, r1, T);
            att_gemm(m, c, 0, 0, nr, HD, r1, 1.0f, S, P16, P16 ? r1 : T, V, V16, ld, 0.0f,
                     O + r0 * C, C);
        }
    }
}

/* The (b, key head) pairs are spread over the threads: the G query heads of a key head add
 * into its dK, dV in turn (head order), so no two threads write the same element. */
void gpt_attention_backward(gpt *m, float *dqkv, const float *datt, const float *qkv,
                            const float *lse, int64_t layer) {
    int64_t B = m->B, T = m->T, C = m->C, NH = m->NH, HD = m->HD, ld = m->QW, KC = m->KC;
    int64_t KVH = m->KVH, G = NH / KVH;
    float scale = 1.0f / sqrtf((float)HD);
    int dnnl = gpt_dnnl_on(m);
    uint64_t site_key = m->drop_on ? gpt_drop_site_key(m->drop_key, GPT_DROP_SITE_ATT(layer)) : 0;
    if (dnnl) { /* q, k, v and dO as bf16 bits, once */
        gpt_to_bf16(m, m->qkvb, qkv, m->N, ld, ld);
        gpt_to_bf16(m, m->yb, datt, m->N, C, C);
    }
#pragma omp parallel for num_threads(m->threads) schedule(dynamic, 1)
    for (int64_t bk = 0; bk < B * KVH; bk++) {
        int64_t b = bk / KVH, kh = bk % KVH;
        int64_t ak = b * T * ld + C + kh * HD; /* K of (b,kh); V at +KC */
        float *dK = dqkv + ak, *dV = dK + KC;
        for (int64_t t = 0; t < T; t++) /* dK, dV accumulate over query blocks and heads */
            for (int64_t d = 0; d < HD; d++) dK[t * ld + d] = dV[t * ld + d] = 0.0f;
        for (int64_t h = kh * G; h < (kh + 1) * G; h++) {
            float *P = m->att_s + (int64_t)omp_get_thread_num() * GPT_ATT_QB * T;
            float *dP = m->att_dp + (int64_t)omp_get_thread_num() * GPT_ATT_QB * T;
            /* the probabilities that multiplied v: P itself, or P after dropout */
            float *Pv = m->drop_on ? m->att_pd + (int64_t)omp_get_thread_num() * GPT_ATT_QB * T
                                   : P;
            const int32_t *ds = m->doc_start + b * T;
            int64_t bh = b * NH + h;
            uint16_t *P16;
            gpt_dnnl *c = att_context(m, &P16);
            uint16_t *dS16 = P16 ? P16 + GPT_ATT_QB * T : NULL;
            int64_t at = b * T * ld + h * HD, ao = b * T * C + h * HD;
            const float *Q = qkv + at, *K = qkv + ak, *V = K + KC;
            const uint16_t *Q16 = dnnl ? m->qkvb + at : NULL, *K16 = dnnl ? m->qkvb + ak : NULL;
            const uint16_t *V16 = dnnl ? K16 + KC : NULL, *dO16 = dnnl ? m->yb + ao : NULL;
            const float *dO = datt + ao;
            const float *L = lse + (b * NH + h) * T;
            float *dQ = dqkv + at;
            for (int64_t r0 = 0; r0 < T; r0 += GPT_ATT_QB) {
                int64_t r1 = r0 + GPT_ATT_QB < T ? r0 + GPT_ATT_QB : T, nr = r1 - r0, nk = r1;
                att_gemm(m, c, 0, 1, nr, r1, HD, scale, Q + r0 * ld,
                         dnnl ? Q16 + r0 * ld : NULL, ld, K, K16, ld, 0.0f, P, T);
                probs(m, P, L, ds, r0, r1);
                if (m->drop_on) drop_probs(m, Pv, P, site_key, bh, r0, r1, 1);
                if (P16) gpt_to_bf16(m, P16, Pv, nr, nk, T);
                int64_t ldp = P16 ? nk : T; /* the bf16 copies are dense */
                /* dV[0:nk] += Pv^T dO[r0:r1] */
                att_gemm(m, c, 1, 0, nk, HD, nr, 1.0f, Pv, P16, ldp, dO + r0 * C,
                         dnnl ? dO16 + r0 * C : NULL, C, 1.0f, dV, ld);
                /* dP (nr, nk) = dO[r0:r1] V[0:nk]^T */
                att_gemm(m, c, 0, 1, nr, nk, HD, 1.0f, dO + r0 * C, dnnl ? dO16 + r0 * C : NULL, C,
                         V, V16, ld, 0.0f, dP, T);
                if (m->drop_on) /* dP so far is d/dPv: through the mask, d/dP */
                    drop_probs(m, dP, dP, site_key, bh, r0, r1, 0);
                for (int64_t t = r0; t < r1; t++) { /* dS = P * (dP - sum_j P dP), in place of dP */
                    const float *p = P + (t - r0) * T;
                    float *dp = dP + (t - r0) * T;
                    float D = 0.0f;
                    int64_t s0 = ds[t]; /* p is 0 before the row's document */
                    for (int64_t j = 0; j < s0; j++) dp[j] = 0.0f;
                    for (int64_t j = s0; j <= t; j++) D += p[j] * dp[j];
                    for (int64_t j = s0; j <= t; j++) {
                        float ds = p[j] * (dp[j] - D);
                        dp[j] = m->bf16 ? gpt_round16(m, ds) : ds;
                    }
                    for (int64_t j = t + 1; j < r1; j++) dp[j] = 0.0f;
                }
                if (dS16) gpt_to_bf16(m, dS16, dP, nr, nk, T);
                /* dQ[r0:r1] = scale dS K[0:nk]; dK[0:nk] += scale dS^T Q[r0:r1] */
                att_gemm(m, c, 0, 0, nr, HD, nk, scale, dP, dS16, ldp, K, K16, ld, 0.0f,
                         dQ + r0 * ld, ld);
                att_gemm(m, c, 1, 0, nk, HD, nr, scale, dP, dS16, ldp, Q + r0 * ld,
                         dnnl ? Q16 + r0 * ld : NULL, ld, 1.0f, dK, ld);
            }
        }
    }
}
