/* prepare.c — what `ctrain prepare` does (cli/prepare.c is its command line): stream text (files, folders, .gz, JSON Lines;
 * corpus.c reads them) through a tokenizer (bytes, a sentencepiece model trained on an even
 * sample of the text or given, or a byte-level BPE file) on all cores, in units written back in input order; split each
 * file's tail off as validation data; write llm.c shards piece by piece and meta.ini (counts,
 * max token and hash per shard); print a summary with the unigram entropy of the train tokens.
 * Not for: the shard format itself or loading batches (data.c), reading inputs (corpus.c).
 */
#include "data/prepare.h"

#include "data/bpe.h"
#include "data/bpe_write.h"
#include "data/corpus.h"
#include "data/data.h"
#include "io/files.h"
#include "io/outfile.h"
#include "data/runtok.h"
#include "data/tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


prepare_options prepare_default_options(void) {
    prepare_options o = {0};
    o.val_fraction = 0.05;
    o.tokenizer = "bytes";
    o.vocab_size = 8192;
    o.sp_model_type = "bpe";
    o.sp_max_sentences = 2000000;
    o.sp_sample_bytes = 100000000;
    o.shard_tokens = 100000000;
    return o;
}

#define TEXT_HINT "give --text files that are regular files of text"
#define BPE_HINT "give --tokenizer-file a *.tiktoken, tokenizer.json or vocab.json file"
#define UNIT_BYTES   (2u << 20)  /* text per tokenizing task (tests may set less) */
#define SAMPLE_BLOCK (1u << 20)  /* sentencepiece's sample is taken in blocks of this much */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *m = realloc(*p, c * elem);
    if (!m) return -1;
    *p = m;
    *cap = c;
    return 0;
}

/* ---- the input stream of one file ------------------------------------------------------- */

typedef struct text_stream {
    corpus_reader *r;
    const char    *path;
    char          *buf;        /* pending bytes are [head, len) */
    size_t         head, len, cap;
    int            eof;
    int64_t        line;       /* JSON Lines: the line number of the next line */
    uint64_t      *bytes_read; /* progress: every byte that came out of the reader */
} text_stream;

/* Have at least `want` pending bytes, or all that is left. */
static int32_t fill_more(text_stream *ts, size_t want, ct_error *err) {
    if (ts->head > 0) {
        memmove(ts->buf, ts->buf + ts->head, ts->len - ts->head);
        ts->len -= ts->head;
        ts->head = 0;
    }
    while (ts->len < want && !ts->eof) {
        if (grow((void **)&ts->buf, &ts->cap, want + 1, 1))
            return ct_error_set(err, CT_ERR_NOMEM, "out of memory reading %s", ts->path);
        int64_t got = corpus_read(ts->r, ts->buf + ts->len, ts->cap - ts->len, err);
        if (got < 0) return err->code;
        if (got == 0) ts->eof = 1;
        ts->len += (size_t)got;
        *ts->bytes_read += (uint64_t)got;
    }
    return CT_OK;
}

/* One tokenizing task: a run of text (plain), or of documents (JSON Lines), and its tokens. */
typedef struct work_unit {
    char     *text;
    size_t    len, cap;
    size_t   *doc_end;  /* JSON Lines: document k is text[doc_end[k-1], doc_end[k]) */
    size_t    n_docs, doc_cap;
    uint32_t *tok;            /* any vocabulary: the shard writer narrows to its width */
    size_t    n_tok, tok_cap;
    const host_tokenizer *tk; /* sentencepiece; NULL otherwise */
    const bpe_model *bpe;     /* bpe; NULL otherwise (both NULL: bytes) */
    int32_t   eot;            /* the token before each document (documents only) */
    int32_t   rc;
    ct_error  err;
} work_unit;

/* The next piece of plain text for BPE: about `target` bytes, cut where the tokenizer's pattern
 * ends a piece whatever the context (bpe_cut_before), so the pieces' ids are the whole file's;
 * the cut is searched back to the start of the piece, then forward (more text read) until one
 * is found or the file ends (a Split pattern ctrain knows no cut places of: the whole file). */
static int32_t fill_bpe_unit(text_stream *ts, work_unit *u, const bpe_model *bpe,
                             size_t target, ct_error *err) {
    u->len = 0;
    u->n_docs = 0;
    int32_t rc = fill_more(ts, target + 1, err);
    if (rc != CT_OK) return rc;
    size_t len = ts->len - ts->head, pos = len; /* all that is left, when that is no more */
    if (len > target && !(pos = bpe_cut_before(bpe, ts->buf + ts->head, len, 2, target))) {
        for (size_t from = target + 1;;) {
            /* a piece longer than 64 KiB is cut where bpe_encode cuts it: memory stays bounded
             * by the unit, never by a line without a place to cut */
            if ((pos = bpe_cut_in_long_piece(bpe, ts->buf + ts->head, len, target))) break;
            if (from < len && (pos = bpe_cut_after(bpe, ts->buf + ts->head, len, from, len - 1)))
                break;
            if (ts->eof) {
                pos = len;
                break;
            }
            from = len > from ? len : from;
            if ((rc = fill_more(ts, 2 * len, err)) != CT_OK) return rc;
            len = ts->len - ts->head;
        }
    }
    if (grow((void **)&u->text, &u->cap, pos + 1, 1))
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory reading %s", ts->path);
    memcpy(u->text, ts->buf + ts->head, pos);
    u->len = pos;
    ts->head += pos;
    return CT_OK;
}

