/* peak.c — this machine's measured fp32 matrix-product peak: the best of several large
 * cblas_sgemm calls (all cores, OpenBLAS), printed as "peak_gflops N". The CPU benchmark
 * divides the trainer's achieved FLOP rate by it. Not a test: it reports, it does not gate. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2048;
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
    printf("peak_gflops %.1f\n", best);
    free(a);
    free(b);
    free(c);
    return 0;
}
