/* layers.c — the gpt plugin's layer kernels on the CPU: linear layers through OpenBLAS sgemm
 * (or, for bf16 operands, oneDNN's matmul: gpt_gemm_bf16), norms (layernorm / rmsnorm /
 * gain-only layernorm), the MLP activations (gelu, swiglu), bf16 emulation and the adding of
 * parameter gradients in the host's grad dtype. Forward and backward of each layer sit side by
 * side. Not for: attention (attention.c), stage order (stages.c), oneDNN itself (onednn.c).
 * Shape legend: see gpt.h.
 */
#include "gpt.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

/* Loops over fewer elements than this stay on one thread. */
#define GPT_PAR_MIN 32768

/* ---------------------------------------------------------------------------------------
 * Matrix products
 * ------------------------------------------------------------------------------------- */

static void sgemm1(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                   int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* The tiles of a split product: at most GPT_TILES_MAX tiles of at least GPT_TILE_MIN rows (or
 * columns), a multiple of 16. The split depends on the product's shape only, never on the
 * thread count: OpenBLAS's kernels (Haswell's and Zen's at least) give other bits for an
 * element when the rows around it are split otherwise, so a product split by thread count
 * gave other bits under mpirun (one core per process) than in the threads engine. One thread
 * or sixteen run the same calls on the same tiles, so the bits are the same. */
#define GPT_TILE_MIN  64
#define GPT_TILES_MAX 64

static int64_t tile_len(int64_t len) {
    int64_t per = (len + GPT_TILES_MAX - 1) / GPT_TILES_MAX;
    if (per < GPT_TILE_MIN) per = GPT_TILE_MIN;
    return (per + 15) / 16 * 16;
}

void gpt_sgemm(const gpt *m, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
               int64_t ldc) {
    if ((double)M * (double)N * (double)K < 262144.0) { /* small: one call, whatever the threads */
        sgemm1(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int rows = M >= N; /* split the rows of C (and of op(A)), else its columns (op(B)'s) */
    int64_t len = rows ? M : N, per = tile_len(len), tiles = (len + per - 1) / per;
#pragma omp parallel for num_threads(m->threads) schedule(static) \
    if (m->threads > 1 && tiles > 1 && !omp_in_parallel())
    for (int64_t t = 0; t < tiles; t++) {
        int64_t s = t * per, e = s + per < len ? s + per : len;
        if (rows)
            sgemm1(ta, tb, e - s, N, K, alpha, ta ? A + s : A + s * lda, lda, B, ldb, beta,
                   C + s * ldc, ldc);
        else
            sgemm1(ta, tb, M, e - s, K, alpha, A, lda, tb ? B + s * ldb : B + s, ldb, beta,
                   C + s, ldc);
    }
}

/* ---------------------------------------------------------------------------------------
 * bf16 operands through oneDNN. The operands are the bf16 values the OpenBLAS path widens to
 * f32 and the sums are f32 in both, so only the order of the f32 sums differs.
 * ------------------------------------------------------------------------------------- */

void gpt_to_bf16(const gpt *m, uint16_t *dst, const float *src, int64_t rows, int64_t cols,
                 int64_t ld) {
#pragma omp parallel for num_threads(m->threads) if (rows * cols > GPT_PAR_MIN && !omp_in_parallel()) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) dst[r * cols + j] = ct_bf16_from_f32(src[r * ld + j]);
}

/* The stored matrix of op(X) (M x K when not transposed) widened to a dense f32 copy, for the
 * rare product oneDNN refuses. NULL when out of memory. */
static float *widen(const uint16_t *X, int trans, int64_t rows, int64_t cols, int64_t ld,
                    int64_t *ld_out) {
    int64_t r = trans ? cols : rows, c = trans ? rows : cols; /* as stored */
    float *w = malloc((size_t)(r * c) * sizeof *w);
    if (!w) return NULL;
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++) w[i * c + j] = ct_bf16_to_f32(X[i * ld + j]);
    *ld_out = c;
    return w;
}

void gpt_gemm_bf16(gpt *m, gpt_dnnl *d, int ta, int tb, int64_t M, int64_t N, int64_t K,
                   float alpha, const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                   float beta, float *C, int64_t ldc) {
    assert(beta == 0.0f || beta == 1.0f);
    if (M == 0 || N == 0) return;
    if (d && gpt_dnnl_gemm(d, CT_DTYPE_BF16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
                           ldc) == 0)
        return;
    int first = 0;
#pragma omp atomic capture
    first = m->mm_warned++;
    if (first == 0 && m->api && m->api->log) {
        char msg[320];
        snprintf(msg, sizeof msg, "%s; such products run through OpenBLAS on the same bf16 "
                 "values (slower) ---> report it with the shapes above",
                 d ? gpt_dnnl_error(d) : "no oneDNN context");
        m->api->log(m->host, CT_LOG_WARN, msg);
    }
    int64_t la = 0, lb = 0;
    float *a32 = widen(A, ta, M, K, lda, &la), *b32 = widen(B, tb, K, N, ldb, &lb);
    if (a32 && b32) /* one plain call: this may run inside attention's parallel loop */
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)M, (int)N, (int)K, alpha, a32, (int)la, b32, (int)lb, beta, C, (int)ldc);
    else
        for (int64_t i = 0; i < M; i++) /* out of memory too: NaN, which stops the run */
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = NAN;
    free(a32);
    free(b32);
}

