/* runtok.c — the run's tokenizer: recorded at train start, loaded for sampling (runtok.h). */
#include "data/runtok.h"
#include "data/mixture.h"

#include "data/bpe.h"
#include "data/data.h"
#include "io/files.h"
#include "io/outfile.h"
#include "data/tokenizer.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { KIND_BYTES, KIND_SP, KIND_BPE };

struct runtok {
    int             kind;
    int32_t         eot;          /* -1 when none */
    char            model[PATH_MAX];
    host_tokenizer *sp;
    bpe_model      *bpe;
};

/* The model files a run folder may hold; a new run removes the ones that are not its own. */
static const char *const model_names[] = {"tokenizer.model", "tokenizer.json",
                                          "tokenizer.tiktoken", NULL};

/* FNV-1a 64 of a whole buffer: data.h's, the checksum meta.ini records (tokenizer_fnv64). */
static uint64_t fnv1a64(const char *p, size_t n) {
    return fnv64_update(HOST_FNV64_OFFSET, p, n);
}

/* The whole of a tokenizer model file (files.h: read_bounded) into *buf, *n bytes. */
static int32_t slurp(const char *path, const char *hint, char **buf, size_t *n, ct_error *err) {
    return read_bounded(path, "tokenizer model", hint, TOKENIZER_MODEL_MAX, buf, n, err);
}

/* buf = a "/" b; CT_ERR_INVALID when it does not fit (never a truncated path). */
static int32_t join(char *buf, size_t n, const char *a, const char *b, ct_error *err) {
    int len = snprintf(buf, n, "%s/%s", a, b);
    if (len < 0 || (size_t)len >= n)
        return ct_error_set(err, CT_ERR_INVALID, "path %.80s/%s is too long ---> use shorter "
                            "folder names", a, b);
    return CT_OK;
}

/* The folder of [data] train's shards, into buf: the value itself when it is a folder, else
 * the folder part of the file or glob ("." when it has no '/'). */
static void folder_of(const char *path, char *buf, size_t n) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(buf, n, "%s", path);
        return;
    }
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, n, ".");
    else if (slash == path) snprintf(buf, n, "/");
    else snprintf(buf, n, "%.*s", (int)(slash - path), path);
}

/* Remove the run folder's model files other than `keep` (NULL: all). */
static void remove_stale_models(const char *out_dir, const char *keep) {
    char path[PATH_MAX];
    for (int i = 0; model_names[i]; i++)
        if ((!keep || strcmp(keep, model_names[i])) &&
            snprintf(path, sizeof path, "%s/%s", out_dir, model_names[i]) < (int)sizeof path)
            unlink(path);
}

/* The model file a meta.ini or tokenizer.ini names: one of model_names, nothing else (never a
 * path that leaves the folder). */
static const char *model_name_ok(const char *name) {
    for (int i = 0; name && model_names[i]; i++)
        if (!strcmp(name, model_names[i])) return model_names[i];
    return NULL;
}

