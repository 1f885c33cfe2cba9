/* blas_core.c — OpenBLAS's kernel chosen before a plugin loads it (see blas_core.h). */
#include "base/blas_core.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The kernel this CPU can run: "SkylakeX" for the AVX-512 set OpenBLAS's SkylakeX kernels use,
 * "Haswell" for AVX2 + FMA, NULL otherwise (nothing to improve). */
static const char *kernel_for_cpu(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    return NULL;
}

/* Kernels at least as good as `want` (OpenBLAS's core names, case-insensitive). */
static int good_enough(const char *core, const char *want) {
    static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids", NULL};
    static const char *const avx2[] = {"haswell", "zen", "skylakex", "cooperlake",
                                       "sapphirerapids", NULL};
    const char *const *ok = strcmp(want, "SkylakeX") == 0 ? avx512 : avx2;
    for (; *ok; ok++)
        if (strcasecmp(core, *ok) == 0) return 1;
    return 0;
}

void blas_core_choose(char **argv) {
    if (getenv("OPENBLAS_CORETYPE") || getenv("CTRAIN_BLAS_REEXEC")) return;
    const char *want = kernel_for_cpu();
    if (!want) return;
    /* ask the OpenBLAS the model plugins link (loaded now; it stays loaded, as they would) */
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) return; /* another BLAS, or none: nothing to choose here */
    char *(*corename)(void) = (char *(*)(void))dlsym(h, "openblas_get_corename");
    const char *core = corename ? corename() : NULL;
    if (!core || good_enough(core, want)) return;
    /* the real path, so the restarted process keeps its name (`pgrep ctrain` still finds
     * it); what happened is said in training's first log line (mfu.c) */
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || (size_t)n >= sizeof self - 1) return;
    self[n] = '\0';
    if (setenv("OPENBLAS_CORETYPE", want, 1) != 0 || setenv("CTRAIN_BLAS_REEXEC", core, 1) != 0)
        return;
    execv(self, argv);
    fprintf(stderr, "ctrain: warning: could not restart with OPENBLAS_CORETYPE=%s; continuing "
            "with the %s kernel\n", want, core);
    unsetenv("OPENBLAS_CORETYPE");
}
