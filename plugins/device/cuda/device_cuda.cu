/* device_cuda.cu — the `cuda` device plugin: cudaMalloc'd memory, one compute stream per
 * instance, element-wise kernels (casts, scale, axpy, AdamW) and deterministic reductions
 * (sumsq, row statistics of logits). Per-element math comes from ctrain/numerics.h, built with
 * --fmad=false (plugin.mk), so casts, axpy, scale and AdamW give the cpu device's bits. The
 * 16-bit dtypes are the cpu device's: bf16 and f16 (ABI 1.7; ct_f16_* with round to nearest
 * even) in cast (to and from f32), scale, axpy and sumsq; stochastic rounding (cast_bf16_sr)
 * is bf16 only, as the vtable has it.
 * Not for: collectives (comm nccl), matrix products or model math (the model plugin).
 *
 * Determinism: every reduction runs on a fixed launch shape (RED_BLOCKS blocks of RED_THREADS
 * threads, fixed tree order in shared memory, one final block summing the partials in order),
 * so a result depends on n only, never on timing. It differs from the cpu device only by the
 * order of double additions (~1e-15 relative).
 * Shape legend: N rows of logits, V vocabulary.
 */
#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define RED_THREADS 256 /* threads per block of every reduction kernel (a power of two) */
#define RED_BLOCKS  512 /* blocks of the first pass of sumsq; partials summed by one block */
#define EW_THREADS  256 /* threads per block of element-wise kernels */
#define EW_MAX_BLOCKS 8448 /* 132 SMs x 64: grid-stride beyond that */
#define ROW_FIGS    4   /* per-row figures kept for ct_logit_stats: sum, norm, lse, max|z| */

typedef struct cuda_device {
    const ct_host_api *api;
    ct_host           *host;
    int                ordinal;   /* the GPU this instance drives */
    cudaStream_t       stream;    /* the compute stream: every call is queued here */
    double            *scratch;   /* device: reduction partials and per-row figures */
    uint64_t           scratch_n; /* doubles in scratch */
    double            *pinned;    /* host, pinned: results read back (8 doubles) */
} cuda_device;

