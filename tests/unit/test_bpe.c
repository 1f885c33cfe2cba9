/* test_bpe.c — byte-level BPE (host/data/bpe.c) on a small ranks file made here: merges against an
 * independent reference written in the test (byte strings, lowest rank first, leftmost), the
 * heap path of long pieces against it too, every cut place splitting text without changing
 * its ids, `ctrain prepare` with units of 3000 bytes on 1 and 3 threads equal to encoding
 * each file whole, and the Hugging Face files written from it read back to the same ids.
 * GPT-2's own file against tiktoken and tokenizers: tests/bpe_check.py (test_bpe.sh).
 */
#include "data/bpe.h"
#include "data/bpe_write.h"
#include "ct_test.h"
#include "data/data.h"
#include "data/prepare.h"
#include "shards_read.h"

#include <stdlib.h>
#include <string.h>

static ct_error new_err(void) {
    ct_error e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    return e;
}

/* The merges of the small model, in rank order after the 256 bytes: each the concatenation of
 * two earlier tokens. Words of English plus runs ("aa", "aaaa") for long pieces. */
static const char *const merges[][2] = {
    {"t", "h"}, {"th", "e"}, {" ", "t"}, {" t", "he"}, {"a", "a"}, {"aa", "aa"}, {"i", "n"},
    {"in", "g"}, {"e", "r"}, {" ", "a"}, {"o", "n"}, {"e", "s"}, {"r", "e"}, {" ", "s"},
    {"e", "n"}, {"a", "n"}, {"an", "d"}, {"l", "l"}, {"o", "u"}, {" ", "o"},
    {"a", "t"}, {"i", "s"}, {" ", "i"}, {"aaaa", "aaaa"}, {"\n", "\n"}, {" ", " "},
    {"  ", "  "}, {"1", "2"}, {"12", "3"}, {"'", "s"}, {"e", "d"}, {"o", "r"},
    {" ", "w"}, {" ", "c"}, {"i", "t"}, {" ", "b"}, {"a", "r"}, {"a", "l"},
};
#define N_MERGES ((int)(sizeof merges / sizeof *merges))

/* token k's bytes (k < 256: the byte) into buf; its length */
static size_t token_text(int k, char *buf) {
    if (k < 256) return buf[0] = (char)k, 1;
    const char *a = merges[k - 256][0], *b = merges[k - 256][1];
    return (size_t)sprintf(buf, "%s%s", a, b);
}

static void b64(const unsigned char *p, size_t n, char *out) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = i + 1 < n ? tab[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    out[o] = 0;
}

/* The ranks file of the small model in dir; its path. */
static const char *write_model(const char *dir) {
    static char path[512];
    snprintf(path, sizeof path, "%s/small.tiktoken", dir);
    FILE *f = fopen(path, "w");
    for (int k = 0; f && k < 256 + N_MERGES; k++) {
        char t[64], e[128];
        size_t n = token_text(k, t);
        b64((const unsigned char *)t, n, e);
        fprintf(f, "%s %d\n", e, k);
    }
    if (f) fclose(f);
    return path;
}

/* The reference: the bytes of one piece merged as BPE defines it, on byte strings. */
static int rank_of(const char *s, size_t n) {
    char t[64];
    for (int k = 256; k < 256 + N_MERGES; k++)
        if (token_text(k, t) == n && !memcmp(t, s, n)) return k;
    return n == 1 ? (unsigned char)s[0] : -1;
}

static size_t ref_piece(const char *s, size_t n, int32_t *out) {
    size_t start[2048], len[2048], m = n; /* parts as (start, length) */
    for (size_t i = 0; i < n; i++) start[i] = i, len[i] = 1;
    for (;;) {
        int best = -1, best_rank = 1 << 30;
        for (size_t i = 0; i + 1 < m; i++) {
            int r = rank_of(s + start[i], len[i] + len[i + 1]);
            if (r >= 256 && r < best_rank) best = (int)i, best_rank = r;
        }
        if (best < 0) break;
        len[best] += len[best + 1];
        memmove(start + best + 1, start + best + 2, (m - best - 2) * sizeof *start);
        memmove(len + best + 1, len + best + 2, (m - best - 2) * sizeof *len);
        m--;
    }
    for (size_t i = 0; i < m; i++) out[i] = rank_of(s + start[i], len[i]);
    return m;
}

