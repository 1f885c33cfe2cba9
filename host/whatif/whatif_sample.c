/* whatif_sample.c — the rows `ctrain what-if --rows K` replays and the estimators of the whole
 * head's figures from them (see whatif_sample.h).
 * Not for: gradients, replays or output (whatif_grad.c, whatif_replay.c, cli/what_if.c).
 */
#include "whatif/whatif_sample.h"

#include <assert.h>
#include <ctrain/numerics.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void whatif_strata_free(whatif_strata *s) {
    free(s->row);
    free(s->stratum);
    memset(s, 0, sizeof *s);
}

static int32_t strata_alloc(whatif_strata *s, int64_t V, int64_t K, ct_error *err) {
    memset(s, 0, sizeof *s);
    s->V = V, s->K = K;
    s->row = malloc((size_t)K * sizeof *s->row);
    s->stratum = malloc((size_t)K * sizeof *s->stratum);
    if (!s->row || !s->stratum) {
        whatif_strata_free(s);
        return ct_error_set(err, CT_ERR_NOMEM, "what-if: out of memory for %lld rows",
                            (long long)K);
    }
    return CT_OK;
}

int32_t whatif_strata_census(whatif_strata *s, int64_t V, ct_error *err) {
    int32_t rc = strata_alloc(s, V, V, err);
    if (rc != CT_OK) return rc;
    s->n_strata = 1;
    s->size[0] = s->taken[0] = V;
    for (int64_t v = 0; v < V; v++) s->row[v] = v, s->stratum[v] = 0;
    return CT_OK;
}

/* n_h for K rows: at least min(2, N_h), at most N_h, the rest in proportion to mass_h (to N_h
 * when no stratum has mass), by water-filling, then whole numbers by largest remainders. */
static void allocate(whatif_strata *s, const double *mass, int64_t K) {
    int32_t H = s->n_strata;
    int32_t fixed[WHATIF_MAX_STRATA]; /* 0 open, 1 at its floor or cap */
    double t[WHATIF_MAX_STRATA], msum = 0;
    for (int32_t h = 0; h < H; h++) msum += mass[h];
    for (int32_t h = 0; h < H; h++) fixed[h] = 0;
    for (int changed = 1; changed;) {
        changed = 0;
        double budget = (double)K, m = 0;
        for (int32_t h = 0; h < H; h++) {
            if (fixed[h]) budget -= t[h];
            else m += msum > 0 ? mass[h] : (double)s->size[h];
        }
        for (int32_t h = 0; h < H && !changed; h++) {
            if (fixed[h]) continue;
            double share = m > 0 ? (msum > 0 ? mass[h] : (double)s->size[h]) / m : 0.0;
            t[h] = budget * share;
            double floor_h = (double)(s->size[h] < WHATIF_MIN_TAKEN ? s->size[h] : WHATIF_MIN_TAKEN);
            if (t[h] >= (double)s->size[h]) t[h] = (double)s->size[h], fixed[h] = 1, changed = 1;
            else if (t[h] < floor_h) t[h] = floor_h, fixed[h] = 1, changed = 1;
        }
    }
    int64_t used = 0;
    for (int32_t h = 0; h < H; h++) {
        s->taken[h] = (int64_t)floor(t[h] + 1e-9);
        used += s->taken[h];
    }
    while (used < K) { /* the largest remainder among strata not yet full */
        int32_t best = -1;
        double br = -INFINITY;
        for (int32_t h = 0; h < H; h++) {
            double r = t[h] - (double)s->taken[h];
            if (s->taken[h] < s->size[h] && r > br) br = r, best = h;
        }
        if (best < 0) break;
        s->taken[best]++;
        used++;
    }
    while (used > K) { /* floors that outgrew the budget: take back from the largest stratum */
        int32_t best = -1;
        for (int32_t h = 0; h < H; h++)
            if (s->taken[h] > WHATIF_MIN_TAKEN && (best < 0 || s->taken[h] > s->taken[best])) best = h;
        assert(best >= 0);
        s->taken[best]--;
        used--;
    }
    assert(used == K);
}

/* A uniform integer in [0, n) from the counter-based generator. */
static uint64_t draw(uint64_t seed, uint64_t *ctr, uint64_t n) {
    return (uint64_t)(((unsigned __int128)ct_hash64(seed, (*ctr)++) * n) >> 64);
}

