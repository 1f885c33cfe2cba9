/* bpe.c — byte-level BPE (see bpe.h): the three file formats, the pre-tokenizer (GPT-2's
 * pattern, or a tokenizer.json's Split regex) through PCRE2 (JIT), added tokens matched before
 * it (on request), pair merging lowest rank first (a scan for short pieces, a heap for long
 * ones, the same merges), decoding, and the places where text may be cut.
 * Not for: writing Hugging Face files (bpe_write.c), Unicode normalization (nfc.c).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/bpe.h"

#include "io/json.h"
#include "io/files.h"
#include "base/utf8.h"
#include "data/nfc.h"

#include <limits.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's pattern (tiktoken's "gpt2", Hugging Face's ByteLevel). Under PCRE2_UCP, \s is
 * Unicode's White_Space (NEL and NBSP included) and \p{L}, \p{N} its letters and numbers, as
 * the references' regex engines (Rust's regex, Oniguruma) read them. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* The Split patterns of two families' tokenizer.json, as published there: Llama-3's (digits in
 * groups of three) and Qwen2's (one digit a piece). Text is cut for parallel encoding only
 * where the pattern is known (bpe_cut_before): these, GPT-2's, or none. */
static const char llama3_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char qwen2_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef enum pattern_family {
    PAT_GPT2 = 0,   /* GPT-2's: the ByteLevel pre-tokenizer's own regex */
    PAT_LLAMA3 = 1, /* a letter run takes one non-letter, non-digit, non-newline before it */
    PAT_QWEN2 = 2,  /* the same rules for cutting as Llama-3's */
    PAT_OTHER = 3,  /* any other Split regex: no cut places are claimed */
} pattern_family;

#define LONG_PIECE 128 /* pieces longer than this merge through a heap */
/* A piece longer than this (a run of letters, digits, punctuation or spaces with no break the
 * pattern sees) is merged in segments of at most this many bytes, each ending on a character
 * boundary: memory per piece is bounded (the heap takes ~80 bytes a byte) whatever the text.
 * Ids differ from tiktoken's (which merges the whole run) only around a segment's end, and only
 * in pieces this long, which ordinary text never has (GPT-2's longest token is 128 bytes). */
#define PIECE_MAX 65536
#define NO_RANK INT32_MAX

typedef struct pair_slot {
    uint64_t key;   /* left << 32 | right; UINT64_MAX empty */
    int32_t  rank;
    int32_t  id;    /* the merged token */
} pair_slot;

struct bpe_model {
    bpe_format     format;
    int32_t        V, eot;
    int32_t        ignore_merges;
    unsigned char *pool;      /* every token's bytes */
    size_t         pool_n;
    size_t        *off;       /* (V) where token id's bytes start in pool */
    uint32_t      *len;       /* (V) their length; UINT32_MAX for a hole */
    uint8_t       *special;   /* (V) 1: an added token (literal text) */
    int32_t       *table;     /* bytes -> id: open addressing, id + 1, 0 empty */
    size_t         table_cap;
    pair_slot     *pairs;     /* (left, right) -> rank, merged id */
    size_t         pairs_cap, n_pairs;
    int32_t        byte_id[256];
    int32_t       *merge_l, *merge_r; /* the merges in rank order (bpe_merges) */
    int32_t        n_merges;
    pcre2_code    *re;
    char          *split;     /* a Split pre-tokenizer's regex (owned); NULL: GPT-2's */
    /* a Digits pre-tokenizer before ByteLevel's regex (SmolLM's, StarCoder's): 0 none,
     * BPE_DIGITS_RUNS each run of digits a piece, BPE_DIGITS_ONE each digit a piece */
    int32_t        digits;
    pcre2_code    *digits_re; /* its pattern: \p{N}+ or \p{N} (Rust's char::is_numeric) */
    int32_t        split_literal; /* the Split pattern was {"String": ...}: matched as text */
    pattern_family family;
    int32_t        nfc;       /* normalizer NFC (Qwen2's) */
    /* added tokens (tokenizer.json added_tokens), matched in the text before pre-tokenizing
     * by bpe_encode_ex with BPE_ENCODE_SPECIALS: content bytes, id, flags */
    char         **added_text;
    size_t        *added_len;
    int32_t       *added_id;
    uint8_t       *added_special; /* the file's "special" flag */
    int32_t        n_added;
    uint8_t        added_first[256]; /* 1: some added token starts with this byte */
};

/* ---- tables ------------------------------------------------------------------------------ */

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t k) {
    k *= 0x9E3779B97F4A7C15ull;
    return k ^ (k >> 31);
}

/* The id of the token whose bytes are p[0, n), -1 when none (specials are not looked up). */
static int32_t find_bytes(const bpe_model *m, const unsigned char *p, size_t n) {
    size_t mask = m->table_cap - 1;
    for (size_t i = hash_bytes(p, n) & mask;; i = (i + 1) & mask) {
        int32_t e = m->table[i];
        if (!e) return -1;
        int32_t id = e - 1;
        if (m->len[id] == n && !memcmp(m->pool + m->off[id], p, n)) return id;
    }
}

static const pair_slot *find_pair(const bpe_model *m, int32_t l, int32_t r) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    size_t mask = m->pairs_cap - 1;
    for (size_t i = hash_pair(key) & mask;; i = (i + 1) & mask) {
        if (m->pairs[i].key == key) return &m->pairs[i];
        if (m->pairs[i].key == UINT64_MAX) return NULL;
    }
}

/* Add (l, r) -> (rank, id) unless the pair is there with a lower rank (the first merge of a
 * pair wins, as in merges.txt and in a ranks file's lowest concatenation). */
static void put_pair(bpe_model *m, int32_t l, int32_t r, int32_t rank, int32_t id) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    size_t mask = m->pairs_cap - 1;
    for (size_t i = hash_pair(key) & mask;; i = (i + 1) & mask) {
        pair_slot *s = &m->pairs[i];
        if (s->key == key) {
            if (rank < s->rank) s->rank = rank, s->id = id;
            return;
        }
        if (s->key == UINT64_MAX) {
            *s = (pair_slot){key, rank, id};
            m->n_pairs++;
            return;
        }
    }
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

static int32_t alloc_pairs(bpe_model *m, size_t n, ct_error *err) {
    m->pairs_cap = pow2_at_least(2 * n + 16);
    m->pairs = malloc(m->pairs_cap * sizeof *m->pairs);
    if (!m->pairs) return ct_error_set(err, CT_ERR_NOMEM, "out of memory loading a tokenizer");
    for (size_t i = 0; i < m->pairs_cap; i++) m->pairs[i].key = UINT64_MAX;
    return CT_OK;
}

/* The vocabulary arrays for V ids, all holes; pool_cap bytes of token text. */
static int32_t alloc_vocab(bpe_model *m, int32_t V, size_t pool_cap, ct_error *err) {
    m->V = V;
    m->off = calloc((size_t)V, sizeof *m->off);
    m->len = malloc((size_t)V * sizeof *m->len);
    m->special = calloc((size_t)V, 1);
    m->pool = malloc(pool_cap ? pool_cap : 1);
    m->table_cap = pow2_at_least(2 * (size_t)V);
    m->table = calloc(m->table_cap, sizeof *m->table);
    if (!m->off || !m->len || !m->special || !m->pool || !m->table)
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory loading a tokenizer");
    for (int32_t i = 0; i < V; i++) m->len[i] = UINT32_MAX;
    return CT_OK;
}

/* Token id := bytes p[0, n). Specials are kept out of the bytes table. The caller checks that
 * id is free and that ordinary bytes are new (find_bytes). */
static void set_token(bpe_model *m, int32_t id, const unsigned char *p, size_t n, int special) {
    memcpy(m->pool + m->pool_n, p, n);
    m->off[id] = m->pool_n;
    m->len[id] = (uint32_t)n;
    m->pool_n += n;
    m->special[id] = (uint8_t)special;
    if (special) return;
    size_t mask = m->table_cap - 1;
    size_t i = hash_bytes(p, n) & mask;
    while (m->table[i]) i = (i + 1) & mask;
    m->table[i] = id + 1;
}

