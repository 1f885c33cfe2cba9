/* test_numerics.c — claims about sdk/include/ctrain/numerics.h: bf16 rounding against a
 * reference built from double arithmetic (the two neighbouring bf16 values and the tie rule),
 * f16 rounding (round to nearest even, subnormals, overflow, stochastic) the same way,
 * stochastic rounding, activations against finite differences, SplitMix64, the lr schedule.
 * Not for: the device plugins' loops over these functions (test_device_cpu.c).
 */
#include "ct_test.h"

#include <ctrain/numerics.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Reference f32 -> bf16 for finite x, in double: bf16 keeps 8 significant bits, so near |x|
 * (with 2^e <= |x| < 2^(e+1), e >= -126; subnormal range fixed at e = -126) the bf16 grid has
 * spacing ulp = 2^(e-7). Take the grid points below and above, the nearer one wins, a tie goes
 * to the one with an even multiple of ulp. A result of 2^128 or more is Inf. Returns the
 * chosen value as double (sign restored; -0.0 for negative inputs that round to zero). */
static double ref_bf16_round(float xf) {
    double x = (double)xf;
    double a = fabs(x);
    if (a == 0.0) return x;
    int e;
    frexp(a, &e); /* a = f * 2^e, f in [0.5, 1): 2^(e-1) <= a < 2^e */
    e -= 1;
    if (e < -126) e = -126;
    double ulp = ldexp(1.0, e - 7);
    double k = floor(a / ulp); /* exact: a/ulp < 2^9 is a short integer plus a fraction */
    double lo = k * ulp, hi = (k + 1) * ulp;
    double r;
    if (a - lo < hi - a) r = lo;
    else if (a - lo > hi - a) r = hi;
    else r = fmod(k, 2.0) == 0.0 ? lo : hi;
    if (r >= ldexp(1.0, 128)) r = INFINITY;
    return x < 0 ? -r : r;
}

/* The checked claim for one input: ct_bf16_from_f32 agrees with the reference, bit for bit
 * in the sign and value. */
static int bf16_matches_reference(float x) {
    uint16_t h = ct_bf16_from_f32(x);
    double got = (double)ct_bf16_to_f32(h);
    double want = ref_bf16_round(x);
    if (got != want) return 0;
    return signbit(got) == signbit(want);
}

static uint64_t rng_state = 0x12345678u;
static uint32_t next_u32(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 32);
}

CT_TEST(bf16_from_f32_matches_double_reference_on_random_bit_patterns) {
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        float x = ct_f32_from_bits(next_u32());
        if (isnan(x)) continue;
        if (!bf16_matches_reference(x)) {
            if (bad++ < 5)
                CT_CHECK_MSG(0, "x = %a (bits %08x): got bf16 %04x, reference %a", (double)x,
                             ct_f32_bits(x), ct_bf16_from_f32(x), ref_bf16_round(x));
        }
    }
    CT_CHECK_INT(bad, 0);
}

CT_TEST(bf16_ties_round_to_even_in_both_directions_and_both_signs) {
    /* x = bf16 value h plus exactly half an ulp (low 16 bits = 0x8000). */
    for (uint32_t h = 0x3f80; h < 0x3f90; h++) {
        for (int neg = 0; neg < 2; neg++) {
            uint32_t sign = neg ? 0x80000000u : 0;
            float x = ct_f32_from_bits(sign | (h << 16) | 0x8000u);
            uint16_t want = (uint16_t)((sign >> 16) | ((h & 1) ? h + 1 : h)); /* even wins */
            CT_CHECK_INT(ct_bf16_from_f32(x), want);
            CT_CHECK(bf16_matches_reference(x));
            /* one f32 ulp either side of the tie: plain nearest */
            float below = ct_f32_from_bits(sign | (h << 16) | 0x7fffu);
            float above = ct_f32_from_bits(sign | (h << 16) | 0x8001u);
            CT_CHECK_INT(ct_bf16_from_f32(below), (sign >> 16) | h);
            CT_CHECK_INT(ct_bf16_from_f32(above), (sign >> 16) | (h + 1));
        }
    }
    /* 1 + 2^-8 is the tie between 1 and 1 + 2^-7: goes down to 1 (even) */
    CT_CHECK_INT(ct_bf16_from_f32(1.0f + ldexpf(1.0f, -8)), 0x3f80);
    /* 1 + 3*2^-8 is the tie between 1+2^-7 (odd) and 1+2^-6 (even): goes up */
    CT_CHECK_INT(ct_bf16_from_f32(1.0f + 3.0f * ldexpf(1.0f, -8)), 0x3f82);
}

