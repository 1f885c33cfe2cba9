/* lkit_vs_cpu.cu — the loss kit's block sum (sdk/include/ctrain/loss_kit_cuda.cuh) on the GPU
 * against the same fixed tree computed here in double: a kernel that calls ct_lkit_block_sum
 * TWICE (a sum, then a sum of squares) in every block must give both sums bit-identical to the
 * host's tree. Without the barrier at the start of ct_lkit_block_sum the second call's store
 * to shared memory races with the first call's readers, and some blocks report the second sum
 * as the first. Then ct_lkit_k_sum over N rows against the same host tree.
 * Prints "ok NAME ..." / "FAIL NAME ..." and "N passed, N failed".
 * Usage: lkit_vs_cpu [--cpu | --small]  (--cpu: no GPU; checks the host tree against a plain
 * double sum, a dry run of this program anywhere; --small: 64 blocks, one run, for
 * compute-sanitizer's racecheck, which flags the race itself and runs far slower). Build (run.sh does): nvcc -O2 -arch=sm_90 -Isdk/include
 * lkit_vs_cpu.cu -o lkit_vs_cpu. Not for: the loss terms (loss_vs_cpu.c).
 */
#include <ctrain/loss_kit_cuda.cuh>

#include <math.h>
#include <stdio.h>
#include <string.h>

#define BLOCKS 4096 /* blocks of the two-sum kernel: many, so a race has many chances */

static int passed, failed;

static void report(int ok, const char *name, const char *detail) {
    printf("%s %s: %s\n", ok ? "ok" : "FAIL", name, detail);
    ok ? passed++ : failed++;
}

/* Block b: x over its CT_LKIT_THREADS elements summed, then x^2 summed (two calls). */
__global__ void k_two_sums(const double *x, double *out) {
    double v = x[(size_t)blockIdx.x * CT_LKIT_THREADS + threadIdx.x];
    double s1 = ct_lkit_block_sum(v);
    double s2 = ct_lkit_block_sum(v * v);
    if (threadIdx.x == CT_LKIT_THREADS - 1) { /* the last warp: the one most likely to lag */
        out[2 * blockIdx.x] = s1;
        out[2 * blockIdx.x + 1] = s2;
    }
}

/* The kit's tree on the host: sh[t] += sh[t + w] for w = T/2 .. 1, in that order. */
static double tree_sum(const double *v) {
    double sh[CT_LKIT_THREADS];
    memcpy(sh, v, sizeof sh);
    for (int w = CT_LKIT_THREADS / 2; w > 0; w >>= 1)
        for (int t = 0; t < w; t++) sh[t] += sh[t + w];
    return sh[0];
}

/* ct_lkit_k_sum's order on the host: thread t sums rows t, t+T, ... then the tree. */
static double rows_sum(const double *r, int64_t N) {
    double s[CT_LKIT_THREADS] = {0};
    for (int t = 0; t < CT_LKIT_THREADS; t++)
        for (int64_t i = t; i < N; i += CT_LKIT_THREADS) s[t] += r[i];
    return tree_sum(s);
}

#define CK(call, what)                                                                 \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) {                                                       \
            char d_[200];                                                              \
            snprintf(d_, sizeof d_, "%s: %s", what, cudaGetErrorString(e_));           \
            report(0, "cuda_call", d_);                                                \
            goto out;                                                                  \
        }                                                                              \
    } while (0)