/* The next piece of plain text, cut as tokenizer_encode cuts a whole file: windows of
 * TOKENIZER_CHUNK_BYTES ending just after their last newline, until `target` bytes. */
static int32_t fill_text_unit(text_stream *ts, work_unit *u, size_t target, ct_error *err) {
    const size_t K = TOKENIZER_CHUNK_BYTES;
    u->len = 0;
    u->n_docs = 0;
    int32_t rc = fill_more(ts, target + K + 1, err);
    if (rc != CT_OK) return rc;
    const char *t = ts->buf + ts->head;
    size_t len = ts->len - ts->head, pos = 0;
    while (pos < target && pos < len) {
        if (pos + K >= len) { /* only at the end of the file: fill_more got target + K + 1 */
            pos = len;
            break;
        }
        const char *nl = memrchr(t + pos, '\n', K);
        pos = nl ? (size_t)(nl - t) + 1 : pos + K;
    }
    if (grow((void **)&u->text, &u->cap, pos + 1, 1))
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory reading %s", ts->path);
    memcpy(u->text, t, pos);
    u->len = pos;
    ts->head += pos;
    return CT_OK;
}

/* Documents from JSON Lines (field `field` of each non-blank line) until `target` bytes. */
static int32_t fill_doc_unit(text_stream *ts, work_unit *u, size_t target, const char *field,
                             ct_error *err) {
    u->len = 0;
    u->n_docs = 0;
    size_t scan = 0; /* bytes after head known to hold no newline */
    while (u->len < target) {
        char *line = ts->buf + ts->head;
        size_t avail = ts->len - ts->head;
        char *nl = avail > scan ? memchr(line + scan, '\n', avail - scan) : NULL;
        if (!nl && !ts->eof) {
            scan = avail;
            int32_t rc = fill_more(ts, avail < (1u << 16) ? 1u << 17 : 2 * avail, err);
            if (rc != CT_OK) return rc;
            continue;
        }
        if (!nl && avail == 0) break; /* the end */
        size_t n = nl ? (size_t)(nl - line) : avail;
        ts->head += nl ? n + 1 : n;
        scan = 0;
        ts->line++;
        size_t k = 0;
        while (k < n && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r')) k++;
        if (k == n) continue; /* a blank line */
        const char *why = NULL;
        if (corpus_json_field(line, n, field, &u->text, &u->len, &u->cap, &why) != 0)
            return ct_error_set(err, CT_ERR_INVALID, "%s:%lld: --jsonl-field '%s': %s ---> "
                                "every line must be a JSON object whose \"%s\" is a string",
                                ts->path, (long long)ts->line, field, why, field);
        if (grow((void **)&u->doc_end, &u->doc_cap, u->n_docs + 1, sizeof *u->doc_end))
            return ct_error_set(err, CT_ERR_NOMEM, "out of memory reading %s", ts->path);
        u->doc_end[u->n_docs++] = u->len;
    }
    return CT_OK;
}

static int push_tokens(work_unit *u, const int32_t *ids, const char *bytes, size_t n) {
    if (grow((void **)&u->tok, &u->tok_cap, u->n_tok + n, sizeof *u->tok)) return -1;
    for (size_t i = 0; i < n; i++)
        u->tok[u->n_tok + i] = ids ? (uint32_t)ids[i] : (uint8_t)bytes[i];
    u->n_tok += n;
    return 0;
}

static int32_t encode_into(work_unit *u, const char *text, size_t len) {
    if (!u->tk && !u->bpe) {
        if (push_tokens(u, NULL, text, len))
            return ct_error_set(&u->err, CT_ERR_NOMEM, "out of memory tokenizing");
        return CT_OK;
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    int32_t rc = u->bpe ? bpe_encode(u->bpe, text, len, &ids, &n, &u->err)
                        : tokenizer_encode(u->tk, text, len, &ids, &n, &u->err);
    if (rc == CT_OK && push_tokens(u, ids, NULL, (size_t)n))
        rc = ct_error_set(&u->err, CT_ERR_NOMEM, "out of memory tokenizing");
    free(ids);
    return rc;
}

static void *tokenize_unit(void *arg) {
    work_unit *u = arg;
    u->n_tok = 0;
    u->rc = CT_OK;
    if (u->n_docs == 0) {
        u->rc = encode_into(u, u->text, u->len);
        return NULL;
    }
    for (size_t k = 0; k < u->n_docs && u->rc == CT_OK; k++) {
        size_t from = k ? u->doc_end[k - 1] : 0;
        int32_t eot = u->eot;
        if (push_tokens(u, &eot, NULL, 1)) {
            u->rc = ct_error_set(&u->err, CT_ERR_NOMEM, "out of memory tokenizing");
            break;
        }
        u->rc = encode_into(u, u->text + from, u->doc_end[k] - from);
    }
    return NULL;
}

/* ---- the outputs ------------------------------------------------------------------------- */

typedef struct shard_record {
    int64_t  tokens;
    int32_t  max;
    uint64_t fnv;
} shard_record;

/* One split (train or val) written as SPLIT_000000.bin, ... of shard_tokens each. */
typedef struct split_out {
    const char       *dir, *name;
    int64_t           shard_tokens;
    int32_t           width;  /* bytes per token (shard_width_for_vocab) */
    host_shard_writer w;
    int               open;
    shard_record     *rec;
    size_t            n_rec, rec_cap;
    int64_t           total;
    uint64_t         *counts; /* train: token counts for the unigram entropy; else NULL */
} split_out;

static void shard_name(char *buf, size_t size, const char *name, size_t i) {
    snprintf(buf, size, "%s_%06zu.bin", name, i);
}

static int32_t split_open_next(split_out *s, ct_error *err) {
    char path[PATH_MAX], base[64];
    shard_name(base, sizeof base, s->name, s->n_rec);
    snprintf(path, sizeof path, "%s/%s", s->dir, base);
    int32_t rc = shard_writer_open(&s->w, path, s->width, err);
    if (rc == CT_OK) s->open = 1;
    return rc;
}

static int32_t split_finish_shard(split_out *s, ct_error *err) {
    if (grow((void **)&s->rec, &s->rec_cap, s->n_rec + 1, sizeof *s->rec))
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    shard_record r = {s->w.n, s->w.max, s->w.fnv};
    s->open = 0;
    int32_t rc = shard_writer_finish(&s->w, err);
    if (rc == CT_OK) s->rec[s->n_rec++] = r;
    return rc;
}

static int32_t split_push(split_out *s, const uint32_t *tok, int64_t n, ct_error *err) {
    if (s->counts)
        for (int64_t i = 0; i < n; i++) s->counts[tok[i]]++;
    s->total += n;
    while (n > 0) {
        int32_t rc;
        if (!s->open && (rc = split_open_next(s, err)) != CT_OK) return rc;
        int64_t take = s->shard_tokens - s->w.n < n ? s->shard_tokens - s->w.n : n;
        if ((rc = shard_writer_append(&s->w, tok, take, err)) != CT_OK) return rc;
        tok += take;
        n -= take;
        if (s->w.n == s->shard_tokens && (rc = split_finish_shard(s, err)) != CT_OK) return rc;
    }
    return CT_OK;
}

/* The last shard, at least one (possibly empty) so the split exists; older shards of the
 * split beyond the last are removed (an earlier, larger prepare). */
static int32_t split_close(split_out *s, ct_error *err) {
    int32_t rc;
    if (!s->open && s->n_rec == 0 && (rc = split_open_next(s, err)) != CT_OK) return rc;
    if (s->open && (rc = split_finish_shard(s, err)) != CT_OK) return rc;
    for (size_t i = s->n_rec;; i++) {
        char path[PATH_MAX], base[64];
        shard_name(base, sizeof base, s->name, i);
        snprintf(path, sizeof path, "%s/%s", s->dir, base);
        if (unlink(path) != 0) break;
    }
    return CT_OK;
}

static void split_abort(split_out *s) {
    if (s->open) shard_writer_abort(&s->w);
    s->open = 0;
}

/* The tokens of one input file go to train until its last val_fraction, then to val. Their
 * number is known in advance only for bytes of a plain file (or needless with val_fraction
 * 0); otherwise they are spilled to a temporary file and routed once the file's end gives
 * their number. */
typedef struct router {
    split_out *train, *val;
    int64_t    pos, n_train; /* n_train < 0: not known yet (spilling) */
    int        spill_fd;     /* a scratch file in the output folder (outfile.h: scratch_open) */
    int64_t    spilled;
} router;

static int32_t route(router *r, const uint32_t *tok, int64_t n, ct_error *err) {
    if (r->n_train < 0) {
        if (fd_write_all(r->spill_fd, tok, (size_t)n * sizeof *tok) != 0)
            return ct_error_set(err, CT_ERR_IO, "cannot write a scratch file in %s: %s ---> "
                                "check free disk space", r->train->dir, strerror(errno));
        r->spilled += n;
        return CT_OK;
    }
    int64_t to_train = r->pos < r->n_train ? r->n_train - r->pos : 0;
    if (to_train > n) to_train = n;
    int32_t rc = split_push(r->train, tok, to_train, err);
    if (rc == CT_OK) rc = split_push(r->val, tok + to_train, n - to_train, err);
    r->pos += n;
    return rc;
}

static int32_t route_spilled(router *r, double val_fraction, ct_error *err) {
    int64_t n = r->spilled;
    r->n_train = n - (int64_t)llround(val_fraction * (double)n);
    r->pos = 0;
    enum { CHUNK = 1 << 20 };
    uint32_t *buf = malloc(CHUNK * sizeof *buf);
    if (!buf) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    int32_t rc = CT_OK;
    for (int64_t first = 0; first < n && rc == CT_OK; first += CHUNK) {
        int64_t count = n - first < CHUNK ? n - first : CHUNK;
        size_t want = (size_t)count * sizeof *buf, got = 0;
        while (got < want) {
            ssize_t g = pread(r->spill_fd, (char *)buf + got, want - got,
                              (off_t)(first * (int64_t)sizeof *buf + (int64_t)got));
            if (g < 0 && errno == EINTR) continue;
            if (g <= 0) break;
            got += (size_t)g;
        }
        if (got < want) rc = ct_error_set(err, CT_ERR_IO, "cannot read back the scratch file "
                                          "in %s: %s", r->train->dir, strerror(errno));
        else rc = route(r, buf, count, err);
    }
    free(buf);
    if (rc == CT_OK && (ftruncate(r->spill_fd, 0) != 0 || lseek(r->spill_fd, 0, SEEK_SET) != 0))
        rc = ct_error_set(err, CT_ERR_IO, "cannot truncate the scratch file in %s: %s",
                          r->train->dir, strerror(errno));
    r->spilled = 0;
    return rc;
}

/* ---- progress ---------------------------------------------------------------------------- */

typedef struct progress {
    int      on, tty;
    double   start, last;
    double   every;  /* seconds between lines: 0.5 on a terminal, else 2 (CTRAIN_PROGRESS_S) */
    uint64_t total;  /* estimated text bytes */
    const char *what;
    int      shown, open;       /* a line was printed; a terminal's line not yet ended */
    uint64_t shown_bytes;       /* what the last line said */
    int64_t  shown_tokens;
} progress;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static progress progress_start(const prepare_options *o, uint64_t total, const char *what) {
    progress p = {.on = !o->quiet, .tty = isatty(2), .start = now_s(), .total = total,
                  .what = what};
    p.last = p.start;
    p.every = p.tty ? 0.5 : 2.0;
    const char *env = getenv("CTRAIN_PROGRESS_S");
    char *end;
    double v = env && *env ? strtod(env, &end) : -1;
    if (env && *env && !*end && v >= 0 && v <= 3600) p.every = v;
    return p;
}

/* One progress line every p->every seconds (a terminal's rewritten in place), and a final one
 * that ends it. No line is printed that would say what the last one said (the same bytes and
 * tokens: the tokenize loop's last round reads nothing, and the final line follows it); a
 * terminal's line is then only ended, elsewhere (a log) it already stands. */
static void progress_show(progress *p, uint64_t bytes, int64_t tokens, int final) {
    if (!p->on) return;
    double t = now_s();
    if (!final && t - p->last < p->every) return;
    if (p->shown && bytes == p->shown_bytes && tokens == p->shown_tokens) {
        if (final && p->open) fputc('\n', stderr);
        p->open = p->open && !final;
        fflush(stderr);
        return;
    }
    p->last = t;
    double el = t - p->start, rate = el > 0 ? (double)bytes / el : 0;
    double left = rate > 0 && p->total > bytes ? (double)(p->total - bytes) / rate : 0;
    fprintf(stderr, "%sprepare: %s %.0f/%.0f MB, %.1f MB/s, %lld tokens, ETA %.0f s%s",
            p->tty ? "\r" : "", p->what, (double)bytes / 1e6, (double)p->total / 1e6,
            rate / 1e6, (long long)tokens, final ? 0.0 : left,
            p->tty && !final ? "   " : "\n");
    p->shown = 1;
    p->open = p->tty && !final;
    p->shown_bytes = bytes;
    p->shown_tokens = tokens;
    fflush(stderr);
}

/* The end of a pass that printed lines: its final line (nothing when it printed none). */
static void progress_end(progress *p, uint64_t bytes, int64_t tokens) {
    if (p->shown) progress_show(p, bytes, tokens, 1);
}

/* ---- the passes -------------------------------------------------------------------------- */

typedef struct prep_ctx {
    const prepare_options *o;
    const corpus_files    *files;
    host_tokenizer        *tok;      /* sentencepiece */
    bpe_model             *bpe;      /* bpe */
    int32_t                eot;      /* -1 for plain text (but with bpe) */
    int32_t                threads;
    size_t                 unit_bytes;
    work_unit             *units;    /* threads of them */
    uint64_t               bytes_read;
} prep_ctx;

static int32_t fill_unit(prep_ctx *c, text_stream *ts, work_unit *u, size_t target,
                         ct_error *err) {
    return c->o->jsonl_field ? fill_doc_unit(ts, u, target, c->o->jsonl_field, err)
           : c->bpe          ? fill_bpe_unit(ts, u, c->bpe, target, err)
                             : fill_text_unit(ts, u, target, err);
}

/* Tokenize every input file, `threads` units at a time, and route the tokens in input order:
 * the result does not depend on the number of threads. */
static int32_t tokenize_all(prep_ctx *c, split_out *train, split_out *val, ct_error *err) {
    const prepare_options *o = c->o;
    progress pg = progress_start(o, c->files->total_estimate, "tokenized");
    router r = {.train = train, .val = val, .spill_fd = -1};
    int32_t rc = scratch_open(o->out_dir, &r.spill_fd, err);
    if (rc != CT_OK) return rc;
    pthread_t *th = calloc((size_t)c->threads, sizeof *th);
    if (!th) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        goto out_spill;
    }
    for (int32_t f = 0; f < c->files->n && rc == CT_OK; f++) {
        const char *path = c->files->paths[f];
        size_t plen = strlen(path);
        int known = !c->tok && !c->bpe && !o->jsonl_field &&
                    !(plen >= 3 && !strcmp(path + plen - 3, ".gz"));
        r.pos = 0;
        r.n_train = o->val_fraction == 0 ? INT64_MAX /* all to train: nothing to spill */
                  : known ? c->files->bytes[f] -
                            (int64_t)llround(o->val_fraction * (double)c->files->bytes[f]) : -1;
        text_stream ts = {.path = path, .bytes_read = &c->bytes_read};
        if (!(ts.r = corpus_open(path, err))) {
            rc = err->code;
            break;
        }
        int done = 0;
        if (c->bpe && !o->jsonl_field) { /* a plain text file is one document */
            uint32_t eot = (uint32_t)c->eot;
            rc = route(&r, &eot, 1, err);
        }
        while (!done && rc == CT_OK) {
            int32_t nu = 0;
            while (nu < c->threads) {
                work_unit *u = &c->units[nu];
                if ((rc = fill_unit(c, &ts, u, c->unit_bytes, err)) != CT_OK) break;
                if (u->len == 0 && u->n_docs == 0) {
                    done = 1;
                    break;
                }
                nu++;
            }
            if (rc != CT_OK) break;
            int32_t started = 1;
            for (int32_t i = 1; i < nu; i++, started++)
                if (pthread_create(&th[i], NULL, tokenize_unit, &c->units[i]) != 0) break;
            if (nu > 0) tokenize_unit(&c->units[0]);
            for (int32_t i = started; i < nu; i++) tokenize_unit(&c->units[i]);
            for (int32_t i = 1; i < started; i++) pthread_join(th[i], NULL);
            for (int32_t i = 0; i < nu && rc == CT_OK; i++) {
                work_unit *u = &c->units[i];
                if (u->rc != CT_OK) {
                    rc = ct_error_set(err, u->rc, "%s: %s", path, u->err.message);
                    break;
                }
                rc = route(&r, u->tok, (int64_t)u->n_tok, err);
            }
            progress_show(&pg, c->bytes_read, train->total + val->total + r.spilled, 0);
        }
        corpus_close(ts.r);
        free(ts.buf);
        if (rc == CT_OK && r.n_train < 0) rc = route_spilled(&r, o->val_fraction, err);
    }
    progress_show(&pg, c->bytes_read, train->total + val->total, 1);
    free(th);
out_spill:
    close(r.spill_fd);
    return rc;
}

/* Write sentencepiece's training text to `path`: blocks of about SAMPLE_BLOCK bytes taken
 * evenly across all the input (JSON Lines: the decoded documents, one per line), about
 * o->sp_sample_bytes in all (0: everything). */
static int32_t write_sample(prep_ctx *c, const char *path, uint64_t *written, ct_error *err) {
    const prepare_options *o = c->o;
    int32_t rc = CT_OK;
    outfile out;
    if ((rc = outfile_open(&out, path, err)) != CT_OK) return rc;
    FILE *f = outfile_stream(&out, err);
    if (!f) {
        outfile_abort(&out);
        return err->code;
    }
    double total = (double)(c->files->total_estimate ? c->files->total_estimate : 1);
    double rate = o->sp_sample_bytes > 0 ? (double)o->sp_sample_bytes / total : 1.0;
    progress pg = progress_start(o, c->files->total_estimate, "sampled");
    uint64_t block = 0, before = c->bytes_read;
    *written = 0;
    work_unit *u = &c->units[0];
    for (int32_t i = 0; i < c->files->n && rc == CT_OK; i++) {
        if (o->sp_sample_bytes > 0 && *written >= (uint64_t)o->sp_sample_bytes) break;
        text_stream ts = {.path = c->files->paths[i], .bytes_read = &c->bytes_read};
        if (!(ts.r = corpus_open(ts.path, err))) {
            rc = err->code;
            break;
        }
        for (;;) {
            if ((rc = fill_unit(c, &ts, u, SAMPLE_BLOCK, err)) != CT_OK) break;
            if (u->len == 0 && u->n_docs == 0) break;
            /* block i is kept when 0.5 + (i+1)*rate passes an integer: evenly spaced, centred */
            int keep = rate >= 1.0 || floor(0.5 + (double)(block + 1) * rate) >
                                      floor(0.5 + (double)block * rate);
            block++;
            if (keep && u->n_docs == 0) fwrite(u->text, 1, u->len, f);
            for (size_t k = 0; keep && k < u->n_docs; k++) {
                size_t from = k ? u->doc_end[k - 1] : 0;
                fwrite(u->text + from, 1, u->doc_end[k] - from, f);
                fputc('\n', f);
            }
            if (keep) *written += u->len;
            if (o->sp_sample_bytes > 0 && *written >= (uint64_t)o->sp_sample_bytes) break;
            progress_show(&pg, c->bytes_read - before, 0, 0);
        }
        corpus_close(ts.r);
        free(ts.buf);
    }
    progress_end(&pg, c->bytes_read - before, 0); /* ends a terminal's line before the next */
    c->bytes_read = before;
    if (rc == CT_OK && *written == 0 && rate < 1.0) { /* a text of one short block: all of it */
        outfile_abort(&out);
        prepare_options all = *o;
        all.sp_sample_bytes = 0;
        c->o = &all;
        rc = write_sample(c, path, written, err);
        c->o = o;
        return rc;
    }
    if (rc != CT_OK) {
        outfile_abort(&out);
        return rc;
    }
    return outfile_commit(&out, err);
}

/* The longest line meta.ini may have: the INI reader (inih r55) keeps 199 characters. */
#define META_LINE_MAX 199

/* `key = value` on one line of at most META_LINE_MAX characters: a longer value is cut and
 * ends in "...", a control character (a newline in a path) becomes '?'. Only informational
 * values (sources, jsonl_field) can be long. */
static void meta_put(FILE *f, const char *key, const char *value) {
    size_t room = META_LINE_MAX - strlen(key) - 3, n = strlen(value);
    int cut = n > room;
    if (cut) n = room - 3;
    fprintf(f, "%s = ", key);
    for (size_t i = 0; i < n; i++) fputc((unsigned char)value[i] < 0x20 ? '?' : value[i], f);
    fputs(cut ? "...\n" : "\n", f);
}

static void write_split_meta(FILE *f, const split_out *s) {
    for (size_t i = 0; i < s->n_rec; i++) {
        char base[64];
        shard_name(base, sizeof base, s->name, i);
        fprintf(f, "\n[shard %s]\ntokens = %lld\nbytes = %lld\nmax_token = %d\n"
                "fnv64 = %016llx\n", base, (long long)s->rec[i].tokens,
                (long long)(HOST_SHARD_HEADER_BYTES + (int64_t)s->width * s->rec[i].tokens), s->rec[i].max,
                (unsigned long long)s->rec[i].fnv);
    }
}

static int32_t write_meta(const prepare_options *o, const prepare_summary *s,
                          const split_out *train, const split_out *val, int32_t eot,
                          const char *model_name, uint64_t model_fnv, ct_error *err) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/meta.ini", o->out_dir);
    outfile out;
    int32_t rc = outfile_open(&out, path, err); /* mode 0666 & ~umask, as the shards */
    FILE *f = rc == CT_OK ? outfile_stream(&out, err) : NULL;
    if (!f) {
        if (rc == CT_OK) outfile_abort(&out);
        return err->code;
    }
    int sp = strcmp(o->tokenizer, "sentencepiece") == 0;
    fprintf(f, "; written by `ctrain prepare`: what the shards beside this file hold\n[data]\n");
    fprintf(f, "tokenizer = %s\n", o->tokenizer);
    if (model_name)
        fprintf(f, "tokenizer_model = %s\ntokenizer_fnv64 = %016llx\n", model_name,
                (unsigned long long)model_fnv);
    if (sp && !o->sp_model) fprintf(f, "sentencepiece_type = %s\n", o->sp_model_type);
    if (o->tokenizer_file) meta_put(f, "tokenizer_source", o->tokenizer_file);
    fprintf(f, "vocab_size = %d\n", s->vocab_size);
    fprintf(f, "token_bytes = %d\n", train->width); /* 2: version-1 shards, 4: version 2 */
    fprintf(f, "max_token = %d\n", s->max_token);
    if (eot >= 0) fprintf(f, "eot_token = %d\n", eot);
    fprintf(f, "train_tokens = %lld\ntrain_shards = %d\n", (long long)s->train_tokens,
            s->train_shards);
    fprintf(f, "val_tokens = %lld\nval_shards = %d\n", (long long)s->val_tokens, s->val_shards);
    fprintf(f, "val_fraction = %g\n", o->val_fraction);
    fprintf(f, "unigram_entropy_nats = %.6f\n", s->unigram_entropy);
    if (o->jsonl_field) meta_put(f, "jsonl_field", o->jsonl_field);
    char sources[META_LINE_MAX + 1];
    size_t used = 0;
    for (int32_t i = 0; i < o->n_texts && used < sizeof sources - 1; i++) {
        int w = snprintf(sources + used, sizeof sources - used, "%s%s", i ? ", " : "",
                         o->texts[i]);
        used = w < 0 ? used : used + (size_t)w;
    }
    sources[used < sizeof sources ? used : sizeof sources - 1] = '\0';
    meta_put(f, "sources", sources);
    write_split_meta(f, train);
    write_split_meta(f, val);
    return outfile_commit(&out, err);
}

