/* numerics.h — per-element math shared by CPU loops and CUDA kernels (bf16 rounding, GELU,
 * the AdamW update, a counter-based random stream). Every function is `static inline` and
 * marked CT_HD, so a .c file and a .cu file compile the same code and get the same bits.
 * Not for: anything that loops over arrays or touches memory other than its arguments.
 */
#ifndef CTRAIN_NUMERICS_H
#define CTRAIN_NUMERICS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define CT_HD __host__ __device__ __forceinline__
#else
#define CT_HD static inline
#endif

/* --- bit casts ------------------------------------------------------------------------- */

/* In device code the CUDA intrinsics (one register move); on the host memcpy. */
CT_HD uint32_t ct_f32_bits(float x) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

CT_HD float ct_f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

/* --- bfloat16 -------------------------------------------------------------------------- */

/* bf16 (stored as uint16_t, the top half of a binary32) -> f32: exact. */
CT_HD float ct_bf16_to_f32(uint16_t h) { return ct_f32_from_bits((uint32_t)h << 16); }

/* f32 -> bf16, round to nearest, ties to even. NaN stays NaN (quiet, sign kept); +-Inf and
 * values that round past the largest finite bf16 become +-Inf; subnormals round like any
 * other value (bf16 has the same exponent range as f32). */
CT_HD uint16_t ct_bf16_from_f32(float x) {
    uint32_t u = ct_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN */
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return (uint16_t)(u >> 16);
}

/* f32 -> bf16 with stochastic rounding: rounds up with probability equal to the discarded
 * fraction of an ulp. `r16` is 16 uniform random bits. Unbiased: E[result] = x. */
CT_HD uint16_t ct_bf16_from_f32_sr(float x, uint32_t r16) {
    uint32_t u = ct_f32_bits(x);
    if ((u & 0x7fffffffu) >= 0x7f800000u) return ct_bf16_from_f32(x); /* NaN, Inf */
    u += (r16 & 0xffffu);
    return (uint16_t)(u >> 16);
}

/* x rounded to the nearest bf16 value, kept as f32 (the emulation of bf16 storage). */
CT_HD float ct_round_bf16(float x) { return ct_bf16_to_f32(ct_bf16_from_f32(x)); }

/* --- f16: IEEE binary16 (CT_DTYPE_F16, since ABI 1.7), stored as uint16_t ----------------
 * 1 sign bit, 5 exponent bits (bias 15), 10 fraction bits: normals from 2^-14, subnormals down
 * to 2^-24, largest finite 65504. Unlike bf16 the range is narrow: f32 values past 65520 round
 * to Inf and values below 2^-25 to zero, which is why fp16 training scales its loss. */

