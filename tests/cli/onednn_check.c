/* onednn_check.c — the gpt plugin's oneDNN products (plugins/model/gpt/onednn.c, compiled in by
 * tests/cli/test_onednn.sh) against OpenBLAS's sgemm of the same bf16 values widened to f32 (the
 * plugin's other path) and a double-precision product, for every product class of a step: the
 * linear layers forward (x W^T), input gradient (dy W) and weight gradient (dy^T x, added into
 * C), the head by row ranges (strided slices), and attention's per-head products (row stride
 * 3C, alpha = 1/sqrt(HD)). Both f32 results must lie within the f32-accumulation bound
 * gamma_K * sum_k |a_ik b_kj| (+ |C0| when adding) of the exact value, hence within twice that of
 * each other. Also: one primitive per shape, reused. Prints "ok NAME ..." / "FAIL NAME: ..."
 * lines and "N passed, N failed".
 */
#include "../../plugins/model/gpt/onednn.h"

#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

typedef struct {
    const char *name;
    int         ta, tb;
    int64_t     M, N, K, lda, ldb, ldc;
    float       alpha, beta;
} product;

/* Stored rows and columns of op(X) (rows x cols as used). */
static int64_t stored_rows(int trans, int64_t rows, int64_t cols) { return trans ? cols : rows; }

static uint16_t *random_bf16(uint64_t seed, int64_t n, float scale) {
    uint16_t *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = ct_bf16_from_f32(scale * (float)(2.0 * ct_uniform01(seed, (uint64_t)i) - 1.0));
    return x;
}

static float at(const uint16_t *X, int trans, int64_t ld, int64_t r, int64_t c) {
    return ct_bf16_to_f32(trans ? X[c * ld + r] : X[r * ld + c]);
}

static void check(gpt_dnnl *d, const product *p) {
    int64_t ar = stored_rows(p->ta, p->M, p->K), br = stored_rows(p->tb, p->K, p->N);
    uint16_t *A = random_bf16(11, ar * p->lda, 1.0f), *B = random_bf16(12, br * p->ldb, 1.0f);
    float *A32 = malloc((size_t)(ar * p->lda) * sizeof *A32);
    float *B32 = malloc((size_t)(br * p->ldb) * sizeof *B32);
    for (int64_t i = 0; i < ar * p->lda; i++) A32[i] = ct_bf16_to_f32(A[i]);
    for (int64_t i = 0; i < br * p->ldb; i++) B32[i] = ct_bf16_to_f32(B[i]);
    int64_t cn = p->M * p->ldc;
    float *C0 = malloc((size_t)cn * sizeof *C0), *Cd = malloc((size_t)cn * sizeof *Cd);
    float *Cb = malloc((size_t)cn * sizeof *Cb);
    for (int64_t i = 0; i < cn; i++) C0[i] = (float)(ct_uniform01(13, (uint64_t)i) - 0.5);
    memcpy(Cd, C0, (size_t)cn * sizeof *Cd);
    memcpy(Cb, C0, (size_t)cn * sizeof *Cb);
    int rc = gpt_dnnl_gemm(d, CT_DTYPE_BF16, p->ta, p->tb, p->M, p->N, p->K, p->alpha, A, p->lda,
                           B, p->ldb, p->beta, Cd, p->ldc);
    cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans,
                (int)p->M, (int)p->N, (int)p->K, p->alpha, A32, (int)p->lda, B32, (int)p->ldb,
                p->beta, Cb, (int)p->ldc);
    if (rc != 0) {
        printf("FAIL %s: oneDNN refused it: %s\n", p->name, gpt_dnnl_error(d));
        failed++;
        goto out;
    }
    /* gamma_{K+2}: K products summed, the scale and the added C0 (each one rounding) */
    double u = ldexp(1.0, -24), gamma = (double)(p->K + 2) * u / (1.0 - (double)(p->K + 2) * u);
    double worst = 0, worst_pair = 0;
    int64_t bad = -1, outside = 0;
    for (int64_t i = 0; i < p->M; i++)
        for (int64_t j = 0; j < p->N; j++) {
            double exact = 0, mag = 0;
            for (int64_t k = 0; k < p->K; k++) {
                double t = (double)at(A, p->ta, p->lda, i, k) * at(B, p->tb, p->ldb, k, j);
                exact += t;
                mag += fabs(t);
            }
            double c0 = p->beta != 0.0f ? C0[i * p->ldc + j] : 0.0;
            exact = p->alpha * exact + c0;
            double bound = gamma * (fabs((double)p->alpha) * mag + fabs(c0)) + 1e-30;
            double ed = fabs(Cd[i * p->ldc + j] - exact) / bound;
            double eb = fabs(Cb[i * p->ldc + j] - exact) / bound;
            double pair = fabs((double)Cd[i * p->ldc + j] - Cb[i * p->ldc + j]) / (2 * bound);
            if (ed > worst) worst = ed;
            if (pair > worst_pair) worst_pair = pair;
            if ((ed > 1 || eb > 1 || pair > 1) && bad < 0) bad = i * p->ldc + j;
        }
    for (int64_t i = 0; i < p->M; i++) /* columns past N of a strided C stay as they were */
        for (int64_t j = p->N; j < p->ldc; j++)
            outside += Cd[i * p->ldc + j] != C0[i * p->ldc + j];
    if (bad >= 0 || outside) {
        printf("FAIL %s: element %lld: oneDNN %.9g, OpenBLAS %.9g; worst |oneDNN - exact| %.3g "
               "of the f32 bound, worst |oneDNN - OpenBLAS| %.3g of twice it; %lld elements "
               "outside C's columns changed\n", p->name, (long long)(bad < 0 ? 0 : bad),
               Cd[bad < 0 ? 0 : bad], Cb[bad < 0 ? 0 : bad], worst, worst_pair,
               (long long)outside);
        failed++;
    } else {
        printf("ok %s: %lld x %lld x %lld, worst |oneDNN - exact| %.3f of the f32 bound, "
               "|oneDNN - OpenBLAS| %.3f of twice it\n", p->name, (long long)p->M,
               (long long)p->N, (long long)p->K, worst, worst_pair);
        passed++;
    }
