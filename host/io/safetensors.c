/* safetensors.c — reading and writing safetensors files (see safetensors.h): a small JSON
 * reader for the header's subset (objects, arrays, strings, integers), and the writer. */
#include "io/safetensors.h"

#include "io/files.h"
#include "io/outfile.h"

#include <ctrain/numerics.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c writes the host's floats as they are: a little-endian host only"
#endif

/* ---- reading the header ------------------------------------------------------------- */

typedef struct jp {
    const char *s, *end, *start;
    const char *path;
    ct_error   *err;
} jp;

static int32_t jfail(jp *p, const char *what) {
    return ct_error_set(p->err, CT_ERR_INVALID, "%s: safetensors header, byte %ld: %s ---> the "
                        "file is not a safetensors file or is damaged", p->path,
                        (long)(8 + (p->s - p->start)), what);
}

static void ws(jp *p) {
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

static int32_t expect(jp *p, char c) {
    ws(p);
    if (p->s >= p->end || *p->s != c) {
        char what[32];
        snprintf(what, sizeof what, "expected '%c'", c);
        return jfail(p, what);
    }
    p->s++;
    return CT_OK;
}

/* A JSON string into buf (cap bytes; \uXXXX below 0x80 only). */
static int32_t jstring(jp *p, char *buf, size_t cap) {
    if (expect(p, '"') != CT_OK) return CT_ERR_INVALID;
    size_t n = 0;
    while (p->s < p->end && *p->s != '"') {
        char c = *p->s++;
        if (c == '\\') {
            if (p->s >= p->end) break;
            char e = *p->s++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': {
                if (p->end - p->s < 4) return jfail(p, "short \\u escape");
                char hex[5] = {p->s[0], p->s[1], p->s[2], p->s[3], 0};
                char *endp;
                long v = strtol(hex, &endp, 16);
                if (*endp || v >= 0x80 || v == 0) return jfail(p, "\\u escape outside ASCII");
                c = (char)v;
                p->s += 4;
                break;
            }
            default: c = e;
            }
        }
        if (n + 1 >= cap) return jfail(p, "string too long");
        buf[n++] = c;
    }
    if (p->s >= p->end) return jfail(p, "unterminated string");
    p->s++;
    buf[n] = 0;
    return CT_OK;
}

static int32_t juint(jp *p, uint64_t *v) {
    ws(p);
    if (p->s >= p->end || *p->s < '0' || *p->s > '9') return jfail(p, "expected an integer");
    uint64_t x = 0;
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
        if (x > (UINT64_MAX - 9) / 10) return jfail(p, "integer too large");
        x = x * 10 + (uint64_t)(*p->s++ - '0');
    }
    *v = x;
    return CT_OK;
}

/* '[' uint, ... ']' into v (at most cap values), count into *n. */
static int32_t juints(jp *p, uint64_t *v, int32_t cap, int32_t *n) {
    if (expect(p, '[') != CT_OK) return CT_ERR_INVALID;
    *n = 0;
    ws(p);
    if (p->s < p->end && *p->s == ']') return p->s++, CT_OK;
    for (;;) {
        if (*n >= cap) return jfail(p, "too many values in an array");
        if (juint(p, &v[(*n)++]) != CT_OK) return CT_ERR_INVALID;
        ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        return expect(p, ']');
    }
}

static int32_t tensor_entry(jp *p, st_tensor *t) {
    if (expect(p, '{') != CT_OK) return CT_ERR_INVALID;
    int seen = 0;
    for (;;) {
        char key[32];
        if (jstring(p, key, sizeof key) != CT_OK || expect(p, ':') != CT_OK) return CT_ERR_INVALID;
        uint64_t v[ST_MAX_DIMS];
        int32_t n = 0;
        if (!strcmp(key, "dtype")) {
            if (jstring(p, t->dtype, sizeof t->dtype) != CT_OK) return CT_ERR_INVALID;
            seen |= 1;
        } else if (!strcmp(key, "shape")) {
            if (juints(p, v, ST_MAX_DIMS, &n) != CT_OK) return CT_ERR_INVALID;
            t->ndim = n;
            for (int32_t i = 0; i < n; i++) {
                if (v[i] > (1ull << 40)) return jfail(p, "dimension too large");
                t->shape[i] = (int64_t)v[i];
            }
            seen |= 2;
        } else if (!strcmp(key, "data_offsets")) {
            if (juints(p, v, 2, &n) != CT_OK) return CT_ERR_INVALID;
            if (n != 2) return jfail(p, "data_offsets needs two values");
            t->begin = v[0];
            t->end = v[1];
            seen |= 4;
        } else {
            return jfail(p, "unknown key in a tensor entry");
        }
        ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        if (expect(p, '}') != CT_OK) return CT_ERR_INVALID;
        if (seen != 7) return jfail(p, "a tensor entry lacks dtype, shape or data_offsets");
        return CT_OK;
    }
}

