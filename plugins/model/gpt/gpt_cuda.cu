/* gpt_cuda.cu — the gpt plugin's stages on a CUDA device: the same units, stages, options and
 * numerics as the CPU code (stages.c, layers.c, attention.c), with cuBLAS products and small
 * kernels for everything else. Not for: the host-facing parts (gpt.c) or the CPU path.
 *
 * Numerics, matching the CPU's GPU emulation: activations live in f32 buffers; under bf16
 * params every activation the CPU rounds is rounded here at the same point (ct_round_bf16),
 * products take bf16 operands (exact copies of the bf16-valued activations, the params as they
 * are) with f32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F) and an f32 result, which a
 * kernel then biases and rounds. Under f32 every product is an f32 GEMM (CUBLAS_COMPUTE_32F,
 * default math: no TF32). Per-element math is numerics.h, built with --fmad=false. Parameter
 * gradients are summed in f32 and added once into the host's buffer in grad_dtype (bf16:
 * g = bf16(f32(g) + sum)), as on the CPU. What differs from the CPU is the order of f32 sums
 * (GEMM tiling, tree reductions in norms and softmax) and expf/logf (<= 2 ulp); with the gelu
 * MLP's cuBLASLt epilogues (mlp_lt.cu, [model] mlp_epilogue = cublaslt) also its h, which stays
 * unrounded f32 under bf16 (g is rounded as fc2's operand); flash attention rounds P before its
 * normalisation (flash_attention.cu).
 *
 * f16 (param_dtype F16: pure_f16, fp16) is bf16's path with the other 16-bit format, as on the
 * CPU (stages.c: m->f16): every rounding point above rounds with ct_round_f16 instead, the
 * operand copies are f16 (cuBLAS CUDA_R_16F operands, f32 accumulation and result,
 * CUBLAS_COMPUTE_32F), 16-bit gradients take g = f16(f32(g) + sum), the head is padded as under
 * bf16, the cuBLASLt epilogues take f16 operands, and flash attention runs its f16 variant
 * (WMMA on f16 tiles, flash_attention.cu). The kernels carry this as a half kind (hk(): 0 f32,
 * 1 bf16, 2 f16, attention.c's h16) in their ph (params), gh (gradient buffer), oh (operand
 * buffer) and r (rounding) arguments. Nothing of the model is refused under f16 on CUDA that
 * bf16 runs.
 *
 * The output head under bf16 compute pads the vocabulary to Vp, a multiple of 64 (GPT_VPAD), so
 * its products have aligned sizes and leading dimensions: the head weight is copied into a
 * (Vp,C) operand whose V..Vp-1 rows stay zero; forward writes (N,Vp) f32 into scratch and one
 * kernel keeps the first V columns (rounded) in the host's (N,V) logits; backward copies
 * dlogits into a (N,Vp) bf16 operand with zero pad columns. The pad columns never reach the
 * host: no loss, metric or sampler sees them, and they add exact zeros to every sum. Under f32
 * the head is unpadded (its operands are the activations themselves, no copies to pad).
 *
 * Attention ([model] attention): flash (default) is flash_attention.cu, fused kernels that
 * never hold the scores (scratch: D, 4*B*NH*T bytes). naive is the materialising version here:
 * scores of every (batch, head) pair as one (T,T) f32 matrix (strided-batched GEMMs over a
 * (B*NH,T,T) scratch, causal mask applied in the softmax kernel); backward recomputes the
 * probabilities from the saved row log-sum-exp. Its scratch is 8*B*NH*T^2 + 28*B*NH*T*HD bytes
 * (7.9 GB for GPT-2 124M at B=64, T=1024); it stays as the switch-off for flash.
 * The embedding gradient groups positions by token on the host and sums each group in position
 * order: deterministic and the CPU's order. Embed forward never waits for the GPU: it queues a
 * copy of the tokens into pinned host memory and records an event; the embed kernel checks each
 * token against V itself (a bad token's row is NaN, never an out-of-bounds read, and its first
 * position goes to a device flag copied back with the tokens). The flag is read at the
 * micro-batch's embed backward, which needs the tokens on the host anyway (it waits on the
 * event, long complete by then), or, without a backward (evaluation), at the next forward when
 * the event has completed. The host's loader checks every window against vocab_size before
 * upload as well (host/data/data.c), so on the host's own path this check never fires.
 * Shape legend: see gpt.h; BH = B*NH.
 */
#include "gpt.h"
#include "gpt_cuda.h"
#include "flash_attention.h"
#include "mlp_lt.h"

#include <ctrain/companion.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NT 256          /* threads per block of the row kernels (a multiple of 32) */
#define EW 256          /* threads per block of element-wise kernels */
#define EW_MAX 8448     /* element-wise grids stride beyond this many blocks */
#define NCH 64          /* row chunks of the two-pass column sums (bias and norm gradients) */
#define GPT_VPAD 64     /* the head's vocabulary is padded to a multiple of this (16-bit compute) */

typedef struct gpt_cuda {
    cudaStream_t   st;
    cublasHandle_t blas;
    char          *arena;       /* one cudaMalloc holding every device buffer */
    uint64_t       arena_bytes;
    /* attention scratch (BH,T,T) and (BH,T,HD); "op" buffers hold GEMM operands in the
     * operand dtype (bf16, f16 or f32: 4 bytes per element reserved) */
    float         *S;           /* scores; in backward then dP */
    void          *P;           /* probabilities (op); in backward then dS */
    void          *q, *k, *v;   /* (BH,T,HD) op */
    void          *dO;          /* (BH,T,HD) op: attention output gradient */
    float         *o;           /* (BH,T,HD) f32: O in forward, dQ in backward */
    float         *dk, *dv;     /* (BH,T,HD) f32 (attention = naive; the buffers above too) */
    float         *fa_D;        /* (BH,T) f32: flash backward's rowsum(dO*O) (attention = flash) */
    float         *qkv_x;       /* (N,3C) grouped-query attention's q, k, v with every key/value
                                   head repeated for its query heads (NULL when KVH == NH) */
    float         *dqkv_x;      /* (N,3C) their gradient, summed back into (N,QW) */
    uint16_t      *xa;          /* 16-bit operand copies (N * max(V,3C,FH)): dy, head dlogits;
                                   padded head: 4*N*Vp bytes, (N,Vp) f32 head output in forward,
                                   (N,Vp) 16-bit dlogits in backward */
    int64_t        Vp;          /* V rounded up to GPT_VPAD under 16-bit compute; else V */
    uint16_t      *wpad;        /* (Vp,C) 16-bit head weight, rows V..Vp-1 zero; NULL: Vp == V */
    uint16_t      *xb;          /* 16-bit operand copies (N * max(C,F)): x */
    float         *gscr;        /* (unit_numel_max) f32 parameter-gradient scratch */
    float         *part;        /* (NCH, 2*max(FH,3C)) partial column sums */
    float         *rope_cos, *rope_sin; /* (max_T, HD/2) when pos == rope */
    int32_t       *order;       /* (N) positions grouped by token */
    int32_t       *gstart;      /* (N+1) group g is order[gstart[g] .. gstart[g+1]) */
    int32_t       *gtok;        /* (N) token of group g */
    double        *dmean;       /* (C) mean_hidden */
    int32_t       *bad_pos;     /* (1) first position with a token outside [0, V); 0x7f7f7f7f: none */
    cudaEvent_t    tok_ready;   /* recorded after embed forward's token and flag read-back */
    int            tok_pending; /* 1: that read-back is queued and its flag not yet checked */
    cudaError_t    op_err;      /* a failed operand-copy launch, reported by the next gemm() */
    gpt_lt        *lt;          /* cuBLASLt epilogues of the gelu MLP (mlp_lt.cu); NULL: kernels */
    int            lt_noted;    /* 1: the fallback to kernels was logged */
    /* host */
    int32_t       *h_tokens;    /* (N) pinned: the micro-batch's tokens (read back in embed forward) */
    int32_t       *h_bad;       /* (1) pinned: bad_pos read back */
    int32_t       *h_order, *h_gstart, *h_gtok; /* (N), (N+1), (N) */
    int32_t       *h_count;     /* (V+1) counting sort */
} gpt_cuda;

/* ---------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------- */

static int32_t cuda_fail(ct_error *err, const char *what, cudaError_t e) {
    return ct_error_set(err, CT_ERR_DEVICE, "model gpt: %s failed on the GPU: %s (%s) ---> run "
                        "with CUDA_LAUNCH_BLOCKING=1 to find the failing call", what,
                        cudaGetErrorString(e), cudaGetErrorName(e));
}
#define TRY(call, what)                                           \
    do {                                                          \
        cudaError_t e_ = (call);                                  \
        if (e_ != cudaSuccess) return cuda_fail(err, (what), e_); \
    } while (0)
#define LAUNCHED(what) TRY(cudaGetLastError(), (what))
#define CHECK(expr)                      \
    do {                                 \
        int32_t rc_ = (expr);            \
        if (rc_ != CT_OK) return rc_;    \
    } while (0)

static unsigned ew_blocks(int64_t n) {
    int64_t b = (n + EW - 1) / EW;
    if (b < 1) b = 1;
    return (unsigned)(b > EW_MAX ? EW_MAX : b);
}

#define FOR_EACH(i, n)                                                                    \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);             \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---------------------------------------------------------------------------------------
 * Half kinds; per-element helpers: typed loads of params, adds into the gradient in grad_dtype
 * ------------------------------------------------------------------------------------- */

/* The 16-bit format of a buffer or a rounding: none (f32), bf16, f16 (attention.c's h16). */
enum { GPT_H_F32 = 0, GPT_H_BF16 = 1, GPT_H_F16 = 2 };

/* The half kind of the current stage's compute: its roundings, operand copies and params. */
static int hk(const gpt *m) { return !m->bf16 ? GPT_H_F32 : m->f16 ? GPT_H_F16 : GPT_H_BF16; }

