/* bpe_write.h — a byte-level BPE model written as Hugging Face reads it, so
 * `AutoTokenizer.from_pretrained(DIR)` gives ctrain's ids: tokenizer.json (model BPE,
 * ByteLevel pre-tokenizer and decoder, <|endoftext|> an added special token), vocab.json and
 * merges.txt (GPT2Tokenizer's files), tokenizer_config.json and special_tokens_map.json.
 * Not for: reading tokenizers or encoding (bpe.h).
 */
#ifndef CTRAIN_HOST_BPE_WRITE_H
#define CTRAIN_HOST_BPE_WRITE_H

#include "data/bpe.h"

#include <ctrain/ctrain.h>

/* tokenizer.json alone, at `path` (atomically, outfile.h). A ranks file's merges are
 * recovered (bpe_merges) and "ignore_merges" is set, which is tiktoken's rule. */
int32_t bpe_write_tokenizer_json(bpe_model *m, const char *path, ct_error *err);

/* Every file above into the existing folder dir; model_max_length is the model's context. */
int32_t bpe_write_hf(bpe_model *m, const char *dir, int64_t model_max_length, ct_error *err);

#endif /* CTRAIN_HOST_BPE_WRITE_H */