static int32_t metadata(jp *p, st_file *f) {
    if (expect(p, '{') != CT_OK) return CT_ERR_INVALID;
    ws(p);
    if (p->s < p->end && *p->s == '}') return p->s++, CT_OK;
    for (;;) {
        char k[ST_NAME_MAX], v[4096];
        if (jstring(p, k, sizeof k) != CT_OK || expect(p, ':') != CT_OK ||
            jstring(p, v, sizeof v) != CT_OK)
            return CT_ERR_INVALID;
        char **m = realloc(f->meta, (size_t)(2 * f->n_meta + 2) * sizeof *m);
        if (!m) return ct_error_set(p->err, CT_ERR_NOMEM, "out of memory reading %s", f->path);
        f->meta = m;
        m[2 * f->n_meta] = strdup(k);
        m[2 * f->n_meta + 1] = strdup(v);
        f->n_meta++;
        if (!m[2 * f->n_meta - 2] || !m[2 * f->n_meta - 1])
            return ct_error_set(p->err, CT_ERR_NOMEM, "out of memory reading %s", f->path);
        ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        return expect(p, '}');
    }
}

/* A tensor and its index, as sorted by qsort (which has no context argument: each key carries
 * its tensor). */
typedef struct st_key {
    const st_tensor *t;
    int32_t          i;
} st_key;

static int by_name(const void *a, const void *b) {
    const st_key *x = a, *y = b;
    return strcmp(x->t->name, y->t->name);
}

/* by (begin, end) as the reference reader sorts, then by name: a zero-size tensor at an
 * offset comes before the tensor starting there, and the order never depends on qsort's */
static int by_offsets(const void *a, const void *b) {
    const st_key *x = a, *y = b;
    if (x->t->begin != y->t->begin) return x->t->begin < y->t->begin ? -1 : 1;
    if (x->t->end != y->t->end) return x->t->end < y->t->end ? -1 : 1;
    return strcmp(x->t->name, y->t->name);
}

/* f->by_name (the indices sorted by name) and a name given twice refused: O(n log n). */
static int32_t index_names(st_file *f, st_key *k, ct_error *err) {
    for (int32_t i = 0; i < f->n; i++) k[i] = (st_key){&f->t[i], i};
    qsort(k, (size_t)f->n, sizeof *k, by_name);
    f->by_name = malloc(((size_t)f->n + 1) * sizeof *f->by_name);
    if (!f->by_name) return ct_error_set(err, CT_ERR_NOMEM, "out of memory reading %s", f->path);
    for (int32_t i = 0; i < f->n; i++) {
        if (i > 0 && !strcmp(k[i - 1].t->name, k[i].t->name))
            return ct_error_set(err, CT_ERR_INVALID, "%s: safetensors header: a tensor name "
                                "appears twice: %s ---> the file is not a safetensors file or is "
                                "damaged", f->path, k[i].t->name);
        f->by_name[i] = k[i].i;
    }
    return CT_OK;
}

/* name (n bytes and its NUL) appended to f->names (*cap bytes); its offset into *off. */
static int32_t pool_name(jp *p, st_file *f, size_t *used, size_t *cap, const char *name,
                         size_t n, size_t *off) {
    if (*used + n + 1 > *cap) {
        size_t c = *cap ? 2 * *cap : 4096;
        while (c < *used + n + 1) c *= 2;
        char *names = realloc(f->names, c);
        if (!names) return ct_error_set(p->err, CT_ERR_NOMEM, "out of memory reading %s", f->path);
        f->names = names;
        *cap = c;
    }
    memcpy(f->names + *used, name, n + 1);
    *off = *used;
    *used += n + 1;
    return CT_OK;
}

/* The header's object: the tensors (their names, one after another in f->names: a header of
 * many short names takes little more than itself) and the metadata. */