/* The half kind of a gradient buffer's dtype. */
static int gk(int32_t dtype) {
    return dtype == CT_DTYPE_BF16 ? GPT_H_BF16 : dtype == CT_DTYPE_F16 ? GPT_H_F16 : GPT_H_F32;
}

/* A 16-bit value of kind h (bf16 or f16) as f32, and an f32 rounded to one (nearest even). */
__device__ __forceinline__ float h16_to(uint16_t b, int h) {
    return h == GPT_H_F16 ? ct_f16_to_f32(b) : ct_bf16_to_f32(b);
}
__device__ __forceinline__ uint16_t h16_from(float x, int h) {
    return h == GPT_H_F16 ? ct_f16_from_f32(x) : ct_bf16_from_f32(x);
}

__device__ __forceinline__ float ldp(const void *p, int64_t i, int h) {
    return h ? h16_to(((const uint16_t *)p)[i], h) : ((const float *)p)[i];
}

__device__ __forceinline__ void gadd(void *g, int64_t i, float d, int h) {
    if (h) {
        uint16_t *b = (uint16_t *)g;
        b[i] = h16_from(h16_to(b[i], h) + d, h);
    } else {
        ((float *)g)[i] += d;
    }
}

/* x rounded to kind r (a no-op for GPT_H_F32). */
__device__ __forceinline__ float maybe_round(float x, int r) {
    return r == GPT_H_F16 ? ct_round_f16(x) : r ? ct_round_bf16(x) : x;
}

/* Store x as an operand of kind h (exact for x already of that kind) or f32. */
__device__ __forceinline__ void stop(void *p, int64_t i, float x, int h) {
    if (h) ((uint16_t *)p)[i] = h16_from(x, h);
    else ((float *)p)[i] = x;
}

/* Sum / max over the block (blockDim.x == NT), the same on every thread; fixed order. */
__device__ float block_sum(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads(); /* sh may still be read by a previous call */
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float s = threadIdx.x < NT / 32 ? sh[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) sh[32] = s;
    }
    __syncthreads();
    return sh[32];
}

__device__ float block_max(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float s = threadIdx.x < NT / 32 ? sh[threadIdx.x] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) s = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, o));
        if (threadIdx.x == 0) sh[32] = s;
    }
    __syncthreads();
    return sh[32];
}

/* ---------------------------------------------------------------------------------------
 * Element-wise kernels
 * ------------------------------------------------------------------------------------- */

__global__ void k_round(float *x, int64_t n, int r) { FOR_EACH(i, n) x[i] = maybe_round(x[i], r); }

__global__ void k_to_half(uint16_t *d, const float *s, int64_t n, int h) {
    FOR_EACH(i, n) d[i] = h16_from(s[i], h);
}

/* Padded head: out (N,V) = the first V columns of z (N,Vp), rounded when r. */
__global__ void k_unpad(float *out, const float *z, int64_t N, int64_t V, int64_t Vp, int r) {
    FOR_EACH(i, N * V) {
        int64_t n = i / V, j = i % V;
        out[i] = maybe_round(z[n * Vp + j], r);
    }
}

/* Padded head: d (N,Vp) of kind h = x (N,V) f32 rounded, pad columns 0. */
__global__ void k_to_half_pad(uint16_t *d, const float *x, int64_t N, int64_t V, int64_t Vp,
                              int h) {
    FOR_EACH(i, N * Vp) {
        int64_t n = i / Vp, j = i % Vp;
        d[i] = j < V ? h16_from(x[n * V + j], h) : (uint16_t)0;
    }
}

/* y (N,M) += b (typed params at b_off, or none); rounded when r. */
__global__ void k_bias_round(float *y, int64_t N, int64_t M, const void *P, int ph,
                             int64_t b_off, int r) {
    FOR_EACH(i, N * M) {
        float v = y[i];
        if (b_off >= 0) v += ldp(P, b_off + i % M, ph);
        y[i] = maybe_round(v, r);
    }
}

__global__ void k_add(float *out, const float *a, const float *b, int64_t n, int r) {
    FOR_EACH(i, n) out[i] = maybe_round(a[i] + b[i], r);
}

/* grads[off + i] += d[i] in grad dtype. */
__global__ void k_gadd(void *g, int gh, int64_t off, const float *d, int64_t n) {
    FOR_EACH(i, n) gadd(g, off + i, d[i], gh);
}

/* MLP activation: gelu g = gelu(h) (N,F); swiglu g = silu(h[:, :F]) * h[:, F:], h (N,2F). */
__global__ void k_act_fwd(float *g, const float *h, int64_t N, int64_t F, int swiglu, int r) {
    FOR_EACH(i, N * F) {
        float v;
        if (!swiglu) {
            v = ct_gelu(h[i]);
        } else {
            int64_t n = i / F, j = i % F;
            v = ct_silu(h[n * 2 * F + j]) * h[n * 2 * F + F + j];
        }
        g[i] = maybe_round(v, r);
    }
}

__global__ void k_act_bwd(float *dh, const float *dg, const float *h, int64_t N, int64_t F,
                          int swiglu, int r) {
    FOR_EACH(i, N * F) {
        if (!swiglu) {
            dh[i] = maybe_round(dg[i] * ct_gelu_grad(h[i]), r);
        } else {
            int64_t n = i / F, j = i % F;
            float gate = h[n * 2 * F + j], up = h[n * 2 * F + F + j], d = dg[i];
            dh[n * 2 * F + j] = maybe_round(d * up * ct_silu_grad(gate), r);
            dh[n * 2 * F + F + j] = maybe_round(d * ct_silu(gate), r);
        }
    }
}

/* Rotary embedding of q (NH heads) and k (KVH heads) in qkv (N,QW), in place; inverse: the
 * transposed rotation. */
__global__ void k_rope(float *qkv, int64_t N, int64_t T, int64_t C, int64_t NH, int64_t KVH,
                       int64_t HD, const float *cs, const float *sn, int inverse, int r) {
    int64_t half = HD / 2, QW = C + 2 * KVH * HD, NHK = NH + KVH;
    FOR_EACH(i, N * NHK * half) {
        int64_t d = i % half, hh = (i / half) % NHK, n = i / (half * NHK);
        int64_t part = hh >= NH, h = part ? hh - NH : hh; /* q heads, then k heads */
        int64_t t = n % T;
        float c = cs[t * half + d], s = inverse ? -sn[t * half + d] : sn[t * half + d];
        float *x = qkv + n * QW + part * C + h * HD;
        float a = x[d], b = x[d + half];
        x[d] = maybe_round(a * c - b * s, r);
        x[d + half] = maybe_round(b * c + a * s, r);
    }
}

/* ---------------------------------------------------------------------------------------
 * Embedding: x[n] = wte[tok[n]] (+ wpe[n % T]); backward by token groups and positions
 * ------------------------------------------------------------------------------------- */

/* A token outside [0, V) makes its row NaN (the loss turns non-finite) and its position the
 * candidate for *bad (the first such position wins). */
__global__ void k_embed_fwd(float *x, const int32_t *tok, const void *P, int ph, int64_t wte,
                            int64_t wpe, int64_t N, int64_t T, int64_t C, int64_t V, int32_t *bad,
                            int r) {
    FOR_EACH(i, N * C) {
        int64_t n = i / C, c = i % C;
        int32_t tk = tok[n];
        if (tk < 0 || tk >= V) {
            if (c == 0) atomicMin(bad, (int32_t)n);
            x[i] = __int_as_float(0x7fc00000); /* NaN */
            continue;
        }
        float v = ldp(P, wte + (int64_t)tk * C + c, ph) +
                  (wpe >= 0 ? ldp(P, wpe + (n % T) * C + c, ph) : 0.0f);
        x[i] = maybe_round(v, r);
    }
}

/* One block per token group: the group's rows of dx summed in position order, added once. */
__global__ void k_embed_bwd_wte(void *g, int gh, int64_t wte, const float *dx,
                                const int32_t *order, const int32_t *gstart,
                                const int32_t *gtok, int64_t C) {
    int64_t grp = blockIdx.x;
    int32_t b = gstart[grp], e = gstart[grp + 1];
    int64_t base = wte + (int64_t)gtok[grp] * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float s = 0.0f;
        for (int32_t k = b; k < e; k++) s += dx[(int64_t)order[k] * C + c];
        gadd(g, base + c, s, gh);
    }
}

/* dwpe[t] = sum over b (in order) of dx[b, t]. */
__global__ void k_embed_bwd_wpe(void *g, int gh, int64_t wpe, const float *dx, int64_t B,
                                int64_t T, int64_t C) {
    FOR_EACH(i, T * C) {
        float s = 0.0f;
        for (int64_t b = 0; b < B; b++) s += dx[b * T * C + i];
        gadd(g, wpe + i, s, gh);
    }
}

/* ---------------------------------------------------------------------------------------
 * Norms: one block per row (numerics.h ct_norm_*); parameter gradients as column sums
 * ------------------------------------------------------------------------------------- */

__global__ void k_norm_fwd(float *y, int64_t ldy, float *mean, float *rstd, const float *x,
                           int64_t ldx, const void *P, int ph, int64_t w_off, int64_t b_off,
                           int64_t C, int rms, float eps, int r) {
    __shared__ float sh[33];
    int64_t n = blockIdx.x;
    const float *xr = x + n * ldx;
    float *yr = y + n * ldy;
    float mu = 0.0f;
    if (!rms) {
        float s = 0.0f;
        for (int64_t i = threadIdx.x; i < C; i += NT) s += xr[i];
        mu = block_sum(s, sh) / (float)C;
    }
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < C; i += NT) ss += (xr[i] - mu) * (xr[i] - mu);
    float rs = ct_norm_rstd(block_sum(ss, sh), (float)C, eps);
    if (threadIdx.x == 0) mean[n] = mu, rstd[n] = rs;
    for (int64_t i = threadIdx.x; i < C; i += NT) {
        float b = b_off >= 0 ? ldp(P, b_off + i, ph) : 0.0f;
        yr[i] = maybe_round(ct_norm_apply(xr[i], mu, rs, ldp(P, w_off + i, ph), b), r);
    }
}

