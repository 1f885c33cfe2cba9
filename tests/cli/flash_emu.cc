/* flash_emu.cc — the gpt plugin's flash attention kernels (plugins/model/gpt/flash_kernels.cuh,
 * the very source nvcc compiles) run on a CPU: every CUDA thread of a block is a host thread,
 * __syncthreads a barrier of the block's 128, __shfl_xor_sync an exchange between a warp's 32,
 * shared memory a 128-byte aligned buffer poisoned with NaN bytes before each block, WMMA's
 * load/mma/store a warp-wide 16x16x16 product whose calls also check WMMA's rules (32-byte
 * aligned tile pointers, ldm a multiple of 16 bytes). Blocks run one after another on the
 * launch shape of flash_plan.h. Compared with a double-precision causal attention (forward O
 * and lse, backward dq, dk, dv from a random dO) at T = 1, 37, 64, 130 and head dims 16, 24, 64,
 * f32, bf16 and f16 (inputs rounded to the 16-bit type; WMMA's f16 fragments widen with
 * ct_f16_to_f32, as its bf16 ones with ct_bf16_to_f32), and with document masking
 * (ct_stage_args.doc_mask: each row sees keys from its document's start only). What this cannot
 * see: the GPU's own scheduling, memory model and WMMA's register layouts
 * (tests/gpu/model_vs_cpu.c on a GPU sees them).
 * Prints "ok NAME ..." / "FAIL NAME ..." and "N passed, N failed"; exit 1 on a failure.
 * Built and run by tests/cli/test_flash_emu.sh (c++ -std=c++17 -pthread).
 */
#include <pthread.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

/* ---- the CUDA built-ins the kernels use ------------------------------------------------ */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

struct emu_dim3 {
    unsigned x, y, z;
};
static emu_dim3 blockIdx, gridDim, blockDim;
static thread_local emu_dim3 threadIdx;
static pthread_barrier_t emu_block_bar, emu_warp_bar[4];
static float emu_xchg[4][32];
static long emu_faults; /* WMMA rule violations seen (written by lane 0 only) */

static inline void __syncthreads() { pthread_barrier_wait(&emu_block_bar); }

static inline float __shfl_xor_sync(unsigned, float v, int o) {
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    emu_xchg[w][l] = v;
    pthread_barrier_wait(&emu_warp_bar[w]);
    float r = emu_xchg[w][l ^ o];
    pthread_barrier_wait(&emu_warp_bar[w]);
    return r;
}

alignas(128) unsigned char fa_smem[232448]; /* the H200's 227 KB per block */

struct __nv_bfloat16 {
    uint16_t bits;
};
struct __half {
    uint16_t bits;
};

#include <ctrain/numerics.h>

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
/* Each lane holds the whole 16x16 tile; lane 0 does the work and the stores. */
template <typename Use, int M, int N, int K, typename T, typename L = void> struct fragment {
    static const int num_elements = 256;
    float x[256];
};
static inline int lane() { return threadIdx.x & 31; }
static inline void rules(const void *p, unsigned ldm, int es) {
    if (lane() == 0 && (((uintptr_t)p % 32) != 0 || (ldm * es) % 16 != 0)) emu_faults++;
}
static inline float widen(__nv_bfloat16 b) { return ct_bf16_to_f32(b.bits); }
static inline float widen(__half h) { return ct_f16_to_f32(h.bits); }
template <typename Use, typename T, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {
    static_assert(sizeof(T) == 2, "16-bit fragments only");
    rules(p, ldm, 2);
    if (lane()) return;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r * 16 + c] =
                widen(std::is_same<L, row_major>::value ? p[r * ldm + c] : p[r + c * ldm]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t) {
    rules(p, ldm, 4);
    if (lane()) return;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.x[r * 16 + c] = p[r * ldm + c];
}
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t) {
    rules(p, ldm, 4);
    if (lane()) return;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) p[r * ldm + c] = f.x[r * 16 + c];
}
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float> &f, float v) {
    for (int i = 0; i < 256; i++) f.x[i] = v;
}
template <typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, T, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
    if (lane()) return;
    float t[256];
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float s = c.x[r * 16 + n];
            for (int k = 0; k < 16; k++) s = fmaf(a.x[r * 16 + k], b.x[k * 16 + n], s);
            t[r * 16 + n] = s;
        }
    memcpy(d.x, t, sizeof t);
}
} // namespace wmma
} // namespace nvcuda

#include "../../plugins/model/gpt/flash_kernels.cuh"

