/* rank.h — everything one rank owns during a run: its plugin instances (device, comm,
 * precision, strategy, model, loss terms, optimizer), the model's description, the step's
 * buffers and the optimizer's state buffers. One host_rank per rank thread (threads engine) or per process (mpi).
 * Not for: the step's logic (step.c), the optimizer (optim.c) or the run's driver (train.c). */
#ifndef CTRAIN_HOST_RANK_H
#define CTRAIN_HOST_RANK_H

#include "plugin/calls.h"
#include "config/config.h"
#include "data/data.h"
#include "data/mixture.h"
#include "plugin/hostapi.h"
#include "io/metrics.h"
#include "plugin/registry.h"
#include "plugin/wiring.h"

#include <ctrain/ctrain.h>

#define HOST_MAX_LOSS 16

/* One plugin instance with its host context. */
typedef struct host_instance {
    const host_plugin *plugin;
    const void      *vt;   /* the kind's vtable, zero-extended host copy */
    void            *self;
    ct_host          host;
} host_instance;

/* Per-unit optimizer state for this rank's shard (device memory). */
typedef struct host_unit_state {
    uint64_t numel;       /* the model's unit length (before strategy padding) */
    float   *state[CT_OPTIM_MAX_STATE]; /* (shard numel) the optimizer plugin's buffers, in the
                                           order of its state_names (adamw: m, v) */
    uint8_t *decay_mask;  /* (shard numel) 1 = weight decay applies */
    ct_optim_tensor *tensors; /* (the unit's n_tensors) the tensors as the optimizer sees them */
    void    *comp;        /* (shard numel) the master's compensation buffer in its dtype (a
                             bf16 master with the kahan rule, master.h); NULL otherwise */
} host_unit_state;

typedef struct host_rank {
    int32_t          rank, world;
    const host_config *cfg;
    host_metric_table  metrics;  /* reports of the current log interval */

    host_instance      device, comm, precision, strategy, model;
    host_instance      loss[HOST_MAX_LOSS];
    host_instance      optimizer;  /* ABI 1.7: the update of the shards (optim.c) */
    uint32_t           n_state;    /* its per-element state buffers (0 .. CT_OPTIM_MAX_STATE) */
    const char *const *state_names;
    char             loss_name[HOST_MAX_LOSS][64];
    int32_t          n_loss;
    ct_device_ref    dev;
    ct_comm_ref      comm_ref;
    ct_precision_policy policy;
    double           loss_scale; /* the policy's loss scale of this step (optim.c); 0 = 1 */
    ct_model_desc    mdesc;
    int32_t          no_init_from; /* setup skips [model] init_from (a checkpoint follows) */
    host_unit_state   *units;    /* (n_units) */
    /* a master dtype other than f32 (master.h): the f32 scratch the optimizer updates (device
     * memory) and its host staging, master_cap elements each (the largest shard); [run] seed,
     * which the stochastic rounding of the master hashes and ct_stage_args.seed carries */
    float           *master_scratch, *master_hf;
    uint16_t        *master_hw, *master_hc;
    uint64_t         master_cap;
    uint64_t         seed;
    const void     **held;     /* (n_units) gathered params of units held by the strategy */

    /* step shape */
    int64_t B, T, V, N, grad_accum;

    /* logits by row ranges (ABI 1.3, step.c): rows of one range, 0 = the whole micro-batch;
     * whether training and evaluation take that path (the model's head and every loss term
     * support ranges; training also needs an f32 gradient accumulation dtype); why not, for
     * the start-up line ("" when both do) */
    int64_t  chunk_rows;
    int32_t  chunk_train, chunk_eval;
    char     chunk_why[160];

    /* step buffers (device memory) */
    int32_t *tokens, *targets;    /* (B,T) */
    float   *logits, *dlogits;    /* (logit_rows,V): one range, or (N,V) on the whole path */
    int64_t  logit_rows;          /* rows the logits buffer holds (dlogits: the same) */
    float   *probs;               /* (chunk_rows,V) each row's softmax from the device's
                                     row_softmax on the ranges path; NULL without it */
    float   *row_max, *row_lse;   /* (N) */
    /* host staging */
    int32_t *h_tokens, *h_targets; /* (B,T) */

    host_loader *train_data, *val_data; /* train_data NULL when [data] train is a mixture: */
    host_mixture *train_mix;            /* its loader (mixture.h), else NULL */
    int64_t    eval_batches; /* micro-batches per evaluation: [run] eval_batches, or all that
                                the validation data holds when the default (8) is more */
    int32_t    probe_now; /* run the reduction-error probe in this step (probe.h) */
    int64_t    step;      /* the step being run (1-based; set by the driver), for messages and
                             ct_stage_args.step */
    const host_model_source *model_source; /* the wiring's: [model] init_from = a checkpoint */
    int32_t    training;  /* inside step_train: ct_stage_args.train = 1 */
    int32_t    doc_mask;  /* [data] doc_mask: ct_stage_args.doc_mask for training, evaluation and
                             `ctrain logits` (rank.c, resolve_doc_mask) */
    int32_t    eot_token; /* the document separator when doc_mask */
    int64_t    updates_skipped; /* optimizer updates the precision policy skipped since the run
                                   began (checkpointed in precision.bin): the optimizer's step
                                   counts only updates applied, as torch's optimizers do */
    int32_t    is_root_unit_shared; /* informational */
} host_rank;

