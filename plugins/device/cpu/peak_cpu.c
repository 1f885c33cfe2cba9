/* peak_cpu.c — the cpu device's peak_flops: the rate of the BLAS matrix product this process
 * uses, measured once (each of the device's threads runs its own single-threaded
 * cblas_sgemm, as the gpt model splits its products), which BLAS that is, and a warning when
 * it cannot use the CPU's vector width (OpenBLAS's generic kernel on an AVX2/AVX-512 CPU, or
 * the reference BLAS). Not for: element-wise work (device_cpu.c) or the MFU itself (the host).
 *
 * Why here: this plugin links the same libopenblas.so.0 (by soname: one copy per process) as
 * the gpt model, so it measures the very library the model's products run in, without a model
 * ABI member. A model plugin using another library needs [device] peak_tflops.
 */
#include "peak_cpu.h"

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define PEAK_N         256   /* each thread's product: n x n times n x n (33.6 MFLOP); larger
                                ones measured no faster here, and keep start-up short */
#define PEAK_BUDGET_S  0.04  /* stop timing after this much, once PEAK_REPS_MIN are done */
#define PEAK_REPS_MIN  3
#define PEAK_REPS_MAX  12

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One n^3 product on each of `threads` threads at once (buffers: threads x 3 x n x n floats,
 * of which each thread uses its own three); each thread's seconds into secs[thread], and the
 * slowest one's returned. */
static double timed_products(float *buf, int threads, int n, double *secs) {
    size_t nn = (size_t)n * (size_t)n;
    for (int i = 0; i < threads; i++) secs[i] = -1; /* stays -1 if OpenMP gives fewer threads */
#pragma omp parallel num_threads(threads)
    {
        int i = omp_get_thread_num();
        float *a = buf + (size_t)i * 3 * nn;
        double t = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, a + nn, n,
                    0.0f, a + 2 * nn, n);
        secs[i] = now_s() - t;
    }
    double worst = 0;
    for (int i = 0; i < threads; i++)
        if (secs[i] > worst) worst = secs[i];
    return worst;
}

/* OpenBLAS's own kernels for CPUs with AVX2 (and FMA), and those of them using AVX-512, as
 * openblas_get_corename() names them (OpenBLAS 0.3.x). */
static const char *const avx2_cores[] = {"haswell", "zen", "skylakex", "cooperlake",
                                         "sapphirerapids", NULL};
static const char *const avx512_cores[] = {"skylakex", "cooperlake", "sapphirerapids", NULL};

static int listed(const char *name, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (strcasecmp(name, list[i]) == 0) return 1;
    return 0;
}

/* Name the BLAS that cblas_sgemm resolves to (the file, and OpenBLAS's configuration and
 * kernel when it is OpenBLAS) into p->library, a warning into p->warning; and set OpenBLAS to
 * one thread of its own (the products are split over OpenMP threads, as the gpt model does). */
static void identify_blas(ct_peak *p) {
    Dl_info info;
    memset(&info, 0, sizeof info);
    const char *file = dladdr((void *)cblas_sgemm, &info) && info.dli_fname ? info.dli_fname
                                                                           : "unknown file";
    void *lib = info.dli_fname ? dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    char *(*get_config)(void) = NULL, *(*get_core)(void) = NULL;
    void (*set_threads)(int) = NULL;
    if (lib) {
        *(void **)&get_config = dlsym(lib, "openblas_get_config");
        *(void **)&get_core = dlsym(lib, "openblas_get_corename");
        *(void **)&set_threads = dlsym(lib, "openblas_set_num_threads");
    }
    if (set_threads) set_threads(1);
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f");
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const char *isa = avx512 ? "AVX-512" : "AVX2";
    if (get_config && get_core) {
        const char *core = get_core();
        snprintf(p->library, sizeof p->library, "%s, kernel %s (%s)", get_config(), core, file);
        if ((avx512 && !listed(core, avx512_cores)) || (avx2 && !listed(core, avx2_cores)))
            snprintf(p->warning, sizeof p->warning,
                     "OpenBLAS runs its %s kernel on a CPU with %s, so matrix products run at a "
                     "fraction of what the CPU can do and MFU is measured against that slow "
                     "peak ---> try OPENBLAS_CORETYPE=%s (a DYNAMIC_ARCH OpenBLAS honours it) or "
                     "an OpenBLAS that knows this CPU", core, isa,
                     avx512 ? "SkylakeX" : "Haswell");
    } else {
        snprintf(p->library, sizeof p->library, "%s (not OpenBLAS)", file);
        if (strstr(file, "/blas/libblas") || strstr(file, "refblas"))
            snprintf(p->warning, sizeof p->warning,
                     "the reference BLAS (%s) is unoptimised: matrix products run far below "
                     "this CPU's peak ---> build against OpenBLAS (pkg-config openblas)", file);
    }
    if (lib) dlclose(lib); /* RTLD_NOLOAD: only drops the reference taken above */
}

int32_t cpu_peak_measure(int threads, ct_peak *p, ct_error *err) {
    identify_blas(p);
    size_t floats = (size_t)threads * 3 * PEAK_N * PEAK_N;
    float *buf = malloc(floats * sizeof *buf);
    double *secs = calloc((size_t)threads * 2, sizeof *secs), *best = secs + threads;
    if (!buf || !secs) {
        free(buf);
        free(secs);
        return ct_error_set(err, CT_ERR_NOMEM, "device cpu: out of memory measuring the peak "
                            "(%d threads) ---> set [device] peak_tflops", threads);
    }
    for (size_t i = 0; i < floats; i++) buf[i] = (float)(i % 7) * 0.125f - 0.375f;

    /* each thread's best time, summed as rates: on a shared machine the threads are seldom
     * all undisturbed in the same product, each is in one of them. About 0.05 s with
     * OpenBLAS, about 0.15 s with a reference BLAS (~1 GFLOP/s per thread). */
    const int n = PEAK_N;
    timed_products(buf, threads, n, secs); /* warm-up: first touch, packing buffers */
    double start = now_s();
    int reps = 0;
    while (reps < PEAK_REPS_MAX && (reps < PEAK_REPS_MIN || now_s() - start < PEAK_BUDGET_S)) {
        timed_products(buf, threads, n, secs);
        for (int i = 0; i < threads; i++)
            if (secs[i] > 0 && (best[i] <= 0 || secs[i] < best[i])) best[i] = secs[i];
        reps++;
    }
    double rate = 0; /* threads that never ran (best 0) add nothing */
    for (int i = 0; i < threads; i++)
        if (best[i] > 0) rate += 2.0 * n * (double)n * n / best[i];
    free(secs);
    free(buf);
    p->flops = rate;
    snprintf(p->source, sizeof p->source,
             "measured: %d thread%s x cblas_sgemm %d^3, sum of each thread's best of %d", threads,
             threads == 1 ? "" : "s", n, reps);
    return CT_OK;
}