/* dx = (add ? dx : 0) + d norm/dx . dy; dx may alias dy when add == 0 (same strides). */
__global__ void k_norm_bwd(float *dx, int64_t lddx, const float *dy, int64_t lddy,
                           const float *x, int64_t ldx, const float *mean, const float *rstd,
                           const void *P, int ph, int64_t w_off, int64_t C, int rms, int add) {
    __shared__ float sh[33];
    int64_t n = blockIdx.x;
    const float *xr = x + n * ldx, *dyr = dy + n * lddy;
    float *dxr = dx + n * lddx;
    float mu = mean[n], rs = rstd[n];
    float s_d = 0.0f, s_dx = 0.0f;
    for (int64_t i = threadIdx.x; i < C; i += NT) {
        float xhat = (xr[i] - mu) * rs, dxhat = dyr[i] * ldp(P, w_off + i, ph);
        s_d += dxhat;
        s_dx += dxhat * xhat;
    }
    s_d = block_sum(s_d, sh);
    s_dx = block_sum(s_dx, sh);
    float m_d = rms ? 0.0f : s_d / (float)C, m_dx = s_dx / (float)C;
    for (int64_t i = threadIdx.x; i < C; i += NT) {
        float xhat = (xr[i] - mu) * rs, dxhat = dyr[i] * ldp(P, w_off + i, ph);
        float v = ct_norm_dx(dxhat, xhat, rs, m_d, m_dx);
        dxr[i] = add ? dxr[i] + v : v;
    }
}

/* Partial column sums over row chunk blockIdx.y: part[ch*2M + j] = sum dy*xhat (norm mode)
 * or sum dy (plain mode, x == NULL); part[ch*2M + M + j] = sum dy (norm mode). */
__global__ void k_colsum_part(float *part, const float *dy, int64_t lddy, const float *x,
                              int64_t ldx, const float *mean, const float *rstd, int64_t N,
                              int64_t M, int64_t rows_per) {
    int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= M) return;
    int64_t ch = blockIdx.y, r0 = ch * rows_per, r1 = r0 + rows_per < N ? r0 + rows_per : N;
    float sw = 0.0f, sb = 0.0f;
    for (int64_t n = r0; n < r1; n++) {
        float d = dy[n * lddy + j];
        if (x) sw += d * (x[n * ldx + j] - mean[n]) * rstd[n];
        sb += d;
    }
    part[ch * 2 * M + j] = x ? sw : sb;
    part[ch * 2 * M + M + j] = sb;
}

/* grads[off + j] += sum over chunks (in order) of part[ch*2M + j]. */
__global__ void k_colsum_finish(void *g, int gh, int64_t off, const float *part, int64_t nch,
                                int64_t M) {
    FOR_EACH(j, M) {
        float s = 0.0f;
        for (int64_t ch = 0; ch < nch; ch++) s += part[ch * 2 * M + j];
        gadd(g, off + j, s, gh);
    }
}

/* out[c] = sum over rows (in order) of x[n, c], in double. */
__global__ void k_colsum_double(double *out, const float *x, int64_t N, int64_t C) {
    FOR_EACH(c, C) {
        double s = 0.0;
        for (int64_t n = 0; n < N; n++) s += (double)x[n * C + c];
        out[c] = s;
    }
}

/* ---------------------------------------------------------------------------------------
 * Attention kernels: layout changes, causal softmax forward and backward
 * ------------------------------------------------------------------------------------- */

/* Grouped-query attention through the multi-head kernels: dst (N,3C) = src (N,QW) with key
 * and value head kh repeated for query heads kh*G .. kh*G+G-1 (transformers' repeat_kv). */
__global__ void k_repeat_kv(float *dst, const float *src, int64_t N, int64_t C, int64_t KC,
                            int64_t HD, int64_t G) {
    int64_t QW = C + 2 * KC;
    FOR_EACH(i, N * 3 * C) {
        int64_t n = i / (3 * C), j = i % (3 * C), part = j / C, w = j % C;
        int64_t col = part == 0 ? j : C + (part - 1) * KC + (w / HD / G) * HD + w % HD;
        dst[i] = src[n * QW + col];
    }
}

/* Its backward: dst (N,QW) = src (N,3C) with the G copies of each key/value head summed in
 * head order (f32; not rounded: the caller stores). */
__global__ void k_sum_kv(float *dst, const float *src, int64_t N, int64_t C, int64_t KC,
                         int64_t HD, int64_t G) {
    int64_t QW = C + 2 * KC;
    FOR_EACH(i, N * QW) {
        int64_t n = i / QW, j = i % QW;
        const float *row = src + n * 3 * C;
        if (j < C) {
            dst[i] = row[j];
            continue;
        }
        int64_t part = (j - C) / KC, w = (j - C) % KC, kh = w / HD, d = w % HD;
        float sum = 0.0f;
        for (int64_t k = 0; k < G; k++) sum += row[C + part * C + (kh * G + k) * HD + d];
        dst[i] = sum;
    }
}

/* (N, ld) rows, columns col0 + h*HD + d  ->  op buffer (BH,T,HD). */
__global__ void k_to_heads(void *dst, int oh, const float *src, int64_t ld, int64_t col0,
                           int64_t B, int64_t T, int64_t NH, int64_t HD) {
    FOR_EACH(i, B * T * NH * HD) {
        int64_t d = i % HD, t = (i / HD) % T, bh = i / (HD * T);
        int64_t b = bh / NH, h = bh % NH;
        stop(dst, i, src[(b * T + t) * ld + col0 + h * HD + d], oh);
    }
}

/* (BH,T,HD) f32 -> (N, ld) rows at columns col0 + h*HD + d; rounded when r. */
__global__ void k_from_heads(float *dst, int64_t ld, int64_t col0, const float *src, int64_t B,
                             int64_t T, int64_t NH, int64_t HD, int r) {
    FOR_EACH(i, B * T * NH * HD) {
        int64_t d = i % HD, t = (i / HD) % T, bh = i / (HD * T);
        int64_t b = bh / NH, h = bh % NH;
        dst[(b * T + t) * ld + col0 + h * HD + d] = maybe_round(src[i], r);
    }
}

/* Document starts (ct_stage_args.doc_mask): ds[b*T + t] = the last position s <= t of sequence
 * b holding eot, else 0 (attention.c's rule). One thread per sequence. */
__global__ void k_doc_start(int32_t *ds, const int32_t *tok, int64_t B, int64_t T, int32_t eot) {
    int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    int32_t s = 0;
    for (int64_t t = 0; t < T; t++) {
        if (t > 0 && tok[b * T + t] == eot) s = (int32_t)t;
        ds[b * T + t] = s;
    }
}

/* One block per score row (bh, t): with_lse: lse = log-sum-exp over s0 <= j <= t (written);
 * then P[j] = exp(S[j] - lse) (rounded to kind r) for s0 <= j <= t, 0 elsewhere; s0 the row's
 * document start (ds (B*T), or 0 when ds is NULL). */
__global__ void k_softmax(const float *S, float *lse, void *P, int oh, int64_t T, int64_t NH,
                          const int32_t *ds, int with_lse, int r) {
    __shared__ float sh[33];
    int64_t row = blockIdx.x, t = row % T;
    int64_t s0 = ds ? ds[(row / T / NH) * T + t] : 0;
    const float *s = S + row * T;
    float L;
    if (with_lse) {
        float mx = -INFINITY;
        for (int64_t j = s0 + threadIdx.x; j <= t; j += NT) mx = fmaxf(mx, s[j]);
        mx = block_max(mx, sh);
        float sum = 0.0f;
        for (int64_t j = s0 + threadIdx.x; j <= t; j += NT) sum += expf(s[j] - mx);
        L = mx + logf(block_sum(sum, sh));
        if (threadIdx.x == 0) lse[row] = L;
    } else {
        L = lse[row];
    }
    for (int64_t j = threadIdx.x; j < T; j += NT)
        stop(P, row * T + j, j <= t && j >= s0 ? maybe_round(expf(s[j] - L), r) : 0.0f, oh);
}

/* One block per row: D = sum_j P*dP; dS = P * (dP - D) (rounded when r) in place of P. */
__global__ void k_softmax_bwd(void *P, int oh, const float *dP, int64_t T, int r) {
    __shared__ float sh[33];
    int64_t row = blockIdx.x, t = row % T;
    const float *dp = dP + row * T;
    float D = 0.0f;
    for (int64_t j = threadIdx.x; j <= t; j += NT) D += ldp(P, row * T + j, oh) * dp[j];
    D = block_sum(D, sh);
    for (int64_t j = threadIdx.x; j <= t; j += NT) {
        float p = ldp(P, row * T + j, oh);
        stop(P, row * T + j, maybe_round(p * (dp[j] - D), r), oh);
    }
}

/* ---------------------------------------------------------------------------------------
 * Products (row-major, as gpt_sgemm): C (M,N) = alpha op(A) op(B) + beta C, batched with
 * element strides sA, sB, sC. Operands in the stage's operand dtype; C is f32.
 * ------------------------------------------------------------------------------------- */

