/* whatif_window.h — AdamW's view of the replayed error with a running second moment: the
 * `--lr` figures of `ctrain what-if` divide each element's error by sqrt(v) + eps, and here v
 * is the mean of the exact gradient's square over the replayed batches (--batches K >= 2)
 * instead of the same batch's e^2 + var_e (whatif_sample.h, the A* slots).
 * Not for: the replay (whatif_replay.h) or the estimators (whatif_sample.h).
 *
 * Why the K-batch mean of g^2 and not a beta2-weighted one: Adam's v is an exponential average
 * of g^2 over ~1/(1 - beta2) steps (20 for open_lm's beta2 = 0.95, 1000 for 0.999); in steady
 * state its expectation is E[g^2] whatever beta2 is, and beta2 sets only how much v itself
 * wanders. Of K independent batches the plain mean is the unbiased estimate of that E[g^2]; a
 * beta2 weighting of the same K batches would estimate the same thing with more noise. What
 * the same batch's view misses is a token present in a fraction f of the batches: there v is
 * about f g^2, so a step when it is present is larger by ~1/sqrt(f) (tests/unit:
 * whatif_window_rare_token_step_grows_as_one_over_sqrt_f). With K batches a token seen in
 * none of them has no step in either view; f below 1/K is not resolved.
 *
 * Memory: per cell (K rows of C) the sum of e^2 in f64 and, per batch, d, d h and d m in f32;
 * shared by the cells, per batch m h and m m in f32: (12 cells + 8) K C bytes per batch. */
#ifndef CTRAIN_HOST_WHATIF_WINDOW_H
#define CTRAIN_HOST_WHATIF_WINDOW_H

#include <ctrain/ctrain.h>

/* What the batch and its rows share across cells: m_c h_c and m_c^2 per batch, row, channel. */
typedef struct whatif_window_batch {
    int64_t K, C, batches;
    float  *mh, *mm;             /* (batches, K, C) */
} whatif_window_batch;

/* One cell's part. */
typedef struct whatif_window {
    int64_t K, C, batches;
    double *v;                   /* (K, C) sum over batches of e^2 */
    float  *dh, *dm, *d;         /* (batches, K, C) d h_c, d m_c and d */
} whatif_window;

int32_t whatif_window_batch_open(whatif_window_batch *w, int64_t K, int64_t C, int64_t batches,
                                 ct_error *err);
void whatif_window_batch_close(whatif_window_batch *w);
int32_t whatif_window_open(whatif_window *w, int64_t K, int64_t C, int64_t batches, ct_error *err);
void whatif_window_close(whatif_window *w);

/* Row i (< K) of batch b: its reduced and exact values p, e (C), the softmax part m (C) and
 * the mean final hidden state hbar (C). wb may be NULL when another cell filled it. */
void whatif_window_add(whatif_window *w, whatif_window_batch *wb, int64_t b, int64_t i,
                       const double *p, const double *e, const double *m, const double *hbar);

/* Batch b's W slots (WHATIF_Y_WMEAN .. WHATIF_Y_WNORM2) of every row into y (K, WHATIF_N_Y),
 * with v = the mean of e^2 over the window's batches and eps Adam's epsilon. */
void whatif_window_rows(const whatif_window *w, const whatif_window_batch *wb, int64_t b,
                        double eps, double *y);

#endif /* CTRAIN_HOST_WHATIF_WINDOW_H */
