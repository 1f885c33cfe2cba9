/* test_whatif_sample.c — the row sample and estimators of `ctrain what-if --rows`
 * (host/whatif/whatif_sample.c): a census gives the totals exactly with no error; over many samples
 * of a skewed population the stratified total is unbiased and its variance estimate matches
 * the spread of the estimates; the allocation takes every stratum's least and never more than
 * it holds; a ratio figure's linearised error matches its spread; one row's figures against
 * the formulas written out. Not for: the replay (test_whatif.sh).
 */
#include "ct_test.h"

#include "../../host/whatif/whatif_sample.h"
#include "../../host/whatif/whatif_window.h"

#include <ctrain/numerics.h>

#include <stdlib.h>

#define POP 600
#define DRAWS 3000

/* A skewed population: y_v ~ (count + 1) times a noise factor, counts from a Zipf-like law,
 * keys by x4 bins of the count (as what-if's strata), mass = count + 1. */
static void population(double *y, double *x, int32_t *key, double *mass) {
    for (int v = 0; v < POP; v++) {
        uint64_t c = (uint64_t)(3000.0 / (v + 1.0) * (1.0 + 0.5 * sin(v * 1.7)));
        int32_t b = c ? 1 + (63 - __builtin_clzll(c)) / 2 : 0;
        double u = (double)(ct_hash64(99, (uint64_t)v) >> 11) / 9007199254740992.0;
        key[v] = b;
        mass[v] = (double)c + 1.0;
        y[v] = ((double)c + 1.0) * (0.2 + 1.6 * u) * (v % 7 == 0 ? -1.0 : 1.0);
        x[v] = ((double)c + 1.0) * (0.5 + u);
    }
}

CT_TEST(whatif_census_gives_the_totals_exactly_with_no_error) {
    whatif_strata s;
    ct_error err = {.struct_size = sizeof err};
    double y[POP], x[POP], mass[POP];
    int32_t key[POP];
    population(y, x, key, mass);
    CT_CHECK_INT(whatif_strata_census(&s, POP, &err), CT_OK);
    double t, var, exact = 0;
    for (int v = 0; v < POP; v++) exact += y[v];
    whatif_strata_total(&s, y, 1, &t, &var);
    CT_CHECK_CLOSE(t, exact, 1e-12, 0);
    CT_CHECK_CLOSE(var, 0, 0, 0);
    whatif_strata_free(&s);
}

