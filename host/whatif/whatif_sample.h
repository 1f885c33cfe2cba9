/* whatif_sample.h — `ctrain what-if --rows K`: which rows of the output head to replay when the
 * whole head is too large (a sample of K of the V vocabulary rows, uniform or stratified by the
 * token's frequency), and the estimators that turn the sampled rows' figures into the whole
 * head's, each with its standard error. With every row taken (a census) the same code gives the
 * whole replay's figures and a standard error of 0.
 * Not for: computing the rows' gradients (whatif_grad.h) or replaying them (whatif_replay.h).
 *
 * Design: stratified simple random sampling without replacement. Stratum h holds N_h rows, n_h
 * of them are taken, each standing for w_h = N_h / n_h rows. A total Y = sum_v y_v is estimated
 * by sum_h w_h sum_{sampled in h} y_v, with variance sum_h N_h^2 (1 - n_h / N_h) s_h^2 / n_h
 * (s_h^2 the sample variance of y in stratum h). A figure that is a function of totals (the
 * relative error sqrt(D2 / E2), the bias DS / EA, ...) is estimated by the function of the
 * estimated totals and its variance by linearisation: the variance of the estimated total of
 * z_v, the figure's derivative with respect to the totals applied to row v's values. */
#ifndef CTRAIN_HOST_WHATIF_SAMPLE_H
#define CTRAIN_HOST_WHATIF_SAMPLE_H

#include <ctrain/ctrain.h>

#define WHATIF_MAX_STRATA 64
#define WHATIF_MIN_TAKEN 4 /* rows taken of every stratum that has as many */

typedef struct whatif_strata {
    int64_t  V, K;                       /* rows in all; rows taken */
    int32_t  n_strata;
    int64_t *row;                        /* (K) the rows taken, ascending */
    int32_t *stratum;                    /* (K) the stratum of each */
    int64_t  size[WHATIF_MAX_STRATA];    /* N_h */
    int64_t  taken[WHATIF_MAX_STRATA];   /* n_h */
    int32_t  key[WHATIF_MAX_STRATA];     /* the caller's key of each stratum */
} whatif_strata;

/* Every row, one stratum: the estimators then give the figures of the whole head exactly. */
int32_t whatif_strata_census(whatif_strata *s, int64_t V, ct_error *err);

/* K of V rows (K < V) drawn with the generator keyed by seed: the rows with the same key[v]
 * (in [0, WHATIF_MAX_STRATA); NULL: one stratum) form a stratum; each stratum gets at least
 * min(WHATIF_MIN_TAKEN, N_h) rows and at most N_h, the rest of K in proportion to the sum of mass[v] over its
 * rows (NULL, or all 0: to N_h). CT_ERR_INVALID when K is too small to give every stratum
 * its least (the message says the least K), CT_ERR_NOMEM. */
int32_t whatif_strata_sample(whatif_strata *s, int64_t V, int64_t K, const int32_t *key,
                             const double *mass, uint64_t seed, ct_error *err);
void whatif_strata_free(whatif_strata *s);

/* w_h of the i-th row taken (N_h / n_h). */
double whatif_strata_weight(const whatif_strata *s, int64_t i);

/* The estimated total of y (K values, one per row taken, at y[i * stride]) and the estimate of
 * its variance. */
void whatif_strata_total(const whatif_strata *s, const double *y, int64_t stride, double *total,
                         double *var);

/* ---- the figures of one replay ------------------------------------------------------------- */

/* Per row v of a replay, sums over its C elements (d = reduced - exact, e = exact, h = the mean
 * final hidden state, a = d / (sqrt(e^2 + var_e) + eps) Adam's view of the error with the same
 * batch's second moment, m = the softmax part of the exact gradient, sum_t p_tv h_t / tokens).
 * The W slots are the same four under AdamW's running second moment (whatif_window.h: a = d /
 * (sqrt(mean over the replayed batches of e^2) + eps)); whatif_row_figures leaves them 0. */
enum {
    WHATIF_Y_D2,    /* sum d^2 */
    WHATIF_Y_E2,    /* sum e^2 */
    WHATIF_Y_DS,    /* sum d */
    WHATIF_Y_EA,    /* sum |e| */
    WHATIF_Y_PUSH,  /* -sum d . h: the row's own logit change per SGD step of rate 1 */
    WHATIF_Y_AMEAN, /* -sum a . h: the same under Adam, per unit learning rate */
    WHATIF_Y_ALSE,  /* -sum a . m: the change of the mean log-sum-exp under Adam, per unit lr */
    WHATIF_Y_ZPULL, /* 2 sum (m / (sqrt(e^2 + var_e) + eps)) . m: z-loss's pull on the mean
                       log-sum-exp under Adam, per unit lr, coef and lse */
    WHATIF_Y_ZMEAN, /* 2 sum (m / (sqrt(e^2 + var_e) + eps)) . h: z-loss's pull on the row's
                       own logit (its 2 coef lse p, through Adam), per unit lr, coef and lse */
    WHATIF_Y_ANORM2, /* sum a^2 / C: the error in units of Adam's step, squared, per element */
    WHATIF_Y_WMEAN, /* AMEAN, ALSE, ZPULL, ZMEAN, ANORM2 under the running second moment */
    WHATIF_Y_WLSE,
    WHATIF_Y_WZPULL,
    WHATIF_Y_WZMEAN,
    WHATIF_Y_WNORM2,
    WHATIF_N_Y
};
#define WHATIF_Y_WINDOW (WHATIF_Y_WMEAN - WHATIF_Y_AMEAN) /* offset of a view's W slot */

