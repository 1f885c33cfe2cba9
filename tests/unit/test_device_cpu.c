/* test_device_cpu.c — claims about the `cpu` device plugin (build/plugins/device_cpu.so):
 * memory, casts, element-wise kernels, sumsq, AdamW against a double-precision reference of
 * PyTorch's formula, row statistics against double, and results that do not depend on the
 * number of threads. Not for: the numerics.h functions themselves (test_numerics.c).
 */
#include "ct_test.h"
#include "harness.h"

#include <ctrain/numerics.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A harness with the default device (threads = 2) and, as [device1], a one-thread one. */
static const char *DEVICE_INI = "[device]\nthreads = 2\n[device1]\nthreads = 1\n";

typedef struct {
    ct_harness   *h;
    ct_device_ref d;  /* threads = 2 */
    ct_device_ref d1; /* threads = 1 */
} fixture;

static int fixture_open(fixture *f) {
    memset(f, 0, sizeof *f);
    f->h = harness_new(DEVICE_INI);
    if (!f->h) return 0;
    f->d = harness_device(f->h);
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    if (harness_create(f->h, "device_cpu.so", "device1", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create device1: %s", err.message);
        return 0;
    }
    f->d1 = (ct_device_ref){p.vt, p.self, CT_DEVICE_CPU};
    return f->d.vt != NULL;
}

static uint64_t rng = 88172645463325252ull;
static double uniform(double lo, double hi) { /* xorshift64 */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}

CT_TEST(device_cpu_alloc_is_64_byte_aligned_and_zeroed) {
    fixture f;
    if (!fixture_open(&f)) goto out;
    ct_error err = {.struct_size = sizeof err};
    uint64_t sizes[] = {1, 3, 64, 1000, 1 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        unsigned char *p = f.d.vt->alloc(f.d.self, sizes[k], &err);
        CT_CHECK(p != NULL);
        if (!p) continue;
        CT_CHECK_INT((uintptr_t)p % 64, 0);
        uint64_t nonzero = 0;
        for (uint64_t i = 0; i < sizes[k]; i++) nonzero += p[i] != 0;
        CT_CHECK_INT(nonzero, 0);
        memset(p, 0xab, sizes[k]);
        f.d.vt->free_mem(f.d.self, p);
    }
    f.d.vt->free_mem(f.d.self, NULL); /* no-op */
out:
    harness_free(f.h);
}

CT_TEST(device_cpu_copy_zero_and_the_dtype_pairs_of_cast) {
    fixture f;
    if (!fixture_open(&f)) goto out;
    ct_error err = {.struct_size = sizeof err};
    enum { n = 100003 }; /* long enough for the threaded path */
    float *a = f.d.vt->alloc(f.d.self, n * 4, &err), *b = f.d.vt->alloc(f.d.self, n * 4, &err);
    uint16_t *h = f.d.vt->alloc(f.d.self, n * 2, &err), *h2 = f.d.vt->alloc(f.d.self, n * 2, &err);
    for (int i = 0; i < n; i++) a[i] = (float)uniform(-1e4, 1e4);
    CT_CHECK_INT(f.d.vt->copy(f.d.self, b, a, n * 4, CT_COPY_D2D, &err), CT_OK);
    CT_CHECK(memcmp(a, b, n * 4) == 0);
    CT_CHECK_INT(f.d.vt->cast(f.d.self, h, CT_DTYPE_BF16, a, CT_DTYPE_F32, n, &err), CT_OK);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += h[i] != ct_bf16_from_f32(a[i]);
    CT_CHECK_INT(bad, 0);
    /* bf16 -> f32 is exact, and f32 -> bf16 of that gives the same bits back */
    CT_CHECK_INT(f.d.vt->cast(f.d.self, b, CT_DTYPE_F32, h, CT_DTYPE_BF16, n, &err), CT_OK);
    CT_CHECK_INT(f.d.vt->cast(f.d.self, h2, CT_DTYPE_BF16, b, CT_DTYPE_F32, n, &err), CT_OK);
    CT_CHECK(memcmp(h, h2, n * 2) == 0);
    bad = 0;
    for (int i = 0; i < n; i++) /* round trip f32 -> bf16 -> f32 within half a bf16 ulp */
        bad += fabs((double)b[i] - a[i]) > fabs((double)a[i]) * ldexp(1.0, -8) * (1 + 1e-9);
    CT_CHECK_INT(bad, 0);
    /* same dtype: a copy, also in place */
    CT_CHECK_INT(f.d.vt->cast(f.d.self, h2, CT_DTYPE_BF16, h, CT_DTYPE_BF16, n, &err), CT_OK);
    CT_CHECK_INT(f.d.vt->cast(f.d.self, b, CT_DTYPE_F32, a, CT_DTYPE_F32, n, &err), CT_OK);
    CT_CHECK(memcmp(a, b, n * 4) == 0);
    CT_CHECK_INT(f.d.vt->cast(f.d.self, a, CT_DTYPE_F32, a, CT_DTYPE_F32, n, &err), CT_OK);
    /* a pair without a conversion, and overlapping buffers of different sizes, are errors */
    err.code = 0;
    CT_CHECK_INT(f.d.vt->cast(f.d.self, b, CT_DTYPE_F32, a, CT_DTYPE_I32, 4, &err),
                 CT_ERR_UNSUPPORTED);
    CT_CHECK_STR_CONTAINS(err.message, "i32 -> f32");
    CT_CHECK_INT(f.d.vt->cast(f.d.self, a, CT_DTYPE_BF16, a, CT_DTYPE_F32, 16, &err),
                 CT_ERR_INVALID);
    CT_CHECK_INT(f.d.vt->zero(f.d.self, a, n * 4, &err), CT_OK);
    bad = 0;
    for (int i = 0; i < n; i++) bad += a[i] != 0.0f;
    CT_CHECK_INT(bad, 0);
    f.d.vt->free_mem(f.d.self, a);
    f.d.vt->free_mem(f.d.self, b);
    f.d.vt->free_mem(f.d.self, h);
    f.d.vt->free_mem(f.d.self, h2);
out:
    harness_free(f.h);
}

CT_TEST(device_cpu_zero_of_a_large_buffer_clears_exactly_its_bytes) {
    fixture f;
    if (!fixture_open(&f)) goto out;
    ct_error err = {.struct_size = sizeof err};
    /* over the threaded size, not a whole number of pages, from an address that is not a
     * page's: every byte of [1, 1 + n) cleared by two threads or one, the guards left alone */
    const size_t n = (3u << 20) + 4095;
    unsigned char *buf = malloc(n + 2);
    if (!buf) goto out;
    for (int k = 0; k < 2; k++) {
        memset(buf, 0xab, n + 2);
        const ct_device_ref *d = k ? &f.d1 : &f.d;
        CT_CHECK_INT(d->vt->zero(d->self, buf + 1, n, &err), CT_OK);
        size_t nonzero = 0;
        for (size_t i = 1; i <= n; i++) nonzero += buf[i] != 0;
        CT_CHECK_MSG(nonzero == 0 && buf[0] == 0xab && buf[n + 1] == 0xab,
                     "threads %d: %zu bytes not cleared, guards %#x %#x", k ? 1 : 2, nonzero,
                     buf[0], buf[n + 1]);
    }
    free(buf);
out:
    harness_free(f.h);
}

CT_TEST(device_cpu_scale_and_axpy_match_the_elementwise_formula) {
    fixture f;
    if (!fixture_open(&f)) goto out;
    ct_error err = {.struct_size = sizeof err};
    enum { n = 70001 };
    float *x = malloc(n * 4), *y = malloc(n * 4), *y0 = malloc(n * 4);
    uint16_t *xb = malloc(n * 2);
    for (int i = 0; i < n; i++) {
        x[i] = (float)uniform(-3, 3);
        y0[i] = y[i] = (float)uniform(-3, 3);
        xb[i] = ct_bf16_from_f32((float)uniform(-3, 3));
    }
    int bad = 0;
    CT_CHECK_INT(f.d.vt->axpy(f.d.self, y, 0.75f, x, CT_DTYPE_F32, n, &err), CT_OK);
    for (int i = 0; i < n; i++) bad += fabs(y[i] - (y0[i] + 0.75 * x[i])) > 1e-6 * 4;
    memcpy(y, y0, n * 4);
    CT_CHECK_INT(f.d.vt->axpy(f.d.self, y, -2.0f, xb, CT_DTYPE_BF16, n, &err), CT_OK);
    for (int i = 0; i < n; i++)
        bad += fabs(y[i] - (y0[i] - 2.0 * ct_bf16_to_f32(xb[i]))) > 1e-6 * 10;
    memcpy(y, y0, n * 4);
    CT_CHECK_INT(f.d.vt->scale(f.d.self, y, CT_DTYPE_F32, n, 0.1f, &err), CT_OK);
    for (int i = 0; i < n; i++) bad += y[i] != y0[i] * 0.1f;
    uint16_t *xb0 = malloc(n * 2);
    memcpy(xb0, xb, n * 2);
    CT_CHECK_INT(f.d.vt->scale(f.d.self, xb, CT_DTYPE_BF16, n, 3.0f, &err), CT_OK);
    for (int i = 0; i < n; i++) { /* product rounded once to bf16: reference in double */
        double want = 3.0 * ct_bf16_to_f32(xb0[i]);
        bad += fabs(ct_bf16_to_f32(xb[i]) - want) > fabs(want) * ldexp(1.0, -8) * (1 + 1e-9);
    }
    CT_CHECK_INT(bad, 0);
    CT_CHECK_INT(f.d.vt->scale(f.d.self, xb, CT_DTYPE_I32, 4, 3.0f, &err), CT_ERR_UNSUPPORTED);
    free(x), free(y), free(y0), free(xb), free(xb0);
out:
    harness_free(f.h);
}

CT_TEST(device_cpu_sumsq_matches_double_and_is_the_same_for_1_and_2_threads) {
    fixture f;
    if (!fixture_open(&f)) goto out;
    ct_error err = {.struct_size = sizeof err};
    enum { n = 300007 };
    float *x = malloc(n * 4);
    uint16_t *xb = malloc(n * 2);
    long double want = 0, want_b = 0;
    for (int i = 0; i < n; i++) {
        x[i] = (float)uniform(-2, 2);
        xb[i] = ct_bf16_from_f32(x[i]);
        want += (long double)x[i] * x[i];
        want_b += (long double)ct_bf16_to_f32(xb[i]) * ct_bf16_to_f32(xb[i]);
    }
    double s2 = -1, s1 = -2, sb = -1, small = -1;
    CT_CHECK_INT(f.d.vt->sumsq(f.d.self, x, CT_DTYPE_F32, n, &s2, &err), CT_OK);
    CT_CHECK_INT(f.d1.vt->sumsq(f.d1.self, x, CT_DTYPE_F32, n, &s1, &err), CT_OK);
    CT_CHECK_INT(f.d.vt->sumsq(f.d.self, xb, CT_DTYPE_BF16, n, &sb, &err), CT_OK);
    CT_CHECK_CLOSE(s2, (double)want, 1e-12, 0);
    CT_CHECK_CLOSE(sb, (double)want_b, 1e-12, 0);
    CT_CHECK_MSG(s1 == s2, "sumsq differs between 1 and 2 threads: %.17g vs %.17g", s1, s2);
    CT_CHECK_INT(f.d.vt->sumsq(f.d.self, x, CT_DTYPE_F32, 3, &small, &err), CT_OK);
    CT_CHECK_CLOSE(small, (double)x[0] * x[0] + (double)x[1] * x[1] + (double)x[2] * x[2],
                   1e-15, 0);
    free(x), free(xb);
out:
    harness_free(f.h);
}

/* The device's AdamW loop is vectorized (AVX-512/AVX2 clones where the CPU has them); it must
 * still give exactly the bits of ct_adamw_update applied one element at a time (what the CUDA
 * device computes), with and without a decay mask, at a length that is not a multiple of any
 * vector width and crosses the threaded-path threshold. */
CT_TEST(device_cpu_adamw_gives_the_bits_of_ct_adamw_update_element_by_element) {
    fixture f;
    if (!fixture_open(&f)) goto out;
    ct_error err = {.struct_size = sizeof err};
    enum { n = 40013 };
    float *p = calloc(n, 4), *g = calloc(n, 4), *m = calloc(n, 4), *v = calloc(n, 4);
    float *pe = calloc(n, 4), *me = calloc(n, 4), *ve = calloc(n, 4);
    uint8_t *mask = calloc(n, 1);
    for (int i = 0; i < n; i++) {
        pe[i] = p[i] = (float)uniform(-1, 1);
        me[i] = m[i] = (float)uniform(-0.1, 0.1);
        ve[i] = v[i] = (float)uniform(0, 0.01);
        g[i] = (float)uniform(-1, 1) * (i % 5 == 0 ? 1e-5f : 1.0f);
        mask[i] = (uint8_t)(i % 3 != 0);
    }
    ct_adamw_args a = {.struct_size = sizeof a, .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                       .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.25f};
    for (int64_t t = 1; t <= 2; t++) {
        a.step = t;
        const uint8_t *mk = t == 1 ? mask : NULL;
        CT_CHECK_INT(f.d.vt->adamw(f.d.self, p, g, m, v, mk, n, &a, &err), CT_OK);
        float bc1 = (float)(1.0 - pow((double)a.beta1, (double)t));
        float bc2 = (float)(1.0 - pow((double)a.beta2, (double)t));
        for (int i = 0; i < n; i++)
            ct_adamw_update(&pe[i], g[i] * a.grad_scale, &me[i], &ve[i], a.lr, a.beta1, a.beta2,
                            a.eps, mk && !mk[i] ? 0.0f : a.weight_decay, bc1, bc2);
        int differ = 0, first = -1;
        for (int i = 0; i < n; i++)
            if (memcmp(&p[i], &pe[i], 4) || memcmp(&m[i], &me[i], 4) || memcmp(&v[i], &ve[i], 4))
                differ++, first = first < 0 ? i : first;
        CT_CHECK_MSG(differ == 0, "step %d: %d of %d elements differ from ct_adamw_update, first "
                     "at %d (p %a expected %a)", (int)t, differ, n, first,
                     first >= 0 ? p[first] : 0.0f, first >= 0 ? pe[first] : 0.0f);
    }
    free(p), free(g), free(m), free(v), free(pe), free(me), free(ve), free(mask);
out:
    harness_free(f.h);
}

/* PyTorch's AdamW (torch.optim.AdamW, foreach=False) in double:
 *   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps) */
static void adamw_reference(double *p, double g, double *m, double *v, double lr, double b1,
                            double b2, double eps, double wd, int64_t t) {
    *p *= 1.0 - lr * wd;
    *m = b1 * *m + (1 - b1) * g;
    *v = b2 * *v + (1 - b2) * g * g;
    double bc1 = 1 - pow(b1, (double)t), bc2 = 1 - pow(b2, (double)t);
    *p -= lr / bc1 * *m / (sqrt(*v) / sqrt(bc2) + eps);
}

CT_TEST(device_cpu_adamw_matches_pytorch_formula_in_double_over_3_steps) {
    fixture f;
    if (!fixture_open(&f)) goto out;
    ct_error err = {.struct_size = sizeof err};
    enum { n = 40000 }; /* threaded path */
    float *p = calloc(n, 4), *g = calloc(n, 4), *m = calloc(n, 4), *v = calloc(n, 4);
    double *pr = calloc(n, 8), *mr = calloc(n, 8), *vr = calloc(n, 8);
    uint8_t *mask = calloc(n, 1);
    for (int i = 0; i < n; i++) {
        p[i] = (float)uniform(-1, 1);
        pr[i] = p[i];
        mask[i] = (uint8_t)(i % 3 != 0);
    }
    ct_adamw_args a = {.struct_size = sizeof a, .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f,
                       .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.5f};
    for (int64_t t = 1; t <= 3; t++) {
        a.step = t;
        for (int i = 0; i < n; i++) g[i] = (float)uniform(-1, 1) * (i % 7 == 0 ? 1e-6f : 1.0f);
        CT_CHECK_INT(f.d.vt->adamw(f.d.self, p, g, m, v, mask, n, &a, &err), CT_OK);
        for (int i = 0; i < n; i++)
            adamw_reference(&pr[i], (double)g[i] * 0.5, &mr[i], &vr[i], (double)a.lr,
                            (double)a.beta1, (double)a.beta2, (double)a.eps,
                            mask[i] ? (double)a.weight_decay : 0.0, t);
    }
    double worst = 0;
    int worst_i = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs(p[i] - pr[i]);
        if (e > worst) worst = e, worst_i = i;
    }
    /* float arithmetic of updates of size ~lr: a few f32 ulps of p (measured 1.4e-7) */
    CT_CHECK_MSG(worst < 5e-7, "worst |p - p_ref| = %.3g at %d (p %.9g, ref %.9g)", worst,
                 worst_i, p[worst_i], pr[worst_i]);
    for (int i = 0; i < n; i += 997) {
        CT_CHECK_CLOSE(m[i], mr[i], 1e-5, 1e-8); /* terms ~0.05: f32 rounding ~3e-9 */
        CT_CHECK_CLOSE(v[i], vr[i], 1e-5, 1e-10);
    }
    /* decay_mask NULL decays everything: one step of a zero gradient is pure decay */
    float q[2] = {1.0f, -2.0f}, z[2] = {0, 0}, mm[2] = {0, 0}, vv[2] = {0, 0};
    a.step = 1;
    CT_CHECK_INT(f.d.vt->adamw(f.d.self, q, z, mm, vv, NULL, 2, &a, &err), CT_OK);
    CT_CHECK_CLOSE(q[0], 1.0 * (1 - 1e-2 * 0.1), 1e-6, 0);
    CT_CHECK_CLOSE(q[1], -2.0 * (1 - 1e-2 * 0.1), 1e-6, 0);
    a.step = 0;
    CT_CHECK_INT(f.d.vt->adamw(f.d.self, q, z, mm, vv, NULL, 2, &a, &err), CT_ERR_INVALID);
    free(p), free(g), free(m), free(v), free(pr), free(mr), free(vr), free(mask);
out:
    harness_free(f.h);
}

