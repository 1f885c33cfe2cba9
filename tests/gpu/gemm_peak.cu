/* gemm_peak.cu — the measured matrix peak that tests/gpu/run.sh divides MFU by: cuBLAS bf16
 * GEMMs (bf16 A, B and C, f32 accumulation, the tensor-core path a training step's products
 * take), 8192 x 8192 x 8192 on random data, 3 untimed then 10 timed with CUDA events.
 * Prints "bench cublas_bf16_gemm_peak: X TFLOP/s ..." (run.sh greps the number).
 * Not for: correctness (nothing is checked) or ctrain's own products (model_vs_cpu.c times those).
 * Build (run.sh does): nvcc -O2 -arch=sm_90 gemm_peak.cu -lcublas -o gemm_peak
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(call)                                                                        \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) {                                                        \
            printf("gemm_peak: %s failed: %s\n", #call, cudaGetErrorString(e_));         \
            return 1;                                                                   \
        }                                                                               \
    } while (0)

/* x[i] = a pseudo-random bf16 in [-1, 1) (a hash of i and seed). */
__global__ void k_fill(__nv_bfloat16 *x, uint64_t n, uint64_t seed) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
        h ^= h >> 31;
        h *= 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
        x[i] = __float2bfloat16((float)(h >> 40) / 8388608.0f - 1.0f);
    }
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 8192;
    const uint64_t nn = (uint64_t)n * (uint64_t)n;
    __nv_bfloat16 *a = NULL, *b = NULL, *c = NULL;
    CK(cudaMalloc((void **)&a, nn * 2));
    CK(cudaMalloc((void **)&b, nn * 2));
    CK(cudaMalloc((void **)&c, nn * 2));
    k_fill<<<4096, 256>>>(a, nn, 1);
    k_fill<<<4096, 256>>>(b, nn, 2);
    CK(cudaGetLastError());
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        printf("gemm_peak: cublasCreate failed\n");
        return 1;
    }
    const float one = 1.0f, zero = 0.0f;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int warm = 3, timed = 10;
    for (int i = 0; i < warm + timed; i++) {
        if (i == warm) CK(cudaEventRecord(e0, 0));
        cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a,
                                        CUDA_R_16BF, n, b, CUDA_R_16BF, n, &zero, c, CUDA_R_16BF,
                                        n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) {
            printf("gemm_peak: cublasGemmEx failed: %s\n", cublasGetStatusString(s));
            return 1;
        }
    }
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    double tflops = 2.0 * n * (double)n * n * timed / (ms * 1e-3) / 1e12;
    printf("bench cublas_bf16_gemm_peak: %.1f TFLOP/s (%d x %d x %d bf16, f32 accumulate, "
           "mean of %d after %d warm-ups, random data)\n", tflops, n, n, n, timed, warm);
    cublasDestroy(h);
    cudaFree(a), cudaFree(b), cudaFree(c);
    return 0;
}
