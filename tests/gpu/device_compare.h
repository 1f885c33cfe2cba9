/* device_compare.h — one suite of claims that a candidate device plugin (cuda) computes what the
 * reference device plugin (cpu) computes on the same inputs: casts (bf16 and f16), stochastic
 * rounding, scale and axpy (f32, bf16, f16), sumsq, AdamW, row statistics. Used by
 * tests/gpu/cuda_vs_cpu.c on a GPU machine and by tests/unit/test_cuda_build.c (cpu against
 * cpu) so the suite itself is exercised in CI.
 * Not for: the host, models or losses (their CUDA comparisons get their own files here).
 *
 * Every function returns the number of failed checks and prints one line per failure through
 * dc_fail (defined by the includer). Shape legend: N rows of logits, V vocabulary.
 */
#ifndef CT_DEVICE_COMPARE_H
#define CT_DEVICE_COMPARE_H

#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The includer prints a failure: test name, what was expected and got. */
static void dc_fail(const char *test, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef struct dc_pair {
    ct_device_ref ref; /* the cpu device: the expected values */
    ct_device_ref dut; /* the device under test */
} dc_pair;

/* ---- helpers: host buffers, upload/download through a device's own copy() --------------- */

static uint64_t dc_rng = 0x9e3779b97f4a7c15ull;
static double dc_uniform(double lo, double hi) { /* xorshift64 */
    dc_rng ^= dc_rng << 13;
    dc_rng ^= dc_rng >> 7;
    dc_rng ^= dc_rng << 17;
    return lo + (hi - lo) * (double)(dc_rng >> 11) / 9007199254740992.0;
}

/* A device copy of `bytes` of host memory; NULL (and a failure) on error. */
static void *dc_upload(const char *test, ct_device_ref d, const void *host, uint64_t bytes) {
    ct_error err = {.struct_size = sizeof err};
    void *p = d.vt->alloc(d.self, bytes, &err);
    if (!p) {
        dc_fail(test, "alloc %llu bytes: %s", (unsigned long long)bytes, err.message);
        return NULL;
    }
    if (host && d.vt->copy(d.self, p, host, bytes, CT_COPY_H2D, &err) != CT_OK) {
        dc_fail(test, "copy to device: %s", err.message);
        d.vt->free_mem(d.self, p);
        return NULL;
    }
    return p;
}

/* Host copy of a device buffer (malloc'd; caller frees); NULL (and a failure) on error. */
static void *dc_download(const char *test, ct_device_ref d, const void *dev, uint64_t bytes) {
    ct_error err = {.struct_size = sizeof err};
    void *h = malloc(bytes ? bytes : 1);
    if (!h) return NULL;
    if (d.vt->copy(d.self, h, dev, bytes, CT_COPY_D2H, &err) != CT_OK) {
        dc_fail(test, "copy to host: %s", err.message);
        free(h);
        return NULL;
    }
    return h;
}

/* Inputs that stress rounding: random magnitudes over many binades (f16's overflow, subnormals
 * and underflow among them), exact bf16 and f16 ties, NaN, +-Inf, +-0, subnormals, the largest
 * finite floats. n >= 128. */
static void dc_fill_hard_f32(float *x, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        x[i] = (float)(dc_uniform(-1, 1) * pow(2.0, floor(dc_uniform(-30, 30))));
    const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f,
                             3.3895314e38f, -3.3895314e38f, 1.00390625f /* tie, to even */,
                             1.01171875f /* tie, up */, -1.00390625f, 65504.0f, 1e-45f,
                             1.00048828125f /* f16 tie, to even */,
                             1.00146484375f /* f16 tie, up */, 65520.0f /* f16 tie, to Inf */,
                             2.98023223876953125e-8f /* 2^-25: f16 tie, to 0 */,
                             8.94069671630859375e-8f /* 1.5 * 2^-24: f16 subnormal tie */};
    for (size_t k = 0; k < sizeof special / sizeof *special; k++) x[k * 7 % n] = special[k];
}

