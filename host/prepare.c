/* prepare.c — the `ctrain prepare` subcommand: tokenize text files (bytes, or a sentencepiece
 * model trained on them), split each file's tail off as validation data, write llm.c shards and
 * meta.ini, print a summary with the unigram entropy of the train tokens.
 * Not for: the shard format itself or loading batches (data.c).
 */
#include "prepare.h"

#include "data.h"
#include "files.h"
#include "tokenizer.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SP_VOCAB_MIN 260   /* byte fallback needs 256 byte pieces + <unk> <s> </s> + some */
#define SP_VOCAB_MAX 65535 /* tokens are uint16 */

prepare_options prepare_default_options(void) {
    prepare_options o = {0};
    o.val_fraction = 0.05;
    o.tokenizer = "bytes";
    o.vocab_size = 8192;
    o.sp_model_type = "bpe";
    o.sp_max_sentences = 2000000;
    o.shard_tokens = 100000000;
    return o;
}

/* A growable uint16 token stream. */
typedef struct { uint16_t *v; int64_t n, cap; } token_vec;

static int32_t token_vec_push(token_vec *tv, const int32_t *ids, const uint8_t *bytes, int64_t n,
                              ct_error *err) {
    if (tv->n + n > tv->cap) {
        int64_t cap = tv->cap ? tv->cap : 1 << 16;
        while (cap < tv->n + n) cap *= 2;
        uint16_t *v = realloc(tv->v, (size_t)cap * sizeof *v);
        if (!v) return ct_error_set(err, CT_ERR_NOMEM, "out of memory: %lld tokens",
                                    (long long)cap);
        tv->v = v;
        tv->cap = cap;
    }
    for (int64_t i = 0; i < n; i++) tv->v[tv->n + i] = ids ? (uint16_t)ids[i] : bytes[i];
    tv->n += n;
    return CT_OK;
}

#define TEXT_HINT "give --text files that are regular files of text"

static int32_t read_file(const char *path, char **data, size_t *len, ct_error *err) {
    *data = NULL;
    *len = 0;
    int fd;
    int32_t rc = open_regular(path, "text file", TEXT_HINT, &fd, NULL, err);
    if (rc != CT_OK) return rc;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return ct_error_set(err, CT_ERR_IO, "cannot read text file %s: %s", path,
                            strerror(errno));
    }
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        cap *= 2;
        char *bigger = realloc(buf, cap + 1);
        if (!bigger) free(buf);
        buf = bigger;
    }
    if (!buf) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory reading %s", path);
        goto out_close_file;
    }
    if (ferror(f)) {
        rc = ct_error_set(err, CT_ERR_IO, "cannot read text file %s: %s", path, strerror(errno));
        free(buf);
        goto out_close_file;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
out_close_file:
    fclose(f);
    return rc;
}

/* mkdir -p */
static int32_t make_folder(const char *dir, ct_error *err) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return ct_error_set(err, CT_ERR_INVALID, "output folder name too long: %s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST) goto fail;
        *p = '/';
    }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST) goto fail;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        goto fail;
    }
    if (access(dir, W_OK) != 0) goto fail;
    return CT_OK;
fail:
    return ct_error_set(err, CT_ERR_IO, "output folder %s is not writable: %s ---> choose "
                        "another --out folder", dir, strerror(errno));
}

/* Write tokens as SPLIT_000000.bin... and remove older shards of the split beyond the last. */
static int32_t write_split(const char *dir, const char *split, const token_vec *tv,
                           int64_t shard_tokens, int32_t *n_shards, ct_error *err) {
    char path[PATH_MAX];
    int32_t count = 0;
    int64_t pos = 0;
    do { /* always at least one file, possibly empty, so the split exists */
        int64_t n = tv->n - pos < shard_tokens ? tv->n - pos : shard_tokens;
        snprintf(path, sizeof path, "%s/%s_%06d.bin", dir, split, count);
        int32_t rc = shard_write(path, tv->v + pos, n, err);
        if (rc != CT_OK) return rc;
        pos += n;
        count++;
    } while (pos < tv->n);
    for (int32_t i = count;; i++) { /* stale shards of an earlier, larger prepare */
        snprintf(path, sizeof path, "%s/%s_%06d.bin", dir, split, i);
        if (unlink(path) != 0) break;
    }
    *n_shards = count;
    return CT_OK;
}