static int32_t parse_header(jp *p, st_file *f) {
    if (expect(p, '{') != CT_OK) return CT_ERR_INVALID;
    int32_t cap = 0, rc = CT_OK;
    size_t *at = NULL, used = 0, pool_cap = 0; /* (cap) each tensor's name offset in the pool */
    ws(p);
    if (p->s < p->end && *p->s == '}') return p->s++, CT_OK;
    for (;;) {
        char name[ST_NAME_MAX];
        if (jstring(p, name, sizeof name) != CT_OK || expect(p, ':') != CT_OK) {
            rc = CT_ERR_INVALID;
            goto out_free;
        }
        if (!strcmp(name, "__metadata__")) {
            if ((rc = metadata(p, f)) != CT_OK) goto out_free;
        } else {
            if (f->n == cap) {
                cap = cap ? 2 * cap : 64;
                st_tensor *t = realloc(f->t, (size_t)cap * sizeof *t);
                size_t *a = t ? realloc(at, (size_t)cap * sizeof *a) : NULL;
                if (t) f->t = t;
                if (a) at = a;
                if (!t || !a) {
                    rc = ct_error_set(p->err, CT_ERR_NOMEM, "out of memory reading %s", f->path);
                    goto out_free;
                }
            }
            st_tensor *t = &f->t[f->n];
            memset(t, 0, sizeof *t);
            if ((rc = pool_name(p, f, &used, &pool_cap, name, strlen(name), &at[f->n])) != CT_OK ||
                (rc = tensor_entry(p, t)) != CT_OK)
                goto out_free;
            f->n++;
        }
        ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        if ((rc = expect(p, '}')) != CT_OK) goto out_free;
        for (int32_t k = 0; k < f->n; k++) f->t[k].name = f->names + at[k]; /* the pool is whole */
        /* the names checked before what follows the object: a name twice is the likelier */
        st_key *keys = malloc(((size_t)f->n + 1) * sizeof *keys);
        if (!keys) {
            rc = ct_error_set(p->err, CT_ERR_NOMEM, "out of memory reading %s", f->path);
            goto out_free;
        }
        rc = index_names(f, keys, p->err);
        free(keys);
        if (rc == CT_OK) {
            ws(p);
            if (p->s != p->end) rc = jfail(p, "bytes after the header's object");
        }
        goto out_free;
    }
out_free:
    free(at);
    return rc;
}

static uint64_t dtype_size(const char *d) {
    if (!strcmp(d, "F64") || !strcmp(d, "I64") || !strcmp(d, "U64")) return 8;
    if (!strcmp(d, "F32") || !strcmp(d, "I32") || !strcmp(d, "U32")) return 4;
    if (!strcmp(d, "F16") || !strcmp(d, "BF16") || !strcmp(d, "I16") || !strcmp(d, "U16")) return 2;
    if (!strcmp(d, "I8") || !strcmp(d, "U8") || !strcmp(d, "BOOL")) return 1;
    return 0;
}

/* The tensors' data must tile the data area exactly, as the reference reader demands: sorted
 * by (begin, end), the first at 0, each starting where the one before ends (no overlap, no
 * gap), the last ending at the file's end (no trailing bytes). Zero-size tensors tile nothing
 * and may sit at any offset the tiling passes through (at 0 too), as in the reference. */
static int32_t check_coverage(const st_file *f, st_key *order, ct_error *err) {
    for (int32_t i = 0; i < f->n; i++) order[i] = (st_key){&f->t[i], i};
    qsort(order, (size_t)f->n, sizeof *order, by_offsets);
    uint64_t at = 0, data = f->file_size - f->data_start;
    int32_t rc = CT_OK;
    for (int32_t k = 0; k < f->n && rc == CT_OK; k++) {
        const st_tensor *t = order[k].t;
        if (t->begin < at)
            rc = ct_error_set(err, CT_ERR_INVALID, "%s: tensor %s's data_offsets [%llu, %llu] "
                              "overlap tensor %s's bytes ---> the file is damaged: export it "
                              "again", f->path, t->name, (unsigned long long)t->begin,
                              (unsigned long long)t->end, order[k - 1].t->name);
        else if (t->begin > at)
            rc = ct_error_set(err, CT_ERR_INVALID, "%s: %llu bytes at data offset %llu belong to "
                              "no tensor (before %s) ---> the file is damaged: export it again",
                              f->path, (unsigned long long)(t->begin - at),
                              (unsigned long long)at, t->name);
        at = t->end;
    }
    if (rc == CT_OK && at != data)
        rc = ct_error_set(err, CT_ERR_INVALID, "%s: %llu bytes after the last tensor's data "
                          "belong to no tensor (the tensors end at %llu of %llu data bytes) "
                          "---> the file is damaged or has something appended: export it again",
                          f->path, (unsigned long long)(data - at), (unsigned long long)at,
                          (unsigned long long)data);
    return rc;
}

