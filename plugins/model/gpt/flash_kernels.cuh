/* flash_kernels.cuh — the device code of the gpt plugin's flash attention: the tile helpers,
 * the shared-memory products (WMMA under bf16 and f16, SIMT under f32) and the three kernels
 * (forward; backward dq; backward dk, dv). Element types E: float, uint16_t (bf16 bits) and
 * fa_f16 (f16 bits); bf16 and f16 share the tile plan (2-byte elements) and differ only in
 * their rounding (fa_ld, fa_st, fa_tr<E>::out) and WMMA's fragment type. Included by
 * flash_attention.cu (which launches them; its opening comment states the algorithm and
 * numerics) and by tests/cli/flash_emu.cc, which runs the same code on a CPU with a
 * thread-per-CUDA-thread emulation. Not for: host code or launches.
 * Shape legend: see gpt.h and flash_attention.h; BH = B*NH, BT the tile rows.
 */
#ifndef GPT_PLUGIN_FLASH_KERNELS_CUH
#define GPT_PLUGIN_FLASH_KERNELS_CUH

#include "flash_plan.h"

#include <ctrain/numerics.h>

#include <math.h>
#include <stdint.h>
#include <type_traits>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "flash_kernels.cuh needs sm_80 or newer (bf16 WMMA)"
#endif
#endif /* else: the includer provides nvcuda::wmma, __nv_bfloat16, __half and the CUDA built-ins */

#define FA_THREADS GPT_FLASH_THREADS

/* An f16 element (IEEE binary16 bits): the element type of the f16 tiles. */
struct fa_f16 {
    uint16_t bits;
};

/* Per element type E = uint16_t (bf16 bits), fa_f16 or float: the tile rows (flash_plan.h),
 * WMMA's fragment type W (16-bit types) and out(), the rounding of the attention output. */
template <typename E> struct fa_tr;
template <> struct fa_tr<uint16_t> {
    static constexpr int BT = GPT_FLASH_BT_BF16;
    typedef __nv_bfloat16 W;
    static __device__ __forceinline__ float out(float x) { return ct_round_bf16(x); }
};
template <> struct fa_tr<fa_f16> {
    static constexpr int BT = GPT_FLASH_BT_BF16;
    typedef __half W;
    static __device__ __forceinline__ float out(float x) { return ct_round_f16(x); }
};
template <> struct fa_tr<float> {
    static constexpr int BT = GPT_FLASH_BT_F32;
    static __device__ __forceinline__ float out(float x) { return x; }
};
static_assert(GPT_FLASH_BT_BF16 * 2 == FA_THREADS && GPT_FLASH_BT_F32 * 4 == FA_THREADS,
              "the softmax maps 2 (bf16, f16) or 4 (f32) threads to a row");

typedef gpt_flash_plan fa_plan;
template <typename E> __device__ __forceinline__ fa_plan fa_make_plan(int Dp, int bwd, int nacc) {
    return gpt_flash_make_plan(sizeof(E) == 2, Dp, bwd, nacc);
}

/* ---------------------------------------------------------------------------------------
 * Tile helpers
 * ------------------------------------------------------------------------------------- */

__device__ __forceinline__ float fa_ld(const float *p, int i) { return p[i]; }
__device__ __forceinline__ float fa_ld(const uint16_t *p, int i) { return ct_bf16_to_f32(p[i]); }
__device__ __forceinline__ void fa_st(float *p, int i, float x) { p[i] = x; }
__device__ __forceinline__ void fa_st(uint16_t *p, int i, float x) { p[i] = ct_bf16_from_f32(x); }
__device__ __forceinline__ float fa_ld(const fa_f16 *p, int i) { return ct_f16_to_f32(p[i].bits); }
__device__ __forceinline__ void fa_st(fa_f16 *p, int i, float x) { p[i].bits = ct_f16_from_f32(x); }

/* Key j is visible from query t (causal, inside the sequence, and with document masking
 * inside t's document: dsb, the sequence's document starts (T), or NULL). */
__device__ __forceinline__ bool fa_valid(int t, int j, int T, const int32_t *dsb) {
    return j <= t && t < T && (!dsb || j >= dsb[t]);
}

/* dst (BT, ld) = rows r0..r0+BT-1 of src (row stride lds floats), columns 0..HD-1; zero rows
 * past T and columns HD..Dp-1. Converted to E (exact for bf16-valued activations). */
