/* fma_peak.c — this CPU's measured fp32 arithmetic peak, for bench/run.sh: the clock from timed
 * dependent chains (integer adds, 1 cycle each; FMAs, their known latency), the peak from a
 * timed independent set of FMAs at the widest vector width the CPU has, on one thread per
 * core. Not a BLAS figure (bench/peak.c) and not a test: it reports, it never gates.
 *
 * Output: readable lines, then one line bench/run.sh parses:
 *   fma_peak gflops G clock_mhz M fma_per_cycle U isa NAME lanes W cores N
 * G = cores x (each core's best FMA rate) x lanes x 2; U = FMA instructions per cycle per core
 * (measured rate / measured clock: the FMA units the core really has, 2 on most Xeons).
 *
 * Why the clock is measurable: a chain of instructions each needing the previous one's result
 * runs at one instruction per latency, whatever the core's width. An integer `add` has a
 * latency of 1 cycle on every x86 core; vfmadd231ps has 4 on Intel since Skylake (Skylake-SP,
 * Ice Lake, Sapphire/Emerald Rapids: Intel's Optimization Reference Manual tables, Agner Fog's
 * instruction tables, uops.info) and AMD Zen 3 and later, 5 on Haswell/Broadwell and AMD Zen 1,
 * Zen+ and Zen 2 (fma_latency() below). Both chains are timed: the add chain needs no table, and the ratio of
 * the two measures the FMA latency, which checks the table's figure.
 * Timing on a shared machine: every figure is the best of many short windows (a window in
 * which the thread was descheduled is slower, never faster), each core's best summed.
 *
 * Where the CPU has AVX512-BF16, the same independent set of its bf16 dot products (vdpbf16ps:
 * 16 lanes x 2 bf16 pairs x 2 FLOPs) is timed too, for the bf16 products' ceiling without AMX
 * (one line: its rate per cycle and its peak against the f32 FMA peak). AMX is not timed.
 *
 * Build: cc -O2 -pthread bench/fma_peak.c (no -m flags: the AVX-512 / AVX2 code carries target
 * attributes and runs only where cpuid says it can). Usage: fma_peak [seconds, default 1.0].
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#define FMA_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

#define CHAIN_REPS  8192  /* dependent steps per timed window: ~8-30 microseconds of FMAs x.. */
#define WINDOW_REPS 32    /* ..32 blocks of them per window */
/* Independent accumulators of the peak kernels: at least units x latency of them must be in
 * flight, or the latency, not the FMA units, bounds the rate; 2 units x 5 cycles (Zen 2,
 * Haswell) = 10 is the most any core here needs. They must also stay in registers with the
 * two operands: AVX-512 has 32 vector registers (16 chains + 2), AVX2 only 16, so 12 chains
 * there — 16 made the compiler spill 3 of them to the stack each round, and the store/reload
 * chains held a Zen 3 core to 0.7 FMA/cycle of its 2 (the AVX2 peak read 66 GFLOP/s, below
 * OpenBLAS's 180: issue 31). */
#define INDEP_512 16
#define INDEP_256 12

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------------------------
 * Kernels: each returns a value that depends on every step, so nothing is optimised away.
 * ------------------------------------------------------------------------------------- */

#ifdef FMA_X86
/* n x 64 dependent register-to-register integer adds: 64 n cycles (latency 1). Not `add $1`:
 * Golden Cove and later cores fold immediate adds in the renamer, several per cycle. */
static long add_chain(long n) {
    long x = 0, one = 1;
    for (long i = 0; i < n; i++)
        __asm__ volatile(".rept 64\n\taddq %1, %0\n\t.endr" : "+r"(x) : "r"(one));
    return x;
}