/* Every byte a token; the pattern compiled. */
static int32_t finish_model(bpe_model *m, const char *path, ct_error *err) {
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        m->byte_id[b] = find_bytes(m, &c, 1);
        if (m->byte_id[b] < 0)
            return ct_error_set(err, CT_ERR_INVALID, "%s has no token for the single byte 0x%02x "
                                "---> a byte-level BPE has all 256 bytes as tokens; give GPT-2's "
                                "tokenizer or one of its family", path, b);
    }
    int code;
    PCRE2_SIZE at;
    const char *pattern = m->split ? m->split : gpt2_pattern;
    /* Digits first: no cut places are claimed (PAT_OTHER), the pieces differ from GPT-2's */
    m->family = m->digits                        ? PAT_OTHER
              : !m->split                        ? PAT_GPT2
              : m->split_literal                 ? PAT_OTHER
              : !strcmp(m->split, gpt2_pattern)   ? PAT_GPT2
              : !strcmp(m->split, llama3_pattern) ? PAT_LLAMA3
              : !strcmp(m->split, qwen2_pattern)  ? PAT_QWEN2
                                                  : PAT_OTHER;
    m->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                          m->split_literal ? PCRE2_UTF | PCRE2_LITERAL /* UCP not allowed */
                                           : PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    if (!m->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return ct_error_set(err, m->split ? CT_ERR_INVALID : CT_ERR_INTERNAL, "%s: PCRE2 cannot "
                            "compile the pre-tokenizer's pattern at offset %zu: %s ---> %s",
                            path, (size_t)at, (const char *)msg, m->split ? "the Split regex "
                            "uses syntax PCRE2 does not read; give a tokenizer whose pattern "
                            "PCRE2 compiles" : "an internal error");
    }
    pcre2_jit_compile(m->re, PCRE2_JIT_COMPLETE); /* without JIT it still matches, slower */
    if (m->digits) {
        const char *digits = m->digits == BPE_DIGITS_ONE ? "\\p{N}" : "\\p{N}+";
        m->digits_re = pcre2_compile((PCRE2_SPTR)digits, PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
        if (!m->digits_re)
            return ct_error_set(err, CT_ERR_INTERNAL, "%s: PCRE2 cannot compile the Digits "
                                "pattern ---> an internal error", path);
        pcre2_jit_compile(m->digits_re, PCRE2_JIT_COMPLETE);
    }
    return CT_OK;
}

void bpe_free(bpe_model *m) {
    if (!m) return;
    free(m->pool);
    free(m->off);
    free(m->len);
    free(m->special);
    free(m->table);
    free(m->pairs);
    free(m->merge_l);
    free(m->merge_r);
    if (m->re) pcre2_code_free(m->re);
    if (m->digits_re) pcre2_code_free(m->digits_re);
    free(m->split);
    for (int32_t i = 0; i < m->n_added; i++) free(m->added_text[i]);
    free(m->added_text);
    free(m->added_len);
    free(m->added_id);
    free(m->added_special);
    free(m);
}

/* ---- tiktoken ranks files ---------------------------------------------------------------- */

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 (padding optional) into out; the bytes, or -1 when malformed. */
static long b64_decode(const char *s, size_t n, unsigned char *out) {
    while (n > 0 && s[n - 1] == '=') n--;
    if (n % 4 == 1) return -1;
    long o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0) return -1;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    return o;
}

/* The pairs of a ranks file: every split of every token into two tokens merges into it with
 * the token's rank as priority. */
static int32_t tiktoken_pairs(bpe_model *m, ct_error *err) {
    size_t n = 0;
    for (int32_t id = 0; id < m->V; id++)
        if (m->len[id] != UINT32_MAX && !m->special[id] && m->len[id] > 1) n += m->len[id] - 1;
    int32_t rc = alloc_pairs(m, n, err);
    for (int32_t id = 0; rc == CT_OK && id < m->V; id++) {
        if (m->len[id] == UINT32_MAX || m->special[id]) continue;
        const unsigned char *p = m->pool + m->off[id];
        for (uint32_t k = 1; k < m->len[id]; k++) {
            int32_t l = find_bytes(m, p, k), r = find_bytes(m, p + k, m->len[id] - k);
            if (l >= 0 && r >= 0) put_pair(m, l, r, id, id);
        }
    }
    return rc;
}

static int32_t load_tiktoken(bpe_model *m, const char *path, const char *text, size_t n,
                             ct_error *err) {
    int32_t max_rank = -1, lines = 0;
    for (const char *p = text; p < text + n;) { /* pass 1: count and check */
        const char *e = memchr(p, '\n', (size_t)(text + n - p));
        if (!e) e = text + n;
        const char *sp = memchr(p, ' ', (size_t)(e - p));
        lines++;
        if (e > p && !(e == p + 1 && *p == '\r')) {
            char *end;
            long r = sp ? strtol(sp + 1, &end, 10) : -1;
            if (!sp || sp == p || end == sp + 1 || (*end != '\n' && *end != '\r' && end != e) ||
                r < 0 || r >= (1L << 24))
                return ct_error_set(err, CT_ERR_INVALID, "%s:%d: expected \"BASE64 RANK\" (a "
                                    "tiktoken ranks file) ---> give a *.tiktoken file, a "
                                    "tokenizer.json or vocab.json with merges.txt", path, lines);
            if (r > max_rank) max_rank = (int32_t)r;
        }
        p = e + 1;
    }
    if (max_rank < 255)
        return ct_error_set(err, CT_ERR_INVALID, "%s holds %d ranks; a byte-level BPE has at "
                            "least 256 ---> give a *.tiktoken ranks file", path, max_rank + 1);
    int32_t rc = alloc_vocab(m, max_rank + 2, n + sizeof BPE_EOT_TEXT, err);
    if (rc != CT_OK) return rc;
    unsigned char tok[1024];
    lines = 0;
    for (const char *p = text; p < text + n;) {
        const char *e = memchr(p, '\n', (size_t)(text + n - p));
        if (!e) e = text + n;
        lines++;
        if (e > p && !(e == p + 1 && *p == '\r')) {
            const char *sp = memchr(p, ' ', (size_t)(e - p));
            long r = strtol(sp + 1, NULL, 10);
            long k = (size_t)(sp - p) <= 4 * sizeof tok / 3 ? b64_decode(p, (size_t)(sp - p), tok)
                                                           : -1;
            if (k <= 0)
                return ct_error_set(err, CT_ERR_INVALID, "%s:%d: the token is not base64 of "
                                    "1..1024 bytes ---> the file is damaged", path, lines);
            if (m->len[r] != UINT32_MAX)
                return ct_error_set(err, CT_ERR_INVALID, "%s:%d: rank %ld appears twice ---> "
                                    "the file is damaged", path, lines, r);
            if (find_bytes(m, tok, (size_t)k) >= 0)
                return ct_error_set(err, CT_ERR_INVALID, "%s:%d: the token of rank %ld has the "
                                    "bytes of rank %d ---> the file is damaged", path, lines, r,
                                    find_bytes(m, tok, (size_t)k));
            set_token(m, (int32_t)r, tok, (size_t)k, 0);
        }
        p = e + 1;
    }
    m->eot = max_rank + 1;
    set_token(m, m->eot, (const unsigned char *)BPE_EOT_TEXT, strlen(BPE_EOT_TEXT), 1);
    m->format = BPE_TIKTOKEN;
    m->ignore_merges = 1;
    return tiktoken_pairs(m, err);
}

/* ---- Hugging Face files ------------------------------------------------------------------- */

/* GPT-2's byte-level alphabet: byte b is shown as a printable code point (bytes_to_unicode). */
static void byte_alphabet(unsigned cp_of[256], int16_t byte_of[324]) {
    int n = 0;
    for (int i = 0; i < 324; i++) byte_of[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        cp_of[b] = printable ? (unsigned)b : (unsigned)(256 + n++);
        byte_of[cp_of[b]] = (int16_t)b;
    }
}

