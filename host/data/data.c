/* data.c — llm.c token shards, 16- and 32-bit (atomic write, whole or streamed; checked reads per window), the
 * meta.ini that `ctrain prepare` writes beside them (read back: vocabulary, per-shard counts and
 * max token), and the loader that deals this rank's (B, T) micro-batches out of a seeded
 * per-epoch permutation of windows, opening shards without reading their tokens.
 * Not for: tokenizing text (prepare.c) or anything on a device. Semantics: see data.h.
 * Assumes a little-endian machine, as llm.c does (the format is little-endian).
 */
#include "data/data.h"

#include "io/files.h"
#include "io/outfile.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <ini.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- shards ------------------------------------------------------------------------------ */

/* A whole shard of n tokens (bytes already in the file's layout) at `path`. */
static int32_t shard_write_raw(const char *path, int32_t version, const void *tokens,
                               size_t token_bytes, int64_t n, ct_error *err) {
    if (n < 0 || n > INT32_MAX)
        return ct_error_set(err, CT_ERR_INVALID,
                            "%s: %lld tokens do not fit one shard (at most %d) ---> use "
                            "smaller shards (ctrain prepare --shard-tokens)",
                            path, (long long)n, INT32_MAX);
    outfile o;
    int32_t rc = outfile_open(&o, path, err); /* mode 0666 & ~umask, as meta.ini */
    if (rc != CT_OK) return rc;
    int32_t header[HOST_SHARD_HEADER_INTS] = {0};
    header[0] = HOST_SHARD_MAGIC;
    header[1] = version;
    header[2] = (int32_t)n;
    outfile_write(&o, header, sizeof header);
    outfile_write(&o, tokens, (size_t)n * token_bytes);
    return outfile_commit(&o, err);
}

int32_t shard_write(const char *path, const uint16_t *tokens, int64_t n, ct_error *err) {
    return shard_write_raw(path, HOST_SHARD_VERSION, tokens, 2, n, err);
}

int32_t shard_write_u32(const char *path, const uint32_t *tokens, int64_t n, ct_error *err) {
    return shard_write_raw(path, HOST_SHARD_VERSION_U32, tokens, 4, n, err);
}

int32_t shard_width_for_vocab(int64_t V) { return V > HOST_SHARD_U16_VOCAB ? 4 : 2; }

uint64_t fnv64_update(uint64_t h, const void *bytes, size_t n) {
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * HOST_FNV64_PRIME;
    return h;
}

int32_t shard_writer_open(host_shard_writer *w, const char *path, int32_t width, ct_error *err) {
    assert(width == 2 || width == 4);
    memset(w, 0, sizeof *w);
    w->width = width;
    w->max = -1;
    w->fnv = HOST_FNV64_OFFSET;
    int32_t rc = outfile_open(&w->out, path, err);
    if (rc != CT_OK) return rc;
    int32_t header[HOST_SHARD_HEADER_INTS] = {0}; /* the real one is written by finish */
    outfile_write(&w->out, header, sizeof header);
    return CT_OK;
}

int32_t shard_writer_append(host_shard_writer *w, const uint32_t *tokens, int64_t n,
                            ct_error *err) {
    if (w->n + n > INT32_MAX)
        return ct_error_set(err, CT_ERR_INVALID, "%s: %lld tokens do not fit one shard (at "
                            "most %d) ---> use smaller shards (ctrain prepare --shard-tokens)",
                            w->out.path, (long long)(w->n + n), INT32_MAX);
    uint32_t limit = w->width == 2 ? 0xFFFFu : (uint32_t)INT32_MAX;
    int32_t max = w->max;
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] > limit)
            return ct_error_set(err, CT_ERR_INVALID, "%s: token %lu at position %lld does not "
                                "fit a %d-byte shard ---> an internal error: the width is "
                                "chosen from the vocabulary", w->out.path,
                                (unsigned long)tokens[i], (long long)(w->n + i), w->width);
        if ((int32_t)tokens[i] > max) max = (int32_t)tokens[i];
    }
    w->max = max;
    enum { CHUNK = 4096 };
    uint16_t narrow[CHUNK];
    for (int64_t done = 0; done < n;) { /* the bytes as stored: hashed and written alike */
        int64_t k = n - done < CHUNK ? n - done : CHUNK;
        const void *bytes = tokens + done;
        if (w->width == 2) {
            for (int64_t i = 0; i < k; i++) narrow[i] = (uint16_t)tokens[done + i];
            bytes = narrow;
        }
        w->fnv = fnv64_update(w->fnv, bytes, (size_t)k * (size_t)w->width);
        outfile_write(&w->out, bytes, (size_t)k * (size_t)w->width);
        done += k;
    }
    if (w->out.err_no)
        return ct_error_set(err, CT_ERR_IO, "cannot write %s: %s ---> check free disk space",
                            w->out.tmp, strerror(w->out.err_no));
    w->n += n;
    return CT_OK;
}

