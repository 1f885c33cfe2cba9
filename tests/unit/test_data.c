/* test_data.c — token shards, the loader's batch semantics, `ctrain prepare` and the
 * sentencepiece shim, each against numbers the test computes itself (token = position data,
 * the text file's own bytes, the entropy formula in double).
 * Not for: the training loop's use of batches (the lead's equivalence tests).
 */
#include "ct_test.h"
#include "shards_read.h"

#include "data/data.h"
#include "cli/commands.h"
#include "data/prepare.h"
#include "io/outfile.h"
#include "data/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define GPL3 "/usr/share/common-licenses/GPL-3" /* present on every Debian machine */

static ct_error new_err(void) {
    ct_error e = {.struct_size = sizeof e};
    return e;
}

/* A shard whose token i is (i * mul + add) % mod: windows are identifiable by their tokens. */
static void write_pattern_shard(const char *path, int64_t n, int64_t mul, int64_t add,
                                int64_t mod) {
    uint16_t *t = malloc((size_t)n * sizeof *t);
    for (int64_t i = 0; i < n; i++) t[i] = (uint16_t)((i * mul + add) % mod);
    ct_error err = new_err();
    CT_CHECK_MSG(shard_write(path, t, n, &err) == CT_OK, "shard_write: %s", err.message);
    free(t);
}

/* The same shard written the way another process would (plain stdio, temporary + rename): for
 * tests that change a shard under a loader of this process, which ctrain's own writer refuses
 * (it never writes over a file its process reads). */
static void write_pattern_shard_elsewhere(const char *path, int64_t n, int64_t mul, int64_t add,
                                          int64_t mod) {
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.other", path);
    FILE *f = fopen(tmp, "wb");
    CT_CHECK(f != NULL);
    if (!f) return;
    int32_t header[HOST_SHARD_HEADER_INTS] = {HOST_SHARD_MAGIC, HOST_SHARD_VERSION, (int32_t)n};
    fwrite(header, sizeof header, 1, f);
    for (int64_t i = 0; i < n; i++) {
        uint16_t v = (uint16_t)((i * mul + add) % mod);
        fwrite(&v, 2, 1, f);
    }
    CT_CHECK_INT(fclose(f), 0);
    CT_CHECK_INT(rename(tmp, path), 0);
}

static char *read_whole(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

static void write_text(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CT_CHECK(f != NULL);
    if (!f) return;
    CT_CHECK_INT(fwrite(data, 1, len, f), len);
    fclose(f);
}

int32_t *read_split(const char *dir, const char *split, int64_t *n) {
    int32_t *all = NULL;
    *n = 0;
    for (int i = 0;; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s_%06d.bin", dir, split, i);
        if (access(path, F_OK) != 0) break;
        host_token_shard s;
        ct_error err = new_err();
        if (shard_open(path, &s, &err) != CT_OK) {
            CT_CHECK_MSG(0, "shard_open: %s", err.message);
            break;
        }
        all = realloc(all, (size_t)(*n + s.n + 1) * sizeof *all);
        uint32_t *tok = malloc((size_t)s.n * sizeof *tok + 1);
        CT_CHECK_MSG(shard_read(&s, 0, s.n, tok, &err) == CT_OK, "shard_read: %s", err.message);
        for (int64_t j = 0; j < s.n; j++) all[*n + j] = tok[j];
        free(tok);
        *n += s.n;
        shard_close(&s);
    }
    return all;
}

/* ---- shards ------------------------------------------------------------------------------ */

CT_TEST(shard_write_then_open_returns_the_same_tokens_in_llmc_layout) {
    char path[512];
    snprintf(path, sizeof path, "%s/a.bin", ct_test_tmpdir());
    write_pattern_shard(path, 1001, 7919, 3, 65536);
    size_t len;
    char *raw = read_whole(path, &len);
    CT_CHECK_INT(len, 1024 + 2 * 1001);
    const int32_t *h = (const int32_t *)raw;
    CT_CHECK_INT(h[0], 20240520);
    CT_CHECK_INT(h[1], 1);
    CT_CHECK_INT(h[2], 1001);
    for (int i = 3; i < 256; i++) CT_CHECK_INT(h[i], 0);
    free(raw);

    host_token_shard s;
    ct_error err = new_err();
    CT_CHECK_MSG(shard_open(path, &s, &err) == CT_OK, "%s", err.message);
    CT_CHECK_INT(s.n, 1001);
    int bad = 0;
    uint32_t tok[1001];
    CT_CHECK_MSG(shard_read(&s, 0, s.n, tok, &err) == CT_OK, "%s", err.message);
    for (int64_t i = 0; i < s.n; i++) bad += tok[i] != (uint16_t)((i * 7919 + 3) % 65536);
    CT_CHECK_INT(bad, 0);
    int64_t at;
    int32_t max;
    CT_CHECK_MSG(shard_max_token(&s, &max, &at, &err) == CT_OK, "%s", err.message);
    int32_t want = 0;
    int64_t want_at = 0;
    for (int64_t i = 0; i < 1001; i++)
        if ((i * 7919 + 3) % 65536 > want) want = (int32_t)((i * 7919 + 3) % 65536), want_at = i;
    CT_CHECK_INT(max, want);
    CT_CHECK_INT(at, want_at);
    shard_close(&s);
    /* no temporary file left behind */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s.tmp.* >/dev/null 2>&1", path);
    CT_CHECK_MSG(system(cmd) != 0, "a temporary file of shard_write was left beside %s", path);
}

/* Rewrite bytes of a good shard and expect shard_open to refuse it with `needle`. */
static void expect_refused(const char *dir, const char *name, long offset, const void *bytes,
                           size_t n_bytes, long truncate_to, const char *needle) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_pattern_shard(path, 100, 1, 0, 256);
    if (bytes) {
        FILE *f = fopen(path, "r+b");
        fseek(f, offset, SEEK_SET);
        fwrite(bytes, 1, n_bytes, f);
        fclose(f);
    }
    if (truncate_to >= 0) CT_CHECK(truncate(path, truncate_to) == 0);
    host_token_shard s;
    ct_error err = new_err();
    int32_t rc = shard_open(path, &s, &err);
    CT_CHECK_MSG(rc == CT_ERR_INVALID, "%s: expected CT_ERR_INVALID, got %d", name, rc);
    CT_CHECK_STR_CONTAINS(err.message, path);
    CT_CHECK_STR_CONTAINS(err.message, needle);
    if (rc == CT_OK) shard_close(&s);
}

CT_TEST(shard_open_refuses_bad_magic_version_and_length_naming_the_file) {
    const char *dir = ct_test_tmpdir();
    int32_t v;
    v = 12345;
    expect_refused(dir, "magic.bin", 0, &v, 4, -1, "bad magic 12345");
    v = 2; /* a version-2 header over 100 2-byte tokens */
    expect_refused(dir, "v2.bin", 4, &v, 4, -1, "the header's version does not match");
    v = 7;
    expect_refused(dir, "v7.bin", 4, &v, 4, -1, "shard version 7");
    expect_refused(dir, "cut.bin", 0, NULL, 0, 1024 + 2 * 100 - 2, "truncated");
    expect_refused(dir, "cut2.bin", 0, NULL, 0, 1024 + 2 * 100 - 2, "header says 100 tokens");
    expect_refused(dir, "long.bin", 0, NULL, 0, 1024 + 2 * 100 + 2, "longer than its header");
    expect_refused(dir, "tiny.bin", 0, NULL, 0, 10, "shorter than the 1024-byte header");
    v = -5;
    expect_refused(dir, "neg.bin", 8, &v, 4, -1, "header says -5 tokens");

    host_token_shard s;
    ct_error err = new_err();
    CT_CHECK_INT(shard_open("/nonexistent/x.bin", &s, &err), CT_ERR_IO);
    CT_CHECK_STR_CONTAINS(err.message, "/nonexistent/x.bin");
}

/* ---- the loader -------------------------------------------------------------------------- */

/* Token i of the shard is i (mod 65536): a window's first input tells where it starts. */
static host_loader *open_loader(const char *path, int64_t B, int64_t T, int32_t rank, int32_t world,
                              uint64_t seed) {
    ct_error err = new_err();
    host_loader *l = loader_open(path, NULL, 65536, B, T, rank, world, seed, &err);
    CT_CHECK_MSG(l != NULL, "loader_open: %s", err.message);
    return l;
}