/* Count of elements whose bits differ, and the first differing index (or -1). */
static uint64_t dc_bits_differ(const void *a, const void *b, uint64_t n, size_t es,
                               int64_t *first) {
    uint64_t bad = 0;
    *first = -1;
    for (uint64_t i = 0; i < n; i++)
        if (memcmp((const char *)a + i * es, (const char *)b + i * es, es) != 0) {
            if (*first < 0) *first = (int64_t)i;
            bad++;
        }
    return bad;
}

/* ---- casts ---------------------------------------------------------------------------- */

/* cast f32 -> h -> f32 on both devices, h = bf16 or f16: bit-identical (round to nearest
 * even), and equal to ct_bf16_from_f32 / ct_f16_from_f32. */
static int dc_cast_bits_identical(const dc_pair *p, uint64_t n, int32_t h) {
    const int f16 = h == CT_DTYPE_F16;
    const char *t = f16 ? "cast_f32_f16_f32_bits_identical" : "cast_f32_bf16_f32_bits_identical";
    int fails = 0;
    float *x = (float *)malloc(n * 4);
    dc_fill_hard_f32(x, n);
    uint16_t *hb[2] = {NULL, NULL};
    float *back[2] = {NULL, NULL};
    const ct_device_ref devs[2] = {p->ref, p->dut};
    for (int k = 0; k < 2; k++) {
        ct_device_ref d = devs[k];
        ct_error err = {.struct_size = sizeof err};
        float *dx = (float *)dc_upload(t, d, x, n * 4);
        uint16_t *dh = (uint16_t *)dc_upload(t, d, NULL, n * 2);
        float *dy = (float *)dc_upload(t, d, NULL, n * 4);
        if (!dx || !dh || !dy) { fails++; goto next; }
        if (d.vt->cast(d.self, dh, h, dx, CT_DTYPE_F32, n, &err) != CT_OK ||
            d.vt->cast(d.self, dy, CT_DTYPE_F32, dh, h, n, &err) != CT_OK) {
            dc_fail(t, "cast failed: %s", err.message);
            fails++;
            goto next;
        }
        hb[k] = (uint16_t *)dc_download(t, d, dh, n * 2);
        back[k] = (float *)dc_download(t, d, dy, n * 4);
    next:
        d.vt->free_mem(d.self, dx);
        d.vt->free_mem(d.self, dh);
        d.vt->free_mem(d.self, dy);
    }
    if (hb[0] && hb[1] && back[0] && back[1]) {
        int64_t first;
        uint64_t bad = dc_bits_differ(hb[0], hb[1], n, 2, &first);
        if (bad) {
            dc_fail(t, "%llu of %llu %s results differ; first at %lld: x=%.9g cpu=0x%04x "
                    "dut=0x%04x", (unsigned long long)bad, (unsigned long long)n,
                    ct_dtype_name(h), (long long)first, x[first], hb[0][first], hb[1][first]);
            fails++;
        }
        bad = dc_bits_differ(back[0], back[1], n, 4, &first);
        if (bad) {
            dc_fail(t, "%llu %s -> f32 results differ (first at %lld)",
                    (unsigned long long)bad, ct_dtype_name(h), (long long)first);
            fails++;
        }
        /* and both agree with numerics.h computed here */
        uint64_t off = 0;
        for (uint64_t i = 0; i < n; i++)
            off += hb[0][i] != (f16 ? ct_f16_from_f32(x[i]) : ct_bf16_from_f32(x[i]));
        if (off) {
            dc_fail(t, "%llu results differ from %s", (unsigned long long)off,
                    f16 ? "ct_f16_from_f32" : "ct_bf16_from_f32");
            fails++;
        }
    } else if (!fails) {
        fails++;
    }
    for (int k = 0; k < 2; k++) free(hb[k]), free(back[k]);
    free(x);
    return fails;
}