static int32_t write_meta(const prepare_options *o, const prepare_summary *s, ct_error *err) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/meta.ini", o->out_dir);
    char *tmp;
    int fd;
    int32_t rc = create_beside(path, &tmp, &fd, err); /* mode 0666 & ~umask, as the shards */
    if (rc != CT_OK) return rc;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        rc = ct_error_set(err, CT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        goto out_unlink;
    }
    int sp = strcmp(o->tokenizer, "sentencepiece") == 0;
    fprintf(f, "; written by `ctrain prepare`: what the shards beside this file hold\n[data]\n");
    fprintf(f, "tokenizer = %s\n", o->tokenizer);
    if (sp) fprintf(f, "tokenizer_model = tokenizer.model\nsentencepiece_type = %s\n",
                    o->sp_model_type);
    fprintf(f, "vocab_size = %d\n", s->vocab_size);
    fprintf(f, "train_tokens = %lld\ntrain_shards = %d\n", (long long)s->train_tokens,
            s->train_shards);
    fprintf(f, "val_tokens = %lld\nval_shards = %d\n", (long long)s->val_tokens, s->val_shards);
    fprintf(f, "val_fraction = %g\n", o->val_fraction);
    fprintf(f, "unigram_entropy_nats = %.6f\n", s->unigram_entropy);
    fprintf(f, "sources = ");
    for (int32_t i = 0; i < o->n_texts; i++) fprintf(f, "%s%s", i ? ", " : "", o->texts[i]);
    fprintf(f, "\n");
    int bad = ferror(f);
    bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        rc = ct_error_set(err, CT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        goto out_unlink;
    }
    free(tmp);
    return CT_OK;

out_unlink:
    unlink(tmp);
    free(tmp);
    return rc;
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
    if (strcmp(o->tokenizer, "bytes") == 0) return CT_OK;
    if (strcmp(o->tokenizer, "sentencepiece") != 0)
        return ct_error_set(err, CT_ERR_INVALID, "--tokenizer '%s' is not bytes or "
                            "sentencepiece", o->tokenizer);
    if (o->vocab_size < SP_VOCAB_MIN || o->vocab_size > SP_VOCAB_MAX)
        return ct_error_set(err, CT_ERR_INVALID, "--vocab-size %d is outside [%d, %d] ---> "
                            "sentencepiece needs the 256 byte pieces plus some, and tokens "
                            "are stored as uint16", o->vocab_size, SP_VOCAB_MIN, SP_VOCAB_MAX);
    if (strcmp(o->sp_model_type, "bpe") != 0 && strcmp(o->sp_model_type, "unigram") != 0)
        return ct_error_set(err, CT_ERR_INVALID, "--sp-model '%s' is not bpe or unigram",
                            o->sp_model_type);
    return CT_OK;
}

