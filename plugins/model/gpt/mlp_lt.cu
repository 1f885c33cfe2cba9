/* mlp_lt.cu — cuBLASLt GEMMs with epilogues for the gpt plugin's GELU MLP (see mlp_lt.h):
 * forward CUBLASLT_EPILOGUE_GELU_AUX_BIAS (GELU_AUX without bias), backward
 * CUBLASLT_EPILOGUE_DGELU_BGRAD (DGELU without bias). Not for: the other products (cuBLAS in
 * gpt_cuda.cu) or swiglu.
 *
 * Row-major to cuBLASLt's column-major: a row-major (R,S) matrix is a column-major (S,R) one.
 * Forward: g^T (F,N) = op_T(W as (C,F), ld C) x^T (C,N, ld C) + b (F, per row of D), aux h^T
 * (F,N, ld F). Backward: dh^T (F,N) = W2 (as (F,C), ld F) dy^T (C,N, ld C), DGELU with aux
 * h^T, bias gradient (F) = the sum over D's columns (the N rows of dh).
 * Shape legend: see gpt.h.
 */
#include "mlp_lt.h"

#include <ctrain/numerics.h>

#include <cublasLt.h>
#include <stdlib.h>

#define LT_WORKSPACE (32u << 20) /* bytes: cuBLASLt's split-K and epilogue scratch */

struct gpt_lt {
    cublasLtHandle_t h;
    void            *ws;    /* LT_WORKSPACE bytes of device memory */
    float           *bias;  /* (bias_n) f32 copy of the fc bias */
    int64_t          bias_n;
};

static int32_t lt_fail(ct_error *err, const char *what, cublasStatus_t s) {
    return ct_error_set(err, CT_ERR_DEVICE, "model gpt: cuBLASLt %s failed: %s ---> check that "
                        "libcublasLt matches the driver, or set [model] mlp_epilogue = kernels",
                        what, cublasGetStatusString(s));
}

int32_t gpt_lt_create(gpt_lt **out, int64_t max_F, ct_error *err) {
    *out = NULL;
    gpt_lt *lt = (gpt_lt *)calloc(1, sizeof *lt);
    if (!lt) return ct_error_set(err, CT_ERR_NOMEM, "model gpt: out of memory");
    cublasStatus_t s = cublasLtCreate(&lt->h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(lt);
        return lt_fail(err, "cublasLtCreate", s);
    }
    cudaError_t e = cudaMalloc(&lt->ws, LT_WORKSPACE);
    if (e == cudaSuccess) e = cudaMalloc((void **)&lt->bias, (size_t)max_F * sizeof(float));
    if (e != cudaSuccess) {
        cudaGetLastError();
        gpt_lt_destroy(lt);
        return ct_error_set(err, CT_ERR_NOMEM, "model gpt: cannot allocate the cuBLASLt "
                            "workspace (%u MiB) on the GPU: %s ---> lower [data] batch_size, or "
                            "set [model] mlp_epilogue = kernels", LT_WORKSPACE >> 20,
                            cudaGetErrorString(e));
    }
    lt->bias_n = max_F;
    *out = lt;
    return CT_OK;
}

void gpt_lt_destroy(gpt_lt *lt) {
    if (!lt) return;
    if (lt->ws) cudaFree(lt->ws);
    if (lt->bias) cudaFree(lt->bias);
    if (lt->h) cublasLtDestroy(lt->h);
    free(lt);
}

/* d (n) f32 = the bias at element off of params of half kind phalf (0 f32, 1 bf16, 2 f16). */
__global__ void k_lt_bias_f32(float *d, const void *P, int phalf, int64_t off, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        d[i] = phalf == 2 ? ct_f16_to_f32(((const uint16_t *)P)[off + i])
               : phalf    ? ct_bf16_to_f32(((const uint16_t *)P)[off + i])
                          : ((const float *)P)[off + i];
}

/* D (m,n col-major, ld m, f32) = op(A) (m,k) B (k,n) with epilogue epi; bias: the bias
 * pointer (or the bias-gradient output); aux (m,n, ld m, f32). A is (k,m) ld k when ta (the
 * forward's weight), else (m,k) ld m; B is (k,n) ld k. CUBLAS_STATUS_NOT_SUPPORTED when the
 * heuristic has no algorithm (nothing launched). */
