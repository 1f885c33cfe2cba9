/* export_tokenizer.c — the tokenizer files of an export (see export_tokenizer.h). */
#include "weights/export_tokenizer.h"
#include "data/mixture.h"

#include "base/printable.h"
#include "data/bpe.h"
#include "data/bpe_write.h"
#include "base/cmdout.h"
#include "io/outfile.h"
#include "data/runtok.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The tokenizer recorded in the meta.ini beside [data] train, when the run folder has none (a
 * checkpoint copied without its run). NULL when there is none. */
static runtok *from_meta(const host_config *cfg) {
    const char *train = mixture_train_path(cfg); /* a mixture's first dataset (one tokenizer) */
    if (!train || !*train) return NULL;
    char dir[PATH_MAX], meta[PATH_MAX + 16], model[2 * PATH_MAX];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", train);
    if (stat(train, &st) != 0 || !S_ISDIR(st.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    snprintf(meta, sizeof meta, "%s/meta.ini", dir);
    host_config *m = config_new();
    ct_error e = {.struct_size = sizeof e};
    runtok *t = NULL;
    if (m && access(meta, F_OK) == 0 && config_load_file(m, meta, &e) == CT_OK) {
        const char *kind = config_get(m, "data", "tokenizer");
        const char *name = config_get(m, "data", "tokenizer_model");
        if (kind && !strcmp(kind, "bytes")) {
            t = runtok_open(NULL, "bytes", &e);
        } else if (kind && name && !strchr(name, '/') &&
                   (!strcmp(kind, "sentencepiece") || !strcmp(kind, "bpe"))) {
            snprintf(model, sizeof model, "%s/%s", dir, name);
            t = runtok_open(NULL, model, &e);
        }
    }
    config_free(m);
    return t;
}

static int32_t write_text(const char *dir, const char *name, const char *text, ct_error *err) {
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return ct_error_set(err, CT_ERR_INVALID, "path %s/%s is too long", dir, name);
    return outfile_write_whole(path, text, strlen(text), 0, err);
}

/* A sentencepiece run: its model and LlamaTokenizer's settings for ctrain's models (no dummy
 * prefix, no added bos/eos, the text's spaces kept). */
static int32_t write_sentencepiece(const runtok *tok, const char *out_dir, int64_t T,
                                   ct_error *err) {
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/tokenizer.model", out_dir) >= sizeof path)
        return ct_error_set(err, CT_ERR_INVALID, "path %s/tokenizer.model is too long", out_dir);
    int32_t rc = outfile_copy(runtok_model_path(tok), path, 0, err);
    char text[1024];
    snprintf(text, sizeof text,
             "{\n  \"tokenizer_class\": \"LlamaTokenizer\",\n  \"model_max_length\": %lld,\n"
             "  \"bos_token\": \"<s>\",\n  \"eos_token\": \"</s>\",\n  \"unk_token\": \"<unk>\",\n"
             "  \"pad_token\": null,\n  \"add_bos_token\": false,\n  \"add_eos_token\": false,\n"
             "  \"legacy\": true,\n  \"add_prefix_space\": false,\n  \"sp_model_kwargs\": {},\n"
             "  \"clean_up_tokenization_spaces\": false,\n"
             "  \"spaces_between_special_tokens\": false\n}\n", (long long)T);
    if (rc == CT_OK) rc = write_text(out_dir, "tokenizer_config.json", text, err);
    if (rc == CT_OK)
        rc = write_text(out_dir, "special_tokens_map.json", "{\"bos_token\": \"<s>\", "
                        "\"eos_token\": \"</s>\", \"unk_token\": \"<unk>\"}\n", err);
    return rc;
}

int32_t export_tokenizer(const char *ckpt_dir, const host_config *cfg, int64_t V, int64_t T,
                         const char *out_dir, export_tok *t, ct_error *err) {
    memset(t, 0, sizeof *t);
    t->bos = t->eos = -1;
    snprintf(t->kind, sizeof t->kind, "unknown");
    char run_dir[PATH_MAX + 8];
    snprintf(run_dir, sizeof run_dir, "%s/../..", ckpt_dir);
    ct_error e = {.struct_size = sizeof e};
    runtok *tok = runtok_open(run_dir, NULL, &e);
    if (!tok) tok = from_meta(cfg);
    if (!tok) {
        char a[2048], b[2048];
        fprintf(stderr, "ctrain export: note: the run records no tokenizer (%s/tokenizer.ini, "
                "[data] train's meta.ini): %s has weights and config.json only\n",
                printable(run_dir, a, sizeof a), printable(out_dir, b, sizeof b));
        return CT_OK;
    }
    int32_t rc = CT_OK;
    const char *kind = runtok_kind(tok);
    if (runtok_vocab(tok) > V) {
        rc = ct_error_set(err, CT_ERR_INVALID, "the run's tokenizer (%s) has %lld tokens, the "
                          "model %lld ---> the checkpoint and its tokenizer do not belong "
                          "together", kind, (long long)runtok_vocab(tok), (long long)V);
        goto out_free;
    }
    snprintf(t->kind, sizeof t->kind, "%s", kind);
    t->bos = runtok_bos(tok);
    t->eos = runtok_eot(tok);
    if (!strcmp(kind, "sentencepiece")) {
        rc = write_sentencepiece(tok, out_dir, T, err);
    } else if (!strcmp(kind, "bpe")) {
        rc = bpe_write_hf(runtok_bpe(tok), out_dir, T, err);
    } else { /* bytes: token b is byte b; 256 is <|endoftext|> when the data put it there */
        int eot = runtok_eot(tok) == 256 || (runtok_eot(tok) < 0 && V == 257);
        bpe_model *m = bpe_bytes_model(eot, err);
        if (!m) rc = err->code;
        else rc = bpe_write_hf(m, out_dir, T, err);
        bpe_free(m);
        t->bos = t->eos = eot ? 256 : -1;
        if (rc == CT_OK)
            fprintf(cmdout(), "export: a bytes run: tokenizer.json maps token b to byte b "
                    "(0..255)%s\n", eot ? " and 256 to <|endoftext|>" : "");
    }
out_free:
    runtok_free(tok);
    return rc;
}
