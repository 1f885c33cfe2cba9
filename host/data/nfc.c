/* nfc.c — NFC through ICU (see nfc.h): ASCII passes untouched; other text goes to UTF-16,
 * is checked (unorm2_isNormalized) and normalized only when it is not NFC, and comes back as
 * UTF-8. Not for: the tokenizer itself (bpe.c).
 */
#include "data/nfc.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

static int32_t icu_error(ct_error *err, UErrorCode e) {
    return ct_error_set(err, e == U_MEMORY_ALLOCATION_ERROR ? CT_ERR_NOMEM : CT_ERR_INTERNAL,
                        "NFC normalization failed: ICU %s", u_errorName(e));
}

int32_t nfc_normalize(const char *text, size_t len, char **out, size_t *out_len, ct_error *err) {
    *out = NULL;
    *out_len = 0;
    size_t i = 0;
    while (i < len && (unsigned char)text[i] < 0x80) i++;
    if (i == len) return CT_OK; /* ASCII is NFC */
    if (len > (size_t)INT32_MAX / 4)
        return ct_error_set(err, CT_ERR_INVALID, "NFC normalization: %zu bytes of text at once "
                            "are more than ICU takes ---> encode the text in parts", len);
    UErrorCode e = U_ZERO_ERROR;
    const UNormalizer2 *nfc = unorm2_getNFCInstance(&e);
    if (U_FAILURE(e)) return icu_error(err, e);
    int32_t n16 = 0;
    u_strFromUTF8(NULL, 0, &n16, text, (int32_t)len, &e);
    if (e != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(e)) return icu_error(err, e);
    e = U_ZERO_ERROR;
    UChar *u = malloc(((size_t)n16 + 1) * sizeof *u);
    UChar *v = NULL;
    int32_t rc = CT_OK;
    if (!u) return ct_error_set(err, CT_ERR_NOMEM, "out of memory normalizing text");
    u_strFromUTF8(u, n16 + 1, NULL, text, (int32_t)len, &e);
    if (U_FAILURE(e)) {
        rc = icu_error(err, e);
        goto out_free;
    }
    UBool done = unorm2_isNormalized(nfc, u, n16, &e);
    if (U_FAILURE(e) || done) {
        if (U_FAILURE(e)) rc = icu_error(err, e);
        goto out_free;
    }
    /* NFC of UTF-16 text is at most 3 times as long (Unicode's stated bound) */
    int32_t cap = n16 * 3 + 16;
    v = malloc((size_t)cap * sizeof *v);
    if (!v) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory normalizing text");
        goto out_free;
    }
    int32_t nv = unorm2_normalize(nfc, u, n16, v, cap, &e);
    int32_t n8 = 0;
    if (U_SUCCESS(e)) u_strToUTF8(NULL, 0, &n8, v, nv, &e);
    if (e == U_BUFFER_OVERFLOW_ERROR || e == U_STRING_NOT_TERMINATED_WARNING) e = U_ZERO_ERROR;
    if (U_FAILURE(e)) {
        rc = icu_error(err, e);
        goto out_free;
    }
    *out = malloc((size_t)n8 + 1);
    if (!*out) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory normalizing text");
        goto out_free;
    }
    u_strToUTF8(*out, n8 + 1, NULL, v, nv, &e);
    if (U_FAILURE(e)) {
        free(*out);
        *out = NULL;
        rc = icu_error(err, e);
        goto out_free;
    }
    *out_len = (size_t)n8;
out_free:
    free(u);
    free(v);
    return rc;
}
