/* utf8.h — UTF-8 well-formedness as Unicode defines it (no overlong forms, no surrogates,
 * nothing above U+10FFFF), a code point's encoding, and the replacement of ill-formed bytes by
 * U+FFFD one per maximal subpart (Unicode's recommended practice; Python's
 * bytes.decode("utf-8", errors="replace") does the same).
 * Not for: anything that knows what the text means (tokenizers, JSON).
 */
#ifndef CTRAIN_HOST_UTF8_H
#define CTRAIN_HOST_UTF8_H

#include <stddef.h>

#define UTF8_REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */

/* The bytes of the well-formed character at s (n > 0 bytes left): 1..4; or 0 when ill-formed,
 * with *bad (when not NULL) set to the length of the maximal subpart there (1..3: the lead
 * byte and the continuation bytes that could still have begun a character), which is what
 * one U+FFFD replaces. */
size_t utf8_char_len(const unsigned char *s, size_t n, size_t *bad);

/* Write code point cp (at most U+10FFFF) to b (4 bytes of room); the bytes written. */
size_t utf8_put(unsigned cp, char *b);

/* Bytes of text after utf8_sanitize: len plus 2 for each replaced maximal subpart of one byte,
 * at most 3 * len. 0 when the text is well-formed (nothing to replace). */
size_t utf8_sanitized_len(const char *text, size_t len);
/* text with every maximal ill-formed subpart replaced by U+FFFD into out
 * (utf8_sanitized_len bytes). */
void utf8_sanitize(const char *text, size_t len, char *out);

#endif /* CTRAIN_HOST_UTF8_H */