int32_t shard_writer_finish(host_shard_writer *w, ct_error *err) {
    int32_t header[HOST_SHARD_HEADER_INTS] = {0};
    header[0] = HOST_SHARD_MAGIC;
    header[1] = w->width == 4 ? HOST_SHARD_VERSION_U32 : HOST_SHARD_VERSION;
    header[2] = (int32_t)w->n;
    outfile_pwrite(&w->out, header, sizeof header, 0);
    return outfile_commit(&w->out, err);
}

void shard_writer_abort(host_shard_writer *w) { outfile_abort(&w->out); }

#define SHARD_HINT "name a .bin token shard made by `ctrain prepare` or llm.c"

/* Read exactly `bytes` at `offset`; the bytes read (fewer at end of file), or -1 (errno). */
static ssize_t pread_all(int fd, void *buf, size_t bytes, off_t offset) {
    size_t got = 0;
    while (got < bytes) {
        ssize_t r = pread(fd, (char *)buf + got, bytes - got, offset + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int32_t shard_open(const char *path, host_token_shard *out, ct_error *err) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    int fd;
    struct stat st;
    int32_t rc = open_regular(path, "token shard", SHARD_HINT, &fd, &st, err);
    if (rc != CT_OK) return rc;
    if (st.st_size < HOST_SHARD_HEADER_BYTES) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s: %lld bytes, shorter than the %d-byte "
                          "header of a token shard ---> the file is truncated or not a shard",
                          path, (long long)st.st_size, HOST_SHARD_HEADER_BYTES);
        goto out_close_file;
    }
    int32_t h[HOST_SHARD_HEADER_INTS];
    ssize_t got = pread_all(fd, h, sizeof h, 0);
    if (got != (ssize_t)sizeof h) {
        rc = ct_error_set(err, CT_ERR_IO, "cannot read the header of %s: %s", path,
                          got < 0 ? strerror(errno) : "the file is shorter than it was a moment "
                          "ago ---> the file changed while being opened; re-create it");
        goto out_close_file;
    }
    if (h[0] != HOST_SHARD_MAGIC) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s: bad magic %d (a token shard starts with "
                          "%d) ---> not an llm.c token shard; make shards with `ctrain "
                          "prepare`", path, h[0], HOST_SHARD_MAGIC);
        goto out_close_file;
    }
    if (h[1] != HOST_SHARD_VERSION && h[1] != HOST_SHARD_VERSION_U32) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s: shard version %d; ctrain reads version %d "
                          "(uint16 tokens) and %d (uint32 tokens) ---> make shards with "
                          "`ctrain prepare`", path, h[1], HOST_SHARD_VERSION,
                          HOST_SHARD_VERSION_U32);
        goto out_close_file;
    }
    int32_t width = h[1] == HOST_SHARD_VERSION_U32 ? 4 : 2;
    int64_t n = h[2];
    int64_t expect = HOST_SHARD_HEADER_BYTES + width * n;
    if (n < 0 || st.st_size != expect) {
        int64_t other = HOST_SHARD_HEADER_BYTES + (6 - width) * n; /* the other width's size */
        rc = ct_error_set(err, CT_ERR_INVALID, "%s: header says %lld tokens (%lld bytes; "
                          "version %d: %d-byte tokens) but the file has %lld bytes ---> %s; "
                          "re-create it", path, (long long)n, (long long)expect, h[1], width,
                          (long long)st.st_size,
                          n > 0 && st.st_size == other
                              ? "its size is that of the other token width: the header's "
                                "version does not match the tokens written"
                          : st.st_size < expect ? "the file is truncated"
                                                : "the file is longer than its header says");
        goto out_close_file;
    }
    out->path = strdup(path);
    if (!out->path) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory opening %s", path);
        goto out_close_file;
    }
    out->n = n;
    out->width = width;
    out->dev = (uint64_t)st.st_dev;
    out->ino = (uint64_t)st.st_ino;
    out->fd = fd;
    return CT_OK;