/* Fill err for a failed CUDA runtime call; returns CT_ERR_DEVICE. */
static int32_t cuda_fail(ct_error *err, const char *what, cudaError_t e) {
    return ct_error_set(err, CT_ERR_DEVICE, "device cuda: %s failed: %s (%s) ---> check "
                        "nvidia-smi; run with CUDA_LAUNCH_BLOCKING=1 to find the failing call",
                        what, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CUDA_TRY(call, what)                                       \
    do {                                                           \
        cudaError_t e_ = (call);                                   \
        if (e_ != cudaSuccess) return cuda_fail(err, (what), e_);  \
    } while (0)

/* After a kernel launch: a launch error (bad shape, no kernel image for this GPU). */
#define LAUNCH_CHECK(what) CUDA_TRY(cudaGetLastError(), (what))

static unsigned ew_blocks(uint64_t n) {
    uint64_t b = (n + EW_THREADS - 1) / EW_THREADS;
    if (b < 1) b = 1;
    return (unsigned)(b > EW_MAX_BLOCKS ? EW_MAX_BLOCKS : b);
}

/* scratch holds at least n doubles (grown, never shrunk; synchronises when it grows). */
static int32_t scratch_reserve(cuda_device *self, uint64_t n, ct_error *err) {
    if (self->scratch_n >= n) return CT_OK;
    CUDA_TRY(cudaStreamSynchronize(self->stream), "cudaStreamSynchronize");
    if (self->scratch) cudaFree(self->scratch);
    self->scratch = NULL;
    self->scratch_n = 0;
    CUDA_TRY(cudaMalloc((void **)&self->scratch, n * sizeof(double)), "cudaMalloc (scratch)");
    self->scratch_n = n;
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * create / destroy
 * ------------------------------------------------------------------------------------- */

/* The rank's GPU: [device] ordinal when >= 0, else the local rank the host found from the
 * launcher (get_int(host, "device", "local_rank"): mpirun, srun or torchrun-style variables,
 * see ctrain.h), else 0 (a host that does not answer that key). */
static int choose_ordinal(const ct_create_args *args, int64_t ordinal) {
    if (ordinal >= 0) return (int)ordinal;
    int64_t local = 0;
    ct_error ignored = {};
    ignored.struct_size = sizeof ignored;
    if (!args->api || !args->api->get_int ||
        args->api->get_int(args->host, "device", "local_rank", &local, &ignored) != CT_OK)
        local = 0;
    return (int)local;
}

static void *cuda_create(const ct_create_args *args, ct_error *err) {
    int64_t ordinal = -1;
    if (args->api && args->api->get_int &&
        args->api->get_int(args->host, args->section, "ordinal", &ordinal, err) != CT_OK)
        return NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1) {
        ct_error_set(err, CT_ERR_DEVICE, "device cuda: no CUDA-capable GPU found "
                     "(cudaGetDeviceCount: %s) ---> use [device] type = cpu",
                     e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        cudaGetLastError(); /* clear the sticky-free error state of the runtime */
        return NULL;
    }
    int dev = choose_ordinal(args, ordinal);
    if (dev < 0 || dev >= count) {
        ct_error_set(err, CT_ERR_DEVICE, "device cuda: GPU %d requested (local rank or [%s] "
                     "ordinal) but %d visible ---> start at most %d rank(s) per node, or check "
                     "CUDA_VISIBLE_DEVICES", dev, args->section ? args->section : "device",
                     count, count);
        return NULL;
    }
    cuda_device *self = (cuda_device *)calloc(1, sizeof *self);
    if (!self) {
        ct_error_set(err, CT_ERR_NOMEM, "device cuda: out of memory");
        return NULL;
    }
    self->api = args->api;
    self->host = args->host;
    self->ordinal = dev;
    if ((e = cudaSetDevice(dev)) != cudaSuccess) {
        cuda_fail(err, "cudaSetDevice", e);
        goto out_free_self;
    }
    if ((e = cudaStreamCreateWithFlags(&self->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        cuda_fail(err, "cudaStreamCreate", e);
        goto out_free_self;
    }
    if ((e = cudaMallocHost((void **)&self->pinned, 8 * sizeof(double))) != cudaSuccess) {
        cuda_fail(err, "cudaMallocHost", e);
        goto out_destroy_stream;
    }
    if (self->api && self->api->log) {
        cudaDeviceProp prop;
        char msg[256];
        if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
            snprintf(msg, sizeof msg, "device cuda: GPU %d of %d: %s, %d SMs, %.1f GiB",
                     dev, count, prop.name, prop.multiProcessorCount,
                     (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
            self->api->log(self->host, CT_LOG_INFO, msg);
        }
    }
    return self;

out_destroy_stream:
    cudaStreamDestroy(self->stream);
out_free_self:
    free(self);
    return NULL;
}

static void cuda_destroy(void *p) {
    cuda_device *self = (cuda_device *)p;
    if (!self) return;
    cudaSetDevice(self->ordinal);
    cudaStreamSynchronize(self->stream);
    if (self->scratch) cudaFree(self->scratch);
    if (self->pinned) cudaFreeHost(self->pinned);
    cudaStreamDestroy(self->stream);
    free(self);
}

/* ---------------------------------------------------------------------------------------
 * memory
 * ------------------------------------------------------------------------------------- */

/* cudaMalloc aligns to 256 bytes. Zero-filled: the memset is finished before return, so the
 * buffer may be used on any stream. */
static void *cuda_alloc(void *p, uint64_t bytes, ct_error *err) {
    cuda_device *self = (cuda_device *)p;
    void *ptr = NULL;
    uint64_t rounded = ct_align_up(bytes ? bytes : 1, 64);
    cudaError_t e = cudaMalloc(&ptr, rounded);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        ct_error_set(err, CT_ERR_NOMEM, "device cuda: cannot allocate %llu bytes on GPU %d "
                     "(%s; %.2f of %.2f GiB free) ---> reduce batch_size, seq_len or the model "
                     "size, or use a sharded strategy", (unsigned long long)bytes,
                     self->ordinal, cudaGetErrorString(e), free_b / 1073741824.0,
                     total_b / 1073741824.0);
        return NULL;
    }
    if ((e = cudaMemsetAsync(ptr, 0, rounded, self->stream)) != cudaSuccess ||
        (e = cudaStreamSynchronize(self->stream)) != cudaSuccess) {
        cuda_fail(err, "cudaMemset (alloc)", e);
        cudaFree(ptr);
        return NULL;
    }
    return ptr;
}

static void cuda_free_mem(void *p, void *ptr) {
    (void)p;
    if (ptr) cudaFree(ptr); /* cudaFree waits for work using the buffer */
}

static int32_t cuda_copy(void *p, void *dst, const void *src, uint64_t bytes, int32_t dir,
                         ct_error *err) {
    cuda_device *self = (cuda_device *)p;
    cudaMemcpyKind kind;
    switch (dir) {
    case CT_COPY_H2D: kind = cudaMemcpyHostToDevice; break;
    case CT_COPY_D2H: kind = cudaMemcpyDeviceToHost; break;
    case CT_COPY_D2D: kind = cudaMemcpyDeviceToDevice; break;
    default:
        return ct_error_set(err, CT_ERR_INVALID, "device cuda: copy direction %d is not a "
                            "ct_copy_dir", (int)dir);
    }
    if (!bytes) return CT_OK;
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kind, self->stream), "cudaMemcpyAsync");
    /* D2H synchronises (the contract); H2D from pageable memory is staged before return. */
    if (dir == CT_COPY_D2H) CUDA_TRY(cudaStreamSynchronize(self->stream), "copy to host");
    return CT_OK;
}

static int32_t cuda_zero(void *p, void *ptr, uint64_t bytes, ct_error *err) {
    cuda_device *self = (cuda_device *)p;
    if (bytes) CUDA_TRY(cudaMemsetAsync(ptr, 0, bytes, self->stream), "cudaMemsetAsync");
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * casts and element-wise kernels (grid-stride loops over n elements)
 * ------------------------------------------------------------------------------------- */

#define FOR_EACH(i, n) \
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < (n); \
         i += (uint64_t)gridDim.x * blockDim.x)

__global__ void k_f32_to_bf16(uint16_t *d, const float *s, uint64_t n) {
    FOR_EACH(i, n) d[i] = ct_bf16_from_f32(s[i]);
}

__global__ void k_bf16_to_f32(float *d, const uint16_t *s, uint64_t n) {
    FOR_EACH(i, n) d[i] = ct_bf16_to_f32(s[i]);
}

/* Stochastic rounding: element i uses the low 16 bits of ct_hash64(seed, i). */
__global__ void k_f32_to_bf16_sr(uint16_t *d, const float *s, uint64_t n, uint64_t seed) {
    FOR_EACH(i, n) d[i] = ct_bf16_from_f32_sr(s[i], (uint32_t)(ct_hash64(seed, i) & 0xffffu));
}

__global__ void k_f32_to_f16(uint16_t *d, const float *s, uint64_t n) {
    FOR_EACH(i, n) d[i] = ct_f16_from_f32(s[i]);
}

__global__ void k_f16_to_f32(float *d, const uint16_t *s, uint64_t n) {
    FOR_EACH(i, n) d[i] = ct_f16_to_f32(s[i]);
}

__global__ void k_scale_f32(float *x, uint64_t n, float a) { FOR_EACH(i, n) x[i] *= a; }

__global__ void k_scale_bf16(uint16_t *x, uint64_t n, float a) {
    FOR_EACH(i, n) x[i] = ct_bf16_from_f32(ct_bf16_to_f32(x[i]) * a);
}

__global__ void k_scale_f16(uint16_t *x, uint64_t n, float a) {
    FOR_EACH(i, n) x[i] = ct_f16_from_f32(ct_f16_to_f32(x[i]) * a);
}

__global__ void k_axpy_f32(float *y, float a, const float *x, uint64_t n) {
    FOR_EACH(i, n) y[i] += a * x[i];
}

__global__ void k_axpy_bf16(float *y, float a, const uint16_t *x, uint64_t n) {
    FOR_EACH(i, n) y[i] += a * ct_bf16_to_f32(x[i]);
}

__global__ void k_axpy_f16(float *y, float a, const uint16_t *x, uint64_t n) {
    FOR_EACH(i, n) y[i] += a * ct_f16_to_f32(x[i]);
}

static int32_t cuda_cast(void *p, void *dst, int32_t dst_dtype, const void *src,
                         int32_t src_dtype, uint64_t n, ct_error *err) {
    cuda_device *self = (cuda_device *)p;
    size_t ds = ct_dtype_size(dst_dtype), ss = ct_dtype_size(src_dtype);
    if (!ds || !ss)
        return ct_error_set(err, CT_ERR_INVALID, "device cuda: cast with unknown dtype %d -> %d",
                            (int)src_dtype, (int)dst_dtype);
    if (!n) return CT_OK;
    if (dst_dtype == src_dtype) {
        if (dst != src)
            CUDA_TRY(cudaMemcpyAsync(dst, src, n * ds, cudaMemcpyDeviceToDevice, self->stream),
                     "cudaMemcpyAsync (cast)");
        return CT_OK;
    }
    const char *d0 = (const char *)dst, *s0 = (const char *)src;
    if (d0 < s0 + n * ss && s0 < d0 + n * ds)
        return ct_error_set(err, CT_ERR_INVALID, "device cuda: cast %s -> %s with overlapping "
                            "buffers ---> cast into a separate buffer when the element sizes "
                            "differ", ct_dtype_name(src_dtype), ct_dtype_name(dst_dtype));
    if (src_dtype == CT_DTYPE_F32 && dst_dtype == CT_DTYPE_BF16) {
        k_f32_to_bf16<<<ew_blocks(n), EW_THREADS, 0, self->stream>>>(
            (uint16_t *)dst, (const float *)src, n);
        LAUNCH_CHECK("cast f32 -> bf16");
        return CT_OK;
    }
    if (src_dtype == CT_DTYPE_BF16 && dst_dtype == CT_DTYPE_F32) {
        k_bf16_to_f32<<<ew_blocks(n), EW_THREADS, 0, self->stream>>>(
            (float *)dst, (const uint16_t *)src, n);
        LAUNCH_CHECK("cast bf16 -> f32");
        return CT_OK;
    }
    if (src_dtype == CT_DTYPE_F32 && dst_dtype == CT_DTYPE_F16) {
        k_f32_to_f16<<<ew_blocks(n), EW_THREADS, 0, self->stream>>>(
            (uint16_t *)dst, (const float *)src, n);
        LAUNCH_CHECK("cast f32 -> f16");
        return CT_OK;
    }
    if (src_dtype == CT_DTYPE_F16 && dst_dtype == CT_DTYPE_F32) {
        k_f16_to_f32<<<ew_blocks(n), EW_THREADS, 0, self->stream>>>(
            (float *)dst, (const uint16_t *)src, n);
        LAUNCH_CHECK("cast f16 -> f32");
        return CT_OK;
    }
    return ct_error_set(err, CT_ERR_UNSUPPORTED, "device cuda: cast %s -> %s is not supported "
                        "---> supported: f32 <-> bf16, f32 <-> f16 and any dtype to itself",
                        ct_dtype_name(src_dtype), ct_dtype_name(dst_dtype));
}

static int32_t cuda_cast_sr(void *p, uint16_t *dst, const float *src, uint64_t n,
                            uint64_t seed, ct_error *err) {
    cuda_device *self = (cuda_device *)p;
    if (!n) return CT_OK;
    k_f32_to_bf16_sr<<<ew_blocks(n), EW_THREADS, 0, self->stream>>>(dst, src, n, seed);
    LAUNCH_CHECK("stochastic cast f32 -> bf16");
    return CT_OK;
}

static int32_t cuda_scale(void *p, void *x, int32_t dtype, uint64_t n, float a, ct_error *err) {
    cuda_device *self = (cuda_device *)p;
    if (dtype != CT_DTYPE_F32 && dtype != CT_DTYPE_BF16 && dtype != CT_DTYPE_F16)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "device cuda: scale of %s is not supported "
                            "---> use f32, bf16 or f16", ct_dtype_name(dtype));
    if (!n) return CT_OK;
    if (dtype == CT_DTYPE_F32)
        k_scale_f32<<<ew_blocks(n), EW_THREADS, 0, self->stream>>>((float *)x, n, a);
    else if (dtype == CT_DTYPE_F16)
        k_scale_f16<<<ew_blocks(n), EW_THREADS, 0, self->stream>>>((uint16_t *)x, n, a);
    else
        k_scale_bf16<<<ew_blocks(n), EW_THREADS, 0, self->stream>>>((uint16_t *)x, n, a);
    LAUNCH_CHECK("scale");
    return CT_OK;
}

static int32_t cuda_axpy(void *p, float *y, float a, const void *x, int32_t x_dtype, uint64_t n,
                         ct_error *err) {
    cuda_device *self = (cuda_device *)p;
    if (x_dtype != CT_DTYPE_F32 && x_dtype != CT_DTYPE_BF16 && x_dtype != CT_DTYPE_F16)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "device cuda: axpy with x of %s is not "
                            "supported ---> use f32, bf16 or f16", ct_dtype_name(x_dtype));
    if (!n) return CT_OK;
    if (x_dtype == CT_DTYPE_F32)
        k_axpy_f32<<<ew_blocks(n), EW_THREADS, 0, self->stream>>>(y, a, (const float *)x, n);
    else if (x_dtype == CT_DTYPE_F16)
        k_axpy_f16<<<ew_blocks(n), EW_THREADS, 0, self->stream>>>(y, a, (const uint16_t *)x, n);
    else
        k_axpy_bf16<<<ew_blocks(n), EW_THREADS, 0, self->stream>>>(y, a, (const uint16_t *)x, n);
    LAUNCH_CHECK("axpy");
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * Reductions: block-level helpers in a fixed order
 * ------------------------------------------------------------------------------------- */

enum { RED_SUM = 0, RED_MAX = 1 };

/* Combine v over the block (blockDim.x == RED_THREADS) in a fixed tree order; every thread
 * gets the result. sh has RED_THREADS doubles. */
__device__ double block_reduce(double v, double *sh, int op) {
    int t = threadIdx.x;
    __syncthreads(); /* sh may still be read by a previous call */
    sh[t] = v;
    __syncthreads();
    for (int s = RED_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] = op == RED_SUM ? sh[t] + sh[t + s] : fmax(sh[t], sh[t + s]);
        __syncthreads();
    }
    return sh[0];
}

/* Element i of x as a double; dt its dtype (f32, bf16 or f16: checked by the caller). */
__device__ double load_d(const void *x, int32_t dt, uint64_t i) {
    return dt == CT_DTYPE_BF16  ? (double)ct_bf16_to_f32(((const uint16_t *)x)[i])
           : dt == CT_DTYPE_F16 ? (double)ct_f16_to_f32(((const uint16_t *)x)[i])
                                : (double)((const float *)x)[i];
}

/* Pass 1 of sumsq: partial[b] = sum of x^2 over a grid-stride share of block b. */
__global__ void k_sumsq_partial(const void *x, int32_t dt, uint64_t n, double *partial) {
    __shared__ double sh[RED_THREADS];
    double s = 0.0;
    FOR_EACH(i, n) {
        double v = load_d(x, dt, i);
        s += v * v;
    }
    s = block_reduce(s, sh, RED_SUM);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* Pass 2, one block: *out = sum of the RED_BLOCKS partials, in a fixed order. */
__global__ void k_sum_partials(const double *partial, double *out) {
    __shared__ double sh[RED_THREADS];
    double s = 0.0;
    for (int k = threadIdx.x; k < RED_BLOCKS; k += RED_THREADS) s += partial[k];
    s = block_reduce(s, sh, RED_SUM);
    if (threadIdx.x == 0) *out = s;
}

static int32_t cuda_sumsq(void *p, const void *x, int32_t dtype, uint64_t n, double *out,
                          ct_error *err) {
    cuda_device *self = (cuda_device *)p;
    if (dtype != CT_DTYPE_F32 && dtype != CT_DTYPE_BF16 && dtype != CT_DTYPE_F16)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "device cuda: sumsq of %s is not "
                            "supported ---> use f32, bf16 or f16", ct_dtype_name(dtype));
    int32_t rc = scratch_reserve(self, RED_BLOCKS + 1, err);
    if (rc != CT_OK) return rc;
    k_sumsq_partial<<<RED_BLOCKS, RED_THREADS, 0, self->stream>>>(x, dtype, n, self->scratch);
    LAUNCH_CHECK("sumsq");
    k_sum_partials<<<1, RED_THREADS, 0, self->stream>>>(self->scratch,
                                                        self->scratch + RED_BLOCKS);
    LAUNCH_CHECK("sumsq (final)");
    CUDA_TRY(cudaMemcpyAsync(self->pinned, self->scratch + RED_BLOCKS, sizeof(double),
                             cudaMemcpyDeviceToHost, self->stream), "sumsq read-back");
    CUDA_TRY(cudaStreamSynchronize(self->stream), "sumsq");
    *out = self->pinned[0];
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * AdamW (PyTorch's torch.optim.AdamW; the per-element update is ct_adamw_update)
 * ------------------------------------------------------------------------------------- */

__global__ void k_adamw(float *param, const float *grad, float *m, float *v,
                        const uint8_t *decay_mask, uint64_t n, float lr, float b1, float b2,
                        float eps, float wd, float gs, float bc1, float bc2) {
    FOR_EACH(i, n) {
        float wd_i = (decay_mask && !decay_mask[i]) ? 0.0f : wd;
        float pi = param[i], mi = m[i], vi = v[i];
        ct_adamw_update(&pi, grad[i] * gs, &mi, &vi, lr, b1, b2, eps, wd_i, bc1, bc2);
        param[i] = pi;
        m[i] = mi;
        v[i] = vi;
    }
}

static int32_t cuda_adamw(void *p, float *param, const float *grad, float *m, float *v,
                          const uint8_t *decay_mask, uint64_t n, const ct_adamw_args *args,
                          ct_error *err) {
    cuda_device *self = (cuda_device *)p;
    if (args->step < 1)
        return ct_error_set(err, CT_ERR_INVALID, "device cuda: adamw step %lld must be >= 1 "
                            "(it is 1-based, for bias correction)", (long long)args->step);
    if (!n) return CT_OK;
    /* Bias corrections in double on the host, exactly as the cpu device computes them. */
    float bc1 = (float)(1.0 - pow((double)args->beta1, (double)args->step));
    float bc2 = (float)(1.0 - pow((double)args->beta2, (double)args->step));
    k_adamw<<<ew_blocks(n), EW_THREADS, 0, self->stream>>>(
        param, grad, m, v, decay_mask, n, args->lr, args->beta1, args->beta2, args->eps,
        args->weight_decay, args->grad_scale, bc1, bc2);
    LAUNCH_CHECK("adamw");
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * Row statistics of logits (N, V): one block per row
 * ------------------------------------------------------------------------------------- */

/* Block i handles row i of z (N, V): row_max[i], row_lse[i] (max + log of the double sum of
 * exp(z - max); lse = max when max is not finite, as on the cpu device) and, when figs is
 * non-NULL, figs[i*ROW_FIGS + {0,1,2,3}] = sum z, ||z||_2, lse, max |z|. */
__global__ void k_row_stats(const float *z, int64_t V, float *row_max, float *row_lse,
                            double *figs) {
    __shared__ double sh[RED_THREADS];
    const float *row = z + (uint64_t)blockIdx.x * (uint64_t)V;
    float mx = -INFINITY;
    double s = 0.0, sq = 0.0, ma = 0.0;
    for (int64_t j = threadIdx.x; j < V; j += RED_THREADS) {
        float zj = row[j];
        mx = fmaxf(mx, zj);
        s += zj;
        sq += (double)zj * zj;
        ma = fmax(ma, fabs((double)zj));
    }
    /* fmaxf/fmax skip NaN, as the cpu loop's `if (zj > mx)` does: both report the max of
     * the non-NaN values (and a NaN lse, from the exp sum, for a row holding a NaN). */
    double rmx = block_reduce((double)mx, sh, RED_MAX);
    mx = (float)rmx;
    double e = 0.0;
    if (isfinite(mx))
        for (int64_t j = threadIdx.x; j < V; j += RED_THREADS) e += (double)expf(row[j] - mx);
    e = block_reduce(e, sh, RED_SUM);
    float lse = isfinite(mx) ? (float)((double)mx + log(e)) : mx;
    if (figs) {
        s = block_reduce(s, sh, RED_SUM);
        sq = block_reduce(sq, sh, RED_SUM);
        ma = block_reduce(ma, sh, RED_MAX);
    }
    if (threadIdx.x == 0) {
        row_max[blockIdx.x] = mx;
        row_lse[blockIdx.x] = lse;
        if (figs) {
            double *f = figs + (uint64_t)blockIdx.x * ROW_FIGS;
            f[0] = s;
            f[1] = sqrt(sq);
            f[2] = (double)lse;
            f[3] = ma;
        }
    }
}

/* One block over N rows of figures: out = {sum of sums, sum of norms, max norm, sum of lse,
 * max |z|}. Sums in a fixed order. */
__global__ void k_row_totals(const double *figs, int64_t N, double *out) {
    __shared__ double sh[RED_THREADS];
    double s = 0, nrm = 0, mxn = 0, lse = 0, mxa = 0;
    for (int64_t i = threadIdx.x; i < N; i += RED_THREADS) {
        const double *f = figs + (uint64_t)i * ROW_FIGS;
        s += f[0];
        nrm += f[1];
        mxn = fmax(mxn, f[1]);
        lse += f[2];
        mxa = fmax(mxa, f[3]);
    }
    s = block_reduce(s, sh, RED_SUM);
    nrm = block_reduce(nrm, sh, RED_SUM);
    mxn = block_reduce(mxn, sh, RED_MAX);
    lse = block_reduce(lse, sh, RED_SUM);
    mxa = block_reduce(mxa, sh, RED_MAX);
    if (threadIdx.x == 0) {
        out[0] = s;
        out[1] = nrm;
        out[2] = mxn;
        out[3] = lse;
        out[4] = mxa;
    }
}

static int32_t cuda_row_stats(void *p, const float *logits, int64_t rows, int64_t vocab,
                              float *row_max, float *row_lse, ct_logit_stats *stats,
                              ct_error *err) {
    cuda_device *self = (cuda_device *)p;
    if (rows < 0 || vocab < 1)
        return ct_error_set(err, CT_ERR_INVALID, "device cuda: row_stats of %lld rows of %lld "
                            "logits ---> rows must be >= 0 and vocab >= 1",
                            (long long)rows, (long long)vocab);
    if (rows > 2147483647LL)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "device cuda: row_stats of %lld rows "
                            "---> split the batch (at most 2^31-1 rows per call)",
                            (long long)rows);
    if (rows == 0) return CT_OK;
    double *figs = NULL;
    if (stats) {
        int32_t rc = scratch_reserve(self, (uint64_t)rows * ROW_FIGS + 8, err);
        if (rc != CT_OK) return rc;
        figs = self->scratch + 8; /* scratch[0..4]: the totals */
    }
    k_row_stats<<<(unsigned)rows, RED_THREADS, 0, self->stream>>>(logits, vocab, row_max,
                                                                  row_lse, figs);
    LAUNCH_CHECK("row_stats");
    if (!stats) return CT_OK;
    k_row_totals<<<1, RED_THREADS, 0, self->stream>>>(figs, rows, self->scratch);
    LAUNCH_CHECK("row_stats (totals)");
    CUDA_TRY(cudaMemcpyAsync(self->pinned, self->scratch, 5 * sizeof(double),
                             cudaMemcpyDeviceToHost, self->stream), "row_stats read-back");
    CUDA_TRY(cudaStreamSynchronize(self->stream), "row_stats");
    const double *t = self->pinned;
    stats->sum_logit += t[0];
    stats->sum_row_norm += t[1];
    if (t[2] > stats->max_row_norm) stats->max_row_norm = t[2];
    stats->sum_lse += t[3];
    if (t[4] > stats->max_abs) stats->max_abs = t[4];
    stats->rows += rows;
    return CT_OK;
}

static int32_t cuda_synchronize(void *p, ct_error *err) {
    cuda_device *self = (cuda_device *)p;
    CUDA_TRY(cudaStreamSynchronize(self->stream), "cudaStreamSynchronize");
    return CT_OK;
}

static void *cuda_native_stream(void *p) { return (void *)((cuda_device *)p)->stream; }

/* ---------------------------------------------------------------------------------------
 * peak_flops: a datasheet table by the GPU's name (cudaDeviceProp.name) and the dtype
 * ------------------------------------------------------------------------------------- */

/* Dense (no 2:4 sparsity) TFLOP/s from NVIDIA's datasheets. bf16: tensor cores (the f16
 * tensor-core rate is the same on every GPU listed, so f16 takes this column). f32: the
 * CUDA cores' FP32 rate, not TF32, since the gpt model keeps cuBLAS's default math (no TF32).
 * The first entry whose `match` is in the name wins, so variants come before their family. */
typedef struct gpu_peak {
    const char *match;
    double      bf16_tflops, f32_tflops;
} gpu_peak;

static const gpu_peak gpu_peaks[] = {
    {"H100 PCIe", 756.5, 51.2}, {"H100 NVL", 835.5, 60.0}, {"H100", 989.4, 66.9},
    {"H200 NVL", 835.5, 60.0},  {"H200", 989.4, 66.9},     {"GH200", 989.4, 66.9},
    {"A100", 312.0, 19.5},      {"L40S", 362.1, 91.6},     {"L4", 121.0, 30.3},
    {"A10", 125.0, 31.2},
};

static int32_t cuda_peak_flops(void *p, int32_t dtype, ct_peak *out, ct_error *err) {
    cuda_device *self = (cuda_device *)p;
    if (!out) return ct_error_set(err, CT_ERR_INVALID, "device cuda: peak_flops got a NULL out");
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, self->ordinal), "cudaGetDeviceProperties");
    if (dtype != CT_DTYPE_BF16 && dtype != CT_DTYPE_F16 && dtype != CT_DTYPE_F32)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "device cuda: no peak for dtype %s ---> set "
                            "[device] peak_tflops", ct_dtype_name(dtype));
    const gpu_peak *g = NULL;
    for (size_t i = 0; i < sizeof gpu_peaks / sizeof gpu_peaks[0] && !g; i++)
        if (strstr(prop.name, gpu_peaks[i].match)) g = &gpu_peaks[i];
    if (!g)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "device cuda: %.100s is not in the datasheet "
                            "table ---> set [device] peak_tflops to its dense %s TFLOP/s",
                            prop.name, ct_dtype_name(dtype));
    ct_peak peak;
    memset(&peak, 0, sizeof peak);
    peak.struct_size = sizeof peak;
    int half = dtype == CT_DTYPE_BF16 || dtype == CT_DTYPE_F16;
    peak.flops = 1e12 * (half ? g->bf16_tflops : g->f32_tflops);
    snprintf(peak.source, sizeof peak.source, "datasheet: %.100s, %s dense", prop.name,
             dtype == CT_DTYPE_BF16  ? "bf16 tensor core"
             : dtype == CT_DTYPE_F16 ? "f16 tensor core"
                                     : "f32 (no TF32)");
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    snprintf(peak.library, sizeof peak.library, "cuBLAS (CUDA runtime %d.%d)", rt / 1000,
             rt % 1000 / 10);
    uint32_t size = out->struct_size && out->struct_size < sizeof peak ? out->struct_size
                                                                        : (uint32_t)sizeof peak;
    memcpy(out, &peak, size);
    out->struct_size = size;
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * descriptor
 * ------------------------------------------------------------------------------------- */