CT_TEST(loader_windows_are_T_plus_1_tokens_each_seen_once_per_epoch) {
    char path[512];
    snprintf(path, sizeof path, "%s/pos.bin", ct_test_tmpdir());
    const int64_t n = 1001, T = 10, B = 4; /* (n-1)/T = 100 windows, 25 batches per epoch */
    write_pattern_shard(path, n, 1, 0, 65536);
    host_loader *l = open_loader(path, B, T, 0, 1, 42);
    if (!l) return;
    CT_CHECK_INT(loader_windows(l), 100);
    CT_CHECK_INT(loader_batches_per_epoch(l), 25);
    CT_CHECK_INT(loader_tokens(l), n);
    int32_t in[40], tg[40];
    int seen[100] = {0};
    ct_error err = new_err();
    for (int step = 0; step < 25; step++) {
        CT_CHECK(loader_next(l, in, tg, &err) == CT_OK);
        for (int b = 0; b < B; b++) {
            int32_t start = in[b * T];
            CT_CHECK_INT(start % T, 0);
            if (start % T == 0 && start / T < 100) seen[start / T]++;
            for (int t = 0; t < T; t++) {
                CT_CHECK_INT(in[b * T + t], start + t);
                CT_CHECK_INT(tg[b * T + t], start + t + 1);
            }
        }
    }
    int once = 0;
    for (int w = 0; w < 100; w++) once += seen[w] == 1;
    CT_CHECK_INT(once, 100);
    host_loader_state st = loader_get_state(l);
    CT_CHECK_INT(st.epoch, 0);
    CT_CHECK_INT(st.position, 100);
    /* the next batch opens epoch 1 in another order */
    CT_CHECK(loader_next(l, in, tg, &err) == CT_OK);
    st = loader_get_state(l);
    CT_CHECK_INT(st.epoch, 1);
    CT_CHECK_INT(st.position, B);
    loader_close(l);
}

CT_TEST(loader_one_rank_of_batch_BN_equals_N_ranks_of_batch_B_concatenated) {
    char path[512];
    snprintf(path, sizeof path, "%s/pos.bin", ct_test_tmpdir());
    const int64_t T = 8, B = 3;
    const int32_t N = 4;
    write_pattern_shard(path, 8 * 62 + 1, 1, 0, 65536); /* 62 windows: 5 global batches of 12 */
    host_loader *one = open_loader(path, B * N, T, 0, 1, 7);
    host_loader *ranks[4];
    for (int r = 0; r < N; r++) ranks[r] = open_loader(path, B, T, r, N, 7);
    int32_t in1[96], tg1[96], in[24], tg[24];
    ct_error err = new_err();
    int mismatches = 0;
    for (int step = 0; step < 12; step++) { /* crosses two epoch boundaries */
        CT_CHECK(loader_next(one, in1, tg1, &err) == CT_OK);
        for (int r = 0; r < N; r++) {
            CT_CHECK(loader_next(ranks[r], in, tg, &err) == CT_OK);
            mismatches += memcmp(in, in1 + r * B * T, sizeof in) != 0;
            mismatches += memcmp(tg, tg1 + r * B * T, sizeof tg) != 0;
        }
    }
    CT_CHECK_INT(mismatches, 0);
    CT_CHECK_INT(loader_get_state(one).epoch, 2);
    CT_CHECK_INT(loader_get_state(ranks[3]).epoch, 2);
    CT_CHECK_INT(loader_get_state(ranks[3]).position, loader_get_state(one).position);
    loader_close(one);
    for (int r = 0; r < N; r++) loader_close(ranks[r]);
}

/* The first inputs of `steps` batches, as a fingerprint of the order. */
static void order_of(const char *path, uint64_t seed, int steps, int32_t *firsts) {
    host_loader *l = open_loader(path, 2, 4, 0, 1, seed);
    if (!l) return;
    int32_t in[8], tg[8];
    ct_error err = new_err();
    for (int s = 0; s < steps; s++) {
        CT_CHECK(loader_next(l, in, tg, &err) == CT_OK);
        firsts[2 * s] = in[0];
        firsts[2 * s + 1] = in[4];
    }
    loader_close(l);
}

CT_TEST(loader_order_is_a_function_of_the_seed) {
    char path[512];
    snprintf(path, sizeof path, "%s/pos.bin", ct_test_tmpdir());
    write_pattern_shard(path, 4 * 200 + 1, 1, 0, 65536);
    int32_t a[40], b[40], c[40];
    order_of(path, 1, 20, a);
    order_of(path, 1, 20, b);
    order_of(path, 2, 20, c);
    CT_CHECK(memcmp(a, b, sizeof a) == 0);
    CT_CHECK_MSG(memcmp(a, c, sizeof a) != 0, "seeds 1 and 2 gave the same order");
    /* shuffled: the windows are not read in file order */
    int ascending = 1;
    for (int i = 1; i < 40; i++) ascending &= a[i] > a[i - 1];
    CT_CHECK(!ascending);
}