out_close_file:
    close(fd);
    return rc;
}

void shard_release(host_token_shard *s) {
    if (s && s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
}

void shard_close(host_token_shard *s) {
    if (!s) return;
    shard_release(s);
    free(s->path);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

#define CHANGED_HINT "the file changed during the run; do not rewrite or truncate shards " \
                     "while a run reads them (write new ones beside them, e.g. with `ctrain " \
                     "prepare --out` another folder), then resume from the last checkpoint"

int32_t shard_read(host_token_shard *s, int64_t first, int64_t count, uint32_t *out,
                   ct_error *err) {
    assert(first >= 0 && count >= 0 && first + count <= s->n);
    struct stat st;
    if (s->fd < 0) {
        int32_t rc = open_regular(s->path, "token shard", SHARD_HINT, &s->fd, &st, err);
        if (rc != CT_OK) {
            char why[sizeof err->message];
            snprintf(why, sizeof why, "%s", err->message);
            return ct_error_set(err, rc, "%s: token position %lld: the file can no longer be "
                                "read (%s) ---> %s", s->path, (long long)first, why,
                                CHANGED_HINT);
        }
        if ((uint64_t)st.st_ino != s->ino || (uint64_t)st.st_dev != s->dev) {
            shard_release(s);
            return ct_error_set(err, CT_ERR_IO, "%s: token position %lld: the file was replaced "
                                "by another one since it was opened ---> %s", s->path,
                                (long long)first, CHANGED_HINT);
        }
    } else if (fstat(s->fd, &st) != 0) {
        return ct_error_set(err, CT_ERR_IO, "%s: token position %lld: cannot stat: %s",
                            s->path, (long long)first, strerror(errno));
    }
    const int64_t w = s->width;
    int64_t expect = HOST_SHARD_HEADER_BYTES + w * s->n;
    if (st.st_size != expect)
        return ct_error_set(err, CT_ERR_IO, "%s: token position %lld: the file has %lld bytes, "
                            "%lld when it was opened ---> %s", s->path, (long long)first,
                            (long long)st.st_size, (long long)expect, CHANGED_HINT);
    /* 2-byte tokens land in the upper half of out and are widened in place from the front
     * (token i moves from byte 2*count + 2i to byte 4i, never over one not yet read) */
    size_t bytes = (size_t)count * (size_t)w;
    void *dst = (unsigned char *)out + (w == 4 ? 0 : 2 * count);
    ssize_t got = pread_all(s->fd, dst, bytes, (off_t)(HOST_SHARD_HEADER_BYTES + w * first));
    if (got < 0)
        return ct_error_set(err, CT_ERR_IO, "%s: token position %lld: cannot read: %s",
                            s->path, (long long)first, strerror(errno));
    if ((size_t)got < bytes)
        return ct_error_set(err, CT_ERR_IO, "%s: token position %lld: the file ended after "
                            "%lld bytes, %lld when it was opened ---> %s", s->path,
                            (long long)(first + got / w), (long long)(HOST_SHARD_HEADER_BYTES +
                            w * first + got), (long long)expect, CHANGED_HINT);
    if (w == 2) { /* byte copies: the two views of one buffer alias (char access) */
        const unsigned char *narrow = (const unsigned char *)out + 2 * count;
        for (int64_t i = 0; i < count; i++) {
            uint16_t v;
            memcpy(&v, narrow + 2 * i, 2);
            out[i] = v;
        }
    }
    return CT_OK;
}

int32_t shard_max_token(host_token_shard *s, int32_t *max, int64_t *position, ct_error *err) {
    enum { CHUNK = 1 << 18 };
    uint32_t *buf = malloc(CHUNK * sizeof *buf);
    if (!buf) return ct_error_set(err, CT_ERR_NOMEM, "out of memory scanning %s", s->path);
    int32_t best = -1;
    int64_t at = -1;
    int32_t rc = CT_OK;
    for (int64_t first = 0; first < s->n && rc == CT_OK; first += CHUNK) {
        int64_t count = s->n - first < CHUNK ? s->n - first : CHUNK;
        rc = shard_read(s, first, count, buf, err);
        for (int64_t i = 0; rc == CT_OK && i < count; i++) {
            if (buf[i] > (uint32_t)INT32_MAX)
                rc = ct_error_set(err, CT_ERR_INVALID, "%s: token %lu at position %lld is "
                                  "above 2^31-1, no vocabulary's ---> the file is not token "
                                  "data; re-create it", s->path, (unsigned long)buf[i],
                                  (long long)(first + i));
            else if ((int32_t)buf[i] > best) {
                best = (int32_t)buf[i];
                at = first + i;
            }
        }
    }
    free(buf);
    *max = best;
    if (position) *position = at;
    return rc;
}

/* ---- meta.ini --------------------------------------------------------------------------- */

typedef struct { host_data_meta *m; const char *bad; } meta_parse;

static int on_meta_key(void *user, const char *section, const char *name, const char *value) {
    meta_parse *p = user;
    host_data_meta *m = p->m;
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    int is_int = !errno && end != value && *end == '\0';
    if (!strcmp(section, "data")) {
        if (!strcmp(name, "tokenizer")) snprintf(m->tokenizer, sizeof m->tokenizer, "%s", value);
        else if (!strcmp(name, "tokenizer_model"))
            snprintf(m->tokenizer_model, sizeof m->tokenizer_model, "%s", value);
        else if (!strcmp(name, "tokenizer_fnv64"))
            snprintf(m->tokenizer_fnv64, sizeof m->tokenizer_fnv64, "%s", value);
        else if (!strcmp(name, "vocab_size")) {
            if (!is_int || v < 1 || v > INT32_MAX) return p->bad = "vocab_size", 0;
            m->vocab_size = (int32_t)v;
        } else if (!strcmp(name, "token_bytes")) {
            if (!is_int || (v != 2 && v != 4)) return p->bad = "token_bytes (2 or 4)", 0;
            m->token_bytes = (int32_t)v;
        } else if (!strcmp(name, "max_token")) {
            if (!is_int || v < -1 || v >= INT32_MAX) return p->bad = "max_token", 0;
            m->max_token = (int32_t)v;
        } else if (!strcmp(name, "eot_token")) {
            if (!is_int || v < 0 || v >= INT32_MAX) return p->bad = "eot_token", 0;
            m->eot_token = (int32_t)v;
        }
        return 1;
    }
    if (strncmp(section, "shard ", 6) != 0) return 1;
    const char *shard = section + 6;
    host_shard_meta *sm = m->n_shards ? &m->shards[m->n_shards - 1] : NULL;
    if (!sm || strcmp(sm->name, shard) != 0) {
        host_shard_meta *more = realloc(m->shards, (size_t)(m->n_shards + 1) * sizeof *more);
        if (!more) return p->bad = "out of memory", 0;
        m->shards = more;
        sm = &m->shards[m->n_shards++];
        memset(sm, 0, sizeof *sm);
        sm->tokens = sm->bytes = -1;
        sm->max_token = -1;
        snprintf(sm->name, sizeof sm->name, "%s", shard);
    }
    if (strcmp(name, "tokens") && strcmp(name, "bytes") && strcmp(name, "max_token")) return 1;
    if (!is_int || v < -1) return p->bad = name, 0;
    if (!strcmp(name, "tokens")) sm->tokens = v;
    else if (!strcmp(name, "bytes")) sm->bytes = v;
    else if (v >= INT32_MAX) return p->bad = name, 0;
    else sm->max_token = (int32_t)v;
    return 1;
}

int32_t data_meta_read(const char *dir, host_data_meta *m, ct_error *err) {
    memset(m, 0, sizeof *m);
    m->max_token = -1;
    m->eot_token = -1;
    snprintf(m->path, sizeof m->path, "%s/meta.ini", dir);
    if (access(m->path, F_OK) != 0) return CT_OK;
    FILE *f;
    int32_t rc = fopen_regular(m->path, "data description", "re-run `ctrain prepare`, or "
                               "remove it (the shards then get only the per-window check)", &f,
                               err);
    if (rc != CT_OK) return rc;
    meta_parse p = {m, NULL};
    int line = ini_parse_file(f, on_meta_key, &p);
    fclose(f);
    if (line != 0) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s:%d: %s%s ---> re-run `ctrain prepare`, or "
                          "remove meta.ini (the shards then get only the per-window check)",
                          m->path, line, p.bad ? "bad value of " : "not INI syntax",
                          p.bad ? p.bad : "");
        data_meta_free(m);
        return rc;
    }
    m->found = 1;
    return CT_OK;
}