/* cast_bf16_sr of the device under test equals the numerics.h formula element by element, and
 * the mean over 64 seeds of a value between two bf16 neighbours is within 4 sigma of it. */
static int dc_cast_sr_matches_formula(const dc_pair *p, uint64_t n) {
    const char *t = "cast_bf16_sr_matches_the_numerics_formula";
    ct_device_ref d = p->dut;
    if (!d.vt->cast_bf16_sr) {
        printf("note: %s: the device under test has no cast_bf16_sr; skipped\n", t);
        return 0;
    }
    int fails = 0;
    float *x = (float *)malloc(n * 4);
    dc_fill_hard_f32(x, n);
    for (uint64_t i = 0; i < 64 && i < n; i++) x[i] = 1.0f + 0.3f * 0x1p-7f; /* 30% of an ulp */
    float *dx = (float *)dc_upload(t, d, x, n * 4);
    uint16_t *dh = (uint16_t *)dc_upload(t, d, NULL, n * 2);
    uint16_t *h = NULL;
    double mean = 0.0;
    if (!dx || !dh) { fails++; goto out; }
    for (uint64_t seed = 1; seed <= 64 && !fails; seed++) {
        ct_error err = {.struct_size = sizeof err};
        if (d.vt->cast_bf16_sr(d.self, dh, dx, n, seed * 7919, &err) != CT_OK) {
            dc_fail(t, "cast_bf16_sr: %s", err.message);
            fails++;
            break;
        }
        free(h);
        h = (uint16_t *)dc_download(t, d, dh, n * 2);
        if (!h) { fails++; break; }
        uint64_t bad = 0;
        int64_t first = -1;
        for (uint64_t i = 0; i < n; i++) {
            uint16_t want = ct_bf16_from_f32_sr(x[i], (uint32_t)(ct_hash64(seed * 7919, i) & 0xffff));
            if (h[i] != want) {
                if (first < 0) first = (int64_t)i;
                bad++;
            }
        }
        if (bad) {
            dc_fail(t, "seed %llu: %llu of %llu differ (first at %lld)", (unsigned long long)seed,
                    (unsigned long long)bad, (unsigned long long)n, (long long)first);
            fails++;
        }
        for (int i = 0; i < 64; i++) mean += ct_bf16_to_f32(h[i]) / (64.0 * 64.0);
    }
    if (!fails) {
        /* each sample is 1 or 1+2^-7 with p = 0.3: sigma of the mean = 2^-7*sqrt(.21/4096) */
        double want = 1.0 + 0.3 * 0x1p-7, sigma = 0x1p-7 * sqrt(0.21 / 4096.0);
        if (fabs(mean - want) > 4 * sigma) {
            dc_fail(t, "mean of stochastic roundings %.9g, expected %.9g +- %.3g", mean, want,
                    4 * sigma);
            fails++;
        }
    }
out:
    free(h);
    d.vt->free_mem(d.self, dx);
    d.vt->free_mem(d.self, dh);
    free(x);
    return fails;
}

/* ---- scale and axpy ------------------------------------------------------------------- */

