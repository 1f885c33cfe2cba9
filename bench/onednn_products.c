/* onednn_products.c — one training step's matrix products, per shape class, four ways in the
 * same minute: OpenBLAS split over the threads as the gpt plugin splits them (layers.c,
 * gpt_sgemm), oneDNN's f32 matmul primitive and its dnnl_sgemm (both on oneDNN's own threads),
 * and oneDNN's bf16 x bf16 -> f32 matmul (the plugin's onednn.c, which this file is built with).
 * Classes: the linear layers' forward (x W^T), input gradient (dy W) and weight gradient
 * (dy^T x, added), the head's forward, input gradient and weight gradient by 256-row ranges.
 * The ways alternate inside each repetition and each keeps its best of REPS (a descheduled
 * thread only slows a run), so one sitting compares them fairly. Not for: training (the model
 * chooses by [model] bf16_matmul); the f32-vs-bf16 question is in the bf16 column.
 *
 *   cc -O2 -fopenmp -DGPT_HAVE_ONEDNN -Isdk/include -Ihost bench/onednn_products.c \
 *      plugins/model/gpt/onednn.c host/base/blas_core.c $(pkg-config --cflags --libs openblas) -ldnnl -ldl
 *   ./a.out [small|gpt2] [REPS]       (bench/run.sh runs it when oneDNN is installed)
 * Prints a table and one line per class: "onednn_products CLASS openblas_s f32_s sgemm_s bf16_s".
 * A way oneDNN refuses (its bf16 matmul on an ISA without bf16 instructions, e.g. AVX2) prints
 * as "refused" in every cell and line it would have filled, never as a time, and one line says
 * why ("... refused: ISA avx2 has no bf16 (oneDNN: ...)"); it is tried once per product.
 */
#include "../plugins/model/gpt/onednn.h"
#include "base/blas_core.h"
#include "split.h"

#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void openblas_set_num_threads(int num_threads); /* OpenBLAS's own cblas.h declares it */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* As the gpt plugin's gpt_sgemm: C's longer side in multiples of 16 over the threads, each part
 * one single-threaded OpenBLAS call. */
static void split_sgemm(int threads, int ta, int tb, int64_t M, int64_t N, int64_t K,
                        const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                        float *C, int64_t ldc) {
#pragma omp parallel num_threads(threads)
    {
        int rows;
        int64_t s, e;
        split_part(M, N, omp_get_num_threads(), omp_get_thread_num(), &rows, &s, &e);
        if (s < e)
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                        tb ? CblasTrans : CblasNoTrans, (int)(rows ? e - s : M),
                        (int)(rows ? N : e - s), (int)K, 1.0f,
                        rows ? (ta ? A + s : A + s * lda) : A, (int)lda,
                        rows ? B : (tb ? B + s * ldb : B + s), (int)ldb, beta,
                        rows ? C + s * ldc : C + s, (int)ldc);
    }
}

typedef struct {
    const char *cls;
    int         ta, tb;
    int64_t     M, N, K, per_step;
} shape;

#define WAYS 4
static const char *const way_name[WAYS] = {"OpenBLAS split", "oneDNN f32 matmul", "dnnl_sgemm",
                                           "oneDNN bf16 matmul"};

/* Best seconds of each way for one product; refused[w] set (and best[w] meaningless) when
 * oneDNN refused way w, its reason copied into why[w] (the first refusal kept). */