CT_TEST(bf16_keeps_nan_as_nan_and_inf_as_inf) {
    uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu,
                       0x7f80ffffu, 0x7fff0000u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = ct_bf16_from_f32(ct_f32_from_bits(nans[i]));
        float back = ct_bf16_to_f32(h);
        CT_CHECK_MSG(isnan(back), "NaN %08x became %04x (not NaN)", nans[i], h);
        CT_CHECK_MSG((h & 0x8000u) == ((nans[i] >> 16) & 0x8000u), "NaN %08x lost its sign",
                     nans[i]);
    }
    CT_CHECK_INT(ct_bf16_from_f32(INFINITY), 0x7f80);
    CT_CHECK_INT(ct_bf16_from_f32(-INFINITY), 0xff80);
}

CT_TEST(bf16_overflows_to_inf_only_past_half_an_ulp_above_the_largest_finite) {
    /* largest finite bf16 = 0x7f7f = (2 - 2^-7) * 2^127; its ulp is 2^120 */
    double maxb = ldexp(2.0 - ldexp(1.0, -7), 127);
    CT_CHECK_INT(ct_bf16_from_f32(FLT_MAX), 0x7f80); /* FLT_MAX is past the midpoint */
    CT_CHECK_INT(ct_bf16_from_f32(-FLT_MAX), 0xff80);
    float just_below_mid = ct_f32_from_bits(0x7f7f7fffu);
    float mid = ct_f32_from_bits(0x7f7f8000u); /* tie: 0x7f7f is odd -> up to Inf */
    CT_CHECK_INT(ct_bf16_from_f32(just_below_mid), 0x7f7f);
    CT_CHECK_INT(ct_bf16_from_f32(mid), 0x7f80);
    CT_CHECK_CLOSE(ct_bf16_to_f32(0x7f7f), maxb, 0, 0);
    CT_CHECK(bf16_matches_reference(just_below_mid));
    CT_CHECK(bf16_matches_reference(mid));
}

CT_TEST(bf16_rounds_subnormals_and_keeps_negative_zero) {
    CT_CHECK_INT(ct_bf16_from_f32(-0.0f), 0x8000);
    CT_CHECK_INT(ct_bf16_from_f32(0.0f), 0x0000);
    CT_CHECK_INT(ct_bf16_from_f32(ct_f32_from_bits(0x00000001u)), 0x0000); /* tiny: down */
    CT_CHECK_INT(ct_bf16_from_f32(ct_f32_from_bits(0x80000001u)), 0x8000); /* to -0 */
    CT_CHECK_INT(ct_bf16_from_f32(ct_f32_from_bits(0x00008000u)), 0x0000); /* tie to even 0 */
    CT_CHECK_INT(ct_bf16_from_f32(ct_f32_from_bits(0x00018000u)), 0x0002); /* tie to even 2 */
    CT_CHECK_INT(ct_bf16_from_f32(ct_f32_from_bits(0x00008001u)), 0x0001);
    CT_CHECK_INT(ct_bf16_from_f32(ct_f32_from_bits(0x007fffffu)), 0x0080); /* up to min normal */
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        float x = ct_f32_from_bits(next_u32() & 0x807fffffu); /* subnormals of both signs */
        if (!bf16_matches_reference(x)) bad++;
    }
    CT_CHECK_INT(bad, 0);
}

CT_TEST(bf16_to_f32_to_bf16_is_the_identity_for_every_non_nan_pattern) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = ct_bf16_to_f32((uint16_t)h);
        if (isnan(f)) {
            if (!isnan(ct_bf16_to_f32(ct_bf16_from_f32(f)))) bad++;
            continue;
        }
        if (ct_bf16_from_f32(f) != h) bad++;
        if (ct_round_bf16(f) != f && !(isnan(f))) bad++;
    }
    CT_CHECK_INT(bad, 0);
}

