/* whatif_replay.h — `ctrain what-if`'s arithmetic: one gradient all-reduce over N would-be ranks
 * replayed element by element with the exact rounding of a precision policy and an order of
 * the threads engine (its own programs: plugins/comm/threads/orders.c and reduce.c are built
 * into the host for this), over a part of the buffer at a time, so memory is bounded by the
 * part, not by the buffer.
 * Not for: computing the ranks' gradients or the report (cli/what_if.c), the predictive model
 * (whatif_model.h).
 *
 * What is replayed is the reduction-error probe's (host/run/probe.c): rank n's local value x_n (bf16
 * as the policy keeps local gradients) is divided by f = ct_skit_predivide_factor(N), cast to
 * the policy's reduce dtype, all-reduced (one collective of the whole head, cut as the engine
 * cuts it: NCCL's split by default, the tuner model's pick with algo = nccl), and the result
 * divided by N / f:
 *   pure_bf16     the comm's bf16 all-reduce in the given order (every combine rounded to bf16)
 *   amp           the same in f32
 *   bf16_fp32acc  f32 sum in rank order of the bf16 values, rounded to bf16 once
 *   bf16_sr       the same bf16 all-reduce with every combine rounded stochastically
 *                 (ct_bf16_add_sr), as the threads engine runs the policy (ABI 1.5); its
 *                 random stream is the caller's, so its bits are the plugin's in
 *                 distribution, not one for one
 * and the exact value is e = (1/N) sum_n x_n in f64. */
#ifndef CTRAIN_HOST_WHATIF_REPLAY_H
#define CTRAIN_HOST_WHATIF_REPLAY_H

#include "../plugins/comm/threads/orders.h"

#include <ctrain/ctrain.h>

typedef enum whatif_policy {
    WHATIF_PURE_BF16 = 0,
    WHATIF_BF16_FP32ACC = 1,
    WHATIF_BF16_SR = 2,
    WHATIF_AMP = 3,
    WHATIF_N_POLICIES = 4,
} whatif_policy;

/* The policy's name ("pure_bf16", ...), and the policy of a name (-1: none). */
const char *whatif_policy_name(int32_t policy);
int32_t whatif_policy_parse(const char *name);

/* The algorithm's name as [comm] algo spells it ("ring", "dbtree", "hier", "tree", "nvls",
 * "nvls_tree", "nccl"), and back (-1: none). */
const char *whatif_algo_name(int32_t algo);
int32_t whatif_algo_parse(const char *name);

/* One replayer: N ranks, the order (checked with order_check), `count` elements in the whole
 * buffer (one all-reduce, planned as the threads engine plans it: orders.h), parts of at most
 * max_part elements. */
typedef struct whatif_replay {
    order_config  oc;
    int32_t       N, policy;
    uint64_t      count, max_part;
    uint64_t      base;       /* the replayed elements' first in the buffer (set_buffer) */
    order_plan    plan;       /* the all-reduce's split, in the policy's reduce dtype */
    order_step   *prog;       /* (order_max_steps(N)) */
    double       *scratch;    /* (REDUCE_SCRATCH) */
    void         *pre;        /* (N * max_part) pre-divided values in the reduce dtype */
    void         *out;        /* (max_part) the reduced values in the reduce dtype */
    const void  **srcs;       /* (N) */
} whatif_replay;

/* Open a replayer (its buffers: about N * max_part * 4 + count-independent bytes). Returns
 * CT_ERR_INVALID with order_check's message when the order does not fit N, CT_ERR_NOMEM. */
int32_t whatif_replay_open(whatif_replay *w, const order_config *oc, int32_t N, uint64_t count,
                           uint64_t max_part, int32_t policy, ct_error *err);
void whatif_replay_close(whatif_replay *w);

/* The replayed elements sit in a larger all-reduce: `buffer` elements in all (the collective
 * the plan is made for: its tuner pick and NCCL's split), the replayed element 0 at `base`
 * (buffer >= base + the count given to open). Parts keep the replayed elements' numbering. */
void whatif_replay_set_buffer(whatif_replay *w, uint64_t buffer, uint64_t base);

/* Elements [first, first + m) of the buffer (m <= max_part): x holds rank n's values of them at
 * x[n * m + i] (bf16 bits). Into p[i] the policy's reduced value (post-divided), into e[i] the
 * exact mean. sr_stream: the random stream of bf16_sr (ignored by the other policies). */
void whatif_replay_part(whatif_replay *w, uint64_t first, uint64_t m, const uint16_t *x,
                        uint64_t sr_stream, double *p, double *e);

#endif /* CTRAIN_HOST_WHATIF_REPLAY_H */
