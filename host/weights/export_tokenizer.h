/* export_tokenizer.h — the tokenizer that goes beside an export's weights, so
 * `AutoTokenizer.from_pretrained(DIR)` gives the run's ids: a BPE run's tokenizer.json,
 * vocab.json, merges.txt; a sentencepiece run's tokenizer.model; a bytes run's tokenizer.json
 * of 256 byte tokens (token b is byte b; with JSON Lines data also <|endoftext|> = 256); and
 * tokenizer_config.json, special_tokens_map.json. Also the special ids config.json names.
 * Not for: the weights or config.json itself (export.c), tokenizers themselves (bpe.h).
 */
#ifndef CTRAIN_HOST_EXPORT_TOKENIZER_H
#define CTRAIN_HOST_EXPORT_TOKENIZER_H

#include "config/config.h"

#include <ctrain/ctrain.h>

typedef struct export_tok {
    char    kind[32];  /* "bpe", "sentencepiece", "bytes", or "unknown" (nothing written) */
    int32_t bos, eos;  /* ids in the model's vocabulary, -1 for none (config.json's null) */
} export_tok;

/* The run's tokenizer: the run folder's (OUT/tokenizer.ini, for a checkpoint folder
 * ckpt_dir = OUT/checkpoints/step_N), else the meta.ini beside the configuration's [data]
 * train; its files written into out_dir (an existing folder) for a model of V tokens and
 * context T. A run without a recorded tokenizer gets none ("unknown", a note on stderr).
 * CT_ERR_INVALID when the tokenizer has more tokens than the model. */
int32_t export_tokenizer(const char *ckpt_dir, const host_config *cfg, int64_t V, int64_t T,
                         const char *out_dir, export_tok *t, ct_error *err);

#endif /* CTRAIN_HOST_EXPORT_TOKENIZER_H */