/* A vocabulary string in the byte-level alphabet -> its bytes (out: s's length at most);
 * -1 when a character is outside the alphabet. */
static long alphabet_bytes(const char *s, size_t n, const int16_t byte_of[324], unsigned char *out) {
    const unsigned char *u = (const unsigned char *)s;
    long o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_char_len(u + i, n - i, NULL);
        if (!k) return -1;
        unsigned cp = k == 1 ? u[i] : k == 2 ? (u[i] & 31u) << 6 | (u[i + 1] & 63u) : 0x7FFFFFFF;
        if (cp >= 324 || byte_of[cp] < 0) return -1;
        out[o++] = (unsigned char)byte_of[cp];
        i += k;
    }
    return o;
}

typedef struct hf_source {
    const json_value *vocab;    /* object: string -> id */
    const json_value *merges;   /* array of "a b" or [a, b]; NULL with merges text */
    const char       *merges_text; /* merges.txt */
    size_t            merges_len;
    const json_value *added;    /* tokenizer.json's added_tokens; may be NULL */
    const char       *path, *merges_path;
} hf_source;

/* The id of vocabulary string s (n bytes), -1 when absent: through its bytes. */
static int32_t vocab_id(const bpe_model *m, const char *s, size_t n, const int16_t *byte_of,
                        unsigned char *buf) {
    long k = alphabet_bytes(s, n, byte_of, buf);
    return k > 0 ? find_bytes(m, buf, (size_t)k) : -1;
}

static int32_t hf_merge(bpe_model *m, const char *a, size_t an, const char *b, size_t bn,
                        int32_t rank, const int16_t *byte_of, const char *where, ct_error *err) {
    unsigned char buf[2048];
    if (an + bn > sizeof buf / 2)
        return ct_error_set(err, CT_ERR_INVALID, "%s: merge %d is longer than 1024 bytes", where,
                            rank + 1);
    int32_t l = vocab_id(m, a, an, byte_of, buf), r = vocab_id(m, b, bn, byte_of, buf);
    char both[2048];
    memcpy(both, a, an);
    memcpy(both + an, b, bn);
    int32_t id = vocab_id(m, both, an + bn, byte_of, buf);
    if (l < 0 || r < 0 || id < 0)
        return ct_error_set(err, CT_ERR_INVALID, "%s: merge %d (\"%.*s\" \"%.*s\") names a token "
                            "that is not in the vocabulary ---> the vocabulary and the merges "
                            "do not belong together", where, rank + 1, (int)an, a, (int)bn, b);
    put_pair(m, l, r, rank, id);
    m->merge_l[rank] = l;
    m->merge_r[rank] = r;
    return CT_OK;
}

static int32_t load_hf(bpe_model *m, const hf_source *src, ct_error *err) {
    unsigned cp_of[256];
    int16_t byte_of[324];
    byte_alphabet(cp_of, byte_of);
    const json_value *v = src->vocab;
    int32_t V = 0;
    size_t pool = sizeof BPE_EOT_TEXT;
    for (size_t i = 0; i < v->n; i++) {
        const json_value *id = &v->items[i];
        if (id->type != JSON_NUMBER || !id->integral || id->number < 0 || id->number >= (1 << 24))
            return ct_error_set(err, CT_ERR_INVALID, "%s: the vocabulary's \"%s\" is not an id "
                                "(an integer 0..2^24) ---> the file is damaged", src->path,
                                v->keys[i]);
        if ((int32_t)id->number >= V) V = (int32_t)id->number + 1;
        pool += v->key_lens[i];
    }
    size_t n_added = src->added && src->added->type == JSON_ARRAY ? src->added->n : 0;
    for (size_t i = 0; i < n_added; i++) {
        const json_value *a = &src->added->items[i], *id = json_get(a, "id");
        const char *content = json_string(json_get(a, "content"));
        if (!id || id->type != JSON_NUMBER || !id->integral || id->number < 0 ||
            id->number >= (1 << 24) || !content)
            return ct_error_set(err, CT_ERR_INVALID, "%s: added_tokens[%zu] lacks an integer id "
                                "or a content string ---> the file is damaged", src->path, i);
        if ((int32_t)id->number >= V) V = (int32_t)id->number + 1;
        pool += strlen(content);
    }
    int32_t rc = alloc_vocab(m, V, pool, err);
    if (rc != CT_OK) return rc;
    unsigned char buf[4096];
    for (size_t i = 0; i < v->n; i++) {
        int32_t id = (int32_t)v->items[i].number;
        long k = v->key_lens[i] < sizeof buf ? alphabet_bytes(v->keys[i], v->key_lens[i], byte_of, buf)
                                             : -1;
        if (k <= 0)
            return ct_error_set(err, CT_ERR_INVALID, "%s: vocabulary entry \"%s\" is not in GPT-2's "
                                "byte-level alphabet ---> ctrain reads byte-level BPE "
                                "(pre_tokenizer ByteLevel) only", src->path, v->keys[i]);
        if (m->len[id] != UINT32_MAX || find_bytes(m, buf, (size_t)k) >= 0)
            return ct_error_set(err, CT_ERR_INVALID, "%s: vocabulary entry \"%s\" repeats an id or "
                                "a token ---> the file is damaged", src->path, v->keys[i]);
        set_token(m, id, buf, (size_t)k, 0);
    }
    m->eot = -1;
    int32_t eot2 = -1; /* Llama-3's <|end_of_text|>, when there is no <|endoftext|> */
    m->added_text = calloc(n_added + 1, sizeof *m->added_text);
    m->added_len = calloc(n_added + 1, sizeof *m->added_len);
    m->added_id = calloc(n_added + 1, sizeof *m->added_id);
    m->added_special = calloc(n_added + 1, 1);
    if (!m->added_text || !m->added_len || !m->added_id || !m->added_special)
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory loading a tokenizer");
    for (size_t i = 0; i < n_added; i++) {
        const json_value *a = &src->added->items[i];
        int32_t id = (int32_t)json_get(a, "id")->number;
        const json_value *content_v = json_get(a, "content");
        const char *content = json_string(content_v);
        static const char *const unread[] = {"single_word", "lstrip", "rstrip"};
        for (int k = 0; k < 3; k++) {
            const json_value *f = json_get(a, unread[k]);
            if (f && f->type == JSON_TRUE)
                return ct_error_set(err, CT_ERR_INVALID, "%s: added_tokens[%zu].%s is true (token "
                                    "%d); ctrain matches added tokens as exact text ---> give a "
                                    "tokenizer whose added tokens have single_word, lstrip and "
                                    "rstrip false (GPT-2's, Llama-3's and Qwen2's do)",
                                    src->path, i, unread[k], (int)id);
        }
        if (content_v->len == 0 || memchr(content, 0, content_v->len))
            return ct_error_set(err, CT_ERR_INVALID, "%s: added_tokens[%zu].content is empty or "
                                "holds a NUL ---> the file is damaged", src->path, i);
        if (m->len[id] == UINT32_MAX)
            set_token(m, id, (const unsigned char *)content, content_v->len, 1);
        else m->special[id] = 1;
        const json_value *sp = json_get(a, "special");
        int k = m->n_added++;
        m->added_text[k] = malloc(content_v->len);
        if (!m->added_text[k]) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        memcpy(m->added_text[k], content, content_v->len);
        m->added_len[k] = content_v->len;
        m->added_id[k] = id;
        m->added_special[k] = !sp || sp->type == JSON_TRUE;
        m->added_first[(unsigned char)content[0]] = 1;
        if (!strcmp(content, BPE_EOT_TEXT)) m->eot = id;
        if (!strcmp(content, BPE_EOT_TEXT_LLAMA3)) eot2 = id;
    }
    if (m->eot < 0) m->eot = eot2;
    if (m->eot < 0) { /* vocab.json of GPT-2 holds <|endoftext|> as an entry */
        int32_t id = find_bytes(m, (const unsigned char *)BPE_EOT_TEXT, strlen(BPE_EOT_TEXT));
        if (id >= 0) m->eot = id, m->special[id] = 1;
    }
    /* the merges */
    size_t n_merges = 0;
    if (src->merges) n_merges = src->merges->n;
    else
        for (size_t i = 0; i < src->merges_len; i++) n_merges += src->merges_text[i] == '\n';
    n_merges++;
    m->merge_l = malloc(n_merges * sizeof *m->merge_l);
    m->merge_r = malloc(n_merges * sizeof *m->merge_r);
    if (!m->merge_l || !m->merge_r) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    if ((rc = alloc_pairs(m, n_merges, err)) != CT_OK) return rc;
    char where[4200];
    if (src->merges) {
        snprintf(where, sizeof where, "%s: model.merges", src->path);
        for (size_t i = 0; rc == CT_OK && i < src->merges->n; i++) {
            const json_value *e = &src->merges->items[i];
            const char *s = json_string(e), *sp = s ? strchr(s, ' ') : NULL;
            if (sp && !strchr(sp + 1, ' '))
                rc = hf_merge(m, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), m->n_merges++,
                              byte_of, where, err);
            else if (e->type == JSON_ARRAY && e->n == 2 && json_string(&e->items[0]) &&
                     json_string(&e->items[1]))
                rc = hf_merge(m, e->items[0].str, e->items[0].len, e->items[1].str,
                              e->items[1].len, m->n_merges++, byte_of, where, err);
            else
                rc = ct_error_set(err, CT_ERR_INVALID, "%s[%zu] is not \"A B\" or [\"A\", \"B\"] "
                                  "---> the file is damaged", where, i);
        }
    } else {
        const char *t = src->merges_text, *end = t + src->merges_len;
        int line = 0;
        while (rc == CT_OK && t < end) {
            const char *e = memchr(t, '\n', (size_t)(end - t));
            if (!e) e = end;
            line++;
            size_t n = (size_t)(e - t);
            if (n && t[n - 1] == '\r') n--;
            if (n && !(line == 1 && t[0] == '#')) {
                const char *sp = memchr(t, ' ', n);
                snprintf(where, sizeof where, "%s:%d", src->merges_path, line);
                if (!sp || sp == t || sp + 1 == t + n || memchr(sp + 1, ' ', (size_t)(t + n - sp - 1)))
                    rc = ct_error_set(err, CT_ERR_INVALID, "%s: expected \"A B\" (two tokens and "
                                      "one space) ---> give the merges.txt of the vocab.json",
                                      where);
                else
                    rc = hf_merge(m, t, (size_t)(sp - t), sp + 1, (size_t)(t + n - sp - 1),
                                  m->n_merges++, byte_of, where, err);
            }
            t = e + 1;
        }
    }
    return rc;
}

