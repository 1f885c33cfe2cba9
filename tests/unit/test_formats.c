/* test_formats.c — the small formats of issue 26 against values computed independently: the
 * JSON reader (escapes, surrogate pairs, numbers, errors with line and column, the depth
 * bound), U+FFFD substitution (Python's errors="replace" outputs, written out here), CRC32C
 * (the standard check value) and TFRecord's mask, safetensors' BF16/F16 reading (every f16
 * class: normal, subnormal, zero, infinity) and BF16 writing (round to nearest even).
 */
#include "ct_test.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "io/tensorboard.h"
#include "base/utf8.h"

#include <stdlib.h>
#include <string.h>

static ct_error new_err(void) {
    ct_error e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    return e;
}

CT_TEST(json_reads_escapes_surrogates_numbers_and_nesting) {
    static const char text[] = "{\"a\": \"x\\u00e9\\ud83d\\ude00\\n\\\"\", \"n\": -1.5e3, "
                               "\"i\": 42, \"l\": [true, false, null, {\"k\": []}], \"a\": 7}";
    ct_error err = new_err();
    json_doc *d = NULL;
    CT_CHECK_MSG(json_parse(text, sizeof text - 1, "t.json", "fix it", &d, &err) == CT_OK, "%s",
                 err.message);
    if (!d) return;
    const json_value *r = json_root(d);
    CT_CHECK_INT(r->n, 5);
    CT_CHECK(!strcmp(r->keys[0], "a") && r->items[0].len == 9 &&
             !memcmp(r->items[0].str, "x\xc3\xa9\xf0\x9f\x98\x80\n\"", 9));
    CT_CHECK(json_get(r, "a")->type == JSON_NUMBER && json_get(r, "a")->number == 7); /* last wins */
    CT_CHECK(json_get(r, "n")->number == -1500 && !json_get(r, "n")->integral);
    CT_CHECK(json_get(r, "i")->integral && json_get(r, "i")->number == 42);
    const json_value *l = json_get(r, "l");
    CT_CHECK(l->type == JSON_ARRAY && l->n == 4 && l->items[0].type == JSON_TRUE &&
             l->items[2].type == JSON_NULL && json_get(&l->items[3], "k")->n == 0);
    json_free(d);
}

