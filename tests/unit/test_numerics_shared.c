/* test_numerics_shared.c — claims about the numerics.h helpers that the loss plugins and the gpt
 * model share between their CPU loops and CUDA kernels: the per-logit gradients of cross-entropy
 * and z-loss, and the norm steps (rstd, apply, dx), each against finite differences or an fp64
 * reference of the whole row. Not for: bf16, activations, AdamW (test_numerics.c).
 */
#include "ct_test.h"

#include <ctrain/numerics.h>

#include <math.h>

#define ROW 7

static double lse_d(const double *z, int n) {
    double m = z[0], s = 0;
    for (int j = 1; j < n; j++) m = fmax(m, z[j]);
    for (int j = 0; j < n; j++) s += exp(z[j] - m);
    return m + log(s);
}

static void row_values(double *z) {
    static const double v[ROW] = {0.3, -1.2, 2.5, 0.0, -0.7, 1.1, 3.0};
    for (int j = 0; j < ROW; j++) z[j] = v[j];
}

CT_TEST(ce_dlogit_is_the_derivative_of_lse_minus_the_target_logit) {
    double z[ROW];
    row_values(z);
    const int t = 2;
    float lse = (float)lse_d(z, ROW);
    for (int j = 0; j < ROW; j++) {
        double h = 1e-5, zp[ROW], zm[ROW];
        for (int k = 0; k < ROW; k++) zp[k] = zm[k] = z[k];
        zp[j] += h, zm[j] -= h;
        double fd = ((lse_d(zp, ROW) - zp[t]) - (lse_d(zm, ROW) - zm[t])) / (2 * h);
        CT_CHECK_CLOSE(ct_ce_dlogit((float)z[j], lse, j == t), fd, 1e-5, 1e-6);
    }
}

CT_TEST(zloss_dlogit_is_the_derivative_of_lse_squared) {
    double z[ROW];
    row_values(z);
    float lse = (float)lse_d(z, ROW);
    for (int j = 0; j < ROW; j++) {
        double h = 1e-5, zp[ROW], zm[ROW];
        for (int k = 0; k < ROW; k++) zp[k] = zm[k] = z[k];
        zp[j] += h, zm[j] -= h;
        double a = lse_d(zp, ROW), b = lse_d(zm, ROW);
        double fd = (a * a - b * b) / (2 * h);
        CT_CHECK_CLOSE(ct_zloss_dlogit((float)z[j], lse), fd, 1e-5, 1e-6);
    }
}

/* One row of a norm in fp64: y = (x - mean) / sqrt(var + eps) * w + b (rms: mean 0, var =
 * mean of x^2); returns sum_i dy_i * y_i, the scalar whose gradient backward computes. */
static double norm_row_d(const double *x, const double *w, const double *b, const double *dy,
                         int C, int rms, double eps, double *y) {
    double mu = 0, ss = 0, s = 0;
    if (!rms) {
        for (int i = 0; i < C; i++) mu += x[i];
        mu /= C;
    }
    for (int i = 0; i < C; i++) ss += (x[i] - mu) * (x[i] - mu);
    double rs = 1.0 / sqrt(ss / C + eps);
    for (int i = 0; i < C; i++) {
        double v = (x[i] - mu) * rs * w[i] + b[i];
        if (y) y[i] = v;
        s += dy[i] * v;
    }
    return s;
}

/* Forward with ct_norm_rstd / ct_norm_apply against fp64, backward with ct_norm_dx against
 * finite differences of sum dy*y, for layernorm (rms = 0) and rmsnorm (rms = 1). */
static void check_norm(int rms) {
    enum { C = 24 };
    double x[C], w[C], b[C], dy[C], y[C];
    for (int i = 0; i < C; i++) {
        x[i] = sin(1.7 * i + 0.3) * 2.0 + 0.5;
        w[i] = 1.0 + 0.1 * cos(0.9 * i);
        b[i] = rms ? 0.0 : 0.05 * i - 0.3;
        dy[i] = cos(2.3 * i + 1.0);
        x[i] = (float)x[i], w[i] = (float)w[i], b[i] = (float)b[i], dy[i] = (float)dy[i];
    }
    const float eps = 1e-5f;
    norm_row_d(x, w, b, dy, C, rms, eps, y);
    /* the float steps, as the CPU loop and the GPU block take them */
    float mu = 0.0f, ss = 0.0f;
    if (!rms) {
        for (int i = 0; i < C; i++) mu += (float)x[i];
        mu /= (float)C;
    }
    for (int i = 0; i < C; i++) ss += ((float)x[i] - mu) * ((float)x[i] - mu);
    float rs = ct_norm_rstd(ss, (float)C, eps);
    float s_d = 0.0f, s_dx = 0.0f;
    for (int i = 0; i < C; i++) {
        float yf = ct_norm_apply((float)x[i], mu, rs, (float)w[i], (float)b[i]);
        CT_CHECK_CLOSE(yf, y[i], 1e-5, 1e-6);
        float xhat = ((float)x[i] - mu) * rs, dxhat = (float)dy[i] * (float)w[i];
        s_d += dxhat, s_dx += dxhat * xhat;
    }
    float m_d = rms ? 0.0f : s_d / (float)C, m_dx = s_dx / (float)C;
    for (int i = 0; i < C; i++) {
        float xhat = ((float)x[i] - mu) * rs, dxhat = (float)dy[i] * (float)w[i];
        double h = 1e-6, xp[C], xm[C];
        for (int k = 0; k < C; k++) xp[k] = xm[k] = x[k];
        xp[i] += h, xm[i] -= h;
        double fd = (norm_row_d(xp, w, b, dy, C, rms, eps, NULL) -
                     norm_row_d(xm, w, b, dy, C, rms, eps, NULL)) / (2 * h);
        CT_CHECK_CLOSE(ct_norm_dx(dxhat, xhat, rs, m_d, m_dx), fd, 1e-4, 1e-5);
    }
}

CT_TEST(layernorm_steps_match_fp64_and_their_backward_matches_finite_differences) {
    check_norm(0);
}

CT_TEST(rmsnorm_steps_match_fp64_and_their_backward_matches_finite_differences) {
    check_norm(1);
}