out:
    free(A), free(B), free(A32), free(B32), free(C0), free(Cd), free(Cb);
}

int main(void) {
    gpt_dnnl_info in;
    gpt_dnnl_probe(&in);
    printf("onednn_check: oneDNN %s, ISA %s, bf16 %d, amx %d, implementation %s\n", in.version,
           in.isa, in.bf16, in.amx, in.impl);
    gpt_dnnl *d = gpt_dnnl_new(2);
    if (!d) {
        printf("FAIL onednn_context: gpt_dnnl_new returned NULL\n0 passed, 1 failed\n");
        return 1;
    }
    /* N rows = 96, C = 64, 3C = 192, F = 256, V = 300 (head range of 40 rows at row 24, columns
     * sliced by 128 as GPT_VCHUNK slices), HD = 16, a query block of 24 rows over 40 keys */
    const float s = 0.25f; /* 1/sqrt(16) */
    const product ps[] = {
        {"linear_forward_x_wT", 0, 1, 96, 192, 64, 64, 64, 192, 1.0f, 0.0f},
        {"linear_input_grad_dy_w", 0, 0, 96, 64, 256, 256, 64, 64, 1.0f, 0.0f},
        {"linear_weight_grad_dyT_x_added", 1, 0, 256, 64, 96, 256, 64, 64, 1.0f, 1.0f},
        {"head_forward_range", 0, 1, 40, 300, 64, 64, 64, 300, 1.0f, 0.0f},
        {"head_input_grad_slice_added", 0, 0, 40, 64, 128, 128, 64, 64, 1.0f, 1.0f},
        {"head_weight_grad_slice_added", 1, 0, 128, 64, 40, 128, 64, 64, 1.0f, 1.0f},
        {"attention_scores_scaled", 0, 1, 24, 40, 16, 192, 192, 48, s, 0.0f},
        {"attention_p_v", 0, 0, 24, 16, 40, 40, 192, 64, 1.0f, 0.0f},
        {"attention_dv_added", 1, 0, 40, 16, 24, 40, 64, 192, 1.0f, 1.0f},
        {"attention_dp", 0, 1, 24, 40, 16, 64, 192, 40, 1.0f, 0.0f},
        {"attention_dq_scaled", 0, 0, 24, 16, 40, 40, 192, 192, s, 0.0f},
        {"attention_dk_scaled_added", 1, 0, 40, 16, 24, 40, 192, 192, s, 1.0f},
        {"long_inner_dimension", 0, 0, 8, 16, 4096, 4096, 16, 16, 1.0f, 0.0f},
    };
    int n = (int)(sizeof ps / sizeof ps[0]);
    for (int i = 0; i < n; i++) check(d, &ps[i]);
    int made = gpt_dnnl_primitives(d);
    for (int i = 0; i < n; i++) check(d, &ps[i]); /* again: the same primitives */
    if (gpt_dnnl_primitives(d) == made && made == n) {
        printf("ok primitives_created_once_per_shape: %d for %d shapes, none on the second pass\n",
               made, n);
        passed++;
    } else {
        printf("FAIL primitives_created_once_per_shape: %d after one pass, %d after two, %d "
               "shapes\n", made, gpt_dnnl_primitives(d), n);
        failed++;
    }
    gpt_dnnl_free(d);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
