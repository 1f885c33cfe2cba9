/* jsonl.c — a minimal reader for the run's machine-written JSON lines (flat objects of string
 * keys and number/null values; jsonl.h). Not for: arbitrary JSON (nesting and arrays are
 * rejected with the line number) or run folders (cli/runlog.c).
 */
#include "io/jsonl.h"

#include "io/files.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------------------------------
 * one line
 * ------------------------------------------------------------------------------------- */

typedef struct cursor {
    const char *p;
} cursor;

static void skip_ws(cursor *c) {
    while (*c->p && isspace((unsigned char)*c->p)) c->p++;
}

/* A JSON string at c->p (the opening quote) into a new buffer; NULL when malformed. Escapes
 * \" \\ \/ \b \f \n \r \t are decoded; \uXXXX is kept as written (keys are ASCII names). */
static char *parse_string(cursor *c) {
    if (*c->p != '"') return NULL;
    const char *s = ++c->p;
    size_t cap = 16, n = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    for (; *s && *s != '"'; s++) {
        char ch = *s;
        if (ch == '\\') {
            s++;
            switch (*s) {
            case 'n': ch = '\n'; break;
            case 't': ch = '\t'; break;
            case 'r': ch = '\r'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case '"': case '\\': case '/': ch = *s; break;
            case 'u': ch = '\\'; s--; break; /* keep "\u" literally */
            default: free(out); return NULL;
            }
        }
        if (n + 2 > cap) {
            char *grown = realloc(out, cap *= 2);
            if (!grown) return free(out), NULL;
            out = grown;
        }
        out[n++] = ch;
    }
    if (*s != '"') return free(out), NULL;
    out[n] = '\0';
    c->p = s + 1;
    return out;
}

/* A value: a number, null, true/false or a string (kept as "not a number"). 0 when malformed
 * or nested. */
static int parse_value(cursor *c, double *v, int32_t *is_number) {
    *v = NAN;
    *is_number = 0;
    if (*c->p == '"') {
        char *s = parse_string(c);
        if (!s) return 0;
        free(s);
        return 1;
    }
    static const char *const words[] = {"null", "true", "false", "NaN", "Infinity",
                                        "-Infinity"};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        size_t len = strlen(words[i]);
        if (strncmp(c->p, words[i], len) == 0) {
            c->p += len;
            if (i >= 3) { /* non-standard but what some writers emit */
                *v = i == 3 ? NAN : (i == 4 ? INFINITY : -INFINITY);
                *is_number = 1;
            }
            return 1;
        }
    }
    char *end;
    errno = 0;
    double d = strtod(c->p, &end);
    if (end == c->p) return 0;
    c->p = end;
    *v = d;
    *is_number = 1;
    return 1;
}

/* Parse one object into rec; 0 with *why set when malformed. */
static int parse_line(const char *line, jsonl_record *rec, const char **why) {
    cursor c = {line};
    memset(rec, 0, sizeof *rec);
    int32_t cap = 0;
    skip_ws(&c);
    if (*c.p != '{') return *why = "expected '{' at the start of the line", 0;
    c.p++;
    skip_ws(&c);
    if (*c.p == '}') goto out_end;
    for (;;) {
        skip_ws(&c);
        char *key = parse_string(&c);
        if (!key) return *why = "expected a quoted key", 0;
        skip_ws(&c);
        if (*c.p != ':') return free(key), *why = "expected ':' after a key", 0;
        c.p++;
        skip_ws(&c);
        if (*c.p == '{' || *c.p == '[')
            return free(key), *why = "nested objects and arrays are not supported", 0;
        double v;
        int32_t num;
        if (!parse_value(&c, &v, &num)) return free(key), *why = "malformed value", 0;
        if (rec->n_fields == cap) {
            cap = cap ? cap * 2 : 16;
            jsonl_field *grown = realloc(rec->fields, (size_t)cap * sizeof *grown);
            if (!grown) return free(key), *why = "out of memory", 0;
            rec->fields = grown;
        }
        rec->fields[rec->n_fields++] = (jsonl_field){key, v, num};
        skip_ws(&c);
        if (*c.p == ',') {
            c.p++;
            continue;
        }
        if (*c.p == '}') break;
        return *why = "expected ',' or '}' after a value", 0;
    }
out_end:
    c.p++;
    skip_ws(&c);
    if (*c.p) return *why = "text after the closing '}'", 0;
    return 1;
}

