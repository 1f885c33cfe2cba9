/* flash_attention.cu — fused causal attention of the gpt plugin on a CUDA device, flash style
 * (FlashAttention-2's loop order): one block per (batch*head, tile of rows), every product on
 * tiles in shared memory, no (B*NH,T,T) tensor anywhere. Forward: online softmax over key tiles,
 * O and the row log-sum-exp out. Backward: D = rowsum(dO*O), then P recomputed from lse.
 * Not for: the materialising attention (gpt_cuda.cu, [model] attention = naive), layouts of
 * the other layers, or the CPU path (attention.c, whose contract this follows).
 *
 * Numerics (matching attention.c's GPU emulation): S = scale * q.k with f32 accumulation of
 * exact bf16 (or f32) products; forward P~ = exp(S - m_running), stored rounded to bf16 under
 * bf16 before P~ V, l sums the unrounded P~; O = (sum P~ V) / l, rounded to bf16 under bf16;
 * lse = m + log(l). Backward: P = exp(S - lse) (rounded under bf16, as attention.c's probs()),
 * dV = P^T dO, dP = dO V^T, dS = P * (dP - D) (rounded under bf16), dQ = scale dS K,
 * dK = scale dS^T Q. D = rowsum(dO * O), which equals attention.c's rowsum(P * dP) up to
 * rounding. What differs from the CPU: f32 summation order, expf/logf ulps, and where the
 * bf16 rounding of P sits (P~ before normalisation here, P after it on the CPU).
 * f16 (pure_f16, fp16): everything said of bf16 here holds with f16, in kernels of its own
 * (element type fa_f16, WMMA on __half tiles, f32 accumulation) with bf16's tiles and plan and
 * every bf16 rounding an f16 one. There is no fallback to the naive path under f16.
 *
 * dq: a split pass, no atomics. Kernel 1 runs per query tile (dQ summed over its key tiles in
 * a fixed order, and it writes D); kernel 2 per key tile (dK, dV over its query tiles). The
 * cost is one more Q K^T and dO V^T per tile pair (7 tile products instead of 5); the gain is
 * a deterministic dQ (f32 atomics would make every run's gradient differ in the last bits, and
 * this project's CUDA path is deterministic everywhere else) and no dQ zeroing pass.
 *
 * Tiles: bf16 and f16 BT = 64 rows, 128 threads (4 warps), WMMA 16x16x16; f32 BT = 32, the
 * same 128 threads, SIMT fmaf loops. HD is zero-padded to Dp, a multiple of 16, at most 128. Shared
 * memory per block: flash_plan.h (docs/gpu.md lists the figures; at most ~170 KB, under the
 * H200's 227 KB; raised per kernel with cudaFuncSetAttribute before each launch).
 * Shape legend: see gpt.h and flash_attention.h; BH = B*NH, BT the tile rows.
 */
#include "flash_attention.h"
#include "flash_kernels.cuh"
#include "flash_plan.h"

#include <limits.h>
#include <math.h>

/* ---------------------------------------------------------------------------------------
 * Host side: launch checks and launches
 * ------------------------------------------------------------------------------------- */

static int32_t fa_cuda_fail(ct_error *err, const char *what, cudaError_t e) {
    return ct_error_set(err, CT_ERR_DEVICE, "model gpt: flash attention %s failed on the GPU: %s "
                        "(%s) ---> run with CUDA_LAUNCH_BLOCKING=1 to find the failing call, or "
                        "set [model] attention = naive", what, cudaGetErrorString(e),
                        cudaGetErrorName(e));
}

/* The launch shape of every kernel (gpt_flash_grid), or the error naming the limit. */
static int32_t fa_grid(int64_t B, int64_t T, int64_t NH, int64_t HD, int bf16, dim3 *grid,
                       ct_error *err) {
    uint32_t gx = 0, gy = 0;
    int rc = gpt_flash_grid(B, T, NH, HD, bf16, &gx, &gy);
    if (rc == 1)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "model gpt: attention = flash takes head dims "
                            "1..%d, this model has d_model/n_head = %lld ---> set [model] "
                            "attention = naive, or change n_head", GPT_FLASH_HD_MAX, (long long)HD);
    if (rc != 0)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "model gpt: attention = flash cannot launch "
                            "B=%lld T=%lld n_head=%lld (grid limits: B*n_head <= 2^31-1, "
                            "ceil(T/%d) <= 65535) ---> lower [data] batch_size or seq_len, or "
                            "set [model] attention = naive", (long long)B, (long long)T,
                            (long long)NH, gpt_flash_bt(bf16));
    *grid = dim3(gx, gy, 1);
    return CT_OK;
}

/* Raise the kernel's dynamic shared memory limit to its plan (per launch: cheap, and correct
 * whichever device is current). */
static int32_t fa_smem_limit(const void *kernel, int bytes, ct_error *err) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fa_cuda_fail(err, "shared memory request", e);
    }
    return CT_OK;
}

