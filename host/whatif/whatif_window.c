/* whatif_window.c — AdamW's running second moment over the replayed batches (see
 * whatif_window.h). Not for: the same batch's view or the estimators (whatif_sample.c).
 */
#include "whatif/whatif_window.h"

#include "whatif/whatif_sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int32_t whatif_window_batch_open(whatif_window_batch *w, int64_t K, int64_t C, int64_t batches,
                                 ct_error *err) {
    memset(w, 0, sizeof *w);
    size_t n = (size_t)(batches * K * C);
    w->K = K, w->C = C, w->batches = batches;
    w->mh = calloc(n, sizeof *w->mh);
    w->mm = calloc(n, sizeof *w->mm);
    if (!w->mh || !w->mm) {
        whatif_window_batch_close(w);
        return ct_error_set(err, CT_ERR_NOMEM, "what-if: out of memory for the running second "
                            "moment (%.0f MB) ---> fewer --rows or --batches",
                            (double)n * 8e-6);
    }
    return CT_OK;
}

void whatif_window_batch_close(whatif_window_batch *w) {
    free(w->mh);
    free(w->mm);
    memset(w, 0, sizeof *w);
}

int32_t whatif_window_open(whatif_window *w, int64_t K, int64_t C, int64_t batches, ct_error *err) {
    memset(w, 0, sizeof *w);
    size_t n = (size_t)(batches * K * C);
    w->K = K, w->C = C, w->batches = batches;
    w->v = calloc((size_t)(K * C), sizeof *w->v);
    w->dh = calloc(n, sizeof *w->dh);
    w->dm = calloc(n, sizeof *w->dm);
    w->d = calloc(n, sizeof *w->d);
    if (!w->v || !w->dh || !w->dm || !w->d) {
        whatif_window_close(w);
        return ct_error_set(err, CT_ERR_NOMEM, "what-if: out of memory for the running second "
                            "moment (%.0f MB per replay) ---> fewer --rows, --batches or cells",
                            (double)n * 12e-6);
    }
    return CT_OK;
}

void whatif_window_close(whatif_window *w) {
    free(w->v);
    free(w->dh);
    free(w->dm);
    free(w->d);
    memset(w, 0, sizeof *w);
}

void whatif_window_add(whatif_window *w, whatif_window_batch *wb, int64_t b, int64_t i,
                       const double *p, const double *e, const double *m, const double *hbar) {
    int64_t C = w->C, at = (b * w->K + i) * C;
    for (int64_t c = 0; c < C; c++) {
        double d = p[c] - e[c];
        w->v[i * C + c] += e[c] * e[c];
        w->dh[at + c] = (float)(d * hbar[c]);
        w->dm[at + c] = (float)(d * m[c]);
        w->d[at + c] = (float)d;
        if (wb) {
            wb->mh[at + c] = (float)(m[c] * hbar[c]);
            wb->mm[at + c] = (float)(m[c] * m[c]);
        }
    }
}

void whatif_window_rows(const whatif_window *w, const whatif_window_batch *wb, int64_t b,
                        double eps, double *y) {
    int64_t C = w->C;
    double B = (double)w->batches;
    for (int64_t i = 0; i < w->K; i++) {
        int64_t at = (b * w->K + i) * C;
        double am = 0, al = 0, zp = 0, zm = 0, a2 = 0;
        for (int64_t c = 0; c < C; c++) {
            double rms = sqrt(w->v[i * C + c] / B) + eps; /* Adam's sqrt(v) + eps */
            am -= w->dh[at + c] / rms;
            a2 += (double)w->d[at + c] * w->d[at + c] / (rms * rms);
            al -= w->dm[at + c] / rms;
            zp += 2.0 * wb->mm[at + c] / rms;
            zm += 2.0 * wb->mh[at + c] / rms;
        }
        double *yi = y + i * WHATIF_N_Y;
        yi[WHATIF_Y_WMEAN] = am, yi[WHATIF_Y_WLSE] = al;
        yi[WHATIF_Y_WZPULL] = zp, yi[WHATIF_Y_WZMEAN] = zm;
        yi[WHATIF_Y_WNORM2] = a2 / (double)C;
    }
}