int32_t data_meta_for(const char *data_path, host_data_meta *m, ct_error *err) {
    struct stat st;
    if (stat(data_path, &st) == 0 && S_ISDIR(st.st_mode)) return data_meta_read(data_path, m, err);
    char *copy = strdup(data_path);
    if (!copy) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    int32_t rc = data_meta_read(dirname(copy), m, err);
    free(copy);
    return rc;
}

int data_meta_tokenizers_differ(const host_data_meta *a, const host_data_meta *b) {
    if (!a->found || !b->found || !*a->tokenizer || !*b->tokenizer) return 0;
    if (strcmp(a->tokenizer, b->tokenizer)) return 1;
    return *a->tokenizer_fnv64 && *b->tokenizer_fnv64 &&
           strcasecmp(a->tokenizer_fnv64, b->tokenizer_fnv64) != 0;
}

const char *data_meta_tokenizer_text(const host_data_meta *m, char *buf, size_t cap) {
    if (*m->tokenizer_fnv64)
        snprintf(buf, cap, "%s (%.64s, fnv64 %s)", m->tokenizer,
                 *m->tokenizer_model ? m->tokenizer_model : "model", m->tokenizer_fnv64);
    else snprintf(buf, cap, "%s", *m->tokenizer ? m->tokenizer : "unrecorded");
    return buf;
}