int main(int argc, char **argv) {
    int cpu_only = argc > 1 && !strcmp(argv[1], "--cpu");
    int small = argc > 1 && !strcmp(argv[1], "--small");
    const int nblocks = small ? 64 : BLOCKS, nruns = small ? 1 : 20;
    const size_t n = (size_t)BLOCKS * CT_LKIT_THREADS;
    double *x = (double *)malloc(n * sizeof(double)), *want = (double *)malloc(2 * BLOCKS * 8);
    double *got = (double *)malloc(2 * BLOCKS * 8);
    double *dx = NULL, *dout = NULL;
    uint64_t r = 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i < n; i++) { /* xorshift: values in [-4, 4), sums of squares differ */
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x[i] = (double)(r >> 11) / 9007199254740992.0 * 8.0 - 4.0;
    }
    for (int b = 0; b < BLOCKS; b++) {
        double sq[CT_LKIT_THREADS];
        for (int t = 0; t < CT_LKIT_THREADS; t++) sq[t] = x[(size_t)b * CT_LKIT_THREADS + t] *
                                                          x[(size_t)b * CT_LKIT_THREADS + t];
        want[2 * b] = tree_sum(x + (size_t)b * CT_LKIT_THREADS);
        want[2 * b + 1] = tree_sum(sq);
    }
    if (cpu_only) { /* the reference itself: the tree is a sum (within rounding) */
        double worst = 0;
        for (int b = 0; b < BLOCKS; b++) {
            double s = 0, q = 0;
            for (int t = 0; t < CT_LKIT_THREADS; t++) {
                double v = x[(size_t)b * CT_LKIT_THREADS + t];
                s += v, q += v * v;
            }
            worst = fmax(worst, fabs(s - want[2 * b]) / fmax(1.0, fabs(s)));
            worst = fmax(worst, fabs(q - want[2 * b + 1]) / q);
        }
        char d[160];
        snprintf(d, sizeof d, "host tree vs plain double sums: worst rel diff %.2e (tol 1e-12)",
                 worst);
        report(worst <= 1e-12, "host_tree_is_a_sum", d);
        double rs = rows_sum(want, 2 * BLOCKS), plain = 0;
        for (int i = 0; i < 2 * BLOCKS; i++) plain += want[i];
        snprintf(d, sizeof d, "rows tree %.17g vs plain %.17g", rs, plain);
        report(fabs(rs - plain) <= 1e-12 * fabs(plain), "host_rows_sum_is_a_sum", d);
        goto out;
    }
    CK(cudaMalloc((void **)&dx, n * sizeof(double)), "cudaMalloc");
    CK(cudaMalloc((void **)&dout, 2 * BLOCKS * 8), "cudaMalloc");
    CK(cudaMemcpy(dx, x, n * sizeof(double), cudaMemcpyHostToDevice), "upload");
    {
        int bad_runs = 0;
        size_t bad_blocks = 0;
        for (int run = 0; run < nruns; run++) { /* a race needs chances: 20 x 4096 blocks */
            CK(cudaMemset(dout, 0, 2 * BLOCKS * 8), "cudaMemset");
            k_two_sums<<<nblocks, CT_LKIT_THREADS>>>(dx, dout);
            CK(cudaGetLastError(), "k_two_sums launch");
            CK(cudaMemcpy(got, dout, 2 * BLOCKS * 8, cudaMemcpyDeviceToHost), "read-back");
            size_t bad = 0;
            for (int i = 0; i < 2 * nblocks; i++) bad += memcmp(&got[i], &want[i], 8) != 0;
            bad_runs += bad > 0;
            bad_blocks += bad;
        }
        char d[200];
        snprintf(d, sizeof d, "%zu of %d sums differ from the host tree over %d runs (%d runs "
                 "with a difference; expected 0: bit-identical)", bad_blocks,
                 2 * nblocks * nruns, nruns, bad_runs);
        report(bad_blocks == 0, "block_sum_twice_in_one_kernel_bit_identical", d);
    }
    {
        const int64_t N = 2 * BLOCKS; /* ct_lkit_k_sum over the sums just made */
        CK(cudaMemcpy(dout, want, (size_t)N * 8, cudaMemcpyHostToDevice), "upload");
        CK(cudaMemset(dx, 0, 8), "cudaMemset");
        ct_lkit_k_sum<<<1, CT_LKIT_THREADS>>>(dout, N, dx);
        CK(cudaGetLastError(), "ct_lkit_k_sum launch");
        double s = 0;
        CK(cudaMemcpy(&s, dx, 8, cudaMemcpyDeviceToHost), "read-back");
        double w = rows_sum(want, N);
        char d[160];
        snprintf(d, sizeof d, "gpu %.17g, host tree %.17g", s, w);
        report(memcmp(&s, &w, 8) == 0, "k_sum_rows_bit_identical", d);
    }
out:
    cudaFree(dx), cudaFree(dout);
    free(x), free(want), free(got);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
