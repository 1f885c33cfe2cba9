/* metrics.c — per-rank metric tables, their JSON line and the checked writer of
 * OUT/metrics.jsonl (see metrics.h). */
#include "io/metrics.h"

#include "io/files.h"
#include "io/outfile.h"

#include <ctrain/ctrain.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static host_metric *find(host_metric_table *t, const char *name) {
    for (int32_t i = 0; i < t->n; i++)
        if (strcmp(t->items[i].name, name) == 0) return &t->items[i];
    return NULL;
}

void metrics_add(host_metric_table *t, const char *name, double value, int32_t reduce) {
    host_metric *m = find(t, name);
    if (!m) {
        if (t->n == HOST_METRICS_MAX) {
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

double metrics_value(const host_metric_table *t, const char *name) {
    for (int32_t i = 0; i < t->n; i++) {
        const host_metric *m = &t->items[i];
        if (strcmp(m->name, name) != 0) continue;
        return m->reduce == CT_METRIC_MEAN ? m->value / (double)m->count : m->value;
    }
    return NAN;
}

void metrics_clear(host_metric_table *t) {
    t->n = 0;
    t->overflowed = 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const host_metric *)a)->name, ((const host_metric *)b)->name);
}

void metrics_sort(host_metric_table *t) {
    qsort(t->items, (size_t)t->n, sizeof t->items[0], by_name);
}

void metrics_write_json(const host_metric_table *t, int64_t step, FILE *out) {
    fprintf(out, "{\"step\": %lld", (long long)step);
    for (int32_t i = 0; i < t->n; i++) {
        double v = metrics_value(t, t->items[i].name);
        if (isfinite(v)) fprintf(out, ", \"%s\": %.17g", t->items[i].name, v);
        else fprintf(out, ", \"%s\": null", t->items[i].name);
    }
    fputs("}\n", out);
}

/* ---- OUT/metrics.jsonl --------------------------------------------------------------- */

#define METRICS_HINT "---> free disk space under [run] out_dir, then resume with --resume"

/* The step of a whole line written by metrics_write_json ("{"step": N, ..."}\n"); -1 when the
 * line is not whole (torn by a crash or a full disk) or has no leading step. */
static long long line_step(const char *line, size_t len) {
    if (len < 2 || line[len - 1] != '\n' || line[len - 2] != '}') return -1;
    if (strncmp(line, "{\"step\": ", 9) != 0) return -1;
    char *end;
    long long s = strtoll(line + 9, &end, 10);
    if (end == line + 9 || (*end != ',' && *end != '}')) return -1;
    return s;
}

/* Rewrite path keeping its whole lines of step <= keep (outfile.h: temp + fsync + rename). */
static int32_t keep_steps(const char *path, int64_t keep, ct_error *err) {
    struct stat st;
    if (lstat(path, &st) != 0 && errno == ENOENT) return CT_OK; /* nothing to keep */
    FILE *in;
    int32_t rc = fopen_own_output(path, "metrics file", "check [run] out_dir", &in, err);
    if (rc != CT_OK) return rc;
    outfile o;
    if ((rc = outfile_open(&o, path, err)) != CT_OK) {
        fclose(in);
        return rc;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, in)) >= 0) {
        long long s = line_step(line, (size_t)n);
        if (s >= 0 && s <= keep) outfile_write(&o, line, (size_t)n);
    }
    int read_failed = ferror(in);
    free(line);
    fclose(in);
    if (read_failed) {
        outfile_abort(&o);
        return ct_error_set(err, CT_ERR_IO, "cannot read %s " METRICS_HINT, path);
    }
    return outfile_commit(&o, err);
}

int32_t metrics_file_open(metrics_file *mf, const char *dir, int64_t keep_through_step,
                          ct_error *err) {
    mf->fd = -1;
    mf->tb.fd = -1;
    mf->length = 0;
    int len = snprintf(mf->path, sizeof mf->path, "%s/metrics.jsonl", dir);
    if (len < 0 || (size_t)len >= sizeof mf->path)
        return ct_error_set(err, CT_ERR_INVALID, "path too long: %s/metrics.jsonl ---> use a "
                            "shorter [run] out_dir", dir);
    if (keep_through_step >= 0) {
        int32_t rc = keep_steps(mf->path, keep_through_step, err);
        if (rc != CT_OK) return rc;
    }
    int32_t rc = outfile_append_open(mf->path, keep_through_step < 0 ? OUTFILE_TRUNCATE : 0,
                                     &mf->fd, err);
    if (rc != CT_OK) return rc;
    off_t end = lseek(mf->fd, 0, SEEK_END);
    mf->length = end > 0 ? end : 0;
    return CT_OK;
}

int32_t metrics_file_tensorboard(metrics_file *mf, const char *dir, int64_t keep_through_step,
                                 ct_error *err) {
    char tb[4200];
    if ((size_t)snprintf(tb, sizeof tb, "%s/tb", dir) >= sizeof tb)
        return ct_error_set(err, CT_ERR_INVALID, "path too long: %s/tb ---> use a shorter [run] "
                            "out_dir", dir);
    return tb_open(&mf->tb, tb, keep_through_step, err);
}

/* The table's scalars (as metrics_write_json writes them) as one TensorBoard event. */
static int32_t tensorboard_write(metrics_file *mf, const host_metric_table *t, int64_t step,
                                 ct_error *err) {
    if (mf->tb.fd < 0 || t->n == 0) return CT_OK;
    const char *tags[HOST_METRICS_MAX];
    double values[HOST_METRICS_MAX];
    for (int32_t i = 0; i < t->n; i++) {
        tags[i] = t->items[i].name;
        values[i] = metrics_value(t, t->items[i].name);
    }
    return tb_write_scalars(&mf->tb, step, tags, values, t->n, err);
}

int32_t metrics_file_write(metrics_file *mf, const host_metric_table *t, int64_t step,
                           ct_error *err) {
    char *buf = NULL;
    size_t n = 0;
    FILE *ms = open_memstream(&buf, &n);
    if (!ms) return ct_error_set(err, CT_ERR_NOMEM, "out of memory writing %s", mf->path);
    metrics_write_json(t, step, ms);
    int bad = ferror(ms);
    fclose(ms);
    if (bad || !buf) {
        free(buf);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory writing %s", mf->path);
    }
    int rc = fd_write_all(mf->fd, buf, n);
    int saved = errno;
    free(buf);
    if (rc == 0) {
        mf->length += (off_t)n;
        return tensorboard_write(mf, t, step, err);
    }
    /* cut the partial line off again: the file keeps whole lines only */
    if (ftruncate(mf->fd, mf->length) != 0 && errno != EINVAL)
        fprintf(stderr, "ctrain: warning: cannot cut the partial last line of %s: %s\n",
                mf->path, strerror(errno));
    return ct_error_set(err, CT_ERR_IO, "cannot write %s (step %lld): %s " METRICS_HINT,
                        mf->path, (long long)step, strerror(saved));
}

int32_t metrics_file_close(metrics_file *mf, ct_error *err) {
    int32_t tb_rc = tb_close(&mf->tb, err);
    if (mf->fd < 0) return tb_rc;
    int bad = fsync(mf->fd) != 0 && errno != EINVAL && errno != EROFS;
    int saved = errno;
    if (close(mf->fd) != 0 && !bad) bad = 1, saved = errno;
    mf->fd = -1;
    if (bad)
        return ct_error_set(err, CT_ERR_IO, "cannot write %s: %s " METRICS_HINT, mf->path,
                            strerror(saved));
    return tb_rc;
}
