/* mlp_lt.h — the gpt plugin's GELU MLP products with cuBLASLt epilogues on a CUDA device
 * (mlp_lt.cu): fc forward with bias + GELU fused into the GEMM, and fc2's input gradient with
 * the GELU gradient and fc's bias gradient fused into the GEMM ([model] mlp_epilogue =
 * cublaslt, the default). Not for: swiglu (its gate has no cuBLASLt epilogue; gpt_cuda.cu's
 * kernels run it), the other linear layers, or the CPU path.
 *
 * Shape legend: see gpt.h. x (N,C), fc weight W (F,C), bias b (F), h (N,F) the GELU input
 * (x W^T + b), g (N,F) = gelu(h); fc2 weight W2 (C,F), dy (N,C) the MLP output's gradient,
 * dh (N,F). Operands x, W, dy, W2 in the stage's operand dtype (bf16 or f16 copies, or f32),
 * results f32. Numerics: f32 accumulation (CUBLAS_COMPUTE_32F, no TF32); cuBLASLt's GELU is
 * the same tanh form as numerics.h ct_gelu, evaluated by cuBLASLt (a few ulps apart). Under
 * bf16 (f16) the epilogue sees the f32 sum, so h is kept unrounded and g = gelu(h) is rounded
 * only when it becomes fc2's 16-bit operand (the kernels path rounds h first): within the
 * bf16 (f16) tolerance. The `half`, `phalf` arguments are gpt_cuda.cu's half kinds: 0 f32,
 * 1 bf16, 2 f16.
 */
#ifndef GPT_PLUGIN_MLP_LT_H
#define GPT_PLUGIN_MLP_LT_H

#include <ctrain/ctrain.h>
#include <cuda_runtime.h>
#include <stdint.h>

typedef struct gpt_lt gpt_lt;

/* The cuBLASLt handle, its workspace and an f32 bias scratch of max_F elements (device
 * memory); *out NULL on error. */
int32_t gpt_lt_create(gpt_lt **out, int64_t max_F, ct_error *err);
/* Free what gpt_lt_create made (after the stream's work is done). NULL is fine. */
void gpt_lt_destroy(gpt_lt *lt);

/* h = x W^T + b (b NULL: none), g = gelu(h). bias: the stage's params (of half kind phalf) at
 * element b_off (< 0: no bias). *done = 1 when launched; 0 when cuBLASLt has no algorithm for
 * this shape/dtype/epilogue (nothing launched: the caller runs its kernels). Asynchronous on
 * st. F must be a multiple of 8 (the aux leading dimension), else *done = 0. */
int32_t gpt_lt_gelu_forward(gpt_lt *lt, cudaStream_t st, float *g, float *h, const void *x,
                            const void *w, const void *params, int phalf, int64_t b_off,
                            int64_t N, int64_t C, int64_t F, int half, int *done, ct_error *err);

/* dh = (dy W2) * gelu'(h); db (F, f32, overwritten; NULL: no bias) = column sums of dh.
 * *done as above. Asynchronous on st. */
int32_t gpt_lt_dgelu_backward(gpt_lt *lt, cudaStream_t st, float *dh, float *db, const void *dy,
                              const void *w2, const float *h, int64_t N, int64_t C, int64_t F,
                              int half, int *done, ct_error *err);

#endif /* GPT_PLUGIN_MLP_LT_H */