CT_TEST(bpe_merges_equal_a_reference_on_byte_strings_short_and_long_pieces) {
    ct_error err = new_err();
    bpe_model *m = NULL;
    CT_CHECK_MSG(bpe_load(write_model(ct_test_tmpdir()), &m, &err) == CT_OK, "%s", err.message);
    if (!m) return;
    CT_CHECK_INT(bpe_vocab_size(m), 256 + N_MERGES + 1);
    CT_CHECK_INT(bpe_eot_id(m), 256 + N_MERGES);
    /* letters-only pieces (one piece each: the pre-tokenizer does not split them) of 1..600
     * bytes: the scan path below 128 bytes, the heap path above */
    uint64_t x = 12345;
    int checked = 0, long_ones = 0;
    for (int trial = 0; trial < 300; trial++) {
        char s[700];
        size_t n = 1 + (size_t)(trial < 200 ? trial % 60 : 128 + (trial * 37) % 470);
        static const char alpha[] = "aaaathesingrndlouwcb";
        for (size_t i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            s[i] = alpha[(x >> 33) % (sizeof alpha - 1)];
        }
        int32_t want[700], *got = NULL;
        int64_t n_got = 0;
        size_t n_want = ref_piece(s, n, want);
        CT_CHECK(bpe_encode(m, s, n, &got, &n_got, &err) == CT_OK);
        int same = got && (size_t)n_got == n_want && !memcmp(got, want, n_want * sizeof *want);
        CT_CHECK_MSG(same, "piece of %zu bytes '%.40s...': %lld ids, reference %zu", n, s,
                     (long long)n_got, n_want);
        checked++;
        long_ones += n > 128;
        free(got);
    }
    CT_CHECK(checked == 300 && long_ones == 100);
    bpe_free(m);
}

/* The text of the tests below: real English with accents, digits, runs and newlines. */
static char *sample_text(size_t *len) {
    FILE *f = fopen("/usr/share/common-licenses/GPL-3", "rb");
    char *t = malloc(200000);
    size_t n = f ? fread(t, 1, 60000, f) : 0;
    if (f) fclose(f);
    static const char extra[] = "caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac it's 123456 aaaaaaaaaaaaaaa\n\n\t "
                                "\xf0\x9f\x98\x80   \r\n x\xff\xfey\n";
    for (int i = 0; i < 40; i++) {
        memcpy(t + n, extra, sizeof extra - 1);
        n += sizeof extra - 1;
        memcpy(t + n, t + (size_t)i * 700, 700);
        n += 700;
    }
    *len = n;
    return t;
}

CT_TEST(bpe_every_cut_place_splits_text_without_changing_its_ids) {
    ct_error err = new_err();
    bpe_model *m = NULL;
    CT_CHECK(bpe_load(write_model(ct_test_tmpdir()), &m, &err) == CT_OK);
    if (!m) return;
    size_t len;
    char *t = sample_text(&len);
    int32_t *whole = NULL;
    int64_t n_whole = 0;
    CT_CHECK(bpe_encode(m, t, len, &whole, &n_whole, &err) == CT_OK);
    int cuts = 0;
    for (size_t at = 3; at < len && cuts < 400; at += 211) {
        size_t p = bpe_cut_after(m, t, len, at, at + 200);
        if (!p) continue;
        CT_CHECK(p == bpe_cut_before(m, t, len, p - 1 > at ? at : p, p));
        int32_t *a = NULL, *b = NULL;
        int64_t na = 0, nb = 0;
        CT_CHECK(bpe_encode(m, t, p, &a, &na, &err) == CT_OK);
        CT_CHECK(bpe_encode(m, t + p, len - p, &b, &nb, &err) == CT_OK);
        int same = a && b && na + nb == n_whole && !memcmp(a, whole, (size_t)na * sizeof *a) &&
                   !memcmp(b, whole + na, (size_t)nb * sizeof *b);
        CT_CHECK_MSG(same, "cut at byte %zu ('%.8s|%.8s') changes the ids", p, t + p - 8, t + p);
        cuts++;
        free(a);
        free(b);
    }
    CT_CHECK_MSG(cuts > 200, "only %d cut places found", cuts);
    /* a space before a letter, an apostrophe before a letter: never a cut */
    CT_CHECK_INT(bpe_cut_before(m, "ab c", 4, 2, 3), 0);
    CT_CHECK_INT(bpe_cut_before(m, "x's", 3, 2, 2), 0);
    CT_CHECK_INT(bpe_cut_before(m, "a\n\nb", 4, 2, 3), 0);
    CT_CHECK_INT(bpe_cut_before(m, "a.\nb", 4, 2, 3), 3);
    free(whole);
    free(t);
    bpe_free(m);
}

