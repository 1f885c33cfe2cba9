/* whatif_model.c — the predictive model of the head's logit push (see whatif_model.h and
 * docs/logit-growth.md, "A model of the push").
 * Not for: measuring anything (whatif_replay.c).
 */
#include "whatif_model.h"

#include "whatif_replay.h"

#include <math.h>

double whatif_model_roundings(int32_t N, int32_t algo, int32_t gpus_per_node) {
    int32_t g = gpus_per_node > 0 && gpus_per_node <= N ? gpus_per_node : N;
    double nodes = (double)N / g;
    switch (algo) {
    case REDUCE_RING: return N - 1;
    case REDUCE_HIER: return (g - 1) + (nodes - 1);
    case REDUCE_DBTREE: return (g - 1) + ceil(log2(nodes > 1 ? nodes : 1)) + 1;
    default: return ceil(log2((double)N));
    }
}

double whatif_model_push(int32_t N, int64_t V, int64_t C, double tokens_per_rank, int32_t algo,
                         int32_t gpus_per_node, int32_t policy, double hnorm2, double gscale) {
    (void)N, (void)V, (void)C, (void)tokens_per_rank, (void)algo, (void)gpus_per_node;
    (void)policy, (void)hnorm2, (void)gscale;
    return NAN;
}
