/* json.h — a JSON document read whole into a tree (RFC 8259: objects, arrays, strings with
 * every escape, \uXXXX surrogate pairs joined into UTF-8, numbers, true, false, null), for the
 * files other programs write that ctrain reads: a tokenizer.json, vocab.json, config.json, a
 * sharded safetensors index. Errors name the file, line and column. And the one piece of JSON
 * writing that needs care: a string's escapes.
 * Not for: metrics.jsonl (jsonl.c) or the safetensors header (safetensors.c).
 */
#ifndef CTRAIN_HOST_JSON_H
#define CTRAIN_HOST_JSON_H

#include <ctrain/ctrain.h>

#include <stddef.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 128 /* nesting deeper than this is refused (no unbounded recursion) */

typedef enum json_type {
    JSON_NULL = 0,
    JSON_FALSE = 1,
    JSON_TRUE = 2,
    JSON_NUMBER = 3,
    JSON_STRING = 4,
    JSON_ARRAY = 5,
    JSON_OBJECT = 6,
} json_type;

typedef struct json_value json_value;
struct json_value {
    json_type   type;
    double      number;   /* JSON_NUMBER */
    int32_t     integral; /* JSON_NUMBER written without '.', 'e' or 'E' */
    const char *str;      /* JSON_STRING: UTF-8, NUL-terminated; may hold NUL bytes (len) */
    size_t      len;
    size_t      n;        /* JSON_ARRAY / JSON_OBJECT: elements or members */
    json_value *items;    /* (n) elements, or members' values */
    const char **keys;    /* JSON_OBJECT: (n) member names, NUL-terminated */
    size_t     *key_lens; /* JSON_OBJECT: (n) their lengths in bytes */
};

typedef struct json_doc json_doc;

/* Parse len bytes of text. `name` stands for the file in messages. CT_ERR_INVALID
 * "NAME:LINE:COL: JSON: <what> ---> <hint>" on malformed text (trailing bytes, bad escapes,
 * lone surrogates, depth beyond JSON_MAX_DEPTH); *out NULL then. */
int32_t json_parse(const char *text, size_t len, const char *name, const char *hint,
                   json_doc **out, ct_error *err);
/* files.h's read_bounded (at most max_bytes) then json_parse. */
int32_t json_read_file(const char *path, const char *what, const char *hint, size_t max_bytes,
                       json_doc **out, ct_error *err);
void json_free(json_doc *doc);
const json_value *json_root(const json_doc *doc);

/* The member `key` of an object (the last one when a key repeats); NULL when v is not an
 * object or has no such member. */
const json_value *json_get(const json_value *v, const char *key);
/* The string of v, NULL when v is NULL or not a string. */
const char *json_string(const json_value *v);

/* JSON string body of n bytes (no quotes): '"', '\\' and control bytes escaped, valid UTF-8
 * copied, every byte of an ill-formed UTF-8 sequence written as \ufffd. Returns 0 or -1 on a
 * write error. */
int json_put_string(FILE *f, const char *s, size_t n);

#endif /* CTRAIN_HOST_JSON_H */