/* tokenizer.json's "normalizer": none, or NFC (Qwen2's), alone or in a Sequence. Any other
 * type is refused naming its JSON path. */
static int32_t read_normalizer(bpe_model *m, const char *path, const json_value *norm,
                               ct_error *err) {
    if (!norm || norm->type == JSON_NULL) return CT_OK;
    const char *type = json_string(json_get(norm, "type"));
    const json_value *list = type && !strcmp(type, "Sequence") ? json_get(norm, "normalizers")
                                                                : NULL;
    size_t n = list && list->type == JSON_ARRAY ? list->n : 1;
    for (size_t i = 0; i < n; i++) {
        const json_value *one = list ? &list->items[i] : norm;
        const char *t = json_string(json_get(one, "type"));
        if (t && !strcmp(t, "NFC")) {
            m->nfc = 1;
            continue;
        }
        char where[64];
        if (list) snprintf(where, sizeof where, "normalizer.normalizers[%zu].type", i);
        else snprintf(where, sizeof where, "normalizer.type");
        return ct_error_set(err, CT_ERR_INVALID, "%s: %s is %s; ctrain applies no normalizer or "
                            "NFC (Qwen2's) ---> give a byte-level BPE tokenizer without that "
                            "normalizer (GPT-2's, Llama-3's and Qwen2's families)", path, where,
                            t ? t : "missing");
    }
    return CT_OK;
}

/* One ByteLevel pre-tokenizer at `where`: add_prefix_space false, and use_regex as wanted
 * (true: GPT-2's pattern; false: after a Split). */
static int32_t check_byte_level(const char *path, const char *where, const json_value *pre,
                                int want_regex, ct_error *err) {
    const json_value *aps = json_get(pre, "add_prefix_space"), *rx = json_get(pre, "use_regex");
    int regex = !rx || rx->type != JSON_FALSE; /* the library's default is true */
    if (aps && aps->type == JSON_TRUE)
        return ct_error_set(err, CT_ERR_INVALID, "%s: %s.add_prefix_space is true; ctrain adds "
                            "no space before the text ---> give a tokenizer with it false",
                            path, where);
    if (regex != want_regex)
        return ct_error_set(err, CT_ERR_INVALID, "%s: %s.use_regex is %s; ctrain reads ByteLevel "
                            "with GPT-2's regex alone or after Digits, or without it after a "
                            "Split ---> give a tokenizer of GPT-2's, Llama-3's, Qwen2's or "
                            "SmolLM's shape", path, where, regex ? "true" : "false");
    return CT_OK;
}

/* A Split pre-tokenizer at `where`: its pattern (Regex or String) kept for finish_model;
 * behavior Isolated and invert false, as Llama-3's and Qwen2's files have it. */
static int32_t read_split(bpe_model *m, const char *path, const char *where,
                          const json_value *pre, ct_error *err) {
    const json_value *pat = json_get(pre, "pattern");
    const json_value *rx = json_get(pat, "Regex"), *lit = json_get(pat, "String");
    const json_value *text = rx ? rx : lit;
    const char *behavior = json_string(json_get(pre, "behavior"));
    const json_value *inv = json_get(pre, "invert");
    if (!text || !json_string(text) || !text->len || memchr(text->str, 0, text->len))
        return ct_error_set(err, CT_ERR_INVALID, "%s: %s.pattern is not {\"Regex\": \"...\"} or "
                            "{\"String\": \"...\"} with a non-empty pattern ---> the file is "
                            "damaged", path, where);
    if (!behavior || strcmp(behavior, "Isolated"))
        return ct_error_set(err, CT_ERR_INVALID, "%s: %s.behavior is %s; ctrain reads Split with "
                            "behavior Isolated (each match and each gap a piece) ---> give a "
                            "tokenizer of Llama-3's or Qwen2's shape", path, where,
                            behavior ? behavior : "missing");
    if (inv && inv->type == JSON_TRUE)
        return ct_error_set(err, CT_ERR_INVALID, "%s: %s.invert is true; ctrain reads Split with "
                            "invert false ---> give a tokenizer of Llama-3's or Qwen2's shape",
                            path, where);
    if (m->split)
        return ct_error_set(err, CT_ERR_INVALID, "%s: %s is a second Split; ctrain reads one "
                            "---> give a tokenizer of Llama-3's or Qwen2's shape", path, where);
    if (!(m->split = strdup(text->str))) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    m->split_literal = text == lit;
    return CT_OK;
}

/* A Digits pre-tokenizer at `where`: individual_digits true (one digit a piece) or false (the
 * library's default: a run of digits a piece). */
static int32_t read_digits(bpe_model *m, const char *path, const char *where,
                           const json_value *pre, ct_error *err) {
    const json_value *one = json_get(pre, "individual_digits");
    if (one && one->type != JSON_TRUE && one->type != JSON_FALSE)
        return ct_error_set(err, CT_ERR_INVALID, "%s: %s.individual_digits is not true or false "
                            "---> the file is damaged", path, where);
    m->digits = one && one->type == JSON_TRUE ? BPE_DIGITS_ONE : BPE_DIGITS_RUNS;
    return CT_OK;
}

/* tokenizer.json's "pre_tokenizer": ByteLevel with its regex (GPT-2's), a Sequence of a Split
 * and ByteLevel without its regex (Llama-3's, Qwen2's), or a Sequence of Digits and ByteLevel
 * with its regex (SmolLM's); a Sequence of the ByteLevel alone is the first. Anything else is
 * refused naming its JSON path. */