CT_TEST(device_cpu_row_stats_match_double_and_accumulate_logit_stats) {
    fixture f;
    if (!fixture_open(&f)) goto out;
    ct_error err = {.struct_size = sizeof err};
    enum { N = 300, V = 257 }; /* N*V > the threading threshold */
    float *z = malloc(sizeof(float) * N * V), *mx = malloc(N * 4), *lse = malloc(N * 4);
    float *mx1 = malloc(N * 4), *lse1 = malloc(N * 4);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < V; j++) /* rows with very different scales and offsets */
            z[i * V + j] = (float)(uniform(-1, 1) * (1 + i % 30) + (i % 5) * 20.0 - 40.0);
    ct_logit_stats st = {.struct_size = sizeof st, .max_row_norm = 1e9}; /* max kept */
    ct_logit_stats st1 = {.struct_size = sizeof st1};
    CT_CHECK_INT(f.d.vt->row_stats(f.d.self, z, N, V, mx, lse, &st, &err), CT_OK);
    CT_CHECK_INT(f.d1.vt->row_stats(f.d1.self, z, N, V, mx1, lse1, &st1, &err), CT_OK);
    double sum = 0, sum_norm = 0, max_norm = 0, sum_lse = 0, max_abs = 0;
    for (int i = 0; i < N; i++) {
        double m = -INFINITY, s = 0, sq = 0;
        for (int j = 0; j < V; j++) m = fmax(m, z[i * V + j]);
        for (int j = 0; j < V; j++) {
            double v = z[i * V + j];
            s += exp(v - m);
            sq += v * v;
            sum += v;
            max_abs = fmax(max_abs, fabs(v));
        }
        double l = m + log(s);
        CT_CHECK_CLOSE(mx[i], m, 0, 0);
        CT_CHECK_CLOSE(lse[i], l, 2e-7, 1e-6);
        sum_norm += sqrt(sq);
        max_norm = fmax(max_norm, sqrt(sq));
        sum_lse += lse[i];
    }
    CT_CHECK_CLOSE(st.sum_logit, sum, 1e-12, 1e-9);
    CT_CHECK_CLOSE(st.sum_row_norm, sum_norm, 1e-12, 0);
    CT_CHECK_CLOSE(st.max_row_norm, 1e9, 0, 0); /* the running max was larger */
    CT_CHECK_CLOSE(st1.max_row_norm, max_norm, 1e-12, 0);
    CT_CHECK_CLOSE(st.sum_lse, sum_lse, 1e-12, 0);
    CT_CHECK_CLOSE(st.max_abs, max_abs, 0, 0);
    CT_CHECK_INT(st.rows, N);
    /* bitwise the same with one thread */
    CT_CHECK(memcmp(mx, mx1, N * 4) == 0 && memcmp(lse, lse1, N * 4) == 0);
    CT_CHECK(st1.sum_logit == st.sum_logit && st1.sum_row_norm == st.sum_row_norm &&
             st1.sum_lse == st.sum_lse);
    /* a second call adds */
    CT_CHECK_INT(f.d1.vt->row_stats(f.d1.self, z, N, V, mx1, lse1, &st1, &err), CT_OK);
    CT_CHECK_INT(st1.rows, 2 * N);
    CT_CHECK_CLOSE(st1.sum_lse, 2 * sum_lse, 1e-12, 0);
    /* lse of a row of large equal values is max + log V (no overflow) */
    for (int j = 0; j < V; j++) z[j] = 1000.0f;
    CT_CHECK_INT(f.d.vt->row_stats(f.d.self, z, 1, V, mx, lse, NULL, &err), CT_OK);
    CT_CHECK_CLOSE(lse[0], 1000.0 + log((double)V), 1e-7, 0);
    free(z), free(mx), free(lse), free(mx1), free(lse1);
