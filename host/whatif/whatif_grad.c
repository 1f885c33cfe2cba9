/* whatif_grad.c — the would-be ranks' local head gradients (see whatif_grad.h).
 * Not for: the model's forward (whatif.c) or the reduction replay (whatif_replay.c).
 */
#include "whatif/whatif_grad.h"

#include <ctrain/numerics.h>
#include <math.h>

/* logit[t, v] as the head's forward stores it. */
static float logit(const whatif_batch *b, int64_t t, int64_t v) {
    const float *h = b->h + t * b->C, *w = b->w + v * b->C;
    double s = 0;
    for (int64_t c = 0; c < b->C; c++) s += (double)h[c] * w[c];
    return b->bf16 ? ct_round_bf16((float)s) : (float)s;
}

void whatif_grad_lse(whatif_batch *b) {
    for (int64_t t = 0; t < b->n_tok; t++) {
        double mx = -INFINITY, s = 0;
        for (int64_t v = 0; v < b->V; v++) {
            double l = logit(b, t, v);
            if (l > mx) {
                s = s * exp(mx - l) + 1.0;
                mx = l;
            } else {
                s += exp(l - mx);
            }
        }
        b->lse[t] = mx + log(s);
    }
}

int64_t whatif_share_begin(int64_t n_tok, int32_t N, int32_t n) {
    return n_tok * n / N;
}

void whatif_grad_part(const whatif_batch *b, int32_t N, int64_t v0, int64_t vc, double *acc,
                      uint16_t *x) {
    int64_t C = b->C;
    for (int32_t n = 0; n < N; n++) {
        int64_t t0 = whatif_share_begin(b->n_tok, N, n), t1 = whatif_share_begin(b->n_tok, N, n + 1);
        double inv = t1 > t0 ? 1.0 / (double)(t1 - t0) : 0.0; /* the rank's mean over its tokens */
        for (int64_t i = 0; i < vc * C; i++) acc[i] = 0;
        for (int64_t t = t0; t < t1; t++) {
            const float *h = b->h + t * C;
            for (int64_t j = 0; j < vc; j++) {
                float p = expf((float)((double)logit(b, t, v0 + j) - b->lse[t]));
                double g = (double)p - (b->target[t] == v0 + j ? 1.0 : 0.0);
                g += b->zcoef * 2.0 * b->lse[t] * p;
                float d = (float)(g * inv);
                if (b->bf16) d = ct_round_bf16(d);
                for (int64_t c = 0; c < C; c++) acc[j * C + c] += (double)d * h[c];
            }
        }
        uint16_t *xn = x + (uint64_t)n * (uint64_t)(vc * C);
        for (int64_t i = 0; i < vc * C; i++) xn[i] = ct_bf16_from_f32((float)acc[i]);
    }
}