int32_t st_open_fd(int fd, const char *path, uint64_t file_size, st_file *f, ct_error *err) {
    memset(f, 0, sizeof *f);
    f->fd = fd;
    snprintf(f->path, sizeof f->path, "%s", path);
    f->file_size = file_size;
    int32_t rc = CT_OK;
    unsigned char len8[8];
    if (pread(f->fd, len8, 8, 0) != 8) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s is shorter than a safetensors header (8 "
                          "bytes) ---> give a .safetensors file", path);
        goto out_close;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | len8[i];
    if (hl > ST_HEADER_MAX || hl + 8 > f->file_size) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s: header length %llu does not fit the file "
                          "(%llu bytes) ---> the file is not a safetensors file or is "
                          "truncated", path, (unsigned long long)hl,
                          (unsigned long long)f->file_size);
        goto out_close;
    }
    char *h = malloc(hl ? hl : 1);
    if (!h) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory reading %s", path);
        goto out_close;
    }
    if (pread(f->fd, h, hl, 8) != (ssize_t)hl) {
        free(h);
        rc = ct_error_set(err, CT_ERR_IO, "cannot read %s", path);
        goto out_close;
    }
    jp p = {h, h + hl, h, path, err};
    rc = parse_header(&p, f);
    free(h);
    f->data_start = 8 + hl;
    for (int32_t i = 0; rc == CT_OK && i < f->n; i++) {
        st_tensor *t = &f->t[i];
        uint64_t numel = 1, es = dtype_size(t->dtype);
        for (int32_t d = 0; d < t->ndim; d++) numel *= (uint64_t)t->shape[d];
        if (!es)
            rc = ct_error_set(err, CT_ERR_INVALID, "%s: tensor %s has unknown dtype '%s'", path,
                              t->name, t->dtype);
        else if (t->end < t->begin || t->end - t->begin != numel * es ||
                 t->end > f->file_size - f->data_start)
            rc = ct_error_set(err, CT_ERR_INVALID, "%s: tensor %s's data_offsets [%llu, %llu] "
                              "do not hold its shape in %s or lie outside the file ---> the file "
                              "is damaged or truncated", path, t->name,
                              (unsigned long long)t->begin, (unsigned long long)t->end, t->dtype);
    }
    if (rc == CT_OK) {
        st_key *keys = malloc(((size_t)f->n + 1) * sizeof *keys);
        if (!keys) rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory reading %s", path);
        if (rc == CT_OK) rc = check_coverage(f, keys, err);
        free(keys);
    }
    if (rc == CT_OK) return CT_OK;
out_close:
    st_close(f);
    return rc;
}

int32_t st_open(const char *path, st_file *f, ct_error *err) {
    int fd;
    struct stat st;
    memset(f, 0, sizeof *f);
    f->fd = -1;
    int32_t rc = open_regular(path, "safetensors file", "check [model] init_from", &fd, &st, err);
    return rc != CT_OK ? rc : st_open_fd(fd, path, (uint64_t)st.st_size, f, err);
}

void st_close(st_file *f) {
    if (f->fd >= 0) close(f->fd);
    for (int32_t i = 0; i < 2 * f->n_meta; i++) free(f->meta[i]);
    free(f->meta);
    free(f->t);
    free(f->by_name);
    free(f->names);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

const st_tensor *st_find(const st_file *f, const char *name) {
    int32_t lo = 0, hi = f->by_name ? f->n : 0; /* the names sorted in [lo, hi) */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        const st_tensor *t = &f->t[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

const char *st_meta(const st_file *f, const char *key) {
    for (int32_t i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta[2 * i], key)) return f->meta[2 * i + 1];
    return NULL;
}

int st_dtype_readable(const char *dtype) {
    return !strcmp(dtype, "F32") || !strcmp(dtype, "BF16") || !strcmp(dtype, "F16");
}

/* IEEE binary16 -> f32, exactly (subnormals, Inf and NaN included). */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31u, m = h & 1023u;
    if (e == 31) return ct_f32_from_bits(sign | 0x7f800000u | m << 13);
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* subnormal: m * 2^-24, exact in f32 */
        return sign ? -v : v;
    }
    return ct_f32_from_bits(sign | (e + 112) << 23 | m << 13);
}

