/* loss_kit_cuda.cuh — the device half of loss_kit.h, for the .cu file of a loss term's CUDA
 * companion: the error of a failed CUDA call, the batch's stream, grow-only scratch (one double
 * per row, the results and their pinned read-back, an optional device flag), a block's sum in a
 * fixed order and the one-block kernel that sums the rows and reads the sum back. The built-in
 * ce, zloss and logitreg companions use it. Not for: the plugin's .c (it links no CUDA; see
 * loss_kit.h) or other plugin kinds. Deterministic: every sum here has one fixed order.
 * Shape legend: N rows, V vocabulary.
 */
#ifndef CTRAIN_LOSS_KIT_CUDA_CUH
#define CTRAIN_LOSS_KIT_CUDA_CUH

#include <ctrain/loss_kit.h>

#include <cuda_runtime.h>

#include <stdlib.h>

#define CT_LKIT_THREADS 256 /* threads per block of the kit's reductions; a power of two */

/* A companion's scratch: what loss_kit.h calls ct_lkit_cuda. */
struct ct_lkit_cuda {
    double  *rows;   /* (cap) one double per row, device */
    double  *res;    /* (n_res) device: the results */
    int32_t *flag;   /* (1) device int for the term's own use (ce: the first bad row); or NULL */
    double  *pinned; /* (n_res) host, pinned: res read back */
    int64_t  cap;    /* rows held; 0 until the allocations all succeeded */
};

/* --- errors ----------------------------------------------------------------------------- */

/* CT_ERR_DEVICE: "<who>: <what> failed on the GPU: <CUDA's text>" with the hint. */
static inline int32_t ct_lkit_cuda_fail(ct_error *err, const char *who, const char *what,
                                        cudaError_t e) {
    return ct_error_set(err, CT_ERR_DEVICE, "%s: %s failed on the GPU: %s ---> run with "
                        "CUDA_LAUNCH_BLOCKING=1 to find the failing call", who, what,
                        cudaGetErrorString(e));
}

/* Return ct_lkit_cuda_fail(err, ...) from the calling function when call fails; needs a
 * `ct_error *err` in scope. */
#define CT_LKIT_CUDA_TRY(who, call, what)                                         \
    do {                                                                          \
        cudaError_t e_ = (call);                                                  \
        if (e_ != cudaSuccess) return ct_lkit_cuda_fail(err, (who), (what), e_);  \
    } while (0)

/* --- the batch's stream and the scratch ------------------------------------------------- */

/* The device's compute stream (its native_stream), or the default stream when it has none. */
static inline cudaStream_t ct_lkit_cuda_stream(const ct_loss_batch *b) {
    return b->device.vt && b->device.vt->native_stream
               ? (cudaStream_t)b->device.vt->native_stream(b->device.self) : 0;
}

/* Frees a scratch and its buffers; NULL is a no-op. */
static inline void ct_lkit_cuda_free(ct_lkit_cuda *s) {
    if (!s) return;
    cudaFree(s->rows);
    cudaFree(s->res);
    cudaFree(s->flag);
    cudaFreeHost(s->pinned);
    free(s);
}

/* *state holds rows for at least N rows (grow-only: a smaller one is freed and a new one made,
 * contents lost), n_res results and, when with_flag, the flag. Pass the same n_res and
 * with_flag on every call for one state. On error *state may hold a part (cap 0, so the next
 * call starts again) or be NULL. */
static inline int32_t ct_lkit_cuda_reserve(ct_lkit_cuda **state, int64_t N, int32_t n_res,
                                           int with_flag, const char *who, ct_error *err) {
    ct_lkit_cuda *s = *state;
    if (s && s->cap >= N) return CT_OK;
    ct_lkit_cuda_free(s);
    *state = s = (ct_lkit_cuda *)calloc(1, sizeof *s);
    if (!s) return ct_error_set(err, CT_ERR_NOMEM, "%s: out of memory", who);
    const size_t rows_bytes = (size_t)(N > 0 ? N : 1) * sizeof(double);
    CT_LKIT_CUDA_TRY(who, cudaMalloc((void **)&s->rows, rows_bytes), "cudaMalloc");
    CT_LKIT_CUDA_TRY(who, cudaMalloc((void **)&s->res, (size_t)n_res * sizeof(double)),
                     "cudaMalloc");
    if (with_flag)
        CT_LKIT_CUDA_TRY(who, cudaMalloc((void **)&s->flag, sizeof(int32_t)), "cudaMalloc");
    CT_LKIT_CUDA_TRY(who, cudaMallocHost((void **)&s->pinned, (size_t)n_res * sizeof(double)),
                     "cudaMallocHost");
    s->cap = N;
    return CT_OK;
}

/* --- sums ------------------------------------------------------------------------------- */

/* The sum of one double per thread over a block of CT_LKIT_THREADS threads, as a fixed tree
 * (the same bits on every run); every thread gets it. Every thread of the block must call it.
 * May be called several times in one kernel: the leading barrier keeps this call's stores from
 * overwriting sh[0] while a slower warp still reads the previous call's result. */
__device__ __forceinline__ double ct_lkit_block_sum(double s) {
    __shared__ double sh[CT_LKIT_THREADS];
    __syncthreads();
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = CT_LKIT_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    return sh[0];
}

/* The sum of rows[0..N) in a fixed order into res[0]; one block of CT_LKIT_THREADS threads. */
static __global__ void ct_lkit_k_sum(const double *rows, int64_t N, double *res) {
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += CT_LKIT_THREADS) s += rows[i];
    s = ct_lkit_block_sum(s);
    if (threadIdx.x == 0) res[0] = s;
}

/* Queue the sum of s->rows[0..N) on stream st (ct_lkit_k_sum into s->res[0]) and its copy into
 * s->pinned[0]; does not wait. Queue the term's gradient kernels after it, then
 * ct_lkit_cuda_sum_finish: the host waits once, with the GPU busy until the value is needed. */
static inline int32_t ct_lkit_cuda_sum_start(ct_lkit_cuda *s, int64_t N, cudaStream_t st,
                                             const char *who, ct_error *err) {
    ct_lkit_k_sum<<<1, CT_LKIT_THREADS, 0, st>>>(s->rows, N, s->res);
    CT_LKIT_CUDA_TRY(who, cudaGetLastError(), "k_sum");
    CT_LKIT_CUDA_TRY(who, cudaMemcpyAsync(s->pinned, s->res, sizeof(double),
                                          cudaMemcpyDeviceToHost, st), "read-back");
    return CT_OK;
}

/* *sum = the value ct_lkit_cuda_sum_start queued (synchronises st: the value must reach the
 * host, ct_loss_result is filled on return). *sum is untouched on error. */
static inline int32_t ct_lkit_cuda_sum_finish(ct_lkit_cuda *s, cudaStream_t st, const char *who,
                                              double *sum, ct_error *err) {
    CT_LKIT_CUDA_TRY(who, cudaStreamSynchronize(st), "cudaStreamSynchronize");
    *sum = s->pinned[0];
    return CT_OK;
}

/* Both at once: *sum = the sum of s->rows[0..N) (synchronises st). */
static inline int32_t ct_lkit_cuda_sum(ct_lkit_cuda *s, int64_t N, cudaStream_t st,
                                       const char *who, double *sum, ct_error *err) {
    int32_t rc = ct_lkit_cuda_sum_start(s, N, st, who, err);
    return rc != CT_OK ? rc : ct_lkit_cuda_sum_finish(s, st, who, sum, err);
}

#endif /* CTRAIN_LOSS_KIT_CUDA_CUH */