CT_TEST(loader_state_restored_in_a_new_loader_continues_identically) {
    char path[512];
    snprintf(path, sizeof path, "%s/pos.bin", ct_test_tmpdir());
    write_pattern_shard(path, 5 * 37 + 1, 1, 0, 65536); /* 37 windows, 7 batches of 5 */
    host_loader *a = open_loader(path, 5, 5, 0, 1, 99);
    int32_t in[25], tg[25], in2[25], tg2[25];
    ct_error err = new_err();
    for (int s = 0; s < 11; s++) CT_CHECK(loader_next(a, in, tg, &err) == CT_OK);
    host_loader_state st = loader_get_state(a);
    CT_CHECK_INT(st.epoch, 1);
    host_loader *b = open_loader(path, 5, 5, 0, 1, 99);
    CT_CHECK(loader_set_state(b, st, &err) == CT_OK);
    int diffs = 0;
    for (int s = 0; s < 10; s++) {
        CT_CHECK(loader_next(a, in, tg, &err) == CT_OK);
        CT_CHECK(loader_next(b, in2, tg2, &err) == CT_OK);
        diffs += memcmp(in, in2, sizeof in) != 0 || memcmp(tg, tg2, sizeof tg) != 0;
    }
    CT_CHECK_INT(diffs, 0);
    /* reset replays epoch 0 from the start: same as a fresh loader */
    host_loader *fresh = open_loader(path, 5, 5, 0, 1, 99);
    loader_reset(b);
    CT_CHECK(loader_next(b, in, tg, &err) == CT_OK);
    CT_CHECK(loader_next(fresh, in2, tg2, &err) == CT_OK);
    CT_CHECK(memcmp(in, in2, sizeof in) == 0);
    /* a position beyond this data is refused */
    host_loader_state bad = {.epoch = 0, .position = 1000};
    CT_CHECK_INT(loader_set_state(b, bad, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "position 1000");
    loader_close(a);
    loader_close(b);
    loader_close(fresh);
}

/* Write DIR/meta.ini with one [shard NAME] record per call (append 0: a new file). */
static void write_shard_meta(const char *dir, const char *name, int64_t tokens, int64_t bytes,
                             int32_t max_token, int append) {
    char p[600];
    snprintf(p, sizeof p, "%s/meta.ini", dir);
    FILE *f = fopen(p, append ? "a" : "w");
    CT_CHECK(f != NULL);
    if (!f) return;
    if (!append) fprintf(f, "[data]\ntokenizer = bytes\nvocab_size = 256\n");
    fprintf(f, "[shard %s]\ntokens = %lld\nbytes = %lld\nmax_token = %d\nfnv64 = 0\n", name,
            (long long)tokens, (long long)bytes, max_token);
    fclose(f);
}

static void unlink_meta(const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/meta.ini", dir);
    unlink(p);
}

/* Deal windows until one fails; the error code (CT_OK when a whole epoch passed). */
static int32_t deal_epoch(host_loader *l, int64_t B, int64_t T, ct_error *err) {
    int32_t *in = malloc((size_t)(B * T) * sizeof *in), *tg = malloc((size_t)(B * T) * sizeof *tg);
    int32_t rc = CT_OK;
    for (int64_t i = 0; i < loader_batches_per_epoch(l) && rc == CT_OK; i++)
        rc = loader_next(l, in, tg, err);
    free(in);
    free(tg);
    return rc;
}

CT_TEST(loader_refuses_a_token_at_or_beyond_vocab_size_naming_file_and_token) {
    const char *dir = ct_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/big.bin", dir);
    uint16_t tok[1000];
    for (int i = 0; i < 1000; i++) tok[i] = (uint16_t)(i % 256);
    tok[301] = 300; /* one bad token in the middle: windows of T=4 are [4w, 4w+4] */
    ct_error err = new_err();
    CT_CHECK_MSG(shard_write(path, tok, 1000, &err) == CT_OK, "%s", err.message);
    /* no meta.ini: open reads no token; the window holding position 301 is refused */
    err = new_err();
    host_loader *l = loader_open(path, NULL, 256, 2, 4, 0, 1, 0, &err);
    CT_CHECK_MSG(l != NULL, "%s", err.message);
    if (!l) return;
    CT_CHECK_INT(loader_recorded_max_token(l), -1);
    CT_CHECK_INT(deal_epoch(l, 2, 4, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, path);
    CT_CHECK_STR_CONTAINS(err.message, "token 300 at position 301 is >= the model's vocab_size "
                                       "256");
    loader_close(l);
    /* meta.ini records the max: refused at open, naming the file, meta.ini and the max */
    write_shard_meta(dir, "big.bin", 1000, 1024 + 2000, 300, 0);
    err = new_err();
    l = loader_open(path, NULL, 256, 2, 4, 0, 1, 0, &err);
    CT_CHECK(l == NULL);
    CT_CHECK_INT(err.code, CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, path);
    CT_CHECK_STR_CONTAINS(err.message, "meta.ini) records max_token 300, >= the model's "
                                       "vocab_size 256");
    loader_close(l);
    err = new_err();
    l = loader_open(path, NULL, 300, 2, 4, 0, 1, 0, &err); /* 300 is still one too many */
    CT_CHECK(l == NULL);
    err = new_err();
    l = loader_open(path, NULL, 301, 2, 4, 0, 1, 0, &err);
    CT_CHECK_MSG(l != NULL, "vocab 301 holds token 300: %s", err.message);
    if (l) CT_CHECK_INT(loader_recorded_max_token(l), 300);
    loader_close(l);
    /* a record whose size is not the file's is not trusted: open passes, the window refuses */
    write_shard_meta(dir, "big.bin", 999, 1024 + 1998, 300, 0);
    err = new_err();
    l = loader_open(path, NULL, 256, 2, 4, 0, 1, 0, &err);
    CT_CHECK_MSG(l != NULL, "%s", err.message);
    if (l) CT_CHECK_INT(loader_recorded_max_token(l), -1);
    loader_close(l);
    /* a record that lies (max 255): open passes, the window holding position 301 refuses */
    write_shard_meta(dir, "big.bin", 1000, 1024 + 2000, 255, 0);
    err = new_err();
    l = loader_open(path, NULL, 256, 2, 4, 0, 1, 0, &err);
    CT_CHECK_MSG(l != NULL, "%s", err.message);
    if (l) {
        CT_CHECK_INT(deal_epoch(l, 2, 4, &err), CT_ERR_INVALID);
        CT_CHECK_STR_CONTAINS(err.message, "token 300 at position 301 is >=");
    }
    loader_close(l);
    unlink_meta(dir);
    /* too little data for one global batch */
    err = new_err();
    l = loader_open(path, NULL, 301, 100, 10, 0, 2, 0, &err); /* 99 windows < 200 */
    CT_CHECK(l == NULL);
    CT_CHECK_STR_CONTAINS(err.message, "fewer than one global batch");
}

/* Version 2 (uint32 tokens): the layout llm.c's LLaMA-3 shards have, read back token for token
 * (values far above 65,535 included), dealt by the loader as int32 windows, with a token >= V
 * refused naming the file and its position; a truncated one and one whose header's width does
 * not match its bytes or its meta.ini are refused naming what is wrong. */
CT_TEST(shard_u32_version_2_round_trips_and_the_loader_deals_and_checks_it) {
    const char *dir = ct_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/train_000000.bin", dir);
    enum { N = 4001, V = 128256 };
    uint32_t *tok = malloc(N * sizeof *tok);
    for (int64_t i = 0; i < N; i++) tok[i] = (uint32_t)((i * 40503 + 7) % V);
    ct_error err = new_err();
    CT_CHECK_MSG(shard_write_u32(path, tok, N, &err) == CT_OK, "%s", err.message);
    size_t len;
    char *raw = read_whole(path, &len);
    CT_CHECK_INT(len, 1024 + 4 * N);
    if (raw) {
        const int32_t *h = (const int32_t *)raw;
        CT_CHECK_INT(h[0], 20240520);
        CT_CHECK_INT(h[1], 2);
        CT_CHECK_INT(h[2], N);
        uint32_t t5;
        memcpy(&t5, raw + 1024 + 4 * 5, 4);
        CT_CHECK_INT(t5, tok[5]);
    }
    free(raw);
    host_token_shard s;
    CT_CHECK_MSG(shard_open(path, &s, &err) == CT_OK, "%s", err.message);
    CT_CHECK_INT(s.width, 4);
    uint32_t *back = malloc(N * sizeof *back);
    CT_CHECK_MSG(shard_read(&s, 0, N, back, &err) == CT_OK, "%s", err.message);
    int bad = 0, above = 0;
    for (int64_t i = 0; i < N; i++) bad += back[i] != tok[i], above += tok[i] > 65535;
    CT_CHECK_INT(bad, 0);
    CT_CHECK(above > N / 3); /* the test means something: many tokens need 32 bits */
    int32_t max;
    int64_t at;
    CT_CHECK_MSG(shard_max_token(&s, &max, &at, &err) == CT_OK, "%s", err.message);
    uint32_t want = 0;
    for (int64_t i = 0; i < N; i++) want = tok[i] > want ? tok[i] : want;
    CT_CHECK_INT(max, want);
    shard_close(&s);
    /* the loader: every window's inputs and targets are the file's tokens */
    host_loader *l = loader_open(path, NULL, V, 2, 8, 0, 1, 3, &err);
    CT_CHECK_MSG(l != NULL, "%s", err.message);
    if (l) {
        int32_t in[16], tg[16];
        int wrong = 0;
        for (int64_t b = 0; b < loader_batches_per_epoch(l); b++) {
            CT_CHECK_MSG(loader_next(l, in, tg, &err) == CT_OK, "%s", err.message);
            for (int r = 0; r < 2; r++) {
                int64_t start = -1; /* where in the file this window starts */
                for (int64_t w = 0; w + 8 < N && start < 0; w += 8)
                    if ((int32_t)tok[w] == in[r * 8] && (int32_t)tok[w + 1] == in[r * 8 + 1]) start = w;
                for (int t = 0; start >= 0 && t < 8; t++)
                    wrong += in[r * 8 + t] != (int32_t)tok[start + t] ||
                             tg[r * 8 + t] != (int32_t)tok[start + t + 1];
                wrong += start < 0;
            }
        }
        CT_CHECK_INT(wrong, 0);
    }
    loader_close(l);
    /* a token >= V in the middle: the window holding it names file and position (a new file:
     * the one writer never writes over a file its process has read) */
    tok[2345] = V + 5;
    snprintf(path, sizeof path, "%s/train_000001.bin", dir);
    CT_CHECK_MSG(shard_write_u32(path, tok, N, &err) == CT_OK, "%s", err.message);
    l = loader_open(path, NULL, V, 2, 8, 0, 1, 3, &err);
    CT_CHECK_MSG(l != NULL, "%s", err.message);
    if (l) {
        CT_CHECK_INT(deal_epoch(l, 2, 8, &err), CT_ERR_INVALID);
        CT_CHECK_STR_CONTAINS(err.message, path);
        CT_CHECK_STR_CONTAINS(err.message, "token 128261 at position 2345 is >= the model's "
                                           "vocab_size 128256");
    }
    loader_close(l);
    /* meta.ini saying 2-byte tokens for a version-2 shard */
    char meta[600];
    snprintf(meta, sizeof meta, "%s/meta.ini", dir);
    FILE *f = fopen(meta, "w");
    if (f) {
        fprintf(f, "[data]\ntokenizer = bpe\nvocab_size = 128256\ntoken_bytes = 2\n");
        fclose(f);
    }
    err = new_err();
    l = loader_open(path, NULL, V, 2, 8, 0, 1, 3, &err);
    CT_CHECK(l == NULL);
    CT_CHECK_STR_CONTAINS(err.message, path);
    CT_CHECK_STR_CONTAINS(err.message, "says 4-byte tokens but its meta.ini");
    CT_CHECK_STR_CONTAINS(err.message, "token_bytes = 2");
    loader_close(l);
    unlink(meta);
    /* truncated by 2 bytes (half a token) */
    CT_CHECK(truncate(path, 1024 + 4 * N - 2) == 0);
    err = new_err();
    CT_CHECK_INT(shard_open(path, &s, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, path);
    CT_CHECK_STR_CONTAINS(err.message, "the file is truncated");
    /* a version-2 header over 2-byte tokens: the size is the other width's */
    snprintf(path, sizeof path, "%s/train_000002.bin", dir);
    uint16_t t16[100];
    for (int i = 0; i < 100; i++) t16[i] = (uint16_t)i;
    CT_CHECK_MSG(shard_write(path, t16, 100, &err) == CT_OK, "%s", err.message);
    f = fopen(path, "r+b");
    int32_t two = 2;
    if (f) {
        fseek(f, 4, SEEK_SET);
        fwrite(&two, 4, 1, f);
        fclose(f);
    }
    err = new_err();
    CT_CHECK_INT(shard_open(path, &s, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "version 2: 4-byte tokens");
    CT_CHECK_STR_CONTAINS(err.message, "the header's version does not match the tokens written");
    free(tok);
    free(back);
}

/* A shard truncated (or rewritten) under an open loader: the next window is an error naming
 * the file and the token position, never a SIGBUS (the loader used to map the file). */
CT_TEST(loader_errors_with_file_and_position_when_a_shard_changes_under_it) {
    char path[512];
    snprintf(path, sizeof path, "%s/cut_000000.bin", ct_test_tmpdir());
    /* 100000 tokens < 200: 24999 windows of T=4 over 50 pages (a mapping faults past the end) */
    write_pattern_shard(path, 100000, 1, 0, 200);
    ct_error err = new_err();
    host_loader *l = loader_open(path, NULL, 256, 2, 4, 0, 1, 3, &err);
    CT_CHECK_MSG(l != NULL, "%s", err.message);
    if (!l) return;
    int32_t in[8], tg[8];
    CT_CHECK_MSG(loader_next(l, in, tg, &err) == CT_OK, "%s", err.message);
    /* a token in place rewritten beyond the vocabulary: refused when its window is dealt */
    FILE *f = fopen(path, "r+b");
    CT_CHECK(f != NULL);
    if (!f) return;
    uint16_t *big = malloc(100000 * sizeof *big);
    for (int i = 0; i < 100000; i++) big[i] = 300;
    fseek(f, 1024, SEEK_SET);
    CT_CHECK_INT(fwrite(big, 2, 100000, f), 100000);
    free(big);
    fclose(f);
    err = new_err();
    CT_CHECK_INT(loader_next(l, in, tg, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, path);
    CT_CHECK_STR_CONTAINS(err.message, "token 300 at position ");
    CT_CHECK_STR_CONTAINS(err.message, "tokens are checked as each sequence is read");
    /* truncated to 1 token: every window is beyond the end */
    CT_CHECK_INT(truncate(path, 1024 + 2), 0);
    err = new_err();
    CT_CHECK_INT(loader_next(l, in, tg, &err), CT_ERR_IO);
    CT_CHECK_STR_CONTAINS(err.message, path);
    CT_CHECK_STR_CONTAINS(err.message, ": token position ");
    CT_CHECK_STR_CONTAINS(err.message, "the file has 1026 bytes, 201024 when it was opened");
    CT_CHECK_STR_CONTAINS(err.message, "---> the file changed during the run");
    loader_close(l);
    /* replaced by another file of the same size (rename): noticed when the shard is reopened */
    write_pattern_shard_elsewhere(path, 1000, 1, 0, 200);
    l = loader_open(path, NULL, 256, 2, 4, 0, 1, 3, &err);
    CT_CHECK_MSG(l != NULL, "%s", err.message);
    if (!l) return;
    host_token_shard s;
    CT_CHECK_MSG(shard_open(path, &s, &err) == CT_OK, "%s", err.message);
    write_pattern_shard_elsewhere(path, 1000, 1, 0, 200);
    shard_release(&s);
    uint32_t t[4];
    err = new_err();
    CT_CHECK_INT(shard_read(&s, 8, 4, t, &err), CT_ERR_IO);
    CT_CHECK_STR_CONTAINS(err.message, "token position 8: the file was replaced");
    shard_close(&s);
    loader_close(l);
}

/* mkfifo, a folder and a symbolic link to a device, each named like a shard: refused at once
 * (an alarm turns a hang into a failure) with a message naming the path and what it is. */
CT_TEST(shard_open_refuses_a_fifo_folder_or_device_without_blocking) {
    const char *dir = ct_test_tmpdir();
    char fifo[512], folder[512], dev[512];
    snprintf(fifo, sizeof fifo, "%s/train_000000.bin", dir);
    snprintf(folder, sizeof folder, "%s/train_000001.bin", dir);
    snprintf(dev, sizeof dev, "%s/train_000002.bin", dir);
    CT_CHECK_INT(mkfifo(fifo, 0600), 0);
    CT_CHECK_INT(mkdir(folder, 0700), 0);
    CT_CHECK_INT(symlink("/dev/zero", dev), 0);
    struct { const char *path, *what; } cases[] = {
        {fifo, "is a FIFO (named pipe), not a regular file"},
        {folder, "is a directory, not a regular file"},
        {dev, "is a character device, not a regular file"},
    };
    alarm(20); /* the FIFO used to block in open() forever */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        host_token_shard s;
        ct_error err = new_err();
        CT_CHECK_INT(shard_open(cases[i].path, &s, &err), CT_ERR_INVALID);
        CT_CHECK_STR_CONTAINS(err.message, cases[i].path);
        CT_CHECK_STR_CONTAINS(err.message, cases[i].what);
    }
    /* through the loader: the folder's first train_*.bin is the FIFO */
    ct_error err = new_err();
    CT_CHECK(loader_open(dir, "train", 0, 1, 4, 0, 1, 0, &err) == NULL);
    CT_CHECK_STR_CONTAINS(err.message, "token shard ");
    CT_CHECK_STR_CONTAINS(err.message, "is a FIFO (named pipe)");
    /* prepare's text input */
    prepare_options o = prepare_default_options();
    const char *texts[] = {fifo};
    char out[512];
    snprintf(out, sizeof out, "%s/out", dir);
    o.texts = texts, o.n_texts = 1, o.out_dir = out, o.quiet = 1;
    prepare_summary sum;
    err = new_err();
    CT_CHECK_INT(prepare_run(&o, &sum, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "text file ");
    CT_CHECK_STR_CONTAINS(err.message, "is a FIFO (named pipe), not a regular file");
    /* a FIFO where prepare used to put meta.ini's temporary file: not opened at all */
    char text[512], meta_tmp[600];
    snprintf(text, sizeof text, "%s/t.txt", dir);
    write_text(text, "hello hello hello hello\n", 24);
    CT_CHECK_INT(mkdir(out, 0700), 0);
    snprintf(meta_tmp, sizeof meta_tmp, "%s/meta.ini.tmp", out);
    CT_CHECK_INT(mkfifo(meta_tmp, 0600), 0);
    texts[0] = text;
    o.force = 1; /* the folder holds the FIFO */
    err = new_err();
    CT_CHECK_MSG(prepare_run(&o, &sum, &err) == CT_OK, "%s", err.message);
    alarm(0);
}

/* Every output of prepare gets 0666 & ~umask: shards and meta.ini alike (shards were 0600). */
CT_TEST(prepare_outputs_all_get_the_mode_of_the_users_umask) {
    const mode_t masks[] = {022, 077, 002};
    char text[512];
    snprintf(text, sizeof text, "%s/t.txt", ct_test_tmpdir());
    write_text(text, "some text for shards\n", 21);
    for (size_t i = 0; i < sizeof masks / sizeof *masks; i++) {
        char out[512];
        snprintf(out, sizeof out, "%s/out", ct_test_tmpdir());
        prepare_options o = prepare_default_options();
        const char *texts[] = {text};
        o.texts = texts, o.n_texts = 1, o.out_dir = out, o.quiet = 1, o.val_fraction = 0.2;
        prepare_summary sum;
        ct_error err = new_err();
        mode_t old = umask(masks[i]);
        int32_t rc = prepare_run(&o, &sum, &err);
        umask(old);
        CT_CHECK_MSG(rc == CT_OK, "%s", err.message);
        const char *names[] = {"train_000000.bin", "val_000000.bin", "meta.ini"};
        for (size_t k = 0; k < 3; k++) {
            char p[600];
            snprintf(p, sizeof p, "%s/%s", out, names[k]);
            struct stat st;
            CT_CHECK_INT(stat(p, &st), 0);
            CT_CHECK_MSG((st.st_mode & 0777) == (0666 & ~masks[i]),
                         "%s under umask %03o: expected mode %03o, got %03o", names[k],
                         (unsigned)masks[i], (unsigned)(0666 & ~masks[i]),
                         (unsigned)(st.st_mode & 0777));
        }
    }
}

CT_TEST(loader_reads_a_folder_split_or_a_glob_across_shards) {
    const char *dir = ct_test_tmpdir();
    char p[512];
    snprintf(p, sizeof p, "%s/train_000000.bin", dir);
    write_pattern_shard(p, 41, 1, 0, 65536); /* 10 windows of T=4 */
    snprintf(p, sizeof p, "%s/train_000001.bin", dir);
    write_pattern_shard(p, 23, 1, 1000, 65536); /* 5 windows, tokens 1000.. */
    snprintf(p, sizeof p, "%s/val_000000.bin", dir);
    write_pattern_shard(p, 9, 1, 5000, 65536); /* 2 windows */
    ct_error err = new_err();
    host_loader *l = loader_open(dir, "train", 0, 3, 4, 0, 1, 5, &err);
    CT_CHECK_MSG(l != NULL, "%s", err.message);
    if (!l) return;
    CT_CHECK_INT(loader_shard_count(l), 2);
    CT_CHECK_INT(loader_windows(l), 15);
    /* one epoch: every window of both shards exactly once, never crossing a shard boundary */
    int32_t in[12], tg[12];
    int from_second = 0, ok = 1;
    for (int s = 0; s < 5; s++) {
        CT_CHECK(loader_next(l, in, tg, &err) == CT_OK);
        for (int b = 0; b < 3; b++) {
            int32_t s0 = in[b * 4];
            int second = s0 >= 1000;
            from_second += second;
            ok &= (s0 - (second ? 1000 : 0)) % 4 == 0 && tg[b * 4 + 3] == s0 + 4;
            ok &= second ? s0 + 4 <= 1022 : s0 + 4 <= 40;
        }
    }
    CT_CHECK(ok);
    CT_CHECK_INT(from_second, 5);
    loader_close(l);
    l = loader_open(dir, "val", 0, 1, 4, 0, 1, 5, &err);
    CT_CHECK_MSG(l && loader_windows(l) == 2, "val split: %s", err.message);
    loader_close(l);
    snprintf(p, sizeof p, "%s/train_*.bin", dir);
    l = loader_open(p, NULL, 0, 1, 4, 0, 1, 5, &err);
    CT_CHECK_MSG(l && loader_shard_count(l) == 2, "glob: %s", err.message);
    loader_close(l);
    snprintf(p, sizeof p, "%s/nothing_*.bin", dir);
    err = new_err();
    CT_CHECK(loader_open(p, NULL, 0, 1, 4, 0, 1, 5, &err) == NULL);
    CT_CHECK_STR_CONTAINS(err.message, "no token shard matches");
}

CT_TEST(unigram_entropy_matches_the_formula) {
    uint64_t c[4] = {1, 1, 2, 0};
    double want = -(2 * 0.25 * log(0.25) + 0.5 * log(0.5));
    CT_CHECK_CLOSE(unigram_entropy(c, 4), want, 1e-12, 0);
    uint64_t one[3] = {0, 5, 0};
    CT_CHECK_CLOSE(unigram_entropy(one, 3), 0.0, 0, 1e-15);
    uint64_t uni[256];
    for (int i = 0; i < 256; i++) uni[i] = 3;
    CT_CHECK_CLOSE(unigram_entropy(uni, 256), log(256.0), 1e-12, 0);
}

/* ---- prepare ----------------------------------------------------------------------------- */

CT_TEST(prepare_bytes_writes_shards_that_hold_the_file_bytes_and_their_entropy) {
    const char *dir = ct_test_tmpdir();
    char out[512];
    snprintf(out, sizeof out, "%s/data", dir);
    char *argv[] = {"prepare", "--text", GPL3, "--out", out, "--val-fraction", "0.1",
                    "--shard-tokens", "10000", "--quiet"};
    CT_CHECK_INT(cmd_prepare(10, argv), 0);
    size_t len;
    char *text = read_whole(GPL3, &len);
    if (!text) return;
    int64_t n_train, n_val;
    int32_t *train = read_split(out, "train", &n_train);
    int32_t *val = read_split(out, "val", &n_val);
    int64_t want_val = llround(0.1 * (double)len);
    CT_CHECK_INT(n_val, want_val);
    CT_CHECK_INT(n_train + n_val, len);
    int bad = 0;
    for (int64_t i = 0; i < n_train && i < (int64_t)len; i++)
        bad += train[i] != (uint8_t)text[i];
    for (int64_t i = 0; i < n_val && n_train + i < (int64_t)len; i++)
        bad += val[i] != (uint8_t)text[n_train + i];
    CT_CHECK_INT(bad, 0);
    /* 4 train shards of at most 10000 tokens */
    char p[600];
    snprintf(p, sizeof p, "%s/train_000003.bin", out);
    CT_CHECK(access(p, F_OK) == 0);
    snprintf(p, sizeof p, "%s/train_000004.bin", out);
    CT_CHECK(access(p, F_OK) != 0);
    /* the entropy in meta.ini is that of the train bytes */
    double counts[256] = {0}, h = 0;
    for (int64_t i = 0; i < n_train; i++) counts[(uint8_t)text[i]] += 1;
    for (int i = 0; i < 256; i++)
        if (counts[i] > 0) h -= counts[i] / (double)n_train * log(counts[i] / (double)n_train);
    snprintf(p, sizeof p, "%s/meta.ini", out);
    size_t mlen;
    char *meta = read_whole(p, &mlen);
    CT_CHECK_STR_CONTAINS(meta, "tokenizer = bytes");
    CT_CHECK_STR_CONTAINS(meta, "vocab_size = 256");
    const char *e = meta ? strstr(meta, "unigram_entropy_nats = ") : NULL;
    CT_CHECK(e != NULL);
    if (e) CT_CHECK_CLOSE(atof(e + strlen("unigram_entropy_nats = ")), h, 1e-5, 0);
    /* English text: between 2.5 and 3.5 nats per byte */
    CT_CHECK(h > 2.5 && h < 3.5);
    /* the loader takes the folder, vocab 256 */
    ct_error err = new_err();
    host_loader *l = loader_open(out, "val", 256, 4, 64, 0, 1, 0, &err);
    CT_CHECK_MSG(l != NULL, "%s", err.message);
    loader_close(l);
    free(meta);
    free(train);
    free(val);
    free(text);
}

static int32_t run_prepare(prepare_options *o, ct_error *err) {
    prepare_summary s;
    o->quiet = 1;
    *err = new_err();
    return prepare_run(o, &s, err);
}

CT_TEST(prepare_refuses_missing_or_empty_text_bad_vocab_and_unwritable_out) {
    const char *dir = ct_test_tmpdir();
    char out[512], empty[512], file_as_dir[600];
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(empty, sizeof empty, "%s/empty.txt", dir);
    write_text(empty, "", 0);
    ct_error err;
    prepare_options o = prepare_default_options();

    const char *missing[] = {"/nonexistent/words.txt"};
    o.texts = missing, o.n_texts = 1, o.out_dir = out;
    CT_CHECK_INT(run_prepare(&o, &err), CT_ERR_IO);
    CT_CHECK_STR_CONTAINS(err.message, "cannot read text file /nonexistent/words.txt");

    const char *empties[] = {empty};
    o.texts = empties;
    CT_CHECK_INT(run_prepare(&o, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "empty");

    const char *gpl[] = {GPL3};
    o.texts = gpl;
    o.tokenizer = "sentencepiece";
    o.vocab_size = 70000;
    CT_CHECK_INT(run_prepare(&o, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "--vocab-size 70000");
    o.vocab_size = 100;
    CT_CHECK_INT(run_prepare(&o, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "--vocab-size 100");

    o.tokenizer = "bytes";
    snprintf(file_as_dir, sizeof file_as_dir, "%s/sub", empty); /* a file cannot hold a folder */
    o.out_dir = file_as_dir;
    CT_CHECK_INT(run_prepare(&o, &err), CT_ERR_IO);
    CT_CHECK_STR_CONTAINS(err.message, "cannot create output folder");
    CT_CHECK_STR_CONTAINS(err.message, "Not a directory");

    o.out_dir = out;
    o.tokenizer = "wordpiece";
    CT_CHECK_INT(run_prepare(&o, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "wordpiece");

    /* the command line: unknown option and --vocab-size with bytes are usage errors */
    char *bad1[] = {"prepare", "--text", GPL3, "--out", out, "--vocab", "300"};
    CT_CHECK_INT(cmd_prepare(7, bad1), 2);
    char *bad2[] = {"prepare", "--text", GPL3, "--out", out, "--vocab-size", "300"};
    CT_CHECK_INT(cmd_prepare(7, bad2), 2);
    char *bad3[] = {"prepare", "/nonexistent/words.txt", "--out", out}; /* positional text */
    CT_CHECK_INT(cmd_prepare(4, bad3), 1);
    char *bad4[] = {"prepare", "--out", out};
    CT_CHECK_INT(cmd_prepare(3, bad4), 2);
    /* sentencepiece's own refusal comes back with a hint: 300 pieces cannot hold 256 bytes,
     * 3 specials and the ~70 characters of the license text */
    o.texts = gpl, o.out_dir = out, o.tokenizer = "sentencepiece", o.vocab_size = 300;
    CT_CHECK_INT(run_prepare(&o, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "adjust --vocab-size");
}

/* ---- sentencepiece ----------------------------------------------------------------------- */

/* A sentencepiece model trained on `files`, written to model_path (tokenizer_train hands the
 * model back; prepare writes it the same way). */
static int32_t train_model_file(const char *const *files, int32_t vocab, const char *model_path,
                                ct_error *err) {
    char *bytes = NULL;
    size_t len = 0;
    int32_t rc = tokenizer_train(files, 1, "bpe", vocab, 2, 0, &bytes, &len, err);
    if (rc == CT_OK) rc = outfile_write_whole(model_path, bytes, len, 0, err);
    free(bytes);
    return rc;
}

CT_TEST(sentencepiece_trained_on_small_text_round_trips_any_bytes) {
    const char *dir = ct_test_tmpdir();
    char model[512];
    snprintf(model, sizeof model, "%s/sp.model", dir);
    const char *files[] = {GPL3};
    ct_error err = new_err();
    int32_t rc = train_model_file(files, 512, model, &err);
    CT_CHECK_MSG(rc == CT_OK, "train: %s", err.message);
    host_tokenizer *tok = tokenizer_load(model, &err);
    CT_CHECK_MSG(tok != NULL, "load: %s", err.message);
    if (!tok) return;
    CT_CHECK_INT(tokenizer_vocab_size(tok), 512);
    size_t len;
    char *text = read_whole(GPL3, &len);
    const char extra[] = "  two  spaces, tab\there, caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac \xe2\x9c\x93"
                         "\n\n\x01 control\n";
    const char *inputs[2] = {text, extra};
    size_t lens[2] = {len, sizeof extra - 1};
    for (int k = 0; k < 2; k++) {
        int32_t *ids;
        int64_t n;
        CT_CHECK_MSG(tokenizer_encode(tok, inputs[k], lens[k], &ids, &n, &err) == CT_OK, "%s",
                     err.message);
        int out_of_range = 0;
        for (int64_t i = 0; i < n; i++) out_of_range += ids[i] < 0 || ids[i] >= 512;
        CT_CHECK_INT(out_of_range, 0);
        if (k == 0) /* it learned merges: well under one token per byte on its own text */
            CT_CHECK_MSG((double)n < 0.5 * (double)len, "%lld tokens for %zu bytes",
                         (long long)n, len);
        char *back;
        size_t back_len;
        CT_CHECK_MSG(tokenizer_decode(tok, ids, n, &back, &back_len, &err) == CT_OK, "%s",
                     err.message);
        CT_CHECK_INT(back_len, lens[k]);
        CT_CHECK_MSG(back_len == lens[k] && memcmp(back, inputs[k], lens[k]) == 0,
                     "input %d does not survive encode+decode", k);
        free(back);
        free(ids);
    }
    int32_t bad_id = 512;
    char *back;
    size_t back_len;
    CT_CHECK_INT(tokenizer_decode(tok, &bad_id, 1, &back, &back_len, &err), CT_ERR_INVALID);
    tokenizer_free(tok);
    free(text);
}

CT_TEST(prepare_sentencepiece_shards_decode_back_to_the_text) {
    const char *dir = ct_test_tmpdir();
    char out[512], model[600], p[600];
    snprintf(out, sizeof out, "%s/sp", dir);
    char *argv[] = {"prepare", "--text", GPL3, "--out", out, "--tokenizer", "sentencepiece",
                    "--vocab-size", "400", "--sp-model", "unigram", "--quiet"};
    CT_CHECK_INT(cmd_prepare(12, argv), 0);
    snprintf(model, sizeof model, "%s/tokenizer.model", out);
    ct_error err = new_err();
    host_tokenizer *tok = tokenizer_load(model, &err);
    CT_CHECK_MSG(tok != NULL, "%s", err.message);
    if (!tok) return;
    int64_t n_train, n_val;
    int32_t *train = read_split(out, "train", &n_train);
    int32_t *val = read_split(out, "val", &n_val);
    train = realloc(train, (size_t)(n_train + n_val) * sizeof *train);
    memcpy(train + n_train, val, (size_t)n_val * sizeof *val);
    char *back;
    size_t back_len, len;
    CT_CHECK(tokenizer_decode(tok, train, n_train + n_val, &back, &back_len, &err) == CT_OK);
    char *text = read_whole(GPL3, &len);
    CT_CHECK_MSG(back_len == len && memcmp(back, text, len) == 0,
                 "decoded shards (%zu bytes) differ from the text (%zu bytes)", back_len, len);
    CT_CHECK_INT(n_val, llround(0.05 * (double)(n_train + n_val)));
    snprintf(p, sizeof p, "%s/meta.ini", out);
    size_t mlen;
    char *meta = read_whole(p, &mlen);
    CT_CHECK_STR_CONTAINS(meta, "tokenizer = sentencepiece");
    CT_CHECK_STR_CONTAINS(meta, "vocab_size = 400");
    host_loader *l = loader_open(out, "train", 400, 2, 16, 0, 1, 0, &err);
    CT_CHECK_MSG(l != NULL, "%s", err.message);
    loader_close(l);
    free(meta);
    free(text);
    free(back);
    free(train);
    free(val);
    tokenizer_free(tok);
}

/* ---- data at scale: meta.ini, streaming prepare ------------------------------------------ */

/* Open reads no token: a shard whose tokens are all garbage (60000) but whose meta.ini record
 * (right size, max 200) says they fit opens fine; only reading a window refuses it. */
CT_TEST(loader_open_reads_no_token_when_meta_ini_matches_the_file) {
    const char *dir = ct_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/train_000000.bin", dir);
    write_pattern_shard(path, 4001, 0, 60000, 65536);
    write_shard_meta(dir, "train_000000.bin", 4001, 1024 + 8002, 200, 0);
    ct_error err = new_err();
    host_loader *l = loader_open(dir, "train", 256, 2, 8, 0, 1, 0, &err);
    CT_CHECK_MSG(l != NULL, "open must trust meta.ini and read no token: %s", err.message);
    if (!l) return;
    CT_CHECK_INT(loader_recorded_max_token(l), 200);
    int32_t in[16], tg[16];
    err = new_err();
    CT_CHECK_INT(loader_next(l, in, tg, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, path);
    CT_CHECK_STR_CONTAINS(err.message, "token 60000 at position ");
    loader_close(l);
}

/* The bytes a test corpus is made of: GPL-3 repeated `copies` times into path. */
static size_t write_copies(const char *path, int copies) {
    size_t len;
    char *text = read_whole(GPL3, &len);
    FILE *f = fopen(path, "wb");
    for (int i = 0; f && text && i < copies; i++) fwrite(text, 1, len, f);
    if (f) fclose(f);
    free(text);
    return len * (size_t)copies;
}

/* train + val tokens of a prepared folder, in file order */
static int32_t *read_all(const char *dir, int64_t *n_train, int64_t *n_val) {
    int32_t *train = read_split(dir, "train", n_train);
    int32_t *val = read_split(dir, "val", n_val);
    train = realloc(train, (size_t)(*n_train + *n_val + 1) * sizeof *train);
    if (*n_val) memcpy(train + *n_train, val, (size_t)*n_val * sizeof *val);
    free(val);
    return train;
}

/* The streaming prepare (many small units on 3 threads, --sp-model reusing a model) gives the
 * very tokens of the in-memory path: tokenizer_encode of the whole file, its last val_fraction
 * to val; and the same with one thread. */
CT_TEST(prepare_streaming_on_threads_gives_the_tokens_of_encoding_the_whole_file) {
    const char *dir = ct_test_tmpdir();
    char text[512], model[512], a[512], b[512];
    snprintf(text, sizeof text, "%s/corpus.txt", dir);
    size_t len = write_copies(text, 6); /* 210 kB: 11 units of 20 kB */
    snprintf(model, sizeof model, "%s/sp.model", dir);
    const char *files[] = {GPL3};
    ct_error err = new_err();
    CT_CHECK_MSG(train_model_file(files, 400, model, &err) == CT_OK, "%s",
                 err.message);
    host_tokenizer *tok = tokenizer_load(model, &err);
    CT_CHECK_MSG(tok != NULL, "%s", err.message);
    if (!tok) return;
    char *whole = read_whole(text, &len);
    int32_t *ids;
    int64_t n;
    CT_CHECK(tokenizer_encode(tok, whole, len, &ids, &n, &err) == CT_OK);
    int64_t want_val = llround(0.1 * (double)n);
    const char *texts[] = {text};
    for (int threads = 3; threads >= 1; threads -= 2) {
        char *out = threads == 3 ? a : b;
        snprintf(out, 512, "%s/out%d", dir, threads);
        prepare_options o = prepare_default_options();
        o.texts = texts, o.n_texts = 1, o.out_dir = out, o.tokenizer = "sentencepiece";
        o.sp_model = model, o.threads = threads, o.unit_bytes = 20000, o.val_fraction = 0.1;
        o.shard_tokens = 7000;
        CT_CHECK_MSG(run_prepare(&o, &err) == CT_OK, "%s", err.message);
        int64_t n_train, n_val;
        int32_t *got = read_all(out, &n_train, &n_val);
        CT_CHECK_INT(n_train + n_val, n);
        CT_CHECK_INT(n_val, want_val);
        int64_t diff = -1;
        for (int64_t i = 0; i < n && i < n_train + n_val; i++)
            if (got[i] != ids[i]) {
                diff = i;
                break;
            }
        CT_CHECK_MSG(diff < 0, "%d threads: first token that differs at %lld", threads,
                     (long long)diff);
        free(got);
        /* the model is copied beside the shards, meta.ini names it and its hash */
        char p[600];
        snprintf(p, sizeof p, "%s/meta.ini", out);
        size_t mlen, blen;
        char *meta = read_whole(p, &mlen);
        char *bytes = read_whole(model, &blen);
        uint64_t h = fnv64_update(HOST_FNV64_OFFSET, bytes, blen);
        char want[64];
        snprintf(want, sizeof want, "tokenizer_fnv64 = %016llx\n", (unsigned long long)h);
        CT_CHECK_STR_CONTAINS(meta, "tokenizer_model = tokenizer.model\n");
        CT_CHECK_STR_CONTAINS(meta, want);
        CT_CHECK_STR_CONTAINS(meta, "vocab_size = 400\n");
        free(meta);
        free(bytes);
    }
    free(ids);
    free(whole);
    tokenizer_free(tok);
}

/* A folder (recursively, sorted) holding a plain file and a .gz one: each file's bytes, its
 * own last 10 % to val; meta.ini records each shard's tokens, bytes, max and FNV-1a hash. */
CT_TEST(prepare_reads_folders_and_gz_and_records_each_shard_in_meta_ini) {
    const char *dir = ct_test_tmpdir();
    char in[512], sub[600], plain[700], gz[700], out[512];
    snprintf(in, sizeof in, "%s/in", dir);
    snprintf(sub, sizeof sub, "%s/z", in);
    CT_CHECK_INT(mkdir(in, 0700), 0);
    CT_CHECK_INT(mkdir(sub, 0700), 0);
    snprintf(plain, sizeof plain, "%s/a.txt", in);
    snprintf(gz, sizeof gz, "%s/b.txt.gz", sub);
    size_t len;
    char *text = read_whole(GPL3, &len);
    write_text(plain, "hello, world\n", 13);
    gzFile g = gzopen(gz, "wb");
    CT_CHECK(g != NULL);
    if (!g || !text) return;
    gzwrite(g, text, (unsigned)len);
    gzclose(g);
    char fifo[700];
    snprintf(fifo, sizeof fifo, "%s/pipe", in);
    CT_CHECK_INT(mkfifo(fifo, 0600), 0); /* skipped inside a folder, never opened */
    snprintf(out, sizeof out, "%s/out", dir);
    const char *texts[] = {in};
    prepare_options o = prepare_default_options();
    o.texts = texts, o.n_texts = 1, o.out_dir = out, o.val_fraction = 0.1;
    o.shard_tokens = 10000;
    ct_error err;
    CT_CHECK_MSG(run_prepare(&o, &err) == CT_OK, "%s", err.message);
    int64_t n_train, n_val;
    int32_t *train = read_split(out, "train", &n_train);
    int32_t *val = read_split(out, "val", &n_val);
    int64_t v1 = llround(0.1 * 13), v2 = llround(0.1 * (double)len);
    CT_CHECK_INT(n_val, v1 + v2);
    CT_CHECK_INT(n_train, 13 - v1 + (int64_t)len - v2);
    int bad = 0;
    const char *hello = "hello, world\n";
    for (int64_t i = 0; i < 13 - v1; i++) bad += train[i] != (uint8_t)hello[i];
    for (int64_t i = 0; i < v1; i++) bad += val[i] != (uint8_t)hello[13 - v1 + i];
    for (int64_t i = 0; i < (int64_t)len - v2 && 13 - v1 + i < n_train; i++)
        bad += train[13 - v1 + i] != (uint8_t)text[i];
    for (int64_t i = 0; i < v2 && v1 + i < n_val; i++)
        bad += val[v1 + i] != (uint8_t)text[len - v2 + i];
    CT_CHECK_INT(bad, 0);
    /* every shard's record matches the file */
    host_data_meta m;
    CT_CHECK_INT(data_meta_read(out, &m, &err), CT_OK);
    CT_CHECK_INT(m.found, 1);
    CT_CHECK_INT(m.vocab_size, 256);
    CT_CHECK_INT(m.n_shards, 5); /* 31.6k train tokens in 4 shards, 3.5k val in 1 */
    for (int32_t i = 0; i < m.n_shards; i++) {
        char p[900];
        snprintf(p, sizeof p, "%s/%s", out, m.shards[i].name);
        size_t blen;
        char *bytes = read_whole(p, &blen);
        if (!bytes) continue;
        int32_t mx = -1;
        const uint16_t *t = (const uint16_t *)(bytes + 1024);
        for (size_t k = 0; k < (blen - 1024) / 2; k++) mx = t[k] > mx ? t[k] : mx;
        CT_CHECK_INT(m.shards[i].bytes, blen);
        CT_CHECK_INT(m.shards[i].tokens, (blen - 1024) / 2);
        CT_CHECK_INT(m.shards[i].max_token, mx);
        char want[512], meta_p[600];
        snprintf(want, sizeof want, "[shard %s]\ntokens = %lld\nbytes = %zu\nmax_token = %d\n"
                 "fnv64 = %016llx\n", m.shards[i].name, (long long)m.shards[i].tokens, blen, mx,
                 (unsigned long long)fnv64_update(HOST_FNV64_OFFSET, bytes + 1024, blen - 1024));
        snprintf(meta_p, sizeof meta_p, "%s/meta.ini", out);
        size_t mlen;
        char *meta = read_whole(meta_p, &mlen);
        CT_CHECK_STR_CONTAINS(meta, want);
        free(meta);
        free(bytes);
    }
    data_meta_free(&m);
    free(train);
    free(val);
    free(text);
}

/* JSON Lines: each record's "text" decoded (escapes, \uXXXX, surrogate pairs to UTF-8), other
 * keys skipped whatever they hold, blank lines ignored, token 256 before every document. */
CT_TEST(prepare_jsonl_decodes_escapes_and_unicode_with_an_end_of_text_token) {
    const char *dir = ct_test_tmpdir();
    char path[512], out[512];
    snprintf(path, sizeof path, "%s/docs.jsonl", dir);
    const char jsonl[] =
        "{\"id\": 1, \"meta\": {\"text\": \"no\", \"a\": [1, \"}\"]}, \"text\": \"a\\\"b\\\\c\\n\"}\n"
        "\n"
        "{\"text\": \"caf\\u00e9 \\ud83d\\ude00\\t\\/\", \"x\": null}\r\n"
        "{\"text\":\"\\u0041\\u00DF\\u6771\"}";
    write_text(path, jsonl, sizeof jsonl - 1);
    snprintf(out, sizeof out, "%s/out", dir);
    const char *texts[] = {path};
    prepare_options o = prepare_default_options();
    o.texts = texts, o.n_texts = 1, o.out_dir = out, o.val_fraction = 0, o.jsonl_field = "text";
    ct_error err;
    CT_CHECK_MSG(run_prepare(&o, &err) == CT_OK, "%s", err.message);
    const unsigned char want[] = {0, 'a', '"', 'b', '\\', 'c', '\n',
                                  0, 'c', 'a', 'f', 0xc3, 0xa9, ' ', 0xf0, 0x9f, 0x98, 0x80,
                                  '\t', '/',
                                  0, 'A', 0xc3, 0x9f, 0xe6, 0x9d, 0xb1};
    int64_t n_train, n_val;
    int32_t *got = read_all(out, &n_train, &n_val);
    CT_CHECK_INT(n_train, (int64_t)sizeof want);
    int bad = 0;
    for (size_t i = 0; i < sizeof want && (int64_t)i < n_train; i++) {
        int32_t w = want[i] == 0 && (i == 0 || i == 7 || i == 20) ? 256 : want[i];
        if (got[i] != w) {
            if (!bad) CT_CHECK_MSG(0, "token %zu: expected %d, got %d", i, w, got[i]);
            bad++;
        }
    }
    CT_CHECK_INT(bad, 0);
    free(got);
    host_data_meta m;
    CT_CHECK_INT(data_meta_read(out, &m, &err), CT_OK);
    CT_CHECK_INT(m.vocab_size, 257);
    CT_CHECK_INT(m.max_token, 256);
    data_meta_free(&m);
    /* a record without the key, and one whose surrogate is alone: file:line and the reason */
    const char *bad_lines[][2] = {{"{\"text\": \"ok\"}\n{\"body\": \"x\"}\n", ":2: "
                                   "--jsonl-field 'text': no key"},
                                  {"{\"text\": \"\\ud800x\"}\n", ":1: --jsonl-field 'text': "
                                   "lone surrogate"},
                                  {"[1, 2]\n", ":1: --jsonl-field 'text': not a JSON object"}};
    o.force = 1; /* the same --out again */
    for (int k = 0; k < 3; k++) {
        write_text(path, bad_lines[k][0], strlen(bad_lines[k][0]));
        CT_CHECK_INT(run_prepare(&o, &err), CT_ERR_INVALID);
        char want_msg[700];
        snprintf(want_msg, sizeof want_msg, "%s%s", path, bad_lines[k][1]);
        CT_CHECK_STR_CONTAINS(err.message, want_msg);
    }
}

/* sentencepiece trains on blocks taken evenly across the input, not its start: 1 MB of the
 * licence, 1 MB of it in rot13, 1 MB of it again, sampled 1 MB (one block of about 1 MB in
 * three: the middle one); the model then encodes rot13 text in fewer tokens than plain text (a
 * start-only sample: the reverse). */
CT_TEST(prepare_samples_sentencepiece_text_evenly_across_the_input) {
    const char *dir = ct_test_tmpdir();
    char path[512], out[512], model[600];
    snprintf(path, sizeof path, "%s/c.txt", dir);
    size_t len;
    char *text = read_whole(GPL3, &len);
    if (!text) return;
    char *rot = malloc(len);
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        rot[i] = ch >= 'a' && ch <= 'z' ? (char)('a' + (ch - 'a' + 13) % 26)
               : ch >= 'A' && ch <= 'Z' ? (char)('A' + (ch - 'A' + 13) % 26) : ch;
    }
    FILE *f = fopen(path, "wb");
    size_t n = 0;
    while (n < 1000000) n += fwrite(text, 1, len, f);
    while (n < 2000000) n += fwrite(rot, 1, len, f);
    while (n < 3000000) n += fwrite(text, 1, len, f);
    fclose(f);
    snprintf(out, sizeof out, "%s/out", dir);
    const char *texts[] = {path};
    prepare_options o = prepare_default_options();
    o.texts = texts, o.n_texts = 1, o.out_dir = out, o.tokenizer = "sentencepiece";
    o.vocab_size = 600, o.sp_sample_bytes = 1000000, o.val_fraction = 0;
    ct_error err;
    CT_CHECK_MSG(run_prepare(&o, &err) == CT_OK, "%s", err.message);
    snprintf(model, sizeof model, "%s/tokenizer.model", out);
    host_tokenizer *tok = tokenizer_load(model, &err);
    CT_CHECK_MSG(tok != NULL, "%s", err.message);
    if (tok) {
        int32_t *ids;
        int64_t n_plain = 0, n_rot = 0;
        CT_CHECK(tokenizer_encode(tok, text, len, &ids, &n_plain, &err) == CT_OK);
        free(ids);
        CT_CHECK(tokenizer_encode(tok, rot, len, &ids, &n_rot, &err) == CT_OK);
        free(ids);
        CT_CHECK_MSG(n_rot < n_plain, "the model trained on the sample encodes rot13 text in %lld "
                     "tokens, plain text in %lld: expected the rot13 (middle third) to be sampled",
                     (long long)n_rot, (long long)n_plain);
        tokenizer_free(tok);
    }
    free(rot);
    free(text);
}

/* JSON Lines through sentencepiece: the model's </s> (id 2) before every document, and each
 * document's tokens those the model gives for its decoded text alone. */
CT_TEST(prepare_jsonl_with_sentencepiece_puts_eos_before_each_document) {
    const char *dir = ct_test_tmpdir();
    char model[512], path[512], out[512];
    snprintf(model, sizeof model, "%s/sp.model", dir);
    const char *files[] = {GPL3};
    ct_error err = new_err();
    CT_CHECK_MSG(train_model_file(files, 400, model, &err) == CT_OK, "%s",
                 err.message);
    snprintf(path, sizeof path, "%s/d.jsonl", dir);
    const char jsonl[] = "{\"text\": \"the General Public License\\n\"}\n"
                         "{\"n\": 2, \"text\": \"free software \\u00e9\"}\n";
    write_text(path, jsonl, sizeof jsonl - 1);
    snprintf(out, sizeof out, "%s/out", dir);
    const char *texts[] = {path};
    prepare_options o = prepare_default_options();
    o.texts = texts, o.n_texts = 1, o.out_dir = out, o.val_fraction = 0;
    o.tokenizer = "sentencepiece", o.sp_model = model, o.jsonl_field = "text";
    CT_CHECK_MSG(run_prepare(&o, &err) == CT_OK, "%s", err.message);
    host_tokenizer *tok = tokenizer_load(model, &err);
    if (!tok) return;
    CT_CHECK_INT(tokenizer_eos_id(tok), 2);
    const char *docs[] = {"the General Public License\n", "free software \xc3\xa9"};
    int32_t want[256];
    int64_t n_want = 0;
    for (int d = 0; d < 2; d++) {
        int32_t *ids;
        int64_t n;
        CT_CHECK(tokenizer_encode(tok, docs[d], strlen(docs[d]), &ids, &n, &err) == CT_OK);
        want[n_want++] = 2;
        for (int64_t i = 0; i < n && n_want < 256; i++) want[n_want++] = ids[i];
        free(ids);
    }
    int64_t n_train, n_val;
    int32_t *got = read_all(out, &n_train, &n_val);
    CT_CHECK_INT(n_train, n_want);
    CT_CHECK_MSG(n_train == n_want && memcmp(got, want, (size_t)n_want * sizeof *got) == 0,
                 "the tokens differ from </s> + each document's own encoding");
    char p[600];
    snprintf(p, sizeof p, "%s/meta.ini", out);
    size_t mlen;
    char *meta = read_whole(p, &mlen);
    CT_CHECK_STR_CONTAINS(meta, "eot_token = 2\n");
    free(meta);
    free(got);
    tokenizer_free(tok);
}