out:
    harness_free(f.h);
}

CT_TEST(device_cpu_row_softmax_is_row_stats_bit_for_bit_plus_the_softmax) {
    fixture f;
    if (!fixture_open(&f)) goto out;
    ct_error err = {.struct_size = sizeof err};
    enum { N = 300, V = 257 }; /* N*V > the threading threshold */
    float *z = malloc(sizeof(float) * N * V), *p = malloc(sizeof(float) * N * V);
    float *mx = malloc(N * 4), *lse = malloc(N * 4), *mx1 = malloc(N * 4), *lse1 = malloc(N * 4);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < V; j++)
            z[i * V + j] = (float)(uniform(-1, 1) * (1 + i % 30) + (i % 5) * 20.0 - 40.0);
    z[7 * V + 3] = INFINITY; /* a row whose max is not finite: exp(z - lse), NaN where inf-inf */
    ct_logit_stats st = {.struct_size = sizeof st}, st1 = {.struct_size = sizeof st1};
    CT_CHECK(f.d.vt->row_softmax != NULL);
    if (!f.d.vt->row_softmax) goto out_free;
    CT_CHECK_INT(f.d.vt->row_softmax(f.d.self, z, N, V, mx, lse, p, &st, &err), CT_OK);
    CT_CHECK_INT(f.d1.vt->row_stats(f.d1.self, z, N, V, mx1, lse1, &st1, &err), CT_OK);
    CT_CHECK(memcmp(mx, mx1, N * 4) == 0 && memcmp(lse, lse1, N * 4) == 0);
    CT_CHECK(st.sum_logit == st1.sum_logit && st.sum_row_norm == st1.sum_row_norm &&
             st.max_row_norm == st1.max_row_norm && st.sum_lse == st1.sum_lse &&
             st.max_abs == st1.max_abs && st.rows == st1.rows);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        if (i == 7) continue;
        double m = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) m = fmax(m, z[i * V + j]);
        for (int j = 0; j < V; j++) s += exp((double)z[i * V + j] - m);
        /* in ulps of the exact softmax value, beyond what rounding z - max to f32 costs any
         * f32 softmax: half an ulp of d = z - max in exp's argument is a relative error of up
         * to |d| 2^-24, i.e. up to |d| ulps of the result */
        for (int j = 0; j < V; j++) {
            double want = exp((double)z[i * V + j] - m) / s;
            double ulp = fmax(ldexp(1.0, ilogb(want) - 23), 1e-45);
            double e = fabs(p[i * V + j] - want) / ulp - fabs((double)z[i * V + j] - m);
            worst = fmax(worst, e);
        }
    }
    CT_CHECK_MSG(worst <= 4, "softmax off by %.2f ulps beyond the argument's rounding "
                 "(tolerance 4)", worst);
    CT_CHECK(p[7 * V + 3] != p[7 * V + 3] || p[7 * V + 3] == expf(z[7 * V + 3] - lse[7]));