static int32_t gemm(const gpt *m, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb,
                    int64_t sB, float beta, float *C, int64_t ldc, int64_t sC, int64_t batch,
                    ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    if (!A || !B) /* an operand copy failed to launch (operand()) */
        return cuda_fail(err, "k_to_half (GEMM operand copy)",
                         g->op_err != cudaSuccess ? g->op_err : cudaErrorInvalidValue);
    /* cuBLAS takes int sizes and leading dimensions: refuse what would wrap */
    const int64_t dims[7] = {M, N, K, lda, ldb, ldc, batch};
    for (int d = 0; d < 7; d++)
        if (dims[d] < 0 || dims[d] > INT_MAX)
            return ct_error_set(err, CT_ERR_UNSUPPORTED, "model gpt: a GEMM of %lld x %lld x "
                                "%lld (leading dimensions %lld, %lld, %lld; batch %lld) exceeds "
                                "cuBLAS's int range (2^31-1) ---> lower [data] batch_size or "
                                "seq_len (rows = batch_size * seq_len), or the model's widths",
                                (long long)M, (long long)N, (long long)K, (long long)lda,
                                (long long)ldb, (long long)ldc, (long long)batch);
    const int h = hk(m);
    cudaDataType_t t = h == GPT_H_F16 ? CUDA_R_16F : h ? CUDA_R_16BF : CUDA_R_32F;
    /* column-major view: C^T (N,M) = op(B)^T op(A)^T */
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t s;
    if (batch == 1)
        s = cublasGemmEx(g->blas, ob, oa, (int)N, (int)M, (int)K, &alpha, B, t, (int)ldb, A, t,
                         (int)lda, &beta, C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT);
    else
        s = cublasGemmStridedBatchedEx(g->blas, ob, oa, (int)N, (int)M, (int)K, &alpha, B, t,
                                       (int)ldb, sB, A, t, (int)lda, sA, &beta, C, CUDA_R_32F,
                                       (int)ldc, sC, (int)batch, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return ct_error_set(err, CT_ERR_DEVICE, "model gpt: cuBLAS GEMM (%lld x %lld x %lld, "
                            "batch %lld) failed: %s ---> run with CUDA_LAUNCH_BLOCKING=1",
                            (long long)M, (long long)N, (long long)K, (long long)batch,
                            cublasGetStatusString(s));
    return CT_OK;
}

/* An f32 activation (n elements) as a GEMM operand: itself in f32, else its bf16 or f16 copy
 * in buf (exact: the activation holds values of that kind). NULL when the copy's launch failed
 * (the error kept in g->op_err): every operand goes to gemm(), which reports it with the
 * kernel's name. */
static const void *operand(const gpt *m, uint16_t *buf, const float *x, int64_t n) {
    if (!m->bf16) return x;
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    k_to_half<<<ew_blocks(n), EW, 0, g->st>>>(buf, x, n, hk(m));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        g->op_err = e;
        return NULL;
    }
    return buf;
}

/* Element offset off of the stage's params, typed. */
static const void *pw(const gpt *m, const ct_stage_args *a, int64_t off) {
    return m->bf16 ? (const void *)((const uint16_t *)a->params + off)
                   : (const void *)((const float *)a->params + off);
}

/* x rounded to bf16 (f16) values in place under bf16 (f16) compute; a no-op under f32. */
static int32_t round_if(const gpt *m, float *x, int64_t n, ct_error *err) {
    if (!m->bf16) return CT_OK;
    k_round<<<ew_blocks(n), EW, 0, ((gpt_cuda *)m->cuda)->st>>>(x, n, hk(m));
    LAUNCHED("k_round (16-bit rounding)");
    return CT_OK;
}

/* y (N,M) = x W^T + b, rounded under 16-bit compute. xo: x as an operand (operand()). */
static int32_t linear_fwd(const gpt *m, const ct_stage_args *a, float *y, const void *xo,
                          int64_t w_off, int64_t b_off, int64_t N, int64_t K, int64_t M,
                          ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    CHECK(gemm(m, 0, 1, N, M, K, 1.0f, xo, K, 0, pw(m, a, w_off), K, 0, 0.0f, y, M, 0, 1, err));
    if (b_off >= 0 || m->bf16) {
        k_bias_round<<<ew_blocks(N * M), EW, 0, g->st>>>(y, N, M, a->params, hk(m), b_off,
                                                         hk(m));
        LAUNCHED("bias");
    }
    return CT_OK;
}

/* dx (N,K) = dy (N,M) W, W (M,K); dyo: dy as an operand. Rounded under 16-bit compute. */
static int32_t linear_bwd_dx(const gpt *m, const ct_stage_args *a, float *dx, const void *dyo,
                             int64_t w_off, int64_t N, int64_t K, int64_t M, ct_error *err) {
    CHECK(gemm(m, 0, 0, N, K, M, 1.0f, dyo, M, 0, pw(m, a, w_off), K, 0, 0.0f, dx, K, 0, 1, err));
    return round_if(m, dx, N * K, err);
}

/* grads[off..] (M,K) += dy^T x, dy (N,M), x (N,K) as operands; f32 grads take the GEMM's
 * accumulation directly, bf16 and f16 grads get the f32 sum added once. */
static int32_t grad_matmul(const gpt *m, const ct_stage_args *a, int64_t off, const void *dyo,
                           const void *xo, int64_t N, int64_t M, int64_t K, ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    if (a->grad_dtype == CT_DTYPE_F32)
        return gemm(m, 1, 0, M, K, N, 1.0f, dyo, M, 0, xo, K, 0, 1.0f, (float *)a->grads + off,
                    K, 0, 1, err);
    CHECK(gemm(m, 1, 0, M, K, N, 1.0f, dyo, M, 0, xo, K, 0, 0.0f, g->gscr, K, 0, 1, err));
    k_gadd<<<ew_blocks(M * K), EW, 0, g->st>>>(a->grads, gk(a->grad_dtype), off, g->gscr, M * K);
    LAUNCHED("grad add");
    return CT_OK;
}

static int64_t n_chunks(int64_t N) { return N < NCH ? N : NCH; }

/* grads[b_off..] (M) += column sums of dy (N,M). */
static int32_t bias_grad(const gpt *m, const ct_stage_args *a, int64_t b_off, const float *dy,
                         int64_t M, ct_error *err) {
    if (b_off < 0) return CT_OK;
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    int64_t N = m->N, nch = n_chunks(N), per = (N + nch - 1) / nch;
    dim3 grid((unsigned)((M + EW - 1) / EW), (unsigned)nch);
    k_colsum_part<<<grid, EW, 0, g->st>>>(g->part, dy, M, NULL, 0, NULL, NULL, N, M, per);
    LAUNCHED("bias grad (column sums)");
    k_colsum_finish<<<ew_blocks(M), EW, 0, g->st>>>(a->grads, gk(a->grad_dtype), b_off, g->part,
                                                    nch, M);
    LAUNCHED("bias grad");
    return CT_OK;
}

/* Norm of N rows of C (x stride ldx) into y (stride ldy), stats kept. */
/* Rows of width C, or of width n (norm_fwd_n: the k-norm's KC). */
static int32_t norm_fwd_n(const gpt *m, const ct_stage_args *a, float *y, int64_t ldy,
                          float *mean, float *rstd, const float *x, int64_t ldx, int64_t w_off,
                          int64_t b_off, int round, int64_t n, ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    k_norm_fwd<<<(unsigned)m->N, NT, 0, g->st>>>(y, ldy, mean, rstd, x, ldx, a->params, hk(m),
                                                 w_off, b_off, n, m->norm == GPT_NORM_RMSNORM,
                                                 m->eps, round ? hk(m) : GPT_H_F32);
    LAUNCHED("norm forward");
    return CT_OK;
}

static int32_t norm_fwd(const gpt *m, const ct_stage_args *a, float *y, int64_t ldy,
                        float *mean, float *rstd, const float *x, int64_t ldx, int64_t w_off,
                        int64_t b_off, int round, ct_error *err) {
    return norm_fwd_n(m, a, y, ldy, mean, rstd, x, ldx, w_off, b_off, round, m->C, err);
}

/* Parameter gradients (first: dx may overwrite dy), then dx; see k_norm_bwd. */
static int32_t norm_bwd_n(const gpt *m, const ct_stage_args *a, float *dx, int64_t lddx,
                          const float *dy, int64_t lddy, const float *x, int64_t ldx,
                          const float *mean, const float *rstd, int64_t w_off, int64_t b_off,
                          int add, int64_t C, ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    int64_t N = m->N, nch = n_chunks(N), per = (N + nch - 1) / nch;
    int gb = gk(a->grad_dtype);
    dim3 grid((unsigned)((C + EW - 1) / EW), (unsigned)nch);
    k_colsum_part<<<grid, EW, 0, g->st>>>(g->part, dy, lddy, x, ldx, mean, rstd, N, C, per);
    LAUNCHED("norm backward (column sums)");
    k_colsum_finish<<<ew_blocks(C), EW, 0, g->st>>>(a->grads, gb, w_off, g->part, nch, C);
    LAUNCHED("norm backward (weight gradient)");
    if (b_off >= 0) {
        k_colsum_finish<<<ew_blocks(C), EW, 0, g->st>>>(a->grads, gb, b_off, g->part + C, nch, C);
        LAUNCHED("norm backward (bias gradient)");
    }
    k_norm_bwd<<<(unsigned)N, NT, 0, g->st>>>(dx, lddx, dy, lddy, x, ldx, mean, rstd, a->params,
                                              hk(m), w_off, C, m->norm == GPT_NORM_RMSNORM,
                                              add);
    LAUNCHED("norm backward");
    return CT_OK;
}

static int32_t norm_bwd(const gpt *m, const ct_stage_args *a, float *dx, int64_t lddx,
                        const float *dy, int64_t lddy, const float *x, int64_t ldx,
                        const float *mean, const float *rstd, int64_t w_off, int64_t b_off,
                        int add, ct_error *err) {
    return norm_bwd_n(m, a, dx, lddx, dy, lddy, x, ldx, mean, rstd, w_off, b_off, add, m->C, err);
}

/* ---------------------------------------------------------------------------------------
 * Attention, forward and backward (see the file's opening comment)
 * ------------------------------------------------------------------------------------- */

