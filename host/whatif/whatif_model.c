/* whatif_model.c — the predictive model of the head's logit push (see whatif_model.h and
 * docs/logit-growth.md, "A model of the push").
 * Not for: measuring anything (whatif_replay.c).
 */
#include "whatif/whatif_model.h"

#include "whatif/whatif_replay.h"

#include <math.h>

/* Small terms (in units of one rank's term) lost after the large term of a row whose token is
 * in the batch, for a row of probability q: see whatif_model.h. */
static double lost_terms(const whatif_model_in *in, double q) {
    int32_t N = in->N, G = in->gpus_per_node > 0 ? in->gpus_per_node : N;
    double qT = q * in->tokens_per_rank, tau = WHATIF_MODEL_TAU, M = (double)N / G;
    switch (in->algo) {
    case REDUCE_RING: return qT < tau ? (N - 1) / 2.0 : 0.0;
    case REDUCE_HIER: return (qT < tau ? (G - 1) / 2.0 : 0.0) + (G * qT < tau ? (M - 1) / 2.0 * G : 0.0);
    case REDUCE_NVLS: return G * qT < tau ? (M - 1) / 2.0 * G : 0.0; /* f32 inside the node */
    default: { /* trees: dbtree's chain inside the node, then sibling subtrees of 2^j nodes */
        int32_t g = in->algo == REDUCE_DBTREE ? G : 1;
        double lost = qT < tau ? (g - 1) / 2.0 : 0.0;
        if (in->algo == REDUCE_NVLS_TREE) g = G, lost = 0; /* the node's sum loses nothing */
        for (double s = g; s < N; s *= 2)
            if (s * qT < tau) lost += s;
        return lost;
    }
    }
}

/* The length of the longest chain of similar partial sums the order adds one by one. */
static double chain(const whatif_model_in *in) {
    int32_t N = in->N, G = in->gpus_per_node > 0 ? in->gpus_per_node : N;
    if (in->algo == REDUCE_RING) return N;
    if (in->algo == REDUCE_HIER) return (double)N / G > G ? (double)N / G : G;
    if (in->algo == REDUCE_NVLS) return (double)N / G;
    return 1;
}

double whatif_model_push(const whatif_model_in *in) {
    if (in->policy != WHATIF_PURE_BF16 || in->N < 2) return 0.0;
    double T_tot = in->N * in->tokens_per_rank, h = 0;
    for (int64_t v = 0; v < in->V; v++) h += 1.0 / (double)(v + 1);
    double swamp = 0;
    for (int64_t v = 0; v < in->V; v++) {
        double q = in->q ? in->q[v] : 1.0 / ((double)(v + 1) * h);
        if (q <= 0) continue;
        swamp += q * (1.0 - exp(-T_tot * q)) * lost_terms(in, q) / in->N;
    }
    double L = chain(in), stag = L > WHATIF_MODEL_KSTAR ? 1.0 - WHATIF_MODEL_KSTAR / L : 0.0;
    return in->hbar2 / (double)in->V * (WHATIF_MODEL_A * swamp + WHATIF_MODEL_B * stag);
}
