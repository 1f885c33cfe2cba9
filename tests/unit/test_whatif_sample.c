/* test_whatif_sample.c — the row sample and estimators of `ctrain what-if --rows`
 * (host/whatif/whatif_sample.c): a census gives the totals exactly with no error; over many samples
 * of a skewed population the stratified total is unbiased and its variance estimate matches
 * the spread of the estimates; the allocation takes every stratum's least and never more than
 * it holds; a ratio figure's linearised error matches its spread; one row's figures against
 * the formulas written out. Not for: the replay (test_whatif.sh).
 */
#include "ct_test.h"

#include "../../host/whatif/whatif_sample.h"

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
        CT_CHECK_INT(whatif_est_open(&e, s.K, &err), CT_OK);
        for (int64_t i = 0; i < s.K; i++) {
            e.y[i * WHATIF_N_Y + WHATIF_Y_DS] = y[s.row[i]];
            e.y[i * WHATIF_N_Y + WHATIF_Y_EA] = x[s.row[i]];
        }
        whatif_est_batch(&e, &s, POP, 0.0, 1);
        double f[WHATIF_N_F], se[WHATIF_N_F];
        whatif_est_result(&e, &s, f, se);
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
    double d2 = 0, e2 = 0, ds = 0, ea = 0, push = 0, am = 0, al = 0, zp = 0;
    for (int c = 0; c < 2; c++) {
        double d = p[c] - e[c], ss = 0;
        for (int n = 0; n < 3; n++) ss += (xs[n][c] - e[c]) * (xs[n][c] - e[c]);
        double r = sqrt(e[c] * e[c] + ss / 6.0) + 1e-8;
        d2 += d * d, e2 += e[c] * e[c], ds += d, ea += fabs(e[c]);
        push -= d * hbar[c], am -= d / r * hbar[c], al -= d / r * m[c], zp += 2 * m[c] * m[c] / r;
    }
    CT_CHECK_CLOSE(y[WHATIF_Y_D2], d2, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_E2], e2, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_DS], ds, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_EA], ea, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_PUSH], push, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_AMEAN], am, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_ALSE], al, 1e-12, 0);
    CT_CHECK_CLOSE(y[WHATIF_Y_ZPULL], zp, 1e-12, 0);
}