/* scale (f32, bf16, f16) and axpy (x f32, bf16, f16) on both devices: bit-identical results. */
static int dc_scale_axpy_bits_identical(const dc_pair *p, uint64_t n) {
    const char *t = "scale_and_axpy_bits_identical";
    int fails = 0;
    float *x = (float *)malloc(n * 4), *y = (float *)malloc(n * 4);
    uint16_t *xb = (uint16_t *)malloc(n * 2), *xh = (uint16_t *)malloc(n * 2);
    for (uint64_t i = 0; i < n; i++) {
        x[i] = (float)dc_uniform(-3, 3);
        y[i] = (float)dc_uniform(-3, 3);
        xb[i] = ct_bf16_from_f32((float)dc_uniform(-3, 3));
        /* f16 over its range: from subnormals (scale rounds them) to near 65504 */
        double e = floor(dc_uniform(-26, 16));
        xh[i] = ct_f16_from_f32((float)(dc_uniform(-1, 1) * pow(2.0, e)));
    }
    const float a = 0.7310586f;
    /* results[k] = {scaled f32 x, scaled bf16 xb, y + a*x, y + a*xb, scaled f16 xh, y + a*xh}
     * of device k */
    void *res[2][6] = {{NULL}};
    const ct_device_ref devs[2] = {p->ref, p->dut};
    for (int k = 0; k < 2; k++) {
        ct_device_ref d = devs[k];
        ct_error err = {.struct_size = sizeof err};
        float *dx = (float *)dc_upload(t, d, x, n * 4), *dy1 = (float *)dc_upload(t, d, y, n * 4);
        float *dy2 = (float *)dc_upload(t, d, y, n * 4);
        uint16_t *dxb = (uint16_t *)dc_upload(t, d, xb, n * 2);
        float *dxs = (float *)dc_upload(t, d, x, n * 4);
        uint16_t *dxbs = (uint16_t *)dc_upload(t, d, xb, n * 2);
        uint16_t *dxh = (uint16_t *)dc_upload(t, d, xh, n * 2);
        uint16_t *dxhs = (uint16_t *)dc_upload(t, d, xh, n * 2);
        float *dy3 = (float *)dc_upload(t, d, y, n * 4);
        if (!dx || !dy1 || !dy2 || !dxb || !dxs || !dxbs || !dxh || !dxhs || !dy3) {
            fails++;
            goto next;
        }
        if (d.vt->scale(d.self, dxs, CT_DTYPE_F32, n, a, &err) != CT_OK ||
            d.vt->scale(d.self, dxbs, CT_DTYPE_BF16, n, a, &err) != CT_OK ||
            d.vt->axpy(d.self, dy1, a, dx, CT_DTYPE_F32, n, &err) != CT_OK ||
            d.vt->axpy(d.self, dy2, a, dxb, CT_DTYPE_BF16, n, &err) != CT_OK ||
            d.vt->scale(d.self, dxhs, CT_DTYPE_F16, n, a, &err) != CT_OK ||
            d.vt->axpy(d.self, dy3, a, dxh, CT_DTYPE_F16, n, &err) != CT_OK) {
            dc_fail(t, "device call failed: %s", err.message);
            fails++;
            goto next;
        }
        res[k][0] = dc_download(t, d, dxs, n * 4);
        res[k][1] = dc_download(t, d, dxbs, n * 2);
        res[k][2] = dc_download(t, d, dy1, n * 4);
        res[k][3] = dc_download(t, d, dy2, n * 4);
        res[k][4] = dc_download(t, d, dxhs, n * 2);
        res[k][5] = dc_download(t, d, dy3, n * 4);
    next:
        d.vt->free_mem(d.self, dx), d.vt->free_mem(d.self, dy1), d.vt->free_mem(d.self, dy2);
        d.vt->free_mem(d.self, dxb), d.vt->free_mem(d.self, dxs), d.vt->free_mem(d.self, dxbs);
        d.vt->free_mem(d.self, dxh), d.vt->free_mem(d.self, dxhs), d.vt->free_mem(d.self, dy3);
    }
    const char *what[6] = {"scale f32", "scale bf16", "axpy f32", "axpy bf16", "scale f16",
                           "axpy f16"};
    const size_t es[6] = {4, 2, 4, 4, 2, 4};
    for (int j = 0; j < 6 && !fails; j++) {
        if (!res[0][j] || !res[1][j]) { fails++; break; }
        int64_t first;
        uint64_t bad = dc_bits_differ(res[0][j], res[1][j], n, es[j], &first);
        if (bad) {
            dc_fail(t, "%s: %llu of %llu differ (first at %lld)", what[j],
                    (unsigned long long)bad, (unsigned long long)n, (long long)first);
            fails++;
        }
    }
    /* the cpu result is the formula itself */
    if (!fails) {
        const float *y1 = (const float *)res[0][2];
        uint64_t off = 0;
        for (uint64_t i = 0; i < n; i++) off += y1[i] != y[i] + a * x[i];
        if (off) dc_fail(t, "cpu axpy differs from y + a*x in %llu places", (unsigned long long)off), fails++;
        const uint16_t *s16 = (const uint16_t *)res[0][4];
        off = 0;
        for (uint64_t i = 0; i < n; i++)
            off += s16[i] != ct_f16_from_f32(ct_f16_to_f32(xh[i]) * a);
        if (off)
            dc_fail(t, "cpu f16 scale differs from f16(x*a) in %llu places",
                    (unsigned long long)off), fails++;
    }
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 6; j++) free(res[k][j]);
    free(x), free(y), free(xb), free(xh);
    return fails;
}