static void time_product(gpt_dnnl *d, int threads, const shape *s, int reps, double best[WAYS],
                         int refused[WAYS], char why[WAYS][256]) {
    int64_t M = s->M, N = s->N, K = s->K, lda = s->ta ? M : K, ldb = s->tb ? K : N;
    float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
    float *C = malloc(sizeof(float) * (size_t)(M * N));
    uint16_t *A16 = malloc(2 * (size_t)(M * K)), *B16 = malloc(2 * (size_t)(K * N));
    if (!A || !B || !C || !A16 || !B16) {
        fprintf(stderr, "onednn_products: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < M * K; i++) A[i] = 1e-2f * (float)(i % 13) - 0.06f;
    for (int64_t i = 0; i < K * N; i++) B[i] = 1e-2f * (float)(i % 7) - 0.03f;
    for (int64_t i = 0; i < M * K; i++) A16[i] = ct_bf16_from_f32(A[i]);
    for (int64_t i = 0; i < K * N; i++) B16[i] = ct_bf16_from_f32(B[i]);
    memset(C, 0, sizeof(float) * (size_t)(M * N));
    float beta = s->ta ? 1.0f : 0.0f; /* weight gradients add into the gradient */
    for (int w = 0; w < WAYS; w++) best[w] = 1e30, refused[w] = 0;
    for (int r = 0; r < reps + 1; r++) /* the first round creates the primitives: not timed */
        for (int w = 0; w < WAYS; w++) {
            if (refused[w]) continue; /* refused once: the same primitive is refused again */
            double t = now();
            int rc = 0;
            if (w == 0) split_sgemm(threads, s->ta, s->tb, M, N, K, A, lda, B, ldb, beta, C, N);
            if (w == 1)
                rc = gpt_dnnl_gemm(d, CT_DTYPE_F32, s->ta, s->tb, M, N, K, 1.0f, A, lda, B, ldb,
                                   beta, C, N);
            if (w == 2)
                rc = dnnl_sgemm(s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B,
                                ldb, beta, C, N) == dnnl_success ? 0 : -1;
            if (w == 3)
                rc = gpt_dnnl_gemm(d, CT_DTYPE_BF16, s->ta, s->tb, M, N, K, 1.0f, A16, lda, B16,
                                   ldb, beta, C, N);
            t = now() - t;
            if (rc != 0) {
                refused[w] = 1;
                if (!why[w][0])
                    snprintf(why[w], 256, "%s", w == 2 ? "dnnl_sgemm failed" : gpt_dnnl_error(d));
                continue;
            }
            if (r > 0 && t < best[w]) best[w] = t;
        }
    free(A), free(B), free(C), free(A16), free(B16);
}

/* The summary lines' keys per way, and their values: seconds ("%.4f") or "refused". */
static const char *const way_key[WAYS] = {"openblas_s", "f32_s", "sgemm_s", "bf16_s"};

static const char *secs(char *buf, int refused, double s) {
    if (refused) return "refused";
    snprintf(buf, 32, "%.4f", s);
    return buf;
}

static const char *gain(char *buf, int refused, double g) {
    if (refused) return "refused";
    snprintf(buf, 32, "%.2f", g);
    return buf;
}

int main(int argc, char **argv) {
    blas_core_choose(argv); /* the OpenBLAS kernel training uses */
    const char *which = argc > 1 ? argv[1] : "gpt2";
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    int64_t C = strcmp(which, "small") == 0 ? 256 : 768, L = C == 256 ? 4 : 12;
    int64_t N = 1024, V = 50257, R = 256;   /* B*T rows; the head's ranges of 256 rows */
    int64_t ranges = N / R;
    openblas_set_num_threads(1);
    int threads = omp_get_num_procs();
    gpt_dnnl_info in;
    gpt_dnnl_probe(&in);
    gpt_dnnl *d = gpt_dnnl_new(threads);
    if (!d) {
        printf("onednn_products: no oneDNN context (built without GPT_HAVE_ONEDNN?)\n");
        return 1;
    }
    const shape shapes[] = {
        {"linear_forward", 0, 1, N, 3 * C, C, L},     {"linear_forward", 0, 1, N, C, C, L},
        {"linear_forward", 0, 1, N, 4 * C, C, L},     {"linear_forward", 0, 1, N, C, 4 * C, L},
        {"linear_input_grad", 0, 0, N, C, 3 * C, L},  {"linear_input_grad", 0, 0, N, C, C, L},
        {"linear_input_grad", 0, 0, N, C, 4 * C, L},  {"linear_input_grad", 0, 0, N, 4 * C, C, L},
        {"linear_weight_grad", 1, 0, 3 * C, C, N, L}, {"linear_weight_grad", 1, 0, C, C, N, L},
        {"linear_weight_grad", 1, 0, 4 * C, C, N, L}, {"linear_weight_grad", 1, 0, C, 4 * C, N, L},
        {"head_forward", 0, 1, R, V, C, ranges},      {"head_input_grad", 0, 0, R, C, V, ranges},
        {"head_weight_grad", 1, 0, V, C, R, ranges},
    };
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    char buf[WAYS][64];
    printf("onednn_products: %s (L=%lld C=%lld, B*T=%lld, V=%lld), %d threads, best of %d; oneDNN "
           "%s, ISA %s\n", which, (long long)L, (long long)C, (long long)N, (long long)V, threads,
           reps, in.version, in.isa);
    printf("| class | M | N | K | per step |");
    for (int w = 0; w < WAYS; w++) printf(" %s GFLOP/s |", way_name[w]);
    printf("\n|---|---|---|---|---|---|---|---|---|\n");
    const char *classes[] = {"linear_forward", "linear_input_grad", "linear_weight_grad",
                             "head_forward", "head_input_grad", "head_weight_grad"};
    /* seconds per step by class and way; refused: some product of the class (or step) refused */
    double cls_s[6][WAYS] = {{0}}, all_s[WAYS] = {0};
    int    cls_refused[6][WAYS] = {{0}}, all_refused[WAYS] = {0};
    char   why[WAYS][256] = {{0}};
    for (int i = 0; i < n; i++) {
        const shape *s = &shapes[i];
        double best[WAYS], f = 2.0 * (double)s->M * (double)s->N * (double)s->K;
        int    refused[WAYS];
        time_product(d, threads, s, reps, best, refused, why);
        printf("| %s | %lld | %lld | %lld | %lld |", s->cls, (long long)s->M, (long long)s->N,
               (long long)s->K, (long long)s->per_step);
        for (int w = 0; w < WAYS; w++)
            if (refused[w]) printf(" refused |");
            else printf(" %.1f |", f / best[w] * 1e-9);
        printf("\n");
        for (int c = 0; c < 6; c++)
            if (strcmp(classes[c], s->cls) == 0)
                for (int w = 0; w < WAYS; w++) {
                    cls_s[c][w] += best[w] * (double)s->per_step;
                    all_s[w] += best[w] * (double)s->per_step;
                    cls_refused[c][w] |= refused[w];
                    all_refused[w] |= refused[w];
                }
    }
    for (int w = 0; w < WAYS; w++) {
        if (!all_refused[w]) continue;
        if (w == 3 && !in.bf16) /* the expected case: no bf16 instructions for oneDNN to use */
            printf("onednn_products: %s refused: ISA %s has no bf16 (oneDNN: %s)\n", way_name[w],
                   in.isa, why[w]);
        else
            printf("onednn_products: %s refused (oneDNN: %s)\n", way_name[w], why[w]);
    }
    for (int c = 0; c < 6; c++) {
        printf("onednn_products %s %s", which, classes[c]);
        for (int w = 0; w < WAYS; w++)
            printf(" %s %s", way_key[w], secs(buf[w], cls_refused[c][w], cls_s[c][w]));
        printf(" f32_gain %s\n",
               gain(buf[0], cls_refused[c][0] || cls_refused[c][1], cls_s[c][0] / cls_s[c][1]));
    }
    printf("onednn_products %s step", which);
    for (int w = 0; w < WAYS; w++) printf(" %s %s", way_key[w], secs(buf[w], all_refused[w], all_s[w]));
    printf(" f32_gain %s", gain(buf[0], all_refused[0] || all_refused[1], all_s[0] / all_s[1]));
    printf(" bf16_gain %s\n", gain(buf[1], all_refused[0] || all_refused[3], all_s[0] / all_s[3]));
    gpt_dnnl_free(d);
    return 0;
}