static int32_t check_options(const prepare_options *o, ct_error *err) {
    if (o->n_texts < 1)
        return ct_error_set(err, CT_ERR_INVALID, "no text files ---> give --text FILE...");
    if (!o->out_dir || !*o->out_dir)
        return ct_error_set(err, CT_ERR_INVALID, "no output folder ---> give --out DIR");
    if (!(o->val_fraction >= 0 && o->val_fraction <= 0.5))
        return ct_error_set(err, CT_ERR_INVALID, "--val-fraction %g is outside [0, 0.5]",
                            o->val_fraction);
    if (o->shard_tokens < 1 || o->shard_tokens > INT32_MAX)
        return ct_error_set(err, CT_ERR_INVALID, "--shard-tokens %lld is outside [1, %d]",
                            (long long)o->shard_tokens, INT32_MAX);
    if (o->threads < 0 || o->threads > 1024)
        return ct_error_set(err, CT_ERR_INVALID, "--threads %d is outside [0, 1024] (0: one "
                            "per core)", o->threads);
    if (o->sp_sample_bytes < 0)
        return ct_error_set(err, CT_ERR_INVALID, "--sp-sample-bytes %lld is negative (0: all "
                            "the text)", (long long)o->sp_sample_bytes);
    if (o->jsonl_field && !*o->jsonl_field)
        return ct_error_set(err, CT_ERR_INVALID, "--jsonl-field is empty ---> name the key "
                            "that holds each record's text, e.g. --jsonl-field text");
    int bpe = !strcmp(o->tokenizer, "bpe");
    if (bpe != (o->tokenizer_file != NULL))
        return ct_error_set(err, CT_ERR_INVALID, bpe ? "--tokenizer bpe needs --tokenizer-file "
                            "FILE ---> give GPT-2's gpt2.tiktoken, a tokenizer.json or a "
                            "vocab.json (merges.txt beside it)" : "--tokenizer-file is for "
                            "--tokenizer bpe ---> add --tokenizer bpe");
    if (bpe || strcmp(o->tokenizer, "bytes") == 0) return CT_OK;
    if (strcmp(o->tokenizer, "sentencepiece") != 0)
        return ct_error_set(err, CT_ERR_INVALID, "--tokenizer '%s' is not bytes, sentencepiece "
                            "or bpe", o->tokenizer);
    if (o->sp_model) return CT_OK;
    if (o->vocab_size < SP_VOCAB_MIN || o->vocab_size > SP_VOCAB_MAX)
        return ct_error_set(err, CT_ERR_INVALID, "--vocab-size %d is outside [%d, %d] ---> "
                            "sentencepiece needs the 256 byte pieces plus some (a larger "
                            "model can be given with --sp-model)", o->vocab_size, SP_VOCAB_MIN, SP_VOCAB_MAX);
    if (strcmp(o->sp_model_type, "bpe") != 0 && strcmp(o->sp_model_type, "unigram") != 0)
        return ct_error_set(err, CT_ERR_INVALID, "--sp-type '%s' is not bpe or unigram",
                            o->sp_model_type);
    return CT_OK;
}