/* ---- sumsq ---------------------------------------------------------------------------- */

/* sumsq of f32, bf16 and f16 data: both devices within 1e-12 relative of a double sum here. */
static int dc_sumsq_close(const dc_pair *p, uint64_t n) {
    const char *t = "sumsq_matches_double_within_1e-12";
    int fails = 0;
    float *x = (float *)malloc(n * 4);
    uint16_t *xb = (uint16_t *)malloc(n * 2), *xh = (uint16_t *)malloc(n * 2);
    double want_f = 0, want_b = 0, want_h = 0;
    for (uint64_t i = 0; i < n; i++) {
        x[i] = (float)dc_uniform(-2, 2);
        xb[i] = ct_bf16_from_f32(x[i]);
        xh[i] = ct_f16_from_f32(x[i]);
        want_f += (double)x[i] * x[i];
        double b = ct_bf16_to_f32(xb[i]), h = ct_f16_to_f32(xh[i]);
        want_b += b * b;
        want_h += h * h;
    }
    const ct_device_ref devs[2] = {p->ref, p->dut};
    for (int k = 0; k < 2; k++) {
        ct_device_ref d = devs[k];
        ct_error err = {.struct_size = sizeof err};
        void *dx = dc_upload(t, d, x, n * 4), *dxb = dc_upload(t, d, xb, n * 2);
        void *dxh = dc_upload(t, d, xh, n * 2);
        double got_f = -1, got_b = -1, got_h = -1;
        if (!dx || !dxb || !dxh ||
            d.vt->sumsq(d.self, dx, CT_DTYPE_F32, n, &got_f, &err) != CT_OK ||
            d.vt->sumsq(d.self, dxb, CT_DTYPE_BF16, n, &got_b, &err) != CT_OK ||
            d.vt->sumsq(d.self, dxh, CT_DTYPE_F16, n, &got_h, &err) != CT_OK) {
            dc_fail(t, "device %d: sumsq failed: %s", k, err.message);
            fails++;
        } else {
            if (!(fabs(got_f - want_f) <= 1e-12 * want_f))
                dc_fail(t, "device %d f32: expected %.17g, got %.17g", k, want_f, got_f), fails++;
            if (!(fabs(got_b - want_b) <= 1e-12 * want_b))
                dc_fail(t, "device %d bf16: expected %.17g, got %.17g", k, want_b, got_b), fails++;
            if (!(fabs(got_h - want_h) <= 1e-12 * want_h))
                dc_fail(t, "device %d f16: expected %.17g, got %.17g", k, want_h, got_h), fails++;
        }
        d.vt->free_mem(d.self, dx);
        d.vt->free_mem(d.self, dxb);
        d.vt->free_mem(d.self, dxh);
    }
    free(x), free(xb), free(xh);
    return fails;
}

/* ---- AdamW ---------------------------------------------------------------------------- */

/* Three AdamW steps (decay mask, grad_scale 0.5) on both devices: params, m and v agree to
 * 1e-6 relative (the claim), and the count of bit-identical params is reported. */
