/* runlog.h — a run folder read back for `ctrain plot` and `ctrain compare`: its metrics.jsonl
 * (io/jsonl.h) and the run's name from its config.ini. Not for: the JSON lines themselves
 * (jsonl.h) or writing metrics (io/metrics.h).
 */
#ifndef CTRAIN_HOST_RUNLOG_H
#define CTRAIN_HOST_RUNLOG_H

#include "io/jsonl.h"

#include <ctrain/ctrain.h>

/* A run directory, loaded. */
typedef struct run_log {
    char          *dir;       /* as given on the command line */
    char          *name;      /* [run] name of DIR/config.ini, else the folder's base name */
    jsonl_record  *records;   /* one per non-blank line of DIR/metrics.jsonl, in file order */
    int32_t        n_records;
} run_log;

/* Load DIR/metrics.jsonl and the run's name. A missing folder or metrics file is an error
 * that says what DIR should be. Free with run_log_free. */
int32_t run_log_load(const char *dir, run_log *out, ct_error *err);
void run_log_free(run_log *log);

/* Give runs that share a name distinct legend names ("name (DIR)"). */
void run_log_disambiguate(run_log *logs, int32_t n);

/* Every key (but "step") that appears with a number in any record of any run, sorted, without
 * duplicates; *n set. The array and strings are owned by the caller: free with
 * run_log_free_keys. */
char **run_log_keys(const run_log *logs, int32_t n_logs, int32_t *n);
void run_log_free_keys(char **keys, int32_t n);

#endif /* CTRAIN_HOST_RUNLOG_H */