int32_t runtok_record(const host_config *cfg, const char *out_dir, int required, int *found,
                      ct_error *err) {
    *found = 0;
    const char *train = mixture_train_path(cfg); /* a mixture's first dataset (one tokenizer) */
    char dir[PATH_MAX], meta_path[PATH_MAX], ini_path[PATH_MAX];
    folder_of(train ? train : "", dir, sizeof dir);
    int32_t rc = join(meta_path, sizeof meta_path, dir, "meta.ini", err);
    if (rc == CT_OK) rc = join(ini_path, sizeof ini_path, out_dir, "tokenizer.ini", err);
    if (rc != CT_OK) return rc;
    /* shards without a meta.ini (llm.c's), or whose meta.ini names no tokenizer (written by a
     * tool that records shards only), leave the run without one: sample says so later */
    host_config *meta = NULL;
    const char *kind = NULL;
    if (access(meta_path, F_OK) == 0) {
        if (!(meta = config_new())) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        rc = config_load_file(meta, meta_path, err);
        kind = rc == CT_OK ? config_get(meta, "data", "tokenizer") : NULL;
    }
    if (rc == CT_OK && !kind) {
        int had_meta = meta != NULL;
        config_free(meta);
        unlink(ini_path); /* a tokenizer of an earlier run in this folder is not this one's */
        remove_stale_models(out_dir, NULL);
        if (required)
            return ct_error_set(err, CT_ERR_INVALID, "%s: [run] sample_every needs the data's "
                                "tokenizer, but %s %s ---> make the shards with `ctrain prepare` "
                                "(its meta.ini records the tokenizer), or set [run] "
                                "sample_every = 0", config_origin(cfg, "run", "sample_every"),
                                meta_path, had_meta ? "names none" : "does not exist");
        return CT_OK;
    }
    const char *vocab = rc == CT_OK ? config_get(meta, "data", "vocab_size") : NULL;
    const char *eot = rc == CT_OK ? config_get(meta, "data", "eot_token") : NULL;
    char *model = NULL;
    size_t model_n = 0;
    char text[PATH_MAX + 512], eot_line[64] = "";
    if (eot) snprintf(eot_line, sizeof eot_line, "eot_token = %.20s\n", eot);
    int with_model = rc == CT_OK && kind &&
                     (!strcmp(kind, "sentencepiece") || !strcmp(kind, "bpe"));
    if (rc == CT_OK && !with_model && strcmp(kind, "bytes"))
        rc = ct_error_set(err, CT_ERR_INVALID, "%s: [data] tokenizer is %s, not bytes, "
                          "sentencepiece or bpe ---> make the shards again with `ctrain "
                          "prepare`", meta_path, kind);
    if (with_model) {
        const char *given = config_get(meta, "data", "tokenizer_model");
        const char *name = model_name_ok(given ? given : "tokenizer.model");
        const char *sum = config_get(meta, "data", "tokenizer_fnv64");
        char src[PATH_MAX], dst[PATH_MAX];
        if (!name)
            rc = ct_error_set(err, CT_ERR_INVALID, "%s: [data] tokenizer_model = %s is not one of "
                              "tokenizer.model, tokenizer.json, tokenizer.tiktoken ---> make the "
                              "shards again with `ctrain prepare`", meta_path, given);
        if (rc == CT_OK) rc = join(src, sizeof src, dir, name, err);
        if (rc == CT_OK) rc = join(dst, sizeof dst, out_dir, name, err);
        if (rc == CT_OK)
            rc = slurp(src, "make the shards again with `ctrain prepare`", &model, &model_n, err);
        if (rc == CT_OK && sum) {
            char got[32];
            snprintf(got, sizeof got, "%016llx", (unsigned long long)fnv1a64(model, model_n));
            if (strcmp(got, sum) != 0)
                rc = ct_error_set(err, CT_ERR_INVALID, "%s has checksum %s, but %s records %s: "
                                  "the model is not the one the shards were made with ---> make "
                                  "the shards again with `ctrain prepare`", src, got, meta_path,
                                  sum);
        }
        if (rc == CT_OK) rc = outfile_write_whole(dst, model, model_n, 0, err);
        if (rc == CT_OK) {
            remove_stale_models(out_dir, name);
            snprintf(text, sizeof text, "; written by `ctrain train`: the tokenizer of the run's "
                     "data\n[tokenizer]\nkind = %s\nmodel = %s\nmodel_fnv1a64 = %016llx\n"
                     "vocab_size = %.20s\n%ssource = %s\n", kind, name,
                     (unsigned long long)fnv1a64(model, model_n), vocab ? vocab : "0", eot_line,
                     meta_path);
        }
    } else if (rc == CT_OK) {
        remove_stale_models(out_dir, NULL);
        snprintf(text, sizeof text, "; written by `ctrain train`: the tokenizer of the run's "
                 "data\n[tokenizer]\nkind = bytes\nvocab_size = 256\n%ssource = %s\n", eot_line,
                 meta_path);
    }
    if (rc == CT_OK) rc = outfile_write_whole(ini_path, text, strlen(text), 0, err);
    if (rc == CT_OK) *found = 1;
    free(model);
    config_free(meta);
    return rc;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* The model file of kind KIND_SP or KIND_BPE into t, from its bytes (read once, so the bytes
 * a checksum covers are the bytes loaded), or read here when bytes is NULL. */
static int32_t load_model(runtok *t, const char *path, const char *bytes, size_t n,
                          ct_error *err) {
    snprintf(t->model, sizeof t->model, "%s", path);
    if (t->kind == KIND_SP) {
        t->sp = bytes ? tokenizer_from_bytes(bytes, n, path, err) : tokenizer_load(path, err);
        if (!t->sp) return err->code;
        t->eot = tokenizer_eos_id(t->sp);
        return CT_OK;
    }
    int32_t rc = bytes ? bpe_load_text(path, bytes, n, &t->bpe, err) : bpe_load(path, &t->bpe, err);
    if (rc == CT_OK) t->eot = bpe_eot_id(t->bpe);
    return rc;
}

runtok *runtok_open(const char *run_dir, const char *spec, ct_error *err) {
    runtok *t = calloc(1, sizeof *t);
    if (!t) return ct_error_set(err, CT_ERR_NOMEM, "out of memory"), NULL;
    t->eot = -1;
    if (spec && !strcmp(spec, "bytes")) {
        t->kind = KIND_BYTES;
        return t;
    }
    if (spec) {
        t->kind = ends_with(spec, ".model") ? KIND_SP : KIND_BPE;
        if (load_model(t, spec, NULL, 0, err) != CT_OK) goto out_free;
        return t;
    }
    char ini[PATH_MAX], model[PATH_MAX];
    if (join(ini, sizeof ini, run_dir, "tokenizer.ini", err) != CT_OK) goto out_free;
    if (access(ini, F_OK) != 0) {
        ct_error_set(err, CT_ERR_INVALID, "the run %s records no tokenizer (%s does not exist: "
                     "its [data] train had no meta.ini from `ctrain prepare`) ---> pass "
                     "--tokenizer bytes, --tokenizer FILE.model or --tokenizer tokenizer.json, or "
                     "--ids to give and get token ids", run_dir, ini);
        goto out_free;
    }
    host_config *c = config_new();
    if (!c) {
        ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        goto out_free;
    }
    int32_t rc = config_load_file(c, ini, err);
    const char *kind = rc == CT_OK ? config_get(c, "tokenizer", "kind") : NULL;
    const char *eot = rc == CT_OK ? config_get(c, "tokenizer", "eot_token") : NULL;
    if (rc == CT_OK && kind && !strcmp(kind, "bytes")) {
        t->kind = KIND_BYTES;
        t->eot = eot && !strcmp(eot, "256") ? 256 : -1;
    } else if (rc == CT_OK && kind && (!strcmp(kind, "sentencepiece") || !strcmp(kind, "bpe"))) {
        t->kind = !strcmp(kind, "bpe") ? KIND_BPE : KIND_SP;
        const char *given = config_get(c, "tokenizer", "model");
        const char *name = model_name_ok(given ? given : "tokenizer.model");
        const char *sum = config_get(c, "tokenizer", "model_fnv1a64");
        if (!name)
            rc = ct_error_set(err, CT_ERR_INVALID, "%s: [tokenizer] model = %s is not one of "
                              "tokenizer.model, tokenizer.json, tokenizer.tiktoken ---> pass "
                              "--tokenizer", ini, given);
        if (rc == CT_OK) rc = join(model, sizeof model, run_dir, name, err);
        char *bytes = NULL; /* read once: the bytes checked are the bytes loaded */
        size_t n = 0;
        if (rc == CT_OK)
            rc = slurp(model, "copy the run folder whole, or pass --tokenizer FILE", &bytes, &n,
                       err);
        char got[32];
        snprintf(got, sizeof got, "%016llx", (unsigned long long)fnv1a64(bytes, n));
        if (rc == CT_OK && (!sum || strcmp(sum, got)))
            rc = ct_error_set(err, CT_ERR_INVALID, "%s has checksum %s, but %s records %s ---> "
                              "copy the run folder whole, or pass --tokenizer FILE", model, got,
                              ini, sum ? sum : "none");
        if (rc == CT_OK) rc = load_model(t, model, bytes, n, err);
        free(bytes);
    } else if (rc == CT_OK) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s: [tokenizer] kind is %s, not bytes, "
                          "sentencepiece or bpe ---> pass --tokenizer", ini,
                          kind ? kind : "missing");
    }
    config_free(c);
    if (rc == CT_OK) return t;