CT_TEST(bf16_stochastic_rounding_picks_a_neighbour_and_is_unbiased) {
    float xs[] = {1.0f + 0.3f * ldexpf(1.0f, -7), -3.14159f, 1e-3f, 65000.5f};
    for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
        float x = xs[k];
        uint32_t u = ct_f32_bits(x);
        float down = ct_f32_from_bits(u & 0xffff0000u); /* toward zero */
        float up = ct_f32_from_bits((u & 0xffff0000u) + 0x10000u);
        double sum = 0;
        int n = 1 << 16, others = 0;
        for (int r = 0; r < n; r++) { /* every 16-bit draw once: the mean is exact */
            float y = ct_bf16_to_f32(ct_bf16_from_f32_sr(x, (uint32_t)r));
            if (y != down && y != up) others++;
            sum += y;
        }
        CT_CHECK_INT(others, 0);
        /* the exact mean over all draws equals x up to the 16 discarded bits' resolution */
        CT_CHECK_CLOSE(sum / n, (double)x, 0, fabs((double)up - (double)down) / 65536.0 + 1e-12);
    }
    CT_CHECK(isnan(ct_bf16_to_f32(ct_bf16_from_f32_sr(NAN, 0xffff))));
    CT_CHECK_INT(ct_bf16_from_f32_sr(INFINITY, 0xffff), 0x7f80);
}

/* Reference f32 -> f16 for any x, in double: f16 keeps 11 significant bits with exponents
 * from -14 (subnormals below, on the fixed grid 2^-24); the nearer grid point wins, a tie goes
 * to the even multiple of the grid; 65520 and up (after rounding: past 65504) is Inf. */
static double ref_f16_round(float xf) {
    double x = (double)xf, a = fabs(x);
    if (isnan(x)) return x;
    if (a == 0.0 || isinf(x)) return x;
    int e;
    frexp(a, &e);
    e -= 1;
    if (e < -14) e = -14;
    double ulp = ldexp(1.0, e - 10), k = floor(a / ulp), lo = k * ulp, hi = (k + 1) * ulp, r;
    if (a - lo < hi - a) r = lo;
    else if (a - lo > hi - a) r = hi;
    else r = fmod(k, 2.0) == 0.0 ? lo : hi;
    if (r > 65504.0) r = INFINITY;
    return x < 0 ? -r : r;
}

CT_TEST(f16_from_f32_matches_double_reference_on_random_and_boundary_values) {
    int bad = 0;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = next_u32();
        if (i & 1) /* half of them in f16's range: exponents 2^-30 .. 2^17 */
            u = (u & 0x807fffffu) | ((uint32_t)(97 + next_u32() % 48) << 23);
        float x = ct_f32_from_bits(u);
        if (isnan(x)) continue;
        double got = (double)ct_f16_to_f32(ct_f16_from_f32(x)), want = ref_f16_round(x);
        if (got != want || signbit(got) != signbit(want)) {
            if (bad++ < 5) CT_CHECK_MSG(0, "x = %a: got %a, want %a", (double)x, got, want);
        }
    }
    CT_CHECK_INT(bad, 0);
    /* the edges: largest finite, the overflow tie, the smallest subnormal and the tie below */
    CT_CHECK_INT(ct_f16_from_f32(65504.0f), 0x7bff);
    CT_CHECK_INT(ct_f16_from_f32(65519.99f), 0x7bff);
    CT_CHECK_INT(ct_f16_from_f32(65520.0f), 0x7c00);
    CT_CHECK_INT(ct_f16_from_f32(-INFINITY), 0xfc00);
    CT_CHECK_INT(ct_f16_from_f32(ldexpf(1.0f, -24)), 0x0001);
    CT_CHECK_INT(ct_f16_from_f32(ldexpf(1.0f, -25)), 0x0000);  /* a tie: to even, zero */
    CT_CHECK_INT(ct_f16_from_f32(ldexpf(1.5f, -25)), 0x0001);
    CT_CHECK_INT(ct_f16_from_f32(-ldexpf(1.0f, -26)), 0x8000); /* negative zero */
    CT_CHECK(isnan(ct_f16_to_f32(ct_f16_from_f32(NAN))));
}

CT_TEST(f16_to_f32_to_f16_is_the_identity_for_every_non_nan_pattern) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue; /* NaN */
        if (ct_f16_from_f32(ct_f16_to_f32((uint16_t)h)) != h) bad++;
    }
    CT_CHECK_INT(bad, 0);
    CT_CHECK(ct_f16_to_f32(0x3c00) == 1.0f && ct_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
}