/* Run body() as a grid of (gx, gy) blocks of 128 threads, blocks one after another. */
template <typename F> static void emu_launch(unsigned gx, unsigned gy, int smem, F body) {
    if (smem > (int)sizeof fa_smem) {
        printf("FAIL launch: %d bytes of shared memory, the emulation has %zu\n", smem, sizeof fa_smem);
        exit(1);
    }
    gridDim = {gx, gy, 1};
    blockDim = {FA_THREADS, 1, 1};
    for (unsigned by = 0; by < gy; by++)
        for (unsigned bx = 0; bx < gx; bx++) {
            blockIdx = {bx, by, 0};
            memset(fa_smem, 0xff, (size_t)smem); /* NaN in every float: unwritten reads show */
            pthread_barrier_init(&emu_block_bar, NULL, FA_THREADS);
            for (int w = 0; w < 4; w++) pthread_barrier_init(&emu_warp_bar[w], NULL, 32);
            std::vector<std::thread> th;
            for (unsigned t = 0; t < FA_THREADS; t++)
                th.emplace_back([t, &body] {
                    threadIdx = {t, 0, 0};
                    body();
                });
            for (auto &x : th) x.join();
            pthread_barrier_destroy(&emu_block_bar);
            for (int w = 0; w < 4; w++) pthread_barrier_destroy(&emu_warp_bar[w]);
        }
}

/* ---- the reference: causal attention in double ---------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double normal() {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    double u = ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    double v = ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

struct ref_out {
    std::vector<double> o, lse, dqkv;
};

/* ds (B*T) or NULL: document masking, row (b,t) sees keys ds[b*T+t]..t only. */
static ref_out reference(const std::vector<float> &qkv, const std::vector<float> &dO, int B, int T,
                         int NH, int HD, const std::vector<int32_t> *ds) {
    const int C = NH * HD;
    const double scale = 1.0 / sqrt((double)HD);
    ref_out r;
    r.o.assign((size_t)B * T * C, 0), r.lse.assign((size_t)B * NH * T, 0);
    r.dqkv.assign((size_t)B * T * 3 * C, 0);
    std::vector<double> P((size_t)T * T), dP((size_t)T * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            auto q = [&](int t, int d) { return (double)qkv[((size_t)b * T + t) * 3 * C + h * HD + d]; };
            auto k = [&](int t, int d) { return (double)qkv[((size_t)b * T + t) * 3 * C + C + h * HD + d]; };
            auto v = [&](int t, int d) { return (double)qkv[((size_t)b * T + t) * 3 * C + 2 * C + h * HD + d]; };
            auto go = [&](int t, int d) { return (double)dO[((size_t)b * T + t) * C + h * HD + d]; };
            auto s0 = [&](int t) { return ds ? (int)(*ds)[(size_t)b * T + t] : 0; };
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY;
                for (int j = s0(t); j <= t; j++) {
                    double s = 0;
                    for (int d = 0; d < HD; d++) s += q(t, d) * k(j, d);
                    P[(size_t)t * T + j] = s * scale;
                    mx = fmax(mx, s * scale);
                }
                double sum = 0;
                for (int j = s0(t); j <= t; j++) sum += exp(P[(size_t)t * T + j] - mx);
                r.lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
                for (int j = s0(t); j <= t; j++) P[(size_t)t * T + j] = exp(P[(size_t)t * T + j] - mx) / sum;
                for (int d = 0; d < HD; d++) {
                    double o = 0;
                    for (int j = s0(t); j <= t; j++) o += P[(size_t)t * T + j] * v(j, d);
                    r.o[((size_t)b * T + t) * C + h * HD + d] = o;
                }
            }
            for (int t = 0; t < T; t++) {
                double D = 0;
                for (int j = s0(t); j <= t; j++) {
                    double s = 0;
                    for (int d = 0; d < HD; d++) s += go(t, d) * v(j, d);
                    dP[(size_t)t * T + j] = s;
                    D += P[(size_t)t * T + j] * s;
                }
                for (int j = s0(t); j <= t; j++) {
                    double ds = P[(size_t)t * T + j] * (dP[(size_t)t * T + j] - D) * scale;
                    for (int d = 0; d < HD; d++) {
                        r.dqkv[((size_t)b * T + t) * 3 * C + h * HD + d] += ds * k(j, d);
                        r.dqkv[((size_t)b * T + j) * 3 * C + C + h * HD + d] += ds * q(t, d);
                        r.dqkv[((size_t)b * T + j) * 3 * C + 2 * C + h * HD + d] +=
                            P[(size_t)t * T + j] * go(t, d);
                    }
                }
            }
        }
    return r;
}

/* ---- the comparison ------------------------------------------------------------------- */

static int passed, failed;

static void check(bool ok, const char *name, const char *what, double v, double tol) {
    printf("%s %s: %s %.3e (tol %.1e)\n", ok ? "ok" : "FAIL", name, what, v, tol);
    ok ? passed++ : failed++;
}