void data_meta_free(host_data_meta *m) {
    free(m->shards);
    m->shards = NULL;
    m->n_shards = 0;
}

const host_shard_meta *data_meta_shard(const host_data_meta *m, const char *name) {
    for (int32_t i = 0; i < m->n_shards; i++)
        if (!strcmp(m->shards[i].name, name)) return &m->shards[i];
    return NULL;
}

/* ---- the permutation --------------------------------------------------------------------- */

/* splitmix64: a tiny, well-mixed generator; the whole state is one counter. */
static inline uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, bound), bound >= 1, without modulo bias (rejection). */
static inline uint64_t rng_below(uint64_t *state, uint64_t bound) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do x = splitmix64(state);
    while (x >= limit);
    return x % bound;
}

/* order = a permutation of 0..n-1 that depends on (seed, epoch) only (Fisher-Yates). */
static void shuffle_windows(uint32_t *order, int64_t n, uint64_t seed, uint64_t epoch) {
    uint64_t state = seed ^ (0xd1b54a32d192ed03ull * (epoch + 1));
    (void)splitmix64(&state);
    for (int64_t i = 0; i < n; i++) order[i] = (uint32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(&state, (uint64_t)i + 1);
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* ---- the loader -------------------------------------------------------------------------- */

struct host_loader {
    host_token_shard *shards;
    int32_t   n_shards;
    int64_t  *first_window; /* n_shards+1 prefix sums: shard i holds [first[i], first[i+1]) */
    int64_t   n_windows;
    int64_t   n_tokens;
    uint32_t *order;        /* n_windows: this epoch's permutation */
    uint64_t  order_epoch;  /* the epoch `order` was drawn for */
    int64_t   B, T;
    int32_t   rank, world;
    uint64_t  seed;
    int64_t   vocab_limit;  /* tokens must be below it (0: no limit) */
    int32_t   recorded_max; /* the largest max_token meta.ini records; -1: a shard has none */
    int32_t   open_shard;   /* the one shard whose descriptor is open, or -1 */
    uint32_t *window;       /* T+1 tokens being dealt */
    host_loader_state st;
};

/* A sorted list of shard paths. */
typedef struct { char **paths; size_t n; } path_list;

static void path_list_free(path_list *pl) {
    for (size_t i = 0; i < pl->n; i++) free(pl->paths[i]);
    free(pl->paths);
    memset(pl, 0, sizeof *pl);
}

/* Copy glob's matches of pattern into pl; 1 when something matched, 0 when nothing, -1 OOM. */
static int glob_into(const char *pattern, path_list *pl) {
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) {
        globfree(&g);
        return 0;
    }
    pl->paths = calloc(g.gl_pathc, sizeof *pl->paths);
    int rc = pl->paths ? 1 : -1;
    for (size_t i = 0; rc == 1 && i < g.gl_pathc; i++) {
        pl->paths[i] = strdup(g.gl_pathv[i]);
        if (!pl->paths[i]) rc = -1;
        else pl->n++;
    }
    globfree(&g);
    if (rc < 0) path_list_free(pl);
    return rc;
}

/* The files named by path: one file, a folder + split, or a glob; sorted by name. */
static int32_t list_shards(const char *path, const char *split, path_list *pl, ct_error *err) {
    struct stat st;
    memset(pl, 0, sizeof *pl);
    int found;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        const char *sp = split ? split : "train";
        char pattern[PATH_MAX];
        snprintf(pattern, sizeof pattern, "%s/%s_*.bin", path, sp);
        found = glob_into(pattern, pl);
        if (found == 0) {
            snprintf(pattern, sizeof pattern, "%s/*%s*.bin", path, sp);
            found = glob_into(pattern, pl);
        }
        if (found == 0)
            return ct_error_set(err, CT_ERR_IO, "no %s shards in %s (looked for %s_*.bin and "
                                "*%s*.bin) ---> run `ctrain prepare --text FILE --out %s`, or "
                                "name a .bin file", sp, path, sp, sp, path);
    } else if (stat(path, &st) == 0) {
        pl->paths = calloc(1, sizeof *pl->paths);
        if (pl->paths && (pl->paths[0] = strdup(path))) pl->n = 1;
        found = pl->n == 1 ? 1 : -1;
    } else {
        found = glob_into(path, pl);
        if (found == 0)
            return ct_error_set(err, CT_ERR_IO, "no token shard matches %s ---> check the path "
                                "([data] train / val), or make shards with `ctrain prepare`",
                                path);
    }
    if (found < 0) {
        path_list_free(pl);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory listing %s", path);
    }
    return CT_OK;
}