static void free_record(jsonl_record *r) {
    for (int32_t i = 0; i < r->n_fields; i++) free(r->fields[i].key);
    free(r->fields);
}

void jsonl_free_records(jsonl_record *records, int32_t n_records) {
    for (int32_t i = 0; i < n_records; i++) free_record(&records[i]);
    free(records);
}

int32_t jsonl_read(const char *path, jsonl_record **records, int32_t *n_records, ct_error *err) {
    *records = NULL;
    *n_records = 0;
    FILE *f;
    int32_t rc0 = fopen_regular(path, "metrics file", "give a run folder that `ctrain train` "
                                "wrote, or its metrics.jsonl", &f, err);
    if (rc0 != CT_OK) return rc0;
    char *line = NULL;
    size_t line_cap = 0;
    int32_t cap = 0, rc = CT_OK;
    long line_no = 0, bad_line = 0; /* a torn line: an error unless it is the last one */
    const char *bad_why = NULL;
    ssize_t len;
    while ((len = getline(&line, &line_cap, f)) >= 0) {
        line_no++;
        if (line_no == 1 && len >= 3 && !memcmp(line, "\xef\xbb\xbf", 3)) {
            memmove(line, line + 3, (size_t)len - 2); /* a UTF-8 byte-order mark: not data */
            len -= 3;
        }
        const char *p = line;
        while (p < line + len && *p && isspace((unsigned char)*p)) p++;
        if (p == line + len) continue; /* blank line */
        if (bad_line) break;           /* the torn line was not the last one */
        jsonl_record rec;
        const char *why = NULL;
        int has_nul = (size_t)len != strlen(line);
        if (has_nul || !parse_line(line, &rec, &why)) {
            if (!has_nul) free_record(&rec);
            if (!bad_why) bad_why = has_nul ? "zero bytes inside the line" : why;
            /* torn: cut short (no newline) or zero-filled, as a crash or a full disk leaves
             * it; skipped when last. A whole line that does not parse is an error. */
            if (!has_nul && line[len - 1] == '\n') {
                rc = ct_error_set(err, CT_ERR_INVALID, "%s:%ld: %s ---> metrics files hold one "
                                  "flat JSON object per line", path, line_no, why);
                goto out_free;
            }
            bad_line = line_no;
            continue;
        }
        if (*n_records == cap) {
            cap = cap ? cap * 2 : 64;
            jsonl_record *grown = realloc(*records, (size_t)cap * sizeof *grown);
            if (!grown) {
                free_record(&rec);
                rc = ct_error_set(err, CT_ERR_NOMEM, "%s: out of memory", path);
                goto out_free;
            }
            *records = grown;
        }
        (*records)[(*n_records)++] = rec;
    }
    if (bad_line && line_no > bad_line) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s:%ld: %s ---> metrics files hold one flat "
                          "JSON object per line", path, bad_line, bad_why);
        goto out_free;
    }
    if (bad_line) /* a run stopped (a crash, a full disk) while writing its last line */
        fprintf(stderr, "ctrain: warning: %s:%ld: skipped the incomplete last line (%s) ---> "
                "the run was interrupted while writing it; the lines before it are read\n",
                path, bad_line, bad_why);
    free(line);
    fclose(f);
    return CT_OK;

out_free:
    free(line);
    fclose(f);
    jsonl_free_records(*records, *n_records);
    *records = NULL;
    *n_records = 0;
    return rc;
}

int32_t jsonl_get(const jsonl_record *rec, const char *key, double *out) {
    for (int32_t i = 0; i < rec->n_fields; i++)
        if (rec->fields[i].is_number && strcmp(rec->fields[i].key, key) == 0) {
            *out = rec->fields[i].value;
            return 1;
        }
    return 0;
}
