/* whatif_replay.c — the reduction replay of `ctrain what-if` (see whatif_replay.h): the threads
 * engine's order programs run over parts of a buffer with the policy's rounding.
 * Not for: gradients, statistics or output (cli/what_if.c).
 */
#include "whatif/whatif_replay.h"

#include "../plugins/comm/threads/reduce.h"

#include <assert.h>
#include <ctrain/numerics.h>
#include <ctrain/strategy_kit.h>
#include <stdlib.h>
#include <string.h>

static const char *const policy_names[WHATIF_N_POLICIES] = {"pure_bf16", "bf16_fp32acc",
                                                            "bf16_sr", "amp"};
/* indexed by reduce_algo, as [comm] algo's choices */
static const char *const algo_names[REDUCE_N_ALGOS] = {"ring", "tree", "dbtree", "hier",
                                                       "nvls", "nvls_tree", "nccl"};

const char *whatif_policy_name(int32_t policy) {
    return policy >= 0 && policy < WHATIF_N_POLICIES ? policy_names[policy] : "?";
}

int32_t whatif_policy_parse(const char *name) {
    for (int32_t p = 0; p < WHATIF_N_POLICIES; p++)
        if (!strcmp(name, policy_names[p])) return p;
    return -1;
}

const char *whatif_algo_name(int32_t algo) {
    return algo >= 0 && algo < REDUCE_N_ALGOS ? algo_names[algo] : "?";
}

int32_t whatif_algo_parse(const char *name) {
    for (int32_t a = 0; a < REDUCE_N_ALGOS; a++)
        if (!strcmp(name, algo_names[a])) return a;
    return -1;
}

static int32_t reduce_dtype(int32_t policy) {
    return policy == WHATIF_AMP ? CT_DTYPE_F32 : CT_DTYPE_BF16;
}

void whatif_replay_close(whatif_replay *w) {
    free(w->prog);
    free(w->scratch);
    free(w->pre);
    free(w->out);
    free(w->srcs);
    memset(w, 0, sizeof *w);
}

int32_t whatif_replay_open(whatif_replay *w, const order_config *oc, int32_t N, uint64_t count,
                           uint64_t max_part, int32_t policy, ct_error *err) {
    memset(w, 0, sizeof *w);
    w->oc = *oc;
    char why[256];
    if (order_check(&w->oc, N, why, sizeof why) != 0)
        return ct_error_set(err, CT_ERR_INVALID, "%s", why);
    w->N = N;
    w->policy = policy;
    w->count = count;
    w->max_part = max_part;
    int32_t dt = reduce_dtype(policy);
    size_t es = ct_dtype_size(dt);
    w->prog = malloc((size_t)order_max_steps(N) * sizeof *w->prog);
    w->scratch = malloc(REDUCE_SCRATCH * sizeof *w->scratch);
    w->pre = malloc((size_t)N * max_part * es);
    w->out = malloc(max_part * es);
    w->srcs = malloc((size_t)N * sizeof *w->srcs);
    if (!w->prog || !w->scratch || !w->pre || !w->out || !w->srcs) {
        whatif_replay_close(w);
        return ct_error_set(err, CT_ERR_NOMEM, "what-if: out of memory for a replay at N = %d "
                            "(%llu elements per part)", (int)N, (unsigned long long)max_part);
    }
    order_plan_make(&w->plan, &w->oc, N, ORDER_ALL_REDUCE, count, (uint32_t)es, 1, 0);
    return CT_OK;
}

void whatif_replay_set_buffer(whatif_replay *w, uint64_t buffer, uint64_t base) {
    w->count = buffer;
    w->base = base;
    order_plan_make(&w->plan, &w->oc, w->N, ORDER_ALL_REDUCE, buffer,
                    (uint32_t)ct_dtype_size(reduce_dtype(w->policy)), 1, 0);
}

void whatif_replay_part(whatif_replay *w, uint64_t first, uint64_t m, const uint16_t *x,
                        uint64_t sr_stream, double *p, double *e) {
    int32_t N = w->N, dt = reduce_dtype(w->policy);
    float f = (float)ct_skit_predivide_factor(N);
    double post = ct_skit_postdivide_factor(N);
    for (uint64_t i = 0; i < m; i++) {
        double s = 0;
        for (int32_t n = 0; n < N; n++) s += ct_bf16_to_f32(x[(uint64_t)n * m + i]);
        e[i] = s / N;
    }
    /* pre-divided contributions in the reduce dtype, as the probe casts them */
    for (uint64_t j = 0; j < (uint64_t)N * m; j++) {
        float v = ct_bf16_to_f32(x[j]) / f;
        if (dt == CT_DTYPE_BF16) ((uint16_t *)w->pre)[j] = ct_bf16_from_f32(v);
        else ((float *)w->pre)[j] = v;
    }
    if (w->policy == WHATIF_BF16_FP32ACC) {
        const uint16_t *pre = w->pre;
        for (uint64_t i = 0; i < m; i++) {
            float acc = 0.0f;
            for (int32_t n = 0; n < N; n++) acc += ct_bf16_to_f32(pre[(uint64_t)n * m + i]);
            p[i] = ct_round_bf16(acc) / post;
        }
        return;
    }
    size_t es = ct_dtype_size(dt);
    for (uint64_t lo = first; lo < first + m;) {
        uint64_t b = 0, end = 0;
        int32_t steps = order_unit_at(&w->plan, w->base + lo, &b, &end, w->prog);
        end -= w->base; /* back to the replayed elements' numbering */
        uint64_t hi = end < first + m ? end : first + m;
        uint64_t off = lo - first, len = hi - lo;
        for (int32_t n = 0; n < N; n++)
            w->srcs[n] = (const char *)w->pre + ((uint64_t)n * m + off) * es;
        void *dst = w->out;
        reduce_sr sr = {sr_stream, lo, N}; /* bf16_sr: every combine rounded stochastically */
        reduce_arith ar = {dt, CT_REDUCE_SUM, N, w->policy == WHATIF_BF16_SR ? &sr : NULL};
        reduce_run(w->srcs, w->prog, steps, &dst, 1, len, &ar, w->scratch);
        for (uint64_t i = 0; i < len; i++)
            p[off + i] = (dt == CT_DTYPE_BF16 ? ct_bf16_to_f32(((uint16_t *)w->out)[i])
                                              : ((float *)w->out)[i]) / post;
        lo = hi;
    }
}