static cublasStatus_t lt_matmul(gpt_lt *lt, cudaStream_t st, cublasLtEpilogue_t epi, int half,
                                int ta, uint64_t m, uint64_t n, uint64_t k, const void *A,
                                const void *B, float *D, void *bias, void *aux) {
    cudaDataType_t t = half == 2 ? CUDA_R_16F : half ? CUDA_R_16BF : CUDA_R_32F;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = CUBLAS_OP_N;
    int64_t ldaux = (int64_t)m;
    uint64_t wsb = LT_WORKSPACE;
    float alpha = 1.0f, beta = 0.0f;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    cublasStatus_t s = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
#define LT_SET(call) \
    if (s == CUBLAS_STATUS_SUCCESS) s = (call)
    LT_SET(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT_SET(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    LT_SET(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (bias) LT_SET(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    LT_SET(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    LT_SET(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, sizeof ldaux));
    LT_SET(cublasLtMatrixLayoutCreate(&la, t, ta ? k : m, ta ? m : k, (int64_t)(ta ? k : m)));
    LT_SET(cublasLtMatrixLayoutCreate(&lb, t, k, n, (int64_t)k));
    LT_SET(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, (int64_t)m));
    LT_SET(cublasLtMatmulPreferenceCreate(&pref));
    LT_SET(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &wsb, sizeof wsb));
    LT_SET(cublasLtMatmulAlgoGetHeuristic(lt->h, op, la, lb, ld, ld, pref, 1, &res, &nres));
    if (s == CUBLAS_STATUS_SUCCESS && nres < 1) s = CUBLAS_STATUS_NOT_SUPPORTED;
    LT_SET(cublasLtMatmul(lt->h, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res.algo, lt->ws,
                          LT_WORKSPACE, st));
#undef LT_SET
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return s;
}

/* The shapes the epilogues take: the aux leading dimension F a multiple of 8, sizes >= 1. */
static int lt_shape_ok(int64_t N, int64_t C, int64_t F) {
    return N >= 1 && C >= 1 && F >= 8 && F % 8 == 0;
}

int32_t gpt_lt_gelu_forward(gpt_lt *lt, cudaStream_t st, float *g, float *h, const void *x,
                            const void *w, const void *params, int phalf, int64_t b_off,
                            int64_t N, int64_t C, int64_t F, int half, int *done, ct_error *err) {
    *done = 0;
    if (!lt_shape_ok(N, C, F) || F > lt->bias_n) return CT_OK;
    if (!x) return ct_error_set(err, CT_ERR_DEVICE, "model gpt: the fc operand copy failed to "
                                "launch ---> run with CUDA_LAUNCH_BLOCKING=1");
    void *bias = NULL;
    if (b_off >= 0) {
        int64_t nb = (F + 255) / 256;
        k_lt_bias_f32<<<(unsigned)(nb > 1024 ? 1024 : nb), 256, 0, st>>>(lt->bias, params, phalf,
                                                                         b_off, F);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return ct_error_set(err, CT_ERR_DEVICE, "model gpt: fc bias copy failed to launch: %s "
                                "---> run with CUDA_LAUNCH_BLOCKING=1", cudaGetErrorString(e));
        bias = lt->bias;
    }
    cublasStatus_t s = lt_matmul(lt, st, bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                              : CUBLASLT_EPILOGUE_GELU_AUX,
                                 half, 1, (uint64_t)F, (uint64_t)N, (uint64_t)C, w, x, g, bias, h);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) return CT_OK;
    if (s != CUBLAS_STATUS_SUCCESS) return lt_fail(err, "fc + bias + GELU (forward)", s);
    *done = 1;
    return CT_OK;
}

int32_t gpt_lt_dgelu_backward(gpt_lt *lt, cudaStream_t st, float *dh, float *db, const void *dy,
                              const void *w2, const float *h, int64_t N, int64_t C, int64_t F,
                              int half, int *done, ct_error *err) {
    *done = 0;
    if (!lt_shape_ok(N, C, F)) return CT_OK;
    if (!dy) return ct_error_set(err, CT_ERR_DEVICE, "model gpt: the fc2 gradient operand copy "
                                 "failed to launch ---> run with CUDA_LAUNCH_BLOCKING=1");
    cublasStatus_t s = lt_matmul(lt, st, db ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU,
                                 half, 0, (uint64_t)F, (uint64_t)N, (uint64_t)C, w2, dy, dh, db,
                                 (void *)h);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) return CT_OK;
    if (s != CUBLAS_STATUS_SUCCESS) return lt_fail(err, "fc2 input gradient + GELU gradient + "
                                                   "bias gradient (backward)", s);
    *done = 1;
    return CT_OK;
}