/* The tokenizer: trained on a sample of the text, or the given --sp-model, copied to
 * DIR/tokenizer.model either way; its vocabulary and end-of-text token into *c and *out. */
static int32_t setup_tokenizer(prep_ctx *c, prepare_summary *out, uint64_t *model_fnv,
                               ct_error *err) {
    const prepare_options *o = c->o;
    char model[PATH_MAX];
    snprintf(model, sizeof model, "%s/tokenizer.model", o->out_dir);
    const char *name = o->sp_model ? o->sp_model : model; /* what messages name */
    char *bytes = NULL;
    size_t len = 0;
    int32_t rc;
    if (o->sp_model) {
        rc = read_bounded(o->sp_model, "sentencepiece model", "give --sp-model a .model file "
                          "made by sentencepiece", TOKENIZER_MODEL_MAX, &bytes, &len, err);
    } else {
        char sample[PATH_MAX];
        snprintf(sample, sizeof sample, "%s/tokenizer.sample.txt", o->out_dir);
        uint64_t n = 0;
        if ((rc = write_sample(c, sample, &n, err)) != CT_OK) return rc;
        if (!o->quiet)
            fprintf(stderr, "prepare: training a sentencepiece %s model of %d pieces on %llu "
                    "bytes sampled from %llu bytes of text\n", o->sp_model_type, o->vocab_size,
                    (unsigned long long)n, (unsigned long long)c->files->total_estimate);
        const char *files[] = {sample};
        rc = tokenizer_train(files, 1, o->sp_model_type, o->vocab_size, c->threads,
                             o->sp_max_sentences, &bytes, &len, err);
        unlink(sample);
    }
    if (rc == CT_OK && !(c->tok = tokenizer_from_bytes(bytes, len, name, err))) rc = err->code;
    if (rc == CT_OK) *model_fnv = fnv64_update(HOST_FNV64_OFFSET, bytes, len);
    /* the copy beside the shards; --sp-model may already be that very file */
    struct stat a, b;
    int same = o->sp_model && stat(o->sp_model, &a) == 0 && stat(model, &b) == 0 &&
               a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    if (rc == CT_OK && !same) rc = outfile_write_whole(model, bytes, len, 0, err);
    free(bytes);
    if (rc != CT_OK) return rc;
    out->vocab_size = tokenizer_vocab_size(c->tok);
    if (o->jsonl_field) {
        c->eot = tokenizer_eos_id(c->tok);
        if (c->eot < 0)
            return ct_error_set(err, CT_ERR_INVALID, "%s has no end-of-sentence piece (</s>) "
                                "to put between JSON Lines documents ---> use a model trained "
                                "with an eos piece", name);
    }
    return CT_OK;
}