static int32_t read_pre_tokenizer(bpe_model *m, const char *path, const json_value *pre,
                                  ct_error *err) {
    const char *hint = "give a byte-level BPE tokenizer of GPT-2's, Llama-3's, Qwen2's or "
                       "SmolLM's shape";
    const char *type = json_string(json_get(pre, "type"));
    if (!type)
        return ct_error_set(err, CT_ERR_INVALID, "%s: pre_tokenizer is missing; ctrain splits "
                            "text with ByteLevel's regex or a Split ---> %s", path, hint);
    if (!strcmp(type, "ByteLevel")) return check_byte_level(path, "pre_tokenizer", pre, 1, err);
    if (strcmp(type, "Sequence"))
        return ct_error_set(err, CT_ERR_INVALID, "%s: pre_tokenizer.type is %s; ctrain reads "
                            "ByteLevel, Split and a Sequence of them ---> %s", path, type, hint);
    const json_value *list = json_get(pre, "pretokenizers");
    if (!list || list->type != JSON_ARRAY || list->n == 0)
        return ct_error_set(err, CT_ERR_INVALID, "%s: pre_tokenizer.pretokenizers is not a "
                            "non-empty array ---> the file is damaged", path);
    int byte_level = 0;
    for (size_t i = 0; i < list->n; i++) {
        const json_value *one = &list->items[i];
        const char *t = json_string(json_get(one, "type"));
        char where[64];
        snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%zu]", i);
        int32_t rc;
        if (t && !strcmp(t, "Split") && !byte_level && !m->digits)
            rc = read_split(m, path, where, one, err);
        else if (t && !strcmp(t, "Digits") && !byte_level && !m->split && !m->digits)
            rc = read_digits(m, path, where, one, err);
        else if (t && !strcmp(t, "ByteLevel") && !byte_level && i + 1 == list->n) {
            byte_level = 1;
            rc = check_byte_level(path, where, one, m->split == NULL, err);
        } else
            rc = ct_error_set(err, CT_ERR_INVALID, "%s: %s.type is %s; ctrain reads a Split "
                              "followed by ByteLevel, Digits followed by ByteLevel, or ByteLevel "
                              "alone ---> %s", path, where, t ? t : "missing", hint);
        if (rc != CT_OK) return rc;
    }
    if (!byte_level)
        return ct_error_set(err, CT_ERR_INVALID, "%s: pre_tokenizer.pretokenizers has no "
                            "ByteLevel at its end; ctrain reads byte-level BPE ---> %s", path,
                            hint);
    return CT_OK;
}

/* tokenizer.json: the model must be a byte-level BPE as GPT-2's. */
static int32_t load_tokenizer_json(bpe_model *m, const char *path, const json_value *root,
                                   ct_error *err) {
    const json_value *model = json_get(root, "model");
    const char *type = json_string(json_get(model, "type"));
    const char *hint = "ctrain reads byte-level BPE tokenizers (GPT-2's family) only";
    if (type && strcmp(type, "BPE"))
        return ct_error_set(err, CT_ERR_INVALID, "%s: model.type is %s, not BPE ---> %s", path,
                            type, hint);
    const json_value *vocab = json_get(model, "vocab"), *merges = json_get(model, "merges");
    if (!vocab || vocab->type != JSON_OBJECT || !merges || merges->type != JSON_ARRAY)
        return ct_error_set(err, CT_ERR_INVALID, "%s: model has no vocab object or merges array "
                            "---> %s", path, hint);
    int32_t rc = read_normalizer(m, path, json_get(root, "normalizer"), err);
    if (rc == CT_OK) rc = read_pre_tokenizer(m, path, json_get(root, "pre_tokenizer"), err);
    if (rc != CT_OK) return rc;
    static const char *const empty_keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *s = json_string(json_get(model, empty_keys[i]));
        if (s && *s)
            return ct_error_set(err, CT_ERR_INVALID, "%s: model.%s is \"%s\"; GPT-2's is empty "
                                "---> %s", path, empty_keys[i], s, hint);
    }
    const json_value *fb = json_get(model, "byte_fallback"), *dr = json_get(model, "dropout");
    if ((fb && fb->type == JSON_TRUE) || (dr && dr->type == JSON_NUMBER && dr->number > 0))
        return ct_error_set(err, CT_ERR_INVALID, "%s: model.%s is set; GPT-2's BPE has none ---> "
                            "%s", path, fb && fb->type == JSON_TRUE ? "byte_fallback" : "dropout",
                            hint);
    hf_source src = {.vocab = vocab, .merges = merges, .added = json_get(root, "added_tokens"),
                     .path = path};
    rc = load_hf(m, &src, err);
    const json_value *im = json_get(model, "ignore_merges");
    m->ignore_merges = im && im->type == JSON_TRUE;
    m->format = BPE_HF_JSON;
    return rc;
}

/* vocab.json + merges.txt: `path` is one of them, the other is beside it. */
static int32_t load_vocab_merges(bpe_model *m, const char *path, int path_is_merges,
                                 ct_error *err) {
    char other[4200], dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    snprintf(other, sizeof other, "%s/%s", dir, path_is_merges ? "vocab.json" : "merges.txt");
    const char *vocab_path = path_is_merges ? other : path;
    const char *merges_path = path_is_merges ? path : other;
    const char *hint = "give vocab.json with its merges.txt in the same folder";
    json_doc *doc = NULL;
    char *merges = NULL;
    size_t merges_n = 0;
    int32_t rc = json_read_file(vocab_path, "vocabulary file", hint, BPE_MAX_FILE, &doc, err);
    if (rc == CT_OK)
        rc = read_bounded(merges_path, "merges file", hint, BPE_MAX_FILE, &merges, &merges_n, err);
    if (rc == CT_OK && json_root(doc)->type != JSON_OBJECT)
        rc = ct_error_set(err, CT_ERR_INVALID, "%s is not a JSON object of token -> id ---> %s",
                          vocab_path, hint);
    if (rc == CT_OK) {
        hf_source src = {.vocab = json_root(doc), .merges_text = merges, .merges_len = merges_n,
                         .path = vocab_path, .merges_path = merges_path};
        rc = load_hf(m, &src, err);
        m->format = BPE_HF_VOCAB;
    }
    json_free(doc);
    free(merges);
    return rc;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* The model of one file's text (a ranks file, a tokenizer.json, or a vocab.json whose
 * merges.txt is read beside it), every byte a token, the pattern compiled. */
static int32_t load_text(bpe_model *m, const char *path, const char *text, size_t n,
                         ct_error *err) {
    size_t i = 0;
    while (i < n && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) i++;
    int32_t rc;
    if (ends_with(path, ".tiktoken") || i == n || text[i] != '{') {
        rc = load_tiktoken(m, path, text, n, err);
    } else {
        json_doc *doc = NULL;
        rc = json_parse(text, n, path, "the tokenizer file is damaged", &doc, err);
        const json_value *model = rc == CT_OK ? json_get(json_root(doc), "model") : NULL;
        if (model && model->type == JSON_OBJECT) /* vocab.json may hold the token "model" */
            rc = load_tokenizer_json(m, path, json_root(doc), err);
        else if (rc == CT_OK)
            rc = load_vocab_merges(m, path, 0, err);
        json_free(doc);
    }
    return rc == CT_OK ? finish_model(m, path, err) : rc;
}

int32_t bpe_load_text(const char *path, const char *text, size_t n, bpe_model **out,
                      ct_error *err) {
    *out = NULL;
    bpe_model *m = calloc(1, sizeof *m);
    if (!m) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    m->eot = -1;
    int32_t rc = load_text(m, path, text, n, err);
    if (rc != CT_OK) {
        bpe_free(m);
        return rc;
    }
    *out = m;
    return CT_OK;
}