/* The meta.ini record of shard s, when its folder's meta.ini (read once per folder into *meta)
 * has one that matches the file's token count and size: its max_token against the
 * vocabulary. No token is read. */
static int32_t shard_meta_check(host_loader *l, const host_token_shard *s, host_data_meta *meta,
                                char **meta_dir, ct_error *err) {
    char *copy = strdup(s->path);
    if (!copy) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    char *copy2 = strdup(s->path);
    if (!copy2) {
        free(copy);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    }
    const char *dir = dirname(copy), *base = basename(copy2);
    int32_t rc = CT_OK;
    if (!*meta_dir || strcmp(*meta_dir, dir) != 0) {
        data_meta_free(meta);
        free(*meta_dir);
        *meta_dir = strdup(dir);
        rc = data_meta_read(dir, meta, err);
        if (rc == CT_OK && !*meta_dir) rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    }
    if (rc == CT_OK && meta->found && meta->token_bytes && meta->token_bytes != s->width)
        rc = ct_error_set(err, CT_ERR_INVALID, "%s: the header (version %d) says %d-byte tokens "
                          "but its meta.ini (%s) records token_bytes = %d ---> the shard and "
                          "meta.ini do not belong together; re-run `ctrain prepare`", s->path,
                          s->width == 4 ? HOST_SHARD_VERSION_U32 : HOST_SHARD_VERSION, s->width,
                          meta->path, meta->token_bytes);
    const host_shard_meta *sm = rc == CT_OK ? data_meta_shard(meta, base) : NULL;
    int trusted = sm && sm->tokens == s->n &&
                  sm->bytes == HOST_SHARD_HEADER_BYTES + (int64_t)s->width * s->n &&
                  sm->max_token >= -1;
    if (!trusted) l->recorded_max = -2; /* unknown for good */
    else if (l->recorded_max != -2 && sm->max_token > l->recorded_max)
        l->recorded_max = sm->max_token;
    if (trusted && l->vocab_limit > 0 && sm->max_token >= l->vocab_limit)
        rc = ct_error_set(err, CT_ERR_INVALID, "%s: its meta.ini (%s) records max_token %d, "
                          ">= the model's vocab_size %lld ---> tokenize the data with the "
                          "model's tokenizer, or set [model] vocab_size to at least %d",
                          s->path, meta->path, sm->max_token, (long long)l->vocab_limit,
                          sm->max_token + 1);
    free(copy);
    free(copy2);
    return rc;
}

