/* runtok.c — the run's tokenizer: recorded at train start, loaded for sampling (runtok.h). */
#include "runtok.h"

#include "data.h"

#include "files.h"
#include "outfile.h"
#include "tokenizer.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


struct runtok {
    int           bytes; /* 1: byte tokens, V = 256 */
    host_tokenizer *sp;
};

/* FNV-1a 64 of a whole buffer: data.h's, the checksum meta.ini records (tokenizer_fnv64). */
static uint64_t fnv1a64(const unsigned char *p, size_t n) {
    return fnv64_update(HOST_FNV64_OFFSET, p, n);
}

/* The whole of a tokenizer model file (files.h: read_bounded) into *buf, *n bytes. */
static int32_t slurp(const char *path, const char *hint, unsigned char **buf, size_t *n,
                     ct_error *err) {
    return read_bounded(path, "tokenizer model", hint, TOKENIZER_MODEL_MAX, (char **)buf, n, err);
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

int32_t runtok_record(const host_config *cfg, const char *out_dir, int required, int *found,
                      ct_error *err) {
    *found = 0;
    const char *train = NULL;
    config_get_string(cfg, "data", "train", &train, NULL);
    char dir[PATH_MAX], meta_path[PATH_MAX], ini_path[PATH_MAX], model_out[PATH_MAX];
    folder_of(train ? train : "", dir, sizeof dir);
    int32_t rc = join(meta_path, sizeof meta_path, dir, "meta.ini", err);
    if (rc == CT_OK) rc = join(ini_path, sizeof ini_path, out_dir, "tokenizer.ini", err);
    if (rc == CT_OK) rc = join(model_out, sizeof model_out, out_dir, "tokenizer.model", err);
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
        unlink(model_out);
        if (required)
            return ct_error_set(err, CT_ERR_INVALID, "%s: [run] sample_every needs the data's "
                                "tokenizer, but %s %s ---> make the shards with `ctrain prepare` "
                                "(its meta.ini records the tokenizer), or set [run] "
                                "sample_every = 0", config_origin(cfg, "run", "sample_every"),
                                meta_path, had_meta ? "names none" : "does not exist");
        return CT_OK;
    }
    const char *vocab = rc == CT_OK ? config_get(meta, "data", "vocab_size") : NULL;
    unsigned char *model = NULL;
    size_t model_n = 0;
    char text[PATH_MAX + 512];
    if (rc == CT_OK && (!kind || (strcmp(kind, "bytes") && strcmp(kind, "sentencepiece"))))
        rc = ct_error_set(err, CT_ERR_INVALID, "%s: [data] tokenizer is %s, not bytes or "
                          "sentencepiece ---> make the shards again with `ctrain prepare`",
                          meta_path, kind ? kind : "missing");
    if (rc == CT_OK && !strcmp(kind, "sentencepiece")) {
        const char *name = config_get(meta, "data", "tokenizer_model");
        const char *sum = config_get(meta, "data", "tokenizer_fnv64");
        char src[PATH_MAX];
        rc = join(src, sizeof src, dir, name ? name : "tokenizer.model", err);
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
        if (rc == CT_OK) rc = outfile_write_whole(model_out, model, model_n, 0, err);
        if (rc == CT_OK)
            snprintf(text, sizeof text, "; written by `ctrain train`: the tokenizer of the run's "
                     "data\n[tokenizer]\nkind = sentencepiece\nmodel = tokenizer.model\n"
                     "model_fnv1a64 = %016llx\nvocab_size = %s\nsource = %s\n",
                     (unsigned long long)fnv1a64(model, model_n), vocab ? vocab : "0", meta_path);
    } else if (rc == CT_OK) {
        unlink(model_out);
        snprintf(text, sizeof text, "; written by `ctrain train`: the tokenizer of the run's "
                 "data\n[tokenizer]\nkind = bytes\nvocab_size = 256\nsource = %s\n", meta_path);
    }
    if (rc == CT_OK) rc = outfile_write_whole(ini_path, text, strlen(text), 0, err);
    if (rc == CT_OK) *found = 1;
    free(model);
    config_free(meta);
    return rc;
}