int32_t bpe_load(const char *path, bpe_model **out, ct_error *err) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (!strcmp(base, "merges.txt")) {
        *out = NULL;
        bpe_model *m = calloc(1, sizeof *m);
        if (!m) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        m->eot = -1;
        int32_t rc = load_vocab_merges(m, path, 1, err);
        if (rc == CT_OK) rc = finish_model(m, path, err);
        if (rc != CT_OK) {
            bpe_free(m);
            return rc;
        }
        *out = m;
        return CT_OK;
    }
    char *text = NULL;
    size_t n = 0;
    int32_t rc = read_bounded(path, "tokenizer file", "give a *.tiktoken file, a tokenizer.json "
                              "or vocab.json with merges.txt", BPE_MAX_FILE, &text, &n, err);
    if (rc == CT_OK) rc = bpe_load_text(path, text, n, out, err);
    free(text);
    return rc;
}

bpe_model *bpe_bytes_model(int with_eot, ct_error *err) {
    bpe_model *m = calloc(1, sizeof *m);
    if (!m) return ct_error_set(err, CT_ERR_NOMEM, "out of memory"), NULL;
    m->eot = -1;
    int32_t rc = alloc_vocab(m, with_eot ? 257 : 256, 256 + sizeof BPE_EOT_TEXT, err);
    for (int b = 0; rc == CT_OK && b < 256; b++) {
        unsigned char c = (unsigned char)b;
        set_token(m, b, &c, 1, 0);
    }
    if (rc == CT_OK && with_eot) {
        m->eot = 256;
        set_token(m, 256, (const unsigned char *)BPE_EOT_TEXT, strlen(BPE_EOT_TEXT), 1);
    }
    m->format = BPE_HF_JSON;
    if (rc == CT_OK) rc = alloc_pairs(m, 0, err);
    if (rc == CT_OK) rc = finish_model(m, "ctrain's bytes tokenizer", err);
    if (rc != CT_OK) {
        bpe_free(m);
        return NULL;
    }
    return m;
}

bpe_format bpe_model_format(const bpe_model *m) { return m->format; }

const char *bpe_format_name(bpe_format f) {
    return f == BPE_TIKTOKEN ? "tiktoken" : f == BPE_HF_JSON ? "tokenizer.json" : "vocab.json";
}

int32_t bpe_vocab_size(const bpe_model *m) { return m->V; }
int32_t bpe_eot_id(const bpe_model *m) { return m->eot; }
int bpe_ignores_merges(const bpe_model *m) { return m->ignore_merges; }

const unsigned char *bpe_token_bytes(const bpe_model *m, int32_t id, size_t *len) {
    if (id < 0 || id >= m->V || m->len[id] == UINT32_MAX) return NULL;
    *len = m->len[id];
    return m->pool + m->off[id];
}

int bpe_is_special(const bpe_model *m, int32_t id) {
    return id >= 0 && id < m->V && m->special[id];
}

const char *bpe_split_pattern(const bpe_model *m, int *literal) {
    if (literal) *literal = m->split_literal;
    return m->split;
}

int bpe_normalizes_nfc(const bpe_model *m) { return m->nfc; }

int32_t bpe_digits(const bpe_model *m) { return m->digits; }

/* ---- merging ----------------------------------------------------------------------------- */

typedef struct id_list {
    int32_t *v;
    size_t   n, cap;
} id_list;

static int push_id(id_list *l, int32_t id) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 1024;
        int32_t *v = realloc(l->v, cap * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = id;
    return 0;
}

static void pair_of(const bpe_model *m, int32_t l, int32_t r, int32_t max_rank, int32_t *rank,
                    int32_t *id) {
    const pair_slot *s = find_pair(m, l, r);
    if (s && s->rank < max_rank) *rank = s->rank, *id = s->id;
    else *rank = NO_RANK, *id = -1;
}

/* Merge the n >= 2 parts ids[] in place, lowest rank first (leftmost among equal ranks), using
 * merges of rank < max_rank only; the parts left. A scan per merge: for short pieces. */
static size_t merge_scan(const bpe_model *m, int32_t *ids, size_t n, int32_t max_rank) {
    int32_t rank[LONG_PIECE], res[LONG_PIECE];
    for (size_t i = 0; i + 1 < n; i++) pair_of(m, ids[i], ids[i + 1], max_rank, &rank[i], &res[i]);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == NO_RANK) break;
        ids[best] = res[best];
        memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof *ids);
        memmove(rank + best + 1, rank + best + 2, (n - best - 2) * sizeof *rank);
        memmove(res + best + 1, res + best + 2, (n - best - 2) * sizeof *res);
        n--;
        if (best + 1 < n) pair_of(m, ids[best], ids[best + 1], max_rank, &rank[best], &res[best]);
        else rank[best] = NO_RANK;
        if (best > 0) pair_of(m, ids[best - 1], ids[best], max_rank, &rank[best - 1], &res[best - 1]);
    }
    return n;
}

typedef struct heap_item {
    int32_t  rank;
    uint32_t left, right;       /* part indices (their first byte's position) */
    uint32_t vleft, vright;     /* the parts' versions when the pair was seen */
} heap_item;