/* The BPE tokenizer of --tokenizer-file, kept beside the shards as DIR/tokenizer.tiktoken or
 * DIR/tokenizer.json (vocab.json with merges.txt written as the tokenizer.json of the same
 * ids); its name and checksum into *model_name, *model_fnv; vocabulary and <|endoftext|>
 * into *out and *c. */
static int32_t setup_bpe(prep_ctx *c, prepare_summary *out, const char **model_name,
                         uint64_t *model_fnv, ct_error *err) {
    const prepare_options *o = c->o;
    const char *path = o->tokenizer_file, *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char dst[PATH_MAX], *bytes = NULL;
    size_t len = 0;
    /* one file read once (the bytes hashed are the bytes loaded and copied); vocab.json with
     * merges.txt is read by name and kept as the tokenizer.json of the same ids */
    int two_files = !strcmp(base, "merges.txt") || !strcmp(base, "vocab.json");
    int32_t rc = two_files ? bpe_load(path, &c->bpe, err)
                           : read_bounded(path, "tokenizer file", BPE_HINT, BPE_MAX_FILE, &bytes,
                                          &len, err);
    if (rc == CT_OK && !two_files) rc = bpe_load_text(path, bytes, len, &c->bpe, err);
    if (rc == CT_OK) {
        out->vocab_size = bpe_vocab_size(c->bpe);
        c->eot = bpe_eot_id(c->bpe);
        if (c->eot < 0)
            rc = ct_error_set(err, CT_ERR_INVALID, "%s has no %s token to put before each "
                              "document ---> give a tokenizer that has one (GPT-2's)", path,
                              BPE_EOT_TEXT);
    }
    if (rc == CT_OK) {
        bpe_format f = bpe_model_format(c->bpe);
        *model_name = f == BPE_TIKTOKEN ? "tokenizer.tiktoken" : "tokenizer.json";
        if ((size_t)snprintf(dst, sizeof dst, "%s/%s", o->out_dir, *model_name) >= sizeof dst)
            rc = ct_error_set(err, CT_ERR_INVALID, "--out %s: path too long", o->out_dir);
    }
    if (rc == CT_OK && (two_files || bpe_model_format(c->bpe) == BPE_HF_VOCAB)) {
        rc = bpe_write_tokenizer_json(c->bpe, dst, err);
        if (rc == CT_OK)
            rc = read_bounded(dst, "tokenizer file", BPE_HINT, BPE_MAX_FILE, &bytes, &len, err);
    } else if (rc == CT_OK) { /* the copy beside the shards; the file may already be that one */
        struct stat a, b;
        int same = stat(path, &a) == 0 && stat(dst, &b) == 0 && a.st_dev == b.st_dev &&
                   a.st_ino == b.st_ino;
        if (!same) rc = outfile_write_whole(dst, bytes, len, 0, err);
    }
    if (rc == CT_OK) *model_fnv = fnv64_update(HOST_FNV64_OFFSET, bytes, len);
    free(bytes);
    return rc;
}