/* y[WHATIF_N_Y] of one row of C elements: p, e (C) its reduced and exact values; x: rank n's
 * local values at x[n * stride + c] (bf16 bits), n < N (their spread gives var_e, the variance
 * of the exact value from batch to batch: sum_n (x_n - e)^2 / (N (N - 1))); m (C) the softmax
 * part of the exact gradient (NULL: the lse figures are 0); hbar (C); eps: Adam's epsilon. */
void whatif_row_figures(int64_t C, const double *p, const double *e, const uint16_t *x,
                        int64_t stride, int32_t N, const double *m, const double *hbar,
                        double eps, double *y);

/* The figures, and the order they are printed in. */
enum {
    WHATIF_F_REL,   /* sqrt(D2 / E2) */
    WHATIF_F_BIAS,  /* DS / EA */
    WHATIF_F_PUSH,  /* PUSH / V: the batch-mean logit's change per SGD step of rate 1 */
    WHATIF_F_AMEAN, /* AMEAN / V: the same under Adam, per unit lr */
    WHATIF_F_ALSE,  /* ALSE: the mean log-sum-exp's change under Adam, per unit lr */
    WHATIF_F_LSTAR, /* ALSE / (coef ZPULL): the lse excess at which z-loss's pull balances */
    WHATIF_F_MCAP,  /* (AMEAN - ALSE ZMEAN / ZPULL) / V: the mean logit's change per unit lr
                       once z-loss holds lse at that balance (the push less z-loss's pull on
                       the mean logit at lse excess LSTAR; coef cancels) */
    WHATIF_F_ANORM, /* sqrt(ANORM2 / V): the RMS over the head's elements of the error in units
                       of Adam's step, |p - e| / RMS. AdamW's view is linear in the error (its
                       v is the exact gradient's): it holds while this is well below 1; where
                       the error is as large as the step it changes v itself, and the view
                       overstates the drift (Adam's step is at most ~lr per element) */
    WHATIF_F_WMEAN, /* AMEAN, ALSE, LSTAR, MCAP, ANORM under the running second moment */
    WHATIF_F_WLSE,
    WHATIF_F_WLSTAR,
    WHATIF_F_WMCAP,
    WHATIF_F_WNORM,
    WHATIF_N_F
};
#define WHATIF_F_WINDOW (WHATIF_F_WMEAN - WHATIF_F_AMEAN) /* offset of a view's W figure */

/* Which figures whatif_est_batch forms: the same-batch ones (REL .. MCAP) as each batch is
 * replayed, the running-second-moment ones (W*) once every batch is in (whatif_window.h). */
enum { WHATIF_EST_SAME = 1, WHATIF_EST_WINDOW = 2 };

/* A replay's figures over batches: each batch's figures from its estimated totals, averaged
 * over the batches, with the linearised variables accumulated per row for the row sample's
 * error and each batch's figures kept for the error between batches. */
typedef struct whatif_est {
    int64_t K, batches;
    double *y;                  /* (K, WHATIF_N_Y) this batch's per-row values */
    double *z;                  /* (K, WHATIF_N_F) per-row linearised variables, summed */
    double *fb;                 /* (batches, WHATIF_N_F) each batch's figures */
    double  fig[WHATIF_N_F];    /* figures, summed over batches */
} whatif_est;

int32_t whatif_est_open(whatif_est *e, int64_t K, int64_t batches, ct_error *err);
void whatif_est_close(whatif_est *e);

/* The figures of batch b (< batches) whose per-row values are in e->y, added with weight
 * 1/batches; which: WHATIF_EST_SAME and/or WHATIF_EST_WINDOW. V: the vocabulary; coef: z-loss's
 * coefficient for the balance (WHATIF_F_LSTAR). */
void whatif_est_batch(whatif_est *e, const whatif_strata *s, int64_t V, double coef,
                      int64_t b, int64_t batches, int32_t which);

/* 0 for a sample of one stratum (--stratify uniform): there a ratio figure (REL, BIAS, LSTAR)
 * is not estimable. Its totals are dominated by a few frequent tokens' rows (one row held 55%
 * of E2 and 59% of D2 in a V = 1000 model); a uniform sample misses them most of the time,
 * and no variance estimate from the rows it took can see them: the linearised 2-SE interval
 * covered the whole replay's value 54% of the time, the delete-one jackknife's 82% (2,000
 * simulated samples of 300 rows). Stratifying by the token's count takes those rows. */
int whatif_ratio_estimable(const whatif_strata *s);

/* The figures (means over the batches), their standard errors from the row sample (se) and
 * between the batches (se_b, NULL: not wanted): se_b = sqrt(sum_b (f_b - mean)^2 / (B (B - 1)))
 * over the B batches' own figures f_b, the standard error of their mean (0 for B = 1). A ratio
 * figure that is not estimable (whatif_ratio_estimable) is NAN, its errors too. The combined
 * error is sqrt(se^2 + se_b^2): the rows are drawn once and the batches independently of them. */
void whatif_est_result(const whatif_est *e, const whatif_strata *s, double *fig, double *se,
                       double *se_b);

#endif /* CTRAIN_HOST_WHATIF_SAMPLE_H */