out_free:
    free(z), free(p), free(mx), free(lse), free(mx1), free(lse1);
out:
    harness_free(f.h);
}

/* The row's sums in the order device_cpu.c documents (element j to lane j % 16, lanes folded
 * pairwise for w = 8, 4, 2, 1, then the tail in order), written out in scalar code: the
 * plugin's vectorized clones must give exactly these bits on any machine. The exponential is
 * ct_exp with its argument taken as -100 below -100 (so -Inf gives ~1e-38, not NaN). */
static float ref_exp(float x, float mx) {
    float d = x - mx;
    return ct_exp(d < -100.0f ? -100.0f : d);
}

/* mx a number: sum exp(z - mx); mx NaN: sum z; squares: sum z^2 */
static double lanes_sum(const float *z, int V, float mx, int squares) {
    double acc[16] = {0};
    int j = 0;
    for (; j + 16 <= V; j += 16)
        for (int l = 0; l < 16; l++) {
            float x = z[j + l];
            acc[l] += squares ? (double)x * x : mx == mx ? (double)ref_exp(x, mx) : (double)x;
        }
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    for (; j < V; j++) {
        float x = z[j];
        acc[0] += squares ? (double)x * x : mx == mx ? (double)ref_exp(x, mx) : (double)x;
    }
    return acc[0];
}

