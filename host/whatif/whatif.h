/* whatif.h — what the parts of `ctrain what-if` share: its options and its cells (one replay
 * of one world size, order and policy, with its estimator). The command is cli/what_if.c;
 * the whole replay whatif_cells.c, the sampled one (--rows) whatif_rows.c.
 * Not for: the arithmetic (whatif_grad.h, whatif_replay.h, whatif_sample.h) or the run
 * (whatif_run.h).
 */
#ifndef CTRAIN_HOST_WHATIF_H
#define CTRAIN_HOST_WHATIF_H

#include "whatif/order_args.h"
#include "whatif/whatif_buffer.h"
#include "whatif/whatif_replay.h"
#include "whatif/whatif_run.h"
#include "whatif/whatif_sample.h"
#include "whatif/whatif_window.h"

#define WHATIF_MAX_LIST 16

/* --stratify: how the sampled rows are grouped (cli/what_if.c, stratum_keys) */
typedef enum whatif_stratify {
    WHATIF_STRAT_UNIFORM = 0, /* one stratum */
    WHATIF_STRAT_BATCH = 1,   /* by the token's count in the replayed batches (x4 bins) */
    WHATIF_STRAT_FREQ = 2,    /* by its count in the train split (x4 bins) */
} whatif_stratify;
extern const char *const whatif_stratify_names[]; /* NULL-ended, by whatif_stratify */

/* --scan: what the world sizes keep fixed (cli/what_if.c) */
typedef enum whatif_scan {
    WHATIF_SCAN_GLOBAL = 0,   /* the global batch: tokens per rank fall as 1/N */
    WHATIF_SCAN_PER_RANK = 1, /* the tokens per rank: the global batch grows as N */
} whatif_scan;
extern const char *const whatif_scan_names[]; /* NULL-ended, by whatif_scan */

typedef struct whatif_opts {
    const char  *path, *per_row;
    int32_t      worlds[WHATIF_MAX_LIST], n_worlds;
    int32_t      algos[REDUCE_N_ALGOS], n_algos;
    int32_t      policies[WHATIF_N_POLICIES], n_policies;
    int64_t      batches, global_batch;
    int64_t      rows;           /* --rows K: replay K sampled rows (0: every row) */
    int32_t      stratify;       /* --stratify: a whatif_stratify */
    int64_t      sample_seed;    /* --sample-seed */
    double       lr, zcoef;      /* --lr (0: no AdamW view), --zloss-coef of the balance */
    int32_t      scan;           /* --scan: a whatif_scan */
    int32_t      per_batch;      /* --per-batch: print each batch's figures */
    order_config oc;             /* the order options (algo: each of algos) */
    uint64_t     bucket_bytes;   /* --bucket-bytes: the head's DDP bucket (0: none) */
    const whatif_fsdp_model *fsdp; /* --fsdp-units: the head's FSDP unit's model (NULL: none) */
} whatif_opts;

/* One (world size, algo, policy) replay. */
typedef struct whatif_cell {
    int32_t       N, algo, policy;
    whatif_replay rp;
    whatif_est    est;           /* per-row values of the batch, the figures and their errors */
    double        pred;          /* the model's prediction, summed over batches */
    double       *row_y;         /* (rows, WHATIF_N_Y) per-row sums over batches, --per-row */
    whatif_window win;           /* the running second moment (--lr with --batches >= 2) */
    whatif_window_batch *wb;     /* what the cells' windows share (NULL: no window) */
} whatif_cell;

/* The threads engine's order config of algo under the options. */
order_config whatif_order_of(const whatif_opts *o, int32_t algo);

/* Open cl's replayer for a head of `head` elements in parts of max_part, in the buffer the
 * options give (--bucket-bytes, --fsdp-units: whatif_buffer.h; else the head alone). */
int32_t whatif_cell_replay_open(const whatif_opts *o, whatif_cell *cl, uint64_t head,
                                uint64_t max_part, ct_error *err);

/* The cells of batch b: after each row's y is in cl->est.y, its figures and --per-row sums. */
void whatif_cells_batch(const whatif_opts *o, whatif_cell *cells, int32_t n_cells,
                        const whatif_strata *s, int64_t V, int64_t b);

/* Row i of batch b into a cell's running second moment (nothing when the cell has none). */
void whatif_cells_window_add(whatif_cell *cl, int64_t b, int64_t i, const double *p,
                             const double *e, const double *m, const double *hbar);

/* Once every batch is in: the running-second-moment figures (WHATIF_F_W*) of every cell that
 * keeps a window. eps: Adam's epsilon. */
void whatif_cells_window(const whatif_opts *o, whatif_cell *cells, int32_t n_cells,
                         const whatif_strata *s, int64_t V, double eps);

/* The sampled replay (--rows): o->batches batches of the run, each streamed sequence by
 * sequence through the model, every world size's local gradients of the rows in s formed as
 * the tokens pass, then replayed row by row in each cell (cells are grouped by world size,
 * n_group cells per world size, in the order of o->worlds). hbar2: |hbar|^2 averaged over the
 * batches; secs[3]: seconds in the forward, the local gradients and the replays. */
int32_t whatif_rows_run(const whatif_opts *o, whatif_run *wr, whatif_cell *cells,
                        int32_t n_cells, int32_t n_group, const whatif_strata *s,
                        const double *q, double *hbar2, double *secs, ct_error *err);

/* The predictive model's value for one cell and batch (whatif_model.h); count: the head's
 * elements (V x C), for the order algo = nccl picks. */
double whatif_cell_prediction(const whatif_opts *o, const whatif_cell *cl, int64_t V,
                              uint64_t count, double tokens_per_rank, double hbar2,
                              const double *q);

/* The whole replay (no --rows): o->batches batches of the run, each batch's hidden states and
 * logits held, every cell replayed over every row of the head (whatif_cells.c; arguments as
 * whatif_rows_run's). */
int32_t whatif_whole_run(const whatif_opts *o, whatif_run *wr, whatif_cell *cells,
                         int32_t n_cells, int32_t n_group, const whatif_strata *s,
                         const double *q, double *hbar2, double *secs, ct_error *err);

/* Seconds of a monotonic clock. */
double whatif_now(void);

#endif /* CTRAIN_HOST_WHATIF_H */
