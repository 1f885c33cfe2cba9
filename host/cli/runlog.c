/* runlog.c — run folders loaded for plot and compare: metrics.jsonl through io/jsonl.c, the name
 * from config.ini, names made distinct, the keys of a set of runs (runlog.h).
 * Not for: parsing JSON lines (io/jsonl.c).
 */
#include "cli/runlog.h"

#include "config/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------------------------------
 * run directories
 * ------------------------------------------------------------------------------------- */

/* The base name of dir without trailing slashes, as a new string. */
static char *base_name(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    return strndup(dir + b, n - b);
}

/* [run] name of dir/config.ini, or NULL when the file or the key is absent. */
static char *config_run_name(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.ini", dir);
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    host_config *cfg = config_new();
    if (!cfg) return NULL;
    ct_error err = {.struct_size = sizeof err};
    char *name = NULL;
    if (config_load_file(cfg, path, &err) == CT_OK) {
        const char *v = config_get(cfg, "run", "name");
        if (v && *v) name = strdup(v);
    }
    config_free(cfg);
    return name;
}

int32_t run_log_load(const char *dir, run_log *out, ct_error *err) {
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ct_error_set(err, CT_ERR_IO, "run directory '%s' does not exist ---> pass the "
                            "out_dir of a training run ([run] out_dir)", dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (stat(path, &st) != 0)
        return ct_error_set(err, CT_ERR_IO, "'%s' has no metrics.jsonl ---> is it the out_dir "
                            "of a training run? `ctrain train` writes OUT/metrics.jsonl", dir);
    int32_t rc = jsonl_read(path, &out->records, &out->n_records, err);
    if (rc != CT_OK) return rc;
    out->dir = strdup(dir);
    out->name = config_run_name(dir);
    if (!out->name) out->name = base_name(dir);
    if (!out->dir || !out->name) {
        run_log_free(out);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory loading %s", dir);
    }
    return CT_OK;
}

void run_log_free(run_log *log) {
    jsonl_free_records(log->records, log->n_records);
    free(log->dir);
    free(log->name);
    memset(log, 0, sizeof *log);
}

void run_log_disambiguate(run_log *logs, int32_t n) {
    char *dup = calloc((size_t)(n > 0 ? n : 1), 1); /* decided on the original names */
    if (!dup) return;
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < n; j++)
            if (j != i && strcmp(logs[i].name, logs[j].name) == 0) dup[i] = 1;
    for (int32_t i = 0; i < n; i++) {
        if (!dup[i]) continue;
        size_t len = strlen(logs[i].name) + strlen(logs[i].dir) + 4;
        char *s = malloc(len);
        if (!s) continue;
        snprintf(s, len, "%s (%s)", logs[i].name, logs[i].dir);
        free(logs[i].name);
        logs[i].name = s;
    }
    free(dup);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char **run_log_keys(const run_log *logs, int32_t n_logs, int32_t *n) {
    int32_t cap = 64, count = 0;
    char **keys = malloc((size_t)cap * sizeof *keys);
    if (!keys) return *n = 0, NULL;
    for (int32_t l = 0; l < n_logs; l++)
        for (int32_t r = 0; r < logs[l].n_records; r++)
            for (int32_t f = 0; f < logs[l].records[r].n_fields; f++) {
                const jsonl_field *fd = &logs[l].records[r].fields[f];
                if (!fd->is_number || strcmp(fd->key, "step") == 0) continue;
                int seen = 0;
                for (int32_t k = 0; k < count && !seen; k++) seen = strcmp(keys[k], fd->key) == 0;
                if (seen) continue;
                if (count == cap) {
                    char **grown = realloc(keys, (size_t)(cap *= 2) * sizeof *keys);
                    if (!grown) goto out_sort;
                    keys = grown;
                }
                if ((keys[count] = strdup(fd->key))) count++;
            }
out_sort:
    qsort(keys, (size_t)count, sizeof *keys, cmp_str);
    *n = count;
    return keys;
}

void run_log_free_keys(char **keys, int32_t n) {
    for (int32_t i = 0; i < n; i++) free(keys[i]);
    free(keys);
}