/* ||got - want|| / ||want|| over the elements sel(i) picks; inf when a got is not finite. */
template <typename S>
static double rel_l2(const std::vector<float> &got, const std::vector<double> &want, S sel) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); i++) {
        if (!sel(i)) continue;
        if (!std::isfinite(got[i])) return INFINITY;
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* docs: two sequences packed with documents (document masking, ct_stage_args.doc_mask): the
 * first with starts at 0, T/3 and T/3 + 5, the second at 0 and T - 2 (a one-row document at the
 * end, and a start inside a tile). */
template <typename E> static void run_case(int T, int HD, bool docs = false) {
    const bool bf16 = sizeof(E) == 2; /* a 16-bit type: the plan and grid of bf16 */
    const bool f16 = std::is_same<E, fa_f16>::value;
    const int B = docs ? 2 : 1, NH = 2, C = NH * HD;
    char name[96];
    snprintf(name, sizeof name, "flash_emu_%s%s_T%d_HD%d", docs ? "docs_" : "",
             f16 ? "f16" : bf16 ? "bf16" : "f32", T, HD);
    std::vector<int32_t> ds((size_t)B * T, 0);
    if (docs)
        for (int t = 0; t < T; t++) {
            ds[t] = t >= T / 3 + 5 ? T / 3 + 5 : t >= T / 3 ? T / 3 : 0;
            ds[(size_t)T + t] = t >= T - 2 ? T - 2 : 0;
        }
    const int32_t *dsp = docs ? ds.data() : nullptr;
    std::vector<float> qkv((size_t)B * T * 3 * C), dO((size_t)B * T * C);
    for (auto &x : qkv) x = (float)normal();
    for (auto &x : dO) x = (float)normal();
    if (bf16) {
        for (auto &x : qkv) x = f16 ? ct_round_f16(x) : ct_round_bf16(x);
        for (auto &x : dO) x = f16 ? ct_round_f16(x) : ct_round_bf16(x);
    }
    uint32_t gx = 0, gy = 0;
    if (gpt_flash_grid(B, T, NH, HD, bf16, &gx, &gy) != 0) {
        check(false, name, "grid refused", 0, 0);
        return;
    }
    const int Dp = gpt_flash_dp(HD);
    const float scale = 1.0f / sqrtf((float)HD);
    const float nan = NAN;
    std::vector<float> att((size_t)B * T * C, nan), lse((size_t)B * NH * T, nan),
        dqkv((size_t)B * T * 3 * C, nan), D((size_t)B * NH * T, nan);
    emu_faults = 0;
    emu_launch(gx, gy, gpt_flash_make_plan(bf16, Dp, 0, 1).bytes, [&] {
        k_flash_fwd<E>(att.data(), lse.data(), qkv.data(), dsp, T, NH, HD, Dp, scale);
    });
    emu_launch(gx, gy, gpt_flash_make_plan(bf16, Dp, 1, 1).bytes, [&] {
        k_flash_bwd_dq<E>(dqkv.data(), D.data(), dO.data(), att.data(), qkv.data(), lse.data(),
                          dsp, T, NH, HD, Dp, scale);
    });
    emu_launch(gx, gy, gpt_flash_make_plan(bf16, Dp, 1, 2).bytes, [&] {
        k_flash_bwd_dkdv<E>(dqkv.data(), D.data(), dO.data(), qkv.data(), lse.data(), dsp, T, NH,
                            HD, Dp, scale);
    });
    ref_out r = reference(qkv, dO, B, T, NH, HD, docs ? &ds : nullptr);
    /* f32: the order of f32 sums; bf16: P and dS rounded to bf16 (2^-9) before their products,
     * O rounded on output; f16 the same with f16's 2^-12 (8 times finer than bf16's) */
    const double tol = f16 ? 1e-3 : bf16 ? 1e-2 : 5e-6, tol_lse = bf16 ? 1e-4 : 5e-6;
    auto all = [](size_t) { return true; };
    check(rel_l2(att, r.o, all) <= tol, name, "O rel L2", rel_l2(att, r.o, all), tol);
    double worst = 0;
    for (size_t i = 0; i < lse.size(); i++)
        worst = std::isfinite(lse[i]) ? fmax(worst, fabs(lse[i] - r.lse[i])) : INFINITY;
    check(worst <= tol_lse, name, "lse max abs diff", worst, tol_lse);
    const char *part[3] = {"dq rel L2", "dk rel L2", "dv rel L2"};
    for (int k = 0; k < 3; k++) {
        auto sel = [&](size_t i) { return (int)((i % (3 * (size_t)C)) / C) == k; };
        double e = rel_l2(dqkv, r.dqkv, sel);
        check(e <= tol, name, part[k], e, tol);
    }
    check(emu_faults == 0, name, "WMMA alignment / ldm rule violations", (double)emu_faults, 0);
}

int main() {
    const int shapes[5][2] = {{1, 16}, {37, 24}, {64, 64}, {130, 16}, {130, 64}};
    for (int s = 0; s < 5; s++) {
        run_case<float>(shapes[s][0], shapes[s][1]);
        run_case<uint16_t>(shapes[s][0], shapes[s][1]);
        run_case<fa_f16>(shapes[s][0], shapes[s][1]);
    }
    /* document masking: starts inside and on tile edges, sequences of 2 and 3 documents */
    run_case<float>(130, 16, true);
    run_case<uint16_t>(130, 64, true);
    run_case<float>(64, 24, true);
    run_case<fa_f16>(130, 16, true);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
