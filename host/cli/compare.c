/* compare.c — `ctrain compare RUN_DIR... [--csv]`: one row per run with the figures of the
 * logit-norm study: world size; final and max of logit_norm_mean, logit_max_abs, lse_mean and
 * head_weight_norm; final train loss, final val loss, median tokens/s. "final" is the last
 * logged finite value; a figure a run does not have prints as "-" (empty in CSV).
 * Not for: reading metrics files (jsonl.c) or drawing them (plot.c).
 */
#include "cli/commands.h"
#include "base/printable.h"
#include "cli/runlog.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMPARE_MAX_RUNS 256

/* The metrics shown with their final and max values. */
static const char *const tracked[] = {"logit_norm_mean", "logit_max_abs", "lse_mean",
                                      "head_weight_norm"};
#define N_TRACKED ((int)(sizeof tracked / sizeof *tracked))

typedef struct run_row {
    double world;
    double final_[N_TRACKED], max_[N_TRACKED];
    double loss, val_loss, tokens_median;
} run_row;

/* Last finite value of key in log, or NAN. */
static double last_of(const run_log *log, const char *key) {
    double v;
    for (int32_t i = log->n_records - 1; i >= 0; i--)
        if (jsonl_get(&log->records[i], key, &v) && isfinite(v)) return v;
    return NAN;
}

/* Max of the finite values of key, or NAN when there are none. */
static double max_of(const run_log *log, const char *key) {
    double best = NAN, v;
    for (int32_t i = 0; i < log->n_records; i++)
        if (jsonl_get(&log->records[i], key, &v) && isfinite(v) && !(v <= best)) best = v;
    return best;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of the finite values of key (mean of the middle two for an even count), or NAN. */
static double median_of(const run_log *log, const char *key) {
    double *v = malloc((size_t)(log->n_records ? log->n_records : 1) * sizeof *v), x, med = NAN;
    if (!v) return NAN;
    int32_t n = 0;
    for (int32_t i = 0; i < log->n_records; i++)
        if (jsonl_get(&log->records[i], key, &x) && isfinite(x)) v[n++] = x;
    if (n) {
        qsort(v, (size_t)n, sizeof *v, cmp_double);
        med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    }
    free(v);
    return med;
}

static run_row summarize(const run_log *log) {
    run_row r;
    r.world = last_of(log, "world_size");
    for (int k = 0; k < N_TRACKED; k++) {
        r.final_[k] = last_of(log, tracked[k]);
        r.max_[k] = max_of(log, tracked[k]);
    }
    r.loss = last_of(log, "loss");
    r.val_loss = last_of(log, "val/loss");
    r.tokens_median = median_of(log, "tokens_per_s");
    return r;
}

/* A number in a field of `width` ("-" when NAN); CSV: bare, empty when NAN. */
static void cell(double v, int width, int csv) {
    if (csv) {
        if (isfinite(v)) printf(",%.9g", v);
        else fputc(',', stdout);
    } else if (isfinite(v)) {
        printf(" %*.5g", width, v);
    } else {
        printf(" %*s", width, "-");
    }
}

/* A CSV field, quoted when it holds a comma or a quote. */
static void csv_text(const char *s) {
    if (!strpbrk(s, ",\"\n")) {
        fputs(s, stdout);
        return;
    }
    fputc('"', stdout);
    for (; *s; s++) {
        if (*s == '"') fputc('"', stdout);
        fputc(*s, stdout);
    }
    fputc('"', stdout);
}

static void print_csv(const run_log *logs, const run_row *rows, int32_t n) {
    printf("run,world_size");
    for (int k = 0; k < N_TRACKED; k++) printf(",%s_final,%s_max", tracked[k], tracked[k]);
    printf(",loss_final,val_loss_final,tokens_per_s_median\n");
    for (int32_t i = 0; i < n; i++) {
        csv_text(logs[i].name);
        cell(rows[i].world, 0, 1);
        for (int k = 0; k < N_TRACKED; k++) {
            cell(rows[i].final_[k], 0, 1);
            cell(rows[i].max_[k], 0, 1);
        }
        cell(rows[i].loss, 0, 1);
        cell(rows[i].val_loss, 0, 1);
        cell(rows[i].tokens_median, 0, 1);
        fputc('\n', stdout);
    }
}

static void print_table(const run_log *logs, const run_row *rows, int32_t n) {
    int name_w = 3;
    for (int32_t i = 0; i < n; i++) {
        int len = (int)strlen(logs[i].name);
        if (len > name_w) name_w = len;
    }
    const int w = 10; /* each number */
    /* Header line 1: metric names over their final/max pair. */
    printf("%-*s %5s", name_w, "run", "world");
    for (int k = 0; k < N_TRACKED; k++) printf(" %-*s", 2 * w + 1, tracked[k]);
    printf(" %*s %*s %*s\n", w, "loss", w, "val/loss", w, "tokens/s");
    printf("%-*s %5s", name_w, "", "");
    for (int k = 0; k < N_TRACKED; k++) printf(" %*s %*s", w, "final", w, "max");
    printf(" %*s %*s %*s\n", w, "final", w, "final", w, "median");
    for (int32_t i = 0; i < n; i++) {
        printf("%-*s", name_w, logs[i].name);
        if (isfinite(rows[i].world)) printf(" %5.0f", rows[i].world);
        else printf(" %5s", "-");
        for (int k = 0; k < N_TRACKED; k++) {
            cell(rows[i].final_[k], w, 0);
            cell(rows[i].max_[k], w, 0);
        }
        cell(rows[i].loss, w, 0);
        cell(rows[i].val_loss, w, 0);
        cell(rows[i].tokens_median, w, 0);
        fputc('\n', stdout);
    }
}

int cmd_compare(int argc, char **argv) {
    const char *dirs[COMPARE_MAX_RUNS];
    int32_t n = 0;
    int csv = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv")) csv = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") || argv[i][0] == '-') {
            if (argv[i][0] == '-' && strcmp(argv[i], "--help") && strcmp(argv[i], "-h"))
                fprintf(stderr, "ctrain compare: unknown option '%s'\n", argv[i]);
            fprintf(stderr, "usage: ctrain compare RUN_DIR... [--csv]\n");
            return 2;
        } else if (n == COMPARE_MAX_RUNS) {
            fprintf(stderr, "ctrain compare: more than %d run directories\n", COMPARE_MAX_RUNS);
            return 2;
        } else {
            dirs[n++] = argv[i];
        }
    }
    if (!n) {
        fprintf(stderr, "ctrain compare: no run directory given\n"
                "usage: ctrain compare RUN_DIR... [--csv]\n");
        return 2;
    }
    run_log *logs = calloc((size_t)n, sizeof *logs);
    run_row *rows = calloc((size_t)n, sizeof *rows);
    int32_t loaded = 0, rc = 1;
    if (!logs || !rows) {
        fprintf(stderr, "ctrain compare: out of memory\n");
        goto out_free;
    }
    for (int32_t i = 0; i < n; i++) {
        ct_error err = {.struct_size = sizeof err};
        if (run_log_load(dirs[i], &logs[i], &err) != CT_OK) {
            print_message_line(stderr, "ctrain compare: ", err.message);
            goto out_free;
        }
        loaded++;
        rows[i] = summarize(&logs[i]);
    }
    run_log_disambiguate(logs, n);
    if (csv) print_csv(logs, rows, n);
    else print_table(logs, rows, n);
    rc = 0;
out_free:
    for (int32_t i = 0; i < loaded; i++) run_log_free(&logs[i]);
    free(logs);
    free(rows);
    return rc;
}