static int cmp_row(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

int32_t whatif_strata_sample(whatif_strata *s, int64_t V, int64_t K, const int32_t *key,
                             const double *mass, uint64_t seed, ct_error *err) {
    int32_t h_of[WHATIF_MAX_STRATA];
    double m[WHATIF_MAX_STRATA] = {0};
    int64_t size[WHATIF_MAX_STRATA] = {0};
    for (int32_t b = 0; b < WHATIF_MAX_STRATA; b++) h_of[b] = -1;
    for (int64_t v = 0; v < V; v++) {
        int32_t b = key ? key[v] : 0;
        assert(b >= 0 && b < WHATIF_MAX_STRATA);
        size[b]++;
        m[b] += mass ? mass[v] : 0.0;
    }
    int32_t H = 0;
    int64_t need = 0;
    for (int32_t b = 0; b < WHATIF_MAX_STRATA; b++)
        if (size[b]) {
            h_of[b] = H++;
            need += size[b] < WHATIF_MIN_TAKEN ? size[b] : WHATIF_MIN_TAKEN;
        }
    if (K < need || K < 2)
        return ct_error_set(err, CT_ERR_INVALID, "--rows %lld: too few to take %d rows of each "
                            "of the %d strata ---> --rows %lld or more", (long long)K,
                            WHATIF_MIN_TAKEN, (int)H, (long long)(need > 2 ? need : 2));
    int32_t rc = strata_alloc(s, V, K, err);
    if (rc != CT_OK) return rc;
    s->n_strata = H;
    double mh[WHATIF_MAX_STRATA];
    for (int32_t b = 0; b < WHATIF_MAX_STRATA; b++)
        if (h_of[b] >= 0) s->size[h_of[b]] = size[b], s->key[h_of[b]] = b, mh[h_of[b]] = m[b];
    allocate(s, mh, K);
    /* each stratum's rows, then a partial Fisher-Yates shuffle of n_h of them */
    int64_t *rows = malloc((size_t)V * sizeof *rows), *pairs = malloc((size_t)K * 2 * sizeof *pairs);
    int64_t start[WHATIF_MAX_STRATA + 1] = {0}, fill[WHATIF_MAX_STRATA];
    if (!rows || !pairs) {
        free(rows);
        free(pairs);
        whatif_strata_free(s);
        return ct_error_set(err, CT_ERR_NOMEM, "what-if: out of memory for %lld rows", (long long)V);
    }
    for (int32_t h = 0; h < H; h++) start[h + 1] = start[h] + s->size[h];
    for (int32_t h = 0; h < H; h++) fill[h] = start[h];
    for (int64_t v = 0; v < V; v++) {
        int32_t h = h_of[key ? key[v] : 0];
        rows[fill[h]++] = v;
    }
    uint64_t ctr = 0;
    int64_t k = 0;
    for (int32_t h = 0; h < H; h++) {
        int64_t *r = rows + start[h], n = s->size[h];
        for (int64_t i = 0; i < s->taken[h]; i++) {
            int64_t j = i + (int64_t)draw(seed, &ctr, (uint64_t)(n - i));
            int64_t tmp = r[i];
            r[i] = r[j], r[j] = tmp;
            pairs[2 * k] = r[i], pairs[2 * k + 1] = h;
            k++;
        }
    }
    assert(k == K);
    qsort(pairs, (size_t)K, 2 * sizeof *pairs, cmp_row);
    for (int64_t i = 0; i < K; i++) s->row[i] = pairs[2 * i], s->stratum[i] = (int32_t)pairs[2 * i + 1];
    free(rows);
    free(pairs);
    return CT_OK;
}

double whatif_strata_weight(const whatif_strata *s, int64_t i) {
    int32_t h = s->stratum[i];
    return (double)s->size[h] / (double)s->taken[h];
}

void whatif_strata_total(const whatif_strata *s, const double *y, int64_t stride, double *total,
                         double *var) {
    double sum[WHATIF_MAX_STRATA] = {0}, ss[WHATIF_MAX_STRATA] = {0};
    for (int64_t i = 0; i < s->K; i++) sum[s->stratum[i]] += y[i * stride];
    for (int64_t i = 0; i < s->K; i++) { /* two passes: the squares about each stratum's mean */
        int32_t h = s->stratum[i];
        double dv = y[i * stride] - sum[h] / (double)s->taken[h];
        ss[h] += dv * dv;
    }
    double t = 0, v = 0;
    for (int32_t h = 0; h < s->n_strata; h++) {
        double Nh = (double)s->size[h], nh = (double)s->taken[h];
        t += Nh / nh * sum[h];
        if (s->taken[h] > 1 && s->taken[h] < s->size[h])
            v += Nh * Nh * (1.0 - nh / Nh) * (ss[h] / (nh - 1.0)) / nh;
    }
    *total = t;
    if (var) *var = v;
}

void whatif_row_figures(int64_t C, const double *p, const double *e, const uint16_t *x,
                        int64_t stride, int32_t N, const double *m, const double *hbar,
                        double eps, double *y) {
    for (int32_t j = 0; j < WHATIF_N_Y; j++) y[j] = 0;
    for (int64_t c = 0; c < C; c++) {
        double d = p[c] - e[c], ss = 0;
        for (int32_t n = 0; n < N; n++) {
            double dx = ct_bf16_to_f32(x[(int64_t)n * stride + c]) - e[c];
            ss += dx * dx;
        }
        double var = N > 1 ? ss / ((double)N * (double)(N - 1)) : 0.0;
        double rms = sqrt(e[c] * e[c] + var) + eps; /* Adam's sqrt(v) + eps, v = E[g^2] */
        y[WHATIF_Y_D2] += d * d;
        y[WHATIF_Y_E2] += e[c] * e[c];
        y[WHATIF_Y_DS] += d;
        y[WHATIF_Y_EA] += fabs(e[c]);
        y[WHATIF_Y_PUSH] -= d * hbar[c];
        y[WHATIF_Y_AMEAN] -= d / rms * hbar[c];
        y[WHATIF_Y_ANORM2] += (d / rms) * (d / rms) / (double)C;
        if (m) {
            y[WHATIF_Y_ALSE] -= d / rms * m[c];
            y[WHATIF_Y_ZPULL] += 2.0 * m[c] / rms * m[c];
            y[WHATIF_Y_ZMEAN] += 2.0 * m[c] / rms * hbar[c];
        }
    }
}

int32_t whatif_est_open(whatif_est *e, int64_t K, int64_t batches, ct_error *err) {
    memset(e, 0, sizeof *e);
    e->K = K;
    e->batches = batches;
    e->y = calloc((size_t)K * WHATIF_N_Y, sizeof *e->y);
    e->z = calloc((size_t)K * WHATIF_N_F, sizeof *e->z);
    e->fb = calloc((size_t)batches * WHATIF_N_F, sizeof *e->fb);
    if (!e->y || !e->z || !e->fb) {
        whatif_est_close(e);
        return ct_error_set(err, CT_ERR_NOMEM, "what-if: out of memory for %lld rows' figures",
                            (long long)K);
    }
    return CT_OK;
}

void whatif_est_close(whatif_est *e) {
    free(e->y);
    free(e->z);
    free(e->fb);
    memset(e, 0, sizeof *e);
}

/* One AdamW view's figures (f[0..4]: mean logit, lse, lse*, mean logit at the cap, the error
 * in units of the step) from its totals t[0..4] (AMEAN, ALSE, ZPULL, ZMEAN, ANORM2 or their W
 * slots), and each figure's derivatives with respect to the totals (g[figure][total]) for the
 * linearisation. */
#define ADAM_N 5
static void adam_view(const double *t, int64_t V, double coef, double *f, double g[ADAM_N][ADAM_N]) {
    double am = t[0], al = t[1], zp = t[2], zm = t[3], Vd = (double)V;
    memset(g, 0, ADAM_N * ADAM_N * sizeof g[0][0]);
    f[0] = am / Vd, g[0][0] = 1.0 / Vd;
    f[1] = al, g[1][1] = 1.0;
    int bal = coef > 0 && zp > 0;
    f[2] = bal ? al / (coef * zp) : 0;
    if (bal) g[2][1] = 1.0 / (coef * zp), g[2][2] = -f[2] / zp;
    f[3] = bal ? (am - al * zm / zp) / Vd : 0;
    if (bal) {
        g[3][0] = 1.0 / Vd, g[3][1] = -zm / (zp * Vd), g[3][3] = -al / (zp * Vd);
        g[3][2] = al * zm / (zp * zp * Vd);
    }
    f[4] = t[4] > 0 ? sqrt(t[4] / Vd) : 0;
    if (f[4] > 0) g[4][4] = 1.0 / (2.0 * f[4] * Vd);
}

void whatif_est_batch(whatif_est *e, const whatif_strata *s, int64_t V, double coef,
                      int64_t b, int64_t batches, int32_t which) {
    double T[WHATIF_N_Y], f[WHATIF_N_F] = {0}, g[2][ADAM_N][ADAM_N];
    for (int32_t j = 0; j < WHATIF_N_Y; j++) whatif_strata_total(s, e->y + j, WHATIF_N_Y, &T[j], NULL);
    int same = which & WHATIF_EST_SAME, win = which & WHATIF_EST_WINDOW;
    f[WHATIF_F_REL] = T[WHATIF_Y_E2] > 0 && T[WHATIF_Y_D2] > 0 ? sqrt(T[WHATIF_Y_D2] / T[WHATIF_Y_E2]) : 0;
    f[WHATIF_F_BIAS] = T[WHATIF_Y_EA] > 0 ? T[WHATIF_Y_DS] / T[WHATIF_Y_EA] : 0;
    f[WHATIF_F_PUSH] = T[WHATIF_Y_PUSH] / (double)V;
    for (int32_t w = 0; w < 2; w++)
        adam_view(T + WHATIF_Y_AMEAN + w * WHATIF_Y_WINDOW, V, coef,
                  f + WHATIF_F_AMEAN + w * WHATIF_F_WINDOW, g[w]);
    double K = (double)batches;
    for (int32_t j = 0; j < WHATIF_N_F; j++) {
        int is_win = j >= WHATIF_F_WMEAN;
        if (is_win ? !win : !same) continue;
        e->fig[j] += f[j] / K;
        e->fb[b * WHATIF_N_F + j] = f[j];
    }
    for (int64_t i = 0; i < e->K; i++) { /* each figure's derivative applied to row i */
        const double *y = e->y + i * WHATIF_N_Y;
        double *z = e->z + i * WHATIF_N_F, r = f[WHATIF_F_REL], bs = f[WHATIF_F_BIAS];
        if (same) {
            if (r > 0) z[WHATIF_F_REL] += (y[WHATIF_Y_D2] - r * r * y[WHATIF_Y_E2]) / (2 * r * T[WHATIF_Y_E2]) / K;
            if (T[WHATIF_Y_EA] > 0) z[WHATIF_F_BIAS] += (y[WHATIF_Y_DS] - bs * y[WHATIF_Y_EA]) / T[WHATIF_Y_EA] / K;
            z[WHATIF_F_PUSH] += y[WHATIF_Y_PUSH] / (double)V / K;
        }
        for (int32_t w = 0; w < 2; w++) {
            if (w ? !win : !same) continue;
            const double *yw = y + WHATIF_Y_AMEAN + w * WHATIF_Y_WINDOW;
            for (int32_t k = 0; k < ADAM_N; k++) {
                double dz = 0;
                for (int32_t t = 0; t < ADAM_N; t++) dz += g[w][k][t] * yw[t];
                z[WHATIF_F_AMEAN + w * WHATIF_F_WINDOW + k] += dz / K;
            }
        }
    }
}

int whatif_ratio_estimable(const whatif_strata *s) {
    return s->n_strata > 1 || s->K >= s->V;
}

void whatif_est_result(const whatif_est *e, const whatif_strata *s, double *fig, double *se,
                       double *se_b) {
    double B = (double)e->batches;
    for (int32_t j = 0; j < WHATIF_N_F; j++) {
        double t, v;
        whatif_strata_total(s, e->z + j, WHATIF_N_F, &t, &v);
        fig[j] = e->fig[j];
        se[j] = sqrt(v > 0 ? v : 0);
        if (se_b) { /* the spread of the batches' own figures about their mean */
            double ss = 0;
            for (int64_t b = 0; b < e->batches; b++) {
                double dv = e->fb[b * WHATIF_N_F + j] - e->fig[j];
                ss += dv * dv;
            }
            se_b[j] = e->batches > 1 ? sqrt(ss / (B * (B - 1.0))) : 0.0;
        }
        int ratio = j == WHATIF_F_REL || j == WHATIF_F_BIAS || j == WHATIF_F_LSTAR ||
                    j == WHATIF_F_WLSTAR || j == WHATIF_F_MCAP || j == WHATIF_F_WMCAP;
        if (ratio && !whatif_ratio_estimable(s)) {
            fig[j] = se[j] = NAN;
            if (se_b) se_b[j] = NAN;
        }
    }
}