runtok *runtok_open(const char *run_dir, const char *spec, ct_error *err) {
    runtok *t = calloc(1, sizeof *t);
    if (!t) return ct_error_set(err, CT_ERR_NOMEM, "out of memory"), NULL;
    if (spec && !strcmp(spec, "bytes")) {
        t->bytes = 1;
        return t;
    }
    if (spec) {
        t->sp = tokenizer_load(spec, err);
        if (!t->sp) goto out_free;
        return t;
    }
    char ini[PATH_MAX], model[PATH_MAX];
    if (join(ini, sizeof ini, run_dir, "tokenizer.ini", err) != CT_OK ||
        join(model, sizeof model, run_dir, "tokenizer.model", err) != CT_OK)
        goto out_free;
    if (access(ini, F_OK) != 0) {
        ct_error_set(err, CT_ERR_INVALID, "the run %s records no tokenizer (%s does not exist: "
                     "its [data] train had no meta.ini from `ctrain prepare`) ---> pass "
                     "--tokenizer bytes or --tokenizer FILE.model, or --ids to give and get "
                     "token ids", run_dir, ini);
        goto out_free;
    }
    host_config *c = config_new();
    if (!c) {
        ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        goto out_free;
    }
    int32_t rc = config_load_file(c, ini, err);
    const char *kind = rc == CT_OK ? config_get(c, "tokenizer", "kind") : NULL;
    if (rc == CT_OK && kind && !strcmp(kind, "bytes")) {
        t->bytes = 1;
    } else if (rc == CT_OK && kind && !strcmp(kind, "sentencepiece")) {
        const char *sum = config_get(c, "tokenizer", "model_fnv1a64");
        unsigned char *bytes = NULL; /* read once: the bytes checked are the bytes loaded */
        size_t n = 0;
        rc = slurp(model, "copy the run folder whole, or pass --tokenizer FILE.model", &bytes,
                   &n, err);
        char got[32];
        snprintf(got, sizeof got, "%016llx", (unsigned long long)fnv1a64(bytes, n));
        if (rc == CT_OK && (!sum || strcmp(sum, got)))
            rc = ct_error_set(err, CT_ERR_INVALID, "%s has checksum %s, but %s records %s ---> "
                              "copy the run folder whole, or pass --tokenizer FILE.model",
                              model, got, ini, sum ? sum : "none");
        if (rc == CT_OK && !(t->sp = tokenizer_from_bytes(bytes, n, model, err))) rc = err->code;
        free(bytes);
    } else if (rc == CT_OK) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s: [tokenizer] kind is %s, not bytes or "
                          "sentencepiece ---> pass --tokenizer", ini, kind ? kind : "missing");
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
    free(t);
}

int64_t runtok_vocab(const runtok *t) { return t->bytes ? 256 : tokenizer_vocab_size(t->sp); }

const char *runtok_kind(const runtok *t) { return t->bytes ? "bytes" : "sentencepiece"; }

int32_t runtok_encode(const runtok *t, const char *text, size_t len, int32_t **ids, int64_t *n,
                      ct_error *err) {
    if (!t->bytes) return tokenizer_encode(t->sp, text, len, ids, n, err);
    *ids = malloc((len ? len : 1) * sizeof **ids);
    if (!*ids) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < len; i++) (*ids)[i] = (unsigned char)text[i];
    *n = (int64_t)len;
    return CT_OK;
}

int32_t runtok_decode(const runtok *t, const int32_t *ids, int64_t n, char **text, size_t *len,
                      ct_error *err) {
    if (!t->bytes) return tokenizer_decode(t->sp, ids, n, text, len, err);
    *text = malloc((size_t)n + 1);
    if (!*text) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] > 255) {
            free(*text);
            *text = NULL;
            return ct_error_set(err, CT_ERR_INVALID, "token %d is not a byte (the bytes "
                                "tokenizer has 256 tokens) ---> the model's vocabulary is larger "
                                "than its tokenizer's: pass --tokenizer FILE.model or --ids",
                                (int)ids[i]);
        }
        (*text)[i] = (char)ids[i];
    }
    (*text)[n] = '\0';
    *len = (size_t)n;
    return CT_OK;
}