int32_t gpt_flash_prepare(int64_t B, int64_t T, int64_t NH, int64_t HD, ct_error *err) {
    int dev = 0, optin = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e != cudaSuccess) return fa_cuda_fail(err, "device query", e);
    for (int bf16 = 0; bf16 < 2; bf16++) { /* a 16-bit prepare may still get f32 params; f16
                                              uses bf16's plan (2-byte elements) */
        dim3 grid;
        int32_t rc = fa_grid(B, T, NH, HD, bf16, &grid, err);
        if (rc != CT_OK) return rc;
        /* the dk/dv kernel's plan is the largest of the three */
        const int Dp = gpt_flash_dp(HD);
        const int need = gpt_flash_make_plan(bf16, Dp, 1, 2).bytes;
        if (need > optin)
            return ct_error_set(err, CT_ERR_UNSUPPORTED, "model gpt: attention = flash needs %d "
                                "bytes of shared memory per block for head dim %lld (%s), this GPU "
                                "allows %d ---> set [model] attention = naive", need,
                                (long long)HD, bf16 ? "bf16" : "f32", optin);
    }
    return CT_OK;
}

uint64_t gpt_flash_scratch_bytes(int64_t B, int64_t T, int64_t NH) {
    return (uint64_t)B * (uint64_t)NH * (uint64_t)T * sizeof(float);
}

template <typename E>
static int32_t fa_forward(cudaStream_t st, float *att, float *lse, const float *qkv,
                          const int32_t *ds, int64_t B, int64_t T, int64_t NH, int64_t HD,
                          ct_error *err) {
    dim3 grid;
    int32_t rc = fa_grid(B, T, NH, HD, sizeof(E) == 2, &grid, err);
    if (rc != CT_OK) return rc;
    const int Dp = gpt_flash_dp(HD), bytes = gpt_flash_make_plan(sizeof(E) == 2, Dp, 0, 1).bytes;
    if ((rc = fa_smem_limit((const void *)k_flash_fwd<E>, bytes, err)) != CT_OK) return rc;
    k_flash_fwd<E><<<grid, FA_THREADS, bytes, st>>>(att, lse, qkv, ds, (int)T, (int)NH, (int)HD,
                                                    Dp, 1.0f / sqrtf((float)HD));
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? CT_OK : fa_cuda_fail(err, "forward launch", e);
}

template <typename E>
static int32_t fa_backward(cudaStream_t st, float *dqkv, float *D, const float *datt,
                           const float *att, const float *qkv, const float *lse,
                           const int32_t *ds, int64_t B, int64_t T, int64_t NH, int64_t HD,
                           ct_error *err) {
    dim3 grid;
    int32_t rc = fa_grid(B, T, NH, HD, sizeof(E) == 2, &grid, err);
    if (rc != CT_OK) return rc;
    const int Dp = gpt_flash_dp(HD);
    const float scale = 1.0f / sqrtf((float)HD);
    const int b1 = gpt_flash_make_plan(sizeof(E) == 2, Dp, 1, 1).bytes,
              b2 = gpt_flash_make_plan(sizeof(E) == 2, Dp, 1, 2).bytes;
    if ((rc = fa_smem_limit((const void *)k_flash_bwd_dq<E>, b1, err)) != CT_OK ||
        (rc = fa_smem_limit((const void *)k_flash_bwd_dkdv<E>, b2, err)) != CT_OK)
        return rc;
    k_flash_bwd_dq<E><<<grid, FA_THREADS, b1, st>>>(dqkv, D, datt, att, qkv, lse, ds, (int)T,
                                                    (int)NH, (int)HD, Dp, scale);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return fa_cuda_fail(err, "backward (dq) launch", e);
    k_flash_bwd_dkdv<E><<<grid, FA_THREADS, b2, st>>>(dqkv, D, datt, qkv, lse, ds, (int)T,
                                                      (int)NH, (int)HD, Dp, scale);
    e = cudaGetLastError();
    return e == cudaSuccess ? CT_OK : fa_cuda_fail(err, "backward (dk, dv) launch", e);
}

int32_t gpt_flash_forward(cudaStream_t st, float *att, float *lse, const float *qkv,
                          const int32_t *doc_start, int64_t B, int64_t T, int64_t NH, int64_t HD,
                          int half, ct_error *err) {
    return half == 2 ? fa_forward<fa_f16>(st, att, lse, qkv, doc_start, B, T, NH, HD, err)
           : half    ? fa_forward<uint16_t>(st, att, lse, qkv, doc_start, B, T, NH, HD, err)
                     : fa_forward<float>(st, att, lse, qkv, doc_start, B, T, NH, HD, err);
}

int32_t gpt_flash_backward(cudaStream_t st, float *dqkv, float *D, const float *datt,
                           const float *att, const float *qkv, const float *lse,
                           const int32_t *doc_start, int64_t B, int64_t T, int64_t NH,
                           int64_t HD, int half, ct_error *err) {
    return half == 2 ? fa_backward<fa_f16>(st, dqkv, D, datt, att, qkv, lse, doc_start, B, T, NH,
                                           HD, err)
           : half    ? fa_backward<uint16_t>(st, dqkv, D, datt, att, qkv, lse, doc_start, B, T,
                                             NH, HD, err)
                     : fa_backward<float>(st, dqkv, D, datt, att, qkv, lse, doc_start, B, T, NH,
                                          HD, err);
}