static int32_t attention_fwd(const gpt *m, float *att, float *lse, const float *qkv,
                             ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    int64_t B = m->B, T = m->T, C = m->C, NH = m->NH, HD = m->HD, BH = B * NH;
    const int32_t *ds = m->doc_on ? m->doc_start : NULL; /* document masking */
    if (m->attention == GPT_ATT_FLASH)
        return gpt_flash_forward(g->st, att, lse, qkv, ds, B, T, NH, HD, hk(m), err);
    int64_t nh = BH * T * HD;
    int ob = hk(m);
    k_to_heads<<<ew_blocks(nh), EW, 0, g->st>>>(g->q, ob, qkv, 3 * C, 0, B, T, NH, HD);
    k_to_heads<<<ew_blocks(nh), EW, 0, g->st>>>(g->k, ob, qkv, 3 * C, C, B, T, NH, HD);
    k_to_heads<<<ew_blocks(nh), EW, 0, g->st>>>(g->v, ob, qkv, 3 * C, 2 * C, B, T, NH, HD);
    LAUNCHED("attention layout");
    float scale = 1.0f / sqrtf((float)HD);
    CHECK(gemm(m, 0, 1, T, T, HD, scale, g->q, HD, T * HD, g->k, HD, T * HD, 0.0f, g->S, T,
               T * T, BH, err));
    k_softmax<<<(unsigned)(BH * T), NT, 0, g->st>>>(g->S, lse, g->P, ob, T, NH, ds, 1, ob);
    LAUNCHED("softmax");
    CHECK(gemm(m, 0, 0, T, HD, T, 1.0f, g->P, T, T * T, g->v, HD, T * HD, 0.0f, g->o, HD,
               T * HD, BH, err));
    k_from_heads<<<ew_blocks(nh), EW, 0, g->st>>>(att, C, 0, g->o, B, T, NH, HD, ob);
    LAUNCHED("attention output");
    return CT_OK;
}

/* From datt (N,C) write dqkv (N,3C), every element (not rounded: the caller stores); att is
 * the forward's output (flash's D = rowsum(datt * att)). */
static int32_t attention_bwd(const gpt *m, float *dqkv, const float *datt, const float *att,
                             const float *qkv, const float *lse, ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    int64_t B = m->B, T = m->T, C = m->C, NH = m->NH, HD = m->HD, BH = B * NH;
    const int32_t *ds = m->doc_on ? m->doc_start : NULL;
    if (m->attention == GPT_ATT_FLASH)
        return gpt_flash_backward(g->st, dqkv, g->fa_D, datt, att, qkv, lse, ds, B, T, NH, HD,
                                  hk(m), err);
    int64_t nh = BH * T * HD;
    int ob = hk(m);
    k_to_heads<<<ew_blocks(nh), EW, 0, g->st>>>(g->q, ob, qkv, 3 * C, 0, B, T, NH, HD);
    k_to_heads<<<ew_blocks(nh), EW, 0, g->st>>>(g->k, ob, qkv, 3 * C, C, B, T, NH, HD);
    k_to_heads<<<ew_blocks(nh), EW, 0, g->st>>>(g->v, ob, qkv, 3 * C, 2 * C, B, T, NH, HD);
    k_to_heads<<<ew_blocks(nh), EW, 0, g->st>>>(g->dO, ob, datt, C, 0, B, T, NH, HD);
    LAUNCHED("attention layout");
    float scale = 1.0f / sqrtf((float)HD);
    /* P again from the scores and the saved lse */
    CHECK(gemm(m, 0, 1, T, T, HD, scale, g->q, HD, T * HD, g->k, HD, T * HD, 0.0f, g->S, T,
               T * T, BH, err));
    k_softmax<<<(unsigned)(BH * T), NT, 0, g->st>>>(g->S, (float *)lse, g->P, ob, T, NH, ds, 0,
                                                    ob);
    LAUNCHED("softmax (recompute)");
    /* dV = P^T dO; dP = dO V^T (into S) */
    CHECK(gemm(m, 1, 0, T, HD, T, 1.0f, g->P, T, T * T, g->dO, HD, T * HD, 0.0f, g->dv, HD,
               T * HD, BH, err));
    CHECK(gemm(m, 0, 1, T, T, HD, 1.0f, g->dO, HD, T * HD, g->v, HD, T * HD, 0.0f, g->S, T,
               T * T, BH, err));
    k_softmax_bwd<<<(unsigned)(BH * T), NT, 0, g->st>>>(g->P, ob, g->S, T, ob);
    LAUNCHED("softmax backward");
    /* dQ = scale dS K (into o); dK = scale dS^T Q */
    CHECK(gemm(m, 0, 0, T, HD, T, scale, g->P, T, T * T, g->k, HD, T * HD, 0.0f, g->o, HD,
               T * HD, BH, err));
    CHECK(gemm(m, 1, 0, T, HD, T, scale, g->P, T, T * T, g->q, HD, T * HD, 0.0f, g->dk, HD,
               T * HD, BH, err));
    k_from_heads<<<ew_blocks(nh), EW, 0, g->st>>>(dqkv, 3 * C, 0, g->o, B, T, NH, HD, 0);
    k_from_heads<<<ew_blocks(nh), EW, 0, g->st>>>(dqkv, 3 * C, C, g->dk, B, T, NH, HD, 0);
    k_from_heads<<<ew_blocks(nh), EW, 0, g->st>>>(dqkv, 3 * C, 2 * C, g->dv, B, T, NH, HD, 0);
    LAUNCHED("attention gradient layout");
    return CT_OK;
}

/* Attention of qkv (N,QW): with grouped-query attention (KVH < NH) through the multi-head
 * kernels on the repeated heads (g->qkv_x), the gradients of the copies summed back. */
static int32_t attention_gqa_fwd(const gpt *m, float *att, float *lse, const float *qkv,
                                 ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    if (m->KVH == m->NH) return attention_fwd(m, att, lse, qkv, err);
    int64_t N = m->N, C = m->C;
    k_repeat_kv<<<ew_blocks(N * 3 * C), EW, 0, g->st>>>(g->qkv_x, qkv, N, C, m->KC, m->HD,
                                                       m->NH / m->KVH);
    LAUNCHED("repeat kv");
    return attention_fwd(m, att, lse, g->qkv_x, err);
}

