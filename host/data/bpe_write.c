/* bpe_write.c — Hugging Face's tokenizer files of a byte-level BPE model (see bpe_write.h):
 * token bytes shown in GPT-2's byte-level alphabet, JSON built in a memory stream and written
 * whole through outfile. */
#include "data/bpe_write.h"

#include "io/json.h"
#include "io/outfile.h"
#include "base/utf8.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's byte-level alphabet (bytes_to_unicode): byte b shown as a printable code point. */
static unsigned alphabet_cp(unsigned b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    unsigned n = 0; /* the rank of b among the bytes that are not printable */
    for (unsigned c = 0; c < b; c++)
        n += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
    return 256 + n;
}

/* Token id's bytes in the alphabet (a special token: its literal text), JSON-escaped when
 * `json` (the alphabet itself needs no escape but for '"' and '\\'). */
static void put_bytes(FILE *f, const bpe_model *m, int32_t id, int json) {
    size_t n = 0;
    const unsigned char *p = bpe_token_bytes(m, id, &n);
    if (bpe_is_special(m, id)) {
        if (json) json_put_string(f, (const char *)p, n);
        else fwrite(p, 1, n, f);
        return;
    }
    char buf[8];
    for (size_t i = 0; i < n; i++) {
        size_t k = utf8_put(alphabet_cp(p[i]), buf);
        if (json) json_put_string(f, buf, k);
        else fwrite(buf, 1, k, f);
    }
}

/* Token id as a JSON string. */
static void put_token(FILE *f, const bpe_model *m, int32_t id) {
    fputc('"', f);
    put_bytes(f, m, id, 1);
    fputc('"', f);
}

/* The text a memory stream holds, to `path` through outfile. Closes f. */
static int32_t commit_stream(FILE *f, char **bufp, size_t *n, const char *path, ct_error *err) {
    int bad = fflush(f) != 0 || ferror(f);
    fclose(f);
    char *buf = *bufp; /* set by the stream's flush and close */
    *bufp = NULL;
    if (bad || !buf) {
        free(buf);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory writing %s", path);
    }
    int32_t rc = outfile_write_whole(path, buf, *n, 0, err);
    free(buf);
    return rc;
}

static void put_vocab(FILE *f, const bpe_model *m, const char *indent) {
    int first = 1;
    for (int32_t id = 0; id < bpe_vocab_size(m); id++) {
        size_t n;
        if (!bpe_token_bytes(m, id, &n)) continue;
        fprintf(f, "%s%s", first ? "" : ",", indent);
        put_token(f, m, id);
        fprintf(f, ": %d", (int)id);
        first = 0;
    }
}

static void put_added(FILE *f, const bpe_model *m) {
    int first = 1;
    fputs("[", f);
    for (int32_t id = 0; id < bpe_vocab_size(m); id++) {
        if (!bpe_is_special(m, id)) continue;
        fprintf(f, "%s\n    {\"id\": %d, \"content\": ", first ? "" : ",", (int)id);
        put_token(f, m, id);
        fputs(", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
              "\"normalized\": false, \"special\": true}", f);
        first = 0;
    }
    fputs(first ? "]" : "\n  ]", f);
}

int32_t bpe_write_tokenizer_json(bpe_model *m, const char *path, ct_error *err) {
    const int32_t *l, *r;
    int32_t n_merges;
    int32_t rc = bpe_merges(m, &l, &r, &n_merges, err);
    if (rc != CT_OK) return rc;
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return ct_error_set(err, CT_ERR_NOMEM, "out of memory writing %s", path);
    fputs("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n"
          "  \"added_tokens\": ", f);
    put_added(f, m);
    fputs(bpe_normalizes_nfc(m) ? ",\n  \"normalizer\": {\"type\": \"NFC\"},\n"
                                : ",\n  \"normalizer\": null,\n", f);
    int literal = 0;
    const char *split = bpe_split_pattern(m, &literal);
    if (split) { /* Llama-3's and Qwen2's form: the Split, then ByteLevel without its regex */
        fputs("  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n"
              "    {\"type\": \"Split\", \"pattern\": {", f);
        fputs(literal ? "\"String\": " : "\"Regex\": ", f);
        fputc('"', f);
        json_put_string(f, split, strlen(split));
        fputs("\"}, \"behavior\": \"Isolated\", \"invert\": false},\n"
              "    {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
              "\"trim_offsets\": true, \"use_regex\": false}]},\n", f);
    } else if (bpe_digits(m)) { /* SmolLM's form: Digits, then ByteLevel with its regex */
        fprintf(f, "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n"
                "    {\"type\": \"Digits\", \"individual_digits\": %s},\n"
                "    {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                "\"trim_offsets\": true, \"use_regex\": true}]},\n",
                bpe_digits(m) == BPE_DIGITS_ONE ? "true" : "false");
    } else {
        fputs("  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
              "\"trim_offsets\": true, \"use_regex\": true},\n", f);
    }
    fputs("  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
          "\"trim_offsets\": false, \"use_regex\": true},\n"
          "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
          "\"trim_offsets\": true, \"use_regex\": true},\n", f);
    fprintf(f, "  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
            "\"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": \"\", "
            "\"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": %s,\n"
            "    \"vocab\": {", bpe_ignores_merges(m) ? "true" : "false");
    put_vocab(f, m, "\n      ");
    fputs("\n    },\n    \"merges\": [", f);
    /* "A B": the alphabet has no space (a space byte is shown as U+0120), and every version of
     * the tokenizers library reads this form */
    for (int32_t k = 0; k < n_merges; k++) {
        fputs(k ? ",\n      \"" : "\n      \"", f);
        put_bytes(f, m, l[k], 1);
        fputc(' ', f);
        put_bytes(f, m, r[k], 1);
        fputc('"', f);
    }
    fputs("\n    ]\n  }\n}\n", f);
    return commit_stream(f, &buf, &n, path, err);
}

