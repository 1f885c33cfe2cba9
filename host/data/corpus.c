/* corpus.c — the input files of `ctrain prepare` (listing, plain or gzip reading) and the
 * decoding of a JSON Lines record's string field (see corpus.h).
 * Not for: tokenizing or writing shards (prepare.c).
 */
#include "data/corpus.h"

#include "io/files.h"
#include "base/utf8.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define TEXT_HINT "give text files (plain or .gz) or folders of them"

/* ---- listing ----------------------------------------------------------------------------- */

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

/* The uncompressed size a gzip file's trailer records (mod 2^32), or its own size. */
static uint64_t gz_estimate(const char *path, int64_t size) {
    if (size < 18) return (uint64_t)size;
    int fd;
    ct_error scratch = {.struct_size = sizeof scratch}; /* an estimate: a failure is no error */
    if (open_regular(path, "text file", TEXT_HINT, &fd, NULL, &scratch) != CT_OK)
        return (uint64_t)size;
    unsigned char t[4];
    ssize_t got = pread(fd, t, 4, size - 4);
    close(fd);
    if (got != 4) return (uint64_t)size;
    uint64_t isize = (uint64_t)t[0] | (uint64_t)t[1] << 8 | (uint64_t)t[2] << 16 |
                     (uint64_t)t[3] << 24;
    return isize > (uint64_t)size ? isize : (uint64_t)size;
}

static int32_t push_file(corpus_files *f, const char *path, int64_t size, ct_error *err) {
    char **p = realloc(f->paths, (size_t)(f->n + 1) * sizeof *p);
    if (p) f->paths = p;
    int64_t *b = realloc(f->bytes, (size_t)(f->n + 1) * sizeof *b);
    if (b) f->bytes = b;
    if (!p || !b || !(f->paths[f->n] = strdup(path)))
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory listing %s", path);
    f->bytes[f->n++] = size;
    f->total_bytes += (uint64_t)size;
    f->total_estimate += ends_with(path, ".gz") ? gz_estimate(path, size) : (uint64_t)size;
    return CT_OK;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int32_t walk(const char *dir, corpus_files *f, int depth, ct_error *err) {
    if (depth > 64)
        return ct_error_set(err, CT_ERR_INVALID, "folder %s is nested more than 64 deep (a "
                            "link loop?) ---> give the folders you mean", dir);
    DIR *d;
    int32_t rc0 = open_folder(dir, "folder", TEXT_HINT, &d, err);
    if (rc0 != CT_OK) return rc0;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int32_t rc = CT_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **more = realloc(names, cap * sizeof *names);
            if (!more) {
                rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory listing %s", dir);
                goto out_free_names;
            }
            names = more;
        }
        if (!(names[n] = strdup(e->d_name))) {
            rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory listing %s", dir);
            goto out_free_names;
        }
        n++;
    }
    if (n) qsort(names, n, sizeof *names, by_name); /* qsort(NULL, 0, ...) is undefined */
    for (size_t i = 0; i < n && rc == CT_OK; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path) {
            rc = ct_error_set(err, CT_ERR_INVALID, "path too long: %s/%s", dir, names[i]);
            break;
        }
        struct stat st;
        if (stat(path, &st) != 0) continue; /* a dangling link */
        if (S_ISDIR(st.st_mode)) rc = walk(path, f, depth + 1, err);
        else if (S_ISREG(st.st_mode)) rc = push_file(f, path, (int64_t)st.st_size, err);
    }
out_free_names:
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    closedir(d);
    return rc;
}

