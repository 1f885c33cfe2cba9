/* gemm_ceiling.c — how close to the CPU's arithmetic peak a matrix product can get on this
 * machine, one thread and all threads: (1) a 14 × 32 AVX-512 register kernel on L1-resident
 * panels (no memory traffic: the ceiling of any f32 GEMM here); (2) a complete packed GEMM built
 * on that kernel (Goto's blocking) and OpenBLAS's sgemm on the products of one GPT-2 124M
 * training step (B·T = 1024, and the head's 256-row chunks), each split over the threads as the
 * gpt plugin splits them (layers.c: one single-threaded call per thread on a share of C's longer
 * side). Not for: training (the model uses OpenBLAS: the kernel here is no faster, see
 * docs/benchmarks.md). On a CPU without AVX-512F only OpenBLAS is timed: the columns and
 * figures of the hand-written kernel say "skipped" (never a number), and --check says it
 * checked nothing.
 *
 *   cc -O2 -fopenmp bench/gemm_ceiling.c -Ihost host/base/blas_core.c $(pkg-config --cflags --libs openblas) -ldl
 *   ./a.out ARITH_PEAK_GFLOPS [REPS]  (bench/fma_peak.c's figure, run.sh passes it; best of REPS, 3)
 *   ./a.out --check               (the GEMM against a double-precision reference; tests/cli/test_bench.sh)
 */
#include "base/blas_core.h"

#define _GNU_SOURCE /* sched_setaffinity */
#include <assert.h>
#include <cblas.h>
#include <immintrin.h>
#include <sched.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "split.h"

void openblas_set_num_threads(int num_threads); /* OpenBLAS's own cblas.h declares it */

#if defined(__x86_64__) && defined(__GNUC__)

#define MR 14 /* rows of C per kernel call: 14 × 2 accumulators + 2 operands < 32 registers */
#define NR 32 /* columns of C per kernel call: two 16-lane registers */
#define KC 384   /* k per packed block: the A strip (KC × MR) stays in L1 */
#define NC 1024  /* columns per packed B block: KC × NC floats = 1.5 MiB, in L2 */
#define BPACK ((int64_t)NC * KC)
#define WORK (BPACK + (int64_t)KC * 16) /* floats of one thread's packing space */

/* The mask of the first n of 16 lanes (n in 0..16). */
static __mmask16 lanes(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u); }

/* Pack op(B)[k0 .. k0+kc) × [j0 .. j0+nc) into strips of NR columns: strip s holds, for each k,
 * its NR values (columns past nc are zero). dst: ceil(nc/NR)·kc·NR floats. A transposed B
 * (op(B)(k, j) = B[j][k]) is gathered: 16 rows of B a load. */
__attribute__((target("avx512f"))) static void pack_b(float *dst, const float *B, int64_t ldb,
                                                      int tb, int64_t k0, int64_t kc,
                                                      int64_t j0, int64_t nc) {
    __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                       13, 14, 15),
                                     _mm512_set1_epi32((int)ldb));
    for (int64_t s = 0; s < nc; s += NR) {
        int64_t w = nc - s < NR ? nc - s : NR;
        float  *d = dst + (s / NR) * kc * NR;
        if (!tb) {
            for (int64_t k = 0; k < kc; k++) {
                const float *src = B + (k0 + k) * ldb + j0 + s;
                memcpy(d + k * NR, src, (size_t)w * sizeof(float));
                if (w < NR) memset(d + k * NR + w, 0, (size_t)(NR - w) * sizeof(float));
            }
        } else {
            __mmask16    m0 = lanes(w), m1 = lanes(w > 16 ? w - 16 : 0);
            const float *b0 = B + (j0 + s) * ldb + k0, *b1 = b0 + 16 * ldb;
            for (int64_t k = 0; k < kc; k++) {
                _mm512_store_ps(d + k * NR,
                                _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m0, idx, b0 + k, 4));
                _mm512_store_ps(d + k * NR + 16,
                                _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m1, idx, b1 + k, 4));
            }
        }
    }
}

/* Pack op(A)[i0 .. i0+mr) × [k0 .. k0+kc) as, for each k, its MR row values (rows past mr are
 * zero). dst: kc·MR floats and 2 more (the last 16-lane store spills past MR). A row-major A
 * (op(A)(i, k) = A[i][k]) is gathered: MR rows a load. */
