/* jsonl.h — reading what a run wrote: OUT/metrics.jsonl (one flat JSON object per line: string
 * keys, number or null values) and the run's name from OUT/config.ini. Used by `ctrain plot`
 * and `ctrain compare`. Not for: general JSON (no nesting, no arrays) or writing metrics
 * (metrics.c).
 */
#ifndef CTRAIN_HOST_JSONL_H
#define CTRAIN_HOST_JSONL_H

#include <ctrain/ctrain.h>

/* One "key": value pair. null (and a value that is not a number: string, true/false) reads
 * as NAN with is_number 0. */
typedef struct jsonl_field {
    char   *key;
    double  value;
    int32_t is_number;
} jsonl_field;

/* One line: the fields in the order written. */
typedef struct jsonl_record {
    jsonl_field *fields;
    int32_t      n_fields;
} jsonl_record;

/* A run directory, loaded. */
typedef struct run_log {
    char          *dir;       /* as given on the command line */
    char          *name;      /* [run] name of DIR/config.ini, else the folder's base name */
    jsonl_record  *records;   /* one per non-blank line of DIR/metrics.jsonl, in file order */
    int32_t        n_records;
} run_log;

/* Parse a JSON-lines file. Errors (unreadable file, a malformed line) return CT_ERR_IO or
 * CT_ERR_INVALID with "FILE:LINE: ..." in err. A torn LAST line (one that does not parse and
 * lacks its newline or holds zero bytes, as a crash or a full disk leaves it) is skipped with
 * a warning on stderr naming FILE:LINE.
 * Free with jsonl_free_records. */
int32_t jsonl_read(const char *path, jsonl_record **records, int32_t *n_records, ct_error *err);
void jsonl_free_records(jsonl_record *records, int32_t n_records);

/* The value of `key` in rec when present and a number: 1 and *out set; else 0. */
int32_t jsonl_get(const jsonl_record *rec, const char *key, double *out);

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

#endif /* CTRAIN_HOST_JSONL_H */