int32_t corpus_list(const char *const *args, int32_t n_args, corpus_files *out, ct_error *err) {
    memset(out, 0, sizeof *out);
    int32_t rc = CT_OK;
    for (int32_t i = 0; i < n_args && rc == CT_OK; i++) {
        struct stat st;
        if (stat(args[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            rc = walk(args[i], out, 0, err);
            continue;
        }
        int fd;
        rc = open_regular(args[i], "text file", TEXT_HINT, &fd, &st, err);
        if (rc != CT_OK) break;
        close(fd);
        rc = push_file(out, args[i], (int64_t)st.st_size, err);
    }
    if (rc != CT_OK) corpus_files_free(out);
    return rc;
}

void corpus_files_free(corpus_files *f) {
    for (int32_t i = 0; i < f->n; i++) free(f->paths[i]);
    free(f->paths);
    free(f->bytes);
    memset(f, 0, sizeof *f);
}

/* ---- reading ----------------------------------------------------------------------------- */

struct corpus_reader {
    int    fd;
    gzFile gz; /* NULL: plain */
    char  *path;
};

corpus_reader *corpus_open(const char *path, ct_error *err) {
    corpus_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        ct_error_set(err, CT_ERR_NOMEM, "out of memory opening %s", path);
        return NULL;
    }
    if (open_regular(path, "text file", TEXT_HINT, &r->fd, NULL, err) != CT_OK) goto out_free;
    if (ends_with(path, ".gz")) {
        r->gz = gzdopen(r->fd, "rb");
        if (!r->gz) {
            close(r->fd);
            ct_error_set(err, CT_ERR_NOMEM, "cannot open %s with zlib", path);
            goto out_free;
        }
        gzbuffer(r->gz, 1 << 17);
    }
    return r;
out_free:
    free(r->path);
    free(r);
    return NULL;
}

int64_t corpus_read(corpus_reader *r, char *buf, size_t n, ct_error *err) {
    if (n > (1u << 30)) n = 1u << 30;
    if (r->gz) {
        int got = gzread(r->gz, buf, (unsigned)n);
        int z = Z_OK;
        if (got >= 0 && gzdirect(r->gz)) {
            ct_error_set(err, CT_ERR_INVALID, "%s is named .gz but does not hold gzip data ---> "
                         "rename it, or compress it with gzip", r->path);
            return -1;
        }
        if (got == 0) (void)gzerror(r->gz, &z); /* a stream cut short ends with Z_BUF_ERROR */
        if (got < 0 || z != Z_OK) {
            const char *why = gzerror(r->gz, &z);
            ct_error_set(err, CT_ERR_INVALID, "cannot decompress %s: %s ---> the .gz file is "
                         "corrupt or truncated; re-create it or give it uncompressed", r->path,
                         why);
            return -1;
        }
        return got;
    }
    for (;;) {
        ssize_t got = read(r->fd, buf, n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            ct_error_set(err, CT_ERR_IO, "cannot read text file %s: %s", r->path,
                         strerror(errno));
            return -1;
        }
        return got;
    }
}

void corpus_close(corpus_reader *r) {
    if (!r) return;
    if (r->gz) gzclose(r->gz); /* closes fd */
    else close(r->fd);
    free(r->path);
    free(r);
}

/* ---- JSON -------------------------------------------------------------------------------- */

typedef struct { const char *p, *end; } json_cursor;

static void skip_ws(json_cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n'))
        c->p++;
}

static int hex4(const char *p, const char *end, unsigned *v) {
    if (end - p < 4) return -1;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = p[i];
        unsigned d = ch >= '0' && ch <= '9' ? (unsigned)(ch - '0')
                   : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10)
                   : ch >= 'A' && ch <= 'F' ? (unsigned)(ch - 'A' + 10) : 16u;
        if (d > 15) return -1;
        *v = *v << 4 | d;
    }
    return 0;
}

static int put(char **out, size_t *len, size_t *cap, const char *s, size_t n) {
    if (!out) return 0;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        char *m = realloc(*out, c);
        if (!m) return -1;
        *out = m;
        *cap = c;
    }
    memcpy(*out + *len, s, n);
    *len += n;
    (*out)[*len] = '\0';
    return 0;
}