template <typename E>
__device__ void fa_load(E *dst, int ld, const float *src, int64_t lds, int r0, int T, int HD,
                        int Dp, int BT) {
    for (int i = threadIdx.x; i < BT * Dp; i += FA_THREADS) {
        int r = i / Dp, d = i - r * Dp;
        float v = (r0 + r < T && d < HD) ? src[(int64_t)(r0 + r) * lds + d] : 0.0f;
        fa_st(dst, r * ld + d, v);
    }
}

/* Max / sum over the TPR consecutive lanes that share a row (TPR a power of two <= 32). */
template <int TPR> __device__ __forceinline__ float fa_rowmax(float v) {
    for (int o = TPR / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
template <int TPR> __device__ __forceinline__ float fa_rowsum(float v) {
    for (int o = TPR / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* C (M,N) f32 = (acc ? C : 0) + alpha op(A) op(B), all in shared memory, by the whole block
 * (ends with a barrier). op(A) (M,K): A (M,K) row-major, or TA: A stored (K,M). op(B) (K,N):
 * B (K,N) row-major, or TB: B stored (N,K). M, N, K multiples of 16.
 * f32: SIMT, each output element one fmaf chain in k order (no TF32). */
template <bool TA, bool TB>
__device__ void fa_mm(float *C, int ldc, const float *A, int lda, const float *B, int ldb, int M,
                      int N, int K, float alpha, bool acc) {
    for (int i = threadIdx.x; i < M * N; i += FA_THREADS) {
        int r = i / N, c = i - r * N;
        float s = 0.0f;
        for (int k = 0; k < K; k++)
            s = fmaf(TA ? A[k * lda + r] : A[r * lda + k], TB ? B[c * ldb + k] : B[k * ldb + c], s);
        float v = alpha * s;
        C[r * ldc + c] = acc ? C[r * ldc + c] + v : v;
    }
    __syncthreads();
}

/* bf16 and f16 (W: WMMA's element type): tensor cores, one warp per 16x16 output tile, f32
 * accumulation in k order. */
template <bool TA, bool TB, typename W>
__device__ void fa_mm_tc(float *C, int ldc, const W *a16, int lda, const W *b16, int ldb, int M,
                         int N, int K, float alpha, bool acc) {
    using namespace nvcuda;
    typedef typename std::conditional<TA, wmma::col_major, wmma::row_major>::type LA;
    typedef typename std::conditional<TB, wmma::col_major, wmma::row_major>::type LB;
    const int tn = N / 16, tiles = (M / 16) * tn;
    for (int t = threadIdx.x / 32; t < tiles; t += FA_THREADS / 32) {
        const int m0 = (t / tn) * 16, n0 = (t % tn) * 16;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> p, c;
        wmma::fill_fragment(p, 0.0f);
        for (int k0 = 0; k0 < K; k0 += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, W, LA> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, W, LB> fb;
            wmma::load_matrix_sync(fa, a16 + (TA ? k0 * lda + m0 : m0 * lda + k0), lda);
            wmma::load_matrix_sync(fb, b16 + (TB ? n0 * ldb + k0 : k0 * ldb + n0), ldb);
            wmma::mma_sync(p, fa, fb, p);
        }
        float *ct = C + m0 * ldc + n0;
        if (acc) {
            wmma::load_matrix_sync(c, ct, ldc, wmma::mem_row_major);
            for (int i = 0; i < c.num_elements; i++) c.x[i] += alpha * p.x[i];
        } else {
            for (int i = 0; i < c.num_elements; i++) c.x[i] = alpha * p.x[i];
        }
        wmma::store_matrix_sync(ct, c, ldc, wmma::mem_row_major);
    }
    __syncthreads();
}

template <bool TA, bool TB>
__device__ void fa_mm(float *C, int ldc, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                      int M, int N, int K, float alpha, bool acc) {
    fa_mm_tc<TA, TB>(C, ldc, (const __nv_bfloat16 *)A, lda, (const __nv_bfloat16 *)B, ldb, M, N,
                     K, alpha, acc);
}

template <bool TA, bool TB>
__device__ void fa_mm(float *C, int ldc, const fa_f16 *A, int lda, const fa_f16 *B, int ldb,
                      int M, int N, int K, float alpha, bool acc) {
    fa_mm_tc<TA, TB>(C, ldc, (const __half *)A, lda, (const __half *)B, ldb, M, N, K, alpha,
                     acc);
}

/* ---------------------------------------------------------------------------------------
 * Forward: block (bh, query tile), heaviest tiles first; key tiles 0..qt in order
 * ------------------------------------------------------------------------------------- */

template <typename E>
__global__ void __launch_bounds__(FA_THREADS)
k_flash_fwd(float *att, float *lse, const float *qkv, const int32_t *ds, int T, int NH, int HD,
            int Dp, float scale) {
    typedef fa_tr<E> tr;
    const int BT = tr::BT, TPR = FA_THREADS / BT, CPT = BT / TPR;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    const fa_plan pl = fa_make_plan<E>(Dp, 0, 1);
    E *Qs = (E *)(fa_smem + pl.e[0]), *Ks = (E *)(fa_smem + pl.e[1]), *Vs = (E *)(fa_smem + pl.e[2]);
    float *S = (float *)(fa_smem + pl.s), *O = (float *)(fa_smem + pl.acc0);
    E *P = (E *)(fa_smem + pl.p);
    float *rm = (float *)(fa_smem + pl.stats), *rl = rm + BT, *ra = rl + BT;
    const int64_t C = (int64_t)NH * HD, ld = 3 * C;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int qt = (int)gridDim.y - 1 - (int)blockIdx.y, q0 = qt * BT;
    const float *base = qkv + (int64_t)b * T * ld + (int64_t)h * HD;
    const int32_t *dsb = ds ? ds + (int64_t)b * T : NULL; /* document starts, or none */

    fa_load(Qs, pl.ldE, base, ld, q0, T, HD, Dp, BT);
    for (int i = threadIdx.x; i < BT * pl.ldO; i += FA_THREADS) O[i] = 0.0f;
    if (threadIdx.x < BT) rm[threadIdx.x] = -INFINITY, rl[threadIdx.x] = 0.0f;
    const int row = threadIdx.x / TPR, c0 = (threadIdx.x % TPR) * CPT, t = q0 + row;
    const int s0 = dsb && t < T ? dsb[t] : 0; /* the row's first visible key */
    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * BT;
        fa_load(Ks, pl.ldE, base + C, ld, k0, T, HD, Dp, BT);
        fa_load(Vs, pl.ldE, base + 2 * C, ld, k0, T, HD, Dp, BT);
        __syncthreads();
        fa_mm<false, true>(S, pl.ldS, Qs, pl.ldE, Ks, pl.ldE, BT, BT, Dp, scale, false);
        /* online softmax of this row's part; rows past T see keys < T (never written) */
        const float *srow = S + row * pl.ldS;
        float mx = -INFINITY;
        for (int c = c0; c < c0 + CPT; c++)
            if (k0 + c <= t && k0 + c < T && k0 + c >= s0) mx = fmaxf(mx, srow[c]);
        mx = fa_rowmax<TPR>(mx);
        const float m_old = rm[row], m_new = fmaxf(m_old, mx);
        float sum = 0.0f;
        for (int c = c0; c < c0 + CPT; c++) {
            float p = (k0 + c <= t && k0 + c < T && k0 + c >= s0 && m_new > -INFINITY)
                          ? expf(srow[c] - m_new) : 0.0f;
            fa_st(P, row * pl.ldP + c, p);
            sum += p;
        }
        sum = fa_rowsum<TPR>(sum);
        __syncthreads(); /* every lane has read rm[row] */
        if (c0 == 0) {
            float a = m_new > -INFINITY ? expf(m_old - m_new) : 1.0f;
            rl[row] = rl[row] * a + sum;
            rm[row] = m_new;
            ra[row] = a;
        }
        __syncthreads();
        for (int i = threadIdx.x; i < BT * Dp; i += FA_THREADS) {
            int r = i / Dp, d = i - r * Dp;
            O[r * pl.ldO + d] *= ra[r];
        }
        __syncthreads();
        fa_mm<false, false>(O, pl.ldO, P, pl.ldP, Vs, pl.ldE, BT, Dp, BT, 1.0f, true);
    }
    for (int i = threadIdx.x; i < BT * HD; i += FA_THREADS) {
        int r = i / HD, d = i - r * HD;
        if (q0 + r >= T) continue;
        float o = O[r * pl.ldO + d] / rl[r];
        att[((int64_t)b * T + q0 + r) * C + (int64_t)h * HD + d] = tr::out(o);
    }
    if (threadIdx.x < BT && q0 + (int)threadIdx.x < T)
        lse[(int64_t)bh * T + q0 + threadIdx.x] = rm[threadIdx.x] + logf(rl[threadIdx.x]);
}

/* ---------------------------------------------------------------------------------------
 * Backward. Shared step of both kernels, for one (query tile q0, key tile k0) pair with
 * Q, K, V, dO tiles and the rows' lse (rl) and D (rD) in shared memory: S = scale Q K^T,
 * P = exp(S - lse) masked (into P), [dv: dV += P^T dO], dP = dO V^T (into S),
 * dS = P (dP - D) (into dS). Ends with a barrier.
 * ------------------------------------------------------------------------------------- */

template <typename E>
__device__ void fa_bwd_pair(const fa_plan &pl, const E *Qs, const E *Ks, const E *Vs,
                            const E *dOs, float *S, E *P, E *dS, float *dV, const float *rl,
                            const float *rD, const int32_t *dsb, int q0, int k0, int T, int Dp,
                            float scale) {
    const int BT = fa_tr<E>::BT;
    fa_mm<false, true>(S, pl.ldS, Qs, pl.ldE, Ks, pl.ldE, BT, BT, Dp, scale, false);
    for (int i = threadIdx.x; i < BT * BT; i += FA_THREADS) {
        int r = i / BT, c = i - r * BT;
        float p = fa_valid(q0 + r, k0 + c, T, dsb) ? expf(S[r * pl.ldS + c] - rl[r]) : 0.0f;
        fa_st(P, r * pl.ldP + c, p);
    }
    __syncthreads();
    if (dV) fa_mm<true, false>(dV, pl.ldO, P, pl.ldP, dOs, pl.ldE, BT, Dp, BT, 1.0f, true);
    fa_mm<false, true>(S, pl.ldS, dOs, pl.ldE, Vs, pl.ldE, BT, BT, Dp, 1.0f, false);
    for (int i = threadIdx.x; i < BT * BT; i += FA_THREADS) {
        int r = i / BT, c = i - r * BT;
        fa_st(dS, r * pl.ldP + c, fa_ld(P, r * pl.ldP + c) * (S[r * pl.ldS + c] - rD[r]));
    }
    __syncthreads();
}

/* Kernel 1: block (bh, query tile), heaviest first: D of its rows (to Dg too), then
 * dQ = scale sum over key tiles 0..qt of dS K. */
template <typename E>
__global__ void __launch_bounds__(FA_THREADS)
k_flash_bwd_dq(float *dqkv, float *Dg, const float *datt, const float *att, const float *qkv,
               const float *lse, const int32_t *ds, int T, int NH, int HD, int Dp, float scale) {
    typedef fa_tr<E> tr;
    const int BT = tr::BT, TPR = FA_THREADS / BT;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    const fa_plan pl = fa_make_plan<E>(Dp, 1, 1);
    E *Qs = (E *)(fa_smem + pl.e[0]), *dOs = (E *)(fa_smem + pl.e[1]);
    E *Ks = (E *)(fa_smem + pl.e[2]), *Vs = (E *)(fa_smem + pl.e[3]);
    float *S = (float *)(fa_smem + pl.s), *dQ = (float *)(fa_smem + pl.acc0);
    E *P = (E *)(fa_smem + pl.p), *dS = (E *)(fa_smem + pl.ds);
    float *rl = (float *)(fa_smem + pl.stats), *rD = rl + BT;
    const int64_t C = (int64_t)NH * HD, ld = 3 * C;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int qt = (int)gridDim.y - 1 - (int)blockIdx.y, q0 = qt * BT;
    const float *base = qkv + (int64_t)b * T * ld + (int64_t)h * HD;
    const float *dob = datt + (int64_t)b * T * C + (int64_t)h * HD;
    const float *ob = att + (int64_t)b * T * C + (int64_t)h * HD;
    const int32_t *dsb = ds ? ds + (int64_t)b * T : NULL;

    fa_load(Qs, pl.ldE, base, ld, q0, T, HD, Dp, BT);
    fa_load(dOs, pl.ldE, dob, C, q0, T, HD, Dp, BT);
    for (int i = threadIdx.x; i < BT * pl.ldO; i += FA_THREADS) dQ[i] = 0.0f;
    { /* D = rowsum(dO * O), TPR lanes per row */
        const int row = threadIdx.x / TPR, lane = threadIdx.x % TPR, t = q0 + row;
        float s = 0.0f;
        if (t < T)
            for (int d = lane; d < HD; d += TPR) s += dob[(int64_t)t * C + d] * ob[(int64_t)t * C + d];
        s = fa_rowsum<TPR>(s);
        if (lane == 0) {
            rD[row] = s;
            rl[row] = t < T ? lse[(int64_t)bh * T + t] : 0.0f;
            if (t < T) Dg[(int64_t)bh * T + t] = s;
        }
    }
    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * BT;
        fa_load(Ks, pl.ldE, base + C, ld, k0, T, HD, Dp, BT);
        fa_load(Vs, pl.ldE, base + 2 * C, ld, k0, T, HD, Dp, BT);
        __syncthreads();
        fa_bwd_pair<E>(pl, Qs, Ks, Vs, dOs, S, P, dS, NULL, rl, rD, dsb, q0, k0, T, Dp, scale);
        fa_mm<false, false>(dQ, pl.ldO, dS, pl.ldP, Ks, pl.ldE, BT, Dp, BT, scale, true);
    }
    for (int i = threadIdx.x; i < BT * HD; i += FA_THREADS) {
        int r = i / HD, d = i - r * HD;
        if (q0 + r < T) dqkv[((int64_t)b * T + q0 + r) * ld + (int64_t)h * HD + d] = dQ[r * pl.ldO + d];
    }
}

/* Kernel 2 (after kernel 1, which wrote D): block (bh, key tile), heaviest (kt = 0) first:
 * dV = sum over query tiles kt..last of P^T dO, dK = scale sum of dS^T Q. */
template <typename E>
__global__ void __launch_bounds__(FA_THREADS)
k_flash_bwd_dkdv(float *dqkv, const float *Dg, const float *datt, const float *qkv,
                 const float *lse, const int32_t *ds, int T, int NH, int HD, int Dp, float scale) {
    typedef fa_tr<E> tr;
    const int BT = tr::BT;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    const fa_plan pl = fa_make_plan<E>(Dp, 1, 2);
    E *Ks = (E *)(fa_smem + pl.e[0]), *Vs = (E *)(fa_smem + pl.e[1]);
    E *Qs = (E *)(fa_smem + pl.e[2]), *dOs = (E *)(fa_smem + pl.e[3]);
    float *S = (float *)(fa_smem + pl.s), *dK = (float *)(fa_smem + pl.acc0),
          *dV = (float *)(fa_smem + pl.acc1);
    E *P = (E *)(fa_smem + pl.p), *dS = (E *)(fa_smem + pl.ds);
    float *rl = (float *)(fa_smem + pl.stats), *rD = rl + BT;
    const int64_t C = (int64_t)NH * HD, ld = 3 * C;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int kt = blockIdx.y, k0 = kt * BT, nt = gridDim.y;
    const float *base = qkv + (int64_t)b * T * ld + (int64_t)h * HD;
    const float *dob = datt + (int64_t)b * T * C + (int64_t)h * HD;
    const int32_t *dsb = ds ? ds + (int64_t)b * T : NULL;

    fa_load(Ks, pl.ldE, base + C, ld, k0, T, HD, Dp, BT);
    fa_load(Vs, pl.ldE, base + 2 * C, ld, k0, T, HD, Dp, BT);
    for (int i = threadIdx.x; i < BT * pl.ldO; i += FA_THREADS) dK[i] = dV[i] = 0.0f;
    for (int qt = kt; qt < nt; qt++) {
        const int q0 = qt * BT;
        fa_load(Qs, pl.ldE, base, ld, q0, T, HD, Dp, BT);
        fa_load(dOs, pl.ldE, dob, C, q0, T, HD, Dp, BT);
        if (threadIdx.x < BT) {
            int t = q0 + threadIdx.x;
            rl[threadIdx.x] = t < T ? lse[(int64_t)bh * T + t] : 0.0f;
            rD[threadIdx.x] = t < T ? Dg[(int64_t)bh * T + t] : 0.0f;
        }
        __syncthreads();
        fa_bwd_pair<E>(pl, Qs, Ks, Vs, dOs, S, P, dS, dV, rl, rD, dsb, q0, k0, T, Dp, scale);
        fa_mm<true, false>(dK, pl.ldO, dS, pl.ldP, Qs, pl.ldE, BT, Dp, BT, scale, true);
    }
    for (int i = threadIdx.x; i < BT * HD; i += FA_THREADS) {
        int r = i / HD, d = i - r * HD;
        if (k0 + r >= T) continue;
        float *row = dqkv + ((int64_t)b * T + k0 + r) * ld + (int64_t)h * HD + d;
        row[C] = dK[r * pl.ldO + d];
        row[2 * C] = dV[r * pl.ldO + d];
    }
}

#endif /* GPT_PLUGIN_FLASH_KERNELS_CUH */