/* ---------------------------------------------------------------------------------------
 * bf16 emulation, weights, gradients
 * ------------------------------------------------------------------------------------- */

void gpt_round_bf16(const gpt *m, float *x, int64_t n) {
#pragma omp parallel for num_threads(m->threads) if (n > GPT_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) x[i] = gpt_round16(m, x[i]);
}

const float *gpt_weights(gpt *m, const ct_stage_args *a, int64_t off, int64_t n) {
    assert(off >= 0);
    if (a->param_dtype == CT_DTYPE_F32) return (const float *)a->params + off;
    assert((a->param_dtype == CT_DTYPE_BF16 || a->param_dtype == CT_DTYPE_F16) && m->wbuf);
    const uint16_t *src = (const uint16_t *)a->params + off;
    float *dst = m->wbuf + off;
    int32_t dt = a->param_dtype;
#pragma omp parallel for num_threads(m->threads) if (n > GPT_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) dst[i] = gpt_h16_to_f32(dt, src[i]);
    return dst;
}

const float *gpt_unit_weights(gpt *m, const ct_stage_args *a, const ct_unit_spec *u, int64_t n) {
    if (!gpt_dnnl_on(m)) return gpt_weights(m, a, 0, n);
    int64_t off = 0; /* the matrices are read as bf16 (gpt_w16): only the vectors are widened */
    for (uint32_t k = 0; k < u->n_tensors; k++) {
        int64_t len = (int64_t)ct_tensor_numel(&u->tensors[k]);
        if (u->tensors[k].ndim < 2) gpt_weights(m, a, off, len);
        off += (int64_t)ct_align_up((uint64_t)len, CT_TENSOR_ALIGN);
    }
    return m->wbuf;
}

/* One gradient element in bf16 or f16 (dt): the sum is formed in f32 and rounded once. */
static inline uint16_t bf16_add(int32_t dt, uint16_t g, float d) {
    return gpt_h16_from_f32(dt, gpt_h16_to_f32(dt, g) + d);
}

void gpt_grad_add(const ct_stage_args *a, int64_t off, const float *d, int64_t n) {
    assert(off >= 0);
    if (a->grad_dtype == CT_DTYPE_F32) {
        float *g = (float *)a->grads + off;
        for (int64_t i = 0; i < n; i++) g[i] += d[i];
    } else {
        uint16_t *g = (uint16_t *)a->grads + off;
        for (int64_t i = 0; i < n; i++) g[i] = bf16_add(a->grad_dtype, g[i], d[i]);
    }
}

/* g[0..n) = bf16(f32(g) + d) (f16 when dt is f16) for the rows of a 16-bit gradient computed
 * in gbuf. */
static void grad_add_bf16(const gpt *m, int32_t dt, uint16_t *g, const float *d, int64_t n) {
#pragma omp parallel for num_threads(m->threads) if (n > GPT_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) g[i] = bf16_add(dt, g[i], d[i]);
}

void gpt_grad_matmul_bf16(gpt *m, const ct_stage_args *a, int64_t off, const uint16_t *dy,
                          int64_t ldy, const uint16_t *x, int64_t ldx, int64_t N, int64_t M,
                          int64_t K) {
    assert(off >= 0);
    if (a->grad_dtype == CT_DTYPE_F32) { /* the product adds straight into the f32 gradient */
        gpt_gemm_bf16(m, m->dnnl, 1, 0, M, K, N, 1.0f, dy, ldy, x, ldx, 1.0f,
                      (float *)a->grads + off, K);
        return;
    }
    int64_t rows = m->gbuf_n / K; /* rows of dW per chunk, as gpt_grad_matmul */
    assert(rows >= 1);
    for (int64_t r0 = 0; r0 < M; r0 += rows) {
        int64_t mr = M - r0 < rows ? M - r0 : rows;
        gpt_gemm_bf16(m, m->dnnl, 1, 0, mr, K, N, 1.0f, dy + r0, ldy, x, ldx, 0.0f, m->gbuf, K);
        grad_add_bf16(m, a->grad_dtype, (uint16_t *)a->grads + off + r0 * K, m->gbuf, mr * K);
    }
}