static int heap_less(const heap_item *a, const heap_item *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static void heap_push(heap_item *h, size_t *n, heap_item x) {
    size_t i = (*n)++;
    while (i > 0 && heap_less(&x, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = x;
}

static heap_item heap_pop(heap_item *h, size_t *n) {
    heap_item top = h[0], x = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = x;
    return top;
}

/* The same merges as merge_scan in O(n log n): parts in a linked list, candidate pairs in a
 * heap ordered by (rank, position); a popped pair whose parts changed since is skipped.
 * -1 when out of memory. */
static long merge_heap(const bpe_model *m, int32_t *ids, size_t n, int32_t max_rank) {
    uint32_t *next = malloc(n * sizeof *next), *prev = malloc(n * sizeof *prev);
    uint32_t *ver = calloc(n, sizeof *ver);
    heap_item *h = malloc(3 * n * sizeof *h); /* n - 1 first, then two per merge */
    long left = -1;
    if (!next || !prev || !ver || !h) goto out_free;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        next[i] = (uint32_t)(i + 1);
        prev[i] = (uint32_t)i - 1;
        int32_t rank, id;
        if (i + 1 < n && (pair_of(m, ids[i], ids[i + 1], max_rank, &rank, &id), rank != NO_RANK))
            heap_push(h, &hn, (heap_item){rank, (uint32_t)i, (uint32_t)(i + 1), 0, 0});
    }
    size_t alive = n;
    while (hn > 0) {
        heap_item x = heap_pop(h, &hn);
        if (ver[x.left] != x.vleft || ver[x.right] != x.vright || next[x.left] != x.right)
            continue;
        int32_t rank, id;
        pair_of(m, ids[x.left], ids[x.right], max_rank, &rank, &id);
        ids[x.left] = id;
        ver[x.left]++;
        ver[x.right] = UINT32_MAX; /* gone */
        next[x.left] = next[x.right];
        if (next[x.left] < n) prev[next[x.left]] = x.left;
        alive--;
        uint32_t p = prev[x.left], q = next[x.left];
        if (x.left > 0 && p < n && (pair_of(m, ids[p], ids[x.left], max_rank, &rank, &id), rank != NO_RANK))
            heap_push(h, &hn, (heap_item){rank, p, x.left, ver[p], ver[x.left]});
        if (q < n && (pair_of(m, ids[x.left], ids[q], max_rank, &rank, &id), rank != NO_RANK))
            heap_push(h, &hn, (heap_item){rank, x.left, q, ver[x.left], ver[q]});
    }
    size_t o = 0;
    for (uint32_t i = 0; i < n; i = next[i]) ids[o++] = ids[i];
    left = (long)alive;
out_free:
    free(next);
    free(prev);
    free(ver);
    free(h);
    return left;
}

static int contraction_letter(unsigned char c, int caseless) { /* after ' in 's 't 're ... */
    if (caseless && c >= 'A' && c <= 'Z') c = (unsigned char)(c - 'A' + 'a');
    return c == 's' || c == 't' || c == 'r' || c == 'v' || c == 'm' || c == 'l' || c == 'd';
}

/* The length of the next segment of a piece of n > PIECE_MAX bytes at t: PIECE_MAX, shortened
 * to end before a character's first byte and not before an apostrophe that could open a
 * contraction. Both keep what follows a piece of its own for GPT-2's pattern: matched from a
 * segment's end, the pattern gives the rest of the piece (so text cut there encodes as it
 * does whole: bpe_cut_in_long_piece). */
static size_t segment_len(const bpe_model *m, const unsigned char *t, size_t n) {
    size_t k = PIECE_MAX;
    /* Llama-3's and Qwen2's patterns join one non-letter to the letters after it and read
     * contractions in any case: the rest of a piece keeps at least 8 bytes, so matched from a
     * segment's end it is never one character before a letter */
    int llama = m->family == PAT_LLAMA3 || m->family == PAT_QWEN2;
    if (llama && n - k < 8) k = n - 8;
    for (;;) {
        while (k > 1 && (t[k] & 0xC0) == 0x80) k--;
        if (k > 1 && t[k] == '\'' && k + 1 < n && contraction_letter(t[k + 1], llama)) {
            k--;
            continue;
        }
        return k;
    }
}

/* The ids of one piece's bytes appended to out. */
static int encode_piece(const bpe_model *m, const unsigned char *p, size_t n, id_list *out,
                        int32_t *scratch) {
    if (n == 1) return push_id(out, m->byte_id[p[0]]);
    if (m->ignore_merges) {
        int32_t id = find_bytes(m, p, n);
        if (id >= 0) return push_id(out, id);
    }
    int32_t *ids = n <= LONG_PIECE ? scratch : malloc(n * sizeof *ids);
    if (!ids) return -1;
    for (size_t i = 0; i < n; i++) ids[i] = m->byte_id[p[i]];
    long k = n <= LONG_PIECE ? (long)merge_scan(m, ids, n, NO_RANK) : merge_heap(m, ids, n, NO_RANK);
    int bad = k < 0;
    for (long i = 0; !bad && i < k; i++) bad = push_id(out, ids[i]);
    if (ids != scratch) free(ids);
    return bad ? -1 : 0;
}

/* The pieces of one stretch of text (no added token in it) appended to out: normalized (NFC)
 * when the tokenizer says so, split by the pattern (each match and each gap between matches a
 * piece: Split's Isolated; GPT-2's pattern leaves no gaps), each piece merged. With Digits, the
 * stretch is split by the digits pattern first and each of those pieces by the pattern, as the
 * library applies a Sequence of pre-tokenizers (each piece a text of its own: the pattern sees
 * neither the text before a piece nor the text after it). */
typedef struct encoder {
    const bpe_model     *m;
    pcre2_match_data    *md;         /* for m->re */
    pcre2_match_data    *md_digits;  /* for m->digits_re (NULL without Digits) */
    pcre2_jit_stack     *js;
    pcre2_match_context *mc;
    id_list              out;
    int32_t              scratch[LONG_PIECE];
} encoder;

static int32_t encode_piece_segments(encoder *e, const char *text, size_t at, size_t end,
                                     ct_error *err) {
    while (at < end) { /* segments of at most PIECE_MAX bytes */
        size_t n = end - at;
        if (n > PIECE_MAX) n = segment_len(e->m, (const unsigned char *)text + at, n);
        if (encode_piece(e->m, (const unsigned char *)text + at, n, &e->out, e->scratch))
            return ct_error_set(err, CT_ERR_NOMEM, "out of memory encoding text");
        at += n;
    }
    return CT_OK;
}

static int32_t encode_split_piece(encoder *e, int digits, const char *text, size_t at,
                                  size_t end, ct_error *err);

/* Split text[0, len) by the digits pattern (digits: 1) or the pattern (0), each match and each
 * gap a piece; a piece of the digits split is split again by the pattern, one of the pattern's
 * is merged. */
static int32_t encode_split(encoder *e, int digits, const char *text, size_t len,
                            ct_error *err) {
    const pcre2_code *re = digits ? e->m->digits_re : e->m->re;
    pcre2_match_data *md = digits ? e->md_digits : e->md;
    int32_t rc = CT_OK;
    size_t at = 0, from = 0; /* the next piece starts at `at`; the pattern is searched from `from` */
    while (at < len && from < len) {
        int got = pcre2_match(re, (PCRE2_SPTR)text, len, from, PCRE2_NO_UTF_CHECK, md, e->mc);
        if (got == PCRE2_ERROR_NOMATCH) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (got < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(got, msg, sizeof msg);
            rc = ct_error_set(err, CT_ERR_INVALID, "the pre-tokenizer's pattern failed at byte "
                              "%zu: %s ---> the tokenizer's Split regex is too costly for this "
                              "text", from, (const char *)msg);
            break;
        }
        if (ov[1] == ov[0]) { /* an empty match is no piece: search on from the next character */
            size_t k = utf8_char_len((const unsigned char *)text + ov[0], len - ov[0], NULL);
            from = ov[0] + (k ? k : 1);
            continue;
        }
        size_t m0 = ov[0], m1 = ov[1]; /* the next level's matches reuse only their own md */
        if (m0 > at && (rc = encode_split_piece(e, digits, text, at, m0, err)) != CT_OK) break;
        if ((rc = encode_split_piece(e, digits, text, m0, m1, err)) != CT_OK) break;
        at = from = m1;
    }
    if (rc == CT_OK && at < len) rc = encode_split_piece(e, digits, text, at, len, err); /* a gap */
    return rc;
}

static int32_t encode_split_piece(encoder *e, int digits, const char *text, size_t at,
                                  size_t end, ct_error *err) {
    return digits ? encode_split(e, 0, text + at, end - at, err)
                  : encode_piece_segments(e, text, at, end, err);
}

static int32_t encode_stretch(encoder *e, const char *text, size_t len, ct_error *err) {
    char *normal = NULL;
    size_t normal_len = 0;
    if (e->m->nfc && len) {
        int32_t rc = nfc_normalize(text, len, &normal, &normal_len, err);
        if (rc != CT_OK) return rc;
        if (normal) text = normal, len = normal_len;
    }
    int32_t rc = encode_split(e, e->m->digits_re != NULL, text, len, err);
    free(normal);
    return rc;
}

/* The added token that starts at text[i], longest first; -1 when none. */
static int32_t added_at(const bpe_model *m, const char *text, size_t len, size_t i,
                        size_t *tok_len) {
    int32_t best = -1;
    size_t best_len = 0;
    if (!m->added_first[(unsigned char)text[i]]) return -1;
    for (int32_t k = 0; k < m->n_added; k++) {
        size_t n = m->added_len[k];
        if (n > best_len && n <= len - i && !memcmp(text + i, m->added_text[k], n))
            best = k, best_len = n;
    }
    *tok_len = best_len;
    return best < 0 ? -1 : m->added_id[best];
}

int32_t bpe_encode_ex(const bpe_model *m, const char *text, size_t len, uint32_t flags,
                      int32_t **ids, int64_t *n, ct_error *err) {
    *ids = NULL;
    *n = 0;
    size_t clean_len = utf8_sanitized_len(text, len);
    char *clean = NULL;
    if (clean_len) {
        if (!(clean = malloc(clean_len))) return ct_error_set(err, CT_ERR_NOMEM, "out of memory "
                                                              "encoding text");
        utf8_sanitize(text, len, clean);
        text = clean;
        len = clean_len;
    }
    encoder e = {.m = m};
    e.md = pcre2_match_data_create_from_pattern(m->re, NULL);
    if (m->digits_re) e.md_digits = pcre2_match_data_create_from_pattern(m->digits_re, NULL);
    e.js = pcre2_jit_stack_create(32 << 10, 4 << 20, NULL);
    e.mc = pcre2_match_context_create(NULL);
    int32_t rc = CT_OK;
    if (!e.md || (m->digits_re && !e.md_digits) || !e.js || !e.mc) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory encoding text");
        goto out_free;
    }
    pcre2_jit_stack_assign(e.mc, NULL, e.js);
    size_t start = 0; /* the stretch before the next added token */
    if ((flags & BPE_ENCODE_SPECIALS) && m->n_added) {
        for (size_t i = 0; i < len && rc == CT_OK;) {
            size_t tl = 0;
            int32_t id = added_at(m, text, len, i, &tl);
            if (id < 0) {
                i++;
                continue;
            }
            if (i > start) rc = encode_stretch(&e, text + start, i - start, err);
            if (rc == CT_OK && push_id(&e.out, id))
                rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory encoding text");
            i += tl;
            start = i;
        }
    }
    if (rc == CT_OK && start < len) rc = encode_stretch(&e, text + start, len - start, err);
    if (rc != CT_OK) goto out_free;
    if (!e.out.v && !(e.out.v = malloc(sizeof *e.out.v))) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory encoding text");
        goto out_free;
    }
    *ids = e.out.v;
    *n = (int64_t)e.out.n;
    e.out.v = NULL;
out_free:
    free(e.out.v);
    if (e.mc) pcre2_match_context_free(e.mc);
    if (e.js) pcre2_jit_stack_free(e.js);
    if (e.md) pcre2_match_data_free(e.md);
    if (e.md_digits) pcre2_match_data_free(e.md_digits);
    free(clean);
    return rc;
}