/* A call into one of rank r's plugins, recorded for fault reports (calls.h): RANK_DEV(r, copy,
 * dst, src, ...) is r->dev.vt->copy(r->dev.self, dst, src, ...) with the calling thread's
 * record naming device NAME and "copy" while it runs; the _VOID forms for members that return
 * nothing. */
#define RANK_CALL(inst, vtype, member, ...)                                                    \
    CALLS((inst).plugin, #member, ((const vtype *)(inst).vt)->member((inst).self, __VA_ARGS__))
#define RANK_CALL_VOID(inst, vtype, member, ...)                                               \
    CALLS_VOID((inst).plugin, #member,                                                         \
               ((const vtype *)(inst).vt)->member((inst).self, __VA_ARGS__))
#define RANK_DEV(r, member, ...) RANK_CALL((r)->device, ct_device_vtable, member, __VA_ARGS__)
#define RANK_DEV_VOID(r, member, ...)                                                          \
    RANK_CALL_VOID((r)->device, ct_device_vtable, member, __VA_ARGS__)
#define RANK_COMM(r, member, ...) RANK_CALL((r)->comm, ct_comm_vtable, member, __VA_ARGS__)
#define RANK_COMM_VOID(r, member, ...)                                                         \
    RANK_CALL_VOID((r)->comm, ct_comm_vtable, member, __VA_ARGS__)
#define RANK_PRECISION(r, member, ...)                                                         \
    RANK_CALL((r)->precision, ct_precision_vtable, member, __VA_ARGS__)
#define RANK_STRATEGY(r, member, ...)                                                          \
    RANK_CALL((r)->strategy, ct_strategy_vtable, member, __VA_ARGS__)
#define RANK_MODEL(r, member, ...) RANK_CALL((r)->model, ct_model_vtable, member, __VA_ARGS__)
#define RANK_OPTIMIZER(r, member, ...)                                                         \
    RANK_CALL((r)->optimizer, ct_optimizer_vtable, member, __VA_ARGS__)
#define RANK_LOSS(r, i, member, ...)                                                           \
    RANK_CALL((r)->loss[i], ct_loss_vtable, member, __VA_ARGS__)

/* Create every plugin instance of rank `rank` of `world` from the wiring, set up the strategy
 * with freshly initialised parameters, allocate buffers and open the data. comm_world is the
 * shared world of an in-process engine or NULL. On failure everything made so far is
 * destroyed and err says what failed. */
int32_t rank_open(host_rank *r, const host_config *cfg, const host_wiring *w, int32_t rank,
                  int32_t world, void *comm_world, ct_error *err);
/* The optimizer's parameter groups of the configured model (groups_print), one line
 * each into out: the instances are created as rank_dry_open does (with `comm` as every
 * create()'s comm reference), the model described, everything destroyed. */
int32_t rank_print_groups(const host_config *cfg, const host_wiring *w, ct_comm_ref comm,
                          FILE *out, ct_error *err);

/* Destroy everything; r->rank and r->world stay readable (for error reports). */
void rank_close(host_rank *r);

/* A rank for inference (`ctrain sample`): rank 0 of world 1 with the wiring's engines (the
 * caller wires a world-1 comm), parameters freshly initialised as rank_open does, the model
 * prepared for B = 1 sequence of its whole context (r->T = max_seq_len) and step buffers of
 * that shape; no data is opened ([data] need not exist). `for_checkpoint`: the caller loads a
 * checkpoint's weights next, so [model] init_from is not read (its file need not exist any
 * more). On failure everything is destroyed. */
int32_t rank_open_model(host_rank *r, const host_config *cfg, const host_wiring *w,
                        int for_checkpoint, ct_error *err);

/* What rank_open checks, without a comm instance, parameters or step buffers (preflight.h):
 * creates device, precision (and its policy), strategy, model (and describe()s it) and loss
 * terms exactly as rank_open does, for rank comm.rank of `world`, with `comm` as every
 * create()'s comm reference (it must hold rank and world_size: no engine is asked); checks
 * [data] seq_len against the model; runs the strategy's setup() with the policy on units of one
 * element (what it refuses about the policy, it refuses here as in train); opens [data] train
 * and val with the model's vocabulary as the token limit; then destroys everything. On failure
 * *failed names the step: "plugins" (a create, describe, policy or setup),
 * "init_from" ([model] init_from checked against the model: import.h),
 * "shape", "train" or "val" (NULL on success) and err holds rank_open's message. */
int32_t rank_dry_open(const host_config *cfg, const host_wiring *w, int32_t world, ct_comm_ref comm,
                      const char **failed, ct_error *err);

/* Stage s's unit uses: first/last forward stage index of each unit (host-side bookkeeping). */
int32_t rank_unit_first_stage(const host_rank *r, uint32_t u);
int32_t rank_unit_last_stage(const host_rank *r, uint32_t u);

#endif /* CTRAIN_HOST_RANK_H */
