/* json.c — a JSON reader into a tree held in one arena (see json.h): recursive descent with a
 * depth bound, strings decoded to UTF-8, numbers through strtod. */
#include "io/json.h"

#include "io/files.h"
#include "base/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    char   data[];
} arena_block;

struct json_doc {
    arena_block *blocks;
    json_value   root;
};

typedef struct parser {
    const char *s, *start, *end;
    const char *name, *hint;
    json_doc   *doc;
    ct_error   *err;
    int32_t     rc;
} parser;

static void *arena_alloc(json_doc *d, size_t n) {
    n = (n + 7) & ~(size_t)7;
    arena_block *b = d->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > (1u << 20) ? n : (1u << 20);
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = d->blocks;
        d->blocks = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

static int32_t fail(parser *p, const char *what) {
    if (p->rc != CT_OK) return p->rc;
    long line = 1, col = 1;
    for (const char *c = p->start; c < p->s && c < p->end; c++) {
        if (*c == '\n') line++, col = 1;
        else col++;
    }
    p->rc = ct_error_set(p->err, CT_ERR_INVALID, "%s:%ld:%ld: JSON: %s ---> %s", p->name, line,
                         col, what, p->hint);
    return p->rc;
}

static int32_t oom(parser *p) {
    if (p->rc == CT_OK) p->rc = ct_error_set(p->err, CT_ERR_NOMEM, "out of memory reading %s", p->name);
    return p->rc;
}

static void skip_ws(parser *p) {
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

static int hex4(const char *s, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
        if (d == 16) return -1;
        *v = *v << 4 | d;
    }
    return 0;
}

/* A string at p->s (the opening quote) into the arena: *out, *len. Decoded text is never
 * longer than its JSON spelling, so one allocation of that size holds it. */
static int32_t parse_string(parser *p, const char **out, size_t *len) {
    const char *q = ++p->s; /* after the quote */
    while (q < p->end && *q != '"') q += *q == '\\' && q + 1 < p->end ? 2 : 1;
    if (q >= p->end) return fail(p, "unterminated string");
    char *o = arena_alloc(p->doc, (size_t)(q - p->s) + 1);
    if (!o) return oom(p);
    size_t n = 0;
    while (p->s < q) {
        unsigned char c = (unsigned char)*p->s;
        if (c < 0x20) return fail(p, "a control character inside a string (escape it)");
        if (c != '\\') {
            o[n++] = (char)c;
            p->s++;
            continue;
        }
        char e = p->s[1];
        p->s += 2;
        switch (e) {
        case '"': o[n++] = '"'; break;
        case '\\': o[n++] = '\\'; break;
        case '/': o[n++] = '/'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'n': o[n++] = '\n'; break;
        case 'r': o[n++] = '\r'; break;
        case 't': o[n++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (q - p->s < 4 || hex4(p->s, &cp)) return fail(p, "a \\u escape needs 4 hex digits");
            p->s += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, "a lone low surrogate \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (q - p->s < 6 || p->s[0] != '\\' || p->s[1] != 'u' || hex4(p->s + 2, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return fail(p, "a high surrogate \\u escape without its low half");
                p->s += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            n += utf8_put(cp, o + n);
            break;
        }
        default: p->s--; return fail(p, "an unknown escape in a string");
        }
    }
    o[n] = '\0';
    p->s = q + 1;
    *out = o;
    *len = n;
    return CT_OK;
}

static int32_t parse_number(parser *p, json_value *v) {
    const char *a = p->s;
    if (p->s < p->end && *p->s == '-') p->s++;
    if (p->s >= p->end || *p->s < '0' || *p->s > '9') return fail(p, "expected a value");
    if (*p->s == '0' && p->s + 1 < p->end && p->s[1] >= '0' && p->s[1] <= '9')
        return fail(p, "a number with a leading zero");
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') p->s++;
    v->integral = 1;
    if (p->s < p->end && *p->s == '.') {
        v->integral = 0;
        p->s++;
        if (p->s >= p->end || *p->s < '0' || *p->s > '9') return fail(p, "a digit must follow '.'");
        while (p->s < p->end && *p->s >= '0' && *p->s <= '9') p->s++;
    }
    if (p->s < p->end && (*p->s == 'e' || *p->s == 'E')) {
        v->integral = 0;
        p->s++;
        if (p->s < p->end && (*p->s == '+' || *p->s == '-')) p->s++;
        if (p->s >= p->end || *p->s < '0' || *p->s > '9') return fail(p, "a digit must follow 'e'");
        while (p->s < p->end && *p->s >= '0' && *p->s <= '9') p->s++;
    }
    char buf[64];
    size_t k = (size_t)(p->s - a);
    if (k >= sizeof buf) return fail(p, "a number longer than 63 characters");
    memcpy(buf, a, k);
    buf[k] = '\0';
    v->type = JSON_NUMBER;
    v->number = strtod(buf, NULL);
    return CT_OK;
}

static int32_t parse_value(parser *p, json_value *v, int depth);

/* A growable list of values (and keys) while an array or object is read. */
typedef struct vec {
    json_value  *v;
    const char **k;
    size_t      *kl;
    size_t       n, cap;
} vec;

static int vec_push(vec *x, int with_key) {
    if (x->n < x->cap) return 0;
    size_t cap = x->cap ? 2 * x->cap : 8;
    json_value *v = realloc(x->v, cap * sizeof *v);
    if (v) x->v = v;
    if (!v) return -1;
    if (with_key) {
        const char **k = realloc(x->k, cap * sizeof *k);
        if (k) x->k = k;
        size_t *kl = realloc(x->kl, cap * sizeof *kl);
        if (kl) x->kl = kl;
        if (!k || !kl) return -1;
    }
    x->cap = cap;
    return 0;
}

/* Move the list into the arena as v's items (and keys). */
static int32_t vec_finish(parser *p, vec *x, json_value *v, int with_key) {
    v->n = x->n;
    if (x->n) {
        v->items = arena_alloc(p->doc, x->n * sizeof *v->items);
        if (!v->items) return oom(p);
        memcpy(v->items, x->v, x->n * sizeof *v->items);
        if (with_key) {
            v->keys = arena_alloc(p->doc, x->n * sizeof *v->keys);
            v->key_lens = arena_alloc(p->doc, x->n * sizeof *v->key_lens);
            if (!v->keys || !v->key_lens) return oom(p);
            memcpy(v->keys, x->k, x->n * sizeof *v->keys);
            memcpy(v->key_lens, x->kl, x->n * sizeof *v->key_lens);
        }
    }
    return CT_OK;
}

static int32_t parse_container(parser *p, json_value *v, int depth, int is_object) {
    char close = is_object ? '}' : ']';
    vec x = {0};
    int32_t rc = CT_OK;
    p->s++;
    v->type = is_object ? JSON_OBJECT : JSON_ARRAY;
    skip_ws(p);
    if (p->s < p->end && *p->s == close) {
        p->s++;
        return CT_OK;
    }
    for (;;) {
        if (vec_push(&x, is_object)) {
            rc = oom(p);
            break;
        }
        json_value *item = &x.v[x.n];
        memset(item, 0, sizeof *item);
        if (is_object) {
            skip_ws(p);
            if (p->s >= p->end || *p->s != '"') {
                rc = fail(p, "expected a member name (a string)");
                break;
            }
            if ((rc = parse_string(p, &x.k[x.n], &x.kl[x.n])) != CT_OK) break;
            skip_ws(p);
            if (p->s >= p->end || *p->s != ':') {
                rc = fail(p, "expected ':' after a member name");
                break;
            }
            p->s++;
        }
        if ((rc = parse_value(p, item, depth + 1)) != CT_OK) break;
        x.n++;
        skip_ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        if (p->s < p->end && *p->s == close) {
            p->s++;
            rc = vec_finish(p, &x, v, is_object);
            break;
        }
        rc = fail(p, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
        break;
    }
    free(x.v);
    free(x.k);
    free(x.kl);
    return rc;
}

static int32_t parse_value(parser *p, json_value *v, int depth) {
    if (depth > JSON_MAX_DEPTH) return fail(p, "nested deeper than 128 levels");
    skip_ws(p);
    if (p->s >= p->end) return fail(p, "expected a value, found the end");
    size_t left = (size_t)(p->end - p->s);
    switch (*p->s) {
    case '{': return parse_container(p, v, depth, 1);
    case '[': return parse_container(p, v, depth, 0);
    case '"':
        v->type = JSON_STRING;
        return parse_string(p, &v->str, &v->len);
    case 't':
        if (left < 4 || memcmp(p->s, "true", 4)) break;
        v->type = JSON_TRUE;
        p->s += 4;
        return CT_OK;
    case 'f':
        if (left < 5 || memcmp(p->s, "false", 5)) break;
        v->type = JSON_FALSE;
        p->s += 5;
        return CT_OK;
    case 'n':
        if (left < 4 || memcmp(p->s, "null", 4)) break;
        v->type = JSON_NULL;
        p->s += 4;
        return CT_OK;
    default: return parse_number(p, v);
    }
    return fail(p, "expected a value");
}

int32_t json_parse(const char *text, size_t len, const char *name, const char *hint,
                   json_doc **out, ct_error *err) {
    *out = NULL;
    json_doc *d = calloc(1, sizeof *d);
    if (!d) return ct_error_set(err, CT_ERR_NOMEM, "out of memory reading %s", name);
    parser p = {text, text, text + len, name, hint, d, err, CT_OK};
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) p.s += 3; /* a byte order mark */
    int32_t rc = parse_value(&p, &d->root, 0);
    if (rc == CT_OK) {
        skip_ws(&p);
        if (p.s != p.end) rc = fail(&p, "bytes after the document's value");
    }
    if (rc != CT_OK) {
        json_free(d);
        return rc;
    }
    *out = d;
    return CT_OK;
}

int32_t json_read_file(const char *path, const char *what, const char *hint, size_t max_bytes,
                       json_doc **out, ct_error *err) {
    char *text;
    size_t n;
    *out = NULL;
    int32_t rc = read_bounded(path, what, hint, max_bytes, &text, &n, err);
    if (rc != CT_OK) return rc;
    rc = json_parse(text, n, path, hint, out, err);
    free(text);
    return rc;
}

void json_free(json_doc *doc) {
    if (!doc) return;
    for (arena_block *b = doc->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(doc);
}

const json_value *json_root(const json_doc *doc) { return &doc->root; }

const json_value *json_get(const json_value *v, const char *key) {
    if (!v || v->type != JSON_OBJECT) return NULL;
    size_t kl = strlen(key);
    for (size_t i = v->n; i-- > 0;)
        if (v->key_lens[i] == kl && !memcmp(v->keys[i], key, kl)) return &v->items[i];
    return NULL;
}

const char *json_string(const json_value *v) {
    return v && v->type == JSON_STRING ? v->str : NULL;
}

int json_put_string(FILE *f, const char *s, size_t n) {
    const unsigned char *b = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = b[i];
        size_t len = utf8_char_len(b + i, n - i, NULL);
        if (len == 0) {
            fputs("\\ufffd", f);
            i++;
            continue;
        }
        if (len > 1) fwrite(b + i, 1, len, f);
        else if (c == '"') fputs("\\\"", f);
        else if (c == '\\') fputs("\\\\", f);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
        else fputc((int)c, f);
        i += len;
    }
    return ferror(f) ? -1 : 0;
}