int32_t prepare_run(const prepare_options *o, prepare_summary *out, ct_error *err) {
    memset(out, 0, sizeof *out);
    int32_t rc = check_options(o, err);
    if (rc != CT_OK) return rc;
    int sp = strcmp(o->tokenizer, "sentencepiece") == 0;
    int bpe = strcmp(o->tokenizer, "bpe") == 0;

    /* Every file readable and the text not empty, before any slow work. */
    corpus_files files;
    if ((rc = corpus_list(o->texts, o->n_texts, &files, err)) != CT_OK) return rc;
    if (files.total_bytes == 0) {
        rc = ct_error_set(err, CT_ERR_INVALID, "the text files are empty (%s%s) ---> give "
                          "--text files that hold text", o->texts[0],
                          o->n_texts > 1 || files.n > 1 ? ", ..." : "");
        goto out_free_files;
    }
    if ((rc = outdir_prepare(o->out_dir, "--out", o->force, err)) != CT_OK) goto out_free_files;

    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    prep_ctx c = {.o = o, .files = &files, .eot = -1,
                  .threads = o->threads > 0 ? o->threads : cores > 0 ? (int32_t)cores : 1,
                  .unit_bytes = o->unit_bytes > 0 ? (size_t)o->unit_bytes : UNIT_BYTES};
    split_out train = {.dir = o->out_dir, .name = "train", .shard_tokens = o->shard_tokens};
    split_out val = {.dir = o->out_dir, .name = "val", .shard_tokens = o->shard_tokens};
    c.units = calloc((size_t)c.threads, sizeof *c.units);
    if (!c.units) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        goto out_free_files;
    }
    uint64_t model_fnv = 0;
    const char *model_name = sp ? "tokenizer.model" : NULL;
    if (sp) {
        if ((rc = setup_tokenizer(&c, out, &model_fnv, err)) != CT_OK) goto out_free;
    } else if (bpe) {
        if ((rc = setup_bpe(&c, out, &model_name, &model_fnv, err)) != CT_OK) goto out_free;
    } else {
        out->vocab_size = o->jsonl_field ? 257 : 256;
        c.eot = o->jsonl_field ? 256 : -1;
    }
    for (int32_t i = 0; i < c.threads; i++) {
        c.units[i].tk = c.tok;
        c.units[i].bpe = c.bpe;
        c.units[i].eot = c.eot;
        c.units[i].err.struct_size = sizeof c.units[i].err;
    }
    train.width = val.width = shard_width_for_vocab(out->vocab_size);
    train.counts = calloc((size_t)out->vocab_size, sizeof *train.counts);
    if (!train.counts) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        goto out_free;
    }
    /* a stale meta.ini must never describe the new shards */
    char meta[PATH_MAX];
    snprintf(meta, sizeof meta, "%s/meta.ini", o->out_dir);
    if (unlink(meta) != 0 && errno != ENOENT) {
        rc = ct_error_set(err, CT_ERR_IO, "cannot replace %s: %s", meta, strerror(errno));
        goto out_free;
    }
    if ((rc = tokenize_all(&c, &train, &val, err)) != CT_OK ||
        (rc = split_close(&train, err)) != CT_OK || (rc = split_close(&val, err)) != CT_OK)
        goto out_free;

    out->unigram_entropy = unigram_entropy(train.counts, out->vocab_size);
    out->train_tokens = train.total;
    out->val_tokens = val.total;
    out->train_shards = (int32_t)train.n_rec;
    out->val_shards = (int32_t)val.n_rec;
    out->max_token = -1;
    for (size_t i = 0; i < train.n_rec; i++)
        if (train.rec[i].max > out->max_token) out->max_token = train.rec[i].max;
    for (size_t i = 0; i < val.n_rec; i++)
        if (val.rec[i].max > out->max_token) out->max_token = val.rec[i].max;
    if ((rc = write_meta(o, out, &train, &val, c.eot, model_name, model_fnv, err)) != CT_OK) goto out_free;
    if (!o->quiet)
        printf("prepare: %s: %lld train tokens (%d shards of %s tokens), %lld val tokens, "
               "tokenizer %s vocab_size %d, unigram entropy %.4f nats/token\n", o->out_dir,
               (long long)train.total, out->train_shards, train.width == 4 ? "uint32" : "uint16",
               (long long)val.total, o->tokenizer, out->vocab_size, out->unigram_entropy);

out_free:
    split_abort(&train);
    split_abort(&val);
    free(train.rec);
    free(val.rec);
    free(train.counts);
    for (int32_t i = 0; c.units && i < c.threads; i++) {
        free(c.units[i].text);
        free(c.units[i].doc_end);
        free(c.units[i].tok);
    }
    free(c.units);
    tokenizer_free(c.tok);
    bpe_free(c.bpe);
out_free_files:
    corpus_files_free(&files);
    return rc;
}