void gpt_grad_matmul(gpt *m, const ct_stage_args *a, int64_t off, const float *dy, int64_t ldy,
                     const float *x, int64_t ldx, int64_t N, int64_t M, int64_t K) {
    assert(off >= 0);
    if (a->grad_dtype == CT_DTYPE_F32) { /* sgemm adds straight into the f32 gradient */
        gpt_sgemm(m, 1, 0, M, K, N, 1.0f, dy, ldy, x, ldx, 1.0f, (float *)a->grads + off, K);
        return;
    }
    int64_t rows = m->gbuf_n / K; /* rows of dW per chunk */
    assert(rows >= 1);
    for (int64_t r0 = 0; r0 < M; r0 += rows) {
        int64_t mr = M - r0 < rows ? M - r0 : rows;
        gpt_sgemm(m, 1, 0, mr, K, N, 1.0f, dy + r0, ldy, x, ldx, 0.0f, m->gbuf, K);
        grad_add_bf16(m, a->grad_dtype, (uint16_t *)a->grads + off + r0 * K, m->gbuf, mr * K);
    }
}

void gpt_colsum(float *db, const float *dy, int64_t N, int64_t M) {
    for (int64_t j = 0; j < M; j++) db[j] = 0.0f;
    for (int64_t n = 0; n < N; n++) {
        const float *row = dy + n * M;
        for (int64_t j = 0; j < M; j++) db[j] += row[j];
    }
}

/* ---------------------------------------------------------------------------------------
 * Linear layer: y = x W^T + b
 * ------------------------------------------------------------------------------------- */

void gpt_linear_forward(gpt *m, float *y, const float *x, const float *w, const uint16_t *w16,
                        const float *b, int64_t N, int64_t K, int64_t M) {
    if (w16) {
        gpt_to_bf16(m, m->xb, x, N, K, K);
        gpt_gemm_bf16(m, m->dnnl, 0, 1, N, M, K, 1.0f, m->xb, K, w16, K, 0.0f, y, M);
    } else {
        gpt_sgemm(m, 0, 1, N, M, K, 1.0f, x, K, w, K, 0.0f, y, M);
    }
    if (!b) return;
#pragma omp parallel for num_threads(m->threads) if (N * M > GPT_PAR_MIN) schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < M; j++) y[n * M + j] += b[j];
}

void gpt_linear_backward_dx(const gpt *m, float *dx, const float *dy, const float *w, int64_t N,
                            int64_t K, int64_t M, float beta) {
    gpt_sgemm(m, 0, 0, N, K, M, 1.0f, dy, M, w, K, beta, dx, K);
}

/* ---------------------------------------------------------------------------------------
 * Norms. layernorm: y = (x-mean)*rstd*w + b, rstd = 1/sqrt(var + eps) (biased var);
 * gain_only: the same without b; rmsnorm: y = x*rstd*w, rstd = 1/sqrt(mean(x^2) + eps).
 * ------------------------------------------------------------------------------------- */

/* mean and rstd of one row of C values, in f32 as a GPU kernel would form them. */
static inline void norm_stats(int kind, const float *x, int64_t C, float eps, float *mean,
                              float *rstd) {
    float mu = 0.0f;
    if (kind != GPT_NORM_RMSNORM) {
        float s = 0.0f;
        for (int64_t i = 0; i < C; i++) s += x[i];
        mu = s / (float)C;
    }
    float ss = 0.0f;
    for (int64_t i = 0; i < C; i++) ss += (x[i] - mu) * (x[i] - mu);
    *mean = mu;
    *rstd = 1.0f / sqrtf(ss / (float)C + eps);
}

void gpt_norm_forward(const gpt *m, float *y, int64_t ldy, float *mean, float *rstd,
                      const float *x, int64_t ldx, const float *w, const float *b, int64_t N,
                      int64_t C) {
    int kind = m->norm;
    float eps = m->eps;
#pragma omp parallel for num_threads(m->threads) if (N * C > GPT_PAR_MIN) schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * ldx;
        float *yr = y + n * ldy;
        float mu, rs;
        norm_stats(kind, xr, C, eps, &mu, &rs);
        mean[n] = mu;
        rstd[n] = rs;
        for (int64_t i = 0; i < C; i++) yr[i] = (xr[i] - mu) * rs * w[i] + (b ? b[i] : 0.0f);
    }
}