/* n x 16 dependent FMAs on one register (the FMA's latency bounds it). */
__attribute__((target("avx512f"))) static float fma_chain_512(long n, float a, float b) {
    __m512 x = _mm512_set1_ps(1.0f), va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    for (long i = 0; i < n; i++)
        for (int k = 0; k < 16; k++) {
            x = _mm512_fmadd_ps(x, va, vb);
            __asm__ volatile("" : "+v"(x)); /* one step at a time: no reassociation */
        }
    return _mm512_reduce_add_ps(x);
}

/* n x 16 (AVX-512) or n x 12 (AVX2) independent FMAs: chains side by side in named registers
 * (an array would live in memory), so the FMA units, not the latency, bound the rate. The empty
 * asm statements keep every chain (and stop the compiler merging chains that start equal). */
__attribute__((target("avx512f"))) static float fma_indep_512(long n, float a, float b) {
    __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    __m512 x0 = va, x1 = vb, x2 = va, x3 = vb, x4 = va, x5 = vb, x6 = va, x7 = vb, x8 = va,
           x9 = vb, xa = va, xb = vb, xc = va, xd = vb, xe = va, xf = vb;
#define F(x) x = _mm512_fmadd_ps(x, va, vb)
    for (long i = 0; i < n; i++) {
        F(x0), F(x1), F(x2), F(x3), F(x4), F(x5), F(x6), F(x7);
        F(x8), F(x9), F(xa), F(xb), F(xc), F(xd), F(xe), F(xf);
        __asm__ volatile("" : "+v"(x0), "+v"(x1), "+v"(x2), "+v"(x3), "+v"(x4), "+v"(x5),
                         "+v"(x6), "+v"(x7));
        __asm__ volatile("" : "+v"(x8), "+v"(x9), "+v"(xa), "+v"(xb), "+v"(xc), "+v"(xd),
                         "+v"(xe), "+v"(xf));
    }
#undef F
    return _mm512_cvtss_f32(x0);
}

__attribute__((target("avx2,fma"))) static float fma_indep_256(long n, float a, float b) {
    __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    __m256 x0 = va, x1 = vb, x2 = va, x3 = vb, x4 = va, x5 = vb, x6 = va, x7 = vb, x8 = va,
           x9 = vb, xa = va, xb = vb;
#define F(x) x = _mm256_fmadd_ps(x, va, vb)
    for (long i = 0; i < n; i++) {
        F(x0), F(x1), F(x2), F(x3), F(x4), F(x5), F(x6), F(x7), F(x8), F(x9), F(xa), F(xb);
        __asm__ volatile("" : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3), "+x"(x4), "+x"(x5));
        __asm__ volatile("" : "+x"(x6), "+x"(x7), "+x"(x8), "+x"(x9), "+x"(xa), "+x"(xb));
    }
#undef F
    return _mm256_cvtss_f32(x0);
}

/* 16 independent chains of vdpbf16ps (x += a.b over bf16 pairs, f32 lanes), n rounds. */
#define DP(x) x = _mm512_dpbf16_ps(x, va, vb)
__attribute__((target("avx512f,avx512bf16"))) static float bf16_dot_indep(long n, float a,
                                                                         float b) {
    __m512bh va = _mm512_cvtne2ps_pbh(_mm512_set1_ps(a), _mm512_set1_ps(a));
    __m512bh vb = _mm512_cvtne2ps_pbh(_mm512_set1_ps(b), _mm512_set1_ps(b));
    __m512 x0 = _mm512_set1_ps(1.0f), x1 = x0, x2 = x0, x3 = x0, x4 = x0, x5 = x0, x6 = x0,
           x7 = x0, x8 = x0, x9 = x0, xa = x0, xb = x0, xc = x0, xd = x0, xe = x0, xf = x0;
    for (long i = 0; i < n; i++) {
        DP(x0), DP(x1), DP(x2), DP(x3), DP(x4), DP(x5), DP(x6), DP(x7);
        DP(x8), DP(x9), DP(xa), DP(xb), DP(xc), DP(xd), DP(xe), DP(xf);
        __asm__ volatile("" : "+v"(x0), "+v"(x1), "+v"(x2), "+v"(x3), "+v"(x4), "+v"(x5),
                         "+v"(x6), "+v"(x7));
        __asm__ volatile("" : "+v"(x8), "+v"(x9), "+v"(xa), "+v"(xb), "+v"(xc), "+v"(xd),
                         "+v"(xe), "+v"(xf));
    }
    return _mm512_cvtss_f32(x0);
}
#undef DP