out_free:
    runtok_free(t);
    return NULL;
}

void runtok_free(runtok *t) {
    if (!t) return;
    if (t->sp) tokenizer_free(t->sp);
    bpe_free(t->bpe);
    free(t);
}

int64_t runtok_vocab(const runtok *t) {
    return t->kind == KIND_SP ? tokenizer_vocab_size(t->sp)
           : t->kind == KIND_BPE ? bpe_vocab_size(t->bpe) : t->eot == 256 ? 257 : 256;
}

const char *runtok_kind(const runtok *t) {
    return t->kind == KIND_SP ? "sentencepiece" : t->kind == KIND_BPE ? "bpe" : "bytes";
}

int32_t runtok_eot(const runtok *t) { return t->eot; }

int32_t runtok_bos(const runtok *t) {
    return t->kind == KIND_SP ? tokenizer_bos_id(t->sp) : t->eot;
}

const char *runtok_model_path(const runtok *t) { return t->kind == KIND_BYTES ? NULL : t->model; }

bpe_model *runtok_bpe(const runtok *t) { return t->bpe; }

int32_t runtok_encode(const runtok *t, const char *text, size_t len, int32_t **ids, int64_t *n,
                      ct_error *err) {
    return runtok_encode_ex(t, text, len, 0, ids, n, err);
}

