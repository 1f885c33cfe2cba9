/* flash_attention.h — the gpt plugin's fused causal attention on a CUDA device
 * (flash_attention.cu): forward with an online softmax over key tiles, backward recomputing the
 * probabilities from the saved row log-sum-exp, never a (B*NH,T,T) tensor in memory.
 * Not for: the materialising attention ([model] attention = naive, gpt_cuda.cu) or the CPU's
 * blocked attention (attention.c), whose contract and numerics this follows.
 *
 * Shape legend: see gpt.h. q, k, v of row n = b*T + t, head h are qkv[n*3C + {0,C,2C} + h*HD + d]
 * (f32 buffers; bf16-valued under bf16 compute); att and datt are (N,C) with head h at columns
 * h*HD..; lse and D are (B,NH,T). Under bf16 the tiles are bf16 (exact copies), the products run
 * on tensor cores (WMMA m16n16k16, f32 accumulation) and the probabilities and dS are rounded
 * to bf16 before their products, as the CPU rounds them; under f16 the same with f16 tiles and
 * roundings (its own kernel instances); under f32 every product is an f32 SIMT loop with fmaf
 * (no TF32). `half` below: 0 f32, 1 bf16, 2 f16 (gpt_cuda.cu's half kinds).
 */
#ifndef GPT_PLUGIN_FLASH_ATTENTION_H
#define GPT_PLUGIN_FLASH_ATTENTION_H

#include <ctrain/ctrain.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* Check that the kernels can run this shape on the current device, in every dtype (head dim,
 * grid limits, int ranges, shared memory per block against the device's opt-in limit). Call
 * at prepare; the launches check again and raise each kernel's shared memory limit. The
 * error names the limit and says to use [model] attention = naive. */
int32_t gpt_flash_prepare(int64_t B, int64_t T, int64_t NH, int64_t HD, ct_error *err);

/* Bytes of device scratch gpt_flash_backward needs: D (B,NH,T) f32. */
uint64_t gpt_flash_scratch_bytes(int64_t B, int64_t T, int64_t NH);

/* att (N,C) = softmax(q k^T / sqrt(HD), causal) v per (b,h), rounded to bf16 (f16) when half
 * is 1 (2); lse (B,NH,T) = log-sum-exp of each softmax row. doc_start (N) device memory or NULL:
 * with document masking, row (b,t) sees keys doc_start[b*T+t]..t only. Asynchronous on st. */
int32_t gpt_flash_forward(cudaStream_t st, float *att, float *lse, const float *qkv,
                          const int32_t *doc_start, int64_t B, int64_t T, int64_t NH, int64_t HD,
                          int half, ct_error *err);

/* dqkv (N,3C), every element (not rounded: the caller rounds), from datt (N,C), the forward's
 * att and lse and qkv. D (B,NH,T) f32 scratch (gpt_flash_scratch_bytes). Two kernels, no
 * atomics: dq per query tile (it also writes D = rowsum(datt * att)), then dk, dv per key tile;
 * deterministic. Asynchronous on st. */
int32_t gpt_flash_backward(cudaStream_t st, float *dqkv, float *D, const float *datt,
                           const float *att, const float *qkv, const float *lse,
                           const int32_t *doc_start, int64_t B, int64_t T, int64_t NH,
                           int64_t HD, int half, ct_error *err);

#endif /* GPT_PLUGIN_FLASH_ATTENTION_H */