/* A string at c->p (the opening quote); decoded into out when out is not NULL. */
static int json_string(json_cursor *c, char **out, size_t *len, size_t *cap, const char **why) {
    if (c->p >= c->end || *c->p != '"') return *why = "not a string", -1;
    c->p++;
    while (c->p < c->end) {
        const char *run = c->p;
        while (c->p < c->end && *c->p != '"' && *c->p != '\\') c->p++;
        if (put(out, len, cap, run, (size_t)(c->p - run))) return *why = "out of memory", -1;
        if (c->p >= c->end) break;
        if (*c->p == '"') {
            c->p++;
            return 0;
        }
        c->p++; /* backslash */
        if (c->p >= c->end) break;
        char e = *c->p++, b[4];
        size_t n = 1;
        switch (e) {
        case '"': b[0] = '"'; break;
        case '\\': b[0] = '\\'; break;
        case '/': b[0] = '/'; break;
        case 'b': b[0] = '\b'; break;
        case 'f': b[0] = '\f'; break;
        case 'n': b[0] = '\n'; break;
        case 'r': b[0] = '\r'; break;
        case 't': b[0] = '\t'; break;
        case 'u': {
            unsigned u;
            if (hex4(c->p, c->end, &u)) return *why = "bad escape", -1;
            c->p += 4;
            if (u >= 0xdc00 && u <= 0xdfff) return *why = "lone surrogate", -1;
            if (u >= 0xd800 && u <= 0xdbff) {
                unsigned lo;
                if (c->end - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u' ||
                    hex4(c->p + 2, c->end, &lo) || lo < 0xdc00 || lo > 0xdfff)
                    return *why = "lone surrogate", -1;
                c->p += 6;
                u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
            }
            n = utf8_put(u, b);
            break;
        }
        default: return *why = "bad escape", -1;
        }
        if (put(out, len, cap, b, n)) return *why = "out of memory", -1;
    }
    return *why = "unterminated string", -1;
}

/* Skip any value: a string, or a number / literal / object / array (brackets counted outside
 * strings). */
static int json_skip(json_cursor *c, const char **why) {
    skip_ws(c);
    if (c->p >= c->end) return *why = "missing value", -1;
    if (*c->p == '"') return json_string(c, NULL, NULL, NULL, why);
    int depth = 0;
    while (c->p < c->end) {
        char ch = *c->p;
        if (ch == '"') {
            if (json_string(c, NULL, NULL, NULL, why)) return -1;
            continue;
        }
        if (ch == '{' || ch == '[') depth++;
        else if (ch == '}' || ch == ']') {
            if (depth == 0) return 0;
            depth--;
        } else if (ch == ',' && depth == 0) return 0;
        c->p++;
        if (depth == 0 && (ch == '}' || ch == ']')) return 0;
    }
    return depth ? (*why = "unterminated value", -1) : 0;
}

int corpus_json_field(const char *line, size_t len, const char *field, char **out,
                      size_t *len_out, size_t *cap, const char **why) {
    json_cursor c = {line, line + len};
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '{') return *why = "not a JSON object", -1;
    c.p++;
    size_t flen = strlen(field);
    for (;;) {
        skip_ws(&c);
        if (c.p < c.end && *c.p == '}') return *why = "no key", -1;
        const char *k = c.p + 1;
        if (json_string(&c, NULL, NULL, NULL, why)) return *why = "not a JSON object", -1;
        /* keys are compared raw: a key written with escapes does not match */
        int match = (size_t)(c.p - 1 - k) == flen && memcmp(k, field, flen) == 0;
        skip_ws(&c);
        if (c.p >= c.end || *c.p != ':') return *why = "not a JSON object", -1;
        c.p++;
        skip_ws(&c);
        if (match) return json_string(&c, out, len_out, cap, why);
        if (json_skip(&c, why)) return -1;
        skip_ws(&c);
        if (c.p < c.end && *c.p == ',') {
            c.p++;
            continue;
        }
        return *why = "no key", -1;
    }
}