__attribute__((target("avx512f"))) static void pack_a(float *dst, const float *A, int64_t lda,
                                                      int ta, int64_t i0, int64_t mr,
                                                      int64_t k0, int64_t kc) {
    if (ta) { /* op(A)(i, k) = A[k][i]: MR consecutive values of one row of A */
        __mmask16 m = lanes(mr);
        for (int64_t k = 0; k < kc; k++)
            _mm512_storeu_ps(dst + k * MR,
                             _mm512_maskz_loadu_ps(m, A + (k0 + k) * lda + i0));
    } else {
        __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                           12, 13, 14, 15),
                                         _mm512_set1_epi32((int)lda));
        __mmask16    m   = lanes(mr);
        const float *src = A + i0 * lda + k0;
        for (int64_t k = 0; k < kc; k++)
            _mm512_storeu_ps(dst + k * MR,
                             _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, src + k, 4));
    }
}

/* The register kernel: acc (MR × NR) = Σ_k a[k·MR + r] · b[k·NR + c] over kc values of k, then
 * C[r][c] = alpha·acc + (load ? beta·C : 0) for r < mr and the columns set in m0 (0..15) and
 * m1 (16..31). beta is not read when load is 0, nor C (which may hold anything then). */
__attribute__((target("avx512f"))) static void kernel(int64_t kc, const float *a, const float *b,
                                                      float *C, int64_t ldc, int mr,
                                                      __mmask16 m0, __mmask16 m1, float alpha,
                                                      int load, float beta) {
    __m512 acc[MR][2];
#pragma GCC unroll 14
    for (int r = 0; r < MR; r++) {
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        if (r < mr) { /* C's tile is read (or written) after the loop: start fetching it now */
            _mm_prefetch((const char *)(C + (int64_t)r * ldc), _MM_HINT_T0);
            _mm_prefetch((const char *)(C + (int64_t)r * ldc + 16), _MM_HINT_T0);
        }
    }
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(b + k * NR), b1 = _mm512_load_ps(b + k * NR + 16);
        _mm_prefetch((const char *)(b + k * NR + 8 * NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + k * NR + 8 * NR + 16), _MM_HINT_T0);
#pragma GCC unroll 14
        for (int r = 0; r < MR; r++) {
            __m512 av = _mm512_set1_ps(a[k * MR + r]);
            acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
        }
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 14
    for (int r = 0; r < MR; r++) {
        if (r >= mr) break;
        float *c  = C + (int64_t)r * ldc;
        __m512 x0 = _mm512_mul_ps(va, acc[r][0]), x1 = _mm512_mul_ps(va, acc[r][1]);
        if (load) {
            x0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, c), x0);
            x1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, c + 16), x1);
        }
        _mm512_mask_storeu_ps(c, m0, x0);
        _mm512_mask_storeu_ps(c + 16, m1, x1);
    }
}

/* C = alpha·op(A)·op(B) + beta·C, row-major, one thread; work: GPT_MM_WORK floats, 64-byte
 * aligned. Each element is Σ_k in blocks of KC, in order (so: the same bits on any AVX-512 CPU). */
