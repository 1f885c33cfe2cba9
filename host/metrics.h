/* metrics.h — per-rank metric tables: plugins and the loop add named scalars during a log
 * interval; at a log step the loop combines them over ranks and writes one JSON line.
 * Not for: the console line (loop.c prints it) or plotting (plot.c). */
#ifndef CTRAIN_HOST_METRICS_H
#define CTRAIN_HOST_METRICS_H

#include <stdint.h>
#include <stdio.h>

#define CT_METRIC_NAME_MAX 80
#define CT_METRICS_MAX 256

typedef struct ct_metric {
    char    name[CT_METRIC_NAME_MAX];
    double  value;  /* running sum (MEAN, SUM) or extreme (MAX, MIN) */
    int64_t count;  /* reports folded in (MEAN divides by it) */
    int32_t reduce; /* a ct_metric_reduce */
} ct_metric;

typedef struct ct_metric_table {
    ct_metric items[CT_METRICS_MAX];
    int32_t   n;
    int32_t   overflowed; /* reports dropped because the table was full */
} ct_metric_table;

/* Fold one report into the table (MEAN: averaged over reports; SUM: summed; MAX/MIN). */
void metrics_add(ct_metric_table *t, const char *name, double value, int32_t reduce);

/* The value after folding (MEAN divided by its count); NAN when absent. */
double metrics_value(const ct_metric_table *t, const char *name);

void metrics_clear(ct_metric_table *t);

/* Sort by name, so every rank's table lists the same names in the same order. */
void metrics_sort(ct_metric_table *t);

/* Append {"step": step, name: value, ...} as one line; NaN/Inf are written as null. */
void metrics_write_json(const ct_metric_table *t, int64_t step, FILE *out);

#endif /* CTRAIN_HOST_METRICS_H */