__attribute__((target("avx2,fma"))) static float fma_chain_256(long n, float a, float b) {
    __m256 x = _mm256_set1_ps(1.0f), va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    for (long i = 0; i < n; i++)
        for (int k = 0; k < 16; k++) {
            x = _mm256_fmadd_ps(x, va, vb);
            __asm__ volatile("" : "+x"(x));
        }
    float out[8];
    _mm256_storeu_ps(out, x);
    return out[0];
}

/* The FMA latency in cycles from the vendor and family/model (see the file comment), and
 * whether the table knew the CPU (else 4, the common case, assumed). */
static int fma_latency(int *known) {
    unsigned a, b, c, d;
    char vendor[13] = {0};
    *known = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 4;
    memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
    __get_cpuid(1, &a, &b, &c, &d);
    unsigned fam = (a >> 8) & 15, model = (a >> 4) & 15;
    if (fam == 15) fam += (a >> 20) & 255;
    if (fam == 6 || fam == 15) model |= ((a >> 16) & 15) << 4;
    if (strcmp(vendor, "GenuineIntel") == 0 && fam == 6) {
        static const unsigned hsw_bdw[] = {0x3c, 0x3f, 0x45, 0x46, 0x3d, 0x47, 0x4f, 0x56};
        for (size_t i = 0; i < sizeof hsw_bdw / sizeof *hsw_bdw; i++)
            if (model == hsw_bdw[i]) return *known = 1, 5;
        if (model >= 0x4e) return *known = 1, 4; /* Skylake and every big core since */
    }
    if (strcmp(vendor, "AuthenticAMD") == 0 && fam >= 0x17) {
        *known = 1;
        return fam == 0x17 ? 5 : 4; /* family 17h: Zen 1, Zen+, Zen 2: 5; 19h on (Zen 3..): 4 */
    }
    return 4;
}

/* cpuid leaf 0x16 (base / max MHz; 0 when the CPU or hypervisor does not say). */
static void cpuid_mhz(unsigned *base, unsigned *max) {
    unsigned a = 0, b = 0, c, d;
    *base = *max = 0;
    if (__get_cpuid_max(0, NULL) >= 0x16 && __get_cpuid(0x16, &a, &b, &c, &d)) {
        *base = a & 0xffff;
        *max = b & 0xffff;
    }
}
#endif /* FMA_X86 */

/* ---------------------------------------------------------------------------------------
 * One thread per core, each timing windows of the three kernels and keeping its best.
 * ------------------------------------------------------------------------------------- */

typedef struct worker {
    pthread_t id;
    int cpu;              /* the CPU it is pinned to, -1: not pinned */
    int width;            /* 512, 256 */
    double seconds;       /* how long to keep timing */
    pthread_barrier_t *go;
    double add_per_s;     /* best rate of dependent adds (= clock in Hz) */
    double chain_per_s;   /* best rate of dependent FMAs */
    double fma_per_s;     /* best rate of independent FMA instructions */
    int bf16;             /* the CPU has AVX512-BF16: time vdpbf16ps as well */
    double dp_per_s;      /* best rate of independent vdpbf16ps instructions */
    volatile float sink;
} worker;