CT_TEST(f16_stochastic_rounding_picks_a_neighbour_and_is_unbiased) {
    /* a normal, a negative, a subnormal, one far below the subnormals, one near the top */
    float xs[] = {1.0f + 0.3f * ldexpf(1.0f, -10), -3.14159f, 3.3e-6f, 1e-9f, 65500.7f};
    for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
        float x = xs[k];
        double want = ref_f16_round(x), a = fabs((double)x);
        int e;
        frexp(a, &e);
        double ulp = ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
        double down = floor(a / ulp) * ulp, up = down + ulp;
        if (x < 0) down = -down, up = -up;
        double sum = 0;
        int n = 1 << 20, others = 0;
        for (int r = 0; r < n; r++) {
            uint32_t bits = (uint32_t)r * 2654435761u; /* spread over the low 24 bits too */
            double y = ct_f16_to_f32(ct_f16_from_f32_sr(x, bits));
            if (y != down && y != up) others++;
            sum += y;
        }
        CT_CHECK_MSG(others == 0, "x = %g: %d results were neither neighbour", (double)x, others);
        CT_CHECK_CLOSE(sum / n, (double)x, 0, ulp * 4e-3 + 1e-30);
        (void)want;
    }
    CT_CHECK_INT(ct_f16_from_f32_sr(65504.0f, 0xffffffffu), 0x7bff); /* exact: never rounded */
    CT_CHECK_INT(ct_f16_from_f32_sr(INFINITY, 0), 0x7c00);
}

/* Central difference of f at x in double, for float functions evaluated in float. */
static double central_diff(float (*f)(float), double x, double h) {
    return ((double)f((float)(x + h)) - (double)f((float)(x - h))) / (2 * h);
}

static float gelu_wrap(float x) { return ct_gelu(x); }
static float silu_wrap(float x) { return ct_silu(x); }

CT_TEST(gelu_and_silu_gradients_match_finite_differences) {
    for (double x = -6.0; x <= 6.0; x += 0.37) {
        CT_CHECK_CLOSE(ct_gelu_grad((float)x), central_diff(gelu_wrap, x, 1e-2), 1e-3, 2e-4);
        CT_CHECK_CLOSE(ct_silu_grad((float)x), central_diff(silu_wrap, x, 1e-2), 1e-3, 2e-4);
    }
    /* gelu (tanh form) in double at 1.0: 0.5*(1+tanh(sqrt(2/pi)*(1+0.044715))) */
    double g1 = 0.5 * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * 1.044715));
    CT_CHECK_CLOSE(ct_gelu(1.0f), g1, 1e-6, 0);
    CT_CHECK_CLOSE(ct_silu(2.0f), 2.0 / (1.0 + exp(-2.0)), 1e-6, 0);
}

/* ct_exp (no libm call: the attention softmax and the GELU vectorize over it) is within 1 ulp
 * of e^x over [-87, 88], clamps outside it, and keeps NaN visible. */
CT_TEST(exp_is_within_one_ulp_clamps_and_keeps_nan) {
    double worst = 0, worst_x = 0;
    for (double x = -87.0; x <= 88.0; x += 1.0 / 4096 + 1e-7) {
        float f = (float)x;
        double e = exp((double)f);
        float ef = (float)e;
        double ulp = (double)nextafterf(ef, INFINITY) - (double)ef;
        double d = fabs((double)ct_exp(f) - e) / ulp;
        if (d > worst) worst = d, worst_x = x;
    }
    CT_CHECK_MSG(worst <= 1.0, "ct_exp: %.3g ulp at x = %.6f, tolerance 1 ulp", worst, worst_x);
    CT_CHECK(ct_exp(0.0f) == 1.0f && ct_exp(-0.0f) == 1.0f);
    CT_CHECK_CLOSE(ct_exp(-1000.0f), exp(-87.0), 0, 1e-44); /* clamped: ~1.6e-38 */
    CT_CHECK_CLOSE(ct_exp(1000.0f), exp(88.0), 1e-6, 0);
    CT_CHECK(isnan(ct_exp(NAN)) && isnan(ct_exp(-NAN)));
}

