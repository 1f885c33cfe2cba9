/* jsonl.h — reading OUT/metrics.jsonl back: one flat JSON object per line (string keys,
 * number or null values). Not for: general JSON (no nesting, no arrays; json.h), writing
 * metrics (metrics.h) or a run folder as a whole (cli/runlog.h).
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

/* Parse a JSON-lines file. Errors (unreadable file, a malformed line) return CT_ERR_IO or
 * CT_ERR_INVALID with "FILE:LINE: ..." in err. A torn LAST line (one that does not parse and
 * lacks its newline or holds zero bytes, as a crash or a full disk leaves it) is skipped with
 * a warning on stderr naming FILE:LINE.
 * Free with jsonl_free_records. */
int32_t jsonl_read(const char *path, jsonl_record **records, int32_t *n_records, ct_error *err);
void jsonl_free_records(jsonl_record *records, int32_t n_records);

/* The value of `key` in rec when present and a number: 1 and *out set; else 0. */
int32_t jsonl_get(const jsonl_record *rec, const char *key, double *out);

#endif /* CTRAIN_HOST_JSONL_H */