CT_TEST(device_cpu_row_softmax_sums_in_its_documented_order_and_takes_minus_inf_as_zero) {
    fixture f;
    if (!fixture_open(&f)) goto out;
    ct_error err = {.struct_size = sizeof err};
    enum { N = 3, V = 1037 }; /* V % 16 = 13: a tail */
    float z[N * V], p[N * V], mx[N], lse[N];
    for (int i = 0; i < N * V; i++) z[i] = (float)uniform(-6, 6);
    z[2 * V + 500] = -INFINITY; /* a -Inf logit in a row whose max is finite */
    ct_logit_stats st = {.struct_size = sizeof st};
    CT_CHECK_INT(f.d.vt->row_softmax(f.d.self, z, N, V, mx, lse, p, &st, &err), CT_OK);
    double lse_sum = 0;
    for (int i = 0; i < N; i++) {
        const float *r = z + i * V;
        float m = r[0];
        for (int j = 1; j < V; j++) m = r[j] > m ? r[j] : m;
        double e = lanes_sum(r, V, m, 0);
        float want = (float)((double)m + log(e));
        CT_CHECK_MSG(mx[i] == m && memcmp(&lse[i], &want, 4) == 0,
                     "row %d: max %a lse %a, the documented order gives %a %a", i, mx[i],
                     lse[i], m, want);
        lse_sum += lse[i];
        for (int j = 0; j < V; j += 97) {
            float pe = (float)((double)ref_exp(r[j], m) * (1.0 / e));
            CT_CHECK_MSG(memcmp(&p[i * V + j], &pe, 4) == 0, "p[%d][%d] = %a, expected %a", i,
                         j, p[i * V + j], pe);
        }
    }
    CT_CHECK(st.sum_lse == lse_sum || fabs(st.sum_lse - lse_sum) <= 1e-12 * fabs(lse_sum));
    CT_CHECK(isinf(st.sum_logit) && st.sum_logit < 0); /* sum z of the -Inf row */
    /* exp(-Inf - max) is 0 to f32 precision (ct_exp alone would give NaN), lse stays finite */
    CT_CHECK_MSG(p[2 * V + 500] < 1e-37f && p[2 * V + 500] >= 0.0f, "p of the -Inf logit: %g",
                 p[2 * V + 500]);
    CT_CHECK(isfinite(lse[2]));
    st = (ct_logit_stats){.struct_size = sizeof st};
    CT_CHECK_INT(f.d.vt->row_softmax(f.d.self, z, 2, V, mx, lse, p, &st, &err), CT_OK);
    CT_CHECK_MSG(st.sum_logit == lanes_sum(z, V, NAN, 0) + lanes_sum(z + V, V, NAN, 0),
                 "sum of logits %.17g, the documented order gives %.17g", st.sum_logit,
                 lanes_sum(z, V, NAN, 0) + lanes_sum(z + V, V, NAN, 0));
    double norms = sqrt(lanes_sum(z, V, 0, 1)) + sqrt(lanes_sum(z + V, V, 0, 1));
    CT_CHECK_MSG(st.sum_row_norm == norms, "sum of row norms %.17g, expected %.17g",
                 st.sum_row_norm, norms);
out:
    harness_free(f.h);
}