/* ct_gelu uses its own tanh (ct_gelu_tanh: no libm call, so the model's GELU loops vectorize);
 * it must stay as close to the double formula as libm's tanhf made it: within 2e-7 x max(1,|x|)
 * for the value and 1e-6 for the gradient over [-12, 12] (libm: 1.25e-7 and 5.6e-7), and exactly
 * +-1 where f32's tanh is, so the gradient vanishes there (1 - t^2 = 0) as before. */
CT_TEST(gelu_tanh_is_as_accurate_as_libm_and_exact_at_the_ends) {
    double worst_t = 0, worst_g = 0, worst_dg = 0;
    for (double x = -12.0; x <= 12.0; x += 1.0 / 1024 + 1e-7) {
        float f = (float)x;
        double u = (double)CT_GELU_SCALE * (f + 0.044715 * (double)f * f * f), t = tanh(u);
        double g = 0.5 * f * (1.0 + t);
        double dg = 0.5 * (1.0 + t) +
                    0.5 * f * (1.0 - t * t) * (double)CT_GELU_SCALE * (1.0 + 3.0 * 0.044715 * f * f);
        worst_t = fmax(worst_t, fabs(ct_gelu_tanh((float)(x / 4)) - tanh((double)(float)(x / 4))));
        worst_g = fmax(worst_g, fabs(ct_gelu(f) - g) / fmax(1.0, fabs(x)));
        worst_dg = fmax(worst_dg, fabs(ct_gelu_grad(f) - dg));
    }
    CT_CHECK_MSG(worst_t <= 2e-7, "ct_gelu_tanh: max abs error %.3g, tolerance 2e-7", worst_t);
    CT_CHECK_MSG(worst_g <= 2e-7, "ct_gelu: max error / max(1,|x|) %.3g, tolerance 2e-7", worst_g);
    CT_CHECK_MSG(worst_dg <= 1e-6, "ct_gelu_grad: max abs error %.3g, tolerance 1e-6", worst_dg);
    CT_CHECK(ct_gelu_tanh(9.5f) == 1.0f && ct_gelu_tanh(-30.0f) == -1.0f);
    CT_CHECK(ct_gelu_tanh(0.0f) == 0.0f && ct_gelu_tanh(1e-30f) >= 0.0f);
    CT_CHECK(ct_gelu_grad(8.0f) == 1.0f && ct_gelu_grad(-8.0f) == 0.0f);
    CT_CHECK(ct_gelu(INFINITY) == INFINITY && isnan(ct_gelu(NAN)));
}

CT_TEST(hash64_is_splitmix64) {
    /* SplitMix64 from state 0: the first output is the published 0xe220a8397b1dcdaf, the
     * second 0x6e789e6aa1b965f4 (counter 1 = the state after two increments). */
    CT_CHECK(ct_hash64(0, 0) == 0xe220a8397b1dcdafull);
    CT_CHECK(ct_hash64(0, 1) == 0x6e789e6aa1b965f4ull);
    double sum = 0;
    float lo = 1, hi = 0;
    for (int i = 0; i < 100000; i++) {
        float u = ct_uniform01(7, (uint64_t)i);
        sum += u;
        if (u < lo) lo = u;
        if (u > hi) hi = u;
    }
    CT_CHECK_CLOSE(sum / 100000, 0.5, 0, 0.005); /* sd of the mean ~ 0.0009 */
    CT_CHECK(lo >= 0.0f && hi < 1.0f);
}

CT_TEST(lr_cosine_warms_up_linearly_then_follows_the_cosine_to_min_lr) {
    CT_CHECK_CLOSE(ct_lr_cosine(0, 110, 10, 1.0f, 0.1f), 0.1, 1e-6, 0);  /* (0+1)/10 */
    CT_CHECK_CLOSE(ct_lr_cosine(9, 110, 10, 1.0f, 0.1f), 1.0, 1e-6, 0);
    CT_CHECK_CLOSE(ct_lr_cosine(10, 110, 10, 1.0f, 0.1f), 1.0, 1e-6, 0); /* cos(0) */
    CT_CHECK_CLOSE(ct_lr_cosine(60, 110, 10, 1.0f, 0.1f), 0.55, 1e-6, 0); /* half way */
    CT_CHECK_CLOSE(ct_lr_cosine(110, 110, 10, 1.0f, 0.1f), 0.1, 1e-6, 0);
    CT_CHECK_CLOSE(ct_lr_cosine(500, 110, 10, 1.0f, 0.1f), 0.1, 1e-6, 0); /* clamped */
}