CT_TEST(whatif_allocation_takes_each_stratum_least_and_at_most_its_size) {
    whatif_strata s;
    ct_error err = {.struct_size = sizeof err};
    double y[POP], x[POP], mass[POP];
    int32_t key[POP];
    population(y, x, key, mass);
    for (int64_t K = 40; K < POP; K += 97) {
        CT_CHECK_INT(whatif_strata_sample(&s, POP, K, key, mass, 7, &err), CT_OK);
        int64_t sum = 0;
        for (int32_t h = 0; h < s.n_strata; h++) {
            sum += s.taken[h];
            int64_t least = s.size[h] < WHATIF_MIN_TAKEN ? s.size[h] : WHATIF_MIN_TAKEN;
            CT_CHECK_MSG(s.taken[h] >= least && s.taken[h] <= s.size[h], "K %lld stratum %d: "
                         "took %lld of %lld", (long long)K, h, (long long)s.taken[h],
                         (long long)s.size[h]);
        }
        CT_CHECK_INT(sum, K);
        for (int64_t i = 1; i < K; i++) CT_CHECK(s.row[i] > s.row[i - 1]); /* distinct, ascending */
        for (int64_t i = 0; i < K; i++) CT_CHECK_INT(s.key[s.stratum[i]], key[s.row[i]]);
        whatif_strata_free(&s);
    }
    /* too few rows for every stratum's least: an error that says the least K */
    CT_CHECK_INT(whatif_strata_sample(&s, POP, 5, key, mass, 7, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "or more");
}

/* Over DRAWS samples: the mean estimate against the true value (within 4 of its standard
 * errors) and the mean estimated variance against the spread of the estimates (within 15%). */
static void check_spread(const char *what, double truth, const double *est, const double *var) {
    double m = 0, sd = 0, mv = 0;
    for (int d = 0; d < DRAWS; d++) m += est[d] / DRAWS, mv += var[d] / DRAWS;
    for (int d = 0; d < DRAWS; d++) sd += (est[d] - m) * (est[d] - m) / (DRAWS - 1);
    CT_CHECK_MSG(fabs(m - truth) <= 4 * sqrt(sd / DRAWS), "%s: mean of the estimates %.6g, "
                 "truth %.6g, their standard error %.3g", what, m, truth, sqrt(sd / DRAWS));
    CT_CHECK_MSG(mv > 0.85 * sd && mv < 1.15 * sd, "%s: mean estimated variance %.4g against "
                 "the estimates' variance %.4g (15%% allowed)", what, mv, sd);
}

CT_TEST(whatif_stratified_total_is_unbiased_and_its_variance_matches_the_spread) {
    double y[POP], x[POP], mass[POP];
    int32_t key[POP];
    population(y, x, key, mass);
    double truth = 0;
    for (int v = 0; v < POP; v++) truth += y[v];
    static double est[DRAWS], var[DRAWS], ys[POP];
    ct_error err = {.struct_size = sizeof err};
    for (int pass = 0; pass < 2; pass++) { /* stratified, then uniform */
        for (int d = 0; d < DRAWS; d++) {
            whatif_strata s;
            CT_CHECK_INT(whatif_strata_sample(&s, POP, 120, pass ? NULL : key, pass ? NULL : mass,
                                              (uint64_t)d, &err), CT_OK);
            for (int64_t i = 0; i < s.K; i++) ys[i] = y[s.row[i]];
            whatif_strata_total(&s, ys, 1, &est[d], &var[d]);
            whatif_strata_free(&s);
        }
        check_spread(pass ? "uniform total" : "stratified total", truth, est, var);
    }
}

CT_TEST(whatif_ratio_figure_error_matches_its_spread) {
    /* bias = DS / EA as whatif_est_batch forms it, from rows whose DS and EA are y and x */
    double y[POP], x[POP], mass[POP];
    int32_t key[POP];
    population(y, x, key, mass);
    double DS = 0, EA = 0;
    for (int v = 0; v < POP; v++) DS += y[v], EA += x[v];
    static double est[DRAWS], var[DRAWS];
    ct_error err = {.struct_size = sizeof err};
    for (int d = 0; d < DRAWS; d++) {
        whatif_strata s;
        whatif_est e;
        CT_CHECK_INT(whatif_strata_sample(&s, POP, 150, key, mass, 1000 + (uint64_t)d, &err), CT_OK);
        CT_CHECK_INT(whatif_est_open(&e, s.K, 1, &err), CT_OK);
        for (int64_t i = 0; i < s.K; i++) {
            e.y[i * WHATIF_N_Y + WHATIF_Y_DS] = y[s.row[i]];
            e.y[i * WHATIF_N_Y + WHATIF_Y_EA] = x[s.row[i]];
        }
        whatif_est_batch(&e, &s, POP, 0.0, 0, 1, WHATIF_EST_SAME);
        double f[WHATIF_N_F], se[WHATIF_N_F];
        whatif_est_result(&e, &s, f, se, NULL);
        est[d] = f[WHATIF_F_BIAS];
        var[d] = se[WHATIF_F_BIAS] * se[WHATIF_F_BIAS];
        whatif_est_close(&e);
        whatif_strata_free(&s);
    }
    check_spread("ratio DS/EA", DS / EA, est, var);
}

CT_TEST(whatif_row_figures_follow_their_formulas) {
    /* C = 2 elements, N = 3 ranks: x (bf16-exact values), e their mean, p a reduced value */
    const double xs[3][2] = {{0.5, -1.0}, {0.25, -0.5}, {0.75, 0.0}};
    uint16_t x[6];
    double e[2] = {0, 0}, p[2], m[2] = {0.125, -0.25}, hbar[2] = {2.0, 1.0}, y[WHATIF_N_Y];
    for (int n = 0; n < 3; n++)
        for (int c = 0; c < 2; c++) {
            x[n * 2 + c] = ct_bf16_from_f32((float)xs[n][c]);
            e[c] += xs[n][c] / 3;
        }
    p[0] = e[0] + 0.01, p[1] = e[1] - 0.02;
    whatif_row_figures(2, p, e, x, 2, 3, m, hbar, 1e-8, y);
    double d2 = 0, e2 = 0, ds = 0, ea = 0, push = 0, am = 0, al = 0, zp = 0, zm = 0, a2 = 0;
    for (int c = 0; c < 2; c++) {
        double d = p[c] - e[c], ss = 0;
        for (int n = 0; n < 3; n++) ss += (xs[n][c] - e[c]) * (xs[n][c] - e[c]);
        double r = sqrt(e[c] * e[c] + ss / 6.0) + 1e-8;
        d2 += d * d, e2 += e[c] * e[c], ds += d, ea += fabs(e[c]);
        push -= d * hbar[c], am -= d / r * hbar[c], al -= d / r * m[c], zp += 2 * m[c] * m[c] / r;
        zm += 2 * m[c] * hbar[c] / r, a2 += d * d / (r * r) / 2;
    }
    CT_CHECK_CLOSE(y[WHATIF_Y_D2], d2, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_E2], e2, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_DS], ds, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_EA], ea, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_PUSH], push, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_AMEAN], am, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_ALSE], al, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_ZPULL], zp, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_ZMEAN], zm, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_ANORM2], a2, 1e-12, 0);
    CT_CHECK(y[WHATIF_Y_WMEAN] == 0 && y[WHATIF_Y_WLSE] == 0); /* the window's, not this */
}

