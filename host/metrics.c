/* metrics.c — per-rank metric tables and their JSON line (see metrics.h). */
#include "metrics.h"

#include <ctrain/ctrain.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static ct_metric *find(ct_metric_table *t, const char *name) {
    for (int32_t i = 0; i < t->n; i++)
        if (strcmp(t->items[i].name, name) == 0) return &t->items[i];
    return NULL;
}

void metrics_add(ct_metric_table *t, const char *name, double value, int32_t reduce) {
    ct_metric *m = find(t, name);
    if (!m) {
        if (t->n == CT_METRICS_MAX) {
            t->overflowed++;
            return;
        }
        m = &t->items[t->n++];
        snprintf(m->name, sizeof m->name, "%s", name);
        m->reduce = reduce;
        m->value = value;
        m->count = 1;
        return;
    }
    switch (m->reduce) {
    case CT_METRIC_MAX: m->value = value > m->value ? value : m->value; break;
    case CT_METRIC_MIN: m->value = value < m->value ? value : m->value; break;
    default: m->value += value; break;
    }
    m->count++;
}

double metrics_value(const ct_metric_table *t, const char *name) {
    for (int32_t i = 0; i < t->n; i++) {
        const ct_metric *m = &t->items[i];
        if (strcmp(m->name, name) != 0) continue;
        return m->reduce == CT_METRIC_MEAN ? m->value / (double)m->count : m->value;
    }
    return NAN;
}

void metrics_clear(ct_metric_table *t) {
    t->n = 0;
    t->overflowed = 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const ct_metric *)a)->name, ((const ct_metric *)b)->name);
}

void metrics_sort(ct_metric_table *t) { qsort(t->items, (size_t)t->n, sizeof t->items[0], by_name); }

void metrics_write_json(const ct_metric_table *t, int64_t step, FILE *out) {
    fprintf(out, "{\"step\": %lld", (long long)step);
    for (int32_t i = 0; i < t->n; i++) {
        double v = metrics_value(t, t->items[i].name);
        if (isfinite(v)) fprintf(out, ", \"%s\": %.17g", t->items[i].name, v);
        else fprintf(out, ", \"%s\": null", t->items[i].name);
    }
    fputs("}\n", out);
}