host_loader *loader_open(const char *path, const char *split, int64_t vocab_size_limit, int64_t B,
                       int64_t T, int32_t rank, int32_t world, uint64_t seed, ct_error *err) {
    if (B < 1 || T < 1 || world < 1 || rank < 0 || rank >= world) {
        ct_error_set(err, CT_ERR_INVALID, "loader for %s: bad batch %lld x %lld on rank %d of "
                     "%d ---> batch_size and seq_len must be >= 1", path, (long long)B,
                     (long long)T, rank, world);
        return NULL;
    }
    host_loader *l = calloc(1, sizeof *l);
    if (!l) {
        ct_error_set(err, CT_ERR_NOMEM, "out of memory opening %s", path);
        return NULL;
    }
    l->B = B, l->T = T, l->rank = rank, l->world = world, l->seed = seed;
    l->vocab_limit = vocab_size_limit;
    l->open_shard = -1;
    l->recorded_max = -1;
    path_list pl;
    host_data_meta meta = {.max_token = -1};
    char *meta_dir = NULL;
    int32_t rc;
    if (list_shards(path, split, &pl, err) != CT_OK) goto out_free_loader;
    l->shards = calloc(pl.n, sizeof *l->shards);
    l->first_window = calloc(pl.n + 1, sizeof *l->first_window);
    l->window = malloc((size_t)(T + 1) * sizeof *l->window);
    if (!l->shards || !l->first_window || !l->window) {
        ct_error_set(err, CT_ERR_NOMEM, "out of memory opening %s", path);
        goto out_free_list;
    }
    for (size_t i = 0; i < pl.n; i++) {
        host_token_shard *s = &l->shards[l->n_shards];
        if (shard_open(pl.paths[i], s, err) != CT_OK) goto out_free_list;
        l->n_shards++;
        if ((rc = shard_meta_check(l, s, &meta, &meta_dir, err)) != CT_OK) goto out_free_list;
        shard_release(s); /* reopened when a window of it is dealt */
        int64_t w = s->n > 0 ? (s->n - 1) / T : 0;
        l->first_window[l->n_shards] = l->first_window[l->n_shards - 1] + w;
        l->n_tokens += s->n;
    }
    l->n_windows = l->first_window[l->n_shards];
    if (l->n_windows > (int64_t)UINT32_MAX) {
        ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: %lld sequences exceed the loader's limit "
                     "of 2^32 ---> use a longer seq_len or fewer shards", path,
                     (long long)l->n_windows);
        goto out_free_list;
    }
    if (l->n_windows < (int64_t)world * B) {
        ct_error_set(err, CT_ERR_INVALID, "%s: %lld tokens make %lld sequences of %lld+1 "
                     "tokens, fewer than one global batch (%d ranks x %lld) ---> use more "
                     "text, a smaller batch_size or a shorter seq_len", path,
                     (long long)l->n_tokens, (long long)l->n_windows, (long long)T, world,
                     (long long)B);
        goto out_free_list;
    }
    l->order = malloc((size_t)l->n_windows * sizeof *l->order);
    if (!l->order) {
        ct_error_set(err, CT_ERR_NOMEM, "out of memory: %lld sequences of %s",
                     (long long)l->n_windows, path);
        goto out_free_list;
    }
    shuffle_windows(l->order, l->n_windows, seed, 0);
    l->order_epoch = 0;
    path_list_free(&pl);
    data_meta_free(&meta);
    free(meta_dir);
    return l;

out_free_list:
    path_list_free(&pl);
    data_meta_free(&meta);
    free(meta_dir);
out_free_loader:
    loader_close(l);
    return NULL;
}

void loader_close(host_loader *l) {
    if (!l) return;
    for (int32_t i = 0; i < l->n_shards; i++) shard_close(&l->shards[i]);
    free(l->shards);
    free(l->first_window);
    free(l->order);
    free(l->window);
    free(l);
}

/* The shard holding window w (binary search over the prefix sums). */
static int32_t shard_of_window(const host_loader *l, int64_t w) {
    int32_t lo = 0, hi = l->n_shards - 1;
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (l->first_window[mid] <= w) lo = mid;
        else hi = mid - 1;
    }
    assert(l->first_window[lo] <= w && w < l->first_window[lo + 1]);
    return lo;
}

static void ensure_order(host_loader *l) {
    if (l->order_epoch == l->st.epoch) return;
    shuffle_windows(l->order, l->n_windows, l->seed, l->st.epoch);
    l->order_epoch = l->st.epoch;
}

