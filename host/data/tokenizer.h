/* tokenizer.h — a C interface to Debian's libsentencepiece: train a sub-word model on text files,
 * load it, encode text to token ids and decode ids back to text.
 * Not for: byte-level tokens (prepare.c does those itself) or anything the training loop needs.
 *
 * The models it trains decode back to exactly the bytes they encoded: no text normalization, no
 * dummy space prefix, whitespace kept, and byte fallback (an unknown character becomes its UTF-8
 * bytes as tokens <0x00>..<0xFF>), so any input round-trips. Ids 0, 1, 2 are <unk>, <s>, </s>.
 */
#ifndef CTRAIN_HOST_TOKENIZER_H
#define CTRAIN_HOST_TOKENIZER_H

#include <ctrain/ctrain.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct host_tokenizer host_tokenizer;

/* tokenizer_encode cuts long text just after the last newline of each window of this many
 * bytes and encodes the pieces one by one; prepare cuts its streamed input the same way, so
 * streaming gives the very tokens of encoding a whole file at once. */
#define TOKENIZER_CHUNK_BYTES (1 << 16)

/* A model file larger than this is refused (GiB-sized sentencepiece models do not exist). */
#define TOKENIZER_MODEL_MAX (1ull << 30)

/* Train a sentencepiece model of vocab_size pieces (model_type "bpe" or "unigram") on the lines
 * of the given text files (ctrain's own sample file: sentencepiece opens it). The serialized
 * model into *model (malloc'ed, the caller frees it; the caller writes it through outfile.h),
 * *model_len bytes. threads >= 1. Long training corpora are sampled (at most max_sentences
 * lines; 0 = all). CT_ERR_INVALID with sentencepiece's reason (e.g. a vocabulary too small for
 * the characters of the text, or too large for the text). */
int32_t tokenizer_train(const char *const *files, int32_t n_files, const char *model_type,
                        int32_t vocab_size, int32_t threads, int64_t max_sentences,
                        char **model, size_t *model_len, ct_error *err);

/* A model from its serialized bytes; `name` (a path) names it in messages. NULL and err filled
 * on failure. */
host_tokenizer *tokenizer_from_bytes(const void *model, size_t len, const char *name,
                                     ct_error *err);
/* Load a model file through the one reader (files.h: a regular file of at most
 * TOKENIZER_MODEL_MAX bytes). NULL and err filled on failure. */
host_tokenizer *tokenizer_load(const char *model_path, ct_error *err);
void tokenizer_free(host_tokenizer *tok);

/* Number of pieces (the vocabulary size V: ids are 0..V-1). */
int32_t tokenizer_vocab_size(const host_tokenizer *tok);

/* The end-of-sentence id (</s>, 2 in the models tokenizer_train makes), or -1 when the model
 * has none. prepare puts it before every JSON Lines document. */
int32_t tokenizer_eos_id(const host_tokenizer *tok);
/* The beginning-of-sentence id (<s>, 1 in the models tokenizer_train makes), or -1. */
int32_t tokenizer_bos_id(const host_tokenizer *tok);

/* Encode len bytes of text. *ids is malloc'ed (the caller frees it), *n its length. */
int32_t tokenizer_encode(const host_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                         int64_t *n, ct_error *err);

/* Decode n ids. *text is malloc'ed and NUL-terminated (the caller frees it), *len its length. */
int32_t tokenizer_decode(const host_tokenizer *tok, const int32_t *ids, int64_t n, char **text,
                         size_t *len, ct_error *err);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_HOST_TOKENIZER_H */
