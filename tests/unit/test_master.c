/* test_master.c — claims about the bf16 master write-back rules (numerics.h
 * ct_bf16_kahan_write / ct_master_sr_bits, precision_kit.h ct_pkit_master_write_bf16): many
 * tiny updates of a bf16 weight against an f64 reference (Kahan stays within one bf16 ulp of
 * it, round-to-nearest loses all of them), stochastic rounding unbiased over many draws and
 * deterministic per seed, step and element index (so two shards write what one does).
 * Not for: the host's staging of shards (test_bf16_master.sh trains through it).
 */
#include "ct_test.h"

#include <ctrain/numerics.h>
#include <ctrain/precision_kit.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { STEPS = 4000 };

/* The update of step k: uniform in [0, 1e-4) (mean 5e-5, about 1/150 of an ulp of a bf16
 * weight in [1, 2), 2^-7), or with mixed signs: far below half an ulp, the regime of a small
 * learning rate. */
static double tiny_update(int64_t k, int mixed) {
    double u = ct_uniform01(99, (uint64_t)k) * 1e-4;
    return mixed && (ct_hash64(98, (uint64_t)k) & 1) ? -0.5 * u : u;
}

/* w (bf16) after STEPS updates x = w + d (the optimizer's f32 result) written back with rule,
 * from 1.0; *ref the f64 sum of the updates from 1.0, *comp the final compensation. */
static float run_rule(int32_t rule, int mixed, double *ref, float *comp) {
    uint16_t w = ct_bf16_from_f32(1.0f), c = 0;
    double r = 1.0;
    for (int64_t k = 1; k <= STEPS; k++) {
        double d = tiny_update(k, mixed);
        float x = ct_bf16_to_f32(w) + (float)d;
        r += d;
        ct_pkit_master_write_bf16(rule, &w, &c, &x, 1, 1234, k, 0, 7);
    }
    *ref = r;
    *comp = ct_bf16_to_f32(c);
    return ct_bf16_to_f32(w);
}

/* Measured (this arithmetic is exact and deterministic): positive updates, the sum 1.2003:
 * nearest stays at 1.0 (error 0.20), kahan's w 1.2031 (error 0.0028, under half an ulp, 0.0039),
 * w + c within 5.3e-4; mixed signs, the sum 1.0513: nearest 0.051, kahan 0.0034, w + c 3.7e-5. */
CT_TEST(kahan_master_tracks_an_f64_sum_of_tiny_updates_that_nearest_loses) {
    for (int mixed = 0; mixed < 2; mixed++) {
        double ref = 0;
        float c = 0, c0 = 0;
        float kahan = run_rule(CT_MASTER_KAHAN, mixed, &ref, &c);
        float nearest = run_rule(CT_MASTER_NEAREST, mixed, &ref, &c0);
        double half_ulp = 0x1p-8; /* bf16 spacing in [1, 2) is 2^-7 */
        double ek = fabs(kahan - ref), en = fabs(nearest - ref), ewc = fabs(kahan + c - ref);
        CT_CHECK_MSG(ek <= half_ulp, "mixed=%d: kahan %.8f vs f64 %.8f (error %.3g > half an "
                     "ulp %.3g)", mixed, kahan, ref, ek, half_ulp);
        CT_CHECK_MSG(ewc < 1e-3, "mixed=%d: kahan w + c = %.8f vs f64 %.8f (error %.3g)", mixed,
                     kahan + c, ref, ewc);
        CT_CHECK_MSG(nearest == 1.0f, "mixed=%d: nearest moved to %.8f", mixed, nearest);
        CT_CHECK_MSG(en > 0.05 && en > 10 * ek, "mixed=%d: nearest error %.3g, kahan %.3g: "
                     "expected nearest > 0.05 and > 10x kahan", mixed, en, ek);
    }
}