void gpt_norm_backward(const gpt *m, float *dx, int64_t lddx, float *dw, float *db,
                       const float *dy, int64_t lddy, const float *x, int64_t ldx,
                       const float *mean, const float *rstd, const float *w, int64_t N,
                       int64_t C, int add) {
    int kind = m->norm;
    /* parameter gradients first (dy may be overwritten by dx below) */
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * ldx, *dyr = dy + n * lddy;
        float mu = mean[n], rs = rstd[n];
        for (int64_t i = 0; i < C; i++) {
            dw[i] += dyr[i] * (xr[i] - mu) * rs;
            if (db) db[i] += dyr[i];
        }
    }
#pragma omp parallel for num_threads(m->threads) if (N * C > GPT_PAR_MIN) schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * ldx, *dyr = dy + n * lddy;
        float *dxr = dx + n * lddx;
        float mu = mean[n], rs = rstd[n];
        float s_d = 0.0f, s_dx = 0.0f; /* sums of dxhat and dxhat*xhat */
        for (int64_t i = 0; i < C; i++) {
            float xhat = (xr[i] - mu) * rs, dxhat = dyr[i] * w[i];
            s_d += dxhat;
            s_dx += dxhat * xhat;
        }
        float m_d = kind == GPT_NORM_RMSNORM ? 0.0f : s_d / (float)C;
        float m_dx = s_dx / (float)C;
        for (int64_t i = 0; i < C; i++) {
            float xhat = (xr[i] - mu) * rs, dxhat = dyr[i] * w[i];
            float v = rs * (dxhat - m_d - xhat * m_dx);
            dxr[i] = add ? dxr[i] + v : v;
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * MLP activations. The GELU spans vectorize (GPT_VECTOR_CLONES, gpt.h): ct_gelu calls no libm
 * function.
 * ------------------------------------------------------------------------------------- */

#define GPT_ACT_SPAN 4096 /* elements per call of a span function: one thread's unit of work */

GPT_VECTOR_CLONES static void gelu_forward_span(float *g, const float *h, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) g[i] = ct_gelu(h[i]);
}

GPT_VECTOR_CLONES static void gelu_backward_span(float *dh, const float *dg, const float *h,
                                                 int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) dh[i] = dg[i] * ct_gelu_grad(h[i]);
}

void gpt_act_forward(const gpt *m, float *g, const float *h, int64_t N) {
    int64_t F = m->F;
    if (m->mlp == GPT_MLP_GELU) {
        int64_t n = N * F, spans = (n + GPT_ACT_SPAN - 1) / GPT_ACT_SPAN;
#pragma omp parallel for num_threads(m->threads) if (n > GPT_PAR_MIN) schedule(static)
        for (int64_t s = 0; s < spans; s++) {
            int64_t lo = s * GPT_ACT_SPAN, len = n - lo < GPT_ACT_SPAN ? n - lo : GPT_ACT_SPAN;
            gelu_forward_span(g + lo, h + lo, len);
        }
        return;
    }
#pragma omp parallel for num_threads(m->threads) if (N * F > GPT_PAR_MIN) schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *gate = h + n * 2 * F, *up = gate + F;
        for (int64_t j = 0; j < F; j++) g[n * F + j] = ct_silu(gate[j]) * up[j];
    }
}

void gpt_act_backward(const gpt *m, float *dh, const float *dg, const float *h, int64_t N) {
    int64_t F = m->F;
    if (m->mlp == GPT_MLP_GELU) {
        int64_t n = N * F, spans = (n + GPT_ACT_SPAN - 1) / GPT_ACT_SPAN;
#pragma omp parallel for num_threads(m->threads) if (n > GPT_PAR_MIN) schedule(static)
        for (int64_t s = 0; s < spans; s++) {
            int64_t lo = s * GPT_ACT_SPAN, len = n - lo < GPT_ACT_SPAN ? n - lo : GPT_ACT_SPAN;
            gelu_backward_span(dh + lo, dg + lo, h + lo, len);
        }
        return;
    }
#pragma omp parallel for num_threads(m->threads) if (N * F > GPT_PAR_MIN) schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *gate = h + n * 2 * F, *up = gate + F;
        float *dgate = dh + n * 2 * F, *dup = dgate + F;
        for (int64_t j = 0; j < F; j++) {
            float d = dg[n * F + j];
            dgate[j] = d * up[j] * ct_silu_grad(gate[j]);
            dup[j] = d * ct_silu(gate[j]);
        }
    }
}
