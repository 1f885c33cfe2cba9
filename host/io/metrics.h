/* metrics.h — per-rank metric tables: plugins and the loop add named scalars during a log
 * interval; at a log step the loop combines them over ranks and writes one JSON line to
 * OUT/metrics.jsonl with checked writes (a line is on disk whole or not at all), and with
 * [run] tensorboard the same scalars at the same step to OUT/tb/ (tensorboard.h).
 * Not for: the console line (train.c prints it), reading the file back (jsonl.c) or plotting
 * (plot.c). */
#ifndef CTRAIN_HOST_METRICS_H
#define CTRAIN_HOST_METRICS_H

#include "io/tensorboard.h"

#include <ctrain/ctrain.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define HOST_METRIC_NAME_MAX 80
#define HOST_METRICS_MAX 256

typedef struct host_metric {
    char    name[HOST_METRIC_NAME_MAX];
    double  value;  /* running sum (MEAN, SUM) or extreme (MAX, MIN) */
    int64_t count;  /* reports folded in (MEAN divides by it) */
    int32_t reduce; /* a ct_metric_reduce */
} host_metric;

typedef struct host_metric_table {
    host_metric items[HOST_METRICS_MAX];
    int32_t   n;
    int32_t   overflowed; /* reports dropped because the table was full */
} host_metric_table;

/* Fold one report into the table (MEAN: averaged over reports; SUM: summed; MAX/MIN). */
void metrics_add(host_metric_table *t, const char *name, double value, int32_t reduce);

/* The value after folding (MEAN divided by its count); NAN when absent. */
double metrics_value(const host_metric_table *t, const char *name);

void metrics_clear(host_metric_table *t);

/* Sort by name, so every rank's table lists the same names in the same order. */
void metrics_sort(host_metric_table *t);

/* Append {"step": step, name: value, ...} as one line; NaN/Inf are written as null. */
void metrics_write_json(const host_metric_table *t, int64_t step, FILE *out);

/* OUT/metrics.jsonl, open for appending whole lines. */
typedef struct metrics_file {
    int       fd;         /* -1 when closed */
    off_t     length;     /* bytes of whole lines written so far */
    char      path[4096];
    tb_writer tb;         /* OUT/tb/'s event file; fd -1 without [run] tensorboard */
} metrics_file;

/* Open DIR/metrics.jsonl. keep_through_step < 0: a new, empty file. Otherwise (a resume) the
 * file keeps only its whole lines whose "step" is <= keep_through_step, in order: rewritten
 * through DIR/metrics.jsonl.PID.tmp, fsync'd and renamed over it (a missing file starts
 * empty). Errors (CT_ERR_IO) name the file and the system's reason. */
int32_t metrics_file_open(metrics_file *mf, const char *dir, int64_t keep_through_step,
                          ct_error *err);

/* Also write every line's scalars to a new TensorBoard event file in DIR/tb (after a resume
 * from keep_through_step >= 0, TensorBoard is told to drop the later steps of earlier files). */
int32_t metrics_file_tensorboard(metrics_file *mf, const char *dir, int64_t keep_through_step,
                                 ct_error *err);

/* Append the table's JSON line (metrics_write_json's format) with one checked write and no
 * buffering left behind, then its scalars as one TensorBoard event when that is on. On failure
 * (a full disk, an I/O error) the partial line is cut off again so the file holds whole lines
 * only, and err names the file and strerror. */
int32_t metrics_file_write(metrics_file *mf, const host_metric_table *t, int64_t step,
                           ct_error *err);

/* fsync and close; CT_ERR_IO when either fails. Safe on a closed file. */
int32_t metrics_file_close(metrics_file *mf, ct_error *err);

#endif /* CTRAIN_HOST_METRICS_H */