int32_t runtok_encode_ex(const runtok *t, const char *text, size_t len, int specials,
                         int32_t **ids, int64_t *n, ct_error *err) {
    if (t->kind == KIND_SP) return tokenizer_encode(t->sp, text, len, ids, n, err);
    if (t->kind == KIND_BPE)
        return bpe_encode_ex(t->bpe, text, len, specials ? BPE_ENCODE_SPECIALS : 0, ids, n, err);
    *ids = malloc((len ? len : 1) * sizeof **ids);
    if (!*ids) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < len; i++) (*ids)[i] = (unsigned char)text[i];
    *n = (int64_t)len;
    return CT_OK;
}

int32_t runtok_parse_ids(const char *s, const char *what, int32_t **ids, int64_t *n,
                         ct_error *err) {
    size_t cap = strlen(s) / 2 + 1;
    *n = 0;
    if (!(*ids = malloc(cap * sizeof **ids))) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    for (const char *p = s; *p;) {
        while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\r' || *p == '\t') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX)
            return ct_error_set(err, CT_ERR_INVALID, "%s: '%.20s' is not a token id ---> give "
                                "ids separated by spaces or commas", what, p);
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
    return CT_OK;
}

int32_t runtok_decode(const runtok *t, const int32_t *ids, int64_t n, char **text, size_t *len,
                      ct_error *err) {
    if (t->kind == KIND_SP) return tokenizer_decode(t->sp, ids, n, text, len, err);
    if (t->kind == KIND_BPE) return bpe_decode(t->bpe, ids, n, text, len, err);
    size_t eot_len = strlen(BPE_EOT_TEXT), total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] == 256 && t->eot == 256) {
            total += eot_len;
            continue;
        }
        if (ids[i] < 0 || ids[i] > 255)
            return ct_error_set(err, CT_ERR_INVALID, "token %d is not a byte (the bytes "
                                "tokenizer has 256 tokens%s) ---> the model's vocabulary is "
                                "larger than its tokenizer's: pass --tokenizer FILE or --ids",
                                (int)ids[i], t->eot == 256 ? " and <|endoftext|> 256" : "");
        total++;
    }
    *text = malloc(total + 1);
    if (!*text) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    size_t o = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] == 256) {
            memcpy(*text + o, BPE_EOT_TEXT, eot_len);
            o += eot_len;
        } else {
            (*text)[o++] = (char)ids[i];
        }
    }
    (*text)[o] = '\0';
    *len = o;
    return CT_OK;
}