CT_TEST(whatif_between_batch_error_is_the_spread_of_the_batches_figures) {
    /* a census of 5 rows over B = 8 batches: each batch's push is sum_v y_v / V, and se_b must
     * be the sample standard deviation of those 8 figures over sqrt(8); the row error of a
     * census is 0 */
    enum { V5 = 5, B = 8 };
    whatif_strata s;
    whatif_est e;
    ct_error err = {.struct_size = sizeof err};
    CT_CHECK_INT(whatif_strata_census(&s, V5, &err), CT_OK);
    CT_CHECK_INT(whatif_est_open(&e, V5, B, &err), CT_OK);
    double fb[B], mean = 0;
    for (int b = 0; b < B; b++) {
        fb[b] = 0;
        for (int v = 0; v < V5; v++) {
            double yv = sin(1.0 + b * 7.0 + v * 3.0) * (1 + b % 3);
            e.y[v * WHATIF_N_Y + WHATIF_Y_PUSH] = yv;
            fb[b] += yv / V5;
        }
        mean += fb[b] / B;
        whatif_est_batch(&e, &s, V5, 0.0, b, B, WHATIF_EST_SAME);
    }
    double ss = 0;
    for (int b = 0; b < B; b++) ss += (fb[b] - mean) * (fb[b] - mean);
    double want = sqrt(ss / (B - 1)) / sqrt((double)B);
    double f[WHATIF_N_F], se[WHATIF_N_F], se_b[WHATIF_N_F];
    whatif_est_result(&e, &s, f, se, se_b);
    CT_CHECK_CLOSE(f[WHATIF_F_PUSH], mean, 1e-12, 1e-15);
    CT_CHECK_CLOSE(se_b[WHATIF_F_PUSH], want, 1e-12, 0);
    CT_CHECK(want > 0.01);
    CT_CHECK(se[WHATIF_F_PUSH] == 0);
    whatif_est_close(&e);
    whatif_strata_free(&s);
}

CT_TEST(whatif_cap_figure_is_the_push_less_zloss_pull_at_the_balance) {
    /* one row (a census of 1): MCAP = (AMEAN - ALSE ZMEAN / ZPULL) / V, LSTAR = ALSE / (coef
     * ZPULL); coef cancels in MCAP */
    whatif_strata s;
    whatif_est e;
    ct_error err = {.struct_size = sizeof err};
    CT_CHECK_INT(whatif_strata_census(&s, 1, &err), CT_OK);
    for (int k = 0; k < 2; k++) {
        double coef = k ? 1e-2 : 1e-4;
        CT_CHECK_INT(whatif_est_open(&e, 1, 1, &err), CT_OK);
        e.y[WHATIF_Y_AMEAN] = 3.0, e.y[WHATIF_Y_ALSE] = 0.5, e.y[WHATIF_Y_ZPULL] = 4.0;
        e.y[WHATIF_Y_ZMEAN] = 2.0;
        whatif_est_batch(&e, &s, 1, coef, 0, 1, WHATIF_EST_SAME);
        double f[WHATIF_N_F], se[WHATIF_N_F];
        whatif_est_result(&e, &s, f, se, NULL);
        CT_CHECK_CLOSE(f[WHATIF_F_LSTAR], 0.5 / (coef * 4.0), 1e-12, 0);
        CT_CHECK_CLOSE(f[WHATIF_F_MCAP], 3.0 - 0.5 * 2.0 / 4.0, 1e-12, 0);
        whatif_est_close(&e);
    }
    whatif_strata_free(&s);
}

