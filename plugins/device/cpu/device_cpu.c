/* device_cpu.c — the `cpu` device plugin: "device memory" is host memory, every call is
 * synchronous, element-wise loops run on OpenMP threads ([device] threads; 0 = the host's
 * automatic count for the rank: [device] auto_threads in ctrain.h).
 * Per-element math (bf16 rounding, the AdamW update) comes from ctrain/numerics.h so the CUDA
 * device computes the same bits. Not for: collectives (comm plugins), model math (models) or
 * measuring the BLAS peak (peak_cpu.c, behind peak_flops).
 *
 * Determinism: reductions (sumsq, row_stats' totals) split the data into CT_CPU_BLOCKS fixed
 * blocks, sum each block in order and add the block sums in order, so the result depends on
 * n only — never on the thread count or scheduling (resume is bit-exact on any machine).
 * Shape legend: N rows of logits, V vocabulary.
 */
#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include "peak_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define CT_CPU_BLOCKS   256      /* fixed reduction blocks (see the file comment) */
#define CT_CPU_PAR_MIN  32768    /* element loops shorter than this stay on one thread */

typedef struct cpu_device {
    const ct_host_api *api;
    ct_host           *host;
    int                threads; /* OpenMP threads for element-wise loops, >= 1 */
} cpu_device;

/* [lo, hi) of block b when n items are split into CT_CPU_BLOCKS blocks. */
static inline uint64_t block_lo(uint64_t n, int b) { return n * (uint64_t)b / CT_CPU_BLOCKS; }

/* ---------------------------------------------------------------------------------------
 * create / destroy
 * ------------------------------------------------------------------------------------- */

static void *cpu_create(const ct_create_args *args, ct_error *err) {
    cpu_device *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "device cpu: out of memory"), NULL;
    self->api = args->api;
    self->host = args->host;
    int64_t threads = 0;
    if (args->api && args->api->get_int &&
        args->api->get_int(args->host, args->section, "threads", &threads, err) != CT_OK)
        goto out_free_self;
    if (threads < 0) {
        ct_error_set(err, CT_ERR_INVALID,
                     "device cpu: [%s] threads = %lld is negative ---> use 0 (all cores) or a count",
                     args->section, (long long)threads);
        goto out_free_self;
    }
    /* 0: the host's count for this rank (ctrain.h: [device] auto_threads — the cores this
     * process may use, its share of the node, divided among the ranks in this process); a host
     * without the key: the cores divided among the world's ranks. */
    int64_t host_auto = 0;
    ct_error ignored = {sizeof ignored, 0, {0}};
    if (threads == 0 && args->api && args->api->get_int &&
        args->api->get_int(args->host, "device", "auto_threads", &host_auto, &ignored) != CT_OK)
        host_auto = 0;
    int ranks_here = args->world_size > 1 ? (int)args->world_size : 1;
    self->threads = threads > 0 ? (int)threads
                    : host_auto > 0 ? (int)host_auto : omp_get_num_procs() / ranks_here;
    if (self->threads < 1) self->threads = 1;
    if (self->api && self->api->log) {
        char msg[96];
        snprintf(msg, sizeof msg, "device cpu: %d OpenMP thread(s)", self->threads);
        self->api->log(self->host, CT_LOG_DEBUG, msg);
    }
    return self;

out_free_self:
    free(self);
    return NULL;
}

static void cpu_destroy(void *self) { free(self); }

/* ---------------------------------------------------------------------------------------
 * memory
 * ------------------------------------------------------------------------------------- */

static void *cpu_alloc(void *p, uint64_t bytes, ct_error *err) {
    (void)p;
    uint64_t rounded = ct_align_up(bytes ? bytes : 1, 64);
    void *ptr = NULL;
    if (rounded > SIZE_MAX || posix_memalign(&ptr, 64, (size_t)rounded) != 0) {
        ct_error_set(err, CT_ERR_NOMEM,
                     "device cpu: cannot allocate %llu bytes ---> reduce batch_size, seq_len or "
                     "the model size, or use a sharded strategy",
                     (unsigned long long)bytes);
        return NULL;
    }
    memset(ptr, 0, (size_t)rounded);
    return ptr;
}