static void *run_worker(void *p) {
    worker *w = p;
#ifdef FMA_X86
    if (w->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(w->cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    pthread_barrier_wait(w->go);
    float a = 0.999999f, b = 1e-7f; /* x -> a x + b stays near 1: no denormals, no overflow */
    const int indep = w->width == 512 ? INDEP_512 : INDEP_256;
    double end = now_s() + w->seconds;
    do {
        double t = now_s();
        long x = add_chain(CHAIN_REPS * 4);
        double r = 64.0 * CHAIN_REPS * 4 / (now_s() - t);
        if (r > w->add_per_s) w->add_per_s = r;
        w->sink += (float)x;

        t = now_s();
        float s = w->width == 512 ? fma_chain_512(CHAIN_REPS, a, b) : fma_chain_256(CHAIN_REPS, a, b);
        r = 16.0 * CHAIN_REPS / (now_s() - t);
        if (r > w->chain_per_s) w->chain_per_s = r;

        t = now_s();
        long rounds = CHAIN_REPS * WINDOW_REPS / indep;
        s += w->width == 512 ? fma_indep_512(rounds, a, b) : fma_indep_256(rounds, a, b);
        r = (double)indep * rounds / (now_s() - t);
        if (r > w->fma_per_s) w->fma_per_s = r;
        if (w->bf16) {
            t = now_s();
            s += bf16_dot_indep(CHAIN_REPS * WINDOW_REPS / INDEP_512, 1.0f, 1e-3f);
            r = (double)INDEP_512 * (CHAIN_REPS * WINDOW_REPS / INDEP_512) / (now_s() - t);
            if (r > w->dp_per_s) w->dp_per_s = r;
        }
        w->sink += s;
    } while (now_s() < end);
#else
    (void)w;
#endif
    return NULL;
}

/* The first CPU of each distinct core this process may run on (one thread per core, not per
 * hyperthread), from /sys's topology; n of them into cpus. Without /sys: every allowed CPU. */
static int cores_to_use(int *cpus, int max) {
    cpu_set_t allowed;
    int n = 0;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 0;
    int seen_pkg[1024], seen_core[1024];
    for (int cpu = 0; cpu < CPU_SETSIZE && n < max && n < 1024; cpu++) {
        if (!CPU_ISSET(cpu, &allowed)) continue;
        char path[128];
        int pkg = 0, core = cpu;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%d", &core) != 1) core = cpu;
            fclose(f);
        }
        snprintf(path, sizeof path,
                 "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%d", &pkg) != 1) pkg = 0;
            fclose(f);
        }
        int dup = 0;
        for (int i = 0; i < n; i++) dup |= seen_pkg[i] == pkg && seen_core[i] == core;
        if (dup) continue;
        seen_pkg[n] = pkg, seen_core[n] = core;
        cpus[n++] = cpu;
    }
    return n;
}

/* "cpu MHz" of /proc/cpuinfo's first CPU, 0 when absent. */
static double cpuinfo_mhz(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    double mhz = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "cpu MHz", 7) == 0) {
            const char *c = strchr(line, ':');
            if (c) mhz = atof(c + 1);
            break;
        }
    fclose(f);
    return mhz;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    if (!(seconds > 0) || seconds > 600) {
        fprintf(stderr, "fma_peak: seconds '%s' must be a number in (0, 600]\n", argv[1]);
        return 2;
    }
#ifndef FMA_X86
    printf("fma_peak: not an x86 CPU: no measurement (the bench prints the nominal estimate)\n");
    printf("fma_peak gflops 0 clock_mhz 0 fma_per_cycle 0 isa none lanes 0 cores 0\n");
    return 0;