static int32_t attention_gqa_bwd(const gpt *m, float *dqkv, const float *datt, const float *att,
                                 const float *qkv, const float *lse, ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    if (m->KVH == m->NH) return attention_bwd(m, dqkv, datt, att, qkv, lse, err);
    int64_t N = m->N, C = m->C, G = m->NH / m->KVH;
    k_repeat_kv<<<ew_blocks(N * 3 * C), EW, 0, g->st>>>(g->qkv_x, qkv, N, C, m->KC, m->HD, G);
    LAUNCHED("repeat kv");
    CHECK(attention_bwd(m, g->dqkv_x, datt, att, g->qkv_x, lse, err));
    k_sum_kv<<<ew_blocks(N * m->QW), EW, 0, g->st>>>(dqkv, g->dqkv_x, N, C, m->KC, m->HD, G);
    LAUNCHED("sum kv gradients");
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * Stages (the CPU's stages.c, step for step)
 * ------------------------------------------------------------------------------------- */

/* The gelu MLP asked for cuBLASLt epilogues (g->lt) but cuBLASLt had no algorithm for this
 * shape/dtype (or F is not a multiple of 8): say once that the kernels run instead. */
static void lt_fallback_note(gpt *m) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    if (!g->lt || g->lt_noted) return;
    g->lt_noted = 1;
    char msg[256];
    snprintf(msg, sizeof msg, "model gpt: cuBLASLt has no GELU epilogue for the MLP (F=%lld, "
             "%s): its bias and GELU run as separate kernels (slower, same results) ---> set "
             "[model] mlp_epilogue = kernels to silence this", (long long)m->F,
             hk(m) == GPT_H_F16 ? "f16" : m->bf16 ? "bf16" : "f32");
    if (m->api && m->api->log) m->api->log(m->host, CT_LOG_WARN, msg);
}

/* The token check of the latest embed forward: wait (embed backward, which needs the tokens on
 * the host) or only look when its read-back has landed (the next forward). An error names the
 * first bad position and its token. */
static int32_t check_tokens(gpt *m, int wait, ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    if (!g->tok_pending) return CT_OK;
    if (wait) {
        TRY(cudaEventSynchronize(g->tok_ready), "token read-back");
    } else {
        cudaError_t e = cudaEventQuery(g->tok_ready);
        if (e == cudaErrorNotReady) return CT_OK; /* its rows are NaN: the loss says so */
        if (e != cudaSuccess) return cuda_fail(err, "token read-back", e);
    }
    g->tok_pending = 0;
    int32_t n = *g->h_bad;
    if (n >= 0 && n < m->N)
        return ct_error_set(err, CT_ERR_INVALID,
                            "model gpt: token %d at position %lld is outside the vocabulary "
                            "0..%lld ---> check the data's tokenizer against [model] vocab_size",
                            (int)g->h_tokens[n], (long long)n, (long long)(m->V - 1));
    return CT_OK;
}

static int32_t embed_forward(gpt *m, const ct_stage_args *a, ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    int64_t N = m->N, T = m->T, C = m->C;
    if (!a->tokens)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: stage embed got no tokens (NULL)");
    CHECK(check_tokens(m, 0, err)); /* the previous forward's, when it had no backward */
    TRY(cudaMemsetAsync(g->bad_pos, 0x7f, sizeof(int32_t), g->st), "cudaMemsetAsync");
    k_embed_fwd<<<ew_blocks(N * C), EW, 0, g->st>>>(m->res, a->tokens, a->params, hk(m),
                                                    m->root.wte, m->root.wpe, N, T, C, m->V,
                                                    g->bad_pos, hk(m));
    LAUNCHED("embed forward");
    if (m->doc_on) { /* document starts for attention (stages of this micro-batch) */
        k_doc_start<<<(unsigned)((m->B + 127) / 128), 128, 0, g->st>>>(m->doc_start, a->tokens,
                                                                      m->B, T, a->eot_token);
        LAUNCHED("document starts");
    }
    /* pinned destinations: queued, not waited for */
    TRY(cudaMemcpyAsync(g->h_tokens, a->tokens, (size_t)N * sizeof(int32_t),
                        cudaMemcpyDeviceToHost, g->st), "token read-back");
    TRY(cudaMemcpyAsync(g->h_bad, g->bad_pos, sizeof(int32_t), cudaMemcpyDeviceToHost, g->st),
        "token check read-back");
    TRY(cudaEventRecord(g->tok_ready, g->st), "cudaEventRecord");
    g->tok_pending = 1;
    return CT_OK;
}

static int32_t embed_backward(gpt *m, const ct_stage_args *a, ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    int64_t N = m->N, T = m->T, C = m->C, V = m->V;
    int gb = gk(a->grad_dtype);
    if (m->root.wpe >= 0) {
        k_embed_bwd_wpe<<<ew_blocks(T * C), EW, 0, g->st>>>(a->grads, gb, m->root.wpe, m->dres,
                                                            m->B, T, C);
        LAUNCHED("embed backward (wpe)");
    }
    /* positions grouped by token (counting sort of the tokens read back in forward) */
    CHECK(check_tokens(m, 1, err));
    int32_t *cnt = g->h_count;
    memset(cnt, 0, (size_t)(V + 1) * sizeof *cnt);
    for (int64_t n = 0; n < N; n++) cnt[g->h_tokens[n] + 1]++;
    for (int64_t v = 0; v < V; v++) cnt[v + 1] += cnt[v];
    int64_t ng = 0;
    for (int64_t v = 0; v < V; v++)
        if (cnt[v + 1] > cnt[v]) g->h_gstart[ng] = cnt[v], g->h_gtok[ng] = (int32_t)v, ng++;
    g->h_gstart[ng] = (int32_t)N;
    for (int64_t n = 0; n < N; n++) g->h_order[cnt[g->h_tokens[n]]++] = (int32_t)n;
    /* pageable host memory: each copy is staged before it returns */
    TRY(cudaMemcpyAsync(g->order, g->h_order, (size_t)N * 4, cudaMemcpyHostToDevice, g->st),
        "upload");
    TRY(cudaMemcpyAsync(g->gstart, g->h_gstart, (size_t)(ng + 1) * 4, cudaMemcpyHostToDevice,
                        g->st), "upload");
    TRY(cudaMemcpyAsync(g->gtok, g->h_gtok, (size_t)ng * 4, cudaMemcpyHostToDevice, g->st),
        "upload");
    if (ng > 0) {
        k_embed_bwd_wte<<<(unsigned)ng, NT, 0, g->st>>>(a->grads, gb, m->root.wte, m->dres,
                                                        g->order, g->gstart, g->gtok, C);
        LAUNCHED("embed backward (wte)");
    }
    return CT_OK;
}

static int32_t block_forward(gpt *m, const ct_stage_args *a, int64_t l, ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    int64_t N = m->N, C = m->C, F = m->F, QW = m->QW, KC = m->KC;
    int64_t FH = m->mlp == GPT_MLP_SWIGLU ? 2 * F : F;
    const gpt_block_layout *o = &m->blk;
    gpt_block_acts *A = &m->acts[l];
    const float *x = m->res + l * N * C;
    float *out = m->res + (l + 1) * N * C;
    float *tmp = m->dnc;
    int r = hk(m);

    CHECK(norm_fwd(m, a, A->ln1, C, A->ln1_mean, A->ln1_rstd, x, C, o->ln1_w, o->ln1_b, 1, err));
    CHECK(linear_fwd(m, a, A->qkv, operand(m, g->xb, A->ln1, N * C), o->qkv_w, o->qkv_b, N, C,
                     QW, err));
    if (A->qkv_att != A->qkv) {
        TRY(cudaMemcpyAsync(A->qkv_att, A->qkv, (size_t)(N * QW) * sizeof(float),
                            cudaMemcpyDeviceToDevice, g->st), "copy qkv");
        if (m->qk_norm) {
            CHECK(norm_fwd(m, a, A->qkv_att, QW, A->q_mean, A->q_rstd, A->qkv, QW,
                           o->qn_w, o->qn_b, 1, err));
            CHECK(norm_fwd_n(m, a, A->qkv_att + C, QW, A->k_mean, A->k_rstd, A->qkv + C, QW,
                             o->kn_w, o->kn_b, 1, KC, err));
        }
        if (m->pos == GPT_POS_ROPE) {
            int64_t n_rot = N * (m->NH + m->KVH) * (m->HD / 2);
            k_rope<<<ew_blocks(n_rot), EW, 0, g->st>>>(A->qkv_att, N, m->T, C, m->NH, m->KVH,
                                                       m->HD, g->rope_cos, g->rope_sin, 0, r);
            LAUNCHED("rope");
        }
    }
    CHECK(attention_gqa_fwd(m, A->att, A->lse, A->qkv_att, err));
    CHECK(linear_fwd(m, a, tmp, operand(m, g->xb, A->att, N * C), o->proj_w, o->proj_b, N, C, C,
                     err));
    k_add<<<ew_blocks(N * C), EW, 0, g->st>>>(A->xmid, x, tmp, N * C, r);
    LAUNCHED("residual");

    CHECK(norm_fwd(m, a, A->ln2, C, A->ln2_mean, A->ln2_rstd, A->xmid, C, o->ln2_w, o->ln2_b, 1,
                   err));
    int fused = 0; /* h and g by one cuBLASLt GEMM with its bias + GELU epilogue */
    if (g->lt)
        CHECK(gpt_lt_gelu_forward(g->lt, g->st, A->g, A->h, operand(m, g->xb, A->ln2, N * C),
                                  pw(m, a, o->fc_w), a->params, hk(m), o->fc_b, N, C, F,
                                  hk(m), &fused, err));
    if (!fused) {
        lt_fallback_note(m);
        CHECK(linear_fwd(m, a, A->h, operand(m, g->xb, A->ln2, N * C), o->fc_w, o->fc_b, N, C,
                         FH, err));
        k_act_fwd<<<ew_blocks(N * F), EW, 0, g->st>>>(A->g, A->h, N, F,
                                                      m->mlp == GPT_MLP_SWIGLU, r);
        LAUNCHED("mlp activation");
    }
    CHECK(linear_fwd(m, a, tmp, operand(m, g->xb, A->g, N * F), o->fc2_w, o->fc2_b, N, F, C,
                     err));
    k_add<<<ew_blocks(N * C), EW, 0, g->st>>>(out, A->xmid, tmp, N * C, r);
    LAUNCHED("residual");
    return CT_OK;
}

/* m->dres: d loss / d out on entry, d loss / d x on return. */
static int32_t block_backward(gpt *m, const ct_stage_args *a, int64_t l, ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    int64_t N = m->N, C = m->C, F = m->F, QW = m->QW, KC = m->KC;
    int64_t FH = m->mlp == GPT_MLP_SWIGLU ? 2 * F : F;
    const gpt_block_layout *o = &m->blk;
    gpt_block_acts *A = &m->acts[l];
    const float *x = m->res + l * N * C;
    float *dres = m->dres, *dnc = m->dnc;
    int r = hk(m);
    const void *dyo;

    /* MLP branch: its output's gradient is dres */
    dyo = operand(m, g->xa, dres, N * C);
    CHECK(grad_matmul(m, a, o->fc2_w, dyo, operand(m, g->xb, A->g, N * F), N, C, F, err));
    CHECK(bias_grad(m, a, o->fc2_b, dres, C, err));
    int fused = 0; /* dh and fc's bias gradient by one cuBLASLt GEMM (DGELU + BGRAD epilogue) */
    if (g->lt) {
        CHECK(gpt_lt_dgelu_backward(g->lt, g->st, m->dh, o->fc_b >= 0 ? g->part : NULL, dyo,
                                    pw(m, a, o->fc2_w), A->h, N, C, F, hk(m), &fused, err));
        if (fused && o->fc_b >= 0) {
            k_gadd<<<ew_blocks(F), EW, 0, g->st>>>(a->grads, gk(a->grad_dtype), o->fc_b, g->part,
                                                   F);
            LAUNCHED("grad add (fc bias)");
        }
    }
    if (!fused) {
        lt_fallback_note(m);
        CHECK(linear_bwd_dx(m, a, m->dg, dyo, o->fc2_w, N, F, C, err));
        k_act_bwd<<<ew_blocks(N * F), EW, 0, g->st>>>(m->dh, m->dg, A->h, N, F,
                                                      m->mlp == GPT_MLP_SWIGLU, r);
        LAUNCHED("mlp activation backward");
    }
    dyo = operand(m, g->xa, m->dh, N * FH);
    CHECK(grad_matmul(m, a, o->fc_w, dyo, operand(m, g->xb, A->ln2, N * C), N, FH, C, err));
    if (!fused) CHECK(bias_grad(m, a, o->fc_b, m->dh, FH, err));
    CHECK(linear_bwd_dx(m, a, dnc, dyo, o->fc_w, N, C, FH, err));
    CHECK(norm_bwd(m, a, dres, C, dnc, C, A->xmid, C, A->ln2_mean, A->ln2_rstd, o->ln2_w,
                   o->ln2_b, 1, err));
    CHECK(round_if(m, dres, N * C, err)); /* now d loss / d x_mid */

    /* attention branch */
    dyo = operand(m, g->xa, dres, N * C);
    CHECK(grad_matmul(m, a, o->proj_w, dyo, operand(m, g->xb, A->att, N * C), N, C, C, err));
    CHECK(bias_grad(m, a, o->proj_b, dres, C, err));
    CHECK(linear_bwd_dx(m, a, dnc, dyo, o->proj_w, N, C, C, err));
    CHECK(attention_gqa_bwd(m, m->dqkv, dnc, A->att, A->qkv_att, A->lse, err));
    CHECK(round_if(m, m->dqkv, N * QW, err));
    if (m->pos == GPT_POS_ROPE) {
        int64_t n_rot = N * (m->NH + m->KVH) * (m->HD / 2);
        k_rope<<<ew_blocks(n_rot), EW, 0, g->st>>>(m->dqkv, N, m->T, C, m->NH, m->KVH, m->HD,
                                                   g->rope_cos, g->rope_sin, 1, r);
        LAUNCHED("rope backward");
    }
    if (m->qk_norm) {
        CHECK(norm_bwd(m, a, m->dqkv, QW, m->dqkv, QW, A->qkv, QW, A->q_mean, A->q_rstd,
                       o->qn_w, o->qn_b, 0, err));
        CHECK(norm_bwd_n(m, a, m->dqkv + C, QW, m->dqkv + C, QW, A->qkv + C, QW,
                         A->k_mean, A->k_rstd, o->kn_w, o->kn_b, 0, KC, err));
        CHECK(round_if(m, m->dqkv, N * QW, err));
    }
    dyo = operand(m, g->xa, m->dqkv, N * QW);
    CHECK(grad_matmul(m, a, o->qkv_w, dyo, operand(m, g->xb, A->ln1, N * C), N, QW, C, err));
    CHECK(bias_grad(m, a, o->qkv_b, m->dqkv, QW, err));
    CHECK(linear_bwd_dx(m, a, dnc, dyo, o->qkv_w, N, C, QW, err));
    CHECK(norm_bwd(m, a, dres, C, dnc, C, x, C, A->ln1_mean, A->ln1_rstd, o->ln1_w, o->ln1_b, 1,
                   err));
    CHECK(round_if(m, dres, N * C, err)); /* now d loss / d x */
    return CT_OK;
}

/* The head by row ranges (ABI 1.3) as stages.c runs it: rows [r0, r0+n) of the micro-batch
 * (all N when row_count is 0; the caller, gpt_forward/gpt_backward, checked the range); the
 * final norm runs over all N rows in the range that starts at 0, its backward in the range
 * that ends at N; logits/dlogits are the range's own (n,V) (gpt_head_rows). */
static int32_t head_forward(gpt *m, const ct_stage_args *a, ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    int64_t N = m->N, C = m->C, V = m->V, r0, n;
    gpt_head_rows(m, a, &r0, &n);
    if (!a->logits)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: stage head got no logits buffer (NULL)");
    const float *x = m->res + m->L * N * C;
    if (r0 == 0)
        CHECK(norm_fwd(m, a, m->lnf, C, m->lnf_mean, m->lnf_rstd, x, C, m->root.lnf_w,
                       m->root.lnf_b, 1, err));
    const void *xo = operand(m, g->xb, m->lnf + r0 * C, n * C);
    if (!m->bf16 || !g->wpad)
        return linear_fwd(m, a, a->logits, xo, m->root.head, -1, n, C, V, err);
    /* padded: z (n,Vp) = lnf Wpad^T into xa's bytes, then the first V columns, rounded */
    const int64_t Vp = g->Vp;
    float *z = (float *)g->xa;
    TRY(cudaMemcpyAsync(g->wpad, pw(m, a, m->root.head), (size_t)(V * C) * 2,
                        cudaMemcpyDeviceToDevice, g->st), "head weight copy (padded)");
    CHECK(gemm(m, 0, 1, n, Vp, C, 1.0f, xo, C, 0, g->wpad, C, 0, 0.0f, z, Vp, 0, 1, err));
    k_unpad<<<ew_blocks(n * V), EW, 0, g->st>>>(a->logits, z, n, V, Vp, hk(m));
    LAUNCHED("k_unpad (head logits)");
    return CT_OK;
}

static int32_t head_backward(gpt *m, const ct_stage_args *a, ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    int64_t N = m->N, C = m->C, V = m->V, r0, n;
    gpt_head_rows(m, a, &r0, &n);
    if (!a->dlogits)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: stage head got no dlogits (NULL)");
    float *dlnf = m->dnc + r0 * C; /* (n,C) the range's rows */
    const float *lnf = m->lnf + r0 * C;
    if (!m->bf16 || !g->wpad) {
        /* bf16 (f16): dlogits rounded to bf16 (f16) by the operand copy, as the CPU rounds them */
        const void *dyo = operand(m, g->xa, a->dlogits, n * V);
        CHECK(linear_bwd_dx(m, a, dlnf, dyo, m->root.head, n, C, V, err));
        CHECK(grad_matmul(m, a, m->root.head, dyo, operand(m, g->xb, lnf, n * C), n, V, C,
                          err));
    } else {
        /* padded: dlogits as a (n,Vp) 16-bit operand with zero pad columns; the weight again
         * (the params may be another gather than forward's); the gradient of the V real rows
         * only (lda = Vp) */
        const int64_t Vp = g->Vp;
        k_to_half_pad<<<ew_blocks(n * Vp), EW, 0, g->st>>>(g->xa, a->dlogits, n, V, Vp, hk(m));
        LAUNCHED("k_to_half_pad (head dlogits)");
        TRY(cudaMemcpyAsync(g->wpad, pw(m, a, m->root.head), (size_t)(V * C) * 2,
                            cudaMemcpyDeviceToDevice, g->st), "head weight copy (padded)");
        CHECK(gemm(m, 0, 0, n, C, Vp, 1.0f, g->xa, Vp, 0, g->wpad, C, 0, 0.0f, dlnf, C, 0, 1,
                   err));
        CHECK(round_if(m, dlnf, n * C, err));
        const void *xo = operand(m, g->xb, lnf, n * C);
        if (a->grad_dtype == CT_DTYPE_F32) {
            CHECK(gemm(m, 1, 0, V, C, n, 1.0f, g->xa, Vp, 0, xo, C, 0, 1.0f,
                       (float *)a->grads + m->root.head, C, 0, 1, err));
        } else {
            CHECK(gemm(m, 1, 0, V, C, n, 1.0f, g->xa, Vp, 0, xo, C, 0, 0.0f, g->gscr, C, 0, 1,
                       err));
            k_gadd<<<ew_blocks(V * C), EW, 0, g->st>>>(a->grads, gk(a->grad_dtype), m->root.head,
                                                       g->gscr, V * C);
            LAUNCHED("grad add (head)");
        }
    }
    if (r0 + n < N) return CT_OK; /* the final norm's backward waits for the last range */
    const float *x = m->res + m->L * N * C;
    CHECK(norm_bwd(m, a, m->dres, C, m->dnc, C, x, C, m->lnf_mean, m->lnf_rstd, m->root.lnf_w,
                   m->root.lnf_b, 0, err));
    CHECK(round_if(m, m->dres, N * C, err));
    return CT_OK;
}

extern "C" int32_t gpt_cuda_forward(gpt *m, const ct_stage_args *a, ct_error *err) {
    if (a->stage == 0) return embed_forward(m, a, err);
    if (a->stage == m->L + 1) return head_forward(m, a, err);
    return block_forward(m, a, a->stage - 1, err);
}

extern "C" int32_t gpt_cuda_backward(gpt *m, const ct_stage_args *a, ct_error *err) {
    if (a->stage == 0) return embed_backward(m, a, err);
    if (a->stage == m->L + 1) return head_backward(m, a, err);
    return block_backward(m, a, a->stage - 1, err);
}

extern "C" int32_t gpt_cuda_mean_hidden(gpt *m, float *out, ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    if (!g || !m->arena)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: mean_hidden before any forward");
    k_colsum_double<<<ew_blocks(m->C), EW, 0, g->st>>>(g->dmean, m->lnf, m->N, m->C);
    LAUNCHED("mean_hidden");
    double *h = (double *)malloc((size_t)m->C * sizeof(double));
    if (!h) return ct_error_set(err, CT_ERR_NOMEM, "model gpt: out of memory");
    cudaError_t e = cudaMemcpyAsync(h, g->dmean, (size_t)m->C * sizeof(double),
                                    cudaMemcpyDeviceToHost, g->st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(g->st);
    if (e == cudaSuccess)
        for (int64_t c = 0; c < m->C; c++) out[c] = (float)(h[c] / (double)m->N);
    free(h);
    if (e != cudaSuccess) return cuda_fail(err, "mean_hidden read-back", e);
    return CT_OK;
}

extern "C" int32_t gpt_cuda_hidden_rows(gpt *m, int64_t row0, int64_t n_rows, float *out,
                                        ct_error *err) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    if (!g || !m->arena)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: hidden_rows before any forward");
    cudaError_t e = cudaMemcpyAsync(out, m->lnf + row0 * m->C,
                                    (size_t)(n_rows * m->C) * sizeof(float),
                                    cudaMemcpyDeviceToHost, g->st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(g->st);
    if (e != cudaSuccess) return cuda_fail(err, "hidden_rows read-back", e);
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * prepare / free: one device arena for activations and scratch
 * ------------------------------------------------------------------------------------- */

/* Carve `bytes` (256-byte aligned) from the arena cursor; base NULL: only count. */
static void *carve(char *base, uint64_t *cursor, uint64_t bytes) {
    uint64_t at = *cursor;
    *cursor += ct_align_up(bytes ? bytes : 1, 256);
    return base ? (void *)(base + at) : NULL;
}
#define CARVE_F(n) ((float *)carve(base, &c, (uint64_t)(n) * 4))

static uint64_t layout(gpt *m, gpt_cuda *g, char *base) {
    uint64_t c = 0;
    uint64_t N = (uint64_t)m->N, C = (uint64_t)m->C, T = (uint64_t)m->T, F = (uint64_t)m->F;
    uint64_t FH = m->mlp == GPT_MLP_SWIGLU ? 2 * F : F, V = (uint64_t)m->V;
    uint64_t BH = (uint64_t)(m->B * m->NH), HD = (uint64_t)m->HD, QW = (uint64_t)m->QW;
    m->tokens = m->tok_order = m->tok_start = NULL; /* CPU-only buffers */
    m->doc_start = (int32_t *)carve(base, &c, N * sizeof(int32_t)); /* k_doc_start */
    m->att_pd = NULL;
    m->att_s = m->att_dp = m->wbuf = m->gbuf = m->dlog = NULL;
    m->gbuf_n = 0;
    m->res = CARVE_F((uint64_t)(m->L + 1) * N * C);
    for (int64_t l = 0; l < m->L; l++) {
        gpt_block_acts *b = &m->acts[l];
        b->ln1 = CARVE_F(N * C);
        b->ln1_mean = CARVE_F(N);
        b->ln1_rstd = CARVE_F(N);
        b->qkv = CARVE_F(N * QW);
        b->q_mean = b->q_rstd = b->k_mean = b->k_rstd = NULL;
        if (m->qk_norm) {
            b->q_mean = CARVE_F(N);
            b->q_rstd = CARVE_F(N);
            b->k_mean = CARVE_F(N);
            b->k_rstd = CARVE_F(N);
        }
        b->qkv_att = (m->qk_norm || m->pos == GPT_POS_ROPE) ? CARVE_F(N * QW) : b->qkv;
        b->att = CARVE_F(N * C);
        b->lse = CARVE_F(N * (uint64_t)m->NH);
        b->xmid = CARVE_F(N * C);
        b->ln2 = CARVE_F(N * C);
        b->ln2_mean = CARVE_F(N);
        b->ln2_rstd = CARVE_F(N);
        b->h = CARVE_F(N * FH);
        b->g = CARVE_F(N * F);
    }
    m->lnf = CARVE_F(N * C);
    m->lnf_mean = CARVE_F(N);
    m->lnf_rstd = CARVE_F(N);
    m->dres = CARVE_F(N * C);
    m->dnc = CARVE_F(N * C);
    m->dqkv = CARVE_F(N * QW);
    g->qkv_x = g->dqkv_x = NULL;
    if (m->KVH != m->NH) {
        g->qkv_x = CARVE_F(N * 3 * C);
        g->dqkv_x = CARVE_F(N * 3 * C);
    }
    m->dh = CARVE_F(N * FH);
    m->dg = CARVE_F(N * F);
    g->S = NULL, g->P = g->q = g->k = g->v = g->dO = NULL, g->o = g->dk = g->dv = g->fa_D = NULL;
    if (m->attention == GPT_ATT_NAIVE) {
        g->S = CARVE_F(BH * T * T);
        g->P = CARVE_F(BH * T * T);
        g->q = CARVE_F(BH * T * HD);
        g->k = CARVE_F(BH * T * HD);
        g->v = CARVE_F(BH * T * HD);
        g->dO = CARVE_F(BH * T * HD);
        g->o = CARVE_F(BH * T * HD);
        g->dk = CARVE_F(BH * T * HD);
        g->dv = CARVE_F(BH * T * HD);
    } else {
        g->fa_D = (float *)carve(base, &c, gpt_flash_scratch_bytes(m->B, m->T, m->NH));
    }
    g->xa = g->xb = NULL;
    g->wpad = NULL;
    const int half = m->dtype == CT_DTYPE_BF16 || m->dtype == CT_DTYPE_F16;
    g->Vp = half ? (int64_t)ct_align_up(V, GPT_VPAD) : (int64_t)V;
    if (half) {
        uint64_t wa = V > FH ? V : FH, wb = C > F ? C : F;
        if (wa < 3 * C) wa = 3 * C;
        uint64_t xa_bytes = N * wa * 2;
        if ((uint64_t)g->Vp != V) { /* the padded head's (N,Vp) f32 output lives here too */
            if (xa_bytes < N * (uint64_t)g->Vp * 4) xa_bytes = N * (uint64_t)g->Vp * 4;
            g->wpad = (uint16_t *)carve(base, &c, (uint64_t)g->Vp * C * 2); /* zeroed once */
        }
        g->xa = (uint16_t *)carve(base, &c, xa_bytes);
        g->xb = (uint16_t *)carve(base, &c, N * wb * 2);
    }
    g->gscr = CARVE_F(m->unit_numel_max);
    uint64_t pw = FH > 3 * C ? FH : 3 * C;
    g->part = CARVE_F((uint64_t)NCH * 2 * pw);
    g->rope_cos = g->rope_sin = NULL;
    if (m->pos == GPT_POS_ROPE) {
        g->rope_cos = CARVE_F((uint64_t)m->max_T * HD / 2);
        g->rope_sin = CARVE_F((uint64_t)m->max_T * HD / 2);
    }
    g->order = (int32_t *)carve(base, &c, N * 4);
    g->gstart = (int32_t *)carve(base, &c, (N + 1) * 4);
    g->gtok = (int32_t *)carve(base, &c, N * 4);
    g->dmean = (double *)carve(base, &c, C * 8);
    g->bad_pos = (int32_t *)carve(base, &c, 4);
    return c;
}

static void free_host(gpt_cuda *g) {
    cudaFreeHost(g->h_tokens);
    cudaFreeHost(g->h_bad);
    g->h_bad = NULL;
    g->tok_pending = 0;
    free(g->h_order);
    free(g->h_gstart);
    free(g->h_gtok);
    free(g->h_count);
    g->h_tokens = g->h_order = g->h_gstart = g->h_gtok = g->h_count = NULL;
}

extern "C" void gpt_cuda_free(gpt *m) {
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    if (!g) return;
    if (g->st || g->arena) cudaStreamSynchronize(g->st);
    if (g->arena) cudaFree(g->arena);
    if (g->blas) cublasDestroy(g->blas);
    gpt_lt_destroy(g->lt);
    free_host(g);
    if (g->tok_ready) cudaEventDestroy(g->tok_ready);
    free(g);
    m->cuda = NULL;
    m->arena = NULL;
}

extern "C" int32_t gpt_cuda_prepare(gpt *m, int64_t B, int64_t T, int32_t dtype, ct_error *err) {
    if (m->arena && m->B == B && m->T == T && m->dtype == dtype) return CT_OK;
    gpt_cuda *g = (gpt_cuda *)m->cuda;
    if (!g) {
        g = (gpt_cuda *)calloc(1, sizeof *g);
        if (!g) return ct_error_set(err, CT_ERR_NOMEM, "model gpt: out of memory");
        m->cuda = g;
        g->st = m->dev.vt && m->dev.vt->native_stream
                    ? (cudaStream_t)m->dev.vt->native_stream(m->dev.self) : 0;
        cublasStatus_t s = cublasCreate(&g->blas);
        if (s != CUBLAS_STATUS_SUCCESS) {
            g->blas = NULL;
            return ct_error_set(err, CT_ERR_DEVICE, "model gpt: cublasCreate failed: %s ---> "
                                "check nvidia-smi and that libcublas matches the driver",
                                cublasGetStatusString(s));
        }
        if ((s = cublasSetStream(g->blas, g->st)) != CUBLAS_STATUS_SUCCESS ||
            (s = cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS)
            return ct_error_set(err, CT_ERR_DEVICE, "model gpt: cublasSetStream / "
                                "cublasSetMathMode (no TF32: f32 stays f32) failed: %s ---> check "
                                "that libcublas matches the driver", cublasGetStatusString(s));
        TRY(cudaEventCreateWithFlags(&g->tok_ready, cudaEventDisableTiming), "cudaEventCreate");
        if (m->mlp == GPT_MLP_GELU && m->mlp_epilogue == GPT_EPI_CUBLASLT)
            CHECK(gpt_lt_create(&g->lt, m->F, err));
    }
    /* flash's head dim, grid and shared memory limits, before the old buffers go */
    if (m->attention == GPT_ATT_FLASH) CHECK(gpt_flash_prepare(B, T, m->NH, m->HD, err));
    if (g->arena) {
        cudaStreamSynchronize(g->st);
        cudaFree(g->arena);
        g->arena = NULL;
        m->arena = NULL;
    }
    free_host(g);
    free(m->acts);
    m->acts = (gpt_block_acts *)calloc((size_t)m->L, sizeof *m->acts);
    if (!m->acts) return ct_error_set(err, CT_ERR_NOMEM, "model gpt: out of memory");
    m->B = B, m->T = T, m->N = B * T, m->dtype = dtype;
    uint64_t bytes = layout(m, g, NULL);
    cudaError_t e = cudaMalloc((void **)&g->arena, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        g->arena = NULL;
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return ct_error_set(err, CT_ERR_NOMEM, "model gpt: cannot allocate %.2f GiB of "
                            "activations and scratch on the GPU for B=%lld T=%lld (%.2f of %.2f "
                            "GiB free) ---> lower [data] batch_size or seq_len",
                            (double)bytes / 1073741824.0, (long long)B, (long long)T,
                            fr / 1073741824.0, tot / 1073741824.0);
    }
    g->arena_bytes = bytes;
    layout(m, g, g->arena);
    m->arena = g->arena;
    size_t N = (size_t)m->N;
    TRY(cudaMallocHost((void **)&g->h_tokens, N * 4), "cudaMallocHost (tokens)");
    TRY(cudaMallocHost((void **)&g->h_bad, 4), "cudaMallocHost (token check)");
    g->h_order = (int32_t *)malloc(N * 4);
    g->h_gstart = (int32_t *)malloc((N + 1) * 4);
    g->h_gtok = (int32_t *)malloc(N * 4);
    g->h_count = (int32_t *)malloc((size_t)(m->V + 1) * 4);
    if (!g->h_tokens || !g->h_order || !g->h_gstart || !g->h_gtok || !g->h_count)
        return ct_error_set(err, CT_ERR_NOMEM, "model gpt: out of memory");
    if (m->pos == GPT_POS_ROPE) {
        size_t nb = (size_t)(m->max_T * (m->HD / 2)) * sizeof(float);
        TRY(cudaMemcpyAsync(g->rope_cos, m->rope_cos, nb, cudaMemcpyHostToDevice, g->st), "rope");
        TRY(cudaMemcpyAsync(g->rope_sin, m->rope_sin, nb, cudaMemcpyHostToDevice, g->st), "rope");
    }
    TRY(cudaMemsetAsync(g->arena, 0, bytes, g->st), "cudaMemset");
    TRY(cudaStreamSynchronize(g->st), "prepare");
    return CT_OK;
}

/* What this companion implements: gpt.c refuses it when this does not match its own build. */
CT_COMPANION_INFO(GPT_CUDA_INTERFACE, sizeof(struct gpt))