CT_TEST(json_errors_name_the_line_and_column) {
    static const struct { const char *text, *want; } bad[] = {
        {"{\"a\": 1,\n  \"b\" 2}", "t.json:2:7: JSON: expected ':'"},
        {"[1, 2", "t.json:1:6: JSON: expected ',' or ']'"},
        {"\"\\ud800x\"", "without its low half"},
        {"\"\\udc00\"", "lone low surrogate"},
        {"{} x", "bytes after the document's value"},
        {"01", "leading zero"},
        {"\"a\tb\"", "control character"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ct_error err = new_err();
        json_doc *d = NULL;
        CT_CHECK(json_parse(bad[i].text, strlen(bad[i].text), "t.json", "fix it", &d, &err) ==
                 CT_ERR_INVALID && !d);
        CT_CHECK_STR_CONTAINS(err.message, bad[i].want);
        CT_CHECK_STR_CONTAINS(err.message, "---> fix it");
    }
    char deep[400];
    memset(deep, '[', 200);
    memset(deep + 200, ']', 200);
    ct_error err = new_err();
    json_doc *d = NULL;
    CT_CHECK(json_parse(deep, sizeof deep, "t.json", "fix it", &d, &err) == CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "nested deeper than 128 levels");
}

CT_TEST(utf8_replacement_is_one_u_fffd_per_maximal_subpart_as_python) {
    /* bytes.decode("utf-8", errors="replace") of each input, written out by hand */
    static const struct { const char *in, *want; } cases[] = {
        {"abc", ""}, /* well-formed: nothing to replace */
        {"a\x80" "b", "a\xef\xbf\xbd" "b"},
        {"\xe2\x82" "x", "\xef\xbf\xbd" "x"},                      /* truncated 3-byte: one */
        {"\xf0\x9f\x98", "\xef\xbf\xbd"},                          /* truncated at the end */
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},                  /* overlong: two */
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  /* surrogate: three */
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
        {"\xff\xc3\xa9", "\xef\xbf\xbd\xc3\xa9"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n = strlen(cases[i].in), m = utf8_sanitized_len(cases[i].in, n);
        CT_CHECK_INT(m, strlen(cases[i].want));
        char out[64] = "";
        if (m) utf8_sanitize(cases[i].in, n, out);
        CT_CHECK_MSG(!memcmp(out, cases[i].want, m), "case %zu", i);
    }
}

CT_TEST(tensorboard_crc32c_is_the_standard_check_value_and_masked_as_tfrecord) {
    CT_CHECK_INT(tb_crc32c("123456789", 9), 0xE3069283u);
    CT_CHECK_INT(tb_crc32c("", 0), 0);
    uint32_t c = 0xE3069283u;
    CT_CHECK_INT(tb_masked_crc(c), (uint32_t)(((c >> 15) | (c << 17)) + 0xA282EAD8u));
}

/* A safetensors file of one tensor of n 2-byte values of `dtype`. */
static void write_st(const char *path, const char *dtype, const uint16_t *v, int n) {
    char h[256];
    int k = snprintf(h, sizeof h, "{\"t\":{\"dtype\":\"%s\",\"shape\":[%d],\"data_offsets\":[0,%d]}}",
                     dtype, n, 2 * n);
    while (k % 8) h[k++] = ' ';
    uint64_t len = (uint64_t)k;
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(&len, 8, 1, f);
    fwrite(h, 1, (size_t)k, f);
    fwrite(v, 2, (size_t)n, f);
    fclose(f);
}

CT_TEST(safetensors_reads_bf16_and_f16_exactly_and_writes_bf16_rounded_to_even) {
    const char *dir = ct_test_tmpdir();
    char p[600];
    /* f16: 1, -2, 0.5, 65504 (max), 2^-24 (smallest subnormal), 3 * 2^-24, -0, +inf */
    static const uint16_t h[] = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x0003, 0x8000, 0x7C00};
    static const float hv[] = {1, -2, 0.5f, 65504, 0x1p-24f, 0x3p-24f, -0.0f, INFINITY};
    static const uint16_t b[] = {0x3F80, 0xC040, 0x3E20}; /* bf16: 1, -3, 0.15625 */
    static const float bv[] = {1, -3, 0.15625f};
    ct_error err = new_err();
    float out[8];
    snprintf(p, sizeof p, "%s/h.safetensors", dir);
    write_st(p, "F16", h, 8);
    st_file f;
    CT_CHECK_MSG(st_open(p, &f, &err) == CT_OK, "%s", err.message);
    CT_CHECK(st_read_f32(&f, &f.t[0], out, &err) == CT_OK);
    for (int i = 0; i < 8; i++)
        CT_CHECK_MSG(out[i] == hv[i] && signbit(out[i]) == signbit(hv[i]), "f16 %d: %g", i, out[i]);
    st_close(&f);
    snprintf(p, sizeof p, "%s/b.safetensors", dir);
    write_st(p, "BF16", b, 3);
    CT_CHECK(st_open(p, &f, &err) == CT_OK);
    CT_CHECK(st_read_f32(&f, &f.t[0], out, &err) == CT_OK);
    for (int i = 0; i < 3; i++) CT_CHECK_MSG(out[i] == bv[i], "bf16 %d: %g", i, out[i]);
    st_close(&f);
}

static int32_t fill_values(void *ctx, int32_t i, float *buf, ct_error *err) {
    (void)err, (void)i;
    memcpy(buf, ctx, 4 * sizeof *buf);
    return CT_OK;
}

CT_TEST(safetensors_bf16_writing_rounds_to_nearest_even) {
    const char *dir = ct_test_tmpdir();
    char p[600];
    snprintf(p, sizeof p, "%s/w.safetensors", dir);
    /* 1 + 2^-8 is half-way between bf16 1 and 1 + 2^-7: to even (1); 1 + 3 * 2^-8: up to
     * 1 + 2^-6; 1 + 2^-8 + 2^-20: above half-way, up */
    float in[4] = {1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -2.5f};
    float want[4] = {1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -2.5f};
    st_out t = {.name = "t", .ndim = 1, .shape = {4, 0}};
    ct_error err = new_err();
    CT_CHECK_MSG(st_write(p, &t, 1, NULL, 0, "BF16", fill_values, in, &err) == CT_OK, "%s",
                 err.message);
    st_file f;
    float out[4];
    CT_CHECK(st_open(p, &f, &err) == CT_OK);
    CT_CHECK(!strcmp(f.t[0].dtype, "BF16") && f.t[0].end - f.t[0].begin == 8);
    CT_CHECK(st_read_f32(&f, &f.t[0], out, &err) == CT_OK);
    for (int i = 0; i < 4; i++) CT_CHECK_MSG(out[i] == want[i], "%d: %.9g, want %.9g", i, out[i], want[i]);
    st_close(&f);
}