#else
    __builtin_cpu_init();
    int width = __builtin_cpu_supports("avx512f")                                 ? 512
                : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 256
                                                                                  : 0;
    if (!width) {
        printf("fma_peak: this CPU has no FMA (no AVX2+FMA): no measurement\n");
        printf("fma_peak gflops 0 clock_mhz 0 fma_per_cycle 0 isa none lanes 0 cores 0\n");
        return 0;
    }
    int lanes = width / 32, cpus[1024];
    int bf16 = width == 512 && __builtin_cpu_supports("avx512bf16");
    int n = cores_to_use(cpus, 1024);
    if (n < 1) n = 1, cpus[0] = -1;
    worker *w = calloc((size_t)n, sizeof *w);
    pthread_barrier_t go;
    if (!w || pthread_barrier_init(&go, NULL, (unsigned)n) != 0) {
        fprintf(stderr, "fma_peak: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        w[i] = (worker){.cpu = cpus[i], .width = width, .seconds = seconds, .go = &go,
                        .bf16 = bf16};
        if (pthread_create(&w[i].id, NULL, run_worker, &w[i]) != 0) {
            fprintf(stderr, "fma_peak: cannot start thread %d of %d\n", i + 1, n);
            return 1;
        }
    }
    for (int i = 0; i < n; i++) pthread_join(w[i].id, NULL);

    int known;
    int lat = fma_latency(&known);
    /* the clock: the FMA chain at the table's latency (what the brief of issue 13 asks for);
     * the add chain, which needs no table, checks it */
    double clock_sum = 0, add_sum = 0, fma_sum = 0, lat_sum = 0;
    for (int i = 0; i < n; i++) {
        double hz = w[i].chain_per_s * lat;
        clock_sum += hz;
        add_sum += w[i].add_per_s;
        fma_sum += w[i].fma_per_s;
        lat_sum += w[i].add_per_s / w[i].chain_per_s;
        printf("fma_peak: core %d (cpu %d): clock %.0f MHz (FMA chain x %d cycles), %.0f MHz (add "
               "chain), %.2f FMA instructions/cycle\n", i, w[i].cpu, hz / 1e6, lat,
               w[i].add_per_s / 1e6, w[i].fma_per_s / hz);
    }
    double clock = clock_sum / n, upc = fma_sum / clock_sum;
    double gflops = fma_sum * lanes * 2 / 1e9;
    int units = (int)(upc + 0.5) > 1 ? (int)(upc + 0.5) : 1;
    unsigned base, max;
    cpuid_mhz(&base, &max);
    printf("fma_peak: measured clock %.0f MHz (mean of %d core(s), FMA chain); cross-checks: add "
           "chain %.0f MHz, /proc/cpuinfo %.0f MHz, cpuid 0x16 base %u max %u MHz%s\n",
           clock / 1e6, n, add_sum / n / 1e6, cpuinfo_mhz(), base, max,
           base ? "" : " (0: not reported, as on many VMs)");
    printf("fma_peak: FMA latency %.2f cycles measured against the add chain (table: %d%s)\n",
           lat_sum / n, lat, known ? "" : "; CPU not in the table: assumed");
    printf("fma_peak: %s, %d fp32 lanes, %.2f FMA instructions per cycle per core (%d FMA "
           "unit(s)), %d core(s): peak %.1f GFLOP/s = %d x %.0f MHz x %.2f x %d lanes x 2\n",
           width == 512 ? "AVX-512" : "AVX2+FMA", lanes, upc, units, n, gflops, n, clock / 1e6,
           upc, lanes);
    if (bf16) { /* 16 lanes x 2 pairs x 2 FLOPs per vdpbf16ps */
        double dp_sum = 0;
        for (int i = 0; i < n; i++) dp_sum += w[i].dp_per_s;
        double bf16_gflops = dp_sum * 64 / 1e9;
        printf("fma_peak: AVX512-BF16: %.2f vdpbf16ps per cycle per core: bf16 dot-product peak "
               "%.1f GFLOP/s = %.2f x the f32 FMA peak (no AMX timed)\n", dp_sum / clock_sum,
               bf16_gflops, bf16_gflops / gflops);
    }
    printf("fma_peak gflops %.1f clock_mhz %.0f fma_per_cycle %.2f isa %s lanes %d cores %d\n",
           gflops, clock / 1e6, upc, width == 512 ? "AVX-512" : "AVX2+FMA", lanes, n);
    free(w);
    return 0;
#endif
}
