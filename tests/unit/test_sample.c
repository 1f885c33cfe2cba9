/* test_sample.c — claims about choosing the next token (host/run/sample.c): greedy is the argmax
 * (lowest id among equals) and top-k 1 is greedy; counts over many draws follow the
 * temperature-scaled softmax (chi-square); a higher temperature raises the entropy of the
 * counts; top-k keeps exactly the k largest; top-p keeps exactly the smallest most-likely set
 * whose probability is >= p, computed here from the logits; the option checks; and the JSON
 * escaping of sample texts (quotes, control bytes, invalid UTF-8).
 */
#include "ct_test.h"
#include "io/json.h"
#include "run/sample.h"

#include <ctrain/numerics.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SV = 8, DRAWS = 20000 };
static const float LOGITS[SV] = {1.0f, 2.5f, 0.2f, 2.0f, -1.0f, 0.7f, 1.6f, -0.3f};

/* counts[j] over DRAWS draws with opts o. */
static void draw_counts(const sample_opts *o, int64_t counts[SV]) {
    memset(counts, 0, SV * sizeof *counts);
    ct_error err = {sizeof err, 0, {0}};
    for (int i = 0; i < DRAWS; i++) {
        int32_t t = -1;
        double u = (double)(ct_hash64(o->seed, (uint64_t)i) >> 11) * (1.0 / 9007199254740992.0);
        CT_CHECK_INT(sample_pick(LOGITS, SV, o, u, &t, &err), CT_OK);
        if (t >= 0 && t < SV) counts[t]++;
    }
}

/* softmax(LOGITS / temp) into p. */
static void softmax(double temp, double p[SV]) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < SV; j++) mx = fmax(mx, LOGITS[j] / temp);
    for (int j = 0; j < SV; j++) s += p[j] = exp(LOGITS[j] / temp - mx);
    for (int j = 0; j < SV; j++) p[j] /= s;
}

static double entropy_of(const int64_t c[SV]) {
    double h = 0;
    for (int j = 0; j < SV; j++)
        if (c[j]) h -= (double)c[j] / DRAWS * log((double)c[j] / DRAWS);
    return h;
}

CT_TEST(greedy_is_the_argmax_and_top_k_1_is_greedy) {
    ct_error err = {sizeof err, 0, {0}};
    sample_opts g = {.greedy = 1, .top_p = 1};
    int32_t t = -1;
    CT_CHECK_INT(sample_pick(LOGITS, SV, &g, 0.99, &t, &err), CT_OK);
    CT_CHECK_INT(t, 1);
    float tie[4] = {0.5f, 3.0f, 3.0f, 1.0f};
    CT_CHECK_INT(sample_pick(tie, 4, &g, 0.5, &t, &err), CT_OK);
    CT_CHECK_INT(t, 1); /* the lower id among equals */
    sample_opts k1 = {.temperature = 5.0, .top_k = 1, .top_p = 1, .seed = 3};
    int64_t c[SV];
    draw_counts(&k1, c);
    CT_CHECK_MSG(c[1] == DRAWS, "top-k 1: expected all %d draws on token 1, got %lld", DRAWS,
                 (long long)c[1]);
}

CT_TEST(draws_follow_the_tempered_softmax_and_higher_temperature_raises_entropy) {
    double temps[3] = {0.5, 1.0, 2.0}, prev_h = -1;
    for (int k = 0; k < 3; k++) {
        sample_opts o = {.temperature = temps[k], .top_p = 1, .seed = 11 + (uint64_t)k};
        int64_t c[SV];
        double p[SV], chi2 = 0;
        draw_counts(&o, c);
        softmax(temps[k], p);
        for (int j = 0; j < SV; j++) chi2 += pow((double)c[j] - DRAWS * p[j], 2) / (DRAWS * p[j]);
        /* 7 degrees of freedom: P(chi2 > 24.3) = 0.001 */
        CT_CHECK_MSG(chi2 < 24.3, "temperature %g: counts against softmax: chi2 = %.2f, expected "
                     "< 24.3", temps[k], chi2);
        double h = entropy_of(c);
        CT_CHECK_MSG(h > prev_h, "temperature %g: entropy of the counts %.4f, expected above "
                     "%.4f (the lower temperature's)", temps[k], h, prev_h);
        prev_h = h;
    }
}

