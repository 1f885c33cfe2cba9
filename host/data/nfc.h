/* nfc.h — Unicode normalization form C of UTF-8 text (ICU's unorm2), for tokenizers whose
 * tokenizer.json names the NFC normalizer (Qwen2's). Not for: any other normalization, or
 * text that is not well-formed UTF-8 (bpe.c sanitizes it first).
 */
#ifndef CTRAIN_HOST_NFC_H
#define CTRAIN_HOST_NFC_H

#include <ctrain/ctrain.h>

#include <stddef.h>

/* NFC of len bytes of well-formed UTF-8. *out NULL when the text is already NFC (use it as it
 * is); else malloc'ed (the caller frees it), *out_len bytes. CT_ERR_NOMEM, or CT_ERR_INTERNAL
 * with ICU's error name. */
int32_t nfc_normalize(const char *text, size_t len, char **out, size_t *out_len, ct_error *err);

#endif /* CTRAIN_HOST_NFC_H */