int32_t loader_next(host_loader *l, int32_t *inputs, int32_t *targets, ct_error *err) {
    int64_t global = (int64_t)l->world * l->B;
    if ((int64_t)l->st.position + global > l->n_windows) { /* skip the short tail */
        l->st.epoch++;
        l->st.position = 0;
    }
    ensure_order(l);
    int64_t base = (int64_t)l->st.position + (int64_t)l->rank * l->B;
    for (int64_t b = 0; b < l->B; b++) {
        int64_t w = l->order[base + b];
        int32_t s = shard_of_window(l, w);
        if (s != l->open_shard) { /* one descriptor at a time */
            if (l->open_shard >= 0) shard_release(&l->shards[l->open_shard]);
            l->open_shard = s;
        }
        host_token_shard *sh = &l->shards[s];
        int64_t first = (w - l->first_window[s]) * l->T;
        int32_t rc = shard_read(sh, first, l->T + 1, l->window, err);
        if (rc != CT_OK) return rc;
        const uint32_t *tok = l->window;
        int64_t limit = l->vocab_limit > 0 ? l->vocab_limit : (int64_t)INT32_MAX + 1;
        for (int64_t t = 0; t <= l->T; t++)
            if ((int64_t)tok[t] >= limit)
                return ct_error_set(err, CT_ERR_INVALID, "%s: token %lu at position %lld is >= "
                                    "the model's vocab_size %lld ---> tokenize the data with the "
                                    "model's tokenizer, or set [model] vocab_size to at least "
                                    "%lld (tokens are checked as each sequence is read)",
                                    sh->path, (unsigned long)tok[t], (long long)(first + t),
                                    (long long)limit, (long long)tok[t] + 1);
        int32_t *in = inputs + b * l->T, *tg = targets + b * l->T;
        for (int64_t t = 0; t < l->T; t++) {
            in[t] = (int32_t)tok[t];
            tg[t] = (int32_t)tok[t + 1];
        }
    }
    l->st.position += (uint64_t)global;
    return CT_OK;
}

void loader_reset(host_loader *l) {
    l->st.epoch = 0;
    l->st.position = 0;
    ensure_order(l);
}

host_loader_state loader_get_state(const host_loader *l) { return l->st; }

int32_t loader_set_state(host_loader *l, host_loader_state st, ct_error *err) {
    if (st.position > (uint64_t)l->n_windows)
        return ct_error_set(err, CT_ERR_INVALID, "data position %llu is beyond the %lld "
                            "sequences of this data ---> the checkpoint was made with other "
                            "data or another seq_len", (unsigned long long)st.position,
                            (long long)l->n_windows);
    l->st = st;
    ensure_order(l);
    return CT_OK;
}

int64_t loader_batches_per_epoch(const host_loader *l) {
    return l->n_windows / ((int64_t)l->world * l->B);
}
int64_t loader_windows(const host_loader *l) { return l->n_windows; }
/* Does l read the file of shard s? */
static int loader_reads(const host_loader *l, const host_token_shard *s) {
    for (int32_t j = 0; j < l->n_shards; j++)
        if (l->shards[j].dev == s->dev && l->shards[j].ino == s->ino) return 1;
    return 0;
}

const char *loader_partial_overlap(const host_loader *a, const host_loader *b) {
    const char *shared = NULL;
    int differ = 0;
    for (int32_t i = 0; i < a->n_shards; i++) {
        if (loader_reads(b, &a->shards[i])) shared = shared ? shared : a->shards[i].path;
        else differ = 1;
    }
    for (int32_t j = 0; j < b->n_shards && !differ; j++) differ = !loader_reads(a, &b->shards[j]);
    return shared && differ ? shared : NULL;
}
int64_t loader_tokens(const host_loader *l) { return l->n_tokens; }
int32_t loader_recorded_max_token(const host_loader *l) {
    return l->recorded_max < 0 ? -1 : l->recorded_max;
}

int32_t loader_shard_count(const host_loader *l) { return l->n_shards; }


/* ---- statistics -------------------------------------------------------------------------- */

double unigram_entropy(const uint64_t *counts, int64_t vocab) {
    double total = 0;
    for (int64_t i = 0; i < vocab; i++) total += (double)counts[i];
    if (total <= 0) return 0;
    double h = 0;
    for (int64_t i = 0; i < vocab; i++) {
        if (!counts[i]) continue;
        double p = (double)counts[i] / total;
        h -= p * log(p);
    }
    return h;
}
