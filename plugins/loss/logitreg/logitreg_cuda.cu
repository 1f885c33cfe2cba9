/* logitreg_cuda.cu — the `logitreg` term on a CUDA device (formulas in loss_logitreg.c): the sum
 * of z^2 over counted rows (one block per row forms its row sum in double in a fixed tree
 * order; one block sums the rows in a fixed order; read back) and the gradient g * z added by
 * one block per counted row. Not for: the CPU path (loss_logitreg.c).
 * Shape legend: N rows, V vocabulary.
 */
#include "logitreg_cuda.h"

#include <cuda_runtime.h>

#include <stdlib.h>

#define THREADS 256 /* threads per block; a power of two */

struct logitreg_cuda {
    double *rows;   /* (cap) per-row sum of z^2 (0 for rows left out), device */
    double *res;    /* (1) device: the sum */
    double *pinned; /* (1) host, pinned */
    int64_t cap;
};

static int32_t fail(ct_error *err, const char *what, cudaError_t e) {
    return ct_error_set(err, CT_ERR_DEVICE, "loss logitreg: %s failed on the GPU: %s ---> run "
                        "with CUDA_LAUNCH_BLOCKING=1 to find the failing call", what,
                        cudaGetErrorString(e));
}
#define TRY(call, what)                                     \
    do {                                                    \
        cudaError_t e_ = (call);                            \
        if (e_ != cudaSuccess) return fail(err, (what), e_); \
    } while (0)

__device__ __forceinline__ int counts(int32_t mask, int32_t t) { return !mask || t >= 0; }

/* rows[i] = sum_j z[i,j]^2 for counted rows; one block per row. */
__global__ void k_logitreg_rows(const float *z, const int32_t *t, int64_t V, int32_t mask,
                                double *rows) {
    __shared__ double sh[THREADS];
    int64_t i = blockIdx.x;
    double s = 0.0;
    if (counts(mask, t[i])) {
        const float *zr = z + i * V;
        for (int64_t j = threadIdx.x; j < V; j += THREADS) s += (double)zr[j] * (double)zr[j];
    }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) rows[i] = sh[0];
}

__global__ void k_sum(const double *rows, int64_t N, double *res) {
    __shared__ double sh[THREADS];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) s += rows[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) res[0] = sh[0];
}

__global__ void k_logitreg_grad(const float *z, const int32_t *t, int64_t V, int32_t mask,
                                float g, float *dz) {
    int64_t i = blockIdx.x;
    if (!counts(mask, t[i])) return;
    const float *zr = z + i * V;
    float *dr = dz + i * V;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) dr[j] += g * zr[j];
}

void logitreg_cuda_free(logitreg_cuda *s) {
    if (!s) return;
    cudaFree(s->rows);
    cudaFree(s->res);
    cudaFreeHost(s->pinned);
    free(s);
}

static int32_t reserve(logitreg_cuda **state, int64_t N, ct_error *err) {
    logitreg_cuda *s = *state;
    if (s && s->cap >= N) return CT_OK;
    logitreg_cuda_free(s);
    *state = s = (logitreg_cuda *)calloc(1, sizeof *s);
    if (!s) return ct_error_set(err, CT_ERR_NOMEM, "loss logitreg: out of memory");
    TRY(cudaMalloc((void **)&s->rows, (size_t)(N > 0 ? N : 1) * sizeof(double)), "cudaMalloc");
    TRY(cudaMalloc((void **)&s->res, sizeof(double)), "cudaMalloc");
    TRY(cudaMallocHost((void **)&s->pinned, sizeof(double)), "cudaMallocHost");
    s->cap = N;
    return CT_OK;
}

extern "C" int32_t logitreg_cuda_run(logitreg_cuda **state, const ct_loss_batch *b,
                                     int32_t mask_ignored, float g, int32_t with_grad,
                                     double *sum, ct_error *err) {
    const int64_t N = b->n_rows, V = b->vocab;
    *sum = 0.0;
    if (N <= 0) return CT_OK;
    int32_t rc = reserve(state, N, err);
    if (rc != CT_OK) return rc;
    logitreg_cuda *s = *state;
    cudaStream_t st = b->device.vt && b->device.vt->native_stream
                          ? (cudaStream_t)b->device.vt->native_stream(b->device.self) : 0;
    k_logitreg_rows<<<(unsigned)N, THREADS, 0, st>>>(b->logits, b->targets, V, mask_ignored,
                                                     s->rows);
    TRY(cudaGetLastError(), "k_logitreg_rows");
    k_sum<<<1, THREADS, 0, st>>>(s->rows, N, s->res);
    TRY(cudaGetLastError(), "k_sum");
    TRY(cudaMemcpyAsync(s->pinned, s->res, sizeof(double), cudaMemcpyDeviceToHost, st),
        "read-back");
    TRY(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    *sum = s->pinned[0];
    if (!with_grad || !b->dlogits) return CT_OK;
    k_logitreg_grad<<<(unsigned)N, THREADS, 0, st>>>(b->logits, b->targets, V, mask_ignored, g,
                                                     b->dlogits);
    TRY(cudaGetLastError(), "k_logitreg_grad");
    return CT_OK;
}