static int dc_adamw_close(const dc_pair *p, uint64_t n) {
    const char *t = "adamw_three_steps_agree";
    int fails = 0;
    float *w = (float *)malloc(n * 4), *g = (float *)malloc(n * 4);
    uint8_t *mask = (uint8_t *)malloc(n);
    for (uint64_t i = 0; i < n; i++) {
        w[i] = (float)dc_uniform(-0.1, 0.1);
        mask[i] = (uint8_t)(i % 3 != 0);
    }
    float *out[2][3] = {{NULL}};
    const ct_device_ref devs[2] = {p->ref, p->dut};
    for (int k = 0; k < 2; k++) {
        ct_device_ref d = devs[k];
        ct_error err = {.struct_size = sizeof err};
        float *dw = (float *)dc_upload(t, d, w, n * 4), *dg = (float *)dc_upload(t, d, NULL, n * 4);
        float *dm = (float *)dc_upload(t, d, NULL, n * 4), *dv = (float *)dc_upload(t, d, NULL, n * 4);
        uint8_t *dmask = (uint8_t *)dc_upload(t, d, mask, n);
        if (!dw || !dg || !dm || !dv || !dmask) { fails++; goto next; }
        for (int64_t step = 1; step <= 3; step++) {
            uint64_t saved = dc_rng;
            dc_rng = 0x1234567ull * (uint64_t)step; /* the same gradients on both devices */
            for (uint64_t i = 0; i < n; i++) g[i] = (float)dc_uniform(-1, 1) * (i % 7 ? 1.0f : 1e-6f);
            dc_rng = saved;
            ct_adamw_args a = {.struct_size = sizeof a, .lr = 6e-4f, .beta1 = 0.9f,
                               .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                               .step = step, .grad_scale = 0.5f};
            if (d.vt->copy(d.self, dg, g, n * 4, CT_COPY_H2D, &err) != CT_OK ||
                d.vt->adamw(d.self, dw, dg, dm, dv, dmask, n, &a, &err) != CT_OK) {
                dc_fail(t, "device %d step %lld: %s", k, (long long)step, err.message);
                fails++;
                goto next;
            }
        }
        out[k][0] = (float *)dc_download(t, d, dw, n * 4);
        out[k][1] = (float *)dc_download(t, d, dm, n * 4);
        out[k][2] = (float *)dc_download(t, d, dv, n * 4);
    next:
        d.vt->free_mem(d.self, dw), d.vt->free_mem(d.self, dg), d.vt->free_mem(d.self, dm);
        d.vt->free_mem(d.self, dv), d.vt->free_mem(d.self, dmask);
    }
    const char *what[3] = {"param", "m", "v"};
    for (int j = 0; j < 3 && !fails; j++) {
        if (!out[0][j] || !out[1][j]) { fails++; break; }
        uint64_t bad = 0, same = 0;
        double worst = 0;
        for (uint64_t i = 0; i < n; i++) {
            double e = out[0][j][i], gg = out[1][j][i];
            double rel = fabs(gg - e) / (fabs(e) > 1e-30 ? fabs(e) : 1e-30);
            if (!(rel <= 1e-6)) bad++;
            if (rel > worst) worst = rel;
            same += memcmp(&out[0][j][i], &out[1][j][i], 4) == 0;
        }
        printf("note: %s: %s bit-identical in %llu of %llu elements (worst rel diff %.3g)\n", t,
               what[j], (unsigned long long)same, (unsigned long long)n, worst);
        if (bad) {
            dc_fail(t, "%s: %llu of %llu beyond 1e-6 relative (worst %.3g)", what[j],
                    (unsigned long long)bad, (unsigned long long)n, worst);
            fails++;
        }
    }
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 3; j++) free(out[k][j]);
    free(w), free(g), free(mask);
    return fails;
}

/* ---- row statistics ------------------------------------------------------------------- */

/* row_stats of (N, V) logits on both devices: row_max identical, row_lse within 1e-6
 * relative, the accumulated ct_logit_stats within 1e-9 relative (max_abs identical). Rows
 * include a constant row and one with a large spread. */
