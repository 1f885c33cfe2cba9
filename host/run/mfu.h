/* mfu.h — model FLOPs utilisation: the FLOPs of a training step per token (from the model's
 * description), the job's peak (the [device] peak_tflops key, else each rank's device), the
 * header line that names both and the BLAS, and the metrics of each log line ("mfu",
 * "model_tflops"; "flops_per_token" and "peak_tflops" on the first). Not for: the step's
 * timing (train.c measures tokens/s) or the measurement itself (the device plugin's
 * peak_flops). */
#ifndef CTRAIN_HOST_MFU_H
#define CTRAIN_HOST_MFU_H

#include "io/metrics.h"
#include "run/rank.h"

#include <ctrain/ctrain.h>
#include <stdint.h>
#include <stdio.h>

typedef struct mfu_state {
    double  flops_per_token; /* FLOPs of a training step (forward + backward) per token */
    double  peak_device;     /* FLOP/s per rank (mean over ranks); 0 = unknown */
    double  peak_total;      /* FLOP/s of the whole job (sum over ranks); 0 = unknown */
    int32_t logged;          /* log lines written so far (the first carries the constants) */
} mfu_state;

/* FLOPs per token of a training step for sequences of T tokens: the model's own count
 * (d->flops_per_token_fixed + d->flops_per_token_per_t * T) when it gives one, else
 * 6 * d->n_params. *from_model (may be NULL) says which. */
double mfu_flops_per_token(const ct_model_desc *d, int64_t T, int32_t *from_model);

/* Collective (every rank calls it once, before step 1): computes the FLOPs per token for
 * [data] seq_len, asks the rank's device for its peak (peak_flops; the cpu device measures
 * for about 0.05 s) and combines the ranks' peaks; [device] peak_tflops > 0 replaces the
 * device's figure (TFLOP/s per rank). When `out` is non-NULL (rank 0) prints one line naming
 * the FLOP count, the peak and where it comes from, and the BLAS, then any warning of the
 * device (both to `out`). A device that cannot give a figure leaves MFU unknown (null in
 * metrics.jsonl, "n/a" on the console), never an error; errors are the comm's. */
int32_t mfu_open(host_rank *r, mfu_state *m, FILE *out, ct_error *err);

/* Add this log line's "model_tflops" (tokens_per_s summed over ranks x FLOPs per token,
 * TFLOP/s) and "mfu" (that / the job's peak; NaN when unknown) to `out`; the first call also
 * adds "flops_per_token" and "peak_tflops" (per rank; NaN when unknown). */
void mfu_add_metrics(mfu_state *m, double tokens_per_s, host_metric_table *out);

/* The console's "MFU 12.3%" (or "MFU n/a") for tokens_per_s summed over ranks, into buf. */
void mfu_format(const mfu_state *m, double tokens_per_s, char *buf, size_t cap);

#endif /* CTRAIN_HOST_MFU_H */