CT_TEST(whatif_window_rare_token_step_grows_as_one_over_sqrt_f) {
    /* One row of C = 4 over B = 8 batches; its token is in f = 2/8 of them: there the exact
     * gradient is g and the error d, elsewhere both 0. The same batch's view divides by |g|
     * (N = 1: no spread), the running second moment by sqrt(f) |g|: the mean logit's change
     * must come out 1/sqrt(f) = 2 times larger, and the lse figure too. */
    enum { C4 = 4, B = 8 };
    const double g[C4] = {0.5, -0.25, 0.125, 1.0}, dd[C4] = {1e-3, 2e-3, -5e-4, 1e-3};
    const double hbar[C4] = {1.0, -2.0, 0.5, 1.5}, m[C4] = {0.1, 0.2, -0.1, 0.3};
    const int present[B] = {0, 1, 0, 0, 0, 1, 0, 0};
    whatif_strata s;
    whatif_est e;
    whatif_window w;
    whatif_window_batch wb;
    ct_error err = {.struct_size = sizeof err};
    CT_CHECK_INT(whatif_strata_census(&s, 1, &err), CT_OK);
    CT_CHECK_INT(whatif_est_open(&e, 1, B, &err), CT_OK);
    CT_CHECK_INT(whatif_window_open(&w, 1, C4, B, &err), CT_OK);
    CT_CHECK_INT(whatif_window_batch_open(&wb, 1, C4, B, &err), CT_OK);
    for (int b = 0; b < B; b++) {
        double p[C4], ex[C4];
        uint16_t x[C4];
        for (int c = 0; c < C4; c++) {
            ex[c] = present[b] ? g[c] : 0.0;
            p[c] = ex[c] + (present[b] ? dd[c] : 0.0);
            x[c] = ct_bf16_from_f32((float)ex[c]);
        }
        whatif_row_figures(C4, p, ex, x, C4, 1, m, hbar, 0.0, e.y);
        if (!present[b]) /* no gradient, no error: the same batch's view has 0/0 = nothing */
            for (int j = WHATIF_Y_AMEAN; j < WHATIF_N_Y; j++) e.y[j] = 0;
        whatif_est_batch(&e, &s, 1, 1e-4, b, B, WHATIF_EST_SAME);
        whatif_window_add(&w, &wb, b, 0, p, ex, m, hbar);
    }
    for (int b = 0; b < B; b++) {
        whatif_window_rows(&w, &wb, b, 0.0, e.y);
        whatif_est_batch(&e, &s, 1, 1e-4, b, B, WHATIF_EST_WINDOW);
    }
    double f[WHATIF_N_F], se[WHATIF_N_F], se_b[WHATIF_N_F];
    whatif_est_result(&e, &s, f, se, se_b);
    double am = 0;
    for (int c = 0; c < C4; c++) am -= dd[c] / fabs(g[c]) * hbar[c];
    CT_CHECK_CLOSE(f[WHATIF_F_AMEAN], am * 2.0 / B, 1e-6, 0);
    CT_CHECK_CLOSE(f[WHATIF_F_WMEAN] / f[WHATIF_F_AMEAN], 2.0, 1e-5, 0);
    CT_CHECK_CLOSE(f[WHATIF_F_WLSE] / f[WHATIF_F_ALSE], 2.0, 1e-5, 0);
    CT_CHECK_CLOSE(f[WHATIF_F_WNORM] / f[WHATIF_F_ANORM], 2.0, 1e-5, 0);
    CT_CHECK(se_b[WHATIF_F_WMEAN] > 0 && se_b[WHATIF_F_AMEAN] > 0);
    whatif_window_close(&w);
    whatif_window_batch_close(&wb);
    whatif_est_close(&e);
    whatif_strata_free(&s);
}