int32_t bpe_encode(const bpe_model *m, const char *text, size_t len, int32_t **ids, int64_t *n,
                   ct_error *err) {
    return bpe_encode_ex(m, text, len, 0, ids, n, err);
}

int32_t bpe_decode(const bpe_model *m, const int32_t *ids, int64_t n, char **text, size_t *len,
                   ct_error *err) {
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= m->V || m->len[ids[i]] == UINT32_MAX)
            return ct_error_set(err, CT_ERR_INVALID, "token id %d at position %lld is not in the "
                                "tokenizer's vocabulary (0..%d) ---> pass the run's own "
                                "tokenizer", (int)ids[i], (long long)i, m->V - 1);
        total += m->len[ids[i]];
    }
    char *raw = malloc(total + 1);
    if (!raw) return ct_error_set(err, CT_ERR_NOMEM, "out of memory decoding tokens");
    size_t o = 0;
    for (int64_t i = 0; i < n; i++) {
        memcpy(raw + o, m->pool + m->off[ids[i]], m->len[ids[i]]);
        o += m->len[ids[i]];
    }
    size_t clean = utf8_sanitized_len(raw, total);
    if (clean) {
        char *t = malloc(clean + 1);
        if (!t) {
            free(raw);
            return ct_error_set(err, CT_ERR_NOMEM, "out of memory decoding tokens");
        }
        utf8_sanitize(raw, total, t);
        free(raw);
        raw = t;
        total = clean;
    }
    raw[total] = '\0';
    *text = raw;
    *len = total;
    return CT_OK;
}

/* ---- merges of a ranks file -------------------------------------------------------------- */

int32_t bpe_merges(bpe_model *m, const int32_t **left, const int32_t **right, int32_t *n,
                   ct_error *err) {
    if (!m->merge_l) {
        m->merge_l = malloc(((size_t)m->V + 1) * sizeof *m->merge_l);
        m->merge_r = malloc(((size_t)m->V + 1) * sizeof *m->merge_r);
        int32_t *ids = malloc(1024 * sizeof *ids);
        if (!m->merge_l || !m->merge_r || !ids) {
            free(ids);
            return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        }
        /* a token's merge: BPE of its bytes with the lower ranks leaves two parts */
        for (int32_t id = 0; id < m->V; id++) {
            if (m->len[id] == UINT32_MAX || m->special[id] || m->len[id] < 2) continue;
            size_t k = m->len[id];
            const unsigned char *p = m->pool + m->off[id];
            if (k > 1024) continue;
            for (size_t i = 0; i < k; i++) ids[i] = m->byte_id[p[i]];
            long parts = k <= LONG_PIECE ? (long)merge_scan(m, ids, k, id) : merge_heap(m, ids, k, id);
            if (parts == 2) {
                m->merge_l[m->n_merges] = ids[0];
                m->merge_r[m->n_merges++] = ids[1];
            }
        }
        free(ids);
    }
    *left = m->merge_l;
    *right = m->merge_r;
    *n = m->n_merges;
    return CT_OK;
}

/* ---- cutting ----------------------------------------------------------------------------- */

static int kind_of(unsigned char c) { /* 1 letter, 2 digit, 3 other printable, 0 else */
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 1;
    if (c >= '0' && c <= '9') return 2;
    return c > 0x20 && c < 0x7F ? 3 : 0;
}

/* Whether the pattern ends a piece at p whatever precedes t[p-2] and follows t[p]. GPT-2's:
 * between printable ASCII of different kinds (not ' before a letter), after a newline, tab, CR,
 * VT or FF between printable characters. Llama-3's and Qwen2's join one character that is not
 * a letter, digit, CR or LF to the letters after it: not before a letter after punctuation, a
 * tab, VT or FF. */
static int cut_ok(pattern_family f, const unsigned char *t, size_t p) {
    int a = kind_of(t[p - 1]), b = kind_of(t[p]);
    int llama = f == PAT_LLAMA3 || f == PAT_QWEN2;
    if (a && b) return a != b && !(t[p - 1] == '\'' && b == 1) && !(llama && a == 3 && b == 1);
    unsigned char c = t[p - 1];
    if (llama && b == 1 && c != '\n' && c != '\r') return 0;
    return b && (c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f') &&
           kind_of(t[p - 2]);
}

size_t bpe_cut_before(const bpe_model *m, const char *text, size_t len, size_t lo, size_t hi) {
    const unsigned char *t = (const unsigned char *)text;
    if (len < 3 || m->family == PAT_OTHER) return 0;
    if (lo < 2) lo = 2;
    if (hi >= len) hi = len - 1;
    for (size_t p = hi; p >= lo && p <= hi; p--)
        if (cut_ok(m->family, t, p)) return p;
    return 0;
}

size_t bpe_cut_in_long_piece(const bpe_model *m, const char *text, size_t len, size_t hi) {
    const unsigned char *t = (const unsigned char *)text;
    size_t sub = hi + PIECE_MAX + 64 < len ? hi + PIECE_MAX + 64 : len, cut = 0;
    while (sub > 0 && sub < len && (t[sub] & 0xC0) == 0x80) sub--; /* a character boundary */
    if (sub < 2 || utf8_sanitized_len(text, sub) != 0) return 0;  /* ill-formed: no claim */
    if (m->family == PAT_OTHER || m->nfc) return 0; /* an unknown pattern, or text NFC may
                                                      * change: no claim */
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(m->re, NULL);
    pcre2_jit_stack *js = pcre2_jit_stack_create(32 << 10, 4 << 20, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    if (md && js && mc) pcre2_jit_stack_assign(mc, NULL, js);
    for (size_t at = 0; md && js && mc && at < sub && !cut;) {
        int got = pcre2_match(m->re, (PCRE2_SPTR)text, sub, at, PCRE2_NO_UTF_CHECK, md, mc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (got < 0 || ov[0] != at || ov[1] <= at) break;
        size_t end = ov[1];
        if (end - at <= PIECE_MAX) { /* a piece that reaches the end of what was read may be */
            if (end >= sub) break;   /* longer in the whole text: no claim */
            at = end;
            continue;
        }
        /* a long piece: its segments' ends, as bpe_encode cuts it; the last at or below hi
         * (or the first), never the piece's end, which `sub` may have cut short */
        for (size_t s = at; end - s > PIECE_MAX;) {
            s += segment_len(m, t + s, end - s);
            if (!cut || s <= hi) cut = s;
        }
    }
    if (mc) pcre2_match_context_free(mc);
    if (js) pcre2_jit_stack_free(js);
    if (md) pcre2_match_data_free(md);
    return cut >= 2 && cut < len ? cut : 0;
}

size_t bpe_cut_after(const bpe_model *m, const char *text, size_t len, size_t lo, size_t hi) {
    const unsigned char *t = (const unsigned char *)text;
    if (len < 3 || m->family == PAT_OTHER) return 0;
    if (lo < 2) lo = 2;
    if (hi >= len) hi = len - 1;
    for (size_t p = lo; p <= hi; p++)
        if (cut_ok(m->family, t, p)) return p;
    return 0;
}
