/* utf8.c — UTF-8 well-formedness, encoding and U+FFFD substitution (see utf8.h). */
#include "base/utf8.h"

#include <string.h>

size_t utf8_char_len(const unsigned char *s, size_t n, size_t *bad) {
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* the second byte's range (Unicode table 3-7) */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else {
        if (bad) *bad = 1;
        return 0;
    }
    for (size_t i = 1; i < len; i++) {
        unsigned b = i < n ? s[i] : 0;
        unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (i >= n || b < l || b > h) {
            if (bad) *bad = i;
            return 0;
        }
    }
    return len;
}

size_t utf8_put(unsigned cp, char *b) {
    if (cp < 0x80) {
        b[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (char)(0xC0 | cp >> 6);
        b[1] = (char)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (char)(0xE0 | cp >> 12);
        b[1] = (char)(0x80 | ((cp >> 6) & 63));
        b[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    b[0] = (char)(0xF0 | cp >> 18);
    b[1] = (char)(0x80 | ((cp >> 12) & 63));
    b[2] = (char)(0x80 | ((cp >> 6) & 63));
    b[3] = (char)(0x80 | (cp & 63));
    return 4;
}

size_t utf8_sanitized_len(const char *text, size_t len) {
    const unsigned char *s = (const unsigned char *)text;
    size_t out = 0, i = 0;
    int replaced = 0;
    while (i < len) {
        if (s[i] < 0x80) { /* the common case */
            out++, i++;
            continue;
        }
        size_t bad = 0, k = utf8_char_len(s + i, len - i, &bad);
        if (k) out += k, i += k;
        else out += 3, i += bad, replaced = 1;
    }
    return replaced ? out : 0;
}

void utf8_sanitize(const char *text, size_t len, char *out) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, o = 0;
    while (i < len) {
        size_t bad = 0, k = s[i] < 0x80 ? 1 : utf8_char_len(s + i, len - i, &bad);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k, i += k;
        } else {
            memcpy(out + o, UTF8_REPLACEMENT, 3);
            o += 3, i += bad;
        }
    }
}
