/* peak.c — this machine's measured fp32 matrix-product peak with the BLAS kernel ctrain uses:
 * the best of several large cblas_sgemm calls (all cores, OpenBLAS's own threads). Not a test:
 * it reports, it does not gate; not the silicon's peak (bench/fma_peak.c).
 *
 * The kernel: built with host/base/blas_core.c and calling blas_core_choose() first, exactly as
 * `ctrain train` does, so this process restarts itself with the same OPENBLAS_CORETYPE when
 * OpenBLAS picks a generic kernel (and keeps a user's setting). It prints the kernel it ran on,
 * "kernel NAME", so bench/run.sh can check it against training's first log line.
 * Output: "peak_gflops N kernel NAME" (one line). Build: cc -O2 bench/peak.c host/base/blas_core.c
 * -Ihost $(pkg-config --cflags --libs openblas) -ldl. Usage: peak [n, default 2048].
 */
#include "base/blas_core.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

char *openblas_get_corename(void); /* OpenBLAS's own, not in every cblas.h */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    blas_core_choose(argv); /* returns only when the kernel is the one to measure */
    int n = argc > 1 ? atoi(argv[1]) : 2048;
    if (n < 16 || n > 16384) {
        fprintf(stderr, "peak: size '%s' must be 16..16384\n", argv[1]);
        return 2;
    }
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
          *c = malloc(sizeof(float) * n * n);
    if (!a || !b || !c) return 1;
    for (long i = 0; i < (long)n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    double best = 0;
    for (int rep = 0; rep < 6; rep++) {
        double t = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f,
                    c, n);
        double gf = 2.0 * n * (double)n * n / (now_s() - t) / 1e9;
        if (gf > best) best = gf;
    }
    const char *core = openblas_get_corename();
    printf("peak_gflops %.1f kernel %s\n", best, core && *core ? core : "unknown");
    free(a);
    free(b);
    free(c);
    return 0;
}
