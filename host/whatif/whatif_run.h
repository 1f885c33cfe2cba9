/* whatif_run.h — the run `ctrain what-if` replays: a checkpoint's model as rank 0 of a world of
 * one, its configuration, its loss terms, its next global batch(es) from the saved data position,
 * and the model's forward of one sequence (the head's input rows, the logits and their
 * log-sum-exp). Not for: gradients (whatif_grad.h), reductions (whatif_replay.h) or the report
 * (cli/what_if.c).
 *
 * Shapes: T tokens per sequence, C channels, V vocabulary rows. */
#ifndef CTRAIN_HOST_WHATIF_RUN_H
#define CTRAIN_HOST_WHATIF_RUN_H

#include "config/config.h"
#include "data/data.h"
#include "run/rank.h"
#include "plugin/registry.h"
#include "run/sample.h"

#include <limits.h>

typedef struct whatif_run {
    char           dir[PATH_MAX];
    int64_t        step, S, T;   /* checkpoint step; global batch S sequences of T tokens */
    int32_t        world;        /* the world size that saved the checkpoint */
    host_config   *cfg;
    host_registry *reg;
    host_rank      r;
    int            rank_ok;
    param_copy     pc;
    host_loader   *data;
    double         zcoef;        /* z-loss's coef in the run; 0 without z-loss */
    double         eps;          /* [optim] eps (AdamW's epsilon) */
    int32_t        bf16;         /* bf16 compute */
} whatif_run;

/* Open the checkpoint at path (a run folder: its newest) with a global batch of global_batch
 * sequences (0: the run's own). Errors name the file and say what to do. */
int32_t whatif_run_open(whatif_run *wr, const char *path, int64_t global_batch, ct_error *err);
void whatif_run_close(whatif_run *wr);

/* The forward of one sequence of T tokens: h (T, C) each token's final hidden state (rounded
 * to bf16 under bf16 compute, as the model stores it), logits (T, V) as the head made them, lse
 * (T) their log-sum-exp (the device's row statistics). With the model's hidden_rows (ABI 1.4):
 * one forward; without it, the forward of every prefix (mean_hidden of prefixes t and t - 1
 * gives row t - 1 to ~1e-7 |h|, and the prefix's last logits row is token t - 1's). */
int32_t whatif_run_forward(whatif_run *wr, const int32_t *tokens, float *h, float *logits,
                           double *lse, ct_error *err);

/* count[v] (V, zeroed by the caller): how often token v is a target in the whole train split. */
int32_t whatif_run_counts(whatif_run *wr, uint64_t *count, ct_error *err);

/* count[v] (V, zeroed by the caller): how often token v is a target in the next `batches` global
 * batches, the ones the replay will read (the loader is put back where it was). */
int32_t whatif_run_batch_counts(whatif_run *wr, int64_t batches, uint64_t *count, ct_error *err);

#endif /* CTRAIN_HOST_WHATIF_RUN_H */