int32_t prepare_run(const prepare_options *o, prepare_summary *out, ct_error *err) {
    memset(out, 0, sizeof *out);
    int32_t rc = check_options(o, err);
    if (rc != CT_OK) return rc;
    int sp = strcmp(o->tokenizer, "sentencepiece") == 0;

    /* Every file readable and the text not empty, before any slow work. */
    size_t total_bytes = 0;
    for (int32_t i = 0; i < o->n_texts; i++) {
        struct stat st;
        int fd;
        rc = open_regular(o->texts[i], "text file", TEXT_HINT, &fd, &st, err);
        if (rc != CT_OK) return rc;
        close(fd);
        total_bytes += (size_t)st.st_size;
    }
    if (total_bytes == 0)
        return ct_error_set(err, CT_ERR_INVALID, "the text files are empty (%s%s) ---> give "
                            "--text files that hold text", o->texts[0],
                            o->n_texts > 1 ? ", ..." : "");
    if ((rc = make_folder(o->out_dir, err)) != CT_OK) return rc;

    host_tokenizer *tok = NULL;
    token_vec train = {0}, val = {0};
    uint64_t *counts = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    if (sp) {
        char model[PATH_MAX];
        snprintf(model, sizeof model, "%s/tokenizer.model", o->out_dir);
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        if (!o->quiet)
            fprintf(stderr, "prepare: training a sentencepiece %s model of %d pieces on %zu "
                    "bytes of text\n", o->sp_model_type, o->vocab_size, total_bytes);
        rc = tokenizer_train(o->texts, o->n_texts, o->sp_model_type, o->vocab_size, model,
                             cores > 0 ? (int32_t)cores : 1, o->sp_max_sentences, err);
        if (rc != CT_OK) goto out_free;
        tok = tokenizer_load(model, err);
        if (!tok) {
            rc = err->code;
            goto out_free;
        }
        out->vocab_size = tokenizer_vocab_size(tok);
    } else {
        out->vocab_size = 256;
    }

    for (int32_t i = 0; i < o->n_texts; i++) {
        size_t len;
        if ((rc = read_file(o->texts[i], &text, &len, err)) != CT_OK) goto out_free;
        int64_t n = (int64_t)len;
        if (sp && (rc = tokenizer_encode(tok, text, len, &ids, &n, err)) != CT_OK) goto out_free;
        /* the last val_fraction of each file is validation data */
        int64_t n_val = (int64_t)llround(o->val_fraction * (double)n);
        int64_t n_train = n - n_val;
        if ((rc = token_vec_push(&train, ids, (uint8_t *)text, n_train, err)) != CT_OK ||
            (rc = token_vec_push(&val, ids ? ids + n_train : NULL, (uint8_t *)text + n_train,
                                 n_val, err)) != CT_OK)
            goto out_free;
        free(text);
        free(ids);
        text = NULL;
        ids = NULL;
    }

    counts = calloc((size_t)out->vocab_size, sizeof *counts);
    if (!counts) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        goto out_free;
    }
    for (int64_t i = 0; i < train.n; i++) counts[train.v[i]]++;
    out->unigram_entropy = unigram_entropy(counts, out->vocab_size);
    out->train_tokens = train.n;
    out->val_tokens = val.n;
    if ((rc = write_split(o->out_dir, "train", &train, o->shard_tokens, &out->train_shards,
                          err)) != CT_OK ||
        (rc = write_split(o->out_dir, "val", &val, o->shard_tokens, &out->val_shards,
                          err)) != CT_OK ||
        (rc = write_meta(o, out, err)) != CT_OK)
        goto out_free;
    if (!o->quiet)
        printf("prepare: %s: %lld train tokens (%d shards), %lld val tokens, tokenizer %s "
               "vocab_size %d, unigram entropy %.4f nats/token\n", o->out_dir,
               (long long)train.n, out->train_shards, (long long)val.n, o->tokenizer,
               out->vocab_size, out->unigram_entropy);

out_free:
    free(text);
    free(ids);
    free(counts);
    free(train.v);
    free(val.v);
    tokenizer_free(tok);
    return rc;
}