/* f16 -> f32: exact (every f16 value, subnormals included, is an f32 value). */
CT_HD float ct_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1fu) return ct_f32_from_bits(sign | 0x7f800000u | (man << 13)); /* Inf, NaN */
    if (exp == 0) { /* zero or subnormal: man x 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return ct_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

/* f32 -> f16, round to nearest, ties to even. NaN stays NaN (quiet, sign kept); values that
 * round past 65504 (from 65520 up) become +-Inf; values below 2^-14 round to a subnormal, and
 * below 2^-25 (2^-25 itself: a tie, to even) to a zero of their sign. */
CT_HD uint16_t ct_f16_from_f32(float x) {
    uint32_t u = ct_f32_bits(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520, and Inf */
    if (a >= 0x38800000u) { /* a normal f16: rebias the exponent, round off 13 bits */
        a -= 112u << 23;
        return (uint16_t)(sign | ((a + 0xfffu + ((a >> 13) & 1u)) >> 13));
    }
    if (a < 0x33000000u) return (uint16_t)sign; /* below 2^-25: zero */
    /* a subnormal: (1.m x 2^(e-150)) / 2^-24 = m >> (126 - e), rounded to nearest even */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, sh = 126u - e;
    uint32_t q = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q); /* q = 0x400 is the smallest normal: the encoding carries */
}

/* f32 -> f16 with stochastic rounding: the discarded part of |x| (13 bits for a normal f16,
 * more for a subnormal) is rounded up with probability equal to its size in units of the
 * f16's last place, using the low bits of r (uniformly random: 13 for normals, up to 24 for
 * subnormals). E[result] = x for finite x below 65504. NaN and Inf as ct_f16_from_f32; a
 * round up past 65504 gives Inf. */
CT_HD uint16_t ct_f16_from_f32_sr(float x, uint32_t r) {
    uint32_t u = ct_f32_bits(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return ct_f16_from_f32(x);
    if (a >= 0x47800000u) return (uint16_t)(sign | 0x7c00u); /* 65536 and up: Inf */
    if (a >= 0x38800000u) {
        a -= 112u << 23;
        uint32_t h = (a + (r & 0x1fffu)) >> 13;
        return (uint16_t)(sign | (h >= 0x7c00u ? 0x7c00u : h));
    }
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    if (e < 102u) { /* far below 2^-24: its size in units of 2^-48, as 102 would hold it */
        m = 102u - e < 32u ? m >> (102u - e) : 0u;
        e = 102u;
    }
    uint32_t sh = 126u - e, mask = (1u << sh) - 1u;
    uint32_t q = (m >> sh) + (((m & mask) + (r & mask)) >> sh);
    return (uint16_t)(sign | q);
}

/* x rounded to the nearest f16 value, kept as f32 (the emulation of f16 storage). */
CT_HD float ct_round_f16(float x) { return ct_f16_to_f32(ct_f16_from_f32(x)); }

/* --- ncclAvg (CT_REDUCE_AVG): the premultiplied sum -------------------------------------
 * NCCL averages floating types by multiplying every contribution by the element type's 1/N
 * before the sum (PreMulSum): the scalar is float(1/N) rounded to the type (bf16(1/3) =
 * 0.333984375), the product rounded to the type (bf16: __hmul). */

/* The premultiplier of N ranks as a bf16 value (bf16 = 1) or an f32 value (bf16 = 0). */
CT_HD float ct_avg_scalar(int32_t world_size, int bf16) {
    float s = (float)(1.0 / (double)world_size);
    return bf16 ? ct_round_bf16(s) : s;
}

/* One contribution premultiplied: x * s rounded to bf16 (the f32 product of two bf16 values
 * is exact, so this is the correctly rounded bf16 product) or to f32. */
CT_HD float ct_avg_premul(float x, float s, int bf16) {
    return bf16 ? ct_round_bf16(x * s) : x * s;
}

/* --- counter-based random numbers (SplitMix64): reproducible and parallel -------------- */

/* A 64-bit hash of (seed, counter); the same on every device and thread order. */
CT_HD uint64_t ct_hash64(uint64_t seed, uint64_t counter) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (counter + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One combine of a stochastically rounded bf16 SUM (the contract of ABI 1.5's
 * ct_comm_vtable.all_reduce_sr / reduce_scatter_sr, and of the bf16_sr policy's own ring): the
 * k-th combine (k = 1 .. world_size-1, in the order's sequence) of element `element` adds a and
 * b in f32 and rounds to bf16 with the top 16 bits of ct_hash64(stream, element * world_size +
 * k). Every engine that follows this gets the same bits for the same order. */
CT_HD uint16_t ct_bf16_add_sr(uint16_t a, uint16_t b, uint64_t stream, uint64_t element,
                              int32_t k, int32_t world_size) {
    float v = ct_bf16_to_f32(a) + ct_bf16_to_f32(b);
    uint64_t bits = ct_hash64(stream, element * (uint64_t)world_size + (uint64_t)k);
    return ct_bf16_from_f32_sr(v, (uint32_t)(bits >> 48));
}

/* Uniform in [0, 1) with 24 bits. */
CT_HD float ct_uniform01(uint64_t seed, uint64_t counter) {
    return (float)(ct_hash64(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

/* --- low-precision master weights (ct_master_update, ABI 1.7) -------------------------- *
 * The optimizer computes x, the new value of a master weight w, in f32 from w widened; these
 * write x back into a bf16 w. */

/* The 16 random bits that round master element `index` (its place in unit `unit`'s padded flat
 * buffer, the same on every rank and world size) at step `step` (1-based) of a run of seed
 * `seed` stochastically: so a resharded or resumed run rounds exactly as the straight one. */
CT_HD uint32_t ct_master_sr_bits(uint64_t seed, int64_t step, uint32_t unit, uint64_t index) {
    uint64_t stream = ct_hash64(seed ^ 0x6d61737465727772ull /* "masterwr" */, (uint64_t)step);
    return (uint32_t)(ct_hash64(stream, ((uint64_t)unit << 40) ^ index) >> 48);
}

/* Kahan-compensated write-back into a bf16 master w with its bf16 compensation c (what the
 * earlier roundings lost, zero at the start), as in "Revisiting BFloat16 Training" (Zamirai et
 * al.) and optimi's kahan_sum: the update d = x - w (exact in f32 when x is near w) plus c is
 * added to w with one rounding, and what that rounding lost, y - (w' - w), becomes the new c
 * (rounded to bf16 once; optimi rounds c twice, after adding d and after subtracting). Over many
 * steps w + c tracks the f32 sum of the updates to about 16 bits where w alone keeps 8. */
CT_HD void ct_bf16_kahan_write(uint16_t *w, uint16_t *c, float x) {
    float old = ct_bf16_to_f32(*w);
    float y = (x - old) + ct_bf16_to_f32(*c);
    uint16_t nw = ct_bf16_from_f32(old + y);
    float moved = ct_bf16_to_f32(nw) - old; /* exact: both are bf16 values near each other */
    *c = ct_bf16_from_f32(y - moved);
    *w = nw;
}

/* --- activations ----------------------------------------------------------------------- */

#define CT_GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

/* e^x without a libm call, so a loop over it vectorizes (and the CUDA build, with --fmad=false,
 * computes the same bits): Cephes' expf, 2^k times a degree-7 polynomial of the remainder
 * r = x - k ln2 (|r| <= ln2/2, k = round(x / ln2)). Within 1 ulp of e^x for x in [-87, 88];
 * x is clamped to that range (below it gives ~1.6e-38 instead of a subnormal or 0, above it
 * 1.6e38 instead of Inf); NaN and +-Inf give NaN (a NaN must stay visible; the callers pass
 * neither Inf). The clamp works on integers and the NaN rides on x * 0: a float compare here
 * becomes a branch (GCC threads the clamped case) that stops loops from vectorizing. */
CT_HD float ct_exp(float x) {
    /* the bits as an int that orders like the floats, clamped to [-87, 88], and back */
    int32_t i = (int32_t)ct_f32_bits(x);
    i ^= (int32_t)((uint32_t)(i >> 31) >> 1);            /* negatives: flip the magnitude */
    const int32_t lo = (int32_t)(0xc2ae0000u ^ 0x7fffffffu), hi = 0x42b00000; /* -87, 88 */
    i = i < lo ? lo : i;
    i = i > hi ? hi : i;
    i ^= (int32_t)((uint32_t)(i >> 31) >> 1);
    float c = ct_f32_from_bits((uint32_t)i);
    float h = c * 1.44269504088896341f;
    int32_t k = (int32_t)(h + (h >= 0.0f ? 0.5f : -0.5f)); /* round half away from zero */
    float kf = (float)k;
    float r = (c - kf * 0.693359375f) - kf * -2.12194440e-4f; /* c - k ln2 in two parts */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;                            /* e^r */
    return p * ct_f32_from_bits((uint32_t)(k + 127) << 23) + x * 0.0f; /* times 2^k; NaN */
}

/* tanh(u) for the GELU without a libm call (ct_exp): tanh(a) = 1 - 2 / (e^(2a) + 1) for
 * a = |u| capped at 10 (there 2 / (e^20 + 1) is below half an ulp of 1, so t is exactly +-1 and
 * the gradient's 1 - t^2 exactly 0, as with libm's tanhf), the sign put back. Absolute error
 * below 2e-7, as libm's tanhf in this formula (the GELU adds it to 1); NaN gives +-1 (the GELU
 * multiplies by x, so NaN stays NaN), +-Inf gives +-1. */
CT_HD float ct_gelu_tanh(float u) {
    /* a = min(|u|, 10) on the bits (they order like the values for a >= 0; NaN and Inf give
     * 10): a float compare here becomes a branch that stops the loop from vectorizing */
    uint32_t ab = ct_f32_bits(u) & 0x7fffffffu;
    float a = ct_f32_from_bits(ab < 0x41200000u ? ab : 0x41200000u);
    float t = 1.0f - 2.0f / (ct_exp(2.0f * a) + 1.0f);
    return copysignf(t, u);
}

/* GELU, tanh approximation (GPT-2). */
CT_HD float ct_gelu(float x) {
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + ct_gelu_tanh(CT_GELU_SCALE * (x + cube)));
}

/* d gelu(x) / dx for the tanh approximation. */
CT_HD float ct_gelu_grad(float x) {
    float cube = 0.044715f * x * x * x;
    float t = ct_gelu_tanh(CT_GELU_SCALE * (x + cube));
    float sech2 = 1.0f - t * t;
    return 0.5f * (1.0f + t) + 0.5f * x * sech2 * CT_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

/* SiLU(x) = x * sigmoid(x), for SwiGLU. */
CT_HD float ct_silu(float x) { return x / (1.0f + expf(-x)); }

CT_HD float ct_silu_grad(float x) {
    float s = 1.0f / (1.0f + expf(-x));
    return s * (1.0f + x * (1.0f - s));
}

/* --- loss terms: d/dz_j of one logit, given the row's log-sum-exp (the loss plugins' CPU
 * loops and CUDA kernels both call these) ----------------------------------------------- */

/* Cross-entropy lse - z_t: softmax_j - [j == t]. */
CT_HD float ct_ce_dlogit(float z, float lse, int is_target) {
    return expf(z - lse) - (is_target ? 1.0f : 0.0f);
}

/* z-loss lse^2: 2 * lse * softmax_j. */
CT_HD float ct_zloss_dlogit(float z, float lse) { return 2.0f * lse * expf(z - lse); }

/* The same two from the row's softmax value p = softmax_j when the device computed it with
 * the row statistics (ct_loss_batch.probs, ABI 1.3): no exponential. */
CT_HD float ct_ce_dlogit_p(float p, int is_target) { return p - (is_target ? 1.0f : 0.0f); }
CT_HD float ct_zloss_dlogit_p(float p, float lse) { return 2.0f * lse * p; }

/* --- norms (layernorm, gain-only layernorm, rmsnorm) over a row of C values ----------- *
 * Forward y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(ss / C + eps) with ss the sum of
 * squared deviations from mean (mean = 0 for rmsnorm). Backward, with xhat = (x - mean) *
 * rstd, dxhat = dy * w and the row means m_d = mean(dxhat) (0 for rmsnorm) and
 * m_dx = mean(dxhat * xhat): dx = rstd * (dxhat - m_d - xhat * m_dx). A CPU loop and a GPU
 * block form ss, m_d and m_dx in their own order; these give the same per-element steps. */
CT_HD float ct_norm_rstd(float ss, float C, float eps) { return 1.0f / sqrtf(ss / C + eps); }

CT_HD float ct_norm_apply(float x, float mean, float rstd, float w, float b) {
    return (x - mean) * rstd * w + b;
}

CT_HD float ct_norm_dx(float dxhat, float xhat, float rstd, float m_d, float m_dx) {
    return rstd * (dxhat - m_d - xhat * m_dx);
}

/* --- AdamW (PyTorch's torch.optim.AdamW, decoupled decay) ------------------------------ */

/* Update one element in place. bc1 = 1 - beta1^step, bc2 = 1 - beta2^step (precomputed). */
CT_HD void ct_adamw_update(float *param, float grad, float *m, float *v, float lr, float beta1,
                           float beta2, float eps, float weight_decay, float bc1, float bc2) {
    *m = beta1 * *m + (1.0f - beta1) * grad;
    *v = beta2 * *v + (1.0f - beta2) * grad * grad;
    float mhat = *m / bc1;
    float vhat = *v / bc2;
    *param -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * *param);
}

/* --- learning-rate schedule (open_lm's cosine with linear warm-up) --------------------- */

/* lr at 0-based step `step` of `total`: linear warm-up to base over `warmup` steps, then
 * cosine from base to min_lr over the remaining steps. */
static inline float ct_lr_cosine(int64_t step, int64_t total, int64_t warmup, float base,
                                 float min_lr) {
    if (step < warmup) return base * (float)(step + 1) / (float)warmup;
    int64_t e = step - warmup, es = total - warmup;
    if (es <= 0) return base;
    double ratio = (double)e / (double)es;
    if (ratio > 1.0) ratio = 1.0;
    return (float)(min_lr + 0.5 * (1.0 + cos(3.14159265358979323846 * ratio)) * (base - min_lr));
}

#endif /* CTRAIN_NUMERICS_H */