static void gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc, float *work) {
    float *bpack = work;                /* (NC/NR)·KC·NR floats */
    float *apack = work + BPACK; /* KC·MR floats */
    assert(((uintptr_t)bpack & 63) == 0 && ((uintptr_t)apack & 63) == 0);
    if (K == 0) { /* no products: C = beta·C (C not read when beta is 0) */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    for (int64_t j0 = 0; j0 < N; j0 += NC) {
        int64_t nc = N - j0 < NC ? N - j0 : NC;
        for (int64_t k0 = 0; k0 < K; k0 += KC) {
            int64_t kc = K - k0 < KC ? K - k0 : KC;
            int     load = k0 > 0 || beta != 0.0f;
            float   bt   = k0 > 0 ? 1.0f : beta;
            pack_b(bpack, B, ldb, tb, k0, kc, j0, nc);
            for (int64_t i0 = 0; i0 < M; i0 += MR) {
                int mr = (int)(M - i0 < MR ? M - i0 : MR);
                pack_a(apack, A, lda, ta, i0, mr, k0, kc);
                for (int64_t s = 0; s < nc; s += NR) {
                    int64_t w = nc - s;
                    kernel(kc, apack, bpack + (s / NR) * kc * NR, C + i0 * ldc + j0 + s, ldc, mr,
                           lanes(w), lanes(w - 16 > 0 ? w - 16 : 0), alpha, load, bt);
                }
            }
        }
    }
}


static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* (1) The register kernel alone, KC = 128 (A and B panels: 7 + 16 KiB, in L1), on `threads`
 * threads at once; returns the GFLOP/s of all of them together (all threads' products over the
 * common wall time). */
static double kernel_alone(int threads) {
    const int64_t kc = 128, calls = 40000;
    double        t0 = 0, t1 = 0;
#pragma omp parallel num_threads(threads)
    {
        cpu_set_t one; /* thread t on CPU t: the measurement is of cores, not of the scheduler */
        CPU_ZERO(&one);
        CPU_SET(omp_get_thread_num(), &one);
        sched_setaffinity(0, sizeof one, &one);
        float *a = aligned_alloc(64, sizeof(float) * kc * MR + 64);
        float *b = aligned_alloc(64, sizeof(float) * kc * NR);
        float *c = aligned_alloc(64, sizeof(float) * MR * NR);
        assert(a && b && c);
        for (int64_t i = 0; i < kc * MR; i++) a[i] = 1e-3f * (float)(i % 7);
        for (int64_t i = 0; i < kc * NR; i++) b[i] = 1e-3f * (float)(i % 5);
#pragma omp barrier
#pragma omp master
        t0 = now();
        for (int64_t i = 0; i < calls; i++)
            kernel(kc, a, b, c, NR, MR, 0xFFFF, 0xFFFF, 1.0f, (int)(i & 1), 1.0f);
#pragma omp barrier
#pragma omp master
        t1 = now();
        free(a), free(b), free(c);
    }
    return 2.0 * (double)(kc * MR * NR) * (double)calls * threads / (t1 - t0) * 1e-9;
}

/* One product split as the gpt plugin splits it (layers.c, gpt_sgemm): C's longer side in
 * multiples of 16 over `threads` threads, each part one single-threaded call (OpenBLAS's, or
 * gemm above). */
static void split_product(int ours, int threads, float **work, int ta, int tb, int64_t M,
                          int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                          int64_t ldb, float beta, float *C, int64_t ldc) {
#pragma omp parallel num_threads(threads)
    {
        int rows;
        int64_t s, e, t = omp_get_thread_num();
        split_part(M, N, omp_get_num_threads(), t, &rows, &s, &e);
        if (s < e) {
            int64_t      m = rows ? e - s : M, n = rows ? N : e - s;
            const float *a = rows ? (ta ? A + s : A + s * lda) : A;
            const float *b = rows ? B : (tb ? B + s * ldb : B + s);
            float       *c = rows ? C + s * ldc : C + s;
            if (ours)
                gemm(ta, tb, m, n, K, 1.0f, a, lda, b, ldb, beta, c, ldc, work[t]);
            else
                cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                            tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)K, 1.0f, a,
                            (int)lda, b, (int)ldb, beta, c, (int)ldc);
        }
    }
}

/* --check: gemm against a double-precision sum for every transpose, shapes that are not
 * multiples of MR, NR or KC, alpha, and beta 0 (C holding NaN, never read) and 0.5. Prints one
 * line; returns 0 when every element is within 8·K·u·Σ|a·b| (+ |beta·c|) of the reference. */