int32_t st_read_f32(const st_file *f, const st_tensor *t, float *out, ct_error *err) {
    if (!st_dtype_readable(t->dtype))
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: tensor %s is %s; ctrain reads F32, "
                            "BF16 and F16 ---> convert the file to one of them", f->path,
                            t->name, t->dtype);
    uint64_t n = t->end - t->begin, done = 0;
    int half = strcmp(t->dtype, "F32") != 0;
    char *dst = half ? (char *)out + n : (char *)out; /* 2-byte values land in the upper half */
    while (done < n) {
        ssize_t k = pread(f->fd, dst + done, n - done, (off_t)(f->data_start + t->begin + done));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return ct_error_set(err, CT_ERR_IO, "cannot read tensor %s of %s: %s", t->name,
                                f->path, k < 0 ? strerror(errno) : "file shrank");
        done += (uint64_t)k;
    }
    if (half) { /* widen in place, front to back: element i's f32 never overwrites a later half */
        const uint16_t *h = (const uint16_t *)dst;
        int bf16 = !strcmp(t->dtype, "BF16");
        for (uint64_t i = 0; i < n / 2; i++) out[i] = bf16 ? ct_bf16_to_f32(h[i]) : f16_to_f32(h[i]);
    }
    return CT_OK;
}

/* ---- writing ------------------------------------------------------------------------- */

typedef struct sbuf {
    char  *s;
    size_t n, cap;
    int    oom;
} sbuf;

__attribute__((format(printf, 2, 3)))
static void sb_printf(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = (b->cap + (size_t)k + 1) * 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* A JSON string literal of s. */
static void sb_json(sbuf *b, const char *s) {
    sb_printf(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') sb_printf(b, "\\%c", c);
        else if (c < 0x20) sb_printf(b, "\\u%04x", c);
        else sb_printf(b, "%c", c);
    }
    sb_printf(b, "\"");
}

int32_t st_write(const char *path, const st_out *t, int32_t n, const char *const *meta,
                 int32_t n_meta, const char *dtype, st_fill_fn fill, void *ctx, ct_error *err) {
    int bf16 = !strcmp(dtype, "BF16");
    uint64_t es = bf16 ? 2 : 4;
    sbuf h = {0};
    uint64_t off = 0, max_numel = 1;
    sb_printf(&h, "{");
    if (n_meta > 0) {
        sb_printf(&h, "\"__metadata__\":{");
        for (int32_t i = 0; i < n_meta; i++) {
            sb_printf(&h, i ? "," : "");
            sb_json(&h, meta[2 * i]);
            sb_printf(&h, ":");
            sb_json(&h, meta[2 * i + 1]);
        }
        sb_printf(&h, "}");
    }
    for (int32_t i = 0; i < n; i++) {
        uint64_t numel = 1;
        sb_printf(&h, "%s", (i || n_meta > 0) ? "," : "");
        sb_json(&h, t[i].name);
        sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", bf16 ? "BF16" : "F32");
        for (int32_t d = 0; d < t[i].ndim; d++) {
            sb_printf(&h, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
            numel *= (uint64_t)t[i].shape[d];
        }
        sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                  (unsigned long long)(off + es * numel));
        off += es * numel;
        if (numel > max_numel) max_numel = numel;
    }
    sb_printf(&h, "}");
    while (!h.oom && h.n % 8 != 0) sb_printf(&h, " ");
    float *buf = malloc(max_numel * sizeof *buf);
    if (h.oom || !buf) {
        free(h.s);
        free(buf);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory writing %s", path);
    }
    outfile o;
    int32_t rc = outfile_open(&o, path, err);
    if (rc == CT_OK) {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
        outfile_write(&o, len8, 8);
        outfile_write(&o, h.s, h.n);
        for (int32_t i = 0; rc == CT_OK && i < n; i++) {
            uint64_t numel = 1;
            for (int32_t d = 0; d < t[i].ndim; d++) numel *= (uint64_t)t[i].shape[d];
            rc = fill(ctx, i, buf, err);
            if (rc == CT_OK && bf16) { /* narrowed in place, front to back */
                uint16_t *h16 = (uint16_t *)buf;
                for (uint64_t k = 0; k < numel; k++) h16[k] = ct_bf16_from_f32(buf[k]);
            }
            if (rc == CT_OK) outfile_write(&o, buf, numel * es); /* little-endian host */
        }
        if (rc == CT_OK) rc = outfile_commit(&o, err);
        else outfile_abort(&o);
    }
    free(h.s);
    free(buf);
    return rc;
}