static int dc_row_stats_close(const dc_pair *p, int64_t N, int64_t V) {
    const char *t = "row_stats_agree";
    int fails = 0;
    uint64_t nz = (uint64_t)N * (uint64_t)V;
    float *z = (float *)malloc(nz * 4);
    for (uint64_t i = 0; i < nz; i++) z[i] = (float)dc_uniform(-8, 8);
    for (int64_t j = 0; j < V; j++) z[j] = 1.5f;                               /* row 0 */
    if (N > 1) for (int64_t j = 0; j < V; j++) z[V + j] = (float)(j % 97) * 3.0f - 100.0f;
    float *mx[2] = {NULL, NULL}, *lse[2] = {NULL, NULL};
    ct_logit_stats st[2];
    const ct_device_ref devs[2] = {p->ref, p->dut};
    for (int k = 0; k < 2; k++) {
        ct_device_ref d = devs[k];
        ct_error err = {.struct_size = sizeof err};
        memset(&st[k], 0, sizeof st[k]);
        st[k].struct_size = sizeof st[k];
        st[k].max_row_norm = 1.0; /* accumulation: a max already above some rows stays */
        float *dz = (float *)dc_upload(t, d, z, nz * 4);
        float *dmx = (float *)dc_upload(t, d, NULL, (uint64_t)N * 4);
        float *dlse = (float *)dc_upload(t, d, NULL, (uint64_t)N * 4);
        if (!dz || !dmx || !dlse) { fails++; goto next; }
        if (d.vt->row_stats(d.self, dz, N, V, dmx, dlse, &st[k], &err) != CT_OK) {
            dc_fail(t, "device %d: row_stats: %s", k, err.message);
            fails++;
            goto next;
        }
        mx[k] = (float *)dc_download(t, d, dmx, (uint64_t)N * 4);
        lse[k] = (float *)dc_download(t, d, dlse, (uint64_t)N * 4);
    next:
        d.vt->free_mem(d.self, dz), d.vt->free_mem(d.self, dmx), d.vt->free_mem(d.self, dlse);
    }
    if (!fails && mx[0] && mx[1] && lse[0] && lse[1]) {
        int64_t first;
        uint64_t bad = dc_bits_differ(mx[0], mx[1], (uint64_t)N, 4, &first);
        if (bad) dc_fail(t, "row_max: %llu rows differ (first %lld)", (unsigned long long)bad,
                         (long long)first), fails++;
        for (int64_t i = 0; i < N; i++)
            if (!(fabs(lse[1][i] - lse[0][i]) <= 1e-6 * fabs(lse[0][i]) + 1e-6)) {
                dc_fail(t, "row_lse[%lld]: cpu %.9g, dut %.9g", (long long)i, lse[0][i], lse[1][i]);
                fails++;
                break;
            }
        /* row 0 is constant: lse = 1.5 + log(V) */
        double want0 = 1.5 + log((double)V);
        if (!(fabs(lse[1][0] - want0) <= 1e-6 * want0))
            dc_fail(t, "constant row: lse %.9g, expected %.9g", lse[1][0], want0), fails++;
        const double a[5] = {st[0].sum_logit, st[0].sum_row_norm, st[0].max_row_norm,
                             st[0].sum_lse, st[0].max_abs};
        const double b[5] = {st[1].sum_logit, st[1].sum_row_norm, st[1].max_row_norm,
                             st[1].sum_lse, st[1].max_abs};
        const char *names[5] = {"sum_logit", "sum_row_norm", "max_row_norm", "sum_lse", "max_abs"};
        const double tol[5] = {1e-9, 1e-9, 1e-12, 1e-7, 0};
        for (int f = 0; f < 5; f++)
            if (!(fabs(a[f] - b[f]) <= tol[f] * fabs(a[f]) + (f == 0 ? 1e-6 : 0))) {
                dc_fail(t, "stats.%s: cpu %.17g, dut %.17g", names[f], a[f], b[f]);
                fails++;
            }
        if (st[0].rows != N || st[1].rows != N)
            dc_fail(t, "stats.rows: cpu %lld, dut %lld, expected %lld", (long long)st[0].rows,
                    (long long)st[1].rows, (long long)N), fails++;
    } else if (!fails) {
        fails++;
    }
    for (int k = 0; k < 2; k++) free(mx[k]), free(lse[k]);
    free(z);
    return fails;
}