CT_TEST(sr_master_is_unbiased_over_many_draws_and_deterministic_per_seed) {
    /* x a quarter of the way between the bf16 neighbours 1 and 1 + 2^-7 */
    const float x = 1.0f + 0x1p-9f;
    const int n = 200000;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        uint16_t w = ct_bf16_from_f32_sr(x, ct_master_sr_bits(1234, 5, 3, (uint64_t)i));
        float v = ct_bf16_to_f32(w);
        CT_CHECK_MSG(v == 1.0f || v == 1.0f + 0x1p-7f, "draw %d gave %.9g", i, v);
        sum += v;
    }
    /* a Bernoulli(1/4) step of 2^-7: sigma of the mean = 2^-7 sqrt(3/16 / n) = 7.6e-6 */
    double mean = sum / n, sigma = 0x1p-7 * sqrt(3.0 / 16.0 / n);
    CT_CHECK_MSG(fabs(mean - x) < 4 * sigma, "mean %.9f vs x %.9f (4 sigma %.3g)", mean, x,
                 4 * sigma);
    /* deterministic: the same seed, step, unit and index give the same bits; another seed or
     * step gives other bits for some index */
    int differ_seed = 0, differ_step = 0;
    for (uint64_t i = 0; i < 64; i++) {
        CT_CHECK_INT(ct_master_sr_bits(1234, 5, 3, i), ct_master_sr_bits(1234, 5, 3, i));
        differ_seed += ct_master_sr_bits(1234, 5, 3, i) != ct_master_sr_bits(1235, 5, 3, i);
        differ_step += ct_master_sr_bits(1234, 5, 3, i) != ct_master_sr_bits(1234, 6, 3, i);
    }
    CT_CHECK(differ_seed > 50 && differ_step > 50);
}

CT_TEST(sr_master_of_tiny_updates_tracks_the_sum_in_expectation) {
    double ref = 0, mean = 0;
    const int runs = 40;
    for (int s = 0; s < runs; s++) {
        uint16_t w = ct_bf16_from_f32(1.0f);
        ref = 1.0;
        for (int64_t k = 1; k <= STEPS; k++) {
            double d = tiny_update(k, 0);
            float x = ct_bf16_to_f32(w) + (float)d;
            ref += d;
            w = ct_bf16_from_f32_sr(x, ct_master_sr_bits(1000 + (uint64_t)s, k, 0, 0));
        }
        mean += ct_bf16_to_f32(w) / runs;
    }
    /* the sum moved by 0.2 (26 ulps); nearest stays at 1.0; one SR run spreads by about
     * sqrt(4000 * 5e-5 * 2^-7) ~ 0.04, the mean of 40 seeds by ~0.006: within 0.02 */
    CT_CHECK_MSG(fabs(mean - ref) < 0.02, "SR mean %.6f vs f64 %.6f", mean, ref);
}

CT_TEST(master_write_back_of_two_shards_equals_one_shard_for_every_rule) {
    enum { N = 512 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = 0.5f + (float)ct_uniform01(7, (uint64_t)i);
    for (int32_t rule = CT_MASTER_NEAREST; rule <= CT_MASTER_KAHAN; rule++) {
        uint16_t w1[N], c1[N], w2[N], c2[N];
        for (int i = 0; i < N; i++) {
            w1[i] = w2[i] = ct_bf16_from_f32(0.5f + (float)ct_uniform01(8, (uint64_t)i));
            c1[i] = c2[i] = 0;
        }
        ct_pkit_master_write_bf16(rule, w1, c1, x, N, 42, 9, 2, 100);
        ct_pkit_master_write_bf16(rule, w2, c2, x, N / 2, 42, 9, 2, 100);
        ct_pkit_master_write_bf16(rule, w2 + N / 2, c2 + N / 2, x + N / 2, N / 2, 42, 9, 2,
                                  100 + N / 2);
        CT_CHECK_MSG(memcmp(w1, w2, sizeof w1) == 0, "rule %s: master differs",
                     ct_pkit_master_update_name(rule));
        CT_CHECK_MSG(rule != CT_MASTER_KAHAN || memcmp(c1, c2, sizeof c1) == 0,
                     "kahan: compensation differs");
    }
}