CT_TEST(top_k_keeps_exactly_the_k_most_likely) {
    sample_opts o = {.temperature = 3.0, .top_k = 3, .top_p = 1, .seed = 5};
    int64_t c[SV];
    draw_counts(&o, c);
    /* the three largest logits: ids 1 (2.5), 3 (2.0), 6 (1.6) */
    for (int j = 0; j < SV; j++) {
        int kept = j == 1 || j == 3 || j == 6;
        CT_CHECK_MSG(kept ? c[j] > 0 : c[j] == 0, "top-k 3: token %d drawn %lld times, expected "
                     "%s", j, (long long)c[j], kept ? "> 0" : "0");
    }
}

CT_TEST(top_p_keeps_the_smallest_set_reaching_p) {
    double ps[3] = {0.3, 0.6, 0.9};
    for (int k = 0; k < 3; k++) {
        double p[SV];
        softmax(1.0, p);
        /* the expected support, from the logits: most likely first until the sum reaches p */
        int order[SV], keep[SV] = {0};
        for (int j = 0; j < SV; j++) order[j] = j;
        for (int i = 0; i < SV; i++)
            for (int j = i + 1; j < SV; j++)
                if (p[order[j]] > p[order[i]]) {
                    int t = order[i];
                    order[i] = order[j];
                    order[j] = t;
                }
        double acc = 0;
        int size = 0;
        for (int i = 0; i < SV && acc < ps[k]; i++) acc += p[order[i]], keep[order[i]] = 1, size++;
        sample_opts o = {.temperature = 1.0, .top_p = ps[k], .seed = 21 + (uint64_t)k};
        int64_t c[SV];
        draw_counts(&o, c);
        int support = 0;
        for (int j = 0; j < SV; j++) {
            support += c[j] > 0;
            CT_CHECK_MSG(keep[j] ? c[j] > 0 : c[j] == 0, "top-p %g: token %d drawn %lld times, "
                         "expected %s (support of %d tokens)", ps[k], j, (long long)c[j],
                         keep[j] ? "> 0" : "0", size);
        }
        CT_CHECK_INT(support, size);
    }
}

CT_TEST(sample_options_are_checked) {
    ct_error err = {sizeof err, 0, {0}};
    sample_opts o = {.temperature = 0, .top_p = 1, .n_tokens = 1};
    CT_CHECK_INT(sample_check_opts(&o, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "--temperature 0 must be > 0 ---> use --greedy");
    o.greedy = 1;
    CT_CHECK_INT(sample_check_opts(&o, &err), CT_OK);
    o.top_p = 0;
    CT_CHECK_INT(sample_check_opts(&o, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "--top-p 0 is outside (0, 1]");
    o.top_p = 1.5;
    CT_CHECK_INT(sample_check_opts(&o, &err), CT_ERR_INVALID);
}

CT_TEST(sample_text_is_escaped_as_valid_json) {
    /* quote, backslash, newline, a control byte, DEL, valid 2- and 4-byte UTF-8, an invalid
     * lone continuation byte, a truncated 3-byte sequence, an overlong '/' and a surrogate */
    static const char in[] = "a\"b\\c\nd\x01" "e\x7f" "\xc3\xa9" "\xf0\x9f\x98\x80" "\x80"
                             "\xe2\x82" "z" "\xc0\xaf" "\xed\xa0\x80";
    static const char want[] = "a\\\"b\\\\c\\nd\\u0001e\\u007f\xc3\xa9\xf0\x9f\x98\x80\\ufffd"
                               "\\ufffd\\ufffdz\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd";
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    CT_CHECK(m != NULL);
    if (!m) return;
    CT_CHECK_INT(json_put_string(m, in, sizeof in - 1), 0);
    fclose(m);
    CT_CHECK_MSG(strcmp(buf, want) == 0, "expected '%s', got '%s'", want, buf);
    free(buf);
}