/* ---- memory --------------------------------------------------------------------------- */

/* alloc is zero-filled; zero() zeroes; D2D copy moves the bytes. */
static int dc_memory_basics(const dc_pair *p) {
    const char *t = "alloc_zeroed_zero_and_copy";
    ct_device_ref d = p->dut;
    int fails = 0;
    const uint64_t n = 1000003;
    unsigned char *host = (unsigned char *)malloc(n);
    for (uint64_t i = 0; i < n; i++) host[i] = (unsigned char)(i * 31 + 7);
    void *a = dc_upload(t, d, NULL, n), *b = dc_upload(t, d, host, n);
    unsigned char *back = NULL;
    ct_error err = {.struct_size = sizeof err};
    if (!a || !b) { fails++; goto out; }
    back = (unsigned char *)dc_download(t, d, a, n);
    if (!back) { fails++; goto out; }
    for (uint64_t i = 0; i < n; i++)
        if (back[i]) { dc_fail(t, "alloc: byte %llu is %d", (unsigned long long)i, back[i]); fails++; break; }
    free(back);
    if (d.vt->copy(d.self, a, b, n, CT_COPY_D2D, &err) != CT_OK) { dc_fail(t, "%s", err.message); fails++; goto out; }
    back = (unsigned char *)dc_download(t, d, a, n);
    if (!back || memcmp(back, host, n)) dc_fail(t, "D2D copy: bytes differ"), fails++;
    free(back);
    if (d.vt->zero(d.self, b, n, &err) != CT_OK) { dc_fail(t, "%s", err.message); fails++; goto out; }
    back = (unsigned char *)dc_download(t, d, b, n);
    for (uint64_t i = 0; back && i < n; i++)
        if (back[i]) { dc_fail(t, "zero: byte %llu is %d", (unsigned long long)i, back[i]); fails++; break; }
    free(back);
out:
    d.vt->free_mem(d.self, a);
    d.vt->free_mem(d.self, b);
    free(host);
    return fails;
}

/* ---- the suite ------------------------------------------------------------------------- */

typedef struct dc_result { int passed, failed; } dc_result;

static void dc_count(dc_result *r, const char *name, int fails) {
    if (fails) r->failed++;
    else r->passed++;
    printf("%s %s\n", fails ? "FAIL" : "ok", name);
}

/* Every comparison above; `big` selects GPT-2-sized shapes (V = 50257, a few million
 * elements), else small ones (fast on the cpu). */
static dc_result dc_run_all(const dc_pair *p, int big) {
    dc_result r = {0, 0};
    uint64_t n = big ? 4000037 : 100003;
    dc_count(&r, "memory_basics", dc_memory_basics(p));
    dc_count(&r, "cast_bits_identical", dc_cast_bits_identical(p, n, CT_DTYPE_BF16));
    dc_count(&r, "cast_f16_bits_identical", dc_cast_bits_identical(p, n, CT_DTYPE_F16));
    dc_count(&r, "cast_sr_matches_formula", dc_cast_sr_matches_formula(p, big ? n : 4099));
    dc_count(&r, "scale_axpy_bits_identical", dc_scale_axpy_bits_identical(p, n));
    dc_count(&r, "sumsq_close", dc_sumsq_close(p, n));
    dc_count(&r, "adamw_close", dc_adamw_close(p, n));
    dc_count(&r, "row_stats_small", dc_row_stats_close(p, 3, 7));
    dc_count(&r, "row_stats_vocab", dc_row_stats_close(p, big ? 64 : 4, big ? 50257 : 4099));
    return r;
}

#endif /* CT_DEVICE_COMPARE_H */