static void cpu_free_mem(void *p, void *ptr) {
    (void)p;
    free(ptr);
}

static int32_t cpu_copy(void *p, void *dst, const void *src, uint64_t bytes, int32_t dir,
                        ct_error *err) {
    (void)p;
    if (dir != CT_COPY_H2D && dir != CT_COPY_D2H && dir != CT_COPY_D2D)
        return ct_error_set(err, CT_ERR_INVALID, "device cpu: copy direction %d is not a ct_copy_dir",
                            (int)dir);
    if (bytes) memmove(dst, src, (size_t)bytes);
    return CT_OK;
}

/* Large buffers (the head's dlogits range: 51 MB at 256 x 50257; the gradients) are cleared
 * by all the device's threads, in parts of whole 4 KiB pages: one core's memset leaves the
 * other's share of the memory bandwidth unused. */
#define CT_CPU_ZERO_PAR_MIN (1u << 20)
static int32_t cpu_zero(void *p, void *ptr, uint64_t bytes, ct_error *err) {
    cpu_device *self = p;
    (void)err;
    if (bytes < CT_CPU_ZERO_PAR_MIN || self->threads <= 1) {
        if (bytes) memset(ptr, 0, (size_t)bytes);
        return CT_OK;
    }
    const uint64_t page = 4096, parts = (uint64_t)self->threads;
    const uint64_t per = (bytes / parts + page - 1) / page * page;
#pragma omp parallel for schedule(static) num_threads(self->threads)
    for (uint64_t t = 0; t < parts; t++) {
        uint64_t lo = t * per, hi = lo + per < bytes ? lo + per : bytes;
        if (lo < hi) memset((char *)ptr + lo, 0, (size_t)(hi - lo));
    }
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * casts and element-wise arithmetic
 * ------------------------------------------------------------------------------------- */

static int32_t cpu_cast(void *p, void *dst, int32_t dst_dtype, const void *src, int32_t src_dtype,
                        uint64_t n, ct_error *err) {
    cpu_device *self = p;
    size_t ds = ct_dtype_size(dst_dtype), ss = ct_dtype_size(src_dtype);
    if (!ds || !ss)
        return ct_error_set(err, CT_ERR_INVALID, "device cpu: cast with unknown dtype %d -> %d",
                            (int)src_dtype, (int)dst_dtype);
    if (dst_dtype == src_dtype) {
        if (n) memmove(dst, src, (size_t)(n * ds));
        return CT_OK;
    }
    /* Different sizes: the buffers must not overlap (contract of ct_device_vtable.cast). */
    const char *d0 = dst, *s0 = src;
    if (n && d0 < s0 + n * ss && s0 < d0 + n * ds)
        return ct_error_set(err, CT_ERR_INVALID,
                            "device cpu: cast %s -> %s with overlapping buffers ---> cast into a "
                            "separate buffer when the element sizes differ",
                            ct_dtype_name(src_dtype), ct_dtype_name(dst_dtype));
    int64_t m = (int64_t)n;
    if (src_dtype == CT_DTYPE_F32 && dst_dtype == CT_DTYPE_BF16) {
        const float *s = src;
        uint16_t *d = dst;
#pragma omp parallel for schedule(static) num_threads(self->threads) if (m >= CT_CPU_PAR_MIN)
        for (int64_t i = 0; i < m; i++) d[i] = ct_bf16_from_f32(s[i]);
        return CT_OK;
    }
    if (src_dtype == CT_DTYPE_BF16 && dst_dtype == CT_DTYPE_F32) {
        const uint16_t *s = src;
        float *d = dst;
#pragma omp parallel for schedule(static) num_threads(self->threads) if (m >= CT_CPU_PAR_MIN)
        for (int64_t i = 0; i < m; i++) d[i] = ct_bf16_to_f32(s[i]);
        return CT_OK;
    }
    if (src_dtype == CT_DTYPE_F32 && dst_dtype == CT_DTYPE_F16) {
        const float *s = src;
        uint16_t *d = dst;
#pragma omp parallel for schedule(static) num_threads(self->threads) if (m >= CT_CPU_PAR_MIN)
        for (int64_t i = 0; i < m; i++) d[i] = ct_f16_from_f32(s[i]);
        return CT_OK;
    }
    if (src_dtype == CT_DTYPE_F16 && dst_dtype == CT_DTYPE_F32) {
        const uint16_t *s = src;
        float *d = dst;
#pragma omp parallel for schedule(static) num_threads(self->threads) if (m >= CT_CPU_PAR_MIN)
        for (int64_t i = 0; i < m; i++) d[i] = ct_f16_to_f32(s[i]);
        return CT_OK;
    }
    return ct_error_set(err, CT_ERR_UNSUPPORTED,
                        "device cpu: cast %s -> %s is not supported ---> supported: f32 <-> bf16, "
                        "f32 <-> f16 and any dtype to itself",
                        ct_dtype_name(src_dtype), ct_dtype_name(dst_dtype));
}

static int32_t cpu_scale(void *p, void *x, int32_t dtype, uint64_t n, float a, ct_error *err) {
    cpu_device *self = p;
    int64_t m = (int64_t)n;
    if (dtype == CT_DTYPE_F32) {
        float *v = x;
#pragma omp parallel for schedule(static) num_threads(self->threads) if (m >= CT_CPU_PAR_MIN)
        for (int64_t i = 0; i < m; i++) v[i] *= a;
        return CT_OK;
    }
    if (dtype == CT_DTYPE_BF16) {
        uint16_t *v = x;
#pragma omp parallel for schedule(static) num_threads(self->threads) if (m >= CT_CPU_PAR_MIN)
        for (int64_t i = 0; i < m; i++) v[i] = ct_bf16_from_f32(ct_bf16_to_f32(v[i]) * a);
        return CT_OK;
    }
    if (dtype == CT_DTYPE_F16) {
        uint16_t *v = x;
#pragma omp parallel for schedule(static) num_threads(self->threads) if (m >= CT_CPU_PAR_MIN)
        for (int64_t i = 0; i < m; i++) v[i] = ct_f16_from_f32(ct_f16_to_f32(v[i]) * a);
        return CT_OK;
    }
    return ct_error_set(err, CT_ERR_UNSUPPORTED, "device cpu: scale of %s is not supported "
                        "---> use f32, bf16 or f16", ct_dtype_name(dtype));
}

static int32_t cpu_axpy(void *p, float *y, float a, const void *x, int32_t x_dtype, uint64_t n,
                        ct_error *err) {
    cpu_device *self = p;
    int64_t m = (int64_t)n;
    if (x_dtype == CT_DTYPE_F32) {
        const float *v = x;
#pragma omp parallel for schedule(static) num_threads(self->threads) if (m >= CT_CPU_PAR_MIN)
        for (int64_t i = 0; i < m; i++) y[i] += a * v[i];
        return CT_OK;
    }
    if (x_dtype == CT_DTYPE_BF16) {
        const uint16_t *v = x;
#pragma omp parallel for schedule(static) num_threads(self->threads) if (m >= CT_CPU_PAR_MIN)
        for (int64_t i = 0; i < m; i++) y[i] += a * ct_bf16_to_f32(v[i]);
        return CT_OK;
    }
    if (x_dtype == CT_DTYPE_F16) {
        const uint16_t *v = x;
#pragma omp parallel for schedule(static) num_threads(self->threads) if (m >= CT_CPU_PAR_MIN)
        for (int64_t i = 0; i < m; i++) y[i] += a * ct_f16_to_f32(v[i]);
        return CT_OK;
    }
    return ct_error_set(err, CT_ERR_UNSUPPORTED, "device cpu: axpy with x of %s is not supported "
                        "---> use f32, bf16 or f16", ct_dtype_name(x_dtype));
}

/* Loops over a span of one array, compiled for AVX-512, AVX2 and the baseline (GCC's
 * target_clones: cpuid picks one when the plugin loads) so they vectorize at the machine's
 * width. Every clone computes the same bits: the code fixes the order of every sum, and in C11
 * mode nothing is contracted into an FMA, so each operation is the same IEEE one. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CT_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CT_CPU_CLONES
#endif

/* The fixed order of every vectorized sum and max here: CT_CPU_LANES running values (element
 * i goes to value i % 16: enough independent operations to hide their latency), folded
 * pairwise by CT_CPU_FOLD (value l combined with value l + w for w = 8, 4, 2, 1), then the
 * tail of n % 16 elements in order. */
#define CT_CPU_LANES 16
#define CT_CPU_FOLD(acc, COMBINE)                                                                \
    for (int w_ = CT_CPU_LANES / 2; w_ >= 1; w_ /= 2)                                           \
        for (int l_ = 0; l_ < w_; l_++) COMBINE((acc)[l_], (acc)[l_ + w_])
#define CT_CPU_ADD(a, b) (a) += (b)
#define CT_CPU_MAX(a, b) (a) = (b) > (a) ? (b) : (a)

/* Sum of squares of x[0..n) in double, in that order. */
#define CT_CPU_SUMSQ_SPAN(NAME, TYPE, LOAD)                                                      \
    CT_CPU_CLONES static double NAME(const TYPE *x, uint64_t n) {                                \
        double acc[CT_CPU_LANES] = {0};                                                         \
        uint64_t i = 0;                                                                         \
        for (; i + CT_CPU_LANES <= n; i += CT_CPU_LANES)                                        \
            for (int l = 0; l < CT_CPU_LANES; l++) {                                            \
                double v = (double)LOAD(x[i + (uint64_t)l]);                                    \
                acc[l] += v * v;                                                                \
            }                                                                                   \
        CT_CPU_FOLD(acc, CT_CPU_ADD);                                                           \
        double s = acc[0];                                                                      \
        for (; i < n; i++) {                                                                    \
            double v = (double)LOAD(x[i]);                                                      \
            s += v * v;                                                                         \
        }                                                                                       \
        return s;                                                                               \
    }
#define CT_CPU_AS_IS(v) (v)
CT_CPU_SUMSQ_SPAN(sumsq_f32, float, CT_CPU_AS_IS)
CT_CPU_SUMSQ_SPAN(sumsq_bf16, uint16_t, ct_bf16_to_f32)
CT_CPU_SUMSQ_SPAN(sumsq_f16, uint16_t, ct_f16_to_f32)

static int32_t cpu_sumsq(void *p, const void *x, int32_t dtype, uint64_t n, double *out,
                         ct_error *err) {
    cpu_device *self = p;
    if (dtype != CT_DTYPE_F32 && dtype != CT_DTYPE_BF16 && dtype != CT_DTYPE_F16)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "device cpu: sumsq of %s is not supported "
                            "---> use f32, bf16 or f16", ct_dtype_name(dtype));
    double partial[CT_CPU_BLOCKS];
#pragma omp parallel for schedule(static) num_threads(self->threads) if (n >= CT_CPU_PAR_MIN)
    for (int b = 0; b < CT_CPU_BLOCKS; b++) {
        uint64_t lo = block_lo(n, b), len = block_lo(n, b + 1) - lo;
        partial[b] = dtype == CT_DTYPE_F32    ? sumsq_f32((const float *)x + lo, len)
                     : dtype == CT_DTYPE_F16 ? sumsq_f16((const uint16_t *)x + lo, len)
                                             : sumsq_bf16((const uint16_t *)x + lo, len);
    }
    double total = 0.0;
    for (int b = 0; b < CT_CPU_BLOCKS; b++) total += partial[b];
    *out = total;
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * AdamW (PyTorch's torch.optim.AdamW; the per-element update is ct_adamw_update)
 * ------------------------------------------------------------------------------------- */

/* The AdamW update of n elements (the same per-element function as the CUDA device), without
 * or with a decay mask (two loops: a test of the mask pointer inside one would stop it from
 * vectorizing). */
CT_CPU_CLONES static void adamw_span(float *param, const float *grad, float *m, float *v,
                                     const uint8_t *decay_mask, int64_t n, float lr, float b1,
                                     float b2, float eps, float wd, float gs, float bc1,
                                     float bc2) {
    if (!decay_mask) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            ct_adamw_update(&param[i], grad[i] * gs, &m[i], &v[i], lr, b1, b2, eps, wd, bc1, bc2);
        return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float wd_i = decay_mask[i] ? wd : 0.0f;
        ct_adamw_update(&param[i], grad[i] * gs, &m[i], &v[i], lr, b1, b2, eps, wd_i, bc1, bc2);
    }
}

#define CT_CPU_SPAN 4096 /* elements per call of a span function: one thread's unit of work */

static int32_t cpu_adamw(void *p, float *param, const float *grad, float *m, float *v,
                         const uint8_t *decay_mask, uint64_t n, const ct_adamw_args *args,
                         ct_error *err) {
    cpu_device *self = p;
    if (args->step < 1)
        return ct_error_set(err, CT_ERR_INVALID, "device cpu: adamw step %lld must be >= 1 "
                            "(it is 1-based, for bias correction)", (long long)args->step);
    /* Bias corrections in double, as PyTorch computes them on the host. */
    float bc1 = (float)(1.0 - pow((double)args->beta1, (double)args->step));
    float bc2 = (float)(1.0 - pow((double)args->beta2, (double)args->step));
    int64_t count = (int64_t)n, spans = (count + CT_CPU_SPAN - 1) / CT_CPU_SPAN;
#pragma omp parallel for schedule(static) num_threads(self->threads) if (count >= CT_CPU_PAR_MIN)
    for (int64_t s = 0; s < spans; s++) {
        int64_t lo = s * CT_CPU_SPAN, len = count - lo < CT_CPU_SPAN ? count - lo : CT_CPU_SPAN;
        adamw_span(param + lo, grad + lo, m + lo, v + lo, decay_mask ? decay_mask + lo : NULL, len,
                   args->lr, args->beta1, args->beta2, args->eps, args->weight_decay,
                   args->grad_scale, bc1, bc2);
    }
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * Row statistics of logits (N, V)
 * ------------------------------------------------------------------------------------- */

typedef struct row_figures {
    double sum;     /* sum_j z_j */
    double sumsq;   /* sum_j z_j^2 */
    double max_abs; /* max_j |z_j| */
} row_figures;

/* One row z (V) in three vectorized passes (CT_CPU_CLONES), each in the fixed order of the
 * lanes above (element j to running value j % 16, CT_CPU_FOLD, then the tail in order), so
 * every clone gives the same bits. Maxima are exact in any order; the sums are double.
 *   row_moments: max z (a NaN is skipped, as `z > max` is false), max |z|, sum z, sum z^2;
 *   row_exp_sum: sum_j exp(z_j - max) (ct_exp, within 1 ulp of expf) in double, storing
 *                each exponential in p when p is non-NULL;
 *   row_scale:   p *= 1 / sum, in double.
 * Pass 1 reads z from memory; a row (V floats: 196 KiB at V = 50257) then stays in L2. */
CT_CPU_CLONES static float row_moments(const float *z, int64_t V, row_figures *fig) {
    float mx[CT_CPU_LANES], ma[CT_CPU_LANES];
    double s[CT_CPU_LANES], sq[CT_CPU_LANES];
    for (int l = 0; l < CT_CPU_LANES; l++) mx[l] = -INFINITY, ma[l] = 0.0f, s[l] = sq[l] = 0.0;
    int64_t j = 0;
    for (; j + CT_CPU_LANES <= V; j += CT_CPU_LANES)
        for (int l = 0; l < CT_CPU_LANES; l++) {
            float v = z[j + l], a = fabsf(v);
            CT_CPU_MAX(mx[l], v);
            CT_CPU_MAX(ma[l], a);
            s[l] += v;
            sq[l] += (double)v * v;
        }
    CT_CPU_FOLD(mx, CT_CPU_MAX);
    CT_CPU_FOLD(ma, CT_CPU_MAX);
    CT_CPU_FOLD(s, CT_CPU_ADD);
    CT_CPU_FOLD(sq, CT_CPU_ADD);
    for (; j < V; j++) {
        float v = z[j], a = fabsf(v);
        CT_CPU_MAX(mx[0], v);
        CT_CPU_MAX(ma[0], a);
        s[0] += v;
        sq[0] += (double)v * v;
    }
    fig->sum = s[0];
    fig->sumsq = sq[0];
    fig->max_abs = ma[0];
    return mx[0];
}

/* exp(z - mx) with mx finite; an argument below -100 (z = -Inf, or a difference that
 * overflowed) is taken as -100, which ct_exp clamps to about 1e-38: ct_exp of -Inf is NaN. */
static inline float row_exp(float z, float mx) {
    float d = z - mx;
    return ct_exp(d < -100.0f ? -100.0f : d);
}

CT_CPU_CLONES static double row_exp_sum(const float *z, int64_t V, float mx, float *p) {
    double e[CT_CPU_LANES] = {0};
    int64_t j = 0;
    if (p) {
        for (; j + CT_CPU_LANES <= V; j += CT_CPU_LANES)
            for (int l = 0; l < CT_CPU_LANES; l++) e[l] += (p[j + l] = row_exp(z[j + l], mx));
    } else {
        for (; j + CT_CPU_LANES <= V; j += CT_CPU_LANES)
            for (int l = 0; l < CT_CPU_LANES; l++) e[l] += row_exp(z[j + l], mx);
    }
    CT_CPU_FOLD(e, CT_CPU_ADD);
    for (; j < V; j++) {
        float x = row_exp(z[j], mx);
        if (p) p[j] = x;
        e[0] += x;
    }
    return e[0];
}

CT_CPU_CLONES static void row_scale(float *p, int64_t V, double inv) {
    for (int64_t j = 0; j < V; j++) p[j] = (float)((double)p[j] * inv);
}

/* One row z (V): its max, its logsumexp (max + log of the sum of exp(z - max)) and the
 * figures the logit metrics need. A row whose max is +-Inf or NaN gets lse = max (the sum
 * would be NaN). With p non-NULL, also the row's softmax p (V): the exponentials of the sum,
 * kept and scaled by 1/sum (row_softmax), or expf(z - lse) for a row whose max is not
 * finite (libm's expf: it gives 0 for -Inf, where ct_exp gives NaN). */
static inline void row_reduce(const float *z, int64_t V, float *max_out, float *lse_out,
                              row_figures *fig, float *p) {
    float mx = row_moments(z, V, fig);
    *max_out = mx;
    if (!isfinite(mx)) {
        *lse_out = mx;
        if (p)
            for (int64_t j = 0; j < V; j++) p[j] = expf(z[j] - mx);
        return;
    }
    double e = row_exp_sum(z, V, mx, p);
    *lse_out = (float)((double)mx + log(e));
    if (p) row_scale(p, V, 1.0 / e);
}

/* row_stats, and with probs non-NULL row_softmax (see ctrain.h). */
static int32_t cpu_row_softmax(void *p, const float *logits, int64_t rows, int64_t vocab,
                               float *row_max, float *row_lse, float *probs,
                               ct_logit_stats *stats, ct_error *err) {
    cpu_device *self = p;
    if (rows < 0 || vocab < 1)
        return ct_error_set(err, CT_ERR_INVALID, "device cpu: row_stats of %lld rows of %lld "
                            "logits ---> rows must be >= 0 and vocab >= 1",
                            (long long)rows, (long long)vocab);
    /* Per-block totals, combined in block order below (see the file comment). */
    double b_sum[CT_CPU_BLOCKS], b_norm[CT_CPU_BLOCKS], b_maxnorm[CT_CPU_BLOCKS];
    double b_lse[CT_CPU_BLOCKS], b_maxabs[CT_CPU_BLOCKS];
    uint64_t n = (uint64_t)rows;
#pragma omp parallel for schedule(dynamic, 4) num_threads(self->threads) \
    if (rows * vocab >= CT_CPU_PAR_MIN && rows > 1)
    for (int b = 0; b < CT_CPU_BLOCKS; b++) {
        double s = 0, nrm = 0, mxn = 0, lse = 0, mxa = 0;
        for (uint64_t i = block_lo(n, b); i < block_lo(n, b + 1); i++) {
            row_figures f;
            row_reduce(logits + i * (uint64_t)vocab, vocab, &row_max[i], &row_lse[i], &f,
                       probs ? probs + i * (uint64_t)vocab : NULL);
            double norm = sqrt(f.sumsq);
            s += f.sum;
            nrm += norm;
            if (norm > mxn) mxn = norm;
            lse += row_lse[i];
            if (f.max_abs > mxa) mxa = f.max_abs;
        }
        b_sum[b] = s;
        b_norm[b] = nrm;
        b_maxnorm[b] = mxn;
        b_lse[b] = lse;
        b_maxabs[b] = mxa;
    }
    if (!stats) return CT_OK;
    for (int b = 0; b < CT_CPU_BLOCKS; b++) {
        stats->sum_logit += b_sum[b];
        stats->sum_row_norm += b_norm[b];
        stats->sum_lse += b_lse[b];
        if (b_maxnorm[b] > stats->max_row_norm) stats->max_row_norm = b_maxnorm[b];
        if (b_maxabs[b] > stats->max_abs) stats->max_abs = b_maxabs[b];
    }
    stats->rows += rows;
    return CT_OK;
}

static int32_t cpu_row_stats(void *p, const float *logits, int64_t rows, int64_t vocab,
                             float *row_max, float *row_lse, ct_logit_stats *stats,
                             ct_error *err) {
    return cpu_row_softmax(p, logits, rows, vocab, row_max, row_lse, NULL, stats, err);
}

/* The BLAS product peak of this instance's threads, whatever the dtype: the gpt model's bf16
 * compute on the cpu widens to f32 and multiplies with sgemm too. */
static int32_t cpu_peak_flops(void *p, int32_t dtype, ct_peak *out, ct_error *err) {
    cpu_device *self = p;
    (void)dtype;
    if (!out) return ct_error_set(err, CT_ERR_INVALID, "device cpu: peak_flops got a NULL out");
    ct_peak peak = {.struct_size = sizeof peak};
    int32_t rc = cpu_peak_measure(self->threads, &peak, err);
    if (rc != CT_OK) return rc;
    uint32_t size = out->struct_size && out->struct_size < sizeof peak ? out->struct_size
                                                                        : sizeof peak;
    memcpy(out, &peak, size);
    out->struct_size = size;
    return CT_OK;
}

static int32_t cpu_synchronize(void *p, ct_error *err) {
    (void)p;
    (void)err;
    return CT_OK; /* every call above completed before it returned */
}

/* ---------------------------------------------------------------------------------------
 * descriptor
 * ------------------------------------------------------------------------------------- */

static const ct_param_spec cpu_params[] = {
    CT_PARAM_INT("threads", "0", 0, 4096,
                 "CPU threads per rank (element-wise loops, reductions, the model's products); 0 = "
                 "auto: the cores this process may use, its share of the node's cores among "
                 "the launcher's processes there, divided among the ranks in this process"),
    CT_PARAM_END,
};

static const ct_device_vtable cpu_vtable = {
    .struct_size = sizeof(ct_device_vtable),
    .create      = cpu_create,
    .destroy     = cpu_destroy,
    .alloc       = cpu_alloc,
    .free_mem    = cpu_free_mem,
    .copy        = cpu_copy,
    .zero        = cpu_zero,
    .cast        = cpu_cast,
    .scale       = cpu_scale,
    .axpy        = cpu_axpy,
    .sumsq       = cpu_sumsq,
    .adamw       = cpu_adamw,
    .row_stats   = cpu_row_stats,
    .row_softmax = cpu_row_softmax,
    .synchronize = cpu_synchronize,
    .native_stream = NULL,
    .peak_flops  = cpu_peak_flops,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_DEVICE,
    .name    = "cpu",
    .version = "1.0.0",
    .summary = "host memory and OpenMP loops; synchronous, deterministic reductions",
    .params  = cpu_params,
    .devices = CT_DEVICE_CPU,
    .vtable  = &cpu_vtable)