/* DIR/NAME into buf. */
static int32_t join(char *buf, size_t cap, const char *dir, const char *name, ct_error *err) {
    if ((size_t)snprintf(buf, cap, "%s/%s", dir, name) >= cap)
        return ct_error_set(err, CT_ERR_INVALID, "path %s/%s is too long", dir, name);
    return CT_OK;
}

int32_t bpe_write_hf(bpe_model *m, const char *dir, int64_t model_max_length, ct_error *err) {
    char path[PATH_MAX];
    int32_t rc = join(path, sizeof path, dir, "tokenizer.json", err);
    if (rc == CT_OK) rc = bpe_write_tokenizer_json(m, path, err);
    const int32_t *l, *r;
    int32_t n_merges = 0;
    if (rc == CT_OK) rc = bpe_merges(m, &l, &r, &n_merges, err);
    char *buf = NULL;
    size_t n = 0;
    FILE *f;
    /* vocab.json and merges.txt (GPT2Tokenizer, the slow one) */
    if (rc == CT_OK && (rc = join(path, sizeof path, dir, "vocab.json", err)) == CT_OK) {
        if (!(f = open_memstream(&buf, &n))) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        fputs("{", f);
        put_vocab(f, m, "");
        fputs("}\n", f);
        rc = commit_stream(f, &buf, &n, path, err);
    }
    if (rc == CT_OK && (rc = join(path, sizeof path, dir, "merges.txt", err)) == CT_OK) {
        if (!(f = open_memstream(&buf, &n))) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        fputs("#version: 0.2\n", f);
        for (int32_t k = 0; k < n_merges; k++) {
            put_bytes(f, m, l[k], 0);
            fputc(' ', f);
            put_bytes(f, m, r[k], 0);
            fputc('\n', f);
        }
        rc = commit_stream(f, &buf, &n, path, err);
    }
    /* the tokenizer's class and special tokens: <|endoftext|> is bos, eos and unk (GPT-2's) */
    int32_t eot = bpe_eot_id(m);
    /* <|endoftext|>, or Llama-3's <|end_of_text|>: the added token's text (printable ASCII in
     * every family; anything else is written as null) */
    char special[128] = "null";
    size_t eot_len = 0;
    const unsigned char *eot_text = eot >= 0 ? bpe_token_bytes(m, eot, &eot_len) : NULL;
    int plain = eot_text && eot_len < sizeof special - 3;
    for (size_t i = 0; plain && i < eot_len; i++)
        plain = eot_text[i] >= 0x20 && eot_text[i] < 0x7F && eot_text[i] != '"' &&
                eot_text[i] != '\\';
    if (plain) snprintf(special, sizeof special, "\"%.*s\"", (int)eot_len, (const char *)eot_text);
    const char *split = bpe_split_pattern(m, NULL);
    if (rc == CT_OK && (rc = join(path, sizeof path, dir, "tokenizer_config.json", err)) == CT_OK) {
        if (!(f = open_memstream(&buf, &n))) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        fprintf(f, "{\n  \"tokenizer_class\": \"%s\",\n  \"model_max_length\": %lld,\n"
                "  \"bos_token\": %s,\n  \"eos_token\": %s,\n  \"unk_token\": %s,\n"
                "  \"pad_token\": null,\n  \"add_prefix_space\": false,\n"
                "  \"add_bos_token\": false,\n  \"clean_up_tokenization_spaces\": false\n}\n",
                bpe_vocab_size(m) > 257 && !split && !bpe_digits(m) ? "GPT2Tokenizer"
                                                                    : "PreTrainedTokenizerFast",
                (long long)model_max_length, special, special, special);
        rc = commit_stream(f, &buf, &n, path, err);
    }
    if (rc == CT_OK && (rc = join(path, sizeof path, dir, "special_tokens_map.json", err)) == CT_OK) {
        if (!(f = open_memstream(&buf, &n))) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        if (eot >= 0)
            fprintf(f, "{\"bos_token\": %s, \"eos_token\": %s, \"unk_token\": %s}\n", special,
                    special, special);
        else fputs("{}\n", f);
        rc = commit_stream(f, &buf, &n, path, err);
    }
    return rc;
}