CT_TEST(device_cpu_rejects_negative_threads_through_the_schema) {
    ct_harness *h = harness_new("[device]\nthreads = -1\n");
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    CT_CHECK(harness_create(h, "device_cpu.so", "device", &p, &err) != CT_OK);
    CT_CHECK_STR_CONTAINS(err.message, "threads");
    harness_free(h);
}

/* f16 (pure_f16 on the CPU): the casts give numerics.h's bits (ct_f16_from_f32, round to
 * nearest even; ct_f16_to_f32), over f32 values across f16's whole range and beyond it
 * (subnormals, overflow to inf, signed zeros, inf, NaN) and over every f16 bit pattern; scale,
 * axpy and sumsq of f16 follow the element formula of numerics.h's conversions. */
CT_TEST(device_cpu_f16_casts_equal_numerics_h_bit_for_bit) {
    fixture f;
    if (!fixture_open(&f)) goto out;
    ct_error err = {.struct_size = sizeof err};
    enum { n = 131072 + 16 }; /* every f16 pattern (65536) fits; long enough to thread */
    float *a = f.d.vt->alloc(f.d.self, n * 4, &err), *b = f.d.vt->alloc(f.d.self, n * 4, &err);
    uint16_t *h = f.d.vt->alloc(f.d.self, n * 2, &err);
    if (!a || !b || !h) { CT_CHECK(0); goto out; }
    for (int i = 0; i < n; i++) { /* magnitudes 2^-30 .. 2^20: below subnormal to overflow */
        double e = uniform(-30, 20), s = uniform(-1, 1) < 0 ? -1 : 1;
        a[i] = (float)(s * pow(2.0, e));
    }
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65520.0f,
                             65519.99f, 5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f, 6.1035156e-5f,
                             1.0f + 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-23f, -1.0f - 0x1p-11f, 1e-45f};
    for (int i = 0; i < 16; i++) a[i] = special[i];
    CT_CHECK_INT(f.d.vt->cast(f.d.self, h, CT_DTYPE_F16, a, CT_DTYPE_F32, n, &err), CT_OK);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += h[i] != ct_f16_from_f32(a[i]);
    CT_CHECK_MSG(bad == 0, "%d of %d f32 -> f16 casts differ from ct_f16_from_f32", bad, (int)n);
    CT_CHECK_INT(h[2], 0x7c00); /* inf */
    CT_CHECK_INT(h[6], 0x7c00); /* 65520 rounds to inf */
    CT_CHECK_INT(h[5], 0x7bff); /* 65504, the largest finite */
    CT_CHECK_INT(h[8], 0x0001); /* 2^-24, the smallest subnormal */
    CT_CHECK_INT(h[9], 0x0000); /* 2^-25: a tie, to even (zero): underflow */
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i; /* every f16 bit pattern */
    CT_CHECK_INT(f.d.vt->cast(f.d.self, b, CT_DTYPE_F32, h, CT_DTYPE_F16, 65536, &err), CT_OK);
    bad = 0;
    for (int i = 0; i < 65536; i++) {
        float want = ct_f16_to_f32((uint16_t)i);
        bad += memcmp(&b[i], &want, 4) != 0;
    }
    CT_CHECK_MSG(bad == 0, "%d f16 -> f32 casts differ from ct_f16_to_f32", bad);
    /* scale, axpy, sumsq of f16 (finite patterns, |x| <= 2) */
    for (int i = 0; i < n; i++) h[i] = ct_f16_from_f32((float)uniform(-2, 2));
    float *y = a;
    for (int i = 0; i < n; i++) y[i] = 1.0f;
    CT_CHECK_INT(f.d.vt->axpy(f.d.self, y, -2.0f, h, CT_DTYPE_F16, n, &err), CT_OK);
    bad = 0;
    for (int i = 0; i < n; i++) bad += y[i] != 1.0f + -2.0f * ct_f16_to_f32(h[i]);
    CT_CHECK_INT(bad, 0);
    double ss = 0, want_ss = 0;
    for (int i = 0; i < n; i++) want_ss += (double)ct_f16_to_f32(h[i]) * ct_f16_to_f32(h[i]);
    CT_CHECK_INT(f.d.vt->sumsq(f.d.self, h, CT_DTYPE_F16, n, &ss, &err), CT_OK);
    CT_CHECK_MSG(fabs(ss - want_ss) <= 1e-12 * want_ss, "sumsq %.17g, double %.17g", ss, want_ss);
    memcpy(b, h, n * 2); /* b holds the f16 bits before scaling */
    CT_CHECK_INT(f.d.vt->scale(f.d.self, h, CT_DTYPE_F16, n, 3.0f, &err), CT_OK);
    bad = 0;
    for (int i = 0; i < n; i++)
        bad += h[i] != ct_f16_from_f32(ct_f16_to_f32(((uint16_t *)b)[i]) * 3.0f);
    CT_CHECK_INT(bad, 0);
    f.d.vt->free_mem(f.d.self, a);
    f.d.vt->free_mem(f.d.self, b);
    f.d.vt->free_mem(f.d.self, h);
out:
    harness_free(f.h);
}