CT_TEST(bpe_prepare_in_units_on_threads_equals_encoding_the_file_whole) {
    const char *dir = ct_test_tmpdir();
    const char *model = write_model(dir);
    size_t len;
    char *t = sample_text(&len);
    char text[600];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    FILE *f = fopen(text, "wb");
    if (f) fwrite(t, 1, len, f), fclose(f);
    ct_error err = new_err();
    bpe_model *m = NULL;
    CT_CHECK(bpe_load(model, &m, &err) == CT_OK);
    if (!m) return;
    int32_t *ids = NULL;
    int64_t n = 0;
    CT_CHECK(bpe_encode(m, t, len, &ids, &n, &err) == CT_OK);
    const char *texts[] = {text};
    for (int threads = 3; threads >= 1; threads -= 2) {
        char out[700];
        snprintf(out, sizeof out, "%s/out%d", dir, threads);
        prepare_options o = prepare_default_options();
        o.texts = texts, o.n_texts = 1, o.out_dir = out, o.tokenizer = "bpe";
        o.tokenizer_file = model, o.threads = threads, o.unit_bytes = 3000, o.val_fraction = 0.1;
        o.shard_tokens = 7000, o.quiet = 1;
        prepare_summary s;
        CT_CHECK_MSG(prepare_run(&o, &s, &err) == CT_OK, "%s", err.message);
        int64_t nt, nv;
        int32_t *tr = read_split(out, "train", &nt), *va = read_split(out, "val", &nv);
        CT_CHECK_INT(nt + nv, n + 1);
        int same = tr && nt + nv == n + 1 && tr[0] == bpe_eot_id(m);
        for (int64_t i = 1; same && i < nt; i++) same = tr[i] == ids[i - 1];
        for (int64_t i = 0; same && i < nv; i++) same = va[i] == ids[nt - 1 + i];
        CT_CHECK_MSG(same, "%d threads: the shards are not <|endoftext|> + the whole file's ids",
                     threads);
        free(tr);
        free(va);
    }
    free(ids);
    free(t);
    bpe_free(m);
}

CT_TEST(bpe_hugging_face_files_written_read_back_to_the_same_ids) {
    const char *dir = ct_test_tmpdir();
    ct_error err = new_err();
    bpe_model *m = NULL, *j = NULL, *v = NULL;
    CT_CHECK(bpe_load(write_model(dir), &m, &err) == CT_OK);
    if (!m) return;
    CT_CHECK_MSG(bpe_write_hf(m, dir, 64, &err) == CT_OK, "%s", err.message);
    char p[600];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    CT_CHECK_MSG(bpe_load(p, &j, &err) == CT_OK, "%s", err.message);
    snprintf(p, sizeof p, "%s/vocab.json", dir);
    CT_CHECK_MSG(bpe_load(p, &v, &err) == CT_OK, "%s", err.message);
    const int32_t *l, *r;
    int32_t nm = 0;
    CT_CHECK(bpe_merges(m, &l, &r, &nm, &err) == CT_OK);
    CT_CHECK_INT(nm, N_MERGES); /* every token of the ranks file is one merge */
    size_t len;
    char *t = sample_text(&len);
    int32_t *a = NULL, *b = NULL, *c = NULL;
    int64_t na = 0, nb = 0, nc = 0;
    CT_CHECK(j && v);
    if (j && v) {
        CT_CHECK_INT(bpe_vocab_size(j), bpe_vocab_size(m));
        CT_CHECK_INT(bpe_eot_id(j), bpe_eot_id(m));
        CT_CHECK_INT(bpe_eot_id(v), bpe_eot_id(m));
        CT_CHECK(bpe_encode(m, t, len, &a, &na, &err) == CT_OK);
        CT_CHECK(bpe_encode(j, t, len, &b, &nb, &err) == CT_OK);
        CT_CHECK(bpe_encode(v, t, len, &c, &nc, &err) == CT_OK);
        CT_CHECK(na == nb && na == nc && !memcmp(a, b, (size_t)na * 4) && !memcmp(a, c, (size_t)na * 4));
        /* decode gives the text back, ill-formed bytes as U+FFFD */
        char *back = NULL;
        size_t blen = 0;
        CT_CHECK(bpe_decode(j, b, nb, &back, &blen, &err) == CT_OK);
        CT_CHECK(back && blen > len && !memcmp(back, t, 1000));
        free(back);
    }
    free(a);
    free(b);
    free(c);
    free(t);
    bpe_free(m);
    bpe_free(j);
    bpe_free(v);
}

CT_TEST(bpe_refuses_files_that_are_not_byte_level_bpe_naming_the_line) {
    const char *dir = ct_test_tmpdir();
    ct_error err = new_err();
    bpe_model *m = NULL;
    char p[600];
    snprintf(p, sizeof p, "%s/bad.tiktoken", dir);
    FILE *f = fopen(p, "w");
    if (f) fputs("YQ== 0\nYg== 1\nnot base64! 2\n", f), fclose(f);
    CT_CHECK(bpe_load(p, &m, &err) == CT_ERR_INVALID && !m);
    CT_CHECK_STR_CONTAINS(err.message, "bad.tiktoken:3:");
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    f = fopen(p, "w");
    if (f) fputs("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", f), fclose(f);
    err = new_err();
    CT_CHECK(bpe_load(p, &m, &err) == CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "model.type is Unigram, not BPE");
    snprintf(p, sizeof p, "%s/vocab.json", dir);
    f = fopen(p, "w");
    if (f) fputs("{\"a\": 0}", f), fclose(f);
    err = new_err();
    CT_CHECK(bpe_load(p, &m, &err) != CT_OK); /* no merges.txt beside it */
    CT_CHECK_STR_CONTAINS(err.message, "merges.txt");
}