/* ---- the command line -------------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctrain prepare [--text] FILE... --out DIR [options]\n"
            "  Tokenize text files into llm.c token shards DIR/train_*.bin, DIR/val_*.bin and\n"
            "  DIR/meta.ini; the last fraction of each file is validation data.\n"
            "  [--text] FILE...        text files (one or more; --text is optional)\n"
            "  --out DIR               output folder (created when missing)\n"
            "  --val-fraction F        tail of each file kept for validation (default 0.05)\n"
            "  --tokenizer T           bytes (vocab 256, default) or sentencepiece\n"
            "  --vocab-size K          sentencepiece vocabulary, %d..%d (default 8192)\n"
            "  --sp-model M            sentencepiece model type: bpe (default) or unigram\n"
            "  --sp-max-sentences N    lines sampled to train sentencepiece (default 2000000)\n"
            "  --shard-tokens N        tokens per shard file (default 100000000)\n"
            "  --quiet                 print nothing on success\n",
            SP_VOCAB_MIN, SP_VOCAB_MAX);
}

static int parse_int(const char *opt, const char *s, int64_t *out) {
    char *end;
    errno = 0;
    double d = strtod(s, &end); /* accepts 1e8 */
    if (errno || end == s || *end || d != floor(d) || fabs(d) > 9e15) {
        fprintf(stderr, "ctrain prepare: %s expects an integer, got '%s'\n", opt, s);
        return -1;
    }
    *out = (int64_t)d;
    return 0;
}

int cmd_prepare(int argc, char **argv) {
    prepare_options o = prepare_default_options();
    const char **texts = calloc((size_t)argc + 1, sizeof *texts);
    if (!texts) return 1;
    int status = 2;
    int vocab_given = 0;
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        char name[64];
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
        const char *value = eq ? eq + 1 : NULL;
        if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
            usage(stdout);
            status = 0;
            goto out_free_texts;
        }
        if (strncmp(arg, "-", 1) != 0 || !strcmp(arg, "-")) { /* a text file */
            texts[o.n_texts++] = arg;
            continue;
        }
        if (!strcmp(name, "--quiet")) {
            o.quiet = 1;
            continue;
        }
        if (!strcmp(name, "--text")) {
            if (value) texts[o.n_texts++] = value;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                texts[o.n_texts++] = argv[++i];
            continue;
        }
        if (!value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ctrain prepare: %s needs a value (see --help)\n", name);
                goto out_free_texts;
            }
            value = argv[++i];
        }
        int64_t v;
        if (!strcmp(name, "--out")) o.out_dir = value;
        else if (!strcmp(name, "--tokenizer")) o.tokenizer = value;
        else if (!strcmp(name, "--sp-model")) o.sp_model_type = value;
        else if (!strcmp(name, "--val-fraction")) {
            char *end;
            o.val_fraction = strtod(value, &end);
            if (end == value || *end) {
                fprintf(stderr, "ctrain prepare: --val-fraction expects a number, got '%s'\n",
                        value);
                goto out_free_texts;
            }
        } else if (!strcmp(name, "--vocab-size")) {
            if (parse_int(name, value, &v)) goto out_free_texts;
            if (v < INT32_MIN || v > INT32_MAX) v = INT32_MAX;
            o.vocab_size = (int32_t)v;
            vocab_given = 1;
        } else if (!strcmp(name, "--shard-tokens")) {
            if (parse_int(name, value, &v)) goto out_free_texts;
            o.shard_tokens = v;
        } else if (!strcmp(name, "--sp-max-sentences")) {
            if (parse_int(name, value, &v)) goto out_free_texts;
            o.sp_max_sentences = v;
        } else {
            fprintf(stderr, "ctrain prepare: unknown option %s (see --help)\n", name);
            goto out_free_texts;
        }
    }
    if (vocab_given && !strcmp(o.tokenizer, "bytes") && o.vocab_size != 256) {
        fprintf(stderr, "ctrain prepare: --vocab-size %d: the bytes tokenizer has exactly 256 "
                "tokens ---> add --tokenizer sentencepiece for another vocabulary\n",
                o.vocab_size);
        goto out_free_texts;
    }
    o.texts = texts;
    ct_error err = {.struct_size = sizeof err};
    prepare_summary s;
    if (prepare_run(&o, &s, &err) != CT_OK) {
        fprintf(stderr, "ctrain prepare: %s\n", err.message);
        status = err.code == CT_ERR_INVALID && o.n_texts == 0 ? 2 : 1;
        goto out_free_texts;
    }
    status = 0;
out_free_texts:
    free(texts);
    return status;
}