static int check(float *work) {
    static const int64_t dims[][3] = {{1, 1, 1}, {13, 31, 7}, {15, 33, 385}, {29, 65, 800},
                                      {14, 32, 384}, {3, 100, 1}};
    double worst = 0; /* error over its bound */
    for (int d = 0; d < 6; d++)
        for (int t = 0; t < 8; t++) {
            int     ta = t & 1, tb = (t >> 1) & 1, zero_beta = (t >> 2) & 1;
            int64_t M = dims[d][0], N = dims[d][1], K = dims[d][2];
            int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
            float  *A = malloc(sizeof(float) * (ta ? K : M) * lda);
            float  *B = malloc(sizeof(float) * (tb ? N : K) * ldb);
            float  *C = malloc(sizeof(float) * M * ldc), *C0 = malloc(sizeof(float) * M * ldc);
            assert(A && B && C && C0);
            uint32_t x = 12345u + (uint32_t)(d * 8 + t);
            for (int64_t i = 0; i < (ta ? K : M) * lda; i++) A[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
            for (int64_t i = 0; i < (tb ? N : K) * ldb; i++) B[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
            for (int64_t i = 0; i < M * ldc; i++)
                C0[i] = zero_beta ? __builtin_nanf("") : (float)((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f;
            memcpy(C, C0, sizeof(float) * M * ldc);
            float alpha = 0.75f, beta = zero_beta ? 0.0f : 0.5f;
            gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, work);
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double ref = 0, mag = 0;
                    for (int64_t k = 0; k < K; k++) {
                        double p = (double)(ta ? A[k * lda + i] : A[i * lda + k]) *
                                   (double)(tb ? B[j * ldb + k] : B[k * ldb + j]);
                        ref += p, mag += p < 0 ? -p : p;
                    }
                    ref *= alpha, mag *= alpha;
                    if (!zero_beta) ref += beta * (double)C0[i * ldc + j], mag += beta * (double)C0[i * ldc + j];
                    double err = C[i * ldc + j] - ref, bound = 8.0 * (double)K * 0x1p-24 * mag + 1e-30;
                    if (err < 0) err = -err;
                    if (!(err <= bound)) { /* also catches NaN */
                        printf("gemm_ceiling --check: FAIL ta %d tb %d M %lld N %lld K %lld beta %g: "
                               "C[%lld][%lld] = %.9g, reference %.9g (bound %.3g)\n",
                               ta, tb, (long long)M, (long long)N, (long long)K, beta,
                               (long long)i, (long long)j, C[i * ldc + j], ref, bound);
                        return 1;
                    }
                    if (err / bound > worst) worst = err / bound;
                }
            for (int64_t i = 0; i < M; i++) /* the padding between rows is never written */
                for (int64_t j = N; j < ldc; j++)
                    if (memcmp(&C[i * ldc + j], &C0[i * ldc + j], sizeof(float)) != 0) {
                        printf("gemm_ceiling --check: FAIL ta %d tb %d M %lld N %lld K %lld: wrote "
                               "C[%lld][%lld], past N\n", ta, tb, (long long)M, (long long)N,
                               (long long)K, (long long)i, (long long)j);
                        return 1;
                    }
            free(A), free(B), free(C), free(C0);
        }
    printf("gemm_ceiling --check: ok, 48 products within their bound (worst error %.3f of it)\n", worst);
    return 0;
}

/* "%.1f" of a rate, or "skipped" where the hand-written kernel was not run (no AVX-512F). */
static const char *rate(char *buf, size_t size, int measured, double gflops) {
    if (!measured) return "skipped";
    snprintf(buf, size, "%.1f", gflops);
    return buf;
}

int main(int argc, char **argv) {
    blas_core_choose(argv); /* the OpenBLAS kernel training uses */
    __builtin_cpu_init();
    const int has512 = __builtin_cpu_supports("avx512f"); /* else: OpenBLAS only */
    if (argc > 1 && strcmp(argv[1], "--check") == 0) {
        if (!has512) {
            printf("gemm_ceiling --check: skipped: this CPU has no AVX-512F, which the hand-written "
                   "GEMM needs (nothing checked)\n");
            return 0;
        }
        float *w = aligned_alloc(64, sizeof(float) * WORK);
        assert(w);
        int rc = check(w);
        free(w);
        return rc;
    }
    double arith = argc > 1 ? atof(argv[1]) : 0.0;
    int    reps  = argc > 2 ? atoi(argv[2]) : 3;
    if (reps < 1) reps = 1;
    openblas_set_num_threads(1);
    int P = omp_get_num_procs();
    if (P > 256) P = 256;
    float *work[256];
    for (int t = 0; t < P; t++) {
        work[t] = aligned_alloc(64, sizeof(float) * WORK);
        assert(work[t]);
    }
    double all = 0;
    if (has512) {
        double one = kernel_alone(1);
        all = kernel_alone(P);
        printf("gemm_ceiling: 14x32 register kernel, L1-resident: 1 thread %.1f GFLOP/s, %d threads "
               "at once %.1f GFLOP/s", one, P, all);
        if (arith > 0) printf(" (%.1f%% of the arithmetic peak %.1f)", 100.0 * all / arith, arith);
        printf("\n");
    } else {
        printf("gemm_ceiling: the hand-written AVX-512 kernel and GEMM: skipped: this CPU has no "
               "AVX-512F (OpenBLAS only below)\n");
    }

    /* The products of one GPT-2 124M step (B·T = 1024, C = 768, the head in 256-row chunks), per
     * block: qkv, attention out, fc, proj — forward, dx, dW (× 12 blocks); the head forward and
     * its two gradients (× 4 chunks). {ta, tb, M, N, K, times per step} */
    static const int64_t shapes[][6] = {
        {0, 1, 1024, 2304, 768, 12},  {0, 1, 1024, 768, 768, 12},  {0, 1, 1024, 3072, 768, 12},
        {0, 1, 1024, 768, 3072, 12},  {0, 0, 1024, 768, 2304, 12}, {0, 0, 1024, 768, 768, 12},
        {0, 0, 1024, 768, 3072, 12},  {0, 0, 1024, 3072, 768, 12}, {1, 0, 2304, 768, 1024, 12},
        {1, 0, 768, 768, 1024, 12},   {1, 0, 3072, 768, 1024, 12}, {1, 0, 768, 3072, 1024, 12},
        {0, 1, 256, 50257, 768, 4},   {0, 0, 256, 768, 50257, 4},  {1, 0, 50257, 768, 256, 4}};
    int    n_shapes   = (int)(sizeof shapes / sizeof shapes[0]);
    double step_s[2][2] = {{0, 0}, {0, 0}}, flops = 0; /* [ours][0: 1 thread, 1: P threads] */
    printf("| ta tb | M | N | K | OpenBLAS 1 thread | ours 1 thread | OpenBLAS %d threads | ours %d "
           "threads |\n|---|---|---|---|---|---|---|---|\n", P, P);
    for (int s = 0; s < n_shapes; s++) {
        int     ta = (int)shapes[s][0], tb = (int)shapes[s][1];
        int64_t M = shapes[s][2], N = shapes[s][3], K = shapes[s][4], times = shapes[s][5];
        int64_t lda = ta ? M : K, ldb = tb ? K : N;
        float  *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
        float  *C = malloc(sizeof(float) * M * N);
        assert(A && B && C);
        for (int64_t i = 0; i < M * K; i++) A[i] = 1e-2f * (float)(i % 13);
        for (int64_t i = 0; i < K * N; i++) B[i] = 1e-2f * (float)(i % 7);
        memset(C, 0, sizeof(float) * M * N);
        double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}};
        for (int rep = 0; rep < reps; rep++) /* alternated, best of reps: descheduling only slows */
            for (int th = 0; th < 2; th++)
                for (int ours = 0; ours < 1 + has512; ours++) {
                    double t = now();
                    split_product(ours, th ? P : 1, work, ta, tb, M, N, K, A, lda, B, ldb,
                                  ta ? 1.0f : 0.0f, C, N);
                    t = now() - t;
                    if (t < best[ours][th]) best[ours][th] = t;
                }
        double f = 2.0 * (double)M * (double)N * (double)K;
        char   b1[32], b2[32];
        printf("| %d %d | %lld | %lld | %lld | %.1f | %s | %.1f | %s |\n", ta, tb, (long long)M,
               (long long)N, (long long)K, f / best[0][0] * 1e-9,
               rate(b1, sizeof b1, has512, f / best[1][0] * 1e-9), f / best[0][1] * 1e-9,
               rate(b2, sizeof b2, has512, f / best[1][1] * 1e-9));
        for (int o = 0; o < 2; o++)
            for (int th = 0; th < 2; th++) step_s[o][th] += best[o][th] * (double)times;
        flops += f * (double)times;
        free(A), free(B), free(C);
    }
    const char *who[2] = {"OpenBLAS", "ours"};
    for (int o = 0; o < 1 + has512; o++)
        for (int th = 0; th < 2; th++) {
            double g = flops / step_s[o][th] * 1e-9;
            printf("gemm_ceiling: one step's products, %s, %d thread%s: %.3f s, %.1f GFLOP/s",
                   who[o], th ? P : 1, th && P > 1 ? "s" : "", step_s[o][th], g);
            if (arith > 0)
                printf(" (%.1f%% of the arithmetic peak%s)", 100.0 * g / arith * (th ? 1.0 : P),
                       th ? "" : "'s share of one core");
            printf("\n");
        }
    if (!has512) printf("gemm_ceiling: one step's products, ours: skipped (no AVX-512F)\n");
    char b1[32], b2[32], b3[32];
    if (has512) snprintf(b1, sizeof b1, "%.4f", step_s[1][1]);
    printf("gemm_ceiling products_s_openblas %.4f products_s_ours %s gflops_openblas %.1f "
           "gflops_ours %s kernel_gflops %s\n",
           step_s[0][1], has512 ? b1 : "skipped", flops / step_s[0][1] * 1e-9,
           rate(b2, sizeof b2, has512, flops / step_s[1][1] * 1e-9),
           rate(b3, sizeof b3, has512, all));
    for (int t = 0; t < P; t++) free(work[t]);
    return 0;
}

#else /* not x86-64 with GCC-style intrinsics */

int main(void) {
    printf("gemm_ceiling: not an x86-64 build with GCC-style intrinsics (nothing measured)\n");
    return 0;
}

#endif