static const ct_param_spec cuda_params[] = {
    CT_PARAM_INT("ordinal", "-1", -1, 1023,
                 "GPU index; -1 = the launcher's local rank (mpirun, srun, torchrun-style), else 0"),
    CT_PARAM_END,
};

static ct_device_vtable make_vtable(void) {
    ct_device_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size   = sizeof(ct_device_vtable);
    vt.create        = cuda_create;
    vt.destroy       = cuda_destroy;
    vt.alloc         = cuda_alloc;
    vt.free_mem      = cuda_free_mem;
    vt.copy          = cuda_copy;
    vt.zero          = cuda_zero;
    vt.cast          = cuda_cast;
    vt.scale         = cuda_scale;
    vt.axpy          = cuda_axpy;
    vt.sumsq         = cuda_sumsq;
    vt.adamw         = cuda_adamw;
    vt.row_stats     = cuda_row_stats;
    vt.synchronize   = cuda_synchronize;
    vt.native_stream = cuda_native_stream;
    vt.cast_bf16_sr  = cuda_cast_sr;
    vt.peak_flops    = cuda_peak_flops;
    return vt;
}

static const ct_device_vtable cuda_vtable = make_vtable();

static ct_plugin_desc make_desc(void) {
    ct_plugin_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size       = sizeof(ct_plugin_desc);
    d.abi_major         = CT_ABI_MAJOR;
    d.abi_minor         = CT_ABI_MINOR;
    d.kind              = CT_KIND_DEVICE;
    d.name              = "cuda";
    d.version           = "1.0.0";
    d.summary           = "one NVIDIA GPU per rank: cudaMalloc, one compute stream, "
                          "deterministic reductions";
    d.params            = cuda_params;
    d.param_struct_size = sizeof(ct_param_spec);
    d.devices           = CT_DEVICE_CUDA;
    d.vtable            = &cuda_vtable;
    return d;
}

static const ct_plugin_desc cuda_desc = make_desc();

extern "C" CT_EXPORT const ct_plugin_desc *ctrain_plugin_v1(void) { return &cuda_desc; }
